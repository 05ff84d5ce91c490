//! The server's own connection to the registry database for the rate limit's identities
//! and budgets: issued tokens and saved budgets. ADR 0016.
//!
//! Tokens are looked up so that `psi token add` and `psi token revoke` take effect
//! without a restart: with SQLite on every request that presents one (a local index
//! lookup); with PostgreSQL through the async pool, each answer reused for [`FRESH_FOR`],
//! and a request without a credential answered from the "any tokens" flag the store
//! watcher keeps fresh. Only answers that name an issued token are remembered for an
//! outage; unknown credentials never fill memory. docs/adr/0046-remembered-credentials.md.

use crate::limits::{RateLimiter, unix_ms};
use crate::remember::Expiring;
use crate::storage::{AccountStore, BudgetError, Database, PgTokenLookup, StoreError, TokenInfo};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// How often charged budgets are saved: a crash (not a shutdown) loses at most this much
/// of their charges.
pub(crate) const SAVE_EVERY: Duration = Duration::from_secs(5);

pub(crate) struct Accounts {
    /// Where to (re)connect.
    database: Database,
    /// Token lookups on the request path.
    lookup: Lookup,
    /// Budget saves, on a connection of their own: a save waiting for SQLite's write lock
    /// (during an import or a rotation) never holds up token lookups (WAL readers do not
    /// wait for writers). With PostgreSQL it saves nothing (budgets are charged in the
    /// database directly).
    saver: Conn,
    /// Set once any token was seen in the database. Tokens are never deleted (revoked ones
    /// stay), so it never goes back.
    issued: AtomicBool,
    /// True once `issued` was answered by the database and is kept fresh by the store
    /// watcher ([`Accounts::look_for_tokens`], PostgreSQL with `watch_store` only): from
    /// then on a request without a credential is answered without a lookup.
    issued_known: AtomicBool,
    /// Whether the store watcher keeps `issued` fresh (see `issued_known`).
    watched: bool,
    /// The database's last answers that named an issued token (revoked or not), for
    /// [`Accounts::remembered`] while the database is away, and as a short positive cache
    /// ([`Accounts::fresh_for`]). Unknown credentials are never put here: a stranger's
    /// made-up tokens cannot fill it (issue 35 item 3).
    known: Mutex<Expiring<TokenInfo>>,
    /// Credentials the database just said it does not know: a short negative cache
    /// ([`Accounts::fresh_for`]; small, oldest evicted first).
    unknown: Mutex<Expiring<()>>,
    /// How long an answer may be reused without asking the database (zero: every
    /// credential is looked up, as with SQLite, so issuing and revoking take effect at once).
    fresh_for: Duration,
}

/// Where the request path looks tokens up.
enum Lookup {
    /// One blocking connection (SQLite: a local index lookup), on a blocking thread.
    Blocking(Conn),
    /// The async pool of the shared budgets (PostgreSQL: a round trip each).
    Pool(PgTokenLookup),
}

/// Most credentials naming an issued token remembered in [`Accounts::known`] (the oldest
/// is forgotten first; a step that finds none during an outage is refused, retryably).
const REMEMBERED: usize = 65_536;

/// Most unknown credentials in [`Accounts::unknown`].
const UNKNOWN_REMEMBERED: usize = 4_096;

/// How long a PostgreSQL instance reuses the database's answer about a credential: a
/// token issued or revoked through another instance takes effect within this.
pub(crate) const FRESH_FOR: Duration = Duration::from_secs(1);

/// What the database says about a request's credential.
#[derive(Clone)]
pub(crate) struct TokenCheck {
    /// Any token was ever issued (revoked ones included): authentication is on.
    pub(crate) any_issued: bool,
    /// The issued token with the presented digest, revoked or not.
    pub(crate) token: Option<TokenInfo>,
}

/// A token lookup that got no answer.
#[derive(Debug)]
pub(crate) enum LookupError {
    /// The database does not answer (store_health.rs); the text names no credential.
    Unavailable(String),
    /// It answered with an error.
    Failed(String),
}

impl std::fmt::Display for LookupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LookupError::Unavailable(e) | LookupError::Failed(e) => f.write_str(e),
        }
    }
}

impl From<StoreError> for LookupError {
    fn from(e: StoreError) -> Self {
        if crate::store_health::is_unavailable(&e) {
            LookupError::Unavailable(e.to_string())
        } else {
            LookupError::Failed(e.to_string())
        }
    }
}

impl From<BudgetError> for LookupError {
    fn from(e: BudgetError) -> Self {
        match e {
            BudgetError::Unavailable(_) => LookupError::Unavailable(e.to_string()),
            _ => LookupError::Failed(e.to_string()),
        }
    }
}

/// A connection slot of [`Accounts`].
type Conn = Mutex<Option<Box<dyn AccountStore>>>;

impl Accounts {
    /// Opens its own connections to `db` and restores the saved budgets into `limiter`.
    /// `remember_for`: how long a token lookup's answer may stand in for the database
    /// while it is away (the session lifetime). `pool`: PostgreSQL's request-path pool
    /// (token lookups go through it); `watched`: the store watcher runs and calls
    /// [`Accounts::look_for_tokens`].
    pub(crate) fn open(
        db: &Database,
        limiter: &RateLimiter,
        remember_for: Duration,
        pool: Option<PgTokenLookup>,
        watched: bool,
    ) -> Accounts {
        let opened = db.open_accounts().and_then(|store| {
            limiter.restore(store.budgets()?);
            Ok(store)
        });
        let (lookup, saver, fresh_for) = match pool {
            Some(pool) => {
                let saver = opened.map_err(|e| {
                    tracing::error!(error = %e, "cannot open the token tables; refusing requests until they open");
                });
                (Lookup::Pool(pool), saver.ok(), FRESH_FOR)
            }
            None => {
                let (conn, saver) = match (opened, db.open_accounts()) {
                    (Ok(conn), Ok(saver)) => (Some(conn), Some(saver)),
                    (Err(e), _) | (_, Err(e)) => {
                        tracing::error!(error = %e, "cannot open the token and budget tables; refusing requests until they open");
                        (None, None)
                    }
                };
                (Lookup::Blocking(Mutex::new(conn)), saver, Duration::ZERO)
            }
        };
        Accounts {
            database: db.clone(),
            lookup,
            saver: Mutex::new(saver),
            issued: AtomicBool::new(false),
            issued_known: AtomicBool::new(false),
            watched: watched && fresh_for > Duration::ZERO,
            known: Mutex::new(Expiring::new(REMEMBERED, remember_for.max(fresh_for))),
            unknown: Mutex::new(Expiring::new(UNKNOWN_REMEMBERED, fresh_for)),
            fresh_for,
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

    /// Whether any token was ever issued, when that is known without asking: once one
    /// was seen, or while the store watcher keeps the answer fresh.
    fn issued_now(&self) -> Option<bool> {
        let issued = self.issued.load(Ordering::Relaxed);
        (issued || (self.watched && self.issued_known.load(Ordering::Relaxed))).then_some(issued)
    }

    fn saw_issued(&self, any: bool) {
        if any {
            self.issued.store(true, Ordering::Relaxed);
        }
        if self.watched {
            self.issued_known.store(true, Ordering::Relaxed);
        }
    }

    /// The store watcher's look (PostgreSQL): whether any token exists now, so that a
    /// request without a credential needs no lookup ([`Accounts::check`]). The first
    /// `psi token add` turns authentication on within one watch interval.
    pub(crate) async fn look_for_tokens(&self) -> Result<(), LookupError> {
        if let (Lookup::Pool(pool), None | Some(false)) = (&self.lookup, self.issued_now()) {
            let any = pool.has_tokens().await?;
            self.saw_issued(any);
        }
        Ok(())
    }

    /// True when `digest` named a valid token in an answer of the last session lifetime:
    /// such a credential is not charged to its address's budget of credentials not known
    /// valid (it is still looked up, [`Accounts::check`]).
    pub(crate) fn known_valid(&self, digest: &[u8; 32]) -> bool {
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        known
            .get(digest, Instant::now())
            .is_some_and(|(t, _)| !t.revoked)
    }

    /// A fresh answer about `digest` from memory (PostgreSQL only: within
    /// [`FRESH_FOR`] of the database's answer), without a lookup.
    pub(crate) fn cached(&self, digest: &[u8; 32]) -> Option<TokenCheck> {
        if self.fresh_for.is_zero() {
            return None;
        }
        let now = Instant::now();
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((token, age)) = known.get(digest, now)
            && age < self.fresh_for
        {
            return Some(TokenCheck {
                any_issued: true,
                token: Some(token),
            });
        }
        drop(known);
        let unknown = self.unknown.lock().unwrap_or_else(|e| e.into_inner());
        unknown.get(digest, now).map(|_| TokenCheck {
            any_issued: self.issued.load(Ordering::Relaxed),
            token: None,
        })
    }

    /// The token with `digest` (if any is presented) and whether any exists: from memory
    /// when fresh ([`Accounts::cached`]; a request without a credential while the watcher
    /// keeps the "any tokens" answer fresh), else from the database.
    pub(crate) async fn check(
        self: &Arc<Self>,
        digest: Option<&[u8; 32]>,
    ) -> Result<TokenCheck, LookupError> {
        match digest {
            None => {
                if let Some(any) = self.issued_now() {
                    return Ok(TokenCheck {
                        any_issued: any,
                        token: None,
                    });
                }
            }
            Some(d) => {
                if let Some(c) = self.cached(d) {
                    return Ok(c);
                }
            }
        }
        let digest = digest.copied();
        let (token, any) = match &self.lookup {
            Lookup::Pool(pool) => {
                let token = match &digest {
                    Some(d) => pool.token_by_digest(d).await?,
                    None => None,
                };
                let any = match (&token, self.issued_now()) {
                    (Some(_), _) => true,
                    (None, Some(any)) => any,
                    (None, None) => pool.has_tokens().await?,
                };
                (token, any)
            }
            Lookup::Blocking(_) => {
                let me = self.clone();
                tokio::task::spawn_blocking(move || {
                    let Lookup::Blocking(conn) = &me.lookup else {
                        unreachable!()
                    };
                    me.with_conn(conn, |db| {
                        let token = match &digest {
                            Some(d) => db.token_by_digest(d)?,
                            None => None,
                        };
                        let any = match (&token, me.issued.load(Ordering::Relaxed)) {
                            (Some(_), _) | (None, true) => true,
                            (None, false) => db.has_tokens()?,
                        };
                        Ok((token, any))
                    })
                })
                .await
                .map_err(|_| LookupError::Failed("token lookup task failed".into()))?
                .map_err(LookupError::from)?
            }
        };
        self.saw_issued(any);
        if let Some(d) = digest {
            self.remember(d, token.as_ref());
        }
        Ok(TokenCheck {
            any_issued: any,
            token,
        })
    }

    /// Keeps the answer about `digest`: one naming a token in `known`; an unknown
    /// credential only in the short negative cache (PostgreSQL), never in `known`.
    fn remember(&self, digest: [u8; 32], token: Option<&TokenInfo>) {
        let now = Instant::now();
        match token {
            Some(t) => {
                self.known
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .put(digest, t.clone(), now);
            }
            None => {
                // A token that was known is gone from the answers (never happens: tokens
                // are not deleted; kept for clarity).
                self.known
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&digest);
                if !self.fresh_for.is_zero() {
                    self.unknown
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .put(digest, (), now);
                }
            }
        }
    }

    /// What the database last said about this credential, if it said it within the
    /// session lifetime: it stands in for a lookup while the database is away, for the
    /// steps of sessions already running (never to admit a new one: store_health.rs).
    /// A credential naming no token is not remembered: while no token was ever seen it
    /// is a caller without one, else it waits for the database.
    pub(crate) fn remembered(&self, digest: Option<&[u8; 32]>) -> Option<TokenCheck> {
        let issued = self.issued.load(Ordering::Relaxed);
        let Some(d) = digest else {
            return Some(TokenCheck {
                any_issued: issued,
                token: None,
            });
        };
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        match known.get(d, Instant::now()) {
            Some((token, _)) => Some(TokenCheck {
                any_issued: true,
                token: Some(token),
            }),
            None if !issued => Some(TokenCheck {
                any_issued: false,
                token: None,
            }),
            None => None,
        }
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
        let lookup = match &mut self.lookup {
            Lookup::Blocking(c) => c.get_mut().unwrap_or_else(|e| e.into_inner()).take(),
            Lookup::Pool(_) => None,
        };
        let conns = [
            lookup,
            self.saver
                .get_mut()
                .unwrap_or_else(|e| e.into_inner())
                .take(),
        ];
        if conns.iter().any(Option::is_some) {
            let _ = std::thread::Builder::new()
                .name("psi-store-drop".into())
                .spawn(move || drop(conns));
        }
    }
}
