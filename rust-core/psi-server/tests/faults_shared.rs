//! Faults of the shared store (issue 22, "Faults"; docs/deploy.md, "Faults"), each against a
//! private PostgreSQL cluster the test starts, stops and restarts (psi-test-support):
//! - the database lost under a running instance: health keeps answering 200 and says
//!   `"store": "unavailable"`, `POST /v1/sessions` is a typed retryable 503, a running
//!   session goes on; once the database is back the instance reconnects by itself;
//! - PostgreSQL restarted while runs are in flight: every run succeeds or fails with a
//!   retryable error, never a wrong result; no registry row and no budget charge is lost
//!   or doubled;
//! - PostgreSQL restarted again and again, at different moments of the watchers' looks:
//!   each instance accepts new sessions within one watch interval of PostgreSQL accepting
//!   connections (docs/deploy.md, "Faults").
//!
//! (An instance SIGKILLed mid-run is psi-cli/tests/faults_shared.rs: it needs processes.)

mod common;

use common::{error_code, id, query, raw, send, session, session_id};
use psi_client::{CancelToken, Client, ClientConfig, HttpTransport, Method, Protocol, Threads};
use psi_client::{Request, Response, Transport, TransportError};
use psi_server::storage::Database;
use psi_server::{Config, RunningServer};
use psi_test_support::pg::TempPostgres;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const REGISTRY: u64 = 200;
/// The static token every run presents: one budget row, the token's own.
const TOKEN: &str = "faults-shared-token-0123456789abcdef";

/// An instance's settings on `pg`: the registry filled once, the watcher at its default
/// (2 s: the probe of the store's health), timers that end nothing by themselves.
fn config(pg: &TempPostgres, name: &str) -> Config {
    let settings = common::pg::sealed(pg, &pg.url(), &common::temp_dir(name));
    common::pg::import(&settings, 0..REGISTRY, |_| true);
    let mut c = common::config(name);
    c.db = Database::Postgres(settings);
    c.watch_store = Some(Duration::from_secs(2));
    c.session_idle_timeout = Duration::from_secs(120);
    c.enable_ot = false;
    c
}

fn health(server: &RunningServer) -> psi_client::Health {
    let r = send(&raw(server), Method::Get, "/v1/health", &[], &[]);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    serde_json::from_slice(&r.body).unwrap()
}

/// Waits (at most `within`) until health reports `state`; returns how long it took.
fn wait_store(server: &RunningServer, state: psi_client::StoreState, within: Duration) -> Duration {
    let t = Instant::now();
    loop {
        let h = health(server);
        if h.store == Some(state) {
            return t.elapsed();
        }
        assert!(
            t.elapsed() < within,
            "health still says {:?} after {within:?}, expected {state:?}",
            h.store
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// 60 contacts, 20 of them in the registry (entry `i` labeled `user-i`).
fn contacts() -> (Vec<Vec<u8>>, Vec<usize>) {
    let items: Vec<Vec<u8>> = (0..60u64)
        .map(|k| {
            if k % 3 == 0 {
                id(k * 7 % REGISTRY).into_bytes()
            } else {
                format!("+1303{k:07}").into_bytes()
            }
        })
        .collect();
    let expected = (0..items.len()).filter(|k| k % 3 == 0).collect();
    (items, expected)
}

/// The run's matches are exactly the registry's, with their labels.
fn check(report: &psi_client::MatchReport, expected: &[usize]) {
    let got: Vec<usize> = report.matches.iter().map(|m| m.index).collect();
    assert_eq!(got, expected, "a wrong result");
    for m in &report.matches {
        let i: u64 = std::str::from_utf8(&m.item).unwrap()[5..].parse().unwrap();
        assert_eq!(m.label, Some(format!("user-{i}")));
    }
}

#[test]
fn a_lost_database_shows_in_health_refuses_new_sessions_and_comes_back_by_itself() {
    let pg = TempPostgres::start();
    let server = common::start(config(&pg, "faults-db-lost"));
    let t = raw(&server);
    assert_eq!(health(&server).store, Some(psi_client::StoreState::Ok));
    let epoch = server.state.registry().stats().epoch;
    // A session admitted while the database answers.
    let running = session_id(&session(&t, "dh-psi", 3, &[]));

    pg.stop();
    let took = wait_store(
        &server,
        psi_client::StoreState::Unavailable,
        Duration::from_secs(10),
    );
    assert!(took < Duration::from_secs(6), "noticed after {took:?}");
    // A new session: the typed retryable 503 with Retry-After.
    let r = session(&t, "dh-psi", 3, &[]);
    assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(error_code(&r), "store_unavailable");
    assert!(psi_client::ErrorCode::StoreUnavailable.is_retryable());
    let wait: u64 = r
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("retry-after"))
        .map(|(_, v)| v.parse().unwrap())
        .expect("Retry-After");
    assert!((1..=10).contains(&wait), "{wait}");
    // The session admitted before goes on: its step needs no database.
    let r = send(
        &t,
        Method::Post,
        &format!("/v1/sessions/{running}/dh/query"),
        &[("content-type", "application/octet-stream")],
        &query(epoch, 3),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    // Health keeps answering, and keeps saying so.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        health(&server).store,
        Some(psi_client::StoreState::Unavailable)
    );

    // Back: the instance reconnects by itself (no restart) and a whole run succeeds.
    pg.start_again();
    wait_store(&server, psi_client::StoreState::Ok, Duration::from_secs(10));
    let (items, expected) = contacts();
    let report = Client::new(
        &server.url(),
        ClientConfig::default()
            .with_threads(Threads::new(2))
            .with_timeout(Duration::from_secs(30))
            .with_retries(0),
    )
    .match_items(items, Protocol::Dh, &mut |_| {}, &CancelToken::new())
    .expect("a run once the database is back");
    check(&report, &expected);
}

/// The client's transport, counting the items of every session the server admitted
/// (each 201 of `POST /v1/sessions` charged its `client_items`).
struct Counting {
    inner: HttpTransport,
    admitted_items: Mutex<u64>,
    /// Error responses by (status, code): what the restart did to the runs.
    refused: Mutex<Vec<(u16, String)>>,
}

impl Transport for Counting {
    fn send(&self, request: Request) -> Result<Response, TransportError> {
        let creating = request.method == Method::Post && request.url.ends_with("/v1/sessions");
        let items = creating
            .then(|| serde_json::from_slice::<serde_json::Value>(&request.body).ok())
            .flatten()
            .and_then(|v| v["client_items"].as_u64());
        let response = self.inner.send(request)?;
        if let (Some(n), 201) = (items, response.status) {
            *self.admitted_items.lock().unwrap() += n;
        }
        if response.status >= 400 {
            let code = serde_json::from_slice::<serde_json::Value>(&response.body)
                .ok()
                .and_then(|v| v["error"].as_str().map(str::to_string))
                .unwrap_or_default();
            self.refused.lock().unwrap().push((response.status, code));
        }
        Ok(response)
    }
}

/// The items budget row of the static token: (per_hour, remaining, updated_ms).
fn token_budget(pg: &TempPostgres) -> (f64, f64, i64) {
    let rows = pg.psql("SELECT per_hour, remaining, updated_ms FROM budgets WHERE book = 'items'");
    let lines: Vec<&str> = rows.lines().collect();
    assert_eq!(lines.len(), 1, "one budget row, the token's: {rows}");
    let f: Vec<&str> = lines[0].split('|').collect();
    (
        f[0].parse().unwrap(),
        f[1].parse().unwrap(),
        f[2].parse().unwrap(),
    )
}

#[test]
fn a_postgres_restart_during_runs_loses_and_doubles_nothing() {
    let pg = TempPostgres::start();
    let mut c = config(&pg, "faults-pg-restart");
    c.tokens = vec![TOKEN.to_string()];
    // 36,000 items an hour: ten an hour-second, so the row's refill over the test (taken
    // into account below) is known to about an item, small beside one run's 60; the runs
    // below take about 2,000 in all, so the row never fills up again (no cap).
    c.items_per_hour = 36_000;
    c.max_sessions_per_client = 64;
    let db = c.db.clone();
    // Two instances on the one database, as behind a balancer.
    let servers = [common::start(c.clone()), common::start(c)];
    let (registry_rows, registry_version) = {
        let store = db.open_registry_read_only().unwrap();
        (store.len().unwrap(), store.version().unwrap())
    };
    let started_ms: i64 = pg
        .psql("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
        .parse()
        .unwrap();
    let transport = Arc::new(Counting {
        inner: HttpTransport::new(),
        admitted_items: Mutex::new(0),
        refused: Mutex::new(Vec::new()),
    });
    let (items, expected) = contacts();
    let completed_items = Arc::new(Mutex::new(0u64));
    let failed = Arc::new(Mutex::new(Vec::new()));
    std::thread::scope(|s| {
        for k in 0..4 {
            let url = servers[k % 2].url();
            let transport = transport.clone();
            let (items, expected) = (items.clone(), expected.clone());
            let (completed_items, failed) = (completed_items.clone(), failed.clone());
            s.spawn(move || {
                let client = Client::with_transport(
                    &url,
                    transport,
                    ClientConfig::default()
                        .with_threads(Threads::new(1))
                        .with_timeout(Duration::from_secs(20))
                        .with_token(TOKEN)
                        .with_retries(6),
                );
                // Eight runs each, spread over about eight seconds, the restart among them.
                for _ in 0..8 {
                    match client.match_items(
                        items.clone(),
                        Protocol::Dh,
                        &mut |_| {},
                        &CancelToken::new(),
                    ) {
                        Ok(report) => {
                            check(&report, &expected);
                            *completed_items.lock().unwrap() += items.len() as u64;
                        }
                        Err(e) => {
                            assert!(e.is_retryable(), "a run failed for good: {e}");
                            failed.lock().unwrap().push(e.to_string());
                        }
                    }
                    std::thread::sleep(Duration::from_millis(700));
                }
            });
        }
        std::thread::sleep(Duration::from_secs(2));
        // Down until a request has met the outage, so the restart always touches the runs
        // (a plain restart could fall wholly into the runs' pauses); bounded at 10 s.
        pg.stop();
        let down = std::time::Instant::now();
        while transport.refused.lock().unwrap().is_empty()
            && down.elapsed() < Duration::from_secs(10)
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        pg.start_again();
    });
    // Both instances reconnected by themselves.
    for server in &servers {
        wait_store(server, psi_client::StoreState::Ok, Duration::from_secs(10));
    }
    // The registry: no row lost or doubled, the version unchanged.
    let store = db.open_registry_read_only().unwrap();
    assert_eq!(store.len().unwrap(), registry_rows);
    assert_eq!(store.version().unwrap(), registry_version);
    // The budget: what the row lost (plus its refill since the runs began, ten items a
    // second) is at most what the admitted sessions were charged (nothing doubled) and at
    // least what the completed runs were (nothing lost). A lost or doubled charge is a
    // whole run's 60 items; the refill's timing is within two (the row is made at the
    // first charge, a few milliseconds after `started_ms`).
    let (per_hour, remaining, updated_ms) = token_budget(&pg);
    let refill = (updated_ms - started_ms).max(0) as f64 * per_hour / 3_600_000.0;
    let charged = per_hour - remaining + refill;
    let admitted = *transport.admitted_items.lock().unwrap() as f64;
    let completed = *completed_items.lock().unwrap() as f64;
    let refused = transport.refused.lock().unwrap().clone();
    eprintln!(
        "charged {charged:.2}, admitted {admitted}, completed {completed}, refused {refused:?}, \
         failed runs {:?}",
        failed.lock().unwrap()
    );
    assert!(completed > 0.0, "no run completed");
    // The restart reached the runs, as typed retryable errors only.
    assert!(!refused.is_empty(), "the restart touched no request");
    for (status, code) in &refused {
        assert!(
            psi_client::ErrorCode::ALL
                .iter()
                .any(|c| c.as_str() == code && c.is_retryable()),
            "{status} {code}: not a typed retryable error"
        );
    }
    assert!(
        charged <= admitted + 2.0 && charged + 2.0 >= completed,
        "charged {charged:.1} items, admitted {admitted}, completed {completed}; failed runs: {:?}",
        failed.lock().unwrap()
    );
}

/// The documented bound (docs/deploy.md, "Faults"): new sessions are accepted again within
/// one watch interval (`--watch-store`, 2 s) of PostgreSQL accepting connections. Issue 35
/// measured up to 3.7 s. The cause: a restart breaks the watcher's kept connection, and a
/// look that found it broken marked the store unavailable, even with the database back,
/// until the next look a whole interval later; a look made while the database was down
/// also waited a whole interval. So an instance could accept sessions right after the
/// restart and then refuse them for up to two seconds. Measured here: five restarts, each
/// at another moment of the two instances' 2 s look cycles; after `pg_ctl restart -w`
/// returns (the database accepts connections), both instances are asked for a session every
/// 100 ms for two watch intervals and a half; the figure is when the last refusal came
/// (every refusal the typed retryable 503). Prints the figures recorded in
/// docs/reliability.md.
#[test]
fn after_a_postgres_restart_instances_accept_sessions_within_one_watch_interval() {
    const WATCH: Duration = Duration::from_secs(2);
    let pg = TempPostgres::start();
    let mut c = config(&pg, "faults-accept-bound");
    c.max_sessions_per_client = 10_000;
    c.max_sessions_per_block = 10_000;
    c.items_per_hour = 1_000_000;
    assert_eq!(c.watch_store, Some(WATCH));
    let servers = [common::start(c.clone()), common::start(c)];
    let raws: Vec<_> = servers.iter().map(raw).collect();
    for t in &raws {
        assert_eq!(session(t, "dh-psi", 3, &[]).status, 201);
    }
    let mut took = Vec::new();
    for k in 0..5u64 {
        // Restarts at different phases of the look cycle (and the instances' cycles are
        // apart by their start).
        std::thread::sleep(Duration::from_millis(300 + 430 * k));
        pg.restart();
        let back = Instant::now();
        let mut last_refused = [Duration::ZERO; 2];
        while back.elapsed() < WATCH * 5 / 2 {
            for (i, t) in raws.iter().enumerate() {
                let r = session(t, "dh-psi", 3, &[]);
                if r.status != 201 {
                    assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
                    assert_eq!(error_code(&r), "store_unavailable");
                    last_refused[i] = back.elapsed();
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        took.extend(last_refused);
    }
    let mut sorted = took.clone();
    sorted.sort();
    let median = (sorted[sorted.len() / 2 - 1] + sorted[sorted.len() / 2]) / 2;
    let max = *sorted.last().unwrap();
    eprintln!(
        "last refusal after a PostgreSQL restart, {} samples (2 instances x 5 restarts): \
         median {median:?}, max {max:?}, all {took:?}",
        took.len()
    );
    assert!(
        max < WATCH,
        "an instance refused sessions {max:?} after PostgreSQL was back (bound: one watch \
         interval, {WATCH:?}); all: {took:?}"
    );
}
