//! Budgets shared by every instance on one PostgreSQL database (issue 22): the hourly
//! token buckets of [`crate::limits`] as rows of a `budgets` table, charged and refunded
//! by single atomic statements, so that N concurrent charges against one budget give
//! exactly their sum and never more than the budget, whichever instances they hit.
//!
//! One row per (book, key): `remaining` as of `updated_ms`, refilled continuously at
//! `per_hour` per hour up to `per_hour` (the same bucket as the in-memory limiter). A key
//! without a row holds a full budget, so rows are only needed for budgets partly spent:
//! [`SharedBudgets::sweep`] deletes the rows that are full again.
//!
//! Time is the database's (`clock_timestamp()`), never an instance's: instances with skewed
//! clocks refill the same bucket at the same rate.
//!
//! How a charge stays atomic across a payer's levels (its own, its networks', the
//! ceiling; ADR 0038) and across instances: one statement locks the payer's rows
//! (`SELECT ... ORDER BY key FOR UPDATE`, always in key order, so two charges over
//! overlapping levels never deadlock), refills each to now, and updates all of them only
//! when every one can pay; a concurrent charge of the same rows waits for the lock and
//! then sees the charged values (READ COMMITTED re-reads a locked row's newest version).
//! Levels without a row are first inserted full (`ON CONFLICT DO NOTHING`: equal to no
//! row) and the charge runs again; a row swept between the two is inserted again.

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use std::time::Duration;
use thiserror::Error;

/// Which of the server's hourly budgets a row belongs to: the same caller key has one
/// bucket in each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Book {
    /// Queried items (`Config::items_per_hour`).
    Items,
    /// Probe bytes (`Config::probe_bytes_per_hour`).
    ProbeBytes,
    /// Full encoded-set download bytes (`Config::encoded_set_bytes_per_hour`).
    DownloadBytes,
    /// OT-PSI sessions (`Config::ot_sessions_per_hour`).
    OtSessions,
    /// Bytes posted to group mailboxes (`GroupLimits::bytes_per_hour`).
    GroupBytes,
}

impl Book {
    /// The `book` column's value.
    fn name(self) -> &'static str {
        match self {
            Book::Items => "items",
            Book::ProbeBytes => "probe_bytes",
            Book::DownloadBytes => "download_bytes",
            Book::OtSessions => "ot_sessions",
            Book::GroupBytes => "group_bytes",
        }
    }
}

/// One budget a charge draws from: its row key and its size (and hourly refill) now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LevelCap {
    /// The caller key of the level (a token id, an address, a network, the ceiling).
    pub key: String,
    /// Greater than zero: an unlimited level is left out by the caller.
    pub per_hour: u64,
}

/// A charge that did not go through: nothing was taken from any level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shortfall {
    /// Index (into the levels charged) of the level that needs the longest wait.
    pub level: usize,
    /// Seconds until every level could pay (an hour when a level can never hold it).
    pub wait: u64,
}

/// The database could not be asked or answered wrongly: the charge is neither granted
/// nor refused (the caller fails closed with a retryable error). Never carries a key.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum BudgetError {
    /// No connection (the database is down or unreachable, or the pool timed out).
    #[error("budget store unreachable: {0}")]
    Unavailable(String),
    /// A statement failed.
    #[error("budget store: {0}")]
    Db(String),
    /// The levels' rows kept disappearing under the charge (swept each time).
    #[error("budget store: the charge did not settle")]
    Unsettled,
}

impl From<deadpool_postgres::PoolError> for BudgetError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        BudgetError::Unavailable(e.to_string())
    }
}

impl From<tokio_postgres::Error> for BudgetError {
    fn from(e: tokio_postgres::Error) -> Self {
        // A database error's message and SQLSTATE only: its DETAIL can quote a key.
        match e.as_db_error() {
            Some(db) if !e.is_closed() => {
                BudgetError::Db(format!("{} ({})", db.message(), db.code().code()))
            }
            _ => BudgetError::Unavailable(e.to_string()),
        }
    }
}

/// The table. `remaining` is fractional (refills are continuous), `per_hour` the size the
/// bucket had at its last charge (what a refund and the sweep cap at).
pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS budgets (
    book text NOT NULL,
    key text NOT NULL,
    remaining double precision NOT NULL,
    per_hour bigint NOT NULL CHECK (per_hour > 0),
    updated_ms bigint NOT NULL,
    PRIMARY KEY (book, key)
)";

/// The database's clock in Unix milliseconds.
const NOW_MS: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// The charge: $1 book, $2 keys, $3 sizes (same order), $4 amount. Returns one row per
/// level found (key, tokens before the charge) with whether all were charged.
fn charge_sql() -> String {
    format!(
        "WITH lv AS (
            SELECT key, cap FROM unnest($2::text[], $3::bigint[]) AS l(key, cap)
        ),
        locked AS MATERIALIZED (
            SELECT b.key, b.remaining, b.updated_ms FROM budgets b
            WHERE b.book = $1 AND b.key = ANY($2::text[])
            ORDER BY b.key
            FOR UPDATE
        ),
        clock AS MATERIALIZED (SELECT {NOW_MS} AS ms FROM (SELECT count(*) FROM locked) AS after_locks),
        cur AS MATERIALIZED (
            SELECT l.key, lv.cap, c.ms,
                LEAST(lv.cap::float8,
                      l.remaining + GREATEST(c.ms - l.updated_ms, 0)::float8 * lv.cap::float8 / 3600000.0)
                    AS tokens
            FROM locked l JOIN lv USING (key) CROSS JOIN clock c
        ),
        verdict AS MATERIALIZED (
            SELECT count(*) = cardinality($2::text[]) AND coalesce(bool_and(tokens >= $4), false) AS pays
            FROM cur
        ),
        charged AS (
            UPDATE budgets b SET remaining = cur.tokens - $4, per_hour = cur.cap, updated_ms = cur.ms
            FROM cur, verdict
            WHERE verdict.pays AND b.book = $1 AND b.key = cur.key
            RETURNING b.key
        )
        SELECT cur.key, cur.tokens, (SELECT count(*) FROM charged) AS charged FROM cur"
    )
}

/// Inserts full rows for levels without one: $1 book, $2 keys, $3 sizes.
fn insert_sql() -> String {
    format!(
        "INSERT INTO budgets (book, key, remaining, per_hour, updated_ms)
         SELECT $1, key, cap::float8, cap, {NOW_MS}
         FROM unnest($2::text[], $3::bigint[]) AS l(key, cap)
         ORDER BY key
         ON CONFLICT (book, key) DO NOTHING"
    )
}

/// The refund: $1 book, $2 keys, $3 amount; each row refilled to now, given back the
/// amount, capped at its size. Rows locked in key order as in the charge.
fn refund_sql() -> String {
    format!(
        "WITH locked AS MATERIALIZED (
            SELECT b.key FROM budgets b
            WHERE b.book = $1 AND b.key = ANY($2::text[])
            ORDER BY b.key
            FOR UPDATE
        ),
        clock AS MATERIALIZED (SELECT {NOW_MS} AS ms FROM (SELECT count(*) FROM locked) AS after_locks)
        UPDATE budgets b SET
            remaining = LEAST(b.per_hour::float8,
                b.remaining + GREATEST(c.ms - b.updated_ms, 0)::float8 * b.per_hour::float8 / 3600000.0 + $3),
            updated_ms = c.ms
        FROM locked l, clock c
        WHERE b.book = $1 AND b.key = l.key"
    )
}

/// Deletes every row that is full again (the same as no row). Rows a charge holds are
/// skipped (`SKIP LOCKED`: the sweep never waits for a charge, so it cannot deadlock with
/// one locking several rows; the next sweep takes them).
fn sweep_sql() -> String {
    format!(
        "WITH full_again AS MATERIALIZED (
            SELECT book, key FROM budgets
            WHERE remaining + GREATEST({NOW_MS} - updated_ms, 0)::float8 * per_hour::float8 / 3600000.0
                  >= per_hour::float8
            ORDER BY book, key
            FOR UPDATE SKIP LOCKED
        )
        DELETE FROM budgets b USING full_again f WHERE b.book = f.book AND b.key = f.key"
    )
}

/// Seconds for a budget to refill completely, whatever its size (as in memory).
const REFILL_SECS: f64 = 3600.0;

/// How often a charge is tried again when a level's row was swept between its insert and
/// the charge (each try inserts it again: more than one in a row is already unlikely).
const TRIES: usize = 4;

/// The shared budgets on one database, charged through `pool` (async: never blocks a
/// worker thread).
#[derive(Clone)]
pub struct SharedBudgets {
    /// `Err`: the settings gave no usable pool (the reason, no secret): every charge is
    /// refused as [`BudgetError::Unavailable`] (fail closed).
    pool: Result<Pool, String>,
    /// Set once the table is known to exist: created by the first charge that finds it
    /// missing from this instance's view (idempotent; tried again after a failure).
    table: std::sync::Arc<tokio::sync::OnceCell<()>>,
}

/// Most connections one instance holds for its charges (they are short statements).
const POOL_SIZE: usize = 16;

/// How long a charge waits for a connection or for a new one to open: a database that
/// is down answers a charge with [`BudgetError::Unavailable`] within this, not never.
const CONNECT_WAIT: Duration = Duration::from_secs(5);

impl SharedBudgets {
    /// Budgets on `pool`'s database; [`SharedBudgets::create_schema`] once before use.
    pub fn new(pool: Pool) -> SharedBudgets {
        SharedBudgets {
            pool: Ok(pool),
            table: Default::default(),
        }
    }

    /// A pool of async connections for the request path. No connection is opened here.
    /// A connection the database closed (a restart) is found closed when next taken and
    /// replaced (`RecyclingMethod::Fast` checks that), so the instance reconnects by itself;
    /// every wait is bounded ([`CONNECT_WAIT`]).
    pub fn connect(
        config: tokio_postgres::Config,
        tls: tokio_postgres_rustls::MakeRustlsConnect,
    ) -> Result<SharedBudgets, BudgetError> {
        let mut config = config;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_WAIT);
        }
        let manager = Manager::from_config(
            config,
            tls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(CONNECT_WAIT))
            .create_timeout(Some(CONNECT_WAIT))
            .recycle_timeout(Some(CONNECT_WAIT))
            .build()
            .map_err(|e| BudgetError::Unavailable(e.to_string()))?;
        Ok(SharedBudgets::new(pool))
    }

    /// [`SharedBudgets::connect`] with what `--db postgres://...` names. Settings that
    /// give no pool (unreadable TLS roots: the registry's open fails on them first) give
    /// budgets that refuse every charge as unavailable, never a free pass.
    pub fn open(settings: &super::PgSettings) -> SharedBudgets {
        let pool = settings
            .connect_tls()
            .map_err(|e| BudgetError::Unavailable(e.to_string()))
            .and_then(|tls| Self::connect(settings.pg_config(), tls));
        match pool {
            Ok(b) => b,
            Err(e) => SharedBudgets {
                pool: Err(e.to_string()),
                table: Default::default(),
            },
        }
    }

    /// A connection from the pool (bounded wait); also the token lookups'
    /// ([`super::PgTokenLookup`]).
    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Client, BudgetError> {
        match &self.pool {
            Ok(pool) => Ok(pool.get().await?),
            Err(reason) => Err(BudgetError::Unavailable(reason.clone())),
        }
    }

    /// Creates the `budgets` table if missing (idempotent). Charges call it themselves
    /// the first time; a server need not.
    pub async fn create_schema(&self) -> Result<(), BudgetError> {
        self.table
            .get_or_try_init(|| async {
                let client = self.client().await?;
                client.batch_execute(SCHEMA).await?;
                Ok::<(), BudgetError>(())
            })
            .await?;
        Ok(())
    }

    /// Takes `amount` from every level in `book`, or from none: `Ok(Ok(()))` when charged,
    /// `Ok(Err(shortfall))` when a level cannot pay (nothing taken). Levels with the same
    /// key count once.
    pub async fn charge(
        &self,
        book: Book,
        levels: &[LevelCap],
        amount: u64,
    ) -> Result<Result<(), Shortfall>, BudgetError> {
        if levels.is_empty() {
            return Ok(Ok(()));
        }
        let mut keys: Vec<&str> = Vec::with_capacity(levels.len());
        let mut caps: Vec<i64> = Vec::with_capacity(levels.len());
        for l in levels {
            if !keys.contains(&l.key.as_str()) {
                keys.push(&l.key);
                caps.push(i64::try_from(l.per_hour).unwrap_or(i64::MAX));
            }
        }
        let need = amount as f64;
        self.create_schema().await?;
        let client = self.client().await?;
        let charge = client.prepare_cached(&charge_sql()).await?;
        for _ in 0..TRIES {
            let rows = client
                .query(&charge, &[&book.name(), &keys, &caps, &need])
                .await?;
            let charged: i64 = rows.first().map_or(0, |r| r.get(2));
            if charged > 0 {
                return Ok(Ok(()));
            }
            if rows.len() == keys.len() {
                return Ok(Err(shortfall(levels, &rows, need)));
            }
            // Levels without a row: a full budget each. A charge no level can ever
            // hold is refused without writing anything.
            if let Some(s) = never_fits(levels, need) {
                return Ok(Err(s));
            }
            let insert = client.prepare_cached(&insert_sql()).await?;
            client
                .execute(&insert, &[&book.name(), &keys, &caps])
                .await?;
        }
        Err(BudgetError::Unsettled)
    }

    /// Gives `amount` back to every level of `keys` in `book` (a charge for a run that
    /// then failed before the server gave anything), none above its size; levels whose
    /// row was swept are full already.
    pub async fn refund(
        &self,
        book: Book,
        keys: &[String],
        amount: u64,
    ) -> Result<(), BudgetError> {
        if keys.is_empty() || amount == 0 {
            return Ok(());
        }
        self.create_schema().await?;
        let client = self.client().await?;
        let refund = client.prepare_cached(&refund_sql()).await?;
        client
            .execute(&refund, &[&book.name(), &keys, &(amount as f64)])
            .await?;
        Ok(())
    }

    /// Deletes the rows that are full again (every book); returns how many.
    pub async fn sweep(&self) -> Result<u64, BudgetError> {
        self.create_schema().await?;
        let client = self.client().await?;
        Ok(client.execute(&sweep_sql(), &[]).await?)
    }

    /// What is left of `key`'s budget in `book` now (`None`: no row, a full budget).
    pub async fn remaining(&self, book: Book, key: &str) -> Result<Option<f64>, BudgetError> {
        self.create_schema().await?;
        let client = self.client().await?;
        let row = client
            .query_opt(
                &format!(
                    "SELECT LEAST(per_hour::float8, remaining + GREATEST({NOW_MS} - updated_ms, 0)::float8
                        * per_hour::float8 / 3600000.0) FROM budgets WHERE book = $1 AND key = $2"
                ),
                &[&book.name(), &key],
            )
            .await?;
        Ok(row.map(|r| r.get(0)))
    }
}

/// The wait of a level holding `tokens` of `cap` for `need` (as the in-memory limiter).
fn wait_secs(tokens: f64, cap: f64, need: f64) -> u64 {
    if need <= tokens {
        0
    } else if need > cap {
        REFILL_SECS as u64
    } else {
        ((need - tokens) * REFILL_SECS / cap).ceil().max(1.0) as u64
    }
}

/// The refusal from every level's tokens before the charge: the longest wait, and the
/// first level that needs it.
fn shortfall(levels: &[LevelCap], rows: &[tokio_postgres::Row], need: f64) -> Shortfall {
    let mut worst = Shortfall { level: 0, wait: 0 };
    for (i, l) in levels.iter().enumerate() {
        let tokens = rows
            .iter()
            .find(|r| r.get::<_, &str>(0) == l.key)
            .map_or(l.per_hour as f64, |r| r.get::<_, f64>(1));
        let wait = wait_secs(tokens, l.per_hour as f64, need);
        if wait > worst.wait {
            worst = Shortfall { level: i, wait };
        }
    }
    if worst.wait == 0 {
        // Every level could pay but the update did not run: only a level that went
        // missing does that, and it is inserted and tried again by the caller.
        worst.wait = 1;
    }
    worst
}

/// A charge larger than some level's whole budget: refused for an hour at that level.
fn never_fits(levels: &[LevelCap], need: f64) -> Option<Shortfall> {
    levels
        .iter()
        .position(|l| need > l.per_hour as f64)
        .map(|level| Shortfall {
            level,
            wait: REFILL_SECS as u64,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_match_the_in_memory_limiter() {
        assert_eq!(wait_secs(100.0, 3600.0, 50.0), 0);
        assert_eq!(wait_secs(600.0, 3600.0, 1000.0), 400);
        assert_eq!(wait_secs(0.0, 3600.0, 3601.0), 3600);
        assert_eq!(wait_secs(0.999, 3600.0, 1.0), 1);
    }
}
