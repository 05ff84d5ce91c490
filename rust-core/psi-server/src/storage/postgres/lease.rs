//! The build lease of the shared store: of several instances, one computes an epoch's
//! outputs and encoded set at a time.
//!
//! A session-level advisory lock (`pg_advisory_lock`) taken on the store's own
//! connection. PostgreSQL counts a session's holds of one lock, so taking it again on the
//! same store object (the key rotation schedule holds it, then the refresh it starts takes
//! it again) returns at once and each [`PgLease`] releases one hold; the lock is free when
//! the outermost one drops. When the holder's connection ends (the instance exits, is
//! killed mid-build, or its backend is terminated), PostgreSQL releases the lock, and the
//! next instance that asks goes on from the outputs already stored.

use super::super::contract::BuildLease;
use super::super::error::{StoreError, error_text};
use std::sync::{Arc, Mutex, PoisonError};

/// The advisory lock key of the build lease ("psi" and 2). Advisory locks are per
/// database: stores in other databases of the cluster do not share it.
pub(crate) const BUILD_LOCK: i64 = 0x7073_6900_0000_0002;

/// One hold of the build lease.
pub(crate) struct PgLease {
    client: Arc<Mutex<postgres::Client>>,
}

impl PgLease {
    /// Waits for, then takes, one hold of the lease on `client`'s session.
    pub(crate) fn take(client: &Arc<Mutex<postgres::Client>>) -> Result<PgLease, StoreError> {
        client
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .execute("SELECT pg_advisory_lock($1)", &[&BUILD_LOCK])?;
        Ok(PgLease {
            client: client.clone(),
        })
    }
}

impl BuildLease for PgLease {}

impl Drop for PgLease {
    fn drop(&mut self) {
        // A dead connection has released the lock already: nothing to undo then.
        let mut client = self.client.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(e) = client.execute("SELECT pg_advisory_unlock($1)", &[&BUILD_LOCK]) {
            tracing::debug!(error = %error_text(&e), "build lease release failed");
        }
    }
}
