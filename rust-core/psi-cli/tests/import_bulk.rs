//! `psi import` through the stores' bulk path (issue 37), the same run on SQLite and on
//! PostgreSQL (real, started by the test on 127.0.0.1): additions with repeats and labels,
//! a synthetic load in one transaction, and removals as a delta (`--remove FILE`), each
//! with the same counts on both stores, the version bumped once per command, and only the
//! added entries' outputs computed.

mod common;

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

fn the_same_on(store: &[String], dir: &Path) {
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
    // A synthetic load: every row new, one transaction, only its outputs computed.
    let v = import(store, &["--synthetic", "3000"]);
    assert_eq!(
        (v["accepted"].as_u64(), v["duplicates"].as_u64()),
        (Some(3000), Some(0)),
        "{v}"
    );
    assert_eq!(v["registry_entries"], 3003, "{v}");
    assert_eq!(v["outputs_computed"], 3000, "{v}");
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
    // Nothing left to remove: nothing changes, the set is not rebuilt.
    let v = import(store, &["--remove", s(&remove)]);
    assert_eq!(v["removed"], 0, "{v}");
    assert_eq!(v["encoded_set_rebuilt"], false, "{v}");
}

#[test]
fn imports_and_removals_are_the_same_on_sqlite() {
    let dir = common::temp_dir("bulk", "sqlite");
    let db = dir.join("r.sqlite");
    the_same_on(&["--db".into(), s(&db).into()], &dir);
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
            url,
            "--db-password-file".into(),
            s(&pw).into(),
            "--seal-key-file".into(),
            s(&seal).into(),
        ],
        &dir,
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
