//! The server's own connection to the registry database for the rate limit's identities
//! and budgets: issued tokens (looked up on every request, so `psi token add` and
//! `psi token revoke` take effect without a restart) and saved budgets. ADR 0016.

use crate::limits::{RateLimiter, unix_ms};
use crate::store::{Store, StoreError, TokenInfo};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// How often charged budgets are saved: a crash (not a shutdown) loses at most this much
/// of their charges.
pub(crate) const SAVE_EVERY: Duration = Duration::from_secs(5);

pub(crate) struct Accounts {
    /// `None` if the database could not be opened: then every authenticated route
    /// answers `internal` (fail closed: issued tokens cannot be checked).
    db: Option<Mutex<Store>>,
}

/// What the database says about a request's credential.
pub(crate) struct TokenCheck {
    /// Any token was ever issued (revoked ones included): authentication is on.
    pub(crate) any_issued: bool,
    /// The issued token with the presented digest, revoked or not.
    pub(crate) token: Option<TokenInfo>,
}

impl Accounts {
    /// Opens its own connection to `path` and restores the saved budgets into `limiter`.
    pub(crate) fn open(path: &Path, limiter: &RateLimiter) -> Accounts {
        let opened = Store::open(path).and_then(|store| {
            limiter.restore(store.budgets()?);
            Ok(store)
        });
        match opened {
            Ok(store) => Accounts {
                db: Some(Mutex::new(store)),
            },
            Err(e) => {
                tracing::error!(error = %e, "cannot open the token and budget tables; refusing requests");
                Accounts { db: None }
            }
        }
    }

    fn db(&self) -> Result<std::sync::MutexGuard<'_, Store>, StoreError> {
        self.db
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()))
            .ok_or_else(|| StoreError::Io(std::io::Error::other("the token database is not open")))
    }

    /// Blocking: the token with `digest` (if any is presented) and whether any exists.
    pub(crate) fn check(&self, digest: Option<&[u8; 32]>) -> Result<TokenCheck, StoreError> {
        let db = self.db()?;
        let token = match digest {
            Some(d) => db.token_by_digest(d)?,
            None => None,
        };
        Ok(TokenCheck {
            any_issued: token.is_some() || db.has_tokens()?,
            token,
        })
    }

    /// Blocking: saves the budgets charged since the last save and forgets saved rows that
    /// are full again (older than an hour).
    pub(crate) fn save_budgets(&self, limiter: &RateLimiter) {
        let rows = limiter.take_dirty();
        let forget_before = unix_ms(SystemTime::now()).saturating_sub(3_600_000);
        let saved = self
            .db()
            .and_then(|mut db| db.save_budgets(&rows, forget_before));
        if let Err(e) = saved {
            tracing::error!(error = %e, budgets = rows.len(), "saving rate-limit budgets failed; retrying");
            limiter.mark_dirty(rows.into_iter().map(|r| r.client));
        }
    }
}
