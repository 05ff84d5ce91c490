//! `--db`: where the registry, its key epochs and the accounts are kept, for `psi serve`,
//! `psi import`, `psi rotate-key`, `psi token` and `psi reseal`: a SQLite file (the
//! default, one instance, no setup) or the shared store of several instances, a
//! PostgreSQL database (`postgres://user@host:port/dbname?sslmode=...`, docs/deploy.md);
//! and the server limits the registry is encoded for.

use psi_server::Database;
use psi_server::storage::PgSettings;
use std::path::PathBuf;

/// The registry database's default path (`--db`).
pub const DEFAULT_DB: &str = "psi-registry.sqlite";

/// Server limits shared by `psi serve` and `psi import` (the encoded set is sized for
/// `--max-client-items`).
#[derive(clap::Args, Clone, Debug)]
pub struct ServerArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// Largest client set per session (also sizes the encoded registry).
    #[arg(long, default_value_t = 10_000)]
    pub max_client_items: usize,
}

/// The registry database, as every command that reads or writes it takes it.
#[derive(clap::Args, Clone, Debug)]
pub struct DbArgs {
    /// Registry database: a SQLite file (holds the key: keep it secret; created if
    /// missing), or `postgres://user@host:port/dbname` (optionally `?sslmode=disable|
    /// require|verify-full&sslrootcert=FILE`; never a password: see --db-password-file)
    /// shared by several instances.
    #[arg(long, default_value = DEFAULT_DB)]
    db: String,
    /// PostgreSQL: a file holding the database password (else PSI_DB_PASSWORD_FILE,
    /// else PSI_DB_PASSWORD).
    #[arg(long, value_name = "FILE")]
    db_password_file: Option<PathBuf>,
    /// PostgreSQL: the at-rest key file that seals the OPRF keys in the database
    /// (else PSI_SEAL_KEY_FILE; create one with `psi seal-key new FILE`). Required to
    /// serve, import or rotate on PostgreSQL.
    #[arg(long, value_name = "FILE")]
    seal_key_file: Option<PathBuf>,
}

impl DbArgs {
    /// The store these arguments name.
    pub fn database(&self) -> Result<Database, String> {
        if self.db.starts_with("postgres://") || self.db.starts_with("postgresql://") {
            let settings = PgSettings::from_url(&self.db)
                .and_then(|s| s.with_password_from(self.db_password_file.as_deref()))
                .map_err(|e| e.to_string())?
                .with_seal_key_file(self.seal_key_file.as_deref());
            return Ok(Database::Postgres(settings));
        }
        if self.db_password_file.is_some() {
            return Err("--db-password-file is for a postgres:// database".into());
        }
        Ok(Database::Sqlite(PathBuf::from(&self.db)))
    }

    /// The database as messages name it (never with credentials).
    pub fn shown(&self) -> String {
        self.database()
            .map_or_else(|_| "the database".to_string(), |d| d.to_string())
    }
}
