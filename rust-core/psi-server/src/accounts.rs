//! The server's own connection to the registry database for the rate limit's identities
//! and budgets: issued tokens (looked up on every request, so `psi token add` and
//! `psi token revoke` take effect without a restart) and saved budgets. ADR 0016.

use crate::limits::{RateLimiter, unix_ms};
use crate::storage::{AccountStore, Database, StoreError, TokenInfo};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

/// How often charged budgets are saved: a crash (not a shutdown) loses at most this much
/// of their charges.
pub(crate) const SAVE_EVERY: Duration = Duration::from_secs(5);

pub(crate) struct Accounts {
    /// Token lookups. `None` if the database could not be opened: then every
    /// authenticated route answers `internal` (fail closed: issued tokens cannot be
    /// checked).
    db: Option<Mutex<Box<dyn AccountStore>>>,
    /// Budget saves, on a connection of their own: a save waiting for SQLite's write lock
    /// (during an import or a rotation) never holds up token lookups (WAL readers do not
    /// wait for writers).
    saver: Option<Mutex<Box<dyn AccountStore>>>,
    /// Set once any token was seen in the database. Tokens are never deleted (revoked ones
    /// stay), so it never goes back: later requests without a token skip the database.
    issued: AtomicBool,
}

/// What the database says about a request's credential.
pub(crate) struct TokenCheck {
    /// Any token was ever issued (revoked ones included): authentication is on.
    pub(crate) any_issued: bool,
    /// The issued token with the presented digest, revoked or not.
    pub(crate) token: Option<TokenInfo>,
}

impl Accounts {
    /// Opens its own connections to `db` and restores the saved budgets into `limiter`.
    pub(crate) fn open(db: &Database, limiter: &RateLimiter) -> Accounts {
        let opened = db.open_accounts().and_then(|store| {
            limiter.restore(store.budgets()?);
            Ok(store)
        });
        let saver = db.open_accounts();
        let (db, saver) = match (opened, saver) {
            (Ok(db), Ok(saver)) => (Some(Mutex::new(db)), Some(Mutex::new(saver))),
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!(error = %e, "cannot open the token and budget tables; refusing requests");
                (None, None)
            }
        };
        Accounts {
            db,
            saver,
            issued: AtomicBool::new(false),
        }
    }

    fn open_conn(
        conn: &Option<Mutex<Box<dyn AccountStore>>>,
    ) -> Result<std::sync::MutexGuard<'_, Box<dyn AccountStore>>, StoreError> {
        conn.as_ref()
            .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()))
            .ok_or_else(|| StoreError::Io(std::io::Error::other("the token database is not open")))
    }

    fn db(&self) -> Result<std::sync::MutexGuard<'_, Box<dyn AccountStore>>, StoreError> {
        Self::open_conn(&self.db)
    }

    /// Whether any token was ever issued (the database is asked until one was: the first
    /// `psi token add` turns authentication on at the next request).
    fn any_issued(&self, db: &dyn AccountStore) -> Result<bool, StoreError> {
        if self.issued.load(Ordering::Relaxed) {
            return Ok(true);
        }
        let any = db.has_tokens()?;
        if any {
            self.issued.store(true, Ordering::Relaxed);
        }
        Ok(any)
    }

    /// Blocking: the token with `digest` (if any is presented) and whether any exists.
    pub(crate) fn check(&self, digest: Option<&[u8; 32]>) -> Result<TokenCheck, StoreError> {
        let db = self.db()?;
        let token = match digest {
            Some(d) => db.token_by_digest(d)?,
            None => None,
        };
        if token.is_some() {
            self.issued.store(true, Ordering::Relaxed);
        }
        Ok(TokenCheck {
            any_issued: token.is_some() || self.any_issued(db.as_ref())?,
            token,
        })
    }

    /// Blocking: saves the budgets charged since the last save and forgets saved rows that
    /// are full again.
    pub(crate) fn save_budgets(&self, limiter: &RateLimiter) {
        let rows = limiter.take_dirty();
        let now = unix_ms(SystemTime::now());
        let saved = Self::open_conn(&self.saver).and_then(|mut db| db.save_budgets(&rows, now));
        if let Err(e) = saved {
            tracing::error!(error = %e, budgets = rows.len(), "saving rate-limit budgets failed; retrying");
            limiter.mark_dirty(rows.into_iter().map(|r| r.client));
        }
    }
}
