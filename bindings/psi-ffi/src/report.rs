//! What a run returns and reports, as records the platforms can hold. Converted from
//! psi-client's types here, in one place.

use crate::choice::{ChoiceReport, ProtocolChoice};
use crate::error::{PsiError, ServerErrorCode};
use crate::protocol::Protocol;
use std::time::Duration;

/// A phase of a run (psi-core's `Phase`), for progress and timings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Enum)]
#[allow(missing_docs)] // Documented on psi_core::Phase.
pub enum Phase {
    CreateSession,
    ClientStart,
    RoundTrip,
    ServerHello,
    ClientFinalize,
    ClientSetup,
    ServerChunk,
    ClientChunk,
    ServerOutputs,
    EncodedSet,
    ClientFinish,
    Labels,
    /// A phase added to the core after these bindings were built.
    Other,
}

impl From<psi_client::Phase> for Phase {
    fn from(p: psi_client::Phase) -> Self {
        use psi_client::Phase as P;
        match p {
            P::CreateSession => Phase::CreateSession,
            P::ClientStart => Phase::ClientStart,
            P::RoundTrip => Phase::RoundTrip,
            P::ServerHello => Phase::ServerHello,
            P::ClientFinalize => Phase::ClientFinalize,
            P::ClientSetup => Phase::ClientSetup,
            P::ServerChunk => Phase::ServerChunk,
            P::ClientChunk => Phase::ClientChunk,
            P::ServerOutputs => Phase::ServerOutputs,
            P::EncodedSet => Phase::EncodedSet,
            P::ClientFinish => Phase::ClientFinish,
            P::Labels => Phase::Labels,
            _ => Phase::Other,
        }
    }
}

/// A progress event: the run entered `phase`; `round` counts the protocol's round trips
/// so far; `fraction` is how far the attempt has come (0 to 1, `psi_client::Progress::fraction`).
///
/// A retry event (`retry` is set) enters no phase: the attempt that was in `phase` (at
/// `round`) failed with a retryable error, and the run starts again from a new session
/// after `retry.wait_ms` (its phases are heard again). A listener that ignores `retry`
/// sees that phase once more.
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct ProgressEvent {
    /// The phase entered (for a retry event: the phase the failed attempt was in).
    pub phase: Phase,
    /// Protocol round trips started so far (for a retry event: by the failed attempt).
    pub round: u32,
    /// Set when the run is about to start again (the configuration's `retries`).
    #[uniffi(default = None)]
    pub retry: Option<RetryEvent>,
    /// How far the attempt has come, from 0 to 1, for a progress bar: the requests
    /// answered over the requests the cost model predicts for the session, at most 0.99;
    /// 0 before the session is created and for a retry event. Never goes back within an
    /// attempt.
    #[uniffi(default = 0.0)]
    pub fraction: f64,
}

impl From<psi_client::Progress> for ProgressEvent {
    fn from(p: psi_client::Progress) -> Self {
        ProgressEvent {
            phase: p.phase.into(),
            round: saturate(p.round),
            retry: p.retry.map(RetryEvent::from),
            fraction: p.fraction(),
        }
    }
}

/// Why and when a run starts again (`psi_client::report::Retry`). Log-safe: the kind of
/// error and its code, never its text or any contact.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct RetryEvent {
    /// The attempt about to start, counting retries: 1 for the first retry.
    pub attempt: u32,
    /// The retries allowed in all (the configuration's `retries`).
    pub retries: u32,
    /// What failed the previous attempt, for logs: `network error`, `timeout`,
    /// `HTTP 503 (internal)`, `key epoch changed`.
    pub reason: String,
    /// True when the previous attempt failed for a timeout.
    pub timeout: bool,
    /// The HTTP status, when the server answered the previous attempt with an error.
    pub status: Option<u16>,
    /// The API error code, when the server answered the previous attempt with an error.
    pub code: Option<ServerErrorCode>,
    /// Milliseconds waited before the new attempt (the backoff, or the server's
    /// `Retry-After`).
    pub wait_ms: u64,
}

impl From<psi_client::report::Retry> for RetryEvent {
    fn from(r: psi_client::report::Retry) -> Self {
        use psi_client::report::RetryCause as C;
        let (timeout, status, code) = match r.cause {
            C::Network { timeout } => (timeout, None, None),
            C::Http { status, code, .. } => (false, Some(status), Some(code.into())),
            _ => (false, None, None),
        };
        RetryEvent {
            attempt: r.attempt,
            retries: r.retries,
            reason: r.cause.to_string(),
            timeout,
            status,
            code,
            wait_ms: u64::try_from(r.wait.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

/// A contact row that is in the registry.
#[derive(Clone, PartialEq, Eq, uniffi::Record)]
pub struct ContactMatch {
    /// Index of the row in the caller's list (0-based).
    pub row: u64,
    /// The normalized identifier (E.164 phone number or lower-cased email).
    pub identifier: String,
    /// Its label in the registry, if it has one and labels were fetched.
    pub label: Option<String>,
}

impl std::fmt::Debug for ContactMatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContactMatch")
            .field("row", &self.row)
            .field("has_label", &self.label.is_some())
            .finish_non_exhaustive()
    }
}

/// Why a row is not a valid identifier (psi-contacts' `Invalid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Enum)]
pub enum RejectReason {
    /// Nothing but whitespace.
    Empty,
    /// Too long after normalization.
    TooLong,
    /// Contains an `@` but is not `local@domain.tld`.
    BadEmail,
    /// Neither a phone number nor an email.
    NotAPhoneNumber,
    /// The phone number could not be parsed (with the default region if it has no `+`).
    UnparsablePhone,
    /// Parsed, but not a valid number for its region.
    InvalidPhone,
    /// A reason added to the core after these bindings were built.
    Other,
}

impl From<psi_client::Invalid> for RejectReason {
    fn from(r: psi_client::Invalid) -> Self {
        use psi_client::Invalid as I;
        match r {
            I::Empty => RejectReason::Empty,
            I::TooLong => RejectReason::TooLong,
            I::BadEmail => RejectReason::BadEmail,
            I::NotAPhoneNumber => RejectReason::NotAPhoneNumber,
            I::UnparsablePhone => RejectReason::UnparsablePhone,
            I::InvalidPhone => RejectReason::InvalidPhone,
            _ => RejectReason::Other,
        }
    }
}

/// A row that could not be matched, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct RejectedContact {
    /// Index of the row in the caller's list (0-based).
    pub row: u64,
    /// Why.
    pub reason: RejectReason,
}

/// Time spent in one phase.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct PhaseTime {
    /// The phase.
    pub phase: Phase,
    /// Microseconds (repeated phases summed).
    pub micros: u64,
}

/// Traffic and time of a run, measured by psi-client.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct RunStats {
    /// HTTP requests made (the session delete included).
    pub requests: u32,
    /// Request body bytes.
    pub bytes_sent: u64,
    /// Response body bytes.
    pub bytes_received: u64,
    /// Bytes of the encoded registry downloaded (0 when it came from the cache).
    pub set_bytes_downloaded: u64,
    /// True if the encoded registry came from the cache (DH-PSI).
    pub set_from_cache: bool,
    /// Protocol round trips.
    pub round_trips: u32,
    /// Distinct identifiers queried.
    pub client_items: u64,
    /// Rows dropped because they normalized to an identifier already queried.
    pub duplicates: u64,
    /// Entries in the server's registry.
    pub server_items: u64,
    /// The server's key epoch.
    pub epoch: u32,
    /// Wall time per phase, in first-seen order.
    pub phases: Vec<PhaseTime>,
    /// Server compute time reported by the server, in microseconds.
    pub server_micros: u64,
    /// OT-PSI and CM20-PSI: microseconds the client spent building its next step while a
    /// request was out (it overlaps the round trips and is not in `phases`; 0 for DH-PSI).
    pub work_ahead_micros: u64,
    /// Wall time of the whole run, in microseconds.
    pub total_micros: u64,
    /// A DH-PSI run in sync mode (docs/protocol/sync.md): what it downloaded to be in
    /// sync and what the confirmation found. `None` for every other run. Last, so the
    /// fields before it keep their places.
    pub sync: Option<SyncStats>,
}

/// What a sync-mode run did with its synced set ([`RunStats::sync`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Record)]
pub struct SyncStats {
    /// Bytes of the snapshot downloaded (a first sync, or one after a key rotation or a
    /// discarded cache; 0 when none was).
    pub snapshot_bytes: u64,
    /// Bytes of the delta downloaded (0 when none was).
    pub delta_bytes: u64,
    /// A synced set of the session's key epoch came from the cache.
    pub from_cache: bool,
    /// Contacts whose short tag was in the synced set, confirmed by the label fetch.
    pub candidates: u64,
    /// The synced set's registry version the run used.
    pub have_version: u64,
    /// The registry version the server's records answered from.
    pub served_version: u64,
}

impl From<psi_client::SyncReport> for SyncStats {
    fn from(s: psi_client::SyncReport) -> Self {
        SyncStats {
            snapshot_bytes: s.snapshot_bytes,
            delta_bytes: s.delta_bytes,
            from_cache: s.from_cache,
            candidates: s.candidates as u64,
            have_version: s.have_version,
            served_version: s.served_version,
        }
    }
}

/// What became of the labels of a run's matches (docs/protocol/labels.md §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, uniffi::Enum)]
pub enum LabelStatus {
    /// Labels were not asked for: no match has one.
    Off,
    /// The label step had a slot for every match: a match without a label has none in
    /// the registry.
    Complete,
    /// Some matches (`labels_skipped`) did not fit the label step's fixed size.
    Capped,
    /// The label step failed after the matching (`label_error` says why): no labels.
    Failed,
}

impl From<psi_client::LabelStatus> for LabelStatus {
    fn from(s: psi_client::LabelStatus) -> Self {
        match s {
            psi_client::LabelStatus::Off => LabelStatus::Off,
            psi_client::LabelStatus::Complete => LabelStatus::Complete,
            psi_client::LabelStatus::Capped => LabelStatus::Capped,
            // Failed, and any status added later: the labels are not all there.
            _ => LabelStatus::Failed,
        }
    }
}

/// The result of [`crate::DiscoveryClient::match_contacts`].
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct ContactReport {
    /// Matched rows, in row order.
    pub matches: Vec<ContactMatch>,
    /// Rows that are not valid identifiers, in row order.
    pub rejected: Vec<RejectedContact>,
    /// The protocol that ran.
    pub protocol: Protocol,
    /// How it was to be picked: the call's choice, or the configured one.
    pub requested: ProtocolChoice,
    /// How the automatic choice picked `protocol`: every candidate's prediction and the
    /// inputs. `None` when `requested` was a fixed protocol.
    pub choice: Option<ChoiceReport>,
    /// Traffic and timings.
    pub stats: RunStats,
    /// Why labels are missing, if the label step failed after matching succeeded.
    pub label_error: Option<String>,
    /// Matches that came back without their label because the label step's fixed size is
    /// too small for them (docs/protocol/labels.md); 0 when labels are off or the step
    /// failed (then `label_error` says why).
    pub labels_skipped: u64,
    /// Match rows (entries of `matches`) without a label, whatever the reason
    /// (`label_status` says which applies): two rows of one identifier count twice.
    pub labels_missing: u64,
    /// What became of the labels: off, complete (a match without a label has none in the
    /// registry), capped (`labels_skipped` did not fit) or failed (`label_error`).
    pub label_status: LabelStatus,
    /// The registry's version that answered the run: the ETag of the session's encoded set
    /// (it changes with every import and key rotation; compare it with an earlier run's to
    /// know whether the registry changed). Empty if the server named none.
    pub registry_etag: String,
    /// The same version as a plain string, without HTTP's quotes (`registry_etag` `"abc"`
    /// gives `abc`): what apps store and compare. Empty if the server named none.
    #[uniffi(default = "")]
    pub registry_version: String,
}

impl ContactReport {
    /// The record of `r`, a run asked to pick its protocol by `requested` with `hints`,
    /// that took `total`.
    pub(crate) fn from_client(
        r: psi_client::ContactReport,
        requested: ProtocolChoice,
        hints: &psi_client::LinkHints,
        total: Duration,
    ) -> Result<Self, PsiError> {
        let run = r.run;
        let unknown = || PsiError::internal("the run used a protocol these bindings do not know");
        let protocol = Protocol::from_core(run.protocol).ok_or_else(unknown)?;
        let choice = match &run.choice {
            Some(c) => Some(ChoiceReport::from_client(c, hints).ok_or_else(unknown)?),
            None => None,
        };
        let s = run.stats;
        Ok(ContactReport {
            matches: r
                .matches
                .into_iter()
                .map(|m| ContactMatch {
                    row: m.row as u64,
                    identifier: m.identifier,
                    label: m.label,
                })
                .collect(),
            rejected: r
                .rejected
                .into_iter()
                .map(|x| RejectedContact {
                    row: x.row as u64,
                    reason: x.reason.into(),
                })
                .collect(),
            protocol,
            requested,
            choice,
            stats: RunStats {
                requests: saturate(s.requests),
                bytes_sent: s.bytes_sent,
                bytes_received: s.bytes_received,
                set_bytes_downloaded: s.set_bytes_downloaded,
                set_from_cache: s.set_from_cache,
                round_trips: saturate(s.round_trips),
                client_items: run.client_items as u64,
                duplicates: run.duplicates as u64,
                server_items: run.server_items,
                epoch: run.epoch,
                phases: s
                    .phases
                    .iter()
                    .map(|(p, d)| PhaseTime {
                        phase: (*p).into(),
                        micros: micros(*d),
                    })
                    .collect(),
                server_micros: micros(s.server_time),
                work_ahead_micros: micros(s.work_ahead),
                total_micros: micros(total),
                sync: s.sync.map(SyncStats::from),
            },
            label_error: run.label_error,
            labels_skipped: run.labels_skipped as u64,
            labels_missing: run.labels_missing as u64,
            label_status: run.label_status.into(),
            registry_version: psi_client::report::registry_version(&run.registry_etag),
            registry_etag: run.registry_etag,
        })
    }
}

/// What the server says about itself (`GET /v1/health`).
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct ServerHealth {
    /// Current key epoch.
    pub epoch: u32,
    /// Entries in the registry.
    pub registry_items: u64,
    /// Protocols the server runs that these bindings know.
    pub protocols: Vec<Protocol>,
    /// Largest contact list one run may send.
    pub max_client_items: u32,
    /// Largest request body the server accepts, in bytes.
    pub max_body_bytes: u64,
    /// The registry's current version, as a run's `ContactReport::registry_version` names
    /// it (the ETag of its encoded set without the quotes): compare it with the last run's
    /// to know whether the registry changed, without running a match. Empty if the server
    /// names none.
    #[uniffi(default = "")]
    pub registry_version: String,
}

impl From<psi_client::Health> for ServerHealth {
    fn from(h: psi_client::Health) -> Self {
        ServerHealth {
            epoch: h.epoch,
            registry_items: h.registry_items,
            protocols: h
                .protocols
                .iter()
                .filter_map(|p| psi_client::Protocol::from_api_name(p))
                .filter_map(Protocol::from_core)
                .collect(),
            max_client_items: h.max_client_items,
            max_body_bytes: h.max_body_bytes,
            registry_version: psi_client::report::registry_version(&h.encoded_set_etag),
        }
    }
}

fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
