//! The change log on SQLite: what was net added and removed between two registry versions
//! ([`RegistryStore::changes`](super::super::RegistryStore::changes),
//! docs/adr/0055-registry-changes-in-the-store.md).
//!
//! `changes(version, identifier, sign)` holds one row per identifier whose membership a
//! version changed: `+1` added, `-1` removed. Two triggers on `entries` write it, in the
//! transaction of the change: an insert logs `+1`, a delete `-1`, at the version the
//! transaction is about to commit (`meta.version + 1`: every write of the entries bumps the
//! version once, after its rows, and SQLite has one writer at a time, so no other
//! transaction moves the version in between). An insert ignored as a duplicate and a
//! delete of an absent identifier change no row, so they log nothing; a label change is an
//! update, not logged. Triggers rather than statements in Rust, so that every path that
//! writes `entries` logs, including a `psi` from before the change log that opens an
//! upgraded file (SQLite files have no schema version it would refuse).
//! `meta.changes_after`: the oldest version changes are kept from.

use super::super::contract::{ChangeCounts, RegistryChanges, check_change_range};
use super::super::error::StoreError;
use super::Store;
use rusqlite::{TransactionBehavior, params};

/// The change log and its triggers, created with the oldest version kept set to the
/// version the store has when it first keeps changes (0 for a new store). One
/// transaction, so a file is either upgraded whole or not at all.
pub(super) const SCHEMA: &str = "
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS changes (
    version INTEGER NOT NULL,
    identifier TEXT NOT NULL,
    sign INTEGER NOT NULL CHECK (sign IN (-1, 1)),
    PRIMARY KEY (version, identifier)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS entries_added AFTER INSERT ON entries BEGIN
    INSERT INTO changes (version, identifier, sign)
    VALUES ((SELECT v FROM meta WHERE k = 'version') + 1, NEW.identifier, 1);
END;
CREATE TRIGGER IF NOT EXISTS entries_removed AFTER DELETE ON entries BEGIN
    INSERT INTO changes (version, identifier, sign)
    VALUES ((SELECT v FROM meta WHERE k = 'version') + 1, OLD.identifier, -1);
END;
INSERT OR IGNORE INTO meta (k, v) SELECT 'changes_after', v FROM meta WHERE k = 'version';
COMMIT;
";

impl Store {
    /// The net change of membership from version `after` to `upto`
    /// ([`RegistryStore::changes`](super::super::RegistryStore::changes)). One statement:
    /// the oldest version kept, the current version and the summed log come from one
    /// committed state.
    pub fn changes(&self, after: i64, upto: i64) -> Result<RegistryChanges, StoreError> {
        let mut q = self.conn.prepare(
            "SELECT b.kept, b.current, c.identifier, c.net
             FROM (SELECT (SELECT v FROM meta WHERE k = 'changes_after') AS kept,
                          (SELECT v FROM meta WHERE k = 'version') AS current) b
             LEFT JOIN (SELECT identifier, SUM(sign) AS net FROM changes
                        WHERE version > ?1 AND version <= ?2
                        GROUP BY identifier HAVING SUM(sign) <> 0) c
               ON ?1 >= b.kept AND ?2 <= b.current AND ?1 <= ?2",
        )?;
        let mut rows = q.query(params![after, upto])?;
        let mut bounds = None;
        let mut net = Vec::new();
        while let Some(r) = rows.next()? {
            if bounds.is_none() {
                bounds = Some((r.get::<_, Option<i64>>(0)?, r.get::<_, i64>(1)?));
            }
            if let Some(id) = r.get::<_, Option<String>>(2)? {
                net.push(Ok((id, r.get::<_, i64>(3)?)));
            }
        }
        let (kept, current) = bounds.map_or((None, None), |(kept, current)| (kept, Some(current)));
        check_change_range(after, upto, kept, current)?;
        RegistryChanges::from_net(net)
    }

    /// How many identifiers [`Store::changes`] lists as added and as removed
    /// ([`RegistryStore::change_counts`](super::super::RegistryStore::change_counts)):
    /// the same summed log, counted in the statement (no identifier is read out).
    pub fn change_counts(&self, after: i64, upto: i64) -> Result<ChangeCounts, StoreError> {
        let (kept, current, added, removed, other) = self.conn.query_row(
            "SELECT (SELECT v FROM meta WHERE k = 'changes_after'),
                    (SELECT v FROM meta WHERE k = 'version'),
                    count(*) FILTER (WHERE net = 1),
                    count(*) FILTER (WHERE net = -1),
                    count(*) FILTER (WHERE net NOT IN (-1, 1))
             FROM (SELECT SUM(sign) AS net FROM changes
                   WHERE version > ?1 AND version <= ?2
                   GROUP BY identifier HAVING SUM(sign) <> 0)",
            params![after, upto],
            |r| {
                Ok((
                    r.get::<_, Option<i64>>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, i64>(4)?,
                ))
            },
        )?;
        check_change_range(after, upto, kept, Some(current))?;
        ChangeCounts::from_rows(added, removed, other)
    }

    /// The oldest version changes are kept from
    /// ([`RegistryStore::changes_kept_after`](super::super::RegistryStore::changes_kept_after)).
    pub fn changes_kept_after(&self) -> Result<i64, StoreError> {
        Ok(self
            .conn
            .query_row("SELECT v FROM meta WHERE k = 'changes_after'", [], |r| {
                r.get(0)
            })?)
    }

    /// Forgets the changes up to `version`
    /// ([`RegistryStore::forget_changes_before`](super::super::RegistryStore::forget_changes_before)),
    /// then scrubs the forgotten identifiers from the file and its log ([`Store::scrub`]).
    pub fn forget_changes_before(&mut self, version: i64) -> Result<u64, StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let forgotten = forget_in(&tx, Some(version))?;
        tx.commit()?;
        if forgotten > 0 {
            // The forgotten identifiers leave the log too.
            self.scrub_or_warn("forgetting registry changes")?;
        }
        Ok(forgotten)
    }
}

/// Forgets, inside `tx`, the changes up to `version` (`None`: up to the current version,
/// as a key rotation does); returns how many rows went. The caller commits and scrubs.
pub(super) fn forget_in(
    tx: &rusqlite::Transaction<'_>,
    version: Option<i64>,
) -> Result<u64, StoreError> {
    let (kept, current): (i64, i64) = tx.query_row(
        "SELECT (SELECT v FROM meta WHERE k = 'changes_after'),
                    (SELECT v FROM meta WHERE k = 'version')",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let version = version.unwrap_or(current);
    if version > current {
        return Err(StoreError::VersionAhead {
            upto: version,
            current,
        });
    }
    if version <= kept {
        return Ok(0);
    }
    let forgotten = tx.execute("DELETE FROM changes WHERE version <= ?1", params![version])?;
    tx.execute(
        "UPDATE meta SET v = ?1 WHERE k = 'changes_after'",
        params![version],
    )?;
    Ok(forgotten as u64)
}
