//! What a run returns: matches, statistics, progress events.

use psi_core::{Phase, Protocol};
use std::time::Duration;

/// One matched item.
#[derive(Clone, PartialEq, Eq)]
pub struct Matched {
    /// Index in the list passed to [`crate::Client::match_items`], 0-based (the first
    /// occurrence, if the item was listed more than once).
    pub index: usize,
    /// The item.
    pub item: Vec<u8>,
    /// Its label in the registry, if it has one (and labels were fetched).
    pub label: Option<String>,
}

impl std::fmt::Debug for Matched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Matched")
            .field("index", &self.index)
            .field("has_label", &self.label.is_some())
            .finish_non_exhaustive()
    }
}

/// Traffic and time of a run, measured by the driver.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RunStats {
    /// HTTP requests made (the session delete included).
    pub requests: usize,
    /// Request bytes (bodies only).
    pub bytes_sent: u64,
    /// Response bytes (bodies only).
    pub bytes_received: u64,
    /// Bytes of protocol messages sent (DH query or OT requests).
    pub protocol_bytes_sent: u64,
    /// Bytes of protocol messages received (DH evaluation or OT responses).
    pub protocol_bytes_received: u64,
    /// Bytes of the encoded registry downloaded (0 if it came from the cache).
    pub set_bytes_downloaded: u64,
    /// Size of the encoded registry used (DH-PSI).
    pub set_bytes: u64,
    /// True if the encoded registry came from the cache (directly or after a 304).
    pub set_from_cache: bool,
    /// Truncation bits of the encoded registry (DH-PSI).
    pub truncation_bits: u8,
    /// Bytes of the label step, both ways.
    pub label_bytes: u64,
    /// Protocol round trips (DH query, OT rounds).
    pub round_trips: usize,
    /// Wall time per phase, in first-seen order (repeated phases summed).
    pub phases: Vec<(Phase, Duration)>,
    /// OT-PSI and CM20-PSI: time the client spent building its next step while a request
    /// was out (ADR 0026). It overlaps the `RoundTrip` phase and is not in `phases`.
    pub work_ahead: Duration,
    /// Server compute time reported in `Server-Timing` headers.
    pub server_time: Duration,
}

impl RunStats {
    /// Adds `d` to `phase`.
    pub fn add_phase(&mut self, phase: Phase, d: Duration) {
        match self.phases.iter_mut().find(|(p, _)| *p == phase) {
            Some((_, t)) => *t += d,
            None => self.phases.push((phase, d)),
        }
    }

    /// The time spent in `phase`.
    pub fn phase(&self, phase: Phase) -> Duration {
        self.phases
            .iter()
            .filter(|(p, _)| *p == phase)
            .map(|(_, d)| *d)
            .sum()
    }
}

/// The result of a run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct MatchReport {
    /// Matches in the order of the caller's list.
    pub matches: Vec<Matched>,
    /// Distinct items queried.
    pub client_items: usize,
    /// Entries dropped as repeats.
    pub duplicates: usize,
    /// Entries in the registry.
    pub server_items: u64,
    /// Key epoch used.
    pub epoch: u32,
    /// The registry's version the run was answered from: the ETag of the session's encoded
    /// set (quoted, as in the header; it changes with every import and key rotation, and is
    /// the same on every server instance for the same set). Empty if the server named none.
    pub registry_etag: String,
    /// Protocol run.
    pub protocol: Protocol,
    /// Traffic and timings.
    pub stats: RunStats,
    /// Why labels are missing, if the label step failed after matching succeeded (the
    /// matches are still returned, with `label: None`). Log-safe: no contact data.
    pub label_error: Option<String>,
    /// Matches whose label was not fetched because the label step's fixed size is too
    /// small for them (more matches than the session's label slots, or their buckets
    /// more than its fetch names: docs/protocol/labels.md §6); their `label` is `None`.
    /// 0 when labels are off or the step failed.
    pub labels_skipped: usize,
    /// The automatic choice that picked `protocol` (its inputs and every protocol's
    /// prediction); `None` when the protocol was fixed.
    pub choice: Option<crate::measure::ChoiceReport>,
}

/// A progress event: the run entered `phase`. `round` counts the protocol's round
/// trips so far (1 for the first request of a [`Phase::RoundTrip`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// The phase entered.
    pub phase: Phase,
    /// Protocol round trips started so far.
    pub round: usize,
}
