//! The errors of the store, below both backends: [`StoreError`], the PostgreSQL settings'
//! [`SettingsError`], and how a PostgreSQL error is shown without the values it may quote.

use std::path::PathBuf;
use thiserror::Error;

/// Errors of the store. Never carry identifiers, labels or keys.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StoreError {
    /// SQLite failed.
    #[error("database: {0}")]
    Db(#[from] rusqlite::Error),
    /// PostgreSQL failed (its message and SQLSTATE; never the DETAIL, which can quote
    /// values).
    #[error("database: {}", error_text(.0))]
    Pg(#[from] ::postgres::Error),
    /// The PostgreSQL settings are unusable (URL, password file, TLS roots).
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// The at-rest key file is unusable, or a sealed key does not open.
    #[error(transparent)]
    Seal(#[from] crate::sealing::SealError),
    /// A PostgreSQL registry needs the at-rest key that seals its OPRF keys.
    #[error(
        "a PostgreSQL registry needs the at-rest key file that seals its OPRF keys: give \
         --seal-key-file FILE (or PSI_SEAL_KEY_FILE); create one with `psi seal-key new FILE`"
    )]
    SealKeyRequired,
    /// The PostgreSQL schema is newer than this program.
    #[error("the database schema is version {0}, newer than this program knows: upgrade psi")]
    SchemaTooNew(i64),
    /// Creating the directory or setting permissions failed.
    #[error("database file: {0}")]
    Io(#[from] std::io::Error),
    /// The stored key is not a valid scalar.
    #[error("stored key of epoch {0} is corrupt")]
    CorruptKey(u32),
    /// A stored OPRF output has the wrong length.
    #[error("stored OPRF output of entry {0} is corrupt")]
    CorruptOutput(i64),
    /// The PSI core refused (e.g. too many entries).
    #[error("psi: {0}")]
    Psi(#[from] psi_core::Error),
    /// No OS randomness.
    #[error("no OS randomness: {0}")]
    Random(String),
    /// A value given to the store is not acceptable (the message names the rule, never
    /// the value).
    #[error("invalid input: {0}")]
    InvalidInput(&'static str),
    /// Changes were asked for from a version older than the oldest the store still keeps
    /// changes from ([`RegistryStore::changes_kept_after`](super::RegistryStore::changes_kept_after)):
    /// they were forgotten (or happened before the store kept changes).
    #[error(
        "registry changes after version {after} are not kept (kept after version {kept_after} only): start from a snapshot"
    )]
    ChangesForgotten {
        /// The version asked from.
        after: i64,
        /// The oldest version changes are kept from.
        kept_after: i64,
    },
    /// A registry version beyond the current one was named.
    #[error("registry version {upto} is beyond the current version {current}")]
    VersionAhead {
        /// The version named.
        upto: i64,
        /// The current registry version.
        current: i64,
    },
    /// The change log sums to something other than added, removed or unchanged for an
    /// identifier (never written by this program: a corrupt or hand-edited store).
    #[error("the registry's change log is inconsistent")]
    CorruptChanges,
    /// The store is in memory: there is nothing to reload or rotate from.
    #[error("the registry store is in memory; reloading and rotation need a database file")]
    InMemory,
}

/// Errors of the database settings. Never carry a password.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SettingsError {
    /// The URL is not a `postgres://` URL libpq-style parsing accepts.
    #[error("database URL: {0}")]
    Url(String),
    /// The URL holds a password.
    #[error(
        "the database URL contains a password: credentials never go on the command line; \
         give it with --db-password-file FILE or the environment (PSI_DB_PASSWORD_FILE, PSI_DB_PASSWORD)"
    )]
    PasswordInUrl,
    /// `sslmode` has a value this server does not accept.
    #[error("database URL: sslmode must be disable, require or verify-full")]
    SslMode,
    /// The password file could not be read.
    #[error("database password file {}: {source}", path.display())]
    PasswordFile {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The roots for TLS could not be read or hold no certificate.
    #[error("TLS roots for the database {}: {reason}", path.display())]
    Roots {
        /// The PEM file (`sslrootcert` or the system bundle).
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// rustls refused the configuration.
    #[error("TLS for the database: {0}")]
    Tls(String),
}

/// A PostgreSQL error as [`StoreError`] shows it: the message and SQLSTATE of a database
/// error (never its DETAIL, which can quote a row's values), else the client's text.
pub(crate) fn error_text(e: &::postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => {
            let mut text = e.to_string();
            if let Some(cause) = std::error::Error::source(e).map(|c| c.to_string())
                && !text.contains(&cause)
            {
                text = format!("{text}: {cause}");
            }
            // The server asked for a password and none was given (issue 35): say where
            // one comes from instead of only "invalid configuration".
            if text.contains("password missing") {
                text.push_str(
                    " (the database asks for a password: give --db-password-file FILE, \
                     PSI_DB_PASSWORD_FILE or PSI_DB_PASSWORD)",
                );
            }
            text
        }
    }
}
