//! The shared store of several instances: PostgreSQL (`--db postgres://...`,
//! docs/deploy.md "Tables").
//!
//! - [`settings`]: what the URL names, the password, TLS, the at-rest key file.
//! - `schema`: the tables, created on first open (docs/deploy.md "Tables").
//! - [`PgStore`] (`registry`): the registry and its key epochs, keys sealed under the
//!   at-rest key; `lease`: the build lease, an advisory lock.
//! - [`PgAccounts`] (`accounts`): issued tokens.
//! - [`budgets`]: the hourly budgets every instance charges, atomically, in one table.

mod accounts;
pub mod budgets;
mod lease;
mod registry;
mod schema;
pub mod settings;

pub use settings::{PgSettings, SettingsError, TlsMode};

pub use accounts::PgAccounts;
pub use registry::PgStore;

use super::{AccountStore, RegistryStore, StoreError};

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

/// A PostgreSQL error as [`StoreError`] shows it: the message and SQLSTATE of a database
/// error (never its DETAIL, which can quote a row's values), else the client's text.
pub(crate) fn error_text(e: &::postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => e.to_string(),
    }
}
