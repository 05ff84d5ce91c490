//! The server's own connection to the registry database for the rate limit's identities
//! and budgets: issued tokens (looked up on every request, so `psi token add` and
//! `psi token revoke` take effect without a restart) and saved budgets. ADR 0016.

use crate::limits::{RateLimiter, unix_ms};
use crate::storage::{AccountStore, Database, StoreError, TokenInfo};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// How often charged budgets are saved: a crash (not a shutdown) loses at most this much
/// of their charges.
pub(crate) const SAVE_EVERY: Duration = Duration::from_secs(5);

pub(crate) struct Accounts {
    /// Where to (re)connect.
    database: Database,
    /// Token lookups. `None` while the database cannot be opened (then every
    /// authenticated route is refused: issued tokens cannot be checked, fail closed) or
    /// after the connection broke; the next lookup opens a new one, so an instance
    /// reconnects by itself after a database restart.
    db: Mutex<Option<Box<dyn AccountStore>>>,
    /// Budget saves, on a connection of their own: a save waiting for SQLite's write lock
    /// (during an import or a rotation) never holds up token lookups (WAL readers do not
    /// wait for writers).
    saver: Mutex<Option<Box<dyn AccountStore>>>,
    /// Set once any token was seen in the database. Tokens are never deleted (revoked ones
    /// stay), so it never goes back: later requests without a token skip the database.
    issued: AtomicBool,
    /// The database's last answer per presented credential (its digest; `None`: no
    /// token), for the steps of sessions already running while the database is away
    /// ([`Accounts::remembered`]).
    recent: Mutex<Remembered>,
    /// How long an answer in `recent` may stand in: the session lifetime.
    remember_for: Duration,
}

/// Most credentials remembered in [`Accounts::recent`]; beyond it answers are not
/// remembered until old ones expire (bounded memory; a step that finds none during an
/// outage is refused, retryably).
const REMEMBERED: usize = 65_536;

/// What the database says about a request's credential.
#[derive(Clone)]
pub(crate) struct TokenCheck {
    /// Any token was ever issued (revoked ones included): authentication is on.
    pub(crate) any_issued: bool,
    /// The issued token with the presented digest, revoked or not.
    pub(crate) token: Option<TokenInfo>,
}

/// [`Accounts::recent`]: per credential digest, the answer and when it was given.
type Remembered = HashMap<Option<[u8; 32]>, (TokenCheck, Instant)>;

/// A connection slot of [`Accounts`].
type Conn = Mutex<Option<Box<dyn AccountStore>>>;

impl Accounts {
    /// Opens its own connections to `db` and restores the saved budgets into `limiter`.
    /// `remember_for`: how long a token lookup's answer may stand in for the database
    /// while it is away (the session lifetime).
    pub(crate) fn open(db: &Database, limiter: &RateLimiter, remember_for: Duration) -> Accounts {
        let opened = db.open_accounts().and_then(|store| {
            limiter.restore(store.budgets()?);
            Ok(store)
        });
        let saver = db.open_accounts();
        let (conn, saver) = match (opened, saver) {
            (Ok(conn), Ok(saver)) => (Some(conn), Some(saver)),
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!(error = %e, "cannot open the token and budget tables; refusing requests until they open");
                (None, None)
            }
        };
        Accounts {
            database: db.clone(),
            db: Mutex::new(conn),
            saver: Mutex::new(saver),
            issued: AtomicBool::new(false),
            recent: Mutex::new(HashMap::new()),
            remember_for,
        }
    }

    /// Runs `f` on the connection in `conn`, opening one first if there is none. A
    /// failure that says the database is unreachable drops the connection, so that the
    /// next call opens a new one.
    fn with_conn<T>(
        &self,
        conn: &Conn,
        f: impl FnOnce(&mut dyn AccountStore) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut slot = conn.lock().unwrap_or_else(|e| e.into_inner());
        let mut store = match slot.take() {
            Some(store) => store,
            None => self.database.open_accounts()?,
        };
        let r = f(store.as_mut());
        if !r.as_ref().is_err_and(crate::store_health::is_unavailable) {
            *slot = Some(store);
        }
        r
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
        let check = self.with_conn(&self.db, |db| {
            let token = match digest {
                Some(d) => db.token_by_digest(d)?,
                None => None,
            };
            if token.is_some() {
                self.issued.store(true, Ordering::Relaxed);
            }
            Ok(TokenCheck {
                any_issued: token.is_some() || self.any_issued(db)?,
                token,
            })
        })?;
        self.remember(digest, &check);
        Ok(check)
    }

    fn remember(&self, digest: Option<&[u8; 32]>, check: &TokenCheck) {
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if recent.len() >= REMEMBERED {
            let ttl = self.remember_for;
            recent.retain(|_, (_, at)| at.elapsed() < ttl);
        }
        if recent.len() < REMEMBERED || recent.contains_key(&digest.copied()) {
            recent.insert(digest.copied(), (check.clone(), Instant::now()));
        }
    }

    /// What the database last said about this credential, if it said it within the
    /// session lifetime: it stands in for a lookup while the database is away, for the
    /// steps of sessions already running (never to admit a new one: store_health.rs).
    pub(crate) fn remembered(&self, digest: Option<&[u8; 32]>) -> Option<TokenCheck> {
        let recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent
            .get(&digest.copied())
            .filter(|(_, at)| at.elapsed() < self.remember_for)
            .map(|(c, _)| c.clone())
    }

    /// Blocking: saves the budgets charged since the last save and forgets saved rows that
    /// are full again.
    pub(crate) fn save_budgets(&self, limiter: &RateLimiter) {
        let rows = limiter.take_dirty();
        let now = unix_ms(SystemTime::now());
        let saved = self.with_conn(&self.saver, |db| db.save_budgets(&rows, now));
        if let Err(e) = saved {
            tracing::error!(error = %e, budgets = rows.len(), "saving rate-limit budgets failed; retrying");
            limiter.mark_dirty(rows.into_iter().map(|r| r.client));
        }
    }
}

/// A blocking PostgreSQL client must not be dropped on an async worker (its drop blocks on
/// a runtime of its own, which panics there): the state of a stopped server may be
/// dropped by its last task, so the connections go on a thread of their own.
impl Drop for Accounts {
    fn drop(&mut self) {
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let conns = [&mut self.db, &mut self.saver]
            .map(|c| c.get_mut().unwrap_or_else(|e| e.into_inner()).take());
        if conns.iter().any(Option::is_some) {
            let _ = std::thread::Builder::new()
                .name("psi-store-drop".into())
                .spawn(move || drop(conns));
        }
    }
}
