//! The store contract (storage/contract.rs, storage/budgets.rs), one suite run against
//! every backend: each test below is written once, over a [`Database`], and
//! [`for_each_backend!`] instantiates it for SQLite (a fresh file) and for PostgreSQL (a
//! fresh database on the test cluster, psi-test-support, 127.0.0.1). A behaviour one
//! backend has and the other lacks is a contract rule too, and is asserted as such
//! (budgets: charged in the store, or held by the process and saved: ADR 0052). The change
//! log's tests (ADR 0055) are in `storage_contract/changes.rs`.

#[path = "storage_contract/changes.rs"]
mod changes;
mod common;

use changes::*;

use psi_core::Threads;
use psi_server::storage::{
    self, Book, Database, LevelCap, Readiness, RegistryStore, Revoked, SavedBudget, Shortfall,
    StoreError, read_snapshot, token_digest,
};
use std::collections::HashMap;
use std::time::Duration;

/// Every budget test ends within this.
const BOUND: Duration = Duration::from_secs(60);

/// The `max_client_items` the sets are built for.
const SIZE: usize = 1000;

/// A fresh SQLite file.
fn sqlite(name: &str) -> Database {
    common::temp_dir(&format!("contract-{name}"))
        .join("registry.sqlite")
        .into()
}

/// A fresh database on the shared test cluster, with a new at-rest key file.
fn postgres(name: &str) -> Database {
    let (settings, _dir) = common::pg::fresh(&format!("contract-{name}"));
    Database::Postgres(settings)
}

/// Instantiates every listed test for each backend: `sqlite::NAME` and `postgres::NAME`,
/// each calling `NAME(&Database)` on a store of its own.
macro_rules! for_each_backend {
    ($($test:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[test]
                fn $test() {
                    super::$test(&super::sqlite(stringify!($test)))
                }
            )*
        }
        mod postgres {
            $(
                #[test]
                fn $test() {
                    super::$test(&super::postgres(stringify!($test)))
                }
            )*
        }
    };
}

for_each_backend!(
    additions_count_duplicates_and_keep_the_last_label,
    removals_count_what_existed_and_bump_the_version_once,
    streamed_imports_keep_the_semantics_of_the_list,
    key_epochs_start_at_one_and_rotate,
    outputs_and_encoded_sets_follow_the_version,
    snapshots_and_read_only_stores,
    write_errors_name_no_contact_data,
    tokens_issue_look_up_and_revoke,
    budgets_charged_in_the_store,
    budgets_saved_by_the_process,
    changes_are_net_between_versions,
    changes_match_a_model_and_compose,
    forgetting_changes_moves_the_oldest_version_kept,
    changes_outside_the_kept_range_are_typed_errors,
    streamed_imports_log_every_change,
    an_old_store_keeps_changes_from_its_version_then,
    changes_are_seen_by_every_handle,
    a_key_rotation_forgets_the_change_log,
);

fn id(i: u64) -> String {
    common::id(i)
}

fn refresh(store: &mut dyn RegistryStore) -> storage::RefreshStats {
    storage::refresh(store, SIZE, Threads::new(2), &mut |_, _| {}).expect("a refresh")
}

/// Identifier -> label, after a refresh (`entries` needs every output).
fn labels(store: &mut dyn RegistryStore) -> HashMap<String, Option<String>> {
    refresh(store);
    store
        .entries()
        .expect("the entries")
        .into_iter()
        .map(|e| (e.identifier, e.label))
        .collect()
}

/// Catches: a repeat counted as new, a label given later lost or an unlabeled repeat
/// erasing one, the version bumped per row or not at all, `len` off.
fn additions_count_duplicates_and_keep_the_last_label(db: &Database) {
    let mut store = db.open_registry().unwrap();
    assert!(store.is_empty().unwrap());
    let v0 = store.version().unwrap();
    let (a, b, c) = (id(1), id(2), id(3));
    let counts = store
        .add_entry_list(&[
            (&a, None),
            (&b, Some("bee")),
            (&a, Some("first")),
            (&c, None),
            (&b, None),
            (&a, Some("last")),
        ])
        .unwrap();
    assert_eq!((counts.accepted, counts.duplicates), (3, 3));
    assert_eq!(store.version().unwrap(), v0 + 1, "one bump per import");
    assert_eq!(store.len().unwrap(), 3);
    let got = labels(store.as_mut());
    assert_eq!(got[&a].as_deref(), Some("last"));
    assert_eq!(
        got[&b].as_deref(),
        Some("bee"),
        "a row without a label keeps it"
    );
    assert_eq!(got[&c], None);
    // An existing identifier with a new label is a duplicate that relabels; an existing
    // one without a label keeps its own.
    let d = id(4);
    let counts = store
        .add_entry_list(&[(&a, Some("again")), (&d, None), (&b, None)])
        .unwrap();
    assert_eq!((counts.accepted, counts.duplicates), (1, 2));
    assert_eq!(store.version().unwrap(), v0 + 2);
    let got = labels(store.as_mut());
    assert_eq!(got.len(), 4);
    assert_eq!(got[&a].as_deref(), Some("again"));
    assert_eq!(got[&b].as_deref(), Some("bee"));
    // Nothing given: nothing changes, not even the version.
    let counts = store.add_entry_list(&[]).unwrap();
    assert_eq!((counts.accepted, counts.duplicates), (0, 0));
    assert_eq!(store.version().unwrap(), v0 + 2);
    // Another connection sees the same.
    let other = db.open_registry().unwrap();
    assert_eq!(other.len().unwrap(), 4);
    assert_eq!(other.version().unwrap(), v0 + 2);
}

/// Catches: a removal counting identifiers that were not there (or repeats twice), the
/// version bumped by a removal that removed nothing, a removed entry still loaded.
fn removals_count_what_existed_and_bump_the_version_once(db: &Database) {
    let mut store = db.open_registry().unwrap();
    let ids: Vec<String> = (0..10).map(id).collect();
    let list: Vec<(&str, Option<&str>)> = ids.iter().map(|i| (i.as_str(), None)).collect();
    store.add_entry_list(&list).unwrap();
    let v = store.version().unwrap();
    let absent = id(99);
    let removed = store
        .remove_entry_list(&[&ids[0], &ids[0], &ids[1], &absent])
        .unwrap();
    assert_eq!(removed, 2);
    assert_eq!(store.version().unwrap(), v + 1);
    assert_eq!(store.len().unwrap(), 8);
    assert_eq!(store.remove_entry_list(&[&absent]).unwrap(), 0);
    assert_eq!(store.remove_entry_list(&[]).unwrap(), 0);
    assert_eq!(store.version().unwrap(), v + 1, "nothing removed: no bump");
    let got = labels(store.as_mut());
    assert!(!got.contains_key(&ids[0]) && !got.contains_key(&ids[1]));
    assert_eq!(got.len(), 8);
    // Added back: a new entry again.
    let counts = store.add_entry_list(&[(&ids[0], Some("back"))]).unwrap();
    assert_eq!(counts.accepted, 1);
}

/// The bulk path (`psi import`: PostgreSQL's `COPY` and one merge), over more rows than a
/// statement held before, with repeats far apart. Catches: counts or labels that differ
/// from the list's, a transaction (and a version bump) per batch, removals by stream
/// that miss or over-count.
fn streamed_imports_keep_the_semantics_of_the_list(db: &Database) {
    let mut store = db.open_registry().unwrap();
    let v0 = store.version().unwrap();
    let n = 25_000u64;
    // Every entry once, then the first 5000 again: relabeled, or (odd ones) unlabeled.
    let mut rows = (0..n)
        .map(|i| (id(i), Some(format!("user-{i}"))))
        .chain((0..5000).map(|i| (id(i), (i % 2 == 0).then(|| format!("again-{i}")))));
    let counts = store.add_entry_stream(&mut rows).unwrap();
    assert_eq!((counts.accepted, counts.duplicates), (n, 5000));
    assert_eq!(
        store.version().unwrap(),
        v0 + 1,
        "one transaction, one bump"
    );
    assert_eq!(store.len().unwrap(), n);
    let got = labels(store.as_mut());
    assert_eq!(got[&id(0)].as_deref(), Some("again-0"));
    assert_eq!(got[&id(1)].as_deref(), Some("user-1"));
    assert_eq!(got[&id(4998)].as_deref(), Some("again-4998"));
    assert_eq!(got[&id(24_999)].as_deref(), Some("user-24999"));
    // A delta: additions compute only their own outputs.
    let counts = store
        .add_entry_stream(&mut (n..n + 100).map(|i| (id(i), None)))
        .unwrap();
    assert_eq!(counts.accepted, 100);
    assert_eq!(refresh(store.as_mut()).outputs_computed, 100);
    // Removals by stream: present ones counted once, absent ones not at all.
    let mut gone = (0..1000)
        .map(id)
        .chain((0..10).map(id))
        .chain((1_000_000..1_000_010).map(id));
    assert_eq!(store.remove_entry_stream(&mut gone).unwrap(), 1000);
    assert_eq!(store.version().unwrap(), v0 + 3);
    assert_eq!(store.len().unwrap(), n + 100 - 1000);
    assert_eq!(refresh(store.as_mut()).outputs_computed, 0);
    assert_eq!(store.entries().unwrap().len() as u64, n + 100 - 1000);
    // Empty streams change nothing.
    assert_eq!(
        store
            .add_entry_stream(&mut std::iter::empty())
            .unwrap()
            .accepted,
        0
    );
    assert_eq!(
        store.remove_entry_stream(&mut std::iter::empty()).unwrap(),
        0
    );
    assert_eq!(store.version().unwrap(), v0 + 3);
}

/// Catches: a second key for epoch 1, a rotation that does not move the epoch or keeps
/// the old outputs as current, `key_created` missing.
fn key_epochs_start_at_one_and_rotate(db: &Database) {
    let mut store = db.open_registry().unwrap();
    let k1 = store.current_key().unwrap();
    assert_eq!(k1.epoch(), 1);
    assert!(store.key_created().unwrap().is_some());
    let list: Vec<String> = (0..20).map(id).collect();
    let rows: Vec<(&str, Option<&str>)> = list.iter().map(|i| (i.as_str(), None)).collect();
    store.add_entry_list(&rows).unwrap();
    refresh(store.as_mut());
    assert!(store.outputs_complete(1).unwrap());
    let before: HashMap<String, [u8; 64]> = store
        .entries()
        .unwrap()
        .into_iter()
        .map(|e| (e.identifier, e.output))
        .collect();
    // The same key through another connection.
    let mut other = db.open_registry().unwrap();
    assert_eq!(other.current_key().unwrap().epoch(), 1);
    let k2 = store.rotate_key().unwrap();
    assert_eq!(k2.epoch(), 2);
    assert_eq!(store.current_key().unwrap().epoch(), 2);
    assert_eq!(other.current_key().unwrap().epoch(), 2);
    assert!(!store.outputs_complete(2).unwrap());
    assert_eq!(store.pending_outputs(2).unwrap(), 20);
    assert_eq!(store.readiness(SIZE).unwrap(), Readiness::InProgress);
    assert_eq!(refresh(store.as_mut()).outputs_computed, 20);
    assert!(store.outputs_complete(2).unwrap());
    for e in store.entries().unwrap() {
        assert_ne!(before[&e.identifier], e.output, "outputs under the new key");
    }
    match store.readiness(SIZE).unwrap() {
        Readiness::Ready { epoch, .. } => assert_eq!(epoch, 2),
        other => panic!("not ready after the refresh: {other:?}"),
    }
    assert_eq!(store.encoded_set(SIZE).unwrap().unwrap().epoch, 2);
}

/// Catches: readiness that says ready before the outputs or after a change, a set whose
/// ETag is not its bytes', a set served at the wrong size, outputs recomputed that were
/// stored.
fn outputs_and_encoded_sets_follow_the_version(db: &Database) {
    let mut store = db.open_registry().unwrap();
    let list: Vec<String> = (0..50).map(id).collect();
    let rows: Vec<(&str, Option<&str>)> = list.iter().map(|i| (i.as_str(), None)).collect();
    store.add_entry_list(&rows).unwrap();
    let epoch = store.current_key().unwrap().epoch();
    assert_eq!(store.readiness(SIZE).unwrap(), Readiness::InProgress);
    assert_eq!(store.pending_outputs(epoch).unwrap(), 50);
    assert_eq!(store.pending_batch(epoch, 7).unwrap().len(), 7);
    assert!(store.encoded_set(SIZE).unwrap().is_none());
    let stats = refresh(store.as_mut());
    assert_eq!((stats.outputs_computed, stats.set_rebuilt), (50, true));
    assert_eq!(store.pending_outputs(epoch).unwrap(), 0);
    assert_eq!(store.all_outputs().unwrap().len(), 50);
    let version = store.version().unwrap();
    assert_eq!(
        store.readiness(SIZE).unwrap(),
        Readiness::Ready { epoch, version }
    );
    assert_eq!(
        store.readiness(SIZE * 2).unwrap(),
        Readiness::OtherSize {
            epoch,
            version,
            built_for: SIZE
        }
    );
    assert_eq!(store.encoded_set_sizes().unwrap(), vec![SIZE]);
    assert_eq!(store.set_built_at(epoch, SIZE).unwrap(), Some(version));
    let set = store.encoded_set(SIZE).unwrap().expect("a set");
    assert_eq!(set.epoch, epoch);
    assert_eq!(set.etag, storage::etag(&set.bytes));
    // Nothing changed: nothing computed, nothing rebuilt.
    let again = refresh(store.as_mut());
    assert_eq!((again.outputs_computed, again.set_rebuilt), (0, false));
    // A change moves the version: not ready until refreshed; only the new output.
    store.add_entry_list(&[(&id(50), Some("new"))]).unwrap();
    assert_eq!(store.readiness(SIZE).unwrap(), Readiness::InProgress);
    let stats = refresh(store.as_mut());
    assert_eq!((stats.outputs_computed, stats.set_rebuilt), (1, true));
    let newer = store.encoded_set(SIZE).unwrap().unwrap();
    assert_ne!(newer.etag, set.etag);
}

/// Catches: a snapshot that does not run its read, a read-only store that writes.
fn snapshots_and_read_only_stores(db: &Database) {
    let mut store = db.open_registry().unwrap();
    store
        .add_entry_list(&[(&id(1), None), (&id(2), None)])
        .unwrap();
    refresh(store.as_mut());
    let (len, version) = read_snapshot(store.as_mut(), |s| Ok((s.len()?, s.version()?))).unwrap();
    assert_eq!((len, version), (2, store.version().unwrap()));
    let mut reader = db.open_registry_read_only().unwrap();
    assert_eq!(reader.len().unwrap(), 2);
    assert_eq!(reader.version().unwrap(), version);
    assert!(reader.encoded_set(SIZE).unwrap().is_some());
    assert!(reader.add_entry_list(&[(&id(3), None)]).is_err());
    assert!(reader.remove_entry_list(&[&id(1)]).is_err());
    assert!(
        reader
            .add_entry_stream(&mut std::iter::once((id(3), None)))
            .is_err()
    );
    assert_eq!(store.len().unwrap(), 2, "the refused writes wrote nothing");
    assert_eq!(store.version().unwrap(), version);
}

/// Errors of a refused write, and of a refused token name, name neither the
/// identifiers, the labels nor the name (libsignal's log-safe display). Catches: an
/// error that quotes a row (PostgreSQL's DETAIL, a value in a message).
fn write_errors_name_no_contact_data(db: &Database) {
    let secret_id = "+12025550123";
    let secret_label = "label-of-a-person";
    let mut store = db.open_registry().unwrap();
    store
        .add_entry_list(&[(secret_id, Some(secret_label))])
        .unwrap();
    let mut reader = db.open_registry_read_only().unwrap();
    for e in [
        reader
            .add_entry_list(&[(secret_id, Some(secret_label))])
            .unwrap_err(),
        reader.remove_entry_list(&[secret_id]).unwrap_err(),
    ] {
        let text = format!("{e} {e:?}");
        assert!(
            !text.contains("5550123") && !text.contains(secret_label),
            "{text}"
        );
    }
    // A text column cannot hold NUL: refused with a typed error, not a panic.
    let bad = store.add_entry_list(&[("+1202\0secret", None)]);
    if let Err(e) = bad {
        let text = e.to_string();
        assert!(!text.contains("secret"), "{text}");
    }
    let mut accounts = db.open_accounts().unwrap();
    let e = accounts
        .add_token(Some("bad\nname-of-someone"), None)
        .unwrap_err();
    assert!(matches!(e, StoreError::InvalidInput(_)), "{e:?}");
    assert!(!e.to_string().contains("someone"));
}

/// Catches: a token stored in clear or not found by its digest, ids reused, revocation
/// that does not stick or does not tell the three cases apart, a bad name or budget
/// accepted.
fn tokens_issue_look_up_and_revoke(db: &Database) {
    let mut accounts = db.open_accounts().unwrap();
    assert!(!accounts.has_tokens().unwrap());
    assert!(accounts.tokens().unwrap().is_empty());
    let t1 = accounts.add_token(Some("ci"), Some(10)).unwrap();
    let t2 = accounts.add_token(None, None).unwrap();
    assert!(t1.token.starts_with("psi_") && t1.token.len() == 68);
    assert_ne!(*t1.token, *t2.token);
    assert!(t2.info.id > t1.info.id);
    assert_eq!(t1.info.name.as_deref(), Some("ci"));
    assert_eq!(t1.info.items_per_hour, Some(10));
    assert_eq!(t2.info.items_per_hour, None);
    assert!(t1.info.created.ends_with('Z') && t1.info.created.len() == 20);
    assert!(!t1.info.revoked);
    let other = db.open_accounts().unwrap();
    assert!(other.has_tokens().unwrap());
    assert_eq!(
        other.token_by_digest(&token_digest(&t1.token)).unwrap(),
        Some(t1.info.clone())
    );
    assert_eq!(
        other.token_by_digest(&token_digest("psi_unknown")).unwrap(),
        None
    );
    assert_eq!(
        other.tokens().unwrap(),
        vec![t1.info.clone(), t2.info.clone()]
    );
    assert_eq!(accounts.revoke_token(t1.info.id).unwrap(), Revoked::Now);
    assert_eq!(accounts.revoke_token(t1.info.id).unwrap(), Revoked::Already);
    assert_eq!(
        accounts.revoke_token(t2.info.id + 100).unwrap(),
        Revoked::NoSuchToken
    );
    let found = other
        .token_by_digest(&token_digest(&t1.token))
        .unwrap()
        .unwrap();
    assert!(found.revoked, "revoked, and the row stays");
    assert!(other.has_tokens().unwrap());
    let t3 = accounts.add_token(Some("after"), Some(0)).unwrap();
    assert!(t3.info.id > t2.info.id, "ids are never reused");
    assert_eq!(t3.info.items_per_hour, Some(0));
    for name in ["", &"x".repeat(65), "tab\there"] {
        assert!(matches!(
            accounts.add_token(Some(name), None),
            Err(StoreError::InvalidInput(_))
        ));
    }
    assert!(matches!(
        accounts.add_token(None, Some(u64::MAX)),
        Err(StoreError::InvalidInput(_))
    ));
    assert_eq!(
        accounts.tokens().unwrap().len(),
        3,
        "refused tokens are not stored"
    );
}

fn level(key: &str, per_hour: u64) -> LevelCap {
    LevelCap {
        key: key.to_string(),
        per_hour,
    }
}

fn block_on<F: std::future::Future<Output = ()>>(f: F) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::time::timeout(BOUND, f)
            .await
            .expect("the test finished in time")
    });
}

/// Budgets charged in the store: charge, refuse (at the right level, nothing taken),
/// refund, refill, sweep, books apart, and a second opening (another instance, or a
/// restart) seeing the same budget. A store that does not charge budgets itself keeps
/// what its process charged instead ([`budgets_saved_by_the_process`]), and its saved
/// rows are the only budgets it has. Catches: a charge that takes from some levels of a
/// refused payer, a refund above the size, no refill, a sweep that forgets spent
/// budgets, a budget that a second instance does not see.
fn budgets_charged_in_the_store(db: &Database) {
    let Some(pool) = db.open_budgets() else {
        // The embedded store: budgets live in the process and are saved to the file.
        assert!(
            db.sqlite_path().is_some(),
            "only SQLite holds budgets in the process"
        );
        return;
    };
    let budgets = pool.budgets;
    block_on(async move {
        let levels = [level("ip:a", 100), level("ceiling", 150)];
        assert_eq!(
            budgets.charge(Book::Items, &levels, 60).await.unwrap(),
            Ok(())
        );
        // The own level has 40: refused there, and the ceiling keeps its 90.
        match budgets.charge(Book::Items, &levels, 60).await.unwrap() {
            Err(Shortfall { level: 0, wait }) => assert!((1..=3600).contains(&wait), "{wait}"),
            other => panic!("{other:?}"),
        }
        let ceiling = budgets
            .remaining(Book::Items, "ceiling")
            .await
            .unwrap()
            .unwrap();
        assert!((90.0..90.1).contains(&ceiling), "{ceiling}");
        // More than a level can ever hold: an hour, nothing written.
        assert_eq!(
            budgets
                .charge(Book::Items, &[level("ip:b", 10)], 11)
                .await
                .unwrap(),
            Err(Shortfall {
                level: 0,
                wait: 3600
            })
        );
        assert_eq!(budgets.remaining(Book::Items, "ip:b").await.unwrap(), None);
        // Books are apart.
        assert_eq!(
            budgets.remaining(Book::ProbeBytes, "ip:a").await.unwrap(),
            None
        );
        // A refund gives back, never above the size.
        let keys = vec!["ip:a".to_string(), "ceiling".to_string()];
        budgets.refund(Book::Items, &keys, 500).await.unwrap();
        let own = budgets
            .remaining(Book::Items, "ip:a")
            .await
            .unwrap()
            .unwrap();
        assert!((99.99..=100.0).contains(&own), "{own}");
        // Another instance (or this one restarted) charges the same budget.
        let again = db.open_budgets().unwrap().budgets;
        assert_eq!(
            again.charge(Book::Items, &levels, 100).await.unwrap(),
            Ok(())
        );
        assert!(
            budgets
                .charge(Book::Items, &levels, 1)
                .await
                .unwrap()
                .is_err()
        );
        // Refill: 3.6 million an hour is one a millisecond.
        let fast = [level("token-id:1", 3_600_000)];
        again
            .charge(Book::OtSessions, &fast, 3_600_000)
            .await
            .unwrap()
            .unwrap();
        let left = again
            .remaining(Book::OtSessions, "token-id:1")
            .await
            .unwrap()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let later = again
            .remaining(Book::OtSessions, "token-id:1")
            .await
            .unwrap()
            .unwrap();
        assert!(later >= left + 200.0, "{left} -> {later}");
        // Full again once refilled (50 ms at one a millisecond gives back more than the
        // 10 taken): swept, and a full budget again.
        again
            .charge(Book::DownloadBytes, &fast, 10)
            .await
            .unwrap()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let swept = again.sweep().await.unwrap();
        assert!(swept >= 1, "{swept}");
        assert_eq!(
            again
                .remaining(Book::DownloadBytes, "token-id:1")
                .await
                .unwrap(),
            None
        );
        // The spent items budget was not swept.
        assert!(
            again
                .remaining(Book::Items, "ip:a")
                .await
                .unwrap()
                .is_some()
        );
        // No levels: charged (an unlimited payer).
        assert_eq!(
            again.charge(Book::Items, &[], 1_000_000).await.unwrap(),
            Ok(())
        );
    });
    // Such a store saves nothing for a process: it has no budgets of its own.
    let mut accounts = db.open_accounts().unwrap();
    let row = SavedBudget {
        client: "ip:a".into(),
        remaining: 1.0,
        per_hour: 100,
        updated_ms: now_ms(),
    };
    accounts.save_budgets(&[row], now_ms()).unwrap();
    assert!(accounts.budgets().unwrap().is_empty());
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Budgets held by the process and saved to the store (one instance on SQLite, ADR
/// 0016): saved rows come back on a reopen, replaced by a later save, forgotten once full
/// again. A store that charges budgets itself has none of these rows (its budgets are in
/// [`budgets_charged_in_the_store`]). Catches: a restart that refills spent budgets, a
/// save that duplicates a client, rows that are never forgotten.
fn budgets_saved_by_the_process(db: &Database) {
    if db.open_budgets().is_some() {
        let mut accounts = db.open_accounts().unwrap();
        accounts.save_budgets(&[], now_ms()).unwrap();
        assert!(accounts.budgets().unwrap().is_empty());
        return;
    }
    let row = |client: &str, remaining: f64, updated_ms: i64| SavedBudget {
        client: client.to_string(),
        remaining,
        per_hour: 3600,
        updated_ms,
    };
    let now = now_ms();
    {
        let mut accounts = db.open_accounts().unwrap();
        assert!(accounts.budgets().unwrap().is_empty());
        accounts
            .save_budgets(&[row("ip:a", 10.0, now), row("token-id:1", 0.0, now)], now)
            .unwrap();
    }
    let mut reopened = db.open_accounts().unwrap();
    let mut got = reopened.budgets().unwrap();
    got.sort_by(|a, b| a.client.cmp(&b.client));
    assert_eq!(
        got,
        vec![row("ip:a", 10.0, now), row("token-id:1", 0.0, now)]
    );
    // A later save replaces a client's row.
    reopened
        .save_budgets(&[row("ip:a", 5.0, now + 1)], now + 1)
        .unwrap();
    let got = reopened.budgets().unwrap();
    assert_eq!(got.len(), 2);
    assert!(got.contains(&row("ip:a", 5.0, now + 1)));
    // An hour later every one is full again: forgotten.
    reopened.save_budgets(&[], now + 3_601_000).unwrap();
    assert!(reopened.budgets().unwrap().is_empty());
}
