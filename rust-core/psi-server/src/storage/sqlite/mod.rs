//! The embedded store: SQLite, one file, created on first use (the default; one instance).
//!
//! The file holds the OPRF keys (one per epoch; older ones are deleted on rotation), so
//! it is secret material: it is created with mode 0600 and must be protected like a key.
//! Every connection runs with `secure_delete` on (deleted or overwritten rows are zeroed
//! in the file, not left in free pages), and a rotation, a refresh that recomputed outputs
//! and a removal end with a `wal_checkpoint(TRUNCATE)`, so the old key, the old epoch's
//! outputs and a removed entry's row (label, output) are not left in the write-ahead log
//! either (see [`Store::scrub`]). A removed identifier itself stays in the change log
//! (`changes`) until its changes are forgotten
//! ([`Store::forget_changes_before`]), which scrubs it the same way.
//!
//! Tables:
//! - `keys(epoch, key, created_ms)`: the current OPRF key (32-byte scalar) and when it was
//!   created (Unix milliseconds; NULL for keys created before this column existed).
//! - `entries(id, identifier, label, epoch, output)`: normalized identifiers, optional
//!   labels, and each entry's 64-byte OPRF output under the key of `epoch`, so adding or
//!   removing entries re-encodes the set without recomputing untouched entries.
//! - `encoded_sets(epoch, max_client_items, version, etag, bytes)`: the DH-PSI encoded
//!   registry of an epoch, built from the entries at registry `version`.
//! - `meta(k, v)`: `version`, the registry version, bumped by every change of the entries;
//!   `changes_after`, the oldest version the change log covers.
//! - `changes(version, identifier, sign)`: the change log, one row per identifier added
//!   (`+1`) or removed (`-1`) by a version, written by triggers on `entries` (`changes`).
//!   It keeps removed identifiers until
//!   [`forget_changes_before`](super::RegistryStore::forget_changes_before) deletes them.
//! - `tokens(id, digest, name, created, revoked, items_per_hour)`: bearer tokens issued
//!   by `psi token add`: only the SHA-256 digest of each token is stored; a revoked token
//!   keeps its row (so its id is never reused and authentication stays on).
//! - `budgets(client, remaining, per_hour, updated_ms)`: the rate limiter's partly spent
//!   budgets, so a restart does not refill them; a row is deleted once its budget is full
//!   again (at the latest an hour after its last charge), so rows are as many as the
//!   budgets charged within their refill time.
//!
//! By concept:
//! - `registry`: the registry and its key epochs ([`RegistryStore`](super::RegistryStore)).
//! - `accounts`: issued tokens and saved budgets ([`AccountStore`](super::AccountStore)).
//! - `set_work`: the steps of a refresh ([`SetWork`](super::SetWork)), with no lease.
//! - `changes`: the change log ([`RegistryStore::changes`](super::RegistryStore::changes)).

mod accounts;
mod changes;
mod registry;
mod set_work;

use super::error::StoreError;
use rusqlite::{Connection, OpenFlags};
use std::path::Path;

/// The SQLite registry store.
pub struct Store {
    conn: Connection,
    memory: bool,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS keys (
    epoch INTEGER PRIMARY KEY,
    key BLOB NOT NULL,
    created_ms INTEGER
);
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY,
    identifier TEXT NOT NULL UNIQUE,
    label TEXT,
    epoch INTEGER,
    output BLOB
);
CREATE TABLE IF NOT EXISTS encoded_sets (
    epoch INTEGER NOT NULL,
    max_client_items INTEGER NOT NULL,
    version INTEGER NOT NULL,
    etag TEXT NOT NULL,
    bytes BLOB NOT NULL,
    PRIMARY KEY (epoch, max_client_items)
);
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL);
INSERT OR IGNORE INTO meta (k, v) VALUES ('version', 0);
CREATE TABLE IF NOT EXISTS tokens (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    digest BLOB NOT NULL UNIQUE,
    name TEXT,
    created INTEGER NOT NULL,
    revoked INTEGER NOT NULL DEFAULT 0,
    items_per_hour INTEGER
);
CREATE TABLE IF NOT EXISTS budgets (
    client TEXT PRIMARY KEY,
    remaining REAL NOT NULL,
    per_hour INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL
);
";

impl Store {
    /// Opens (creating if needed) the store at `path`; `:memory:` gives a private
    /// in-memory store (tests, the demo).
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let memory = path.as_os_str() == ":memory:";
        if !memory {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)?;
            }
            if !path.exists() {
                create_private_file(path)?;
            }
        }
        let conn = Connection::open(path)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        // Deleted and overwritten content (old keys, old outputs, removed entries) is
        // zeroed in its page instead of lingering in free space. Per connection.
        conn.pragma_update(None, "secure_delete", "ON")?;
        if !memory {
            conn.pragma_update(None, "journal_mode", "WAL")?;
            conn.pragma_update(None, "synchronous", "NORMAL")?;
        }
        conn.execute_batch(SCHEMA)?;
        // Stores created before keys had a creation time.
        let has_created: bool = conn.query_row(
            "SELECT COUNT(*) FROM pragma_table_info('keys') WHERE name = 'created_ms'",
            [],
            |r| r.get::<_, i64>(0).map(|n| n > 0),
        )?;
        if !has_created {
            conn.execute_batch("ALTER TABLE keys ADD COLUMN created_ms INTEGER")?;
        }
        // Stores created before the change log keep changes from their current version on.
        conn.execute_batch(changes::SCHEMA)?;
        Ok(Store { conn, memory })
    }

    /// Opens the existing store at `path` for reading only: nothing is created (no
    /// directory, file or schema) and nothing can be written. A running server watches
    /// the file for changes by other processes through such a connection
    /// (`AppState::reload_if_changed`). Needs a store a writer has opened before (its
    /// key created, its schema current).
    pub fn open_read_only(path: &Path) -> Result<Store, StoreError> {
        if path.as_os_str() == ":memory:" {
            return Err(StoreError::InMemory);
        }
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY
                | OpenFlags::SQLITE_OPEN_URI
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        Ok(Store {
            conn,
            memory: false,
        })
    }

    /// True for a `:memory:` store.
    pub fn is_memory(&self) -> bool {
        self.memory
    }

    /// Moves every committed page into the database file and truncates the write-ahead
    /// log to zero bytes (`PRAGMA wal_checkpoint(TRUNCATE)`), so page images holding
    /// deleted secrets (an old key, an old epoch's outputs, removed identifiers) do not
    /// stay in the log. With `secure_delete` on, the pages written to the file have that
    /// content zeroed. Returns false when another connection kept the checkpoint from
    /// completing (it waits up to the busy timeout first); the log is then scrubbed by
    /// the next complete checkpoint. What this cannot reach: copies the file system or
    /// the disk keep of earlier blocks, and backups.
    pub fn scrub(&self) -> Result<bool, StoreError> {
        if self.memory {
            return Ok(true);
        }
        let (busy, log, done): (i64, i64, i64) =
            self.conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })?;
        Ok(busy == 0 && log == done)
    }

    fn scrub_or_warn(&self, after: &'static str) -> Result<(), StoreError> {
        if !self.scrub()? {
            tracing::warn!(
                after,
                "WAL checkpoint incomplete (another connection is busy): deleted key material may stay in the -wal file until the next complete checkpoint"
            );
        }
        Ok(())
    }
}

#[cfg(unix)]
fn create_private_file(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map(drop)
}

#[cfg(not(unix))]
fn create_private_file(path: &Path) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use psi_core::Threads;
    use psi_core::oprf::OUTPUT_LEN;

    /// True if `needle` occurs in the database file or its write-ahead log.
    fn on_disk(path: &Path, needle: &[u8]) -> bool {
        let wal = path.with_extension("sqlite-wal");
        [path, wal.as_path()]
            .iter()
            .any(|p| std::fs::read(p).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle)))
    }

    #[test]
    fn rotation_leaves_no_old_key_or_old_outputs_in_the_file_or_the_log() {
        let dir = std::env::temp_dir().join(format!(
            "psi-store-scrub-{}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("registry.sqlite");
        let mut s = Store::open(&path).unwrap();
        let old_key = s.current_key().unwrap().oprf_key().to_bytes();
        let ids: Vec<String> = (0..300).map(|i| format!("+1202{i:07}")).collect();
        s.add_entries(ids.iter().map(|i| (i.as_str(), None)))
            .unwrap();
        s.refresh(100, Threads::ONE, &mut |_, _| {}).unwrap();
        let old_outputs: Vec<[u8; OUTPUT_LEN]> =
            s.entries().unwrap().iter().map(|e| e.output).collect();
        // Control: while live, the key and the outputs are found where the scan looks.
        assert!(on_disk(&path, old_key.as_slice()));
        assert!(old_outputs.iter().all(|o| on_disk(&path, o)));
        assert!(s.key_created().unwrap().is_some());

        s.rotate_key().unwrap();
        // The key is gone from the file and the log as soon as the rotation returns.
        assert!(!on_disk(&path, old_key.as_slice()), "old key left on disk");
        s.refresh(100, Threads::ONE, &mut |_, _| {}).unwrap();
        assert!(!on_disk(&path, old_key.as_slice()), "old key left on disk");
        let left = old_outputs.iter().filter(|o| on_disk(&path, *o)).count();
        assert_eq!(left, 0, "outputs of the old epoch left on disk");
        let new_key = s.current_key().unwrap().oprf_key().to_bytes();
        assert!(on_disk(&path, new_key.as_slice()));

        // A removed identifier stays in the change log (what a delta of removals is made
        // from) until its changes are forgotten, which scrubs it from the file and the log.
        assert!(on_disk(&path, ids[7].as_bytes()));
        s.remove_entries([ids[7].as_str()]).unwrap();
        let v = s.version().unwrap();
        assert_eq!(s.changes(v - 1, v).unwrap().removed, vec![ids[7].clone()]);
        assert!(on_disk(&path, ids[7].as_bytes()), "kept in the change log");
        assert!(s.forget_changes_before(v).unwrap() >= 1);
        assert!(
            !on_disk(&path, ids[7].as_bytes()),
            "removed identifier left on disk after its changes were forgotten"
        );
        drop(s);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
