//! The steps of a refresh on SQLite ([`SetWork`]): outputs missing under an epoch, stored
//! per batch, and the encoded set stored in place of the older ones.

use super::super::contract::{BuildLease, SetWork, StoredSet};
use super::super::error::StoreError;
use super::Store;
use psi_core::oprf::OUTPUT_LEN;
use rusqlite::{OptionalExtension, params};

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
