//! The change log of the store contract (ADR 0055): what was net added and removed
//! between two registry versions, on every backend. Instantiated for each backend by
//! `for_each_backend!` in the suite (`storage_contract.rs`), like the tests there.

use super::{id, labels};
use psi_server::storage::{
    ChangeCounts, Database, RegistryChanges, RegistryStore, StoreError, read_snapshot,
};
use std::collections::{BTreeMap, BTreeSet};

/// The lists `changes` must give from membership `from` to membership `to`.
fn diff(from: &BTreeSet<String>, to: &BTreeSet<String>) -> RegistryChanges {
    RegistryChanges {
        added: to.difference(from).cloned().collect(),
        removed: from.difference(to).cloned().collect(),
    }
}

/// Signed counts of a delta (+1 added, -1 removed), as a client applies it (ADR 0047 §3.3).
fn signed(c: &RegistryChanges) -> BTreeMap<String, i64> {
    let mut m = BTreeMap::new();
    for id in &c.added {
        *m.entry(id.clone()).or_insert(0) += 1;
    }
    for id in &c.removed {
        *m.entry(id.clone()).or_insert(0) -= 1;
    }
    m
}

/// The sum of two deltas, zero counts left out.
fn sum(a: &BTreeMap<String, i64>, b: &BTreeMap<String, i64>) -> BTreeMap<String, i64> {
    let mut m = a.clone();
    for (id, n) in b {
        *m.entry(id.clone()).or_insert(0) += n;
    }
    m.retain(|_, n| *n != 0);
    m
}

/// The identifiers in the registry now.
fn members(store: &mut dyn RegistryStore) -> BTreeSet<String> {
    labels(store).into_keys().collect()
}

/// A small deterministic generator (xorshift64*), so a failing sequence can be replayed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) % n
    }
}

/// Catches: a duplicate add or the removal of an absent identifier logged, an add then a
/// remove (or a remove then an add) in the range reported, a label change reported as a
/// change of membership, a delta of one version that misses what it changed.
pub(super) fn changes_are_net_between_versions(db: &Database) {
    let mut store = db.open_registry().unwrap();
    assert_eq!(
        store.changes_kept_after().unwrap(),
        0,
        "a new store keeps all"
    );
    let (a, b, c, d) = (id(1), id(2), id(3), id(4));
    let v0 = store.version().unwrap();
    assert!(store.changes(v0, v0).unwrap().is_empty());
    // v1: a, b added (a given twice).
    store
        .add_entry_list(&[(&a, None), (&b, Some("bee")), (&a, Some("again"))])
        .unwrap();
    let v1 = store.version().unwrap();
    let got = store.changes(v0, v1).unwrap();
    assert_eq!(got.added, vec![a.clone(), b.clone()]);
    assert!(got.removed.is_empty());
    // v2: a duplicate with a new label, and c added: only c.
    store
        .add_entry_list(&[(&a, Some("new")), (&c, None)])
        .unwrap();
    let v2 = store.version().unwrap();
    assert_eq!(v2, v1 + 1);
    assert_eq!(store.changes(v1, v2).unwrap().added, vec![c.clone()]);
    // v3: only a relabel: a version, no change of membership.
    store.add_entry_list(&[(&b, Some("bee 2"))]).unwrap();
    let v3 = store.version().unwrap();
    assert_eq!(v3, v2 + 1);
    assert!(
        store.changes(v2, v3).unwrap().is_empty(),
        "a label is not membership"
    );
    // v4: b removed, with an absent d and b named twice.
    assert_eq!(store.remove_entry_list(&[&b, &d, &b]).unwrap(), 1);
    let v4 = store.version().unwrap();
    let got = store.changes(v3, v4).unwrap();
    assert!(got.added.is_empty());
    assert_eq!(got.removed, vec![b.clone()]);
    // Removing only absent identifiers: no version, nothing logged.
    assert_eq!(store.remove_entry_list(&[&d, &b]).unwrap(), 0);
    assert_eq!(store.version().unwrap(), v4);
    // v5: d added; v6: d removed again: d is in neither list over v4..v6.
    store.add_entry_list(&[(&d, None)]).unwrap();
    assert_eq!(store.remove_entry_list(&[&d]).unwrap(), 1);
    let v6 = store.version().unwrap();
    assert_eq!(v6, v4 + 2);
    assert!(
        store.changes(v4, v6).unwrap().is_empty(),
        "added and removed again"
    );
    assert_eq!(store.changes(v4, v4 + 1).unwrap().added, vec![d.clone()]);
    assert_eq!(store.changes(v4 + 1, v6).unwrap().removed, vec![d.clone()]);
    // v7: a removed; v8: a added back: a is in neither list over v6..v8.
    store.remove_entry_list(&[&a]).unwrap();
    store.add_entry_list(&[(&a, Some("back"))]).unwrap();
    let v8 = store.version().unwrap();
    assert!(
        store.changes(v6, v8).unwrap().is_empty(),
        "removed and added again"
    );
    // The whole range: what is there now, nothing removed (the store started empty).
    let whole = store.changes(v0, v8).unwrap();
    assert_eq!(whole.added, vec![a.clone(), c.clone()]);
    assert!(whole.removed.is_empty());
    assert_eq!(
        whole.added.iter().cloned().collect::<BTreeSet<_>>(),
        members(store.as_mut())
    );
    // From v1 (a, b): c added, b removed.
    let got = store.changes(v1, v8).unwrap();
    assert_eq!((got.added, got.removed), (vec![c.clone()], vec![b.clone()]));
    // Inside a snapshot too; and its Debug names no identifier.
    let in_snapshot = read_snapshot(store.as_mut(), |s| s.changes(v1, v8)).unwrap();
    assert_eq!(in_snapshot.removed, vec![b.clone()]);
    let shown = format!("{in_snapshot:?}");
    assert!(!shown.contains("+1202"), "{shown}");
}

/// One random sequence of operations on a small universe (so that identifiers are
/// re-added, removed twice, relabelled): each operation is one of the four writes, with
/// repeats and absent identifiers. Returns the membership at every version it passed.
fn random_history(
    store: &mut dyn RegistryStore,
    rng: &mut Rng,
    ops: usize,
) -> BTreeMap<i64, BTreeSet<String>> {
    let universe: Vec<String> = (0..10).map(id).collect();
    let mut model = members(store);
    let mut history = BTreeMap::new();
    history.insert(store.version().unwrap(), model.clone());
    for step in 0..ops {
        let pick: Vec<String> = (0..rng.below(5))
            .map(|_| universe[rng.below(universe.len() as u64) as usize].clone())
            .collect();
        let before = store.version().unwrap();
        match rng.below(5) {
            0 | 1 => {
                let label = |i: usize| i.is_multiple_of(2).then(|| format!("l{step}-{i}"));
                let rows: Vec<(String, Option<String>)> = pick
                    .iter()
                    .enumerate()
                    .map(|(i, x)| (x.clone(), label(i)))
                    .collect();
                let counts = if rng.below(2) == 0 {
                    let refs: Vec<(&str, Option<&str>)> = rows
                        .iter()
                        .map(|(x, l)| (x.as_str(), l.as_deref()))
                        .collect();
                    store.add_entry_list(&refs).unwrap()
                } else {
                    store.add_entry_stream(&mut rows.into_iter()).unwrap()
                };
                let new: BTreeSet<&String> = pick.iter().filter(|x| !model.contains(*x)).collect();
                assert_eq!(counts.accepted, new.len() as u64);
                model.extend(pick.iter().cloned());
            }
            2 | 3 => {
                let removed = if rng.below(2) == 0 {
                    let refs: Vec<&str> = pick.iter().map(String::as_str).collect();
                    store.remove_entry_list(&refs).unwrap()
                } else {
                    store
                        .remove_entry_stream(&mut pick.clone().into_iter())
                        .unwrap()
                };
                let gone: BTreeSet<&String> = pick.iter().filter(|x| model.contains(*x)).collect();
                assert_eq!(removed, gone.len() as u64);
                for x in &pick {
                    model.remove(x);
                }
            }
            _ => {
                // Labels only, on what is there: a version, no change of membership.
                let present: Vec<&String> = pick.iter().filter(|x| model.contains(*x)).collect();
                let rows: Vec<(&str, Option<&str>)> = present
                    .iter()
                    .map(|x| (x.as_str(), Some("relabelled")))
                    .collect();
                store.add_entry_list(&rows).unwrap();
            }
        }
        let after = store.version().unwrap();
        assert!(after == before || after == before + 1, "one bump at most");
        if after == before {
            assert_eq!(history[&before], model, "no version, no change");
        }
        history.insert(after, model.clone());
    }
    history
}

/// Three random sequences, each against a model: `changes(a, b)` for every pair of
/// versions is the difference of the model's memberships, and `changes(a, c)` is the sum
/// of `changes(a, b)` and `changes(b, c)` (what ADR 0047 §3.3's clients and compacted
/// deltas rely on). Catches: a change logged at the wrong version, a net rule wrong for
/// some order of operations, a bulk path that logs differently from the list path.
pub(super) fn changes_match_a_model_and_compose(db: &Database) {
    let mut store = db.open_registry().unwrap();
    for seed in [
        0x9e37_79b9_7f4a_7c15_u64,
        0x1234_5678_9abc_def1,
        0x0bad_cafe_dead_beef,
    ] {
        let mut rng = Rng(seed);
        let history = random_history(store.as_mut(), &mut rng, 24);
        let versions: Vec<i64> = history.keys().copied().collect();
        assert_eq!(
            versions,
            (versions[0]..=*versions.last().unwrap()).collect::<Vec<_>>(),
            "every version recorded"
        );
        for (i, a) in versions.iter().enumerate() {
            for b in &versions[i..] {
                let got = store.changes(*a, *b).unwrap();
                assert_eq!(
                    got,
                    diff(&history[a], &history[b]),
                    "seed {seed:x}: {a}..{b}"
                );
                // Counted without reading: the same sizes (sync mode decides by them).
                assert_eq!(
                    store.change_counts(*a, *b).unwrap(),
                    ChangeCounts::of(&got),
                    "seed {seed:x}: counts {a}..{b}"
                );
            }
        }
        for _ in 0..40 {
            let mut abc: Vec<i64> = (0..3)
                .map(|_| versions[rng.below(versions.len() as u64) as usize])
                .collect();
            abc.sort_unstable();
            let (a, b, c) = (abc[0], abc[1], abc[2]);
            let ab = signed(&store.changes(a, b).unwrap());
            let bc = signed(&store.changes(b, c).unwrap());
            let ac = signed(&store.changes(a, c).unwrap());
            assert_eq!(sum(&ab, &bc), ac, "seed {seed:x}: {a}..{b}..{c}");
            assert!(ac.values().all(|n| n.abs() == 1));
        }
        // The model's final membership is the store's.
        assert_eq!(&members(store.as_mut()), history.values().last().unwrap());
    }
}

/// Catches: a pruning that deletes the wrong versions or reports another count, a store
/// that answers for forgotten versions (a client would miss changes silently), a
/// pruning that moves the oldest version back or beyond the current one.
pub(super) fn forgetting_changes_moves_the_oldest_version_kept(db: &Database) {
    let mut store = db.open_registry().unwrap();
    let history = random_history(store.as_mut(), &mut Rng(0x5eed_0001), 16);
    let versions: Vec<i64> = history.keys().copied().collect();
    let (first, current) = (versions[0], *versions.last().unwrap());
    assert!(current - first >= 8, "enough versions: {first}..{current}");
    // How many logged changes each version made: the difference of its memberships.
    let made = |v: i64| -> u64 {
        history.get(&(v - 1)).map_or(0, |before| {
            before.symmetric_difference(&history[&v]).count() as u64
        })
    };
    let cut = first + 5;
    let expected: u64 = (first + 1..=cut).map(made).sum();
    assert_eq!(store.forget_changes_before(cut).unwrap(), expected);
    assert_eq!(store.changes_kept_after().unwrap(), cut);
    assert!(matches!(
        store.change_counts(cut - 1, current),
        Err(StoreError::ChangesForgotten { .. })
    ));
    match store.changes(cut - 1, current) {
        Err(StoreError::ChangesForgotten { after, kept_after }) => {
            assert_eq!((after, kept_after), (cut - 1, cut))
        }
        other => panic!("{other:?}"),
    }
    for a in cut..=current {
        assert_eq!(
            store.changes(a, current).unwrap(),
            diff(&history[&a], &history[&current]),
            "{a}..{current} after forgetting up to {cut}"
        );
    }
    // Another handle sees the same oldest version.
    assert_eq!(
        db.open_registry().unwrap().changes_kept_after().unwrap(),
        cut
    );
    // Older than what is kept: nothing forgotten, nothing moves back.
    assert_eq!(store.forget_changes_before(cut - 2).unwrap(), 0);
    assert_eq!(store.forget_changes_before(cut).unwrap(), 0);
    assert_eq!(store.changes_kept_after().unwrap(), cut);
    // Beyond the current version: refused, nothing forgotten.
    match store.forget_changes_before(current + 1) {
        Err(StoreError::VersionAhead { upto, current: now }) => {
            assert_eq!((upto, now), (current + 1, current))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(store.changes_kept_after().unwrap(), cut);
    // Up to the current version (what a key rotation of the sync epoch does): everything
    // left goes, and changes are logged again from there.
    let rest: u64 = (cut + 1..=current).map(made).sum();
    assert_eq!(store.forget_changes_before(current).unwrap(), rest);
    assert!(store.changes(current, current).unwrap().is_empty());
    assert!(matches!(
        store.changes(current - 1, current),
        Err(StoreError::ChangesForgotten { .. })
    ));
    let fresh = id(500);
    store.add_entry_list(&[(&fresh, None)]).unwrap();
    assert_eq!(
        store.changes(current, current + 1).unwrap().added,
        vec![fresh]
    );
}

/// Catches: a range that ends before it starts, or ends beyond the current version, or
/// starts before anything is kept, answered with an empty delta (a client would believe it
/// is up to date) or a panic instead of a typed error; errors that quote an identifier.
pub(super) fn changes_outside_the_kept_range_are_typed_errors(db: &Database) {
    let mut store = db.open_registry().unwrap();
    let secret = "+12025550123";
    store.add_entry_list(&[(secret, None)]).unwrap();
    let v = store.version().unwrap();
    let mut errors = Vec::new();
    match store.changes(v, v - 1) {
        Err(e @ StoreError::InvalidInput(_)) => errors.push(e),
        other => panic!("{other:?}"),
    }
    match store.changes(0, v + 1) {
        Err(e @ StoreError::VersionAhead { upto, current }) => {
            assert_eq!((upto, current), (v + 1, v));
            errors.push(e)
        }
        other => panic!("{other:?}"),
    }
    match store.changes(-1, v) {
        Err(e @ StoreError::ChangesForgotten { after, kept_after }) => {
            assert_eq!((after, kept_after), (-1, 0));
            errors.push(e)
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        store.changes(i64::MIN, i64::MAX),
        Err(StoreError::VersionAhead { .. })
    ));
    // The counts refuse the same ranges with the same errors.
    for (after, upto) in [(v, v - 1), (0, v + 1), (-1, v), (i64::MIN, i64::MAX)] {
        let (counted, listed) = (store.change_counts(after, upto), store.changes(after, upto));
        assert_eq!(
            format!("{:?}", counted.unwrap_err()),
            format!("{:?}", listed.unwrap_err()),
            "{after}..{upto}"
        );
    }
    for e in errors {
        let text = format!("{e} {e:?}");
        assert!(!text.contains("5550123"), "{text}");
    }
    // The bounds themselves are a valid range, empty or not.
    assert_eq!(store.changes(0, v).unwrap().added, vec![secret.to_string()]);
    assert!(store.changes(v, v).unwrap().is_empty());
    // A read-only handle answers too, and cannot forget.
    let mut reader = db.open_registry_read_only().unwrap();
    assert_eq!(reader.changes(0, v).unwrap().added.len(), 1);
    assert_eq!(
        reader.change_counts(0, v).unwrap(),
        ChangeCounts {
            added: 1,
            removed: 0
        }
    );
    assert!(reader.forget_changes_before(v).is_err());
    assert_eq!(store.changes_kept_after().unwrap(), 0);
}

/// The bulk paths (`psi import`, `--synthetic`, `--remove`: PostgreSQL's `COPY` and one
/// set-based statement) log exactly what they changed. Catches: rows of a large stream
/// not logged, repeats logged twice (the log's key would refuse them), removed repeats or
/// absent identifiers logged.
pub(super) fn streamed_imports_log_every_change(db: &Database) {
    let mut store = db.open_registry().unwrap();
    let v0 = store.version().unwrap();
    let n = 20_000u64;
    let mut rows = (0..n)
        .map(|i| (id(i), Some(format!("user-{i}"))))
        .chain((0..3000).map(|i| (id(i), None)));
    assert_eq!(store.add_entry_stream(&mut rows).unwrap().accepted, n);
    let v1 = store.version().unwrap();
    let all: BTreeSet<String> = (0..n).map(id).collect();
    let got = store.changes(v0, v1).unwrap();
    assert_eq!(got.added.len() as u64, n);
    assert_eq!(got.added, all.iter().cloned().collect::<Vec<_>>());
    assert!(got.removed.is_empty());
    // Again with new labels, and 100 new ones: only the new ones.
    let mut rows = (0..n + 100).map(|i| (id(i), Some(format!("v2-{i}"))));
    store.add_entry_stream(&mut rows).unwrap();
    let v2 = store.version().unwrap();
    let got = store.changes(v1, v2).unwrap();
    assert_eq!(got.added, (n..n + 100).map(id).collect::<Vec<_>>());
    // Removals by stream: 5000 present (some twice), 10 absent.
    let mut gone = (0..5000)
        .map(id)
        .chain((0..50).map(id))
        .chain((1_000_000..1_000_010).map(id));
    assert_eq!(store.remove_entry_stream(&mut gone).unwrap(), 5000);
    let v3 = store.version().unwrap();
    let got = store.changes(v2, v3).unwrap();
    assert!(got.added.is_empty());
    let mut expected: Vec<String> = (0..5000).map(id).collect();
    expected.sort_unstable();
    assert_eq!(got.removed, expected);
    // Over the three: the 5000 removed were added inside the range, so they are in
    // neither list.
    let got = store.changes(v0, v3).unwrap();
    assert_eq!(got.added.len() as u64, n + 100 - 5000);
    for (a, b) in [(v0, v1), (v1, v2), (v2, v3), (v0, v3), (v1, v3)] {
        let listed = ChangeCounts::of(&store.changes(a, b).unwrap());
        assert_eq!(store.change_counts(a, b).unwrap(), listed, "{a}..{b}");
    }
    assert!(got.removed.is_empty());
    assert_eq!(
        got.added.into_iter().collect::<BTreeSet<_>>(),
        members(store.as_mut())
    );
}

/// A store created before the change log (SQLite: the tables as they were; PostgreSQL:
/// schema version 1), with entries and a version, opened by this program: it works, keeps
/// changes from its version then on, and refuses the versions before. Catches: an upgrade
/// that fails on an existing file, one that reports the old entries as added (or
/// pretends to know the changes before it), one that leaves PostgreSQL at schema 1.
pub(super) fn an_old_store_keeps_changes_from_its_version_then(db: &Database) {
    let old_version = 7i64;
    let old: Vec<String> = (0..30).map(id).collect();
    match db {
        Database::Sqlite(path) => old_sqlite(path, &old, old_version),
        Database::Postgres(settings) => {
            let mut client = settings.connect_blocking().unwrap();
            old_postgres(&mut client, &old, old_version);
        }
        _ => unreachable!("a backend the suite does not know"),
    }
    let mut store = db.open_registry().unwrap();
    assert_eq!(store.version().unwrap(), old_version);
    assert_eq!(store.len().unwrap(), old.len() as u64);
    assert_eq!(store.changes_kept_after().unwrap(), old_version);
    assert!(store.changes(old_version, old_version).unwrap().is_empty());
    assert!(matches!(
        store.changes(old_version - 1, old_version),
        Err(StoreError::ChangesForgotten { kept_after: 7, .. })
    ));
    // The old entries load (their outputs are computed now), and changes are kept.
    assert_eq!(members(store.as_mut()), old.iter().cloned().collect());
    store
        .add_entry_list(&[(&id(100), None), (&old[0], None)])
        .unwrap();
    store.remove_entry_list(&[&old[1]]).unwrap();
    let got = store.changes(old_version, old_version + 2).unwrap();
    assert_eq!(
        (got.added, got.removed),
        (vec![id(100)], vec![old[1].clone()])
    );
    // Opening again migrates nothing twice.
    let mut again = db.open_registry().unwrap();
    assert_eq!(again.changes_kept_after().unwrap(), old_version);
    assert_eq!(
        again
            .changes(old_version, old_version + 2)
            .unwrap()
            .removed
            .len(),
        1
    );
    match db {
        Database::Postgres(settings) => {
            let mut client = settings.connect_blocking().unwrap();
            let v: i64 = client
                .query_one("SELECT v FROM meta WHERE k = 'schema_version'", &[])
                .unwrap()
                .get(0);
            assert_eq!(v, 2, "migrated to the schema with the change log");
        }
        Database::Sqlite(path) => {
            // A psi from before the change log writing the upgraded file (it bumps the
            // version once after its rows, as every version did): logged all the same.
            let conn = rusqlite::Connection::open(path).unwrap();
            conn.execute_batch(&format!(
                "BEGIN;
                 INSERT INTO entries (identifier) VALUES ('{}');
                 DELETE FROM entries WHERE identifier = '{}';
                 UPDATE meta SET v = v + 1 WHERE k = 'version';
                 COMMIT;",
                id(101),
                old[2]
            ))
            .unwrap();
            let got = again.changes(old_version + 2, old_version + 3).unwrap();
            assert_eq!(
                (got.added, got.removed),
                (vec![id(101)], vec![old[2].clone()])
            );
        }
        _ => unreachable!(),
    }
}

/// The SQLite tables as they were before the change log, with `entries` and `version`.
fn old_sqlite(path: &std::path::Path, entries: &[String], version: i64) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(
        "CREATE TABLE keys (epoch INTEGER PRIMARY KEY, key BLOB NOT NULL, created_ms INTEGER);
         CREATE TABLE entries (id INTEGER PRIMARY KEY, identifier TEXT NOT NULL UNIQUE,
                               label TEXT, epoch INTEGER, output BLOB);
         CREATE TABLE encoded_sets (epoch INTEGER NOT NULL, max_client_items INTEGER NOT NULL,
                                    version INTEGER NOT NULL, etag TEXT NOT NULL,
                                    bytes BLOB NOT NULL, PRIMARY KEY (epoch, max_client_items));
         CREATE TABLE meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL);
         CREATE TABLE tokens (id INTEGER PRIMARY KEY AUTOINCREMENT, digest BLOB NOT NULL UNIQUE,
                              name TEXT, created INTEGER NOT NULL,
                              revoked INTEGER NOT NULL DEFAULT 0, items_per_hour INTEGER);
         CREATE TABLE budgets (client TEXT PRIMARY KEY, remaining REAL NOT NULL,
                               per_hour INTEGER NOT NULL, updated_ms INTEGER NOT NULL);",
    )
    .unwrap();
    conn.execute("INSERT INTO meta (k, v) VALUES ('version', ?1)", [version])
        .unwrap();
    for e in entries {
        conn.execute("INSERT INTO entries (identifier) VALUES (?1)", [e])
            .unwrap();
    }
}

/// Schema version 1 of the shared store, with `entries` and `version`.
fn old_postgres(client: &mut ::postgres::Client, entries: &[String], version: i64) {
    client
        .batch_execute(
            "CREATE TABLE meta (k TEXT PRIMARY KEY, v BIGINT NOT NULL DEFAULT 0, bytes BYTEA);
             CREATE TABLE keys (epoch BIGINT PRIMARY KEY, sealed BYTEA NOT NULL, created_ms BIGINT);
             CREATE TABLE entries (id BIGSERIAL PRIMARY KEY, identifier TEXT NOT NULL UNIQUE,
                                   label TEXT, epoch BIGINT, output BYTEA);
             CREATE TABLE encoded_sets (epoch BIGINT NOT NULL, max_client_items BIGINT NOT NULL,
                                        version BIGINT NOT NULL, etag TEXT NOT NULL,
                                        bytes BYTEA NOT NULL,
                                        PRIMARY KEY (epoch, max_client_items));
             CREATE TABLE tokens (id BIGSERIAL PRIMARY KEY, digest BYTEA NOT NULL UNIQUE,
                                  name TEXT, created BIGINT NOT NULL,
                                  revoked BOOLEAN NOT NULL DEFAULT FALSE, items_per_hour BIGINT);
             INSERT INTO meta (k, v) VALUES ('schema_version', 1);
             INSERT INTO meta (k, v, bytes) VALUES ('database_id', 0, '\\x00112233445566778899aabbccddeeff');",
        )
        .unwrap();
    client
        .execute(
            "INSERT INTO meta (k, v) VALUES ('version', $1)",
            &[&version],
        )
        .unwrap();
    for e in entries {
        client
            .execute("INSERT INTO entries (identifier) VALUES ($1)", &[e])
            .unwrap();
    }
}

/// Writes of each concurrent writer in [`changes_are_seen_by_every_handle`].
const WRITES_PER_WRITER: usize = 60;

/// Several handles on one store (on PostgreSQL: several instances): what one writes,
/// another reads, and two writing at once get versions of their own, each version's
/// delta applying to the membership before it. Catches: two concurrent imports logging
/// at one version (a delta that adds what is there, or removes what is not), a handle
/// that does not see another's changes or its pruning.
pub(super) fn changes_are_seen_by_every_handle(db: &Database) {
    let mut one = db.open_registry().unwrap();
    let mut two = db.open_registry().unwrap();
    let mut reader = db.open_registry_read_only().unwrap();
    let ids: Vec<String> = (0..5).map(id).collect();
    let rows: Vec<(&str, Option<&str>)> = ids.iter().map(|i| (i.as_str(), None)).collect();
    one.add_entry_list(&rows).unwrap();
    let v = one.version().unwrap();
    assert_eq!(two.changes(0, v).unwrap().added, ids);
    assert_eq!(reader.changes(0, v).unwrap().added, ids);
    two.remove_entry_list(&[&ids[2]]).unwrap();
    assert_eq!(one.changes(v, v + 1).unwrap().removed, vec![ids[2].clone()]);
    two.forget_changes_before(v).unwrap();
    assert_eq!(one.changes_kept_after().unwrap(), v);
    assert!(matches!(
        reader.changes(0, v + 1),
        Err(StoreError::ChangesForgotten { .. })
    ));

    // Four writers at once on overlapping identifiers.
    let start = one.version().unwrap();
    let mut running = members(one.as_mut());
    std::thread::scope(|s| {
        for seed in [11u64, 29, 47, 83] {
            s.spawn(move || {
                let mut store = db.open_registry().unwrap();
                let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
                for _ in 0..WRITES_PER_WRITER {
                    let pick: Vec<String> =
                        (0..1 + rng.below(4)).map(|_| id(rng.below(8))).collect();
                    if rng.below(2) == 0 {
                        store
                            .add_entry_stream(&mut pick.into_iter().map(|x| (x, None)))
                            .unwrap();
                    } else {
                        store.remove_entry_stream(&mut pick.into_iter()).unwrap();
                    }
                }
            });
        }
    });
    let end = reader.version().unwrap();
    assert!(end > start);
    for v in start..end {
        let step = reader.changes(v, v + 1).unwrap();
        for x in &step.added {
            assert!(
                running.insert(x.clone()),
                "version {}: added what was there",
                v + 1
            );
        }
        for x in &step.removed {
            assert!(
                running.remove(x),
                "version {}: removed what was not there",
                v + 1
            );
        }
    }
    assert_eq!(running, members(one.as_mut()));
    let whole = two.changes(start, end).unwrap();
    assert_eq!(signed(&whole), {
        let mut total = BTreeMap::new();
        for v in start..end {
            total = sum(&total, &signed(&reader.changes(v, v + 1).unwrap()));
        }
        total
    });
}

/// Catches: a rotation that keeps the old epoch's change log (its removed identifiers
/// would stay forever, and deltas across epochs would mix two keys' tags).
pub(super) fn a_key_rotation_forgets_the_change_log(db: &Database) {
    let mut store = db.open_registry().unwrap();
    let start = store.version().unwrap();
    store
        .add_entry_list(&[(id(1).as_str(), None), (id(2).as_str(), None)])
        .unwrap();
    store.remove_entry_list(&[id(1).as_str()]).unwrap();
    let before = store.version().unwrap();
    assert_eq!(store.changes(start, before).unwrap().added, vec![id(2)]);
    store.rotate_key().unwrap();
    assert_eq!(store.changes_kept_after().unwrap(), before);
    assert!(matches!(
        store.changes(start, before),
        Err(StoreError::ChangesForgotten { .. })
    ));
    // The new epoch's log starts empty and records again.
    store.add_entry_list(&[(id(3).as_str(), None)]).unwrap();
    let after = store.version().unwrap();
    let c = store.changes(before, after).unwrap();
    assert_eq!((c.added, c.removed), (vec![id(3)], vec![]));
}
