//! What a finished PSI run tells the client, for every protocol.

use crate::items::ItemSet;

/// One of the client's items found in the server's set. The item is zeroized on drop
/// (take it with `std::mem::take(&mut m.item)` to keep it).
#[derive(Clone, PartialEq, Eq)]
pub struct Match {
    /// Index of the item in the list the client started with (first occurrence).
    pub index: usize,
    /// The item.
    pub item: Vec<u8>,
}

impl Drop for Match {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.item);
    }
}

impl zeroize::ZeroizeOnDrop for Match {}

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
    /// The matches' labels when they rode on the run itself (OT-PSI's and CM20-PSI's label
    /// lanes, ADR 0053), in the order of [`MatchOutput::matches`]; `None` when the run
    /// carried none (every other protocol, and a run without lanes: the label step fetches
    /// them).
    pub labels: Option<RunLabels>,
}

/// Labels carried by a run, one per match: `None` for an entry without a label. Never
/// printed (labels are the registry's data about a contact); zeroized on drop.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RunLabels(pub Vec<Option<Vec<u8>>>);

impl std::fmt::Debug for RunLabels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunLabels")
            .field("matches", &self.0.len())
            .finish_non_exhaustive()
    }
}

impl RunLabels {
    /// Takes the labels out (they are then the caller's to wipe).
    pub fn into_vec(mut self) -> Vec<Option<Vec<u8>>> {
        std::mem::take(&mut self.0)
    }
}

impl Drop for RunLabels {
    fn drop(&mut self) {
        for label in self.0.iter_mut().flatten() {
            zeroize::Zeroize::zeroize(label);
        }
    }
}

impl MatchOutput {
    /// The output for the client's deduplicated `items` of which those at `hits` (indices
    /// into [`ItemSet::items`](ItemSet::items), in the order given) are in
    /// the server's set of `server_items` items.
    pub(crate) fn new(items: &ItemSet, hits: &[usize], server_items: u32) -> MatchOutput {
        MatchOutput {
            matches: hits
                .iter()
                .map(|&i| Match {
                    index: items.original_index(i),
                    item: items.items()[i].to_vec(),
                })
                .collect(),
            client_items: items.len(),
            duplicates: items.duplicates(),
            server_items,
            labels: None,
        }
    }
}

/// The full 64-byte OPRF outputs of a run's matches, in the order of
/// [`MatchOutput::matches`]. Secret to the client (they open the matches' labels):
/// zeroized on drop, never printed.
#[derive(Clone, Default)]
pub struct MatchedOutputs(pub(crate) zeroize::Zeroizing<Vec<[u8; crate::oprf::OUTPUT_LEN]>>);

impl MatchedOutputs {
    /// Outputs held as they are (the label step's benchmark and tests, which make their
    /// own; a run gives them with [`crate::dh::DhClient::finish_with_outputs`]).
    pub fn from_outputs(outputs: Vec<[u8; crate::oprf::OUTPUT_LEN]>) -> Self {
        MatchedOutputs(zeroize::Zeroizing::new(outputs))
    }

    /// Outputs of the matches, `[i]` for match `i`.
    pub fn as_slice(&self) -> &[[u8; crate::oprf::OUTPUT_LEN]] {
        &self.0
    }

    /// Number of outputs.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for MatchedOutputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MatchedOutputs({} outputs)", self.0.len())
    }
}
