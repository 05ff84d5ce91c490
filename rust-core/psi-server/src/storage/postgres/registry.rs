//! The registry and its key epochs on PostgreSQL: [`RegistryStore`] and [`SetWork`] with
//! the semantics of the SQLite store ([`crate::storage::sqlite`]), over the blocking
//! client. Every method blocks: call them from a blocking thread (`spawn_blocking`, the
//! CLI), never from an async worker thread.
//!
//! What differs from SQLite:
//! - The OPRF keys are sealed under the at-rest key file ([`crate::sealing`]); the
//!   store cannot be opened without it.
//! - The build lease is an advisory lock ([`super::lease`]).
//! - Deleted rows (an old sealed key, an old epoch's outputs, removed entries) stay in
//!   the table's dead tuples until VACUUM reclaims them, and in the write-ahead log and
//!   backups for as long as those are kept: PostgreSQL cannot scrub them as SQLite's
//!   `secure_delete` does. The keys among them are sealed; the outputs are not.

use super::super::contract::{
    BuildLease, ChangeCounts, ImportCounts, LoadedEntry, Readiness, RegistryChanges, RegistryStore,
    SetWork, StoredSet, os_rng,
};
use super::super::error::StoreError;
use super::changes;
use super::import;
use super::lease::PgLease;
use super::schema;
use super::settings::PgSettings;
use crate::sealing::SealKeys;
use psi_core::dh::ServerKey;
use psi_core::oprf::{OUTPUT_LEN, OprfKey};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Rows per statement of an output batch (bounds a statement's size).
const ROWS_PER_STATEMENT: usize = 10_000;

/// The PostgreSQL registry store: one connection (its session holds the build lease), the
/// at-rest keys, the database id bound into each sealed key.
pub struct PgStore {
    client: Arc<Mutex<postgres::Client>>,
    seal: SealKeys,
    database_id: Vec<u8>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").finish_non_exhaustive()
    }
}

impl PgStore {
    /// Connects, creates the tables that are missing, and loads the at-rest key file
    /// (required: [`StoreError::SealKeyRequired`] without one). Blocking.
    pub fn open(settings: &PgSettings) -> Result<PgStore, StoreError> {
        let seal = load_seal(settings)?;
        let mut client = settings.connect_blocking()?;
        let database_id = schema::ensure(&mut client)?;
        Ok(PgStore {
            client: Arc::new(Mutex::new(client)),
            seal,
            database_id,
        })
    }

    /// Connects to a store a writer created, for reading only: creates nothing, and the
    /// session refuses writes (`default_transaction_read_only`). What a server's watcher
    /// polls. Blocking.
    pub fn open_read_only(settings: &PgSettings) -> Result<PgStore, StoreError> {
        let seal = load_seal(settings)?;
        let mut client = settings.connect_blocking()?;
        let database_id = schema::existing(&mut client)?;
        client.batch_execute("SET default_transaction_read_only = on")?;
        Ok(PgStore {
            client: Arc::new(Mutex::new(client)),
            seal,
            database_id,
        })
    }

    fn conn(&self) -> MutexGuard<'_, postgres::Client> {
        self.client.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What a sealed key of `epoch` is bound to.
    fn purpose(&self, epoch: u32) -> Vec<u8> {
        format!(
            "oprf-key epoch={epoch} db={}",
            hex::encode(&self.database_id)
        )
        .into_bytes()
    }

    fn open_key(&self, epoch: u32, sealed: &[u8]) -> Result<ServerKey, StoreError> {
        let plain = self.seal.open(&self.purpose(epoch), sealed)?;
        let arr: zeroize::Zeroizing<[u8; 32]> = zeroize::Zeroizing::new(
            plain
                .as_slice()
                .try_into()
                .map_err(|_| StoreError::CorruptKey(epoch))?,
        );
        let key = OprfKey::from_bytes(&arr).ok_or(StoreError::CorruptKey(epoch))?;
        Ok(ServerKey::new(key, epoch))
    }

    fn seal_key(&self, key: &ServerKey) -> Vec<u8> {
        self.seal.seal(
            &self.purpose(key.epoch()),
            key.oprf_key().to_bytes().as_slice(),
        )
    }

    /// Re-seals under the first key of the at-rest key file every stored key sealed
    /// under another (`psi reseal`, the at-rest key rotation), in one transaction.
    /// Returns how many were re-sealed.
    pub fn reseal(&mut self) -> Result<u64, StoreError> {
        let mut conn = self.client.lock().unwrap_or_else(PoisonError::into_inner);
        let mut tx = conn.transaction()?;
        let rows = tx.query(
            "SELECT epoch, sealed FROM keys ORDER BY epoch FOR UPDATE",
            &[],
        )?;
        let mut done = 0;
        for row in rows {
            let epoch = epoch_of(row.get(0))?;
            let sealed: Vec<u8> = row.get(1);
            if !self.seal.needs_reseal(&sealed) {
                continue;
            }
            let purpose = self.purpose(epoch);
            let plain = self.seal.open(&purpose, &sealed)?;
            let again = self.seal.seal(&purpose, &plain);
            tx.execute(
                "UPDATE keys SET sealed = $1 WHERE epoch = $2",
                &[&again, &i64::from(epoch)],
            )?;
            done += 1;
        }
        tx.commit()?;
        Ok(done)
    }

    /// The id of the at-rest key that seals (for `psi reseal`'s report).
    pub fn sealing_key_id(&self) -> String {
        self.seal.sealing_key_id()
    }
}

fn load_seal(settings: &PgSettings) -> Result<SealKeys, StoreError> {
    let path = settings
        .seal_key_file()
        .ok_or(StoreError::SealKeyRequired)?;
    Ok(SealKeys::from_file(path)?)
}

fn epoch_of(v: i64) -> Result<u32, StoreError> {
    u32::try_from(v).map_err(|_| StoreError::InvalidInput("a stored key epoch is out of range"))
}

fn size_of(max_client_items: usize) -> i64 {
    max_client_items.min(psi_core::dh::limits::MAX_CLIENT_ITEMS) as i64
}

impl RegistryStore for PgStore {
    fn key_created(&mut self) -> Result<Option<std::time::SystemTime>, StoreError> {
        let epoch = self.current_key()?.epoch();
        let ms: Option<i64> = self
            .conn()
            .query_opt(
                "SELECT created_ms FROM keys WHERE epoch = $1",
                &[&i64::from(epoch)],
            )?
            .and_then(|r| r.get(0));
        Ok(ms.map(|ms| std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64)))
    }

    fn current_key(&mut self) -> Result<ServerKey, StoreError> {
        // Two attempts: instances starting together on an empty store both try to create
        // the first key; one insert wins and both read it.
        for _ in 0..2 {
            let row = self.conn().query_opt(
                "SELECT epoch, sealed FROM keys ORDER BY epoch DESC LIMIT 1",
                &[],
            )?;
            if let Some(row) = row {
                let epoch = epoch_of(row.get(0))?;
                let sealed: Vec<u8> = row.get(1);
                return self.open_key(epoch, &sealed);
            }
            let key = ServerKey::random(1, &mut os_rng()?);
            let sealed = self.seal_key(&key);
            self.conn().execute(
                "INSERT INTO keys (epoch, sealed, created_ms)
                 VALUES (1, $1, (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT)
                 ON CONFLICT (epoch) DO NOTHING",
                &[&sealed],
            )?;
        }
        Err(StoreError::InvalidInput(
            "the first key epoch could not be created",
        ))
    }

    fn rotate_key(&mut self) -> Result<ServerKey, StoreError> {
        let old = self.current_key()?;
        let new = old.rotate(&mut os_rng()?);
        let sealed = self.seal_key(&new);
        let epoch = i64::from(new.epoch());
        let mut conn = self.conn();
        let mut tx = conn.transaction()?;
        // A concurrent rotation from the same epoch inserts the same epoch: one of the
        // two fails on the primary key instead of both rotating.
        tx.execute(
            "INSERT INTO keys (epoch, sealed, created_ms)
             VALUES ($1, $2, (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT)",
            &[&epoch, &sealed],
        )?;
        tx.execute("DELETE FROM keys WHERE epoch <> $1", &[&epoch])?;
        // The old epoch's sets stay for its overlap (`previous_set`); older ones go.
        tx.execute(
            "DELETE FROM encoded_sets WHERE epoch < $1::BIGINT - 1",
            &[&epoch],
        )?;
        // Deltas are per key epoch (ADR 0047 §3.3): the change log restarts with it.
        changes::forget_all(&mut tx)?;
        tx.commit()?;
        Ok(new)
    }

    fn add_entry_list(
        &mut self,
        entries: &[(&str, Option<&str>)],
    ) -> Result<ImportCounts, StoreError> {
        self.add_entry_stream(
            &mut entries
                .iter()
                .map(|(id, label)| (id.to_string(), label.map(str::to_string))),
        )
    }

    /// `COPY` into a staging table, one merge (`super::import`), the version bumped once.
    fn add_entry_stream(
        &mut self,
        entries: &mut dyn Iterator<Item = (String, Option<String>)>,
    ) -> Result<ImportCounts, StoreError> {
        let mut conn = self.conn();
        let mut tx = conn.transaction()?;
        let counts = import::add(&mut tx, entries)?;
        if counts.accepted > 0 || counts.duplicates > 0 {
            tx.execute("UPDATE meta SET v = v + 1 WHERE k = 'version'", &[])?;
        }
        tx.commit()?;
        Ok(counts)
    }

    fn remove_entry_list(&mut self, identifiers: &[&str]) -> Result<u64, StoreError> {
        self.remove_entry_stream(&mut identifiers.iter().map(|id| id.to_string()))
    }

    /// `COPY` into a staging table, one delete, the version bumped once.
    fn remove_entry_stream(
        &mut self,
        identifiers: &mut dyn Iterator<Item = String>,
    ) -> Result<u64, StoreError> {
        let mut conn = self.conn();
        let mut tx = conn.transaction()?;
        let removed = import::remove(&mut tx, identifiers)?;
        if removed > 0 {
            tx.execute("UPDATE meta SET v = v + 1 WHERE k = 'version'", &[])?;
        }
        tx.commit()?;
        Ok(removed)
    }

    fn len(&self) -> Result<u64, StoreError> {
        let n: i64 = self
            .conn()
            .query_one("SELECT count(*) FROM entries", &[])?
            .get(0);
        Ok(n.max(0) as u64)
    }

    fn readiness(&self, max_client_items: usize) -> Result<Readiness, StoreError> {
        // One statement: one committed state (as SQLite's).
        let row = self.conn().query_opt(
            "SELECT s.epoch, s.version, s.max_client_items FROM encoded_sets s
             WHERE s.epoch = (SELECT max(epoch) FROM keys)
               AND s.version = (SELECT v FROM meta WHERE k = 'version')
             ORDER BY s.max_client_items = $1 DESC, s.max_client_items DESC
             LIMIT 1",
            &[&size_of(max_client_items)],
        )?;
        let Some(row) = row else {
            return Ok(Readiness::InProgress);
        };
        let (epoch, version, size): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
        let epoch = epoch_of(epoch)?;
        Ok(if size == size_of(max_client_items) {
            Readiness::Ready { epoch, version }
        } else {
            Readiness::OtherSize {
                epoch,
                version,
                built_for: size.max(0) as usize,
            }
        })
    }

    fn outputs_complete(&self, epoch: u32) -> Result<bool, StoreError> {
        let pending: bool = self
            .conn()
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM entries
                                WHERE epoch IS DISTINCT FROM $1 OR output IS NULL)",
                &[&i64::from(epoch)],
            )?
            .get(0);
        Ok(!pending)
    }

    fn encoded_set_sizes(&self) -> Result<Vec<usize>, StoreError> {
        let rows = self.conn().query(
            "SELECT max_client_items FROM encoded_sets
             WHERE epoch = (SELECT max(epoch) FROM keys) ORDER BY max_client_items",
            &[],
        )?;
        Ok(rows
            .iter()
            .map(|r| r.get::<_, i64>(0).max(0) as usize)
            .collect())
    }

    fn version(&self) -> Result<i64, StoreError> {
        Ok(self
            .conn()
            .query_one("SELECT v FROM meta WHERE k = 'version'", &[])?
            .get(0))
    }

    fn encoded_set(&mut self, max_client_items: usize) -> Result<Option<StoredSet>, StoreError> {
        let epoch = self.current_key()?.epoch();
        let row = self.conn().query_opt(
            "SELECT etag, bytes FROM encoded_sets WHERE epoch = $1 AND max_client_items = $2",
            &[&i64::from(epoch), &size_of(max_client_items)],
        )?;
        Ok(row.map(|r| StoredSet {
            epoch,
            etag: r.get(0),
            bytes: r.get(1),
        }))
    }

    fn entries(&self) -> Result<Vec<LoadedEntry>, StoreError> {
        use postgres::fallible_iterator::FallibleIterator;
        let mut conn = self.conn();
        // Sized first, then streamed: `query` would hold every row (and its buffer) beside
        // the list, twice the registry at its largest.
        let count: i64 = conn.query_one("SELECT count(*) FROM entries", &[])?.get(0);
        let mut out = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
        let mut rows = conn.query_raw(
            "SELECT id, identifier, label, output FROM entries ORDER BY id",
            std::iter::empty::<&(dyn postgres::types::ToSql + Sync)>(),
        )?;
        while let Some(r) = rows.next()? {
            let id: i64 = r.get(0);
            let output: Option<&[u8]> = r.get(3);
            out.push(LoadedEntry {
                identifier: r.get(1),
                label: r.get(2),
                output: output
                    .and_then(|o| o.try_into().ok())
                    .ok_or(StoreError::CorruptOutput(id))?,
            });
        }
        Ok(out)
    }

    fn previous_set(
        &mut self,
        max_client_items: usize,
    ) -> Result<Option<(StoredSet, std::time::SystemTime)>, StoreError> {
        // One statement: the current epoch, its key's creation and the set of the epoch
        // before it, from one committed state.
        let row = self.conn().query_opt(
            "SELECT s.epoch, s.etag, s.bytes, k.created_ms
             FROM keys k JOIN encoded_sets s ON s.epoch = k.epoch - 1
             WHERE k.epoch = (SELECT max(epoch) FROM keys) AND s.max_client_items = $1",
            &[&size_of(max_client_items)],
        )?;
        let Some(row) = row else {
            return Ok(None);
        };
        let created: Option<i64> = row.get(3);
        let Some(created) = created else {
            // A key of unknown age: its overlap cannot be timed.
            return Ok(None);
        };
        let set = StoredSet {
            epoch: epoch_of(row.get(0))?,
            etag: row.get(1),
            bytes: row.get(2),
        };
        let since = std::time::UNIX_EPOCH + std::time::Duration::from_millis(created.max(0) as u64);
        Ok(Some((set, since)))
    }

    fn forget_previous_sets(&mut self, overlap: std::time::Duration) -> Result<u64, StoreError> {
        let overlap_ms = i64::try_from(overlap.as_millis()).unwrap_or(i64::MAX);
        Ok(self.conn().execute(
            "DELETE FROM encoded_sets s USING keys k
             WHERE k.epoch = (SELECT max(epoch) FROM keys) AND s.epoch < k.epoch
               AND k.created_ms IS NOT NULL
               AND k.created_ms <= (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT - $1",
            &[&overlap_ms],
        )?)
    }

    fn changes(&mut self, after: i64, upto: i64) -> Result<RegistryChanges, StoreError> {
        changes::changes(&mut *self.conn(), after, upto)
    }

    fn change_counts(&mut self, after: i64, upto: i64) -> Result<ChangeCounts, StoreError> {
        changes::change_counts(&mut *self.conn(), after, upto)
    }

    fn changes_kept_after(&self) -> Result<i64, StoreError> {
        changes::kept_after(&mut *self.conn())
    }

    fn forget_changes_before(&mut self, version: i64) -> Result<u64, StoreError> {
        let mut conn = self.conn();
        let mut tx = conn.transaction()?;
        let forgotten = changes::forget_before(&mut tx, version)?;
        tx.commit()?;
        Ok(forgotten)
    }

    fn snapshot(
        &mut self,
        read: &mut dyn FnMut(&mut dyn RegistryStore) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.conn()
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")?;
        let out = read(self);
        // Nothing was written: ending the transaction either way only releases the
        // snapshot.
        let end = self
            .conn()
            .batch_execute(if out.is_ok() { "COMMIT" } else { "ROLLBACK" });
        out?;
        end?;
        Ok(())
    }
}

impl SetWork for PgStore {
    fn lease_builds(&mut self) -> Result<Box<dyn BuildLease>, StoreError> {
        Ok(Box::new(PgLease::take(&self.client)?))
    }

    fn pending_outputs(&mut self, epoch: u32) -> Result<u64, StoreError> {
        let n: i64 = self
            .conn()
            .query_one(
                "SELECT count(*) FROM entries WHERE epoch IS DISTINCT FROM $1 OR output IS NULL",
                &[&i64::from(epoch)],
            )?
            .get(0);
        Ok(n.max(0) as u64)
    }

    fn pending_batch(
        &mut self,
        epoch: u32,
        limit: usize,
    ) -> Result<Vec<(i64, String)>, StoreError> {
        let rows = self.conn().query(
            "SELECT id, identifier FROM entries WHERE epoch IS DISTINCT FROM $1 OR output IS NULL
             ORDER BY id LIMIT $2",
            &[&i64::from(epoch), &(limit as i64)],
        )?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    fn put_outputs(
        &mut self,
        epoch: u32,
        outputs: &[(i64, [u8; OUTPUT_LEN])],
    ) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let mut tx = conn.transaction()?;
        for chunk in outputs.chunks(ROWS_PER_STATEMENT) {
            let ids: Vec<i64> = chunk.iter().map(|(id, _)| *id).collect();
            let outs: Vec<&[u8]> = chunk.iter().map(|(_, o)| o.as_slice()).collect();
            tx.execute(
                "UPDATE entries e SET epoch = $1, output = u.output
                 FROM unnest($2::bigint[], $3::bytea[]) AS u(id, output)
                 WHERE e.id = u.id",
                &[&i64::from(epoch), &ids, &outs],
            )?;
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
            .conn()
            .query_opt(
                "SELECT version FROM encoded_sets WHERE epoch = $1 AND max_client_items = $2",
                &[&i64::from(epoch), &(max_client_items as i64)],
            )?
            .map(|r| r.get(0)))
    }

    fn all_outputs(&mut self) -> Result<Vec<[u8; OUTPUT_LEN]>, StoreError> {
        let rows = self
            .conn()
            .query("SELECT id, output FROM entries ORDER BY id", &[])?;
        rows.iter()
            .map(|r| {
                let id: i64 = r.get(0);
                let o: Option<Vec<u8>> = r.get(1);
                o.as_deref()
                    .and_then(|o| o.try_into().ok())
                    .ok_or(StoreError::CorruptOutput(id))
            })
            .collect()
    }

    fn put_set(
        &mut self,
        max_client_items: usize,
        version: i64,
        set: &StoredSet,
    ) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let mut tx = conn.transaction()?;
        let epoch = i64::from(set.epoch);
        let size = max_client_items as i64;
        tx.execute(
            "DELETE FROM encoded_sets
             WHERE epoch < $1::BIGINT - 1 OR epoch > $1 OR (epoch = $1 AND max_client_items = $2)",
            &[&epoch, &size],
        )?;
        tx.execute(
            "INSERT INTO encoded_sets (epoch, max_client_items, version, etag, bytes)
             VALUES ($1, $2, $3, $4, $5)",
            &[&epoch, &size, &version, &set.etag, &set.bytes],
        )?;
        tx.commit()?;
        Ok(())
    }
}
