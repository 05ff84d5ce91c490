//! The shared store of several instances: PostgreSQL (`--db postgres://...`,
//! docs/deploy.md "Tables").
//!
//! - [`settings`]: what the URL names, the password, TLS, the at-rest key file.
//! - `schema`: the tables, created on first open (docs/deploy.md "Tables").
//! - [`PgStore`] (`registry`): the registry and its key epochs, keys sealed under the
//!   at-rest key; `lease`: the build lease, an advisory lock.
//! - [`PgAccounts`] (`accounts`): issued tokens; [`PgTokenLookup`]: their lookups on the
//!   request path, on the budgets' async pool.
//! - [`budgets`]: the hourly budgets every instance charges, atomically, in one table
//!   (the contract's [`BudgetStore`](super::BudgetStore)).
//! - `import`: the bulk path of `psi import` (`COPY` into a staging table, one merge).
//! - `changes`: the change log, net additions and removals between versions.

mod accounts;
pub mod budgets;
mod changes;
mod import;
mod lease;
mod registry;
mod schema;
pub mod settings;

pub use super::error::SettingsError;
pub use settings::{PgSettings, TlsMode};

pub use accounts::{PgAccounts, PgTokenLookup};
pub use registry::PgStore;

use super::contract::{AccountStore, RegistryStore};
use super::error::StoreError;

impl PgStore {
    /// Opens the registry (creating the tables that are missing), boxed as
    /// [`super::Database::open_registry`] gives it.
    pub fn open_registry(settings: &PgSettings) -> Result<Box<dyn RegistryStore>, StoreError> {
        Ok(Box::new(PgStore::open(settings)?))
    }

    /// Opens the registry read-only, boxed.
    pub fn open_registry_read_only(
        settings: &PgSettings,
    ) -> Result<Box<dyn RegistryStore>, StoreError> {
        Ok(Box::new(PgStore::open_read_only(settings)?))
    }

    /// Opens the accounts, boxed as [`super::Database::open_accounts`] gives them.
    pub fn open_accounts(settings: &PgSettings) -> Result<Box<dyn AccountStore>, StoreError> {
        Ok(Box::new(PgAccounts::open(settings)?))
    }
}
