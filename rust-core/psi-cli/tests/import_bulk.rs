//! `psi import` through the stores' bulk path (issue 37), the same run on SQLite and on
//! PostgreSQL (real, started by the test on 127.0.0.1): additions with repeats and labels,
//! a synthetic load in one transaction, and removals as a delta (`--remove FILE`), each
//! with the same counts on both stores, the version bumped once per command, only the
//! added entries' outputs computed, and each command's changes in the store's change log.

mod common;

use psi_server::storage::{Database, PgSettings};
use psi_test_support::pg::TempPostgres;
use std::path::Path;
use std::time::Duration;

/// Runs `psi ARGS --json` with the store's flags: the summary.
fn import(store: &[String], args: &[&str]) -> serde_json::Value {
    let mut all: Vec<&str> = vec!["import"];
    all.extend(store.iter().map(String::as_str));
    all.extend(["--max-client-items", "100", "--json"]);
    all.extend(args);
    let (ok, out, err) = common::run_psi(&all, Duration::from_secs(120));
    assert!(ok, "{out}\n{err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The registry version of `db` now, and the changes from `after` to it (counts).
fn changed(db: &Database, after: i64) -> (i64, usize, usize) {
    let mut registry = db.open_registry().unwrap();
    let now = registry.version().unwrap();
    let c = registry.changes(after, now).unwrap();
    (now, c.added.len(), c.removed.len())
}

fn the_same_on(store: &[String], dir: &Path, db: &Database) {
    let add = dir.join("add.csv");
    // Three new numbers; one repeated with a new label, one repeated without.
    std::fs::write(
        &add,
        "+14155550101,Alice\n+14155550102\n+14155550103,Carol\n+14155550101,Alice B\n+14155550103\n",
    )
    .unwrap();
    let v = import(store, &[s(&add)]);
    assert_eq!(
        (v["accepted"].as_u64(), v["duplicates"].as_u64()),
        (Some(3), Some(2)),
        "{v}"
    );
    assert_eq!(v["registry_entries"], 3, "{v}");
    assert_eq!(v["outputs_computed"], 3, "{v}");
    assert_eq!(v["encoded_set_rebuilt"], true, "{v}");
    let (v1, added, removed) = changed(db, 0);
    assert_eq!((v1, added, removed), (1, 3, 0));
    // A synthetic load: every row new, one transaction, only its outputs computed.
    let v = import(store, &["--synthetic", "3000"]);
    assert_eq!(
        (v["accepted"].as_u64(), v["duplicates"].as_u64()),
        (Some(3000), Some(0)),
        "{v}"
    );
    assert_eq!(v["registry_entries"], 3003, "{v}");
    assert_eq!(v["outputs_computed"], 3000, "{v}");
    let (v2, added, removed) = changed(db, v1);
    assert_eq!(
        (v2, added, removed),
        (v1 + 1, 3000, 0),
        "the synthetic rows logged"
    );
    // Again: all duplicates, nothing computed.
    let v = import(store, &["--synthetic", "3000"]);
    assert_eq!(
        (v["accepted"].as_u64(), v["duplicates"].as_u64()),
        (Some(0), Some(3000)),
        "{v}"
    );
    assert_eq!(v["outputs_computed"], 0, "{v}");
    // Removals: two present (one named twice), one absent, one rejected row.
    let remove = dir.join("remove.txt");
    std::fs::write(
        &remove,
        "+14155550101\n+14155550102\n+14155550101\n+14155550199\nnot a number\n",
    )
    .unwrap();
    let v = import(store, &["--remove", s(&remove)]);
    assert_eq!(v["removed"], 2, "{v}");
    assert_eq!(v["rejected"], 1, "{v}");
    assert_eq!(v["registry_entries"], 3001, "{v}");
    assert_eq!(v["outputs_computed"], 0, "{v}");
    assert_eq!(v["encoded_set_rebuilt"], true, "{v}");
    // Since the synthetic load: its repeat changed no membership, the removal two.
    let (v4, added, removed) = changed(db, v2);
    assert_eq!((v4, added, removed), (v2 + 2, 0, 2));
    // Nothing left to remove: nothing changes, the set is not rebuilt.
    let v = import(store, &["--remove", s(&remove)]);
    assert_eq!(v["removed"], 0, "{v}");
    assert_eq!(v["encoded_set_rebuilt"], false, "{v}");
}

#[test]
fn imports_and_removals_are_the_same_on_sqlite() {
    let dir = common::temp_dir("bulk", "sqlite");
    let db = dir.join("r.sqlite");
    the_same_on(&["--db".into(), s(&db).into()], &dir, &db.clone().into());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn imports_and_removals_are_the_same_on_postgres() {
    let pg = TempPostgres::shared();
    let url = pg.fresh_database();
    let dir = common::temp_dir("bulk", "postgres");
    let seal = dir.join("seal.key");
    let (ok, _, err) = common::run_psi(&["seal-key", "new", s(&seal)], Duration::from_secs(30));
    assert!(ok, "{err}");
    let pw = pg.password_file();
    the_same_on(
        &[
            "--db".into(),
            url.clone(),
            "--db-password-file".into(),
            s(&pw).into(),
            "--seal-key-file".into(),
            s(&seal).into(),
        ],
        &dir,
        &Database::Postgres(
            PgSettings::from_url(&url)
                .unwrap()
                .with_password(pg.password())
                .with_seal_key_file(Some(&seal)),
        ),
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
