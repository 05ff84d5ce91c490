//! The budgets in the store contract (docs/adr/0052-budgets-in-the-store-contract.md): the
//! server's hourly budgets as a store keeps them, in one of exactly two ways.
//!
//! - **Charged in the store** ([`BudgetStore`]): every charge, refund and sweep is a
//!   statement of the store, atomic across every process on it, so a caller spreading
//!   requests over several instances still has one budget. The shared store does this
//!   (PostgreSQL, `storage/postgres/budgets.rs`); [`Database::open_budgets`] opens it.
//! - **Held by the process, saved to the store** ([`AccountStore::budgets`] and
//!   [`AccountStore::save_budgets`]): one instance charges its budgets in memory and saves
//!   the partly spent ones every few seconds and at shutdown, so a restart does not
//!   refill them (ADR 0016). The embedded store does this (SQLite): a charge per request
//!   never waits for the file's write lock, which an import holds for seconds.
//!
//! A store does one or the other, never both: [`Database::open_budgets`] is `Some` exactly
//! for a store whose [`AccountStore::budgets`] is always empty. Errors never carry a key.
//!
//! [`Database::open_budgets`]: super::Database::open_budgets
//! [`AccountStore::budgets`]: super::AccountStore::budgets
//! [`AccountStore::save_budgets`]: super::AccountStore::save_budgets

use std::future::Future;
use std::pin::Pin;
use thiserror::Error;

/// Which of the server's hourly budgets a charge is in: the same caller key has one
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
    /// The name a store keeps the book under.
    pub fn name(self) -> &'static str {
        match self {
            Book::Items => "items",
            Book::ProbeBytes => "probe_bytes",
            Book::DownloadBytes => "download_bytes",
            Book::OtSessions => "ot_sessions",
            Book::GroupBytes => "group_bytes",
        }
    }
}

/// One budget a charge draws from: its key and its size (and hourly refill) now.
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

/// The store could not be asked or answered wrongly: the charge is neither granted nor
/// refused (the caller fails closed with a retryable error). Never carries a key.
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

/// What a [`BudgetStore`] call returns: its work runs on the caller's async runtime and
/// never blocks a worker thread.
pub type BudgetFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, BudgetError>> + Send + 'a>>;

/// Budgets charged in the store (see the module docs). Buckets refill continuously at
/// their size per hour up to their size, by the store's clock; a key that was never
/// charged (or whose bucket is full again and was swept) holds a full budget.
pub trait BudgetStore: Send + Sync {
    /// Takes `amount` from every level in `book`, or from none: `Ok(Ok(()))` when charged,
    /// `Ok(Err(shortfall))` when a level cannot pay (nothing taken; a charge larger than
    /// a level's whole size waits an hour). Levels with the same key count once; no
    /// levels: charged.
    fn charge<'a>(
        &'a self,
        book: Book,
        levels: &'a [LevelCap],
        amount: u64,
    ) -> BudgetFuture<'a, Result<(), Shortfall>>;

    /// Gives `amount` back to every level of `keys` in `book` (a charge for a run that
    /// failed before the server gave anything), none above its size.
    fn refund<'a>(&'a self, book: Book, keys: &'a [String], amount: u64) -> BudgetFuture<'a, ()>;

    /// Forgets the buckets that are full again (every book); returns how many.
    fn sweep(&self) -> BudgetFuture<'_, u64>;

    /// What is left of `key`'s budget in `book` now (`None`: never charged or swept, a
    /// full budget).
    fn remaining<'a>(&'a self, book: Book, key: &'a str) -> BudgetFuture<'a, Option<f64>>;
}
