//! Whether this instance's store answers (issue 22, "Faults"; docs/deploy.md, "Faults").
//!
//! A shared PostgreSQL can go away under a running instance (a restart, a failover, a
//! network fault). The instance keeps running: it answers `GET /v1/health` with
//! `"store": "unavailable"`, refuses new sessions with `503 store_unavailable` (retryable,
//! `Retry-After`), and reconnects by itself. What each step does meanwhile:
//!
//! - `POST /v1/sessions` is refused: admitting a session needs the token lookup and, on
//!   PostgreSQL, the atomic budget charge, and a session admitted without them would be a
//!   free pass (fail closed).
//! - The steps of a session already running go on where they need no database: the DH
//!   query, the OT and CM20 rounds and the label query work from the registry in memory.
//!   Their token lookup falls back to the answer the database gave for the same
//!   credential within the session lifetime ([`crate::accounts`]): a revocation made
//!   during the outage takes effect when the database is back, at most one session
//!   lifetime late for sessions already admitted. A step that charges a shared budget
//!   (label fetch, encoded-set download, probe) is refused like a new session while the
//!   budget cannot be charged.
//! - Health never touches the database: it says what the last look found.
//!
//! Who looks: the store watcher polls the database every `watch_store` (2 s by default,
//! on for every database file and for PostgreSQL) and is the probe that sets the state
//! back to available; a token lookup or a budget charge that fails for the connection
//! sets it unavailable at once. An embedded SQLite file is never "unavailable": its
//! errors are not connection errors, and its behaviour is the same as before.

use crate::storage::{BudgetError, StoreError};
use std::sync::atomic::{AtomicBool, Ordering};

/// The store's state as this instance last saw it. Starts available: the store was
/// opened to load the registry before the server started.
#[derive(Debug, Default)]
pub(crate) struct StoreHealth {
    down: AtomicBool,
}

impl StoreHealth {
    /// True while the last look at the store failed for the connection.
    pub(crate) fn is_down(&self) -> bool {
        self.down.load(Ordering::Relaxed)
    }

    /// The state as `GET /v1/health` reports it.
    pub(crate) fn state(&self) -> psi_http::StoreState {
        if self.is_down() {
            psi_http::StoreState::Unavailable
        } else {
            psi_http::StoreState::Ok
        }
    }

    /// A store call succeeded: the database answers.
    pub(crate) fn answered(&self) {
        if self.down.swap(false, Ordering::Relaxed) {
            tracing::warn!("the database answers again: accepting new sessions");
        }
    }

    /// A store call failed with `e`. Returns true (and marks the store unavailable) when
    /// `e` says the database is unreachable rather than that the request was wrong.
    pub(crate) fn failed(&self, e: &StoreError) -> bool {
        if !is_unavailable(e) {
            return false;
        }
        self.lost(e);
        true
    }

    /// A shared budget charge failed with `e`: the same as [`StoreHealth::failed`] for
    /// the request path's pool (its connection errors are already told apart there).
    pub(crate) fn charge_failed(&self, e: &BudgetError) {
        if matches!(e, BudgetError::Unavailable(_)) {
            self.lost(e);
        }
    }

    /// A call on the request path's pool found the database unreachable (`e` names no
    /// credential).
    pub(crate) fn unreachable(&self, e: &str) {
        self.lost(&e);
    }

    fn lost(&self, e: &dyn std::fmt::Display) {
        if !self.down.swap(true, Ordering::Relaxed) {
            tracing::error!(error = %e, "the database does not answer: refusing new sessions until it does");
        }
    }
}

/// Seconds a client is told to wait (`Retry-After`) before it tries again while the store
/// is unavailable: about one look of the watcher.
pub(crate) const RETRY_AFTER_SECS: u64 = 2;

/// True when `e` means the database did not answer (no connection, the connection broke,
/// the server is shutting down or starting): a fault of the link, not of the request, so
/// the same request may succeed once the instance has reconnected.
pub(crate) fn is_unavailable(e: &StoreError) -> bool {
    match e {
        StoreError::Pg(e) => pg_unavailable(e),
        _ => false,
    }
}

/// [`is_unavailable`] for a PostgreSQL client error (also for the async client on the
/// request path).
pub(crate) fn pg_unavailable(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    if let Some(code) = e.code() {
        // Class 08: connection exception; 57P01-57P03: admin or crash shutdown, cannot
        // connect now (starting up); 53300: too many connections.
        let c = code.code();
        return c.starts_with("08") || matches!(c, "57P01" | "57P02" | "57P03" | "53300");
    }
    // The client's error kinds are private; their text is fixed (tokio-postgres
    // `Kind`): no connection, a broken one, a handshake or a timeout.
    let text = e.to_string();
    [
        "error connecting to server",
        "error communicating with the server",
        "error performing TLS handshake",
        "timeout waiting for server",
    ]
    .iter()
    .any(|k| text.starts_with(k))
}
