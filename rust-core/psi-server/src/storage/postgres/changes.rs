//! The change log on PostgreSQL: what was net added and removed between two registry
//! versions ([`RegistryStore::changes`](super::super::RegistryStore::changes),
//! docs/adr/0055-registry-changes-in-the-store.md).
//!
//! `changes(version, identifier, sign)` holds one row per identifier whose membership a
//! version changed (`+1` added, `-1` removed), written by the import's merge and delete
//! themselves (`super::import`: one set-based statement each, from the staging table), in
//! the transaction that bumps the version. Several instances write one store, and under
//! READ COMMITTED two imports could both read version `v` and log `v + 1`; so a writer
//! takes the version row's lock ([`lock_next_version`]) before it changes the entries, and
//! logs at the version it will commit. `meta.changes_after`: the oldest version kept.

use super::super::contract::{ChangeCounts, RegistryChanges, check_change_range};
use super::super::error::StoreError;
use postgres::{GenericClient, Transaction};

/// Locks the registry version's row until the transaction ends (other writers of the
/// entries wait) and returns the version this transaction will commit.
pub(super) fn lock_next_version(tx: &mut Transaction<'_>) -> Result<i64, StoreError> {
    Ok(tx
        .query_one("SELECT v + 1 FROM meta WHERE k = 'version' FOR UPDATE", &[])?
        .get(0))
}

/// The net change from `after` to `upto`: one statement, so the bounds and the summed log
/// come from one committed state (and it runs inside a snapshot's transaction as well).
pub(super) fn changes(
    client: &mut impl GenericClient,
    after: i64,
    upto: i64,
) -> Result<RegistryChanges, StoreError> {
    let rows = client.query(
        "SELECT b.kept, b.current, c.identifier, c.net
         FROM (SELECT (SELECT v FROM meta WHERE k = 'changes_after') AS kept,
                      (SELECT v FROM meta WHERE k = 'version') AS current) b
         LEFT JOIN (SELECT identifier, sum(sign) AS net FROM changes
                    WHERE version > $1 AND version <= $2
                    GROUP BY identifier HAVING sum(sign) <> 0) c
           ON $1 >= b.kept AND $2 <= b.current AND $1 <= $2",
        &[&after, &upto],
    )?;
    let Some(bounds) = rows.first() else {
        return Err(StoreError::CorruptChanges);
    };
    check_change_range(after, upto, bounds.get(0), bounds.get(1))?;
    RegistryChanges::from_net(rows.iter().filter_map(|r| {
        r.get::<_, Option<String>>(2)
            .map(|id| Ok((id, r.get::<_, Option<i64>>(3).unwrap_or(0))))
    }))
}

/// How many identifiers [`changes`] lists as added and as removed, counted in the
/// statement (no identifier is read out).
pub(super) fn change_counts(
    client: &mut impl GenericClient,
    after: i64,
    upto: i64,
) -> Result<ChangeCounts, StoreError> {
    let r = client.query_one(
        "SELECT (SELECT v FROM meta WHERE k = 'changes_after'),
                (SELECT v FROM meta WHERE k = 'version'),
                count(*) FILTER (WHERE net = 1),
                count(*) FILTER (WHERE net = -1),
                count(*) FILTER (WHERE net NOT IN (-1, 1))
         FROM (SELECT sum(sign) AS net FROM changes
               WHERE version > $1 AND version <= $2
               GROUP BY identifier HAVING sum(sign) <> 0) c",
        &[&after, &upto],
    )?;
    check_change_range(after, upto, r.get(0), r.get(1))?;
    ChangeCounts::from_rows(r.get(2), r.get(3), r.get(4))
}

/// The oldest version changes are kept from.
pub(super) fn kept_after(client: &mut impl GenericClient) -> Result<i64, StoreError> {
    Ok(client
        .query_one("SELECT v FROM meta WHERE k = 'changes_after'", &[])?
        .get(0))
}

/// Forgets every logged change of a version at or below `version`, in one transaction
/// that holds the version row (no import commits in between).
/// Forgets every change up to the current version (a key rotation: deltas are per key
/// epoch, ADR 0047 §3.3).
pub(super) fn forget_all(tx: &mut Transaction<'_>) -> Result<u64, StoreError> {
    let current = lock_next_version(tx)? - 1;
    forget_before(tx, current)
}

pub(super) fn forget_before(tx: &mut Transaction<'_>, version: i64) -> Result<u64, StoreError> {
    let current = lock_next_version(tx)? - 1;
    if version > current {
        return Err(StoreError::VersionAhead {
            upto: version,
            current,
        });
    }
    let kept: i64 = tx
        .query_one(
            "SELECT v FROM meta WHERE k = 'changes_after' FOR UPDATE",
            &[],
        )?
        .get(0);
    if version <= kept {
        return Ok(0);
    }
    let forgotten = tx.execute("DELETE FROM changes WHERE version <= $1", &[&version])?;
    tx.execute(
        "UPDATE meta SET v = $1 WHERE k = 'changes_after'",
        &[&version],
    )?;
    Ok(forgotten)
}
