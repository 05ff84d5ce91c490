//! `psi reseal --db postgres://... --seal-key-file FILE`: the at-rest key rotation's middle
//! step (docs/deploy.md "At-rest key"): every OPRF key in the database sealed under
//! another key than the first of the key file is opened and sealed again under the first.

use crate::db_args::DbArgs;
use psi_server::Database;
use psi_server::storage::PgStore;

/// `psi reseal`'s arguments.
#[derive(clap::Args, Debug)]
pub struct ResealArgs {
    #[command(flatten)]
    db: DbArgs,
}

/// Re-seals and reports how many keys were.
pub fn run(args: ResealArgs) -> Result<(), String> {
    let db = args.db.database()?;
    let Database::Postgres(settings) = &db else {
        return Err(format!(
            "{db}: psi reseal is for a PostgreSQL database (a SQLite file holds its keys unsealed)"
        ));
    };
    let mut store = PgStore::open(settings).map_err(|e| format!("{db}: {e}"))?;
    let n = store.reseal().map_err(|e| format!("{db}: {e}"))?;
    eprintln!(
        "{n} key(s) re-sealed under at-rest key {}; every stored key is sealed under it now",
        store.sealing_key_id()
    );
    Ok(())
}
