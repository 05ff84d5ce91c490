//! The registry store: SQLite, one file, created on first use.
//!
//! The file holds the OPRF keys (one per epoch; older ones are deleted on rotation), so
//! it is secret material: it is created with mode 0600 and must be protected like a key.
//! Every connection runs with `secure_delete` on (deleted or overwritten rows are zeroed
//! in the file, not left in free pages), and a rotation, a refresh that recomputed outputs
//! and a removal end with a `wal_checkpoint(TRUNCATE)`, so the old key, the old epoch's
//! outputs and removed identifiers are not left in the write-ahead log either (see
//! [`Store::scrub`]).
//!
//! Tables:
//! - `keys(epoch, key, created_ms)`: the current OPRF key (32-byte scalar) and when it was
//!   created (Unix milliseconds; NULL for keys created before this column existed).
//! - `entries(id, identifier, label, epoch, output)`: normalized identifiers, optional
//!   labels, and each entry's 64-byte OPRF output under the key of `epoch`, so adding or
//!   removing entries re-encodes the set without recomputing untouched entries.
//! - `encoded_sets(epoch, max_client_items, version, etag, bytes)`: the DH-PSI encoded
//!   registry of an epoch, built from the entries at registry `version`.
//! - `meta(k, v)`: the registry version, bumped by every change of the entries.

use psi_core::dh::{DhServer, ServerKey};
use psi_core::oprf::{OUTPUT_LEN, OprfKey};
use psi_core::{ItemSet, Threads};
use rusqlite::{Connection, OptionalExtension, params};
use sha2::{Digest, Sha256};
use std::path::Path;
use thiserror::Error;

/// Errors of the store. Never carry identifiers, labels or keys.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StoreError {
    /// SQLite failed.
    #[error("database: {0}")]
    Db(#[from] rusqlite::Error),
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
    /// The store is in memory: there is nothing to reload or rotate from.
    #[error("the registry store is in memory; reloading and rotation need a database file")]
    InMemory,
}

/// Counts of an import.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ImportCounts {
    /// New entries added.
    pub accepted: u64,
    /// Entries already in the registry (or repeated in the input); a label given for
    /// them replaces the stored one.
    pub duplicates: u64,
    /// Rows that failed normalization (reported by the caller, not stored).
    pub rejected: u64,
}

/// What [`Store::refresh`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RefreshStats {
    /// Entries whose OPRF output was computed now.
    pub outputs_computed: u64,
    /// True if the encoded set was rebuilt (false: the stored one is current).
    pub set_rebuilt: bool,
}

/// The encoded registry of an epoch.
#[derive(Clone)]
pub struct StoredSet {
    /// Key epoch.
    pub epoch: u32,
    /// The ENCODED_SET message bytes.
    pub bytes: Vec<u8>,
    /// Strong ETag, quoted.
    pub etag: String,
}

/// One entry loaded for serving.
pub struct LoadedEntry {
    /// The normalized identifier.
    pub identifier: String,
    /// Optional label.
    pub label: Option<String>,
    /// OPRF output under the current key.
    pub output: [u8; OUTPUT_LEN],
}

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
";

/// Entries whose outputs are computed per batch (bounds memory during a refresh).
const OUTPUT_BATCH: usize = 50_000;

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
        Ok(Store { conn, memory })
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

    /// When the current key was created, if known (keys created by older versions have
    /// no creation time).
    pub fn key_created(&mut self) -> Result<Option<std::time::SystemTime>, StoreError> {
        let epoch = self.current_key()?.epoch();
        let ms: Option<i64> = self.conn.query_row(
            "SELECT created_ms FROM keys WHERE epoch = ?1",
            params![epoch],
            |r| r.get(0),
        )?;
        Ok(ms.map(|ms| std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64)))
    }

    /// The current key, creating the epoch-1 key on first use.
    pub fn current_key(&mut self) -> Result<ServerKey, StoreError> {
        let row: Option<(u32, Vec<u8>)> = self
            .conn
            .query_row(
                "SELECT epoch, key FROM keys ORDER BY epoch DESC LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        match row {
            Some((epoch, bytes)) => {
                // Key material read from the database is wiped once parsed.
                let bytes = zeroize::Zeroizing::new(bytes);
                let arr: zeroize::Zeroizing<[u8; 32]> = zeroize::Zeroizing::new(
                    bytes
                        .as_slice()
                        .try_into()
                        .map_err(|_| StoreError::CorruptKey(epoch))?,
                );
                let key = OprfKey::from_bytes(&arr).ok_or(StoreError::CorruptKey(epoch))?;
                Ok(ServerKey::new(key, epoch))
            }
            None => {
                let key = ServerKey::random(1, &mut os_rng()?);
                self.insert_key(&key)?;
                Ok(key)
            }
        }
    }

    /// Starts a new epoch with a fresh key; deletes the old key and encoded sets, and
    /// scrubs the old key from the file and the log ([`Store::scrub`]). The next
    /// [`Store::refresh`] recomputes every output (overwriting the old epoch's).
    pub fn rotate_key(&mut self) -> Result<ServerKey, StoreError> {
        let old = self.current_key()?;
        let new = old.rotate(&mut os_rng()?);
        let tx = self.conn.transaction()?;
        tx.execute(
            "INSERT INTO keys (epoch, key, created_ms) VALUES (?1, ?2, ?3)",
            params![new.epoch(), new.oprf_key().to_bytes().as_slice(), now_ms()],
        )?;
        tx.execute("DELETE FROM keys WHERE epoch <> ?1", params![new.epoch()])?;
        tx.execute("DELETE FROM encoded_sets", [])?;
        tx.commit()?;
        self.scrub_or_warn("key rotation")?;
        Ok(new)
    }

    fn insert_key(&mut self, key: &ServerKey) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO keys (epoch, key, created_ms) VALUES (?1, ?2, ?3)",
            params![key.epoch(), key.oprf_key().to_bytes().as_slice(), now_ms()],
        )?;
        Ok(())
    }

    /// Adds entries (already normalized); existing identifiers count as duplicates and
    /// get the new label if one is given.
    pub fn add_entries<'a>(
        &mut self,
        entries: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    ) -> Result<ImportCounts, StoreError> {
        let mut counts = ImportCounts::default();
        let tx = self.conn.transaction()?;
        {
            let mut insert = tx.prepare(
                "INSERT INTO entries (identifier, label) VALUES (?1, ?2)
                 ON CONFLICT(identifier) DO NOTHING",
            )?;
            let mut relabel = tx.prepare(
                "UPDATE entries SET label = ?2 WHERE identifier = ?1 AND label IS NOT ?2",
            )?;
            for (id, label) in entries {
                if insert.execute(params![id, label])? == 1 {
                    counts.accepted += 1;
                } else {
                    counts.duplicates += 1;
                    if label.is_some() {
                        relabel.execute(params![id, label])?;
                    }
                }
            }
        }
        if counts.accepted > 0 || counts.duplicates > 0 {
            tx.execute("UPDATE meta SET v = v + 1 WHERE k = 'version'", [])?;
        }
        tx.commit()?;
        Ok(counts)
    }

    /// Removes entries by identifier; returns how many existed.
    pub fn remove_entries<'a>(
        &mut self,
        identifiers: impl IntoIterator<Item = &'a str>,
    ) -> Result<u64, StoreError> {
        let tx = self.conn.transaction()?;
        let mut removed = 0u64;
        {
            let mut del = tx.prepare("DELETE FROM entries WHERE identifier = ?1")?;
            for id in identifiers {
                removed += del.execute(params![id])? as u64;
            }
        }
        if removed > 0 {
            tx.execute("UPDATE meta SET v = v + 1 WHERE k = 'version'", [])?;
        }
        tx.commit()?;
        if removed > 0 {
            // The removed identifiers, labels and outputs leave the log too.
            self.scrub_or_warn("removal")?;
        }
        Ok(removed)
    }

    /// Number of entries.
    pub fn len(&self) -> Result<u64, StoreError> {
        Ok(self
            .conn
            .query_row("SELECT COUNT(*) FROM entries", [], |r| r.get::<_, i64>(0))?
            as u64)
    }

    /// True when the registry has no entries.
    pub fn is_empty(&self) -> Result<bool, StoreError> {
        Ok(self.len()? == 0)
    }

    fn version(&self) -> Result<i64, StoreError> {
        Ok(self
            .conn
            .query_row("SELECT v FROM meta WHERE k = 'version'", [], |r| r.get(0))?)
    }

    /// Brings the store up to date for `max_client_items`: computes the OPRF output of
    /// every entry that has none under the current key (only those), then rebuilds the
    /// encoded set if the entries changed since it was built. `progress(done, total)` is
    /// called after each batch of outputs.
    pub fn refresh(
        &mut self,
        max_client_items: usize,
        threads: Threads,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<RefreshStats, StoreError> {
        let key = self.current_key()?;
        let epoch = key.epoch();
        let dh = DhServer::new(key, max_client_items, threads);
        let mut stats = RefreshStats::default();
        let total: i64 = self.conn.query_row(
            "SELECT COUNT(*) FROM entries WHERE epoch IS NOT ?1 OR output IS NULL",
            params![epoch],
            |r| r.get(0),
        )?;
        loop {
            let batch: Vec<(i64, String)> = {
                let mut q = self.conn.prepare(
                    "SELECT id, identifier FROM entries WHERE epoch IS NOT ?1 OR output IS NULL
                     LIMIT ?2",
                )?;
                q.query_map(params![epoch, OUTPUT_BATCH as i64], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?
                .collect::<Result<_, _>>()?
            };
            if batch.is_empty() {
                break;
            }
            let items = ItemSet::new(batch.iter().map(|(_, s)| s.as_bytes()));
            let outputs = dh.outputs(&items)?;
            let tx = self.conn.transaction()?;
            {
                let mut up =
                    tx.prepare("UPDATE entries SET epoch = ?1, output = ?2 WHERE id = ?3")?;
                for ((id, _), out) in batch.iter().zip(outputs.iter()) {
                    up.execute(params![epoch, out.as_slice(), id])?;
                }
            }
            tx.commit()?;
            stats.outputs_computed += batch.len() as u64;
            progress(stats.outputs_computed, total as u64);
        }
        let version = self.version()?;
        let stored: Option<i64> = self
            .conn
            .query_row(
                "SELECT version FROM encoded_sets WHERE epoch = ?1 AND max_client_items = ?2",
                params![epoch, dh.max_client_items() as i64],
                |r| r.get(0),
            )
            .optional()?;
        if stored != Some(version) || stats.outputs_computed > 0 {
            let outputs = self.outputs()?;
            let bytes = threads.install(|| dh.encode_outputs(&outputs))??.to_bytes();
            let etag = etag(&bytes);
            let tx = self.conn.transaction()?;
            tx.execute(
                "DELETE FROM encoded_sets WHERE epoch <> ?1 OR max_client_items = ?2",
                params![epoch, dh.max_client_items() as i64],
            )?;
            tx.execute(
                "INSERT INTO encoded_sets (epoch, max_client_items, version, etag, bytes)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![epoch, dh.max_client_items() as i64, version, etag, bytes],
            )?;
            tx.commit()?;
            stats.set_rebuilt = true;
        }
        if stats.outputs_computed > 0 {
            // Outputs of an older epoch were overwritten: keep no copy in the log.
            self.scrub_or_warn("output refresh")?;
        }
        Ok(stats)
    }

    fn outputs(&self) -> Result<Vec<[u8; OUTPUT_LEN]>, StoreError> {
        let mut q = self.conn.prepare("SELECT id, output FROM entries")?;
        let rows = q.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?)))?;
        let mut out = Vec::with_capacity(self.len()? as usize);
        for row in rows {
            let (id, o) = row?;
            out.push(
                o.as_slice()
                    .try_into()
                    .map_err(|_| StoreError::CorruptOutput(id))?,
            );
        }
        Ok(out)
    }

    /// The stored encoded set for the current epoch and `max_client_items`, if built.
    pub fn encoded_set(
        &mut self,
        max_client_items: usize,
    ) -> Result<Option<StoredSet>, StoreError> {
        let epoch = self.current_key()?.epoch();
        let max = max_client_items.min(psi_core::dh::limits::MAX_CLIENT_ITEMS) as i64;
        Ok(self
            .conn
            .query_row(
                "SELECT etag, bytes FROM encoded_sets WHERE epoch = ?1 AND max_client_items = ?2",
                params![epoch, max],
                |r| {
                    Ok(StoredSet {
                        epoch,
                        etag: r.get(0)?,
                        bytes: r.get(1)?,
                    })
                },
            )
            .optional()?)
    }

    /// Every entry with its output (after [`Store::refresh`]).
    pub fn entries(&self) -> Result<Vec<LoadedEntry>, StoreError> {
        let mut q = self
            .conn
            .prepare("SELECT id, identifier, label, output FROM entries ORDER BY id")?;
        let rows = q.query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, Option<Vec<u8>>>(3)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (id, identifier, label, o) = row?;
            let output = o
                .as_deref()
                .and_then(|o| o.try_into().ok())
                .ok_or(StoreError::CorruptOutput(id))?;
            out.push(LoadedEntry {
                identifier,
                label,
                output,
            });
        }
        Ok(out)
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Strong ETag of an encoded set: 128 bits of its SHA-256, quoted.
pub fn etag(bytes: &[u8]) -> String {
    format!("\"{}\"", hex::encode(&Sha256::digest(bytes)[..16]))
}

pub(crate) fn os_rng() -> Result<rand_chacha::ChaCha20Rng, StoreError> {
    psi_core::rng::os_rng().map_err(|e| StoreError::Random(e.to_string()))
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

    #[test]
    fn incremental_refresh_only_computes_new_entries() {
        let mut s = Store::open(Path::new(":memory:")).unwrap();
        let c = s
            .add_entries([
                ("+14155550001", Some("u1")),
                ("+14155550002", None),
                ("+14155550001", None),
            ])
            .unwrap();
        assert_eq!((c.accepted, c.duplicates), (2, 1));
        let r = s.refresh(100, Threads::ONE, &mut |_, _| {}).unwrap();
        assert_eq!(r.outputs_computed, 2);
        assert!(r.set_rebuilt);
        let etag1 = s.encoded_set(100).unwrap().unwrap().etag;
        // Nothing changed: nothing recomputed, same set.
        let r = s.refresh(100, Threads::ONE, &mut |_, _| {}).unwrap();
        assert_eq!(r, RefreshStats::default());
        s.add_entries([("a@b.co", None)]).unwrap();
        let r = s.refresh(100, Threads::ONE, &mut |_, _| {}).unwrap();
        assert_eq!(r.outputs_computed, 1);
        let etag2 = s.encoded_set(100).unwrap().unwrap().etag;
        assert_ne!(etag1, etag2);
        assert_eq!(s.remove_entries(["a@b.co", "nope"]).unwrap(), 1);
        let r = s.refresh(100, Threads::ONE, &mut |_, _| {}).unwrap();
        assert_eq!((r.outputs_computed, r.set_rebuilt), (0, true));
        // Same entries, same key: the same set as before the add.
        assert_eq!(s.encoded_set(100).unwrap().unwrap().etag, etag1);
        // Rotation: new epoch, everything recomputed.
        let e = s.rotate_key().unwrap().epoch();
        assert_eq!(e, 2);
        assert!(s.encoded_set(100).unwrap().is_none());
        let r = s.refresh(100, Threads::ONE, &mut |_, _| {}).unwrap();
        assert_eq!(r.outputs_computed, 2);
        assert_eq!(s.entries().unwrap().len(), 2);
    }

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

        // A removal scrubs the removed identifier too.
        assert!(on_disk(&path, ids[7].as_bytes()));
        s.remove_entries([ids[7].as_str()]).unwrap();
        assert!(
            !on_disk(&path, ids[7].as_bytes()),
            "removed identifier left on disk"
        );
        drop(s);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
