//! The embedded store: SQLite, one file, created on first use (the default; one instance).
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
//! - `tokens(id, digest, name, created, revoked, items_per_hour)`: bearer tokens issued
//!   by `psi token add`: only the SHA-256 digest of each token is stored; a revoked token
//!   keeps its row (so its id is never reused and authentication stays on).
//! - `budgets(client, remaining, per_hour, updated_ms)`: the rate limiter's partly spent
//!   budgets, so a restart does not refill them; a row is deleted once its budget is full
//!   again (at the latest an hour after its last charge), so rows are as many as the
//!   budgets charged within their refill time.

use super::{
    AccountStore, BuildLease, ImportCounts, LoadedEntry, NewToken, Readiness, RefreshStats,
    RegistryStore, Revoked, SavedBudget, SetWork, StoreError, StoredSet, TokenInfo, TokenIssue,
    now_ms, os_rng,
};
use psi_core::Threads;
use psi_core::dh::ServerKey;
use psi_core::oprf::{OUTPUT_LEN, OprfKey};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
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

    /// What a server of `max_client_items` can load from the store now, without computing
    /// an output or writing ([`Readiness`]). A refresh computes every missing output before
    /// it builds a set, so a set built at the current version and epoch, at any size,
    /// means the whole registry is ready; only the encoded set may be missing, when the
    /// refresh ran with another `--max-client-items`. One read-only statement, so it sees
    /// one committed state and takes no write lock: a running server polls it to pick up
    /// `psi import` and `psi rotate-key` without racing them for the database.
    pub fn readiness(&self, max_client_items: usize) -> Result<Readiness, StoreError> {
        let max = max_client_items.min(psi_core::dh::limits::MAX_CLIENT_ITEMS) as i64;
        let row: Option<(u32, i64, i64)> = self
            .conn
            .query_row(
                "SELECT s.epoch, s.version, s.max_client_items FROM encoded_sets s
                 WHERE s.epoch = (SELECT MAX(epoch) FROM keys)
                   AND s.version = (SELECT v FROM meta WHERE k = 'version')
                 ORDER BY s.max_client_items = ?1 DESC, s.max_client_items DESC
                 LIMIT 1",
                params![max],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?;
        Ok(match row {
            None => Readiness::InProgress,
            Some((epoch, version, size)) if size == max => Readiness::Ready { epoch, version },
            Some((epoch, version, size)) => Readiness::OtherSize {
                epoch,
                version,
                built_for: size.max(0) as usize,
            },
        })
    }

    /// True when every entry has its OPRF output under the key of `epoch` (what a set
    /// built at the current version implies; checked again before a server encodes a set
    /// of its own from the stored outputs).
    pub fn outputs_complete(&self, epoch: u32) -> Result<bool, StoreError> {
        Ok(!self.conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM entries WHERE epoch IS NOT ?1 OR output IS NULL)",
            params![epoch],
            |r| r.get::<_, bool>(0),
        )?)
    }

    /// The sizes (`max_client_items`) of the encoded sets stored for the current key
    /// epoch, current or not: `psi import` tells when a server of another size will
    /// have to encode its own set.
    pub fn encoded_set_sizes(&self) -> Result<Vec<usize>, StoreError> {
        let mut q = self.conn.prepare(
            "SELECT max_client_items FROM encoded_sets
             WHERE epoch = (SELECT MAX(epoch) FROM keys) ORDER BY max_client_items",
        )?;
        let sizes = q
            .query_map([], |r| r.get::<_, i64>(0))?
            .map(|r| r.map(|n| n.max(0) as usize))
            .collect::<Result<_, _>>()?;
        Ok(sizes)
    }

    /// Runs `read` inside one read transaction, so everything it reads comes from the
    /// same committed state even while another process writes (WAL). `read` must not
    /// write.
    pub fn read_snapshot<T>(
        &mut self,
        read: impl FnOnce(&mut Store) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.conn.execute_batch("BEGIN DEFERRED")?;
        let out = read(self);
        // Nothing was written: ending the transaction either way only releases the
        // snapshot.
        let end = self
            .conn
            .execute_batch(if out.is_ok() { "COMMIT" } else { "ROLLBACK" });
        let out = out?;
        end?;
        Ok(out)
    }

    /// The registry version: bumped by every change of the entries.
    pub fn version(&self) -> Result<i64, StoreError> {
        Ok(self
            .conn
            .query_row("SELECT v FROM meta WHERE k = 'version'", [], |r| r.get(0))?)
    }

    /// Brings the store up to date for `max_client_items` ([`super::refresh`]).
    pub fn refresh(
        &mut self,
        max_client_items: usize,
        threads: Threads,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<RefreshStats, StoreError> {
        super::refresh(self, max_client_items, threads, progress)
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

const TOKEN_COLUMNS: &str =
    "id, name, strftime('%Y-%m-%dT%H:%M:%SZ', created, 'unixepoch'), revoked, items_per_hour";

fn token_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<TokenInfo> {
    Ok(TokenInfo {
        id: r.get(0)?,
        name: r.get(1)?,
        created: r.get(2)?,
        revoked: r.get::<_, i64>(3)? != 0,
        items_per_hour: r.get::<_, Option<i64>>(4)?.map(|v| v.max(0) as u64),
    })
}

impl Store {
    /// Issues a new random bearer token (`psi_` and 64 hex digits) and stores its digest.
    /// `items_per_hour`: its own budget (`None`: the server's default; 0: unlimited).
    pub fn add_token(
        &mut self,
        name: Option<&str>,
        items_per_hour: Option<u64>,
    ) -> Result<NewToken, StoreError> {
        let TokenIssue {
            token,
            digest,
            items_per_hour: budget,
        } = TokenIssue::new(name, items_per_hour)?;
        self.conn.execute(
            "INSERT INTO tokens (digest, name, created, items_per_hour)
             VALUES (?1, ?2, CAST(strftime('%s', 'now') AS INTEGER), ?3)",
            params![digest.as_slice(), name, budget],
        )?;
        let id = self.conn.last_insert_rowid();
        let info = self.conn.query_row(
            &format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE id = ?1"),
            params![id],
            token_row,
        )?;
        Ok(NewToken { info, token })
    }

    /// Revokes token `id` (its row stays, marked revoked).
    pub fn revoke_token(&mut self, id: i64) -> Result<Revoked, StoreError> {
        let revoked: Option<i64> = self
            .conn
            .query_row(
                "SELECT revoked FROM tokens WHERE id = ?1",
                params![id],
                |r| r.get(0),
            )
            .optional()?;
        Ok(match revoked {
            None => Revoked::NoSuchToken,
            Some(r) if r != 0 => Revoked::Already,
            Some(_) => {
                self.conn
                    .execute("UPDATE tokens SET revoked = 1 WHERE id = ?1", params![id])?;
                Revoked::Now
            }
        })
    }

    /// Every issued token, revoked ones included, by id.
    pub fn tokens(&self) -> Result<Vec<TokenInfo>, StoreError> {
        let mut q = self
            .conn
            .prepare(&format!("SELECT {TOKEN_COLUMNS} FROM tokens ORDER BY id"))?;
        let rows = q.query_map([], token_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The token whose digest is `digest` (see [`token_digest`]), revoked or not.
    pub fn token_by_digest(&self, digest: &[u8; 32]) -> Result<Option<TokenInfo>, StoreError> {
        Ok(self
            .conn
            .query_row(
                &format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE digest = ?1"),
                params![digest.as_slice()],
                token_row,
            )
            .optional()?)
    }

    /// True once any token was issued (revoked ones count: revoking the last token must
    /// not open the server to everyone).
    pub fn has_tokens(&self) -> Result<bool, StoreError> {
        Ok(self
            .conn
            .query_row("SELECT EXISTS (SELECT 1 FROM tokens)", [], |r| r.get(0))?)
    }

    /// The saved rate-limit budgets.
    pub fn budgets(&self) -> Result<Vec<SavedBudget>, StoreError> {
        let mut q = self
            .conn
            .prepare("SELECT client, remaining, per_hour, updated_ms FROM budgets")?;
        let rows = q.query_map([], |r| {
            Ok(SavedBudget {
                client: r.get(0)?,
                remaining: r.get(1)?,
                per_hour: r.get::<_, i64>(2)?.max(0) as u64,
                updated_ms: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Saves `rows` (replacing older rows of the same clients) and deletes the rows whose
    /// budget is full again at `now_ms` (refilled at `per_hour` an hour since
    /// `updated_ms`; every row older than an hour is), in one transaction.
    pub fn save_budgets(&mut self, rows: &[SavedBudget], now_ms: i64) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        {
            let mut up = tx.prepare(
                "INSERT OR REPLACE INTO budgets (client, remaining, per_hour, updated_ms)
                 VALUES (?1, ?2, ?3, ?4)",
            )?;
            for b in rows {
                let per_hour = i64::try_from(b.per_hour).unwrap_or(i64::MAX);
                up.execute(params![b.client, b.remaining, per_hour, b.updated_ms])?;
            }
        }
        tx.execute(
            "DELETE FROM budgets WHERE per_hour <= 0 OR updated_ms < ?1 - 3600000
                 OR remaining + (?1 - updated_ms) / 3600000.0 * per_hour >= per_hour",
            params![now_ms],
        )?;
        tx.commit()?;
        Ok(())
    }
}

/// SQLite needs no lease: its write lock already keeps two writers apart, and a refresh
/// that another process repeats finds the work done (every output computed, the set built
/// at the current version).
struct NoLease;
impl BuildLease for NoLease {}

impl SetWork for Store {
    fn lease_builds(&mut self) -> Result<Box<dyn BuildLease>, StoreError> {
        Ok(Box::new(NoLease))
    }

    fn pending_outputs(&mut self, epoch: u32) -> Result<u64, StoreError> {
        let n: i64 = self.conn.query_row(
            "SELECT COUNT(*) FROM entries WHERE epoch IS NOT ?1 OR output IS NULL",
            params![epoch],
            |r| r.get(0),
        )?;
        Ok(n.max(0) as u64)
    }

    fn pending_batch(
        &mut self,
        epoch: u32,
        limit: usize,
    ) -> Result<Vec<(i64, String)>, StoreError> {
        let mut q = self.conn.prepare(
            "SELECT id, identifier FROM entries WHERE epoch IS NOT ?1 OR output IS NULL
             LIMIT ?2",
        )?;
        let rows = q
            .query_map(params![epoch, limit as i64], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }

    fn put_outputs(
        &mut self,
        epoch: u32,
        outputs: &[(i64, [u8; OUTPUT_LEN])],
    ) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        {
            let mut up = tx.prepare("UPDATE entries SET epoch = ?1, output = ?2 WHERE id = ?3")?;
            for (id, out) in outputs {
                up.execute(params![epoch, out.as_slice(), id])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    fn set_built_at(
        &mut self,
        epoch: u32,
        max_client_items: usize,
    ) -> Result<Option<i64>, StoreError> {
        Ok(self
            .conn
            .query_row(
                "SELECT version FROM encoded_sets WHERE epoch = ?1 AND max_client_items = ?2",
                params![epoch, max_client_items as i64],
                |r| r.get(0),
            )
            .optional()?)
    }

    fn all_outputs(&mut self) -> Result<Vec<[u8; OUTPUT_LEN]>, StoreError> {
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

    fn put_set(
        &mut self,
        max_client_items: usize,
        version: i64,
        set: &StoredSet,
    ) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        tx.execute(
            "DELETE FROM encoded_sets WHERE epoch <> ?1 OR max_client_items = ?2",
            params![set.epoch, max_client_items as i64],
        )?;
        tx.execute(
            "INSERT INTO encoded_sets (epoch, max_client_items, version, etag, bytes)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                set.epoch,
                max_client_items as i64,
                version,
                set.etag,
                set.bytes
            ],
        )?;
        tx.commit()?;
        Ok(())
    }

    fn outputs_overwritten(&mut self) -> Result<(), StoreError> {
        // Outputs of an older epoch were overwritten: keep no copy in the log.
        self.scrub_or_warn("output refresh")
    }
}

impl RegistryStore for Store {
    fn key_created(&mut self) -> Result<Option<std::time::SystemTime>, StoreError> {
        Store::key_created(self)
    }
    fn current_key(&mut self) -> Result<ServerKey, StoreError> {
        Store::current_key(self)
    }
    fn rotate_key(&mut self) -> Result<ServerKey, StoreError> {
        Store::rotate_key(self)
    }
    fn add_entry_list(
        &mut self,
        entries: &[(&str, Option<&str>)],
    ) -> Result<ImportCounts, StoreError> {
        self.add_entries(entries.iter().copied())
    }
    fn remove_entry_list(&mut self, identifiers: &[&str]) -> Result<u64, StoreError> {
        self.remove_entries(identifiers.iter().copied())
    }
    fn len(&self) -> Result<u64, StoreError> {
        Store::len(self)
    }
    fn readiness(&self, max_client_items: usize) -> Result<Readiness, StoreError> {
        Store::readiness(self, max_client_items)
    }
    fn outputs_complete(&self, epoch: u32) -> Result<bool, StoreError> {
        Store::outputs_complete(self, epoch)
    }
    fn encoded_set_sizes(&self) -> Result<Vec<usize>, StoreError> {
        Store::encoded_set_sizes(self)
    }
    fn version(&self) -> Result<i64, StoreError> {
        Store::version(self)
    }
    fn encoded_set(&mut self, max_client_items: usize) -> Result<Option<StoredSet>, StoreError> {
        Store::encoded_set(self, max_client_items)
    }
    fn entries(&self) -> Result<Vec<LoadedEntry>, StoreError> {
        Store::entries(self)
    }
    fn snapshot(
        &mut self,
        read: &mut dyn FnMut(&mut dyn RegistryStore) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.read_snapshot(|s| read(s))
    }
}

impl AccountStore for Store {
    fn add_token(
        &mut self,
        name: Option<&str>,
        items_per_hour: Option<u64>,
    ) -> Result<NewToken, StoreError> {
        Store::add_token(self, name, items_per_hour)
    }
    fn revoke_token(&mut self, id: i64) -> Result<Revoked, StoreError> {
        Store::revoke_token(self, id)
    }
    fn tokens(&self) -> Result<Vec<TokenInfo>, StoreError> {
        Store::tokens(self)
    }
    fn token_by_digest(&self, digest: &[u8; 32]) -> Result<Option<TokenInfo>, StoreError> {
        Store::token_by_digest(self, digest)
    }
    fn has_tokens(&self) -> Result<bool, StoreError> {
        Store::has_tokens(self)
    }
    fn budgets(&self) -> Result<Vec<SavedBudget>, StoreError> {
        Store::budgets(self)
    }
    fn save_budgets(&mut self, rows: &[SavedBudget], now_ms: i64) -> Result<(), StoreError> {
        Store::save_budgets(self, rows, now_ms)
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
    use crate::storage::token_digest;

    #[test]
    fn readiness_tells_a_change_in_progress_from_one_built_at_another_size() {
        let dir = std::env::temp_dir().join(format!("psi-store-ready-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("r.sqlite");
        let mut s = Store::open(&path).unwrap();
        let refresh = |s: &mut Store, max| s.refresh(max, Threads::ONE, &mut |_, _| {}).unwrap();
        s.add_entries([("+14155550001", None), ("+14155550002", None)])
            .unwrap();
        assert_eq!(s.readiness(100).unwrap(), Readiness::InProgress);
        refresh(&mut s, 100);
        let v = s.version().unwrap();
        assert_eq!(
            s.readiness(100).unwrap(),
            Readiness::Ready {
                epoch: 1,
                version: v
            }
        );
        let other = Readiness::OtherSize {
            epoch: 1,
            version: v,
            built_for: 100,
        };
        assert_eq!(s.readiness(200).unwrap(), other);
        assert!(s.outputs_complete(1).unwrap());
        // An import's first step: no set is current at any size.
        s.add_entries([("+14155550003", None)]).unwrap();
        assert_eq!(s.readiness(200).unwrap(), Readiness::InProgress);
        assert!(!s.outputs_complete(1).unwrap());
        refresh(&mut s, 100);
        refresh(&mut s, 200);
        assert_eq!(s.encoded_set_sizes().unwrap(), vec![100, 200]);
        assert_eq!(s.readiness(200).unwrap().version(), Some((1, v + 1)));
        // A rotation's first step, then its set at one size.
        s.rotate_key().unwrap();
        assert_eq!(s.readiness(200).unwrap(), Readiness::InProgress);
        assert!(s.encoded_set_sizes().unwrap().is_empty());
        refresh(&mut s, 100);
        assert!(matches!(
            s.readiness(200).unwrap(),
            Readiness::OtherSize {
                epoch: 2,
                built_for: 100,
                ..
            }
        ));

        // A read-only connection reads the same and writes nothing; it creates nothing.
        let mut ro = Store::open_read_only(&path).unwrap();
        assert_eq!(ro.readiness(100).unwrap().version(), Some((2, v + 1)));
        assert!(ro.add_entries([("+14155550004", None)]).is_err());
        assert_eq!(s.len().unwrap(), 3);
        assert!(Store::open_read_only(&dir.join("missing.sqlite")).is_err());
        assert!(!dir.join("missing.sqlite").exists());
        assert!(matches!(
            Store::open_read_only(Path::new(":memory:")),
            Err(StoreError::InMemory)
        ));
        drop((s, ro));
        let _ = std::fs::remove_dir_all(&dir);
    }

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

    #[test]
    fn tokens_are_stored_as_digests_and_revoked_in_place() {
        let mut s = Store::open(Path::new(":memory:")).unwrap();
        assert!(!s.has_tokens().unwrap());
        let a = s.add_token(Some("alice"), Some(100)).unwrap();
        let b = s.add_token(None, None).unwrap();
        assert!(a.token.starts_with("psi_") && a.token.len() == 68);
        assert_ne!(a.token.as_str(), b.token.as_str());
        assert_eq!((a.info.id, b.info.id), (1, 2));
        let found = s.token_by_digest(&token_digest(&a.token)).unwrap().unwrap();
        assert_eq!(found, a.info);
        assert_eq!(found.items_per_hour, Some(100));
        assert!(
            s.token_by_digest(&token_digest("psi_nope"))
                .unwrap()
                .is_none()
        );
        // Only the digest is stored.
        let raw: Vec<u8> = s
            .conn
            .query_row("SELECT digest FROM tokens WHERE id = 1", [], |r| r.get(0))
            .unwrap();
        assert_eq!(raw, token_digest(&a.token));
        assert_eq!(s.revoke_token(1).unwrap(), Revoked::Now);
        assert_eq!(s.revoke_token(1).unwrap(), Revoked::Already);
        assert_eq!(s.revoke_token(9).unwrap(), Revoked::NoSuchToken);
        assert!(
            s.token_by_digest(&token_digest(&a.token))
                .unwrap()
                .unwrap()
                .revoked
        );
        assert!(s.has_tokens().unwrap());
        assert_eq!(s.tokens().unwrap().len(), 2);
        assert!(matches!(
            s.add_token(Some("a\nb"), None),
            Err(StoreError::InvalidInput(_))
        ));
        assert!(matches!(
            s.add_token(None, Some(u64::MAX)),
            Err(StoreError::InvalidInput(_))
        ));
    }

    #[test]
    fn budgets_are_saved_replaced_and_forgotten() {
        let mut s = Store::open(Path::new(":memory:")).unwrap();
        let row = |c: &str, remaining: f64, t: i64| SavedBudget {
            client: c.into(),
            remaining,
            per_hour: 10,
            updated_ms: t,
        };
        // 10 an hour: one item comes back every 360 s.
        s.save_budgets(&[row("a", 1.0, 0), row("b", 9.0, 0)], 0)
            .unwrap();
        let mut got = s.budgets().unwrap();
        got.sort_by(|x, y| x.client.cmp(&y.client));
        assert_eq!(got, vec![row("a", 1.0, 0), row("b", 9.0, 0)]);
        // b is full again after 360 s and forgotten; a is replaced and kept.
        s.save_budgets(&[row("a", 0.5, 1000)], 360_000).unwrap();
        assert_eq!(s.budgets().unwrap(), vec![row("a", 0.5, 1000)]);
        s.save_budgets(&[], 3_000_000).unwrap();
        assert_eq!(s.budgets().unwrap(), vec![row("a", 0.5, 1000)]);
        // An hour after its charge every budget is full.
        s.save_budgets(&[], 3_601_000).unwrap();
        assert!(s.budgets().unwrap().is_empty());
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
