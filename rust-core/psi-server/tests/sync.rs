//! Sync mode over loopback HTTP (docs/protocol/sync.md, issue 37): the reference client
//! against the reference server with `enable_sync`, its synced set in a real cache. A
//! first run downloads the snapshot, not the encoded set; the matches and labels equal
//! plain DH-PSI's; a later run downloads nothing; after an import and a removal it
//! downloads only the delta, the removed entry stops matching and the added one matches;
//! a client two versions behind catches up with one delta; a damaged or old cache is
//! discarded, never misread; a key rotation makes the next run sync from a snapshot.

mod common;

use common::*;
use psi_client::{CancelToken, Client, ClientConfig, MatchReport, MemoryCache, Protocol};
use psi_server::{AppState, Registry, RunningServer, Store};
use std::sync::Arc;

const N: u64 = 3_000;

fn labeled(i: u64) -> bool {
    !i.is_multiple_of(3)
}

struct Server {
    server: RunningServer,
    state: Arc<AppState>,
    db: std::path::PathBuf,
}

fn sync_server(name: &str, sync: bool) -> Server {
    let mut c = config(name);
    c.enable_sync = sync;
    c.items_per_hour = 0;
    fill(&c, N, labeled);
    let db = c.db.sqlite_path().unwrap().to_path_buf();
    let registry = Registry::load(&c, &mut |_, _| {}).unwrap();
    let state = AppState::with_registry(c, registry);
    let server = RunningServer::start(state.clone(), ([127, 0, 0, 1], 0).into()).unwrap();
    Server { server, state, db }
}

fn client(url: &str, cache: Arc<MemoryCache>, sync: bool) -> Client {
    let mut config = ClientConfig::default();
    config.sync = sync;
    let c = Client::new(url, config).with_cache(cache);
    // A run of a fixed protocol asks for sync mode once the client knows the server
    // serves it (its stored health).
    c.health().unwrap();
    c
}

/// 40 contacts: 20 registered (`id(0..20)`, a third without labels), 20 not.
fn contacts() -> Vec<Vec<u8>> {
    (0..20)
        .map(id)
        .chain((0..20).map(|i| format!("+1303{i:07}")))
        .map(String::into_bytes)
        .collect()
}

fn run(c: &Client, items: Vec<Vec<u8>>) -> MatchReport {
    c.match_items(items, Protocol::Dh, &mut |_| {}, &CancelToken::new())
        .unwrap()
}

fn matched(r: &MatchReport) -> Vec<(String, Option<String>)> {
    r.matches
        .iter()
        .map(|m| (String::from_utf8(m.item.clone()).unwrap(), m.label.clone()))
        .collect()
}

#[test]
fn a_synced_client_matches_as_plain_dh_psi_and_then_downloads_only_deltas() {
    let s = sync_server("sync-flow", true);
    let url = s.server.url();
    // Health says the server serves sync mode, with the snapshot's size.
    let plain_cache = Arc::new(MemoryCache::new());
    let plain = client(&url, plain_cache.clone(), false);
    let health = plain.health().unwrap();
    let info = health.sync.clone().expect("health names sync mode");
    assert_eq!(info.width, psi_core::sync::sync_width(N, 1));
    let expected = run(&plain, contacts());
    assert!(expected.stats.sync.is_none());
    assert!(expected.stats.set_bytes_downloaded > 0);
    assert_eq!(expected.matches.len(), 20);

    // First sync: the snapshot (a few bits per entry), no encoded set.
    let cache = Arc::new(MemoryCache::new());
    let c = client(&url, cache.clone(), true);
    let first = run(&c, contacts());
    let sync = first.stats.sync.expect("a sync-mode run");
    assert_eq!(matched(&first), matched(&expected));
    assert_eq!(first.stats.set_bytes_downloaded, 0);
    assert_eq!(sync.snapshot_bytes, info.snapshot_bytes);
    assert!(!sync.from_cache);
    assert!(
        sync.snapshot_bytes * 4 < expected.stats.set_bytes_downloaded,
        "snapshot {} vs encoded set {}",
        sync.snapshot_bytes,
        expected.stats.set_bytes_downloaded
    );
    assert!(sync.candidates >= 20 && sync.candidates <= 40);
    assert_eq!(sync.have_version, sync.served_version);

    // In sync: nothing to download.
    let again = run(&c, contacts());
    let sync2 = again.stats.sync.unwrap();
    assert!(sync2.from_cache);
    assert_eq!(sync2.bytes_downloaded(), 0);
    assert_eq!(matched(&again), matched(&expected));

    // A day's change: one entry removed, two added (one labelled), the server reloads.
    {
        let mut store = Store::open(&s.db).unwrap();
        store.remove_entries(["+12020000004"]).unwrap();
        store
            .add_entries([("+13030000001", Some("new-1")), ("+13030000002", None)])
            .unwrap();
    }
    s.state.reload().unwrap();
    let after = run(&c, contacts());
    let sync3 = after.stats.sync.unwrap();
    assert!(sync3.from_cache);
    assert_eq!(sync3.snapshot_bytes, 0, "a delta, not a snapshot");
    assert!(
        sync3.delta_bytes > 0 && sync3.delta_bytes < 200,
        "{sync3:?}"
    );
    assert_eq!(sync3.have_version, sync3.served_version);
    assert!(sync3.have_version > sync.have_version);
    let got = matched(&after);
    assert!(!got.iter().any(|(i, _)| i == "+12020000004"), "removed");
    assert!(got.contains(&("+13030000001".into(), Some("new-1".into()))));
    assert!(got.contains(&("+13030000002".into(), None)));
    assert_eq!(got.len(), 21);
    // The same answer as plain DH-PSI's for the new registry.
    assert_eq!(got, matched(&run(&plain, contacts())));
    s.server.shutdown().unwrap();
}

#[test]
fn a_client_two_versions_behind_catches_up_with_one_delta() {
    let s = sync_server("sync-behind", true);
    let url = s.server.url();
    let cache = Arc::new(MemoryCache::new());
    let c = client(&url, cache.clone(), true);
    let v0 = run(&c, contacts()).stats.sync.unwrap().have_version;
    for (add, remove) in [
        ("+13030000005", "+12020000001"),
        ("+13030000006", "+12020000002"),
    ] {
        let mut store = Store::open(&s.db).unwrap();
        store.add_entries([(add, Some("x"))]).unwrap();
        store.remove_entries([remove]).unwrap();
        s.state.reload().unwrap();
    }
    let r = run(&c, contacts());
    let sync = r.stats.sync.unwrap();
    assert_eq!(sync.snapshot_bytes, 0);
    assert!(sync.delta_bytes > 0);
    assert_eq!(sync.have_version, v0 + 4, "two imports and two removals");
    let got = matched(&r);
    for gone in ["+12020000001", "+12020000002"] {
        assert!(!got.iter().any(|(i, _)| i == gone));
    }
    for new in ["+13030000005", "+13030000006"] {
        assert!(got.contains(&(new.into(), Some("x".into()))));
    }
    s.server.shutdown().unwrap();
}

/// The ADR 0018 property for sync mode over HTTP (ADR 0047 §3.5): what a run sends, in
/// requests and bytes, depends on the number of contacts only, not on which or how many
/// of them are registered or are candidates.
#[test]
fn a_sync_runs_requests_do_not_depend_on_its_matches_or_candidates() {
    let s = sync_server("sync-shape", true);
    let url = s.server.url();
    let c = client(&url, Arc::new(MemoryCache::new()), true);
    // 40 contacts each: none registered, half, all of them.
    let none: Vec<Vec<u8>> = (0..40)
        .map(|i| format!("+1303{i:07}").into_bytes())
        .collect();
    let half = contacts();
    let all: Vec<Vec<u8>> = (100..140).map(|i| id(i).into_bytes()).collect();
    // The first run downloads the snapshot; the three compared runs are in sync.
    run(&c, half.clone());
    let mut shapes = Vec::new();
    for (items, matches) in [(none, 0), (half, 20), (all, 40)] {
        let r = run(&c, items);
        assert_eq!(r.matches.len(), matches);
        let sync = r.stats.sync.unwrap();
        assert_eq!(sync.bytes_downloaded(), 0);
        assert!(sync.candidates >= matches);
        shapes.push((
            r.stats.requests,
            r.stats.bytes_sent,
            r.stats.protocol_bytes_sent,
        ));
    }
    assert_eq!(shapes[0], shapes[1], "{shapes:?}");
    assert_eq!(shapes[1], shapes[2], "{shapes:?}");
    s.server.shutdown().unwrap();
}

/// HTTP that keeps the body of every label fetch (the confirmation request).
struct KeepFetches {
    inner: psi_client::HttpTransport,
    fetches: std::sync::Mutex<Vec<Vec<u8>>>,
}

impl psi_client::Transport for KeepFetches {
    fn send(
        &self,
        request: psi_client::Request,
    ) -> Result<psi_client::Response, psi_client::TransportError> {
        if request.url.ends_with("/labels/fetch") {
            self.fetches.lock().unwrap().push(request.body.clone());
        }
        self.inner.send(request)
    }
}

/// The confirmation's buckets of a run (the ids after the 18-byte header).
fn requested_buckets(body: &[u8]) -> std::collections::BTreeSet<u32> {
    body[psi_core::sync::REQUEST_HEADER_LEN..]
        .chunks(4)
        .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
        .collect()
}

/// ADR 0056: the fill of a confirmation is this client's keyed stream for the epoch.
/// Runs with the same contacts send the same buckets (a server comparing them learns
/// nothing from the fill); a contact more changes at most two buckets (its own and the
/// fill's last); another client (another key, another cache) fills differently; a key
/// kept in the cache survives a restart.
#[test]
fn the_confirmation_fill_is_stable_per_client_and_epoch() {
    let s = sync_server("sync-fill", true);
    let url = s.server.url();
    let keep = |cache: Arc<MemoryCache>| {
        let t = Arc::new(KeepFetches {
            inner: psi_client::HttpTransport::new(),
            fetches: std::sync::Mutex::new(Vec::new()),
        });
        let c = Client::with_transport(&url, t.clone(), ClientConfig::default()).with_cache(cache);
        c.health().unwrap();
        (c, t)
    };
    let cache = Arc::new(MemoryCache::new());
    let (c, t) = keep(cache.clone());
    let base = contacts();
    let mut one_more = base.clone();
    // An unregistered contact replaced by a registered one: one more candidate.
    *one_more.last_mut().unwrap() = id(500).into_bytes();
    run(&c, base.clone());
    run(&c, base.clone());
    assert_eq!(run(&c, one_more).matches.len(), 21);
    let fetches: Vec<_> = t
        .fetches
        .lock()
        .unwrap()
        .iter()
        .map(|b| requested_buckets(b))
        .collect();
    assert_eq!(fetches.len(), 3);
    assert_eq!(
        fetches[0], fetches[1],
        "the same contacts, the same buckets"
    );
    let changed = fetches[1].symmetric_difference(&fetches[2]).count();
    assert!(changed <= 2, "one more candidate changed {changed} buckets");
    // A restart on the same cache keeps the key; another client's differs.
    let (again, t2) = keep(cache);
    run(&again, base.clone());
    let (other, t3) = keep(Arc::new(MemoryCache::new()));
    run(&other, base);
    assert_eq!(
        requested_buckets(&t2.fetches.lock().unwrap()[0]),
        fetches[0]
    );
    let theirs = requested_buckets(&t3.fetches.lock().unwrap()[0]);
    assert_eq!(theirs.len(), fetches[0].len());
    assert!(
        theirs.symmetric_difference(&fetches[0]).count() > fetches[0].len() / 2,
        "another client's fill is its own"
    );
    s.server.shutdown().unwrap();
}

#[test]
fn a_damaged_or_foreign_cache_entry_is_discarded_and_synced_again() {
    use psi_client::{CachedSet, SetCache};
    let s = sync_server("sync-cache", true);
    let url = s.server.url();
    let cache = Arc::new(MemoryCache::new());
    let c = client(&url, cache.clone(), true);
    let good = run(&c, contacts());
    let snapshot_bytes = good.stats.sync.unwrap().snapshot_bytes;
    assert!(snapshot_bytes > 0);
    let key = format!("{}#sync", url.trim_end_matches('/'));
    let stored = cache.load(&key).expect("the synced set is cached");
    assert_eq!(&stored.bytes[..4], b"PSYC");
    // One flipped bit (the digest fails), an encoded set from before sync mode, nothing.
    let mut flipped = stored.bytes.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 1;
    let encoded = plain_set(&url);
    for bad in [flipped, encoded, Vec::new()] {
        cache
            .store(
                &key,
                &CachedSet {
                    etag: stored.etag.clone(),
                    bytes: bad,
                },
            )
            .unwrap();
        let r = run(&c, contacts());
        let sync = r.stats.sync.unwrap();
        assert!(!sync.from_cache);
        assert_eq!(sync.snapshot_bytes, snapshot_bytes);
        assert_eq!(matched(&r), matched(&good));
    }
    s.server.shutdown().unwrap();
}

/// The server's encoded set: the bytes a cache entry from before sync mode holds.
fn plain_set(url: &str) -> Vec<u8> {
    let raw = raw_url(url);
    let r = send(
        &raw,
        psi_client::Method::Get,
        "/v1/dh/encoded-set",
        &[],
        &[],
    );
    assert_eq!(r.status, 200);
    r.body
}

#[test]
fn a_key_rotation_makes_the_next_run_sync_from_a_snapshot() {
    let s = sync_server("sync-rotate", true);
    let url = s.server.url();
    let cache = Arc::new(MemoryCache::new());
    let c = client(&url, cache.clone(), true);
    let before = run(&c, contacts());
    let e0 = before.epoch;
    s.state.rotate().unwrap();
    let after = run(&c, contacts());
    assert_eq!(after.epoch, e0 + 1);
    let sync = after.stats.sync.unwrap();
    assert!(!sync.from_cache, "the cached set is of the old epoch");
    assert!(sync.snapshot_bytes > 0);
    assert_eq!(matched(&after), matched(&before));
    s.server.shutdown().unwrap();
}

#[test]
fn a_server_without_sync_mode_serves_plain_dh_psi_to_a_sync_client() {
    let s = sync_server("sync-off", false);
    let url = s.server.url();
    let c = client(&url, Arc::new(MemoryCache::new()), true);
    assert!(c.health().unwrap().sync.is_none());
    let r = run(&c, contacts());
    assert!(r.stats.sync.is_none());
    assert!(r.stats.set_bytes_downloaded > 0);
    assert_eq!(r.matches.len(), 20);
    // Its sync routes answer 404 not_found.
    let raw = raw_url(&url);
    for path in ["/v1/sync/snapshot", "/v1/sync/delta?from=0"] {
        let r = send(&raw, psi_client::Method::Get, path, &[], &[]);
        assert_eq!((r.status, error_code(&r).as_str()), (404, "not_found"));
    }
    s.server.shutdown().unwrap();
}

#[test]
fn the_sync_routes_answer_etags_204_and_typed_errors() {
    let s = sync_server("sync-routes", true);
    let url = s.server.url();
    let raw = raw_url(&url);
    let get = |path: &str, headers: &[(&'static str, &str)]| -> psi_client::Response {
        send(&raw, psi_client::Method::Get, path, headers, &[])
    };
    let snap = get("/v1/sync/snapshot", &[]);
    assert_eq!(snap.status, 200);
    let etag = snap.header("etag").unwrap().to_string();
    let version: u64 = snap.header("x-psi-sync-version").unwrap().parse().unwrap();
    let parsed = psi_core::sync::Snapshot::from_bytes(&snap.body).unwrap();
    assert_eq!((parsed.version, parsed.tags.len() as u64), (version, N));
    assert_eq!(
        get("/v1/sync/snapshot", &[("if-none-match", &etag)]).status,
        304
    );
    // At the current version: nothing; before the log: 404; malformed: 400.
    assert_eq!(
        get(&format!("/v1/sync/delta?from={version}"), &[]).status,
        204
    );
    let old = get("/v1/sync/delta?from=0", &[]);
    assert_eq!((old.status, error_code(&old).as_str()), (404, "not_found"));
    for bad in [
        "/v1/sync/delta",
        "/v1/sync/delta?from=x",
        "/v1/sync/delta?from=-1",
    ] {
        let r = get(bad, &[]);
        assert_eq!(
            (r.status, error_code(&r).as_str()),
            (400, "bad_request"),
            "{bad}"
        );
    }
    let r = get("/v1/sync/snapshot", &[("x-psi-epoch", "77")]);
    assert_eq!((r.status, error_code(&r).as_str()), (409, "epoch_mismatch"));
    s.server.shutdown().unwrap();
}
