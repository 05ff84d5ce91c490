//! Restart: the registry, the key and the epoch's encoded set survive; a key rotation
//! starts a new epoch (new ETag; queries for the old epoch are refused).

mod common;

use common::*;
use psi_client::{
    CachedSet, CancelToken, Client, ClientConfig, MemoryCache, Method, Protocol, SetCache,
};
use std::sync::Arc;

/// A cache that treats every server URL as the same server (a restart moves the port).
#[derive(Default)]
struct OneServer(MemoryCache);

impl SetCache for OneServer {
    fn load(&self, _: &str) -> Option<CachedSet> {
        self.0.load("server")
    }
    fn store(&self, _: &str, set: &CachedSet) -> std::io::Result<()> {
        self.0.store("server", set)
    }
}
use psi_server::{Registry, Store};

#[test]
fn registry_and_encoded_set_survive_a_restart_and_rotation_starts_an_epoch() {
    let mut config = config("restart");
    // No overlap: the old epoch is refused as soon as the new one is served (the overlap
    // itself is tested in rotation.rs).
    config.epoch_overlap = std::time::Duration::ZERO;
    fill(&config, 1000, |i| i < 10);
    let items = vec![
        id(3).into_bytes(),
        id(999).into_bytes(),
        b"+13030000001".to_vec(),
    ];

    let server = start(config.clone());
    let cache = Arc::new(OneServer::default());
    let client = Client::new(&server.url(), ClientConfig::default()).with_cache(cache.clone());
    let first = client
        .match_items(
            items.clone(),
            Protocol::Dh,
            &mut |_| {},
            &CancelToken::new(),
        )
        .unwrap();
    assert_eq!(first.matches.len(), 2);
    let etag = server.state.registry().etag().to_string();
    server.shutdown().unwrap();

    // Restart on the same file: nothing recomputed, same set, same answers.
    let registry = Registry::load(&config, &mut |_, _| {}).unwrap();
    assert_eq!(registry.stats().outputs_computed, 0);
    assert_eq!(registry.stats().entries, 1000);
    assert_eq!(registry.etag(), etag);
    drop(registry);
    let server = start(config.clone());
    // A new port: a new client sharing the first one's cache (which keys sets by server
    // URL, so the cache here stands for "the same server").
    let client = Client::new(&server.url(), ClientConfig::default()).with_cache(cache.clone());
    let again = client
        .match_items(
            items.clone(),
            Protocol::Dh,
            &mut |_| {},
            &CancelToken::new(),
        )
        .unwrap();
    assert_eq!(again.matches, first.matches);
    assert!(
        again.stats.set_from_cache,
        "same epoch and ETag: the cached set is reused"
    );

    // Incremental change while running, picked up by reload: only the new entry is computed.
    let mut store = Store::open(config.db.sqlite_path().unwrap()).unwrap();
    store.add_entries([("+13030000001", Some("new"))]).unwrap();
    drop(store);
    let stats = server.state.reload().unwrap();
    assert_eq!(stats.outputs_computed, 1);
    let r = client
        .match_items(
            items.clone(),
            Protocol::Dh,
            &mut |_| {},
            &CancelToken::new(),
        )
        .unwrap();
    assert_eq!(r.matches.len(), 3);
    assert_eq!(r.matches[2].label.as_deref(), Some("new"));
    assert!(!r.stats.set_from_cache);

    // Rotation: epoch 2, every output recomputed, old-epoch queries refused.
    let t = raw(&server);
    let old = session_id(&session(&t, "dh-psi", 1, &[]));
    Store::open(config.db.sqlite_path().unwrap())
        .unwrap()
        .rotate_key()
        .unwrap();
    let stats = server.state.reload().unwrap();
    assert_eq!(stats.epoch, 2);
    assert_eq!(stats.outputs_computed, 1001);
    let q = query(1, 1);
    let r = send(
        &t,
        Method::Post,
        &format!("/v1/sessions/{old}/dh/query"),
        &[("content-type", "application/octet-stream")],
        &q,
    );
    assert_eq!(r.status, 409);
    assert_eq!(error_code(&r), "epoch_mismatch");
    let r = client
        .match_items(items, Protocol::Dh, &mut |_| {}, &CancelToken::new())
        .unwrap();
    assert_eq!(r.epoch, 2);
    assert_eq!(r.matches.len(), 3);
    assert!(!r.stats.set_from_cache);
    server.shutdown().unwrap();
}
