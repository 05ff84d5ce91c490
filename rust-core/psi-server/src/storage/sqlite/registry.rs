//! The registry and its key epochs on SQLite: keys, entries, the registry version and the
//! stored encoded sets ([`RegistryStore`]).

use super::super::contract::{
    ChangeCounts, ImportCounts, LoadedEntry, Readiness, RegistryChanges, RegistryStore, StoredSet,
    now_ms, os_rng,
};
use super::super::error::StoreError;
use super::super::refresh::RefreshStats;
use super::Store;
use psi_core::Threads;
use psi_core::dh::ServerKey;
use psi_core::oprf::OprfKey;
use rusqlite::{OptionalExtension, params};

impl Store {
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
        // Deltas are per key epoch (ADR 0047 §3.3): the change log restarts, and the
        // removed identifiers in it go with the old key (scrubbed below).
        super::changes::forget_in(&tx, None)?;
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
        self.add_rows(entries)
    }

    /// [`Store::add_entries`] over borrowed or owned strings: one transaction, two
    /// prepared statements, a row at a time (SQLite's bulk path: no round trips, so a
    /// prepared statement per row is what a bulk load does), the version bumped once.
    fn add_rows<A: AsRef<str>, B: AsRef<str>>(
        &mut self,
        entries: impl IntoIterator<Item = (A, Option<B>)>,
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
                let (id, label) = (id.as_ref(), label.as_ref().map(AsRef::as_ref));
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
        self.remove_rows(identifiers)
    }

    /// [`Store::remove_entries`] over borrowed or owned strings (one transaction, one
    /// prepared statement).
    fn remove_rows<A: AsRef<str>>(
        &mut self,
        identifiers: impl IntoIterator<Item = A>,
    ) -> Result<u64, StoreError> {
        let tx = self.conn.transaction()?;
        let mut removed = 0u64;
        {
            let mut del = tx.prepare("DELETE FROM entries WHERE identifier = ?1")?;
            for id in identifiers {
                removed += del.execute(params![id.as_ref()])? as u64;
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

    /// Brings the store up to date for `max_client_items` ([`super::super::refresh()`]).
    pub fn refresh(
        &mut self,
        max_client_items: usize,
        threads: Threads,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<RefreshStats, StoreError> {
        super::super::refresh::refresh(self, max_client_items, threads, progress)
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
        // Sized first: grown by doubling, the list of 10^7 entries would reserve 2^24
        // (and hold both buffers while it moves).
        let count: i64 = self
            .conn
            .query_row("SELECT count(*) FROM entries", [], |r| r.get(0))?;
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
        let mut out = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
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
        self.add_rows(entries.iter().copied())
    }
    fn add_entry_stream(
        &mut self,
        entries: &mut dyn Iterator<Item = (String, Option<String>)>,
    ) -> Result<ImportCounts, StoreError> {
        self.add_rows(entries)
    }
    fn remove_entry_list(&mut self, identifiers: &[&str]) -> Result<u64, StoreError> {
        self.remove_rows(identifiers.iter().copied())
    }
    fn remove_entry_stream(
        &mut self,
        identifiers: &mut dyn Iterator<Item = String>,
    ) -> Result<u64, StoreError> {
        self.remove_rows(identifiers)
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
    fn changes(&mut self, after: i64, upto: i64) -> Result<RegistryChanges, StoreError> {
        Store::changes(self, after, upto)
    }
    fn change_counts(&mut self, after: i64, upto: i64) -> Result<ChangeCounts, StoreError> {
        Store::change_counts(self, after, upto)
    }
    fn changes_kept_after(&self) -> Result<i64, StoreError> {
        Store::changes_kept_after(self)
    }
    fn forget_changes_before(&mut self, version: i64) -> Result<u64, StoreError> {
        Store::forget_changes_before(self, version)
    }
    fn snapshot(
        &mut self,
        read: &mut dyn FnMut(&mut dyn RegistryStore) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.read_snapshot(|s| read(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

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
}
