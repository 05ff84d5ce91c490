//! Several `psi serve` instances on one PostgreSQL database (issue 22): an import and a
//! rotation made through one are served by all, with the same encoded set; two refreshes
//! racing compute each output once; a builder that dies releases the build lease and
//! another goes on from the outputs it stored; the OPRF keys are stored sealed. Real
//! PostgreSQL on 127.0.0.1 (psi-test-support), real servers on 127.0.0.1 port 0.

mod common;

use common::pg::{fresh, import};
use common::*;
use psi_client::{
    CancelToken, Client, ClientConfig, HttpTransport, MatchReport, Method, Protocol, Request,
    Response, Transport, TransportError,
};
use psi_core::Threads;
use psi_server::sealing::SealKeys;
use psi_server::storage::{self, PgSettings, PgStore, RegistryStore, SetWork};
use psi_server::{AppState, Config, Database, RunningServer, StoreError};
use psi_test_support::pg::TempPostgres;
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the servers here look for changes in the database.
const WATCH: Duration = Duration::from_millis(300);

fn pg_config(name: &str, settings: &PgSettings) -> Config {
    let mut c = config(name);
    c.db = Database::Postgres(settings.clone());
    c.watch_store = Some(WATCH);
    c.rotate_every = None;
    c.epoch_overlap = Duration::from_secs(120);
    c.session_ttl = Duration::from_secs(120);
    c.items_per_hour = 0;
    c
}

/// Computes what an import leaves to compute (what `psi import` does after adding).
fn refresh(settings: &PgSettings, max_client_items: usize) -> storage::RefreshStats {
    let mut store = PgStore::open(settings).unwrap();
    storage::refresh(&mut store, max_client_items, Threads::ONE, &mut |_, _| {}).unwrap()
}

fn start_pg(config: &Config) -> RunningServer {
    let state = AppState::open(config.clone()).unwrap();
    RunningServer::start(state, ([127, 0, 0, 1], 0).into()).unwrap()
}

fn encoded_set(server: &RunningServer) -> (String, Vec<u8>) {
    let r = send(&raw(server), Method::Get, "/v1/dh/encoded-set", &[], b"");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    (r.header("etag").unwrap().to_string(), r.body)
}

fn items() -> Vec<Vec<u8>> {
    vec![
        id(3).into_bytes(),
        id(299).into_bytes(),
        id(300).into_bytes(),
        b"+13030000001".to_vec(),
    ]
}

fn run(client: &Client) -> MatchReport {
    client
        .match_items(items(), Protocol::Dh, &mut |_| {}, &CancelToken::new())
        .unwrap()
}

fn matched(r: &MatchReport) -> Vec<Vec<u8>> {
    r.matches.iter().map(|m| m.item.clone()).collect()
}

/// Waits until `done` holds, for at most `limit`.
fn wait_for(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// HTTP, but runs `hook` once, just before the first request whose path ends with
/// `suffix`.
struct HookBefore {
    inner: HttpTransport,
    suffix: &'static str,
    hook: Mutex<Option<Box<dyn FnOnce() + Send>>>,
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

#[test]
fn three_instances_serve_one_registry_and_follow_imports_and_rotations() {
    let (settings, _dir) = fresh("shared-three");
    import(&settings, 0..300, |i| i < 10);
    let config = pg_config("shared-three", &settings);
    let servers: Vec<RunningServer> = (0..3).map(|_| start_pg(&config)).collect();

    // (a) One registry, one encoded set: the same bytes and ETag from every instance,
    // and the right intersection from each.
    let sets: Vec<_> = servers.iter().map(encoded_set).collect();
    assert!(
        sets.iter().all(|s| *s == sets[0]),
        "instances serve different sets"
    );
    for s in &servers {
        let r = run(&Client::new(&s.url(), ClientConfig::default()));
        assert_eq!(matched(&r), vec![id(3).into_bytes(), id(299).into_bytes()]);
        assert_eq!(r.matches[0].label.as_deref(), Some("user-3"));
    }

    // An import made outside the servers (as `psi import --db postgres://` does) is
    // picked up by all three within the watch interval.
    import(&settings, 300..301, |_| false);
    let stats = refresh(&settings, config.max_client_items);
    assert_eq!(stats.outputs_computed, 1);
    for s in &servers {
        wait_for(WATCH * 20, "the import to be served", || {
            s.state.registry().stats().entries == 301
        });
    }
    let sets: Vec<_> = servers.iter().map(encoded_set).collect();
    assert!(sets.iter().all(|s| *s == sets[0]));
    for s in &servers {
        let r = run(&Client::new(&s.url(), ClientConfig::default()));
        assert_eq!(
            matched(&r),
            vec![
                id(3).into_bytes(),
                id(299).into_bytes(),
                id(300).into_bytes()
            ]
        );
    }

    // (b) A run whose session is created on instance 2 in epoch 1; before its query,
    // instance 0 rotates and instance 2 picks the new epoch up. The run still finishes in
    // epoch 1 (the overlap), and every instance then serves epoch 2's one set.
    let rotator = servers[0].state.clone();
    let follower = servers[2].state.clone();
    let hook = Box::new(move || {
        assert_eq!(rotator.rotate().unwrap().epoch, 2);
        wait_for(WATCH * 20, "instance 2 to serve epoch 2", || {
            follower.registry().stats().epoch == 2
        });
    });
    let across = Client::with_transport(
        &servers[2].url(),
        Arc::new(HookBefore {
            inner: HttpTransport::new(),
            suffix: "/dh/query",
            hook: Mutex::new(Some(hook)),
        }),
        ClientConfig::default(),
    );
    let r = run(&across);
    assert_eq!(r.epoch, 1, "the run finished in the epoch it started in");
    assert_eq!(matched(&r).len(), 3);
    for s in &servers {
        wait_for(WATCH * 20, "every instance to serve epoch 2", || {
            s.state.registry().stats().epoch == 2
        });
    }
    let sets2: Vec<_> = servers.iter().map(encoded_set).collect();
    assert!(sets2.iter().all(|s| *s == sets2[0]));
    assert_ne!(sets2[0].0, sets[0].0, "a new epoch has a new set");
    for s in &servers {
        let r = run(&Client::new(&s.url(), ClientConfig::default()));
        assert_eq!(r.epoch, 2);
        assert_eq!(matched(&r).len(), 3);
    }
    for s in servers {
        s.shutdown().unwrap();
    }
}

/// A balancer's view of the instances: requests of a session go to the instance that
/// holds it (`base`); the encoded-set download, which names no session, goes to `other`
/// once it is set (the instance restarted by `hook`, run once before the first request
/// whose path ends with `/dh/query`). Counts the sessions created.
struct Balancer {
    inner: HttpTransport,
    base: String,
    other: Arc<Mutex<Option<String>>>,
    hook: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    sessions_created: Mutex<u32>,
    set_answers: Mutex<Vec<u16>>,
}

impl Transport for Balancer {
    fn send(&self, mut request: Request) -> Result<Response, TransportError> {
        if request.url.ends_with("/dh/query") {
            let hook = self.hook.lock().unwrap().take();
            if let Some(hook) = hook {
                hook();
            }
        }
        if request.method == Method::Post && request.url.ends_with("/v1/sessions") {
            *self.sessions_created.lock().unwrap() += 1;
        }
        let set = request.url.ends_with("/v1/dh/encoded-set");
        if set && let Some(other) = self.other.lock().unwrap().as_ref() {
            request.url = request.url.replacen(&self.base, other, 1);
        }
        let r = self.inner.send(request)?;
        if set {
            self.set_answers.lock().unwrap().push(r.status);
        }
        Ok(r)
    }
}

/// `GET /v1/dh/encoded-set` with `X-PSI-Epoch: epoch` and, if given, `If-None-Match`.
fn set_of_epoch(server: &RunningServer, epoch: u32, etag: Option<&str>) -> Response {
    let epoch = epoch.to_string();
    let mut h = vec![("x-psi-epoch", epoch.as_str())];
    if let Some(etag) = etag {
        h.push(("if-none-match", etag));
    }
    send(&raw(server), Method::Get, "/v1/dh/encoded-set", &h, b"")
}

/// Issue 35 (several-instance check): an instance restarted after a rotation knew only
/// the new key and refused the previous epoch's set with 409 while the others served it,
/// so a client whose set download the balancer sent there paid a second run. Now the
/// shared store keeps the previous epoch's set through the overlap and a restarted
/// instance serves it (the same bytes and ETag, a 304 for its holder), until the overlap
/// ends; then `409 epoch_mismatch`, as everywhere, and the store forgets it.
#[test]
fn an_instance_restarted_after_a_rotation_serves_the_previous_epochs_set_through_the_overlap() {
    const OVERLAP: Duration = Duration::from_secs(10);
    let (settings, _dir) = fresh("shared-restart-overlap");
    import(&settings, 0..300, |i| i < 10);
    let mut config = pg_config("shared-restart-overlap", &settings);
    config.epoch_overlap = OVERLAP;
    let first = start_pg(&config);
    let second = Arc::new(Mutex::new(Some(start_pg(&config))));
    let (etag1, set1) = encoded_set(&first);
    let restarted: Arc<Mutex<Option<RunningServer>>> = Arc::new(Mutex::new(None));
    let other = Arc::new(Mutex::new(None));

    // A run whose session is on the first instance in epoch 1. Before its query the
    // first instance rotates, the second follows and is restarted; the balancer sends the
    // run's set download to the restarted one.
    let rotated_at = Arc::new(Mutex::new(None));
    let hook = {
        let (rotator, second, restarted, other, config, rotated_at) = (
            first.state.clone(),
            second.clone(),
            restarted.clone(),
            other.clone(),
            config.clone(),
            rotated_at.clone(),
        );
        Box::new(move || {
            *rotated_at.lock().unwrap() = Some(Instant::now());
            assert_eq!(rotator.rotate().unwrap().epoch, 2);
            let old = second.lock().unwrap().take().unwrap();
            wait_for(WATCH * 20, "the second instance to serve epoch 2", || {
                old.state.registry().stats().epoch == 2
            });
            old.shutdown().unwrap();
            let again = start_pg(&config);
            assert_eq!(again.state.registry().stats().epoch, 2);
            *other.lock().unwrap() = Some(again.url());
            *restarted.lock().unwrap() = Some(again);
        })
    };
    let balancer = Arc::new(Balancer {
        inner: HttpTransport::new(),
        base: first.url(),
        other,
        hook: Mutex::new(Some(hook)),
        sessions_created: Mutex::new(0),
        set_answers: Mutex::new(Vec::new()),
    });
    let r = run(&Client::with_transport(
        &first.url(),
        balancer.clone(),
        ClientConfig::default(),
    ));
    assert_eq!(r.epoch, 1, "the run finished in the epoch it started in");
    assert_eq!(matched(&r).len(), 2);
    assert_eq!(r.matches[0].label.as_deref(), Some("user-3"));
    assert_eq!(
        *balancer.set_answers.lock().unwrap(),
        vec![200],
        "the restarted instance served epoch 1's set"
    );
    assert_eq!(*balancer.sessions_created.lock().unwrap(), 1, "one run");

    // The restarted instance serves epoch 1's set as the first does: the same bytes and
    // ETag, and 304 to a client holding it.
    let again = restarted.lock().unwrap().take().unwrap();
    let r = set_of_epoch(&again, 1, None);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("etag"), Some(etag1.as_str()));
    assert_eq!(r.header("x-psi-epoch"), Some("1"));
    assert_eq!(r.body, set1);
    let r = set_of_epoch(&again, 1, Some(&etag1));
    assert_eq!(r.status, 304);
    // The current epoch's set is the one every instance serves.
    assert_eq!(encoded_set(&again), encoded_set(&first));

    // After the overlap (timed from the rotation): the documented 409 epoch_mismatch on
    // both, and the store no longer holds the set.
    let rotated_at = rotated_at.lock().unwrap().unwrap();
    let left = (rotated_at + OVERLAP).saturating_duration_since(Instant::now());
    std::thread::sleep(left);
    wait_for(
        Duration::from_secs(10),
        "the overlap to end everywhere",
        || {
            set_of_epoch(&again, 1, None).status == 409
                && set_of_epoch(&first, 1, None).status == 409
        },
    );
    let r = set_of_epoch(&again, 1, Some(&etag1));
    assert_eq!(r.status, 409);
    assert_eq!(error_code(&r), "epoch_mismatch");
    wait_for(
        Duration::from_secs(10),
        "the store to forget epoch 1's set",
        || {
            PgStore::open(&settings)
                .unwrap()
                .previous_set(config.max_client_items)
                .unwrap()
                .is_none()
        },
    );
    // A restart after the overlap serves no previous epoch.
    again.shutdown().unwrap();
    let late = start_pg(&config);
    assert_eq!(set_of_epoch(&late, 1, None).status, 409);
    for s in [first, late] {
        s.shutdown().unwrap();
    }
}

#[test]
fn racing_refreshes_compute_each_output_once_and_the_lease_is_reentrant() {
    let (settings, _dir) = fresh("shared-race");
    let n = 3000;
    import(&settings, 0..n, |_| false);

    // Re-entrant on one store object; exclusive across two.
    let mut a = PgStore::open(&settings).unwrap();
    let outer = a.lease_builds().unwrap();
    let (tx, rx) = mpsc::channel();
    let other = settings.clone();
    let waiter = std::thread::spawn(move || {
        let mut b = PgStore::open(&other).unwrap();
        let lease = b.lease_builds().unwrap();
        tx.send(()).unwrap();
        drop(lease);
    });
    let inner = a.lease_builds().unwrap();
    drop(inner);
    assert!(
        rx.recv_timeout(Duration::from_millis(500)).is_err(),
        "another store took the lease while it was held"
    );
    drop(outer);
    rx.recv_timeout(Duration::from_secs(10))
        .expect("the lease was not released when the outer hold dropped");
    waiter.join().unwrap();

    // Two refreshes on two store objects at once: each output computed once in total.
    let racers: Vec<_> = (0..2)
        .map(|_| {
            let s = settings.clone();
            std::thread::spawn(move || refresh(&s, 100))
        })
        .collect();
    let stats: Vec<_> = racers.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(stats.iter().map(|s| s.outputs_computed).sum::<u64>(), n);
    assert_eq!(stats.iter().filter(|s| s.set_rebuilt).count(), 1);
    let mut store = PgStore::open(&settings).unwrap();
    assert!(store.outputs_complete(1).unwrap());
    assert!(store.encoded_set(100).unwrap().is_some());
}

#[test]
fn a_builder_whose_connection_dies_releases_the_lease_and_another_goes_on() {
    let (settings, _dir) = fresh("shared-dies");
    // More than one batch of outputs (50,000): the first is stored, then the builder dies.
    let n = 60_000;
    import(&settings, 0..n, |_| false);

    let (stored_tx, stored_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let s = settings.clone();
    let builder = std::thread::spawn(move || {
        let mut store = PgStore::open(&s).unwrap();
        let mut first = true;
        storage::refresh(&mut store, 100, Threads::ONE, &mut |_, _| {
            if std::mem::take(&mut first) {
                let _ = stored_tx.send(());
                let _ = go_rx.recv_timeout(Duration::from_secs(60));
            }
        })
    });
    stored_rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the first batch was never stored");

    // Another instance asks for the lease and waits.
    let s = settings.clone();
    let (took_tx, took_rx) = mpsc::channel();
    let successor = std::thread::spawn(move || {
        let mut store = PgStore::open(&s).unwrap();
        let stats = storage::refresh(&mut store, 100, Threads::ONE, &mut |_, _| {
            let _ = took_tx.send(());
        });
        stats.unwrap()
    });
    assert!(
        took_rx.recv_timeout(Duration::from_millis(500)).is_err(),
        "the successor computed while the builder held the lease"
    );

    // The builder's backend is terminated (as when its instance is killed).
    let mut admin = settings.connect_blocking().unwrap();
    let killed: i64 = admin
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_locks
             WHERE locktype = 'advisory' AND granted
               AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(killed, 1);
    go_tx.send(()).unwrap();
    assert!(
        builder.join().unwrap().is_err(),
        "the dead builder reported success"
    );

    let stats = successor.join().unwrap();
    assert_eq!(
        stats.outputs_computed,
        n - 50_000,
        "the successor recomputed outputs the builder had stored"
    );
    assert!(stats.set_rebuilt);
    assert!(
        PgStore::open(&settings)
            .unwrap()
            .outputs_complete(1)
            .unwrap()
    );
}

/// True if `needle` occurs in `hay`.
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn keys_are_stored_sealed_and_open_only_with_their_key_file_epoch_and_database() {
    let (settings, dir) = fresh("shared-sealed");
    let mut store = PgStore::open(&settings).unwrap();
    let key = store.current_key().unwrap();
    let raw = key.oprf_key().to_bytes();
    let mut admin = settings.connect_blocking().unwrap();
    let sealed: Vec<u8> = admin
        .query_one("SELECT sealed FROM keys WHERE epoch = 1", &[])
        .unwrap()
        .get(0);
    assert!(
        !contains(&sealed, raw.as_slice()),
        "the raw key is in the keys table"
    );
    // Control: the key the store opens is the one the server uses.
    let again = PgStore::open(&settings).unwrap().current_key().unwrap();
    assert_eq!(again.oprf_key().to_bytes().as_slice(), raw.as_slice());

    // Another at-rest key file: a typed error, from the store and from a server.
    let wrong = dir.join("other.key");
    SealKeys::generate_file(&wrong).unwrap();
    let other = settings.clone().with_seal_key_file(Some(&wrong));
    let mut s = PgStore::open(&other).unwrap();
    assert!(matches!(s.current_key(), Err(StoreError::Seal(_))));
    let mut c = pg_config("shared-sealed", &other);
    c.db = Database::Postgres(other.clone());
    assert!(matches!(AppState::open(c), Err(StoreError::Seal(_))));

    // Without any key file: refused, naming the flag.
    let none = PgSettings::from_url(&settings.to_string())
        .unwrap()
        .with_password(TempPostgres::shared().password());
    let e = PgStore::open(&none).unwrap_err();
    assert!(matches!(e, StoreError::SealKeyRequired));
    assert!(e.to_string().contains("--seal-key-file"));

    // A sealed key moved to another epoch's row does not open there.
    admin
        .execute("UPDATE keys SET epoch = 2 WHERE epoch = 1", &[])
        .unwrap();
    assert!(matches!(store.current_key(), Err(StoreError::Seal(_))));

    // At-rest key rotation: a new first key; reseal; the old key can go.
    admin
        .execute("UPDATE keys SET epoch = 1 WHERE epoch = 2", &[])
        .unwrap();
    let first = dir.join("seal.key");
    let fresh_key = dir.join("fresh.key");
    SealKeys::generate_file(&fresh_key).unwrap();
    let both = dir.join("both.key");
    let text = format!(
        "{}{}",
        std::fs::read_to_string(&fresh_key).unwrap(),
        std::fs::read_to_string(&first).unwrap()
    );
    write_private(&both, &text);
    let rotated = settings.clone().with_seal_key_file(Some(&both));
    let mut s = PgStore::open(&rotated).unwrap();
    assert_eq!(s.reseal().unwrap(), 1);
    assert_eq!(s.reseal().unwrap(), 0);
    let only_new = settings.clone().with_seal_key_file(Some(&fresh_key));
    let k = PgStore::open(&only_new).unwrap().current_key().unwrap();
    assert_eq!(k.oprf_key().to_bytes().as_slice(), raw.as_slice());
}

fn write_private(path: &Path, text: &str) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

#[test]
fn a_url_with_a_password_is_refused_and_the_password_comes_from_a_file() {
    let pg = TempPostgres::shared();
    let url = pg.url();
    let with = url.replacen("psi@", &format!("psi:{}@", pg.password()), 1);
    let e = PgSettings::from_url(&with).unwrap_err();
    assert!(!e.to_string().contains(pg.password()));
    assert!(e.to_string().contains("--db-password-file"));
    // The password from its file connects; none does not.
    let s = PgSettings::from_url(&url)
        .unwrap()
        .with_password_from(Some(&pg.password_file()))
        .unwrap();
    assert!(s.connect_blocking().is_ok());
    assert!(!format!("{s} {s:?}").contains(pg.password()));
    let bare = PgSettings::from_url(&url).unwrap();
    // Without a password the error says where one comes from (issue 35), not only
    // "invalid configuration".
    let e = bare
        .connect_blocking()
        .err()
        .expect("refused without a password");
    assert!(e.to_string().contains("--db-password-file"), "{e}");
}

#[test]
fn a_token_issued_through_one_instance_store_is_accepted_by_another() {
    let (settings, _dir) = fresh("shared-token");
    import(&settings, 0..50, |_| false);
    let config = pg_config("shared-token", &settings);
    let servers: Vec<RunningServer> = (0..2).map(|_| start_pg(&config)).collect();
    let mut accounts = Database::Postgres(settings.clone())
        .open_accounts()
        .unwrap();
    let token = accounts.add_token(Some("t"), None).unwrap();
    let bearer = format!("Bearer {}", token.token.as_str());
    for s in &servers {
        let ok = session(&raw(s), "dh-psi", 1, &[("authorization", &bearer)]);
        assert_eq!(ok.status, 201, "{}", String::from_utf8_lossy(&ok.body));
        let refused = session(
            &raw(s),
            "dh-psi",
            1,
            &[("authorization", "Bearer psi_nope")],
        );
        assert_eq!(refused.status, 401);
    }
    assert_eq!(accounts.tokens().unwrap().len(), 1);
    for s in servers {
        s.shutdown().unwrap();
    }
}

#[test]
fn three_instances_on_one_schedule_rotate_once_per_period() {
    let (settings, _dir) = fresh("shared-schedule");
    import(&settings, 0..200, |_| false);
    let mut config = pg_config("shared-schedule", &settings);
    let every = Duration::from_secs(2);
    config.rotate_every = Some(every);
    let t0 = Instant::now();
    let servers: Vec<RunningServer> = (0..3).map(|_| start_pg(&config)).collect();
    // Each instance finds the key due at the same moment; the lease makes one rotate and
    // the others serve its epoch. Two rotating for one due rotation would skip ahead.
    let mut store = PgStore::open(&settings).unwrap();
    wait_for(
        Duration::from_secs(30),
        "the first scheduled rotation",
        || store.current_key().unwrap().epoch() >= 2,
    );
    for s in &servers {
        wait_for(
            Duration::from_secs(30),
            "every instance on the new epoch",
            || s.state.registry().stats().epoch >= 2,
        );
    }
    std::thread::sleep(every * 2);
    let epoch = store.current_key().unwrap().epoch();
    let periods = (t0.elapsed().as_secs_f64() / every.as_secs_f64()).floor() as u32;
    assert!(
        epoch <= periods + 1,
        "epoch {epoch} after {periods} periods: more than one rotation per period"
    );
    // Every instance follows (at most one period behind the store while it builds).
    let epochs: Vec<u32> = servers
        .iter()
        .map(|s| s.state.registry().stats().epoch)
        .collect();
    assert!(
        epochs.iter().all(|e| *e + 1 >= epoch),
        "{epochs:?} vs {epoch}"
    );
    for s in servers {
        s.shutdown().unwrap();
    }
}

#[test]
fn a_read_only_open_creates_and_writes_nothing_and_a_newer_schema_is_refused() {
    let (settings, _dir) = fresh("shared-readonly");
    let mut admin = settings.connect_blocking().unwrap();
    let tables = |admin: &mut postgres::Client| -> i64 {
        admin
            .query_one(
                "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'",
                &[],
            )
            .unwrap()
            .get(0)
    };
    // The watcher's open on an empty database: refused, nothing created.
    assert!(PgStore::open_read_only(&settings).is_err());
    assert_eq!(tables(&mut admin), 0);
    import(&settings, 0..5, |_| false);
    refresh(&settings, 100);
    let mut ro = PgStore::open_read_only(&settings).unwrap();
    assert_eq!(ro.readiness(100).unwrap().version(), Some((1, 1)));
    assert!(ro.add_entry_list(&[("+12020000099", None)]).is_err());
    assert!(ro.rotate_key().is_err());
    assert_eq!(PgStore::open(&settings).unwrap().len().unwrap(), 5);

    admin
        .execute("UPDATE meta SET v = 99 WHERE k = 'schema_version'", &[])
        .unwrap();
    assert!(matches!(
        PgStore::open(&settings),
        Err(StoreError::SchemaTooNew(99))
    ));
}

/// Sync mode on two instances of one PostgreSQL store (issue 37, "several instances"):
/// every instance builds the same snapshot and the same deltas from the store (same bytes,
/// same ETag), so a synced set made through one is in sync on the other (behind a
/// balancer a client meets both); an import and a removal made outside the servers reach
/// both, and a client synced through either catches up with the one delta, the removed
/// entry no longer matching and the added one matching.
#[test]
fn two_instances_serve_one_sync_mode_and_its_deltas() {
    use psi_client::{MemoryCache, SetCache};
    let (settings, _dir) = fresh("shared-sync");
    import(&settings, 0..300, |i| i % 2 == 0);
    let mut config = pg_config("shared-sync", &settings);
    config.enable_sync = true;
    let servers: Vec<RunningServer> = (0..2).map(|_| start_pg(&config)).collect();
    let get = |s: &RunningServer, path: &str| {
        let r = send(&raw(s), Method::Get, path, &[], b"");
        assert_eq!(
            r.status,
            200,
            "{path}: {}",
            String::from_utf8_lossy(&r.body)
        );
        (r.header("etag").map(str::to_string), r.body)
    };
    let snapshots: Vec<_> = servers
        .iter()
        .map(|s| get(s, "/v1/sync/snapshot"))
        .collect();
    assert_eq!(
        snapshots[0], snapshots[1],
        "instances serve different snapshots"
    );

    // A client syncs through instance 0; its synced set, handed to a client of instance 1
    // (one URL behind a balancer), is in sync there: nothing to download.
    let sync_client = |s: &RunningServer, cache: Arc<MemoryCache>| {
        let c = Client::new(&s.url(), ClientConfig::default()).with_cache(cache);
        c.health().unwrap();
        c
    };
    let items = || -> Vec<Vec<u8>> {
        vec![
            id(0).into_bytes(),
            id(2).into_bytes(),
            id(3).into_bytes(),
            id(300).into_bytes(),
            b"+13030000001".to_vec(),
        ]
    };
    let sync_run = |c: &Client| {
        c.match_items(items(), Protocol::Dh, &mut |_| {}, &CancelToken::new())
            .unwrap()
    };
    let (cache0, cache1) = (Arc::new(MemoryCache::new()), Arc::new(MemoryCache::new()));
    let (c0, c1) = (
        sync_client(&servers[0], cache0.clone()),
        sync_client(&servers[1], cache1.clone()),
    );
    let first = sync_run(&c0);
    assert!(first.stats.sync.unwrap().snapshot_bytes > 0);
    assert_eq!(
        matched(&first),
        [id(0), id(2), id(3)].map(String::into_bytes)
    );
    let key = |s: &RunningServer| format!("{}#sync", s.url().trim_end_matches('/'));
    let synced = cache0
        .load(&key(&servers[0]))
        .expect("the synced set is cached");
    cache1.store(&key(&servers[1]), &synced).unwrap();
    let there = sync_run(&c1);
    let sync = there.stats.sync.unwrap();
    assert!(sync.from_cache);
    assert_eq!(sync.bytes_downloaded(), 0, "in sync on the other instance");
    assert_eq!(matched(&there), matched(&first));
    assert_eq!(
        there
            .matches
            .iter()
            .map(|m| m.label.clone())
            .collect::<Vec<_>>(),
        vec![Some("user-0".into()), Some("user-2".into()), None]
    );

    // An import and a removal made outside the servers: both instances serve the new
    // version, with the same delta from the old one.
    let from = sync.have_version;
    import(&settings, 300..302, |_| true);
    {
        let mut store = PgStore::open(&settings).unwrap();
        assert_eq!(store.remove_entry_list(&[id(0).as_str()]).unwrap(), 1);
    }
    refresh(&settings, config.max_client_items);
    for s in &servers {
        wait_for(WATCH * 40, "the changes to be served", || {
            s.state.registry().stats().entries == 301
        });
    }
    let path = format!("/v1/sync/delta?from={from}");
    let deltas: Vec<_> = servers.iter().map(|s| get(s, &path)).collect();
    assert_eq!(deltas[0].1, deltas[1].1, "instances serve different deltas");
    for c in [&c0, &c1] {
        let r = sync_run(c);
        let sync = r.stats.sync.unwrap();
        assert_eq!(sync.snapshot_bytes, 0, "a delta, not a snapshot");
        assert_eq!(sync.delta_bytes, deltas[0].1.len() as u64);
        assert!(sync.have_version > from);
        assert_eq!(
            matched(&r),
            [id(2), id(3), id(300)].map(String::into_bytes),
            "the removed entry stops matching, the added one matches"
        );
    }
    for s in servers {
        s.shutdown().unwrap();
    }
}
