//! Where the server keeps what outlives a process: the registry and its key epochs, the
//! accounts (issued tokens, saved budgets), and the work that brings a key epoch's OPRF
//! outputs and encoded set up to date. Each is a small trait here; [`sqlite`] is the
//! embedded default (one file, one instance, no setup), and the shared store of several
//! instances sits beside it (docs/deploy.md, docs/adr/0040-shared-store.md).
//!
//! - [`RegistryStore`]: entries, labels, the key of each epoch, the registry version and
//!   the stored encoded sets; what `psi import`, `psi rotate-key` and a server's load read
//!   and write; and the change log, which says what was net added and removed between two
//!   versions ([`RegistryStore::changes`], docs/adr/0055-registry-changes-in-the-store.md).
//! - [`SetWork`]: the steps a refresh is made of (outputs missing under the current key,
//!   storing them, storing an encoded set); [`refresh()`] is the one algorithm over them,
//!   run under the store's build lease so that of several instances exactly one computes.
//! - [`AccountStore`]: tokens and the rate limiter's saved budgets.
//! - [`BudgetStore`] (`budgets`): budgets charged in the store itself, atomically across
//!   instances; a store either charges them ([`Database::open_budgets`]) or keeps what a
//!   process charged in memory ([`AccountStore::save_budgets`]), never both
//!   (docs/adr/0052-budgets-in-the-store-contract.md).
//!
//! Errors never carry identifiers, labels or keys.

mod budgets;
mod contract;
mod error;
pub mod postgres;
mod refresh;
pub mod sqlite;
mod tokens;

use std::path::{Path, PathBuf};

pub use budgets::{Book, BudgetError, BudgetFuture, BudgetStore, LevelCap, Shortfall};
pub(crate) use contract::os_rng;
pub use contract::{
    AccountStore, BuildLease, ChangeCounts, ImportCounts, LoadedEntry, NewToken, Readiness,
    RegistryChanges, RegistryStore, Revoked, SavedBudget, SetWork, StoredSet, TokenInfo,
    read_snapshot,
};
pub use error::{SettingsError, StoreError};
pub use postgres::{PgAccounts, PgSettings, PgStore, PgTokenLookup, TlsMode};
pub(crate) use refresh::encode_set;
pub use refresh::{RefreshStats, etag, refresh};
pub use sqlite::Store;
pub use tokens::token_digest;

/// Where the store is: what `--db` names.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Database {
    /// A SQLite file (`:memory:`: a private in-memory store, for tests and the demo).
    Sqlite(PathBuf),
    /// A PostgreSQL database shared by several instances (`postgres://...`).
    Postgres(PgSettings),
}

impl Database {
    /// A private in-memory SQLite store.
    pub fn memory() -> Database {
        Database::Sqlite(PathBuf::from(":memory:"))
    }

    /// The SQLite file, for a SQLite store.
    pub fn sqlite_path(&self) -> Option<&Path> {
        match self {
            Database::Sqlite(p) => Some(p),
            Database::Postgres(_) => None,
        }
    }

    /// True for an in-memory store: nothing to reload, watch or rotate from.
    pub fn is_memory(&self) -> bool {
        self.sqlite_path()
            .is_some_and(|p| p.as_os_str() == ":memory:")
    }

    /// Opens the registry (and its epochs), creating what is missing. Blocking.
    pub fn open_registry(&self) -> Result<Box<dyn RegistryStore>, StoreError> {
        match self {
            Database::Sqlite(p) => Ok(Box::new(Store::open(p)?)),
            Database::Postgres(pg) => postgres::PgStore::open_registry(pg),
        }
    }

    /// Opens the registry for reading only, for a server that watches for changes other
    /// processes make (`psi import`, `psi rotate-key`, other instances). Blocking.
    pub fn open_registry_read_only(&self) -> Result<Box<dyn RegistryStore>, StoreError> {
        match self {
            Database::Sqlite(p) => Ok(Box::new(Store::open_read_only(p)?)),
            Database::Postgres(pg) => postgres::PgStore::open_registry_read_only(pg),
        }
    }

    /// Opens the accounts (tokens, saved budgets). Blocking.
    pub fn open_accounts(&self) -> Result<Box<dyn AccountStore>, StoreError> {
        match self {
            Database::Sqlite(p) => Ok(Box::new(Store::open(p)?)),
            Database::Postgres(pg) => postgres::PgStore::open_accounts(pg),
        }
    }

    /// The budgets charged in the store, with the token lookups that share their
    /// connections, for a store that charges budgets itself (the shared store); `None`
    /// for one whose process holds them and saves them through
    /// [`AccountStore::save_budgets`] (SQLite). Opens no connection (the first charge
    /// does; settings that give no pool give budgets that refuse every charge as
    /// unavailable, never a free pass).
    pub fn open_budgets(&self) -> Option<RequestPool> {
        match self {
            Database::Sqlite(_) => None,
            Database::Postgres(pg) => {
                let pool = postgres::budgets::SharedBudgets::open(pg);
                Some(RequestPool {
                    tokens: PgTokenLookup::new(pool.clone()),
                    budgets: std::sync::Arc::new(pool),
                })
            }
        }
    }
}

/// What a server on a store that charges budgets itself uses on the request path: one
/// pool of async connections for the charges and the token lookups.
#[derive(Clone)]
pub struct RequestPool {
    /// The budgets, charged in the store.
    pub budgets: std::sync::Arc<dyn BudgetStore>,
    /// Token lookups on the same connections.
    pub tokens: PgTokenLookup,
}

/// Names the store without credentials (for logs and messages).
impl std::fmt::Display for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Database::Sqlite(p) => write!(f, "{}", p.display()),
            Database::Postgres(pg) => write!(f, "{pg}"),
        }
    }
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Database({self})")
    }
}

impl From<PathBuf> for Database {
    fn from(p: PathBuf) -> Database {
        Database::Sqlite(p)
    }
}
