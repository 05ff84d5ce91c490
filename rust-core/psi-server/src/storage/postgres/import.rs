//! The bulk path of an import on PostgreSQL: the rows are streamed with `COPY ... FROM
//! STDIN (FORMAT binary)` into a temporary staging table of the import's transaction, then
//! merged into `entries` by one statement (additions) or deleted by one (removals). No row
//! is sent as a statement of its own, and the rows are never all held by the client.
//!
//! The merge keeps the semantics of the SQLite store's row-by-row loop: a new identifier
//! is added once, repeats and existing identifiers count as duplicates, and the last label
//! given for an identifier (in input order) replaces the stored one; a row without a label
//! leaves it. Every count is of input rows, as before.
//!
//! Both statements also write the change log (`super::changes`) from the same rows, after
//! taking the registry version's lock, so the log is in the import's transaction.

use super::super::contract::ImportCounts;
use super::super::error::StoreError;
use super::changes;
use postgres::Transaction;
use postgres::binary_copy::BinaryCopyInWriter;
use postgres::types::Type;

/// Sorting the staged rows (the merge's `DISTINCT ON`) in memory instead of on disk up to
/// this much per sort, for this transaction only.
const MERGE_WORK_MEM: &str = "64MB";

/// Streams `entries` into the staging table and merges them into `entries`; returns the
/// counts and the number of rows given. Runs inside the caller's transaction (which bumps
/// the version and commits).
pub(super) fn add(
    tx: &mut Transaction<'_>,
    entries: &mut dyn Iterator<Item = (String, Option<String>)>,
) -> Result<ImportCounts, StoreError> {
    tx.batch_execute(&format!(
        "CREATE TEMPORARY TABLE import_rows (
             ord BIGINT NOT NULL, identifier TEXT NOT NULL, label TEXT
         ) ON COMMIT DROP;
         SET LOCAL work_mem = '{MERGE_WORK_MEM}'"
    ))?;
    let given = {
        let sink =
            tx.copy_in("COPY import_rows (ord, identifier, label) FROM STDIN (FORMAT binary)")?;
        let mut rows = BinaryCopyInWriter::new(sink, &[Type::INT8, Type::TEXT, Type::TEXT]);
        for (ord, (identifier, label)) in (0_i64..).zip(entries) {
            rows.write(&[&ord, &identifier, &label])?;
        }
        rows.finish()?
    };
    if given == 0 {
        return Ok(ImportCounts::default());
    }
    let version = changes::lock_next_version(tx)?;
    // One row per identifier: its last label given, if any (`label IS NOT NULL` first,
    // then the latest). A new identifier is inserted with it; an existing one takes it
    // when one was given and it differs. `xmax = 0` tells a row this statement inserted
    // from one it updated (PostgreSQL sets xmax on the conflicting row it locks). The
    // inserted identifiers are logged as added at the version this import commits
    // (`super::changes`); a relabel logs nothing.
    let accepted: i64 = tx
        .query_one(
            "WITH merged AS (
                 INSERT INTO entries (identifier, label)
                 SELECT DISTINCT ON (identifier) identifier, label FROM import_rows
                 ORDER BY identifier, (label IS NOT NULL) DESC, ord DESC
                 ON CONFLICT (identifier) DO UPDATE SET label = EXCLUDED.label
                     WHERE EXCLUDED.label IS NOT NULL
                       AND entries.label IS DISTINCT FROM EXCLUDED.label
                 RETURNING identifier, (xmax = 0) AS inserted),
             logged AS (
                 INSERT INTO changes (version, identifier, sign)
                 SELECT $1, identifier, 1 FROM merged WHERE inserted)
             SELECT count(*) FILTER (WHERE inserted) FROM merged",
            &[&version],
        )?
        .get(0);
    let accepted = accepted.max(0) as u64;
    Ok(ImportCounts {
        accepted,
        duplicates: given.saturating_sub(accepted),
        rejected: 0,
    })
}

/// Streams `identifiers` into a staging table and deletes the entries they name; returns
/// how many existed (an identifier given twice counts once). Inside the caller's
/// transaction.
pub(super) fn remove(
    tx: &mut Transaction<'_>,
    identifiers: &mut dyn Iterator<Item = String>,
) -> Result<u64, StoreError> {
    tx.batch_execute(
        "CREATE TEMPORARY TABLE remove_rows (identifier TEXT NOT NULL) ON COMMIT DROP",
    )?;
    let given = {
        let sink = tx.copy_in("COPY remove_rows (identifier) FROM STDIN (FORMAT binary)")?;
        let mut rows = BinaryCopyInWriter::new(sink, &[Type::TEXT]);
        for identifier in identifiers {
            rows.write(&[&identifier])?;
        }
        rows.finish()?
    };
    if given == 0 {
        return Ok(0);
    }
    // The deleted identifiers (each once, however often given) are logged as removed.
    let version = changes::lock_next_version(tx)?;
    let removed: i64 = tx
        .query_one(
            "WITH gone AS (
                 DELETE FROM entries e USING remove_rows r WHERE e.identifier = r.identifier
                 RETURNING e.identifier),
             logged AS (
                 INSERT INTO changes (version, identifier, sign)
                 SELECT $1, identifier, -1 FROM gone)
             SELECT count(*) FROM gone",
            &[&version],
        )?
        .get(0);
    Ok(removed.max(0) as u64)
}
