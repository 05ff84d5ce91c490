//! What a finished PSI run tells the client, for every protocol.

/// One of the client's items found in the server's set.
#[derive(Clone, PartialEq, Eq)]
pub struct Match {
    /// Index of the item in the list the client started with (first occurrence).
    pub index: usize,
    /// The item.
    pub item: Vec<u8>,
}

impl std::fmt::Debug for Match {
    // Contact data stays out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Match")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

/// What a finished run tells the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchOutput {
    /// Matches, in the order of the client's original list.
    pub matches: Vec<Match>,
    /// Distinct client items queried.
    pub client_items: usize,
    /// Client entries dropped as duplicates.
    pub duplicates: usize,
    /// Items in the server's set.
    pub server_items: u32,
}
