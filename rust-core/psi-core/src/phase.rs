//! The phases of a run: one vocabulary for progress events, per-phase timings and what
//! the command line prints, whichever protocol runs and whether both sides run in one
//! process (benchmarks) or over a network (the client driver).

/// A phase of a PSI run. A run reports a phase each time it starts it (progress) or
/// times it (statistics); a phase that repeats (rounds, chunks) is summed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Phase {
    /// Driver: opening the session with the server.
    CreateSession,
    /// Client: the first message. DH-PSI: hash and blind every item; OT-PSI: Cuckoo
    /// placement and the base-OT messages.
    ClientStart,
    /// Requests on the network, waiting for the server (its computation included).
    RoundTrip,
    /// Server: answering the first message (OT-PSI: base OTs and the IKNP matrix; DH-PSI:
    /// evaluating the query). Timed separately only when both sides run in one process.
    ServerHello,
    /// Client, DH-PSI: unblind and finalize the evaluated elements.
    ClientFinalize,
    /// Client, OT-PSI: the reply to the server's setup (IKNP, first matrix chunk).
    ClientSetup,
    /// Server, OT-PSI: absorbing a matrix chunk that is not the last.
    ServerChunk,
    /// Client, OT-PSI: producing a further matrix chunk.
    ClientChunk,
    /// Server, OT-PSI: the last chunk and the shuffled outputs.
    ServerOutputs,
    /// Client, DH-PSI: obtaining the encoded registry (download, 304, or cache).
    EncodedSet,
    /// Client: matching its values against the server's.
    ClientFinish,
    /// Client: fetching and opening the labels of the matches.
    Labels,
}

impl Phase {
    /// A short stable name for tables, logs and JSON reports.
    pub fn name(self) -> &'static str {
        match self {
            Phase::CreateSession => "create session",
            Phase::ClientStart => "client start",
            Phase::RoundTrip => "round trips",
            Phase::ServerHello => "server hello",
            Phase::ClientFinalize => "client finalize",
            Phase::ClientSetup => "client setup",
            Phase::ServerChunk => "server chunks",
            Phase::ClientChunk => "client chunks",
            Phase::ServerOutputs => "server outputs",
            Phase::EncodedSet => "encoded registry",
            Phase::ClientFinish => "client finish",
            Phase::Labels => "labels",
        }
    }

    /// True for phases that are the client's own computation.
    pub fn is_client(self) -> bool {
        matches!(
            self,
            Phase::ClientStart
                | Phase::ClientFinalize
                | Phase::ClientSetup
                | Phase::ClientChunk
                | Phase::ClientFinish
        )
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
