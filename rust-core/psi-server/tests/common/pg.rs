//! A shared store for tests of several instances (issue 22): a fresh database on the test
//! cluster (real PostgreSQL on 127.0.0.1, psi-test-support), its password and a new
//! at-rest key file, filled once through the store API as `psi import --db postgres://`
//! does.

use super::{id, temp_dir};
use psi_server::sealing::SealKeys;
use psi_server::storage::{PgSettings, PgStore, RegistryStore};
use psi_test_support::pg::TempPostgres;
use std::path::{Path, PathBuf};

/// A fresh database on the shared cluster, with the password and a new at-rest key file
/// (in the returned directory).
pub fn fresh(name: &str) -> (PgSettings, PathBuf) {
    let pg = TempPostgres::shared();
    let dir = temp_dir(name);
    let settings = sealed(pg, &pg.fresh_database(), &dir);
    (settings, dir)
}

/// Settings for the database at `url` of `pg`: its password, and a new at-rest key file
/// `seal.key` in `dir`.
pub fn sealed(pg: &TempPostgres, url: &str, dir: &Path) -> PgSettings {
    let seal = dir.join("seal.key");
    SealKeys::generate_file(&seal).unwrap();
    PgSettings::from_url(url)
        .unwrap()
        .with_password(pg.password())
        .with_seal_key_file(Some(&seal))
}

/// Adds `+1202xxxxxxx` entries `ids`, entry `i` labeled `user-i` when `labeled(i)`.
pub fn import(
    settings: &PgSettings,
    ids: impl Iterator<Item = u64>,
    labeled: impl Fn(u64) -> bool,
) {
    let mut store = PgStore::open(settings).unwrap();
    let rows: Vec<(String, Option<String>)> = ids
        .map(|i| (id(i), labeled(i).then(|| format!("user-{i}"))))
        .collect();
    let refs: Vec<(&str, Option<&str>)> = rows
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_deref()))
        .collect();
    store.add_entry_list(&refs).unwrap();
}
