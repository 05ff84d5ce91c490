//! The shared store of several instances: PostgreSQL (`--db postgres://...`,
//! docs/deploy.md "Tables").
//!
//! - [`settings`]: what the URL names, the password, TLS, the at-rest key file.

pub mod settings;

pub use settings::{PgSettings, SettingsError, TlsMode};

use super::{AccountStore, RegistryStore, StoreError};

/// A store on PostgreSQL (registry, key epochs, tokens) over the blocking client.
pub struct PgStore {
    _client: ::postgres::Client,
}

impl PgStore {
    /// Opens the registry (work in progress: refuses for now).
    pub fn open_registry(_settings: &PgSettings) -> Result<Box<dyn RegistryStore>, StoreError> {
        Err(StoreError::InvalidInput(
            "the PostgreSQL registry store is not built yet",
        ))
    }

    /// Opens the accounts (work in progress: refuses for now).
    pub fn open_accounts(_settings: &PgSettings) -> Result<Box<dyn AccountStore>, StoreError> {
        Err(StoreError::InvalidInput(
            "the PostgreSQL account store is not built yet",
        ))
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
