//! `--db`: where the registry, its key epochs and the accounts are kept, for `psi serve`,
//! `psi import`, `psi rotate-key` and `psi token`: a SQLite file (the default, one
//! instance, no setup) or the shared store of several instances (docs/deploy.md).

use psi_server::Database;
use std::path::PathBuf;

/// The registry database, as every command that reads or writes it takes it.
#[derive(clap::Args, Clone, Debug)]
pub struct DbArgs {
    /// Registry database: a SQLite file (holds the key: keep it secret; created if
    /// missing).
    #[arg(long, default_value = crate::DEFAULT_DB)]
    db: String,
}

impl DbArgs {
    /// The store these arguments name.
    pub fn database(&self) -> Result<Database, String> {
        Ok(Database::Sqlite(PathBuf::from(&self.db)))
    }

    /// The database as messages name it (never with credentials).
    pub fn shown(&self) -> String {
        self.database()
            .map_or_else(|_| "the database".to_string(), |d| d.to_string())
    }
}
