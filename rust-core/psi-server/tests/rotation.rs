//! Key rotation while serving (ADR 0017): a scheduled rotation happens on time; a run
//! whose session started in the old epoch finishes with that epoch's key, set and labels
//! during the overlap; the old epoch is refused after it; a client holding the old
//! encoded set downloads the new one on the next run and gets the new registry's answer.

mod common;

use common::*;
use psi_client::{
    CancelToken, Client, ClientConfig, ClientError, ErrorCode, HttpTransport, MatchReport,
    MemoryCache, Method, Protocol, Request, Response, SetCache, Transport, TransportError,
};
use psi_server::{AppState, Store};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Hook = Box<dyn FnOnce() + Send>;

/// HTTP, but runs `hook` once, just before the first request whose path ends with
/// `suffix`: a rotation in the middle of a run, between session creation and the
/// protocol step.
struct HookBefore {
    inner: HttpTransport,
    suffix: &'static str,
    hook: Mutex<Option<Hook>>,
}

impl Transport for HookBefore {
    fn send(&self, request: Request) -> Result<Response, TransportError> {
        if request.url.ends_with(self.suffix) {
            let hook = self.hook.lock().unwrap().take();
            if let Some(hook) = hook {
                hook();
            }
        }
        self.inner.send(request)
    }
}

fn rotating_client(url: &str, suffix: &'static str, state: Arc<AppState>) -> Client {
    let hook: Hook = Box::new(move || {
        let before = state.registry().stats().epoch;
        let stats = state.rotate().unwrap();
        assert_eq!(stats.epoch, before + 1);
    });
    Client::with_transport(
        url,
        Arc::new(HookBefore {
            inner: HttpTransport::new(),
            suffix,
            hook: Mutex::new(Some(hook)),
        }),
        ClientConfig::default(),
    )
}

fn items() -> Vec<Vec<u8>> {
    vec![
        id(3).into_bytes(),
        id(999).into_bytes(),
        b"+13030000001".to_vec(),
    ]
}

fn run(client: &Client, protocol: Protocol) -> Result<MatchReport, ClientError> {
    client.match_items(items(), protocol, &mut |_| {}, &CancelToken::new())
}

fn matched(r: &MatchReport) -> Vec<(Vec<u8>, Option<String>)> {
    r.matches
        .iter()
        .map(|m| (m.item.clone(), m.label.clone()))
        .collect()
}

fn quiet_config(name: &str, overlap: Duration) -> psi_server::Config {
    let mut config = config(name);
    config.rotate_every = None;
    config.epoch_overlap = overlap;
    config.session_ttl = Duration::from_secs(120);
    config
}

/// `GET /v1/dh/encoded-set` asking for the set of `epoch` (the `X-PSI-Epoch` value as sent).
fn encoded_set(t: &Raw, epoch: &str) -> Response {
    send(
        t,
        Method::Get,
        "/v1/dh/encoded-set",
        &[("x-psi-epoch", epoch)],
        b"",
    )
}

#[test]
fn a_run_across_a_rotation_finishes_in_its_epoch_and_the_next_run_refetches() {
    let overlap = Duration::from_secs(4);
    let config = quiet_config("rotation-overlap", overlap);
    fill(&config, 1000, |i| i < 10);
    let server = start(config.clone());
    let url = server.url();
    let t = raw(&server);

    // A client that holds epoch 1's encoded set.
    let cache = Arc::new(MemoryCache::new());
    let cached = Client::new(&url, ClientConfig::default()).with_cache(cache.clone());
    let first = run(&cached, Protocol::Dh).unwrap();
    assert_eq!(first.epoch, 1);
    assert_eq!(
        matched(&first),
        vec![
            (id(3).into_bytes(), Some("user-3".into())),
            (id(999).into_bytes(), None)
        ]
    );
    let etag1 = cache.load(&url).unwrap().etag;

    // A session of epoch 1 that will still be live when the overlap ends.
    let late = session_id(&session(&t, "dh-psi", 1, &[]));

    // Entry 3 leaves the registry; the rotation below publishes the change.
    Store::open(config.db.sqlite_path().unwrap())
        .unwrap()
        .remove_entries([id(3).as_str()])
        .unwrap();

    // A run whose session is created in epoch 1; the server rotates before its query.
    // The query, the encoded set and the labels are all epoch 1's: the run is correct
    // for the registry it started with.
    let epoch1 = Arc::downgrade(&server.state.registry());
    let across = rotating_client(&url, "/dh/query", server.state.clone());
    let r = run(&across, Protocol::Dh).unwrap();
    let rotated_at = Instant::now();
    assert_eq!(server.state.registry().stats().epoch, 2, "rotated mid-run");
    assert_eq!(r.epoch, 1);
    assert_eq!(r.matches.len(), 2, "epoch 1's registry still holds entry 3");
    assert_eq!(r.matches[0].label.as_deref(), Some("user-3"));
    assert!(r.label_error.is_none(), "{:?}", r.label_error);
    // Within the overlap, epoch 1's set is served on request, and the current one by
    // default.
    let old_set = encoded_set(&t, "1");
    assert_eq!(old_set.status, 200);
    assert_eq!(old_set.header("etag"), Some(etag1.as_str()));
    let new_set = send(&t, Method::Get, "/v1/dh/encoded-set", &[], b"");
    assert_ne!(new_set.header("etag"), Some(etag1.as_str()));
    assert_eq!(new_set.header("x-psi-epoch"), Some("2"));

    // The client holding epoch 1's set: the session names a new ETag, so it downloads
    // the new set and gets the new registry's answer (entry 3 is gone).
    let next = run(&cached, Protocol::Dh).unwrap();
    assert_eq!(next.epoch, 2);
    assert!(!next.stats.set_from_cache);
    assert!(next.stats.set_bytes_downloaded > 0);
    assert_eq!(matched(&next), vec![(id(999).into_bytes(), None)]);
    let etag2 = cache.load(&url).unwrap().etag;
    assert_ne!(etag2, etag1);
    assert_eq!(Some(etag2.as_str()), new_set.header("etag"));

    // After the overlap: epoch 1 is refused, for queries and for its set.
    let left = (rotated_at + overlap + Duration::from_millis(300))
        .saturating_duration_since(Instant::now());
    std::thread::sleep(left);
    let q = query(1, 1);
    let r = send(
        &t,
        Method::Post,
        &format!("/v1/sessions/{late}/dh/query"),
        &[("content-type", "application/octet-stream")],
        &q,
    );
    assert_eq!(r.status, 409);
    assert_eq!(error_code(&r), "epoch_mismatch");
    let r = encoded_set(&t, "1");
    assert_eq!(r.status, 409);
    assert_eq!(error_code(&r), "epoch_mismatch");
    let r = encoded_set(&t, "one");
    assert_eq!(error_code(&r), "bad_request");
    // The server let go of epoch 1's registry (key, set, labels) once the overlap ended.
    let freed_by = Instant::now() + Duration::from_secs(5);
    while epoch1.upgrade().is_some() {
        assert!(Instant::now() < freed_by, "epoch 1's registry still held");
        std::thread::sleep(Duration::from_millis(50));
    }
    // And the current epoch still serves.
    let r = run(&cached, Protocol::Dh).unwrap();
    assert_eq!(r.epoch, 2);
    assert!(r.stats.set_from_cache);
    server.shutdown().unwrap();
}

#[test]
fn an_ot_run_across_a_rotation_gets_its_labels_from_its_epoch() {
    let config = quiet_config("rotation-ot", Duration::from_secs(60));
    fill(&config, 1000, |i| i < 10);
    let server = start(config);
    // The rotation comes before the first OT round; the label OPRF query after the run
    // names epoch 1 and is answered with epoch 1's key and label records.
    let across = rotating_client(&server.url(), "/ot/round", server.state.clone());
    let r = run(&across, Protocol::Ot).unwrap();
    assert_eq!(server.state.registry().stats().epoch, 2);
    assert_eq!(r.epoch, 1);
    assert!(r.label_error.is_none(), "{:?}", r.label_error);
    assert_eq!(
        matched(&r),
        vec![
            (id(3).into_bytes(), Some("user-3".into())),
            (id(999).into_bytes(), None)
        ]
    );
    server.shutdown().unwrap();
}

#[test]
fn rotation_happens_on_schedule_and_runs_stay_correct() {
    let mut config = config("rotation-schedule");
    config.rotate_every = Some(Duration::from_secs(1));
    config.epoch_overlap = Duration::from_secs(30);
    fill(&config, 1000, |i| i < 10);
    let t0 = Instant::now();
    let server = start(config);
    let deadline = t0 + Duration::from_secs(60);
    let mut seen = vec![(server.state.registry().stats().epoch, t0.elapsed())];
    while seen.last().unwrap().0 < 3 {
        assert!(
            Instant::now() < deadline,
            "no scheduled rotation in time: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
        let e = server.state.registry().stats().epoch;
        if e != seen.last().unwrap().0 {
            seen.push((e, t0.elapsed()));
        }
    }
    assert_eq!(seen[0].0, 1);
    // Not before the key is a period old: on schedule, not at start.
    assert!(seen[1].1 >= Duration::from_secs(1), "{seen:?}");
    let health: serde_json::Value =
        serde_json::from_slice(&send(&raw(&server), Method::Get, "/v1/health", &[], b"").body)
            .unwrap();
    assert!(health["epoch"].as_u64().unwrap() >= 3);

    // Runs keep matching correctly while the key keeps changing (a run that straddles
    // two rotations is told epoch_mismatch and starts over, as a client would).
    let client = Client::new(&server.url(), ClientConfig::default());
    let r = (0..5)
        .find_map(|_| match run(&client, Protocol::Dh) {
            Err(ClientError::Http {
                code: ErrorCode::EpochMismatch,
                ..
            }) => None,
            other => Some(other.unwrap()),
        })
        .expect("a run within one overlap");
    assert!(r.epoch >= 3);
    assert_eq!(
        matched(&r),
        vec![
            (id(3).into_bytes(), Some("user-3".into())),
            (id(999).into_bytes(), None)
        ]
    );
    server.shutdown().unwrap();
}

/// A change written by another process (what `psi import` and `psi rotate-key` do) is
/// served only once it is complete: never the entries without their encoded set, never a
/// new key without its outputs. The periodic watch over a real `psi serve` is tested in
/// psi-cli's `faults.rs`; here each look is a direct call.
#[test]
fn a_change_by_another_process_is_served_once_complete_and_never_half_done() {
    let mut config = quiet_config("watch", Duration::from_secs(4));
    config.watch_store = None;
    fill(&config, 1000, |i| i < 10);
    let server = start(config.clone());
    let client = Client::new(&server.url(), ClientConfig::default());
    let state = server.state.clone();
    let mut watch = Store::open(config.db.sqlite_path().unwrap()).unwrap();
    let mut other = Store::open(config.db.sqlite_path().unwrap()).unwrap();
    let refresh = |s: &mut Store| {
        s.refresh(
            config.max_client_items,
            psi_core::Threads::ONE,
            &mut |_, _| {},
        )
        .unwrap()
    };
    assert_eq!(state.reload_if_changed(&mut watch).unwrap(), None);

    // An import's first step: the entries, not yet their outputs and set.
    other.add_entries([("+13030000001", Some("new"))]).unwrap();
    assert_eq!(state.reload_if_changed(&mut watch).unwrap(), None);
    assert_eq!(state.registry().stats().entries, 1000);
    assert!(
        matched(&run(&client, Protocol::Dh).unwrap())
            .iter()
            .all(|(i, _)| i != b"+13030000001")
    );
    // Its second step: now it is served.
    refresh(&mut other);
    let stats = state
        .reload_if_changed(&mut watch)
        .unwrap()
        .expect("the import is served");
    assert_eq!((stats.epoch, stats.entries), (1, 1001));
    assert!(
        matched(&run(&client, Protocol::Ot).unwrap())
            .contains(&(b"+13030000001".to_vec(), Some("new".into())))
    );
    assert_eq!(
        state.reload_if_changed(&mut watch).unwrap(),
        None,
        "served already"
    );

    // A rotation: the new key alone is not served; with its outputs and set it is.
    other.rotate_key().unwrap();
    assert_eq!(state.reload_if_changed(&mut watch).unwrap(), None);
    assert_eq!(state.registry().stats().epoch, 1);
    assert_eq!(run(&client, Protocol::Dh).unwrap().epoch, 1);
    refresh(&mut other);
    let stats = state
        .reload_if_changed(&mut watch)
        .unwrap()
        .expect("the new epoch is served");
    assert_eq!((stats.epoch, stats.entries), (2, 1001));
    let r = run(&client, Protocol::Dh).unwrap();
    assert_eq!(r.epoch, 2);
    assert!(matched(&r).contains(&(b"+13030000001".to_vec(), Some("new".into()))));
    server.shutdown().unwrap();
}
