//! What a run returns: matches, statistics, progress events.

use crate::error::ClientError;
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
    /// A DH-PSI run in sync mode (docs/protocol/sync.md): what it downloaded to be in sync
    /// and what the confirmation said. `None` for every other run.
    pub sync: Option<SyncReport>,
}

/// What a sync-mode run did with its synced set ([`RunStats::sync`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SyncReport {
    /// A synced set of the session's epoch came from the cache.
    pub from_cache: bool,
    /// Bytes of the snapshot downloaded (a first sync, or one after a rotation; 0 if
    /// none was).
    pub snapshot_bytes: u64,
    /// Bytes of the delta downloaded (0 if none was).
    pub delta_bytes: u64,
    /// The synced set's registry version the run used.
    pub have_version: u64,
    /// The registry version the server's records answered from (at least
    /// `have_version`, unless another instance is behind).
    pub served_version: u64,
    /// Items whose short tag was in the synced set, so confirmed by the fetch.
    pub candidates: usize,
}

impl SyncReport {
    /// Bytes downloaded to be in sync (snapshot and delta).
    pub fn bytes_downloaded(&self) -> u64 {
        self.snapshot_bytes + self.delta_bytes
    }
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
    /// 0 when labels are off or the step failed. The reference label step has a slot for
    /// every item, so this is 0 unless a future layout caps it.
    pub labels_skipped: usize,
    /// Matches whose `label` is `None`, whatever the reason ([`MatchReport::label_status`]
    /// says which applies): entries of `matches` here; match rows in a
    /// [`crate::ContactReport`]'s run (every row of such an identifier).
    pub labels_missing: usize,
    /// What became of the labels: off, complete, capped or failed.
    pub label_status: LabelStatus,
    /// The automatic choice that picked `protocol` (its inputs and every protocol's
    /// prediction); `None` when the protocol was fixed.
    pub choice: Option<crate::measure::ChoiceReport>,
}

impl MatchReport {
    /// The report of a run that sent nothing because it had no valid item: no match,
    /// no request (`stats.requests` 0), registry figures unknown (0, empty version), no
    /// choice made. `protocol` is the fixed one asked for, or DH-PSI for an automatic choice
    /// (which chose nothing); labels are `Complete` when asked for (no match lacks one),
    /// else `Off`.
    pub fn nothing_sent(choice: crate::measure::ProtocolChoice, labels: bool) -> MatchReport {
        MatchReport {
            matches: Vec::new(),
            client_items: 0,
            duplicates: 0,
            server_items: 0,
            epoch: 0,
            registry_etag: String::new(),
            protocol: match choice {
                crate::measure::ProtocolChoice::Fixed(p) => p,
                crate::measure::ProtocolChoice::Auto(_) => Protocol::Dh,
            },
            stats: RunStats::default(),
            label_error: None,
            labels_skipped: 0,
            labels_missing: 0,
            label_status: LabelStatus::of(labels, None, 0),
            choice: None,
        }
    }

    /// The registry's version as a plain string: [`MatchReport::registry_etag`] without
    /// HTTP's quotes and weak marker (`"abc"` and `W/"abc"` give `abc`), for apps to store
    /// and compare. Empty if the server named none.
    pub fn registry_version(&self) -> String {
        registry_version(&self.registry_etag)
    }
}

/// An ETag as a plain version string: without a leading `W/` and the surrounding quotes;
/// a value without quotes is returned trimmed, as it is.
pub fn registry_version(etag: &str) -> String {
    let t = etag.trim();
    let t = t.strip_prefix("W/").unwrap_or(t);
    t.strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(t)
        .to_string()
}

/// What became of the labels of a run's matches: why a match may have `label: None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LabelStatus {
    /// Labels were not asked for ([`crate::ClientConfig::with_labels`] `false`): no match
    /// has one.
    Off,
    /// The label step ran with a slot for every match: a match without a label has none
    /// in the registry.
    Complete,
    /// The label step ran, but [`MatchReport::labels_skipped`] matches did not fit its
    /// fixed size and got no label (the server does not learn it).
    Capped,
    /// The label step failed after the matching ([`MatchReport::label_error`] says why):
    /// the matches are right, none has a label.
    Failed,
}

impl LabelStatus {
    /// The status of a run that asked for labels (`wanted`), whose label step failed with
    /// `error` or left `skipped` matches out.
    pub(crate) fn of(wanted: bool, error: Option<&str>, skipped: usize) -> LabelStatus {
        match (wanted, error, skipped) {
            (false, _, _) => LabelStatus::Off,
            (true, Some(_), _) => LabelStatus::Failed,
            (true, None, 0) => LabelStatus::Complete,
            (true, None, _) => LabelStatus::Capped,
        }
    }

    /// A stable lower-case name (`off`, `complete`, `capped`, `failed`) for logs and JSON.
    pub fn name(self) -> &'static str {
        match self {
            LabelStatus::Off => "off",
            LabelStatus::Complete => "complete",
            LabelStatus::Capped => "capped",
            LabelStatus::Failed => "failed",
        }
    }
}

/// A progress event: the run entered `phase`. `round` counts the protocol's round
/// trips so far (1 for the first request of a [`Phase::RoundTrip`]).
///
/// A retry event (`retry` is set) enters no phase: the attempt that was in `phase` (at
/// `round`, as its last event said) failed with a retryable error, and the run starts
/// again from a new session after `retry.wait` (its phases are then heard again, from
/// [`Phase::CreateSession`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Progress {
    /// The phase entered (for a retry event: the phase the failed attempt was in).
    pub phase: Phase,
    /// Protocol round trips started so far (for a retry event: by the failed attempt).
    pub round: usize,
    /// Set when the run is about to start again ([`crate::ClientConfig::retries`]).
    pub retry: Option<Retry>,
    /// HTTP requests of this attempt answered so far.
    pub requests_done: usize,
    /// The requests the cost model predicts for this attempt (`psi_core::cost::cost` for
    /// the session's workload), once the session is created; `None` before.
    pub requests_planned: Option<usize>,
}

impl Progress {
    /// How far the attempt has come, from 0 to 1, for a progress bar: the requests
    /// answered over the requests the cost model predicts for the session, at most 0.99
    /// (the result, not an event, says the run is done); 0 before the session is created
    /// and for a retry event (the run starts again). Within an attempt it never goes back.
    pub fn fraction(&self) -> f64 {
        match self.requests_planned {
            Some(planned) if planned > 0 && self.retry.is_none() => {
                (self.requests_done as f64 / planned as f64).min(0.99)
            }
            _ => 0.0,
        }
    }
}

/// Why and when a run starts again (see [`crate::Client::match_items`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Retry {
    /// The attempt about to start, counting retries: 1 for the first retry.
    pub attempt: u32,
    /// The retries allowed in all ([`crate::ClientConfig::retries`]).
    pub retries: u32,
    /// What failed the previous attempt.
    pub cause: RetryCause,
    /// The wait before the new attempt: the backoff, or the server's `Retry-After`.
    pub wait: Duration,
}

/// What failed an attempt that is retried: the kind of error and its code, never its
/// text (log-safe by construction). The whole error is returned if the last attempt
/// fails too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetryCause {
    /// No response ([`crate::ClientError::Network`]): connection refused or reset, a body
    /// cut short; `timeout` when a timeout expired.
    Network {
        /// True when a timeout expired.
        timeout: bool,
    },
    /// The server answered with an error that may pass ([`crate::ClientError::Http`]:
    /// a 5xx, `session_expired`, `rate_limited`...).
    Http {
        /// HTTP status.
        status: u16,
        /// The API error code.
        code: psi_http::ErrorCode,
        /// The server's `Retry-After`, seconds.
        retry_after: Option<u64>,
    },
    /// The registry's key epoch changed during the run.
    EpochMismatch,
}

impl RetryCause {
    /// The cause of retrying after `e`; `None` for an error that is not retried.
    pub fn of(e: &ClientError) -> Option<RetryCause> {
        use ClientError as E;
        if !e.is_retryable() {
            return None;
        }
        match e {
            E::Network { timeout, .. } => Some(RetryCause::Network { timeout: *timeout }),
            E::Http {
                status,
                code,
                retry_after,
                ..
            } => Some(RetryCause::Http {
                status: *status,
                code: *code,
                retry_after: *retry_after,
            }),
            E::Protocol(psi_core::Error::EpochMismatch { .. }) => Some(RetryCause::EpochMismatch),
            _ => None,
        }
    }
}

impl std::fmt::Display for RetryCause {
    /// `network error`, `timeout`, `HTTP 503 (server_busy)`, `key epoch changed`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RetryCause::Network { timeout: false } => f.write_str("network error"),
            RetryCause::Network { timeout: true } => f.write_str("timeout"),
            RetryCause::Http { status, code, .. } => {
                write!(f, "HTTP {status} ({})", code.as_str())
            }
            RetryCause::EpochMismatch => f.write_str("key epoch changed"),
        }
    }
}

impl std::fmt::Display for Retry {
    /// `retry 1 of 2 after HTTP 503 (server_busy), waiting 250 ms`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "retry {} of {} after {}, waiting {} ms",
            self.attempt,
            self.retries,
            self.cause,
            self.wait.as_millis()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_version_is_the_etag_without_its_quotes() {
        assert_eq!(registry_version("\"3-5f2a\""), "3-5f2a");
        assert_eq!(registry_version("W/\"3-5f2a\""), "3-5f2a");
        assert_eq!(registry_version(" \"abc\" "), "abc");
        // Not quoted: as it is, trimmed; a lone quote is not stripped.
        assert_eq!(registry_version("abc"), "abc");
        assert_eq!(registry_version("\"abc"), "\"abc");
        assert_eq!(registry_version(""), "");
    }

    #[test]
    fn the_fraction_is_requests_done_over_planned_below_one() {
        let at = |done, planned| Progress {
            phase: Phase::RoundTrip,
            round: 0,
            retry: None,
            requests_done: done,
            requests_planned: planned,
        };
        assert_eq!(at(0, None).fraction(), 0.0);
        assert_eq!(at(3, None).fraction(), 0.0);
        assert_eq!(at(0, Some(4)).fraction(), 0.0);
        assert_eq!(at(2, Some(4)).fraction(), 0.5);
        // More requests than the model predicted (a retried step, a cached set's
        // conditional request): held below 1, which only the result means.
        assert_eq!(at(4, Some(4)).fraction(), 0.99);
        assert_eq!(at(9, Some(4)).fraction(), 0.99);
        assert_eq!(at(1, Some(0)).fraction(), 0.0);
        let retry = Progress {
            retry: Some(Retry {
                attempt: 1,
                retries: 2,
                cause: RetryCause::EpochMismatch,
                wait: Duration::from_millis(250),
            }),
            ..at(2, Some(4))
        };
        assert_eq!(retry.fraction(), 0.0);
    }
}
