//! The tables of the shared store, created on first open (docs/deploy.md "Tables").
//!
//! - `meta(k, v, bytes)`: `version` (the registry version, bumped by every change of the
//!   entries, in the transaction of the change), `schema_version`, and `database_id` (16
//!   random bytes in `bytes`, bound into every sealed key so that a sealed key copied
//!   into another database does not open there).
//! - `keys(epoch, sealed, created_ms)`: the current OPRF key, sealed under the at-rest
//!   key ([`crate::sealing`]) for the purpose `oprf-key epoch=E db=ID`, so a sealed key
//!   moved to another epoch's row or another database does not open.
//! - `entries(id, identifier, label, epoch, output)`, `encoded_sets(epoch,
//!   max_client_items, version, etag, bytes)`, `tokens(id, digest, name, created, revoked,
//!   items_per_hour)`: as in SQLite ([`crate::storage::sqlite`]), except that a rotation
//!   keeps the previous epoch's encoded sets (not its key) until its overlap is over
//!   (`RegistryStore::previous_set`: an instance started during the overlap serves it).
//!
//! - `changes(version, identifier, sign)`: the change log (`super::changes`); `meta`'s
//!   `changes_after` is the oldest version it covers.
//!
//! Schema versions: 1 had no change log; 2 adds `changes` and `changes_after`. Opening a
//! version-1 database migrates it (the same transaction): the log covers changes from the
//! version the registry has then. A program of version 1 refuses a version-2 database
//! ([`StoreError::SchemaTooNew`]), so no older writer changes the entries unlogged.
//!
//! Creation is one transaction under a transaction-level advisory lock, so instances
//! starting together on an empty database do not race each other's `CREATE TABLE`.

use super::super::contract::os_rng;
use super::super::error::StoreError;

/// The schema this program writes.
pub(crate) const SCHEMA_VERSION: i64 = 2;

/// Advisory lock key serializing schema creation ("psi" and 1).
const SCHEMA_LOCK: i64 = 0x7073_6900_0000_0001;

/// Bytes of the random database id.
const DATABASE_ID_LEN: usize = 16;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (
    k TEXT PRIMARY KEY,
    v BIGINT NOT NULL DEFAULT 0,
    bytes BYTEA
);
INSERT INTO meta (k, v) VALUES ('version', 0) ON CONFLICT (k) DO NOTHING;
CREATE TABLE IF NOT EXISTS keys (
    epoch BIGINT PRIMARY KEY,
    sealed BYTEA NOT NULL,
    created_ms BIGINT
);
CREATE TABLE IF NOT EXISTS entries (
    id BIGSERIAL PRIMARY KEY,
    identifier TEXT NOT NULL UNIQUE,
    label TEXT,
    epoch BIGINT,
    output BYTEA
);
CREATE TABLE IF NOT EXISTS encoded_sets (
    epoch BIGINT NOT NULL,
    max_client_items BIGINT NOT NULL,
    version BIGINT NOT NULL,
    etag TEXT NOT NULL,
    bytes BYTEA NOT NULL,
    PRIMARY KEY (epoch, max_client_items)
);
CREATE TABLE IF NOT EXISTS tokens (
    id BIGSERIAL PRIMARY KEY,
    digest BYTEA NOT NULL UNIQUE,
    name TEXT,
    created BIGINT NOT NULL,
    revoked BOOLEAN NOT NULL DEFAULT FALSE,
    items_per_hour BIGINT
);
CREATE TABLE IF NOT EXISTS changes (
    version BIGINT NOT NULL,
    identifier TEXT NOT NULL,
    sign SMALLINT NOT NULL CHECK (sign IN (-1, 1)),
    PRIMARY KEY (version, identifier)
);
";

/// Creates what is missing (idempotent, one transaction) and returns the database id.
pub(crate) fn ensure(client: &mut postgres::Client) -> Result<Vec<u8>, StoreError> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])?;
    let exists: bool = tx
        .query_one("SELECT to_regclass('meta') IS NOT NULL", &[])?
        .get(0);
    if exists && check_version(&mut tx)? == Some(SCHEMA_VERSION) {
        // Current: nothing to create (a role without CREATE on the schema can run).
        let id = database_id(&mut tx)?;
        tx.commit()?;
        return Ok(id);
    }
    tx.batch_execute(SCHEMA)?;
    tx.execute(
        "INSERT INTO meta (k, v) VALUES ('schema_version', $1)
         ON CONFLICT (k) DO UPDATE SET v = GREATEST(meta.v, EXCLUDED.v)",
        &[&SCHEMA_VERSION],
    )?;
    // The change log covers the versions after the current one (0 for a new store). The
    // version row's lock waits for a writer in flight, so its change is before that.
    tx.query_one("SELECT v FROM meta WHERE k = 'version' FOR UPDATE", &[])?;
    tx.execute(
        "INSERT INTO meta (k, v) SELECT 'changes_after', v FROM meta WHERE k = 'version'
         ON CONFLICT (k) DO NOTHING",
        &[],
    )?;
    let mut id = [0u8; DATABASE_ID_LEN];
    rand_core::Rng::fill_bytes(&mut os_rng()?, &mut id);
    tx.execute(
        "INSERT INTO meta (k, v, bytes) VALUES ('database_id', 0, $1) ON CONFLICT (k) DO NOTHING",
        &[&id.as_slice()],
    )?;
    let id = database_id(&mut tx)?;
    tx.commit()?;
    Ok(id)
}

/// Reads the database id of a store a writer created, creating nothing.
pub(crate) fn existing(client: &mut postgres::Client) -> Result<Vec<u8>, StoreError> {
    let mut tx = client.transaction()?;
    let exists: bool = tx
        .query_one("SELECT to_regclass('meta') IS NOT NULL", &[])?
        .get(0);
    if !exists {
        return Err(StoreError::InvalidInput(
            "the database has no psi tables yet: run psi import or psi serve against it first",
        ));
    }
    check_version(&mut tx)?;
    let id = database_id(&mut tx)?;
    tx.commit()?;
    Ok(id)
}

/// The stored schema version (`None`: not recorded yet); refuses a newer one.
fn check_version(tx: &mut postgres::Transaction<'_>) -> Result<Option<i64>, StoreError> {
    let v: Option<i64> = tx
        .query_opt("SELECT v FROM meta WHERE k = 'schema_version'", &[])?
        .map(|r| r.get(0));
    match v {
        Some(v) if v > SCHEMA_VERSION => Err(StoreError::SchemaTooNew(v)),
        v => Ok(v),
    }
}

fn database_id(tx: &mut postgres::Transaction<'_>) -> Result<Vec<u8>, StoreError> {
    let id: Option<Vec<u8>> = tx
        .query_opt("SELECT bytes FROM meta WHERE k = 'database_id'", &[])?
        .and_then(|r| r.get(0));
    id.filter(|b| b.len() == DATABASE_ID_LEN)
        .ok_or(StoreError::InvalidInput(
            "the database id in meta is missing or corrupt",
        ))
}
