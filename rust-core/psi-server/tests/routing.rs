//! Several instances behind a load balancer (issue 22): a session id names the instance that
//! holds the session; a step that reaches another instance is `421 wrong_instance`, typed
//! and retryable, never a wrong answer; nginx, configured by docs/deploy/nginx.conf itself,
//! routes each session's requests to its instance, and when that instance is gone the
//! client's retry completes on another.
//!
//! The instances run in this process on 127.0.0.1 and share one store: one SQLite file (the
//! same key and registry), or one PostgreSQL database, the shared store of production (a
//! real cluster on 127.0.0.1, psi-test-support).

mod common;

use common::{error_code, fill, id, query, raw, send, session, session_id};
use psi_client::report::RetryCause;
use psi_client::{
    CancelToken, Client, ClientConfig, ErrorCode, HttpTransport, Method, Progress, Protocol,
    Request, Response, Threads, Transport, TransportError,
};
use psi_server::{Config, Database, RunningServer};
use psi_test_support::TempNginx;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const REGISTRY: u64 = 300;

/// Entry `i` of the registry is labeled unless 3 divides it.
fn labeled(i: u64) -> bool {
    !i.is_multiple_of(3)
}

/// The settings every instance shares: one store file filled once, no budgets, both
/// optional protocols, loopback as a trusted proxy (nginx), timers that end nothing.
fn shared(name: &str) -> Config {
    let c = tuned(common::config(name));
    fill(&c, REGISTRY, labeled);
    c
}

/// As [`shared`], on one PostgreSQL database instead of a file: the registry imported once
/// through the store API (as `psi import --db postgres://` does), the OPRF keys sealed
/// under an at-rest key file all instances read. The first instance to start computes the
/// outputs under the build lease; the others load them.
fn shared_postgres(name: &str) -> Config {
    let (settings, _dir) = common::pg::fresh(name);
    common::pg::import(&settings, 0..REGISTRY, labeled);
    let mut c = common::config(name);
    c.db = Database::Postgres(settings);
    tuned(c)
}

fn tuned(mut c: Config) -> Config {
    c.items_per_hour = 0;
    c.ot_sessions_per_hour = 0;
    c.enable_cm20 = true;
    c.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap()];
    c.session_idle_timeout = Duration::from_secs(60);
    c.ot_idle_timeout = Duration::from_secs(60);
    c.ot_hello_timeout = Duration::from_secs(60);
    c
}

fn instance(shared: &Config, name: &str) -> RunningServer {
    let mut c = shared.clone();
    c.instance = Some(name.parse().unwrap());
    common::start(c)
}

/// `NAME-` and 32 lowercase hex digits: the instance's name.
fn name_of(id: &str) -> &str {
    let (name, hex) = id
        .split_once('-')
        .unwrap_or_else(|| panic!("no name in {id}"));
    assert!(
        hex.len() == 32
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "{id}"
    );
    name
}

fn message(r: &Response) -> String {
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    v["message"].as_str().unwrap().to_string()
}

#[test]
fn a_step_on_another_instance_is_wrong_instance_and_changes_nothing() {
    let config = shared("routing-pair");
    let a = instance(&config, "a1");
    let b = instance(&config, "b2");
    let (ta, tb) = (raw(&a), raw(&b));
    let epoch = a.state.registry().stats().epoch;
    let bin = [("content-type", "application/octet-stream")];

    let id = session_id(&session(&ta, "dh-psi", 3, &[]));
    assert_eq!(name_of(&id), "a1");
    let step = format!("/v1/sessions/{id}/dh/query");

    // The step sent to B: 421 wrong_instance, naming no secret part of the id; B holds
    // nothing, A's session is untouched.
    let r = send(&tb, Method::Post, &step, &bin, &query(epoch, 3));
    assert_eq!(r.status, 421);
    assert_eq!(error_code(&r), "wrong_instance");
    let hex = id.split_once('-').unwrap().1;
    assert!(!message(&r).contains(hex), "{}", message(&r));
    assert!(ErrorCode::WrongInstance.is_retryable());
    let r = send(&tb, Method::Delete, &format!("/v1/sessions/{id}"), &[], &[]);
    assert_eq!((r.status, error_code(&r).as_str()), (421, "wrong_instance"));
    assert_eq!(b.state.live_sessions(), 0);
    assert_eq!(a.state.live_sessions(), 1);

    // On A the session takes its step (once: the next is out of phase).
    let r = send(&ta, Method::Post, &step, &bin, &query(epoch, 3));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let r = send(&ta, Method::Post, &step, &bin, &query(epoch, 3));
    assert_eq!(error_code(&r), "wrong_phase");

    // An id of B's own name that B never made, and an id of the old form (no name):
    // unknown_session.
    for unknown in [format!("b2-{hex}"), hex.to_string()] {
        let r = send(
            &tb,
            Method::Post,
            &format!("/v1/sessions/{unknown}/dh/query"),
            &bin,
            &query(epoch, 3),
        );
        assert_eq!(
            (r.status, error_code(&r).as_str()),
            (404, "unknown_session")
        );
    }
    assert_eq!(b.state.live_sessions(), 0);
}

/// docs/deploy/nginx.conf with the test's addresses.
fn nginx_conf(addrs: &[std::net::SocketAddr]) -> String {
    psi_test_support::nginx::deploy_conf(addrs)
}

/// The client's transport, seeing every request: records the instance of each session
/// request, and may stop the instance holding a session right after it was created
/// (before its first step), as a crash between two requests of a run.
struct Interposer {
    inner: HttpTransport,
    servers: Arc<Mutex<HashMap<String, RunningServer>>>,
    seen: Mutex<Vec<String>>,
    kill_next: Mutex<bool>,
    killed: Mutex<Vec<String>>,
}

impl Transport for Interposer {
    fn send(&self, request: Request) -> Result<Response, TransportError> {
        let path = request
            .url
            .splitn(4, '/')
            .nth(3)
            .unwrap_or_default()
            .to_string();
        if let Some(rest) = path.strip_prefix("v1/sessions/") {
            let name = name_of(rest.split('/').next().unwrap()).to_string();
            self.seen.lock().unwrap().push(name.clone());
            if std::mem::take(&mut *self.kill_next.lock().unwrap()) {
                let server = self.servers.lock().unwrap().remove(&name);
                server.expect("a live instance").shutdown().unwrap();
                self.killed.lock().unwrap().push(name);
            }
        }
        self.inner.send(request)
    }
}

#[test]
fn nginx_routes_sessions_by_id_and_a_dead_instance_sessions_are_retried_elsewhere() {
    within(LIMIT, || through_nginx(&shared("routing-nginx")));
}

/// Issue 22's deployment: three instances on one PostgreSQL database behind nginx.
#[test]
fn on_one_postgres_database_nginx_routes_every_protocol_and_a_dead_instance_is_retried() {
    within(LIMIT, || {
        through_nginx(&shared_postgres("routing-nginx-pg"))
    });
}

/// How long one run of [`through_nginx`] may take (5 to 10 s here).
const LIMIT: Duration = Duration::from_secs(240);

/// Runs `test` on its own thread and fails if it has not ended within `limit`: a request
/// that hangs somewhere (nginx, a server, the database) fails the test instead of stalling
/// the suite; the requests themselves time out after 30 s each.
fn within(limit: Duration, test: impl FnOnce() + Send + 'static) {
    let (done, ended) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        test();
        let _ = done.send(());
    });
    match ended.recv_timeout(limit) {
        Ok(()) => handle.join().unwrap(),
        // The test panicked: its panic is the failure.
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(handle.join().unwrap_err())
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("not done within {limit:?}")
        }
    }
}

/// Three instances on `config`'s store behind nginx configured by docs/deploy/nginx.conf:
/// every protocol's runs give the right matches and labels, each session's steps reach
/// its instance, a stopped instance's session is `421 wrong_instance`, and a client run
/// whose instance dies completes after one retry.
fn through_nginx(config: &Config) {
    let names = ["psi1", "psi2", "psi3"];
    let servers: HashMap<String, RunningServer> = names
        .iter()
        .map(|n| (n.to_string(), instance(config, n)))
        .collect();
    let addrs: Vec<_> = names.iter().map(|n| servers[*n].addr).collect();
    let nginx = TempNginx::start(&nginx_conf(&addrs));
    let servers = Arc::new(Mutex::new(servers));
    let transport = Arc::new(Interposer {
        inner: HttpTransport::new(),
        servers: servers.clone(),
        seen: Mutex::new(Vec::new()),
        kill_next: Mutex::new(false),
        killed: Mutex::new(Vec::new()),
    });
    let client = |retries: u32| {
        Client::with_transport(
            &nginx.base_url(),
            transport.clone(),
            ClientConfig::default()
                .with_threads(Threads::new(2))
                .with_timeout(Duration::from_secs(30))
                .with_retries(retries),
        )
    };
    // 40 registry entries among 100 contacts; entry i is labeled unless 3 divides it.
    let items: Vec<Vec<u8>> = (0..100u64)
        .map(|k| {
            if k % 5 < 2 {
                id(k * 7 % REGISTRY).into_bytes()
            } else {
                format!("+1303{k:07}").into_bytes()
            }
        })
        .collect();
    let expected: Vec<usize> = (0..items.len()).filter(|k| k % 5 < 2).collect();
    let check = |report: &psi_client::MatchReport| {
        let got: Vec<usize> = report.matches.iter().map(|m| m.index).collect();
        assert_eq!(got, expected, "{}", nginx.logs());
        for m in &report.matches {
            let i: u64 = std::str::from_utf8(&m.item).unwrap()[5..].parse().unwrap();
            assert_eq!(m.label, labeled(i).then(|| format!("user-{i}")));
        }
    };

    // Every protocol, twice, with no retry: a step routed to the wrong instance would fail
    // the run.
    for protocol in [Protocol::Dh, Protocol::Ot, Protocol::Cm20] {
        for _ in 0..2 {
            let report = client(0)
                .match_items(items.clone(), protocol, &mut |_| {}, &CancelToken::new())
                .unwrap_or_else(|e| panic!("{protocol:?} through nginx: {e}\n{}", nginx.logs()));
            assert_eq!(report.protocol, protocol);
            check(&report);
        }
    }
    // By hand: three sessions created through nginx in a row land on the three instances
    // (round robin), and each one's step, through nginx, reaches its instance.
    let t = common::raw_url(&nginx.base_url());
    let epoch = config_epoch(&servers);
    let bin = [("content-type", "application/octet-stream")];
    let ids: Vec<String> = (0..3)
        .map(|_| session_id(&session(&t, "dh-psi", 3, &[])))
        .collect();
    let used: BTreeSet<&str> = ids.iter().map(|id| name_of(id)).collect();
    assert_eq!(used, BTreeSet::from(names), "{}", nginx.logs());
    for id in &ids {
        let r = send(
            &t,
            Method::Post,
            &format!("/v1/sessions/{id}/dh/query"),
            &bin,
            &query(epoch, 3),
        );
        assert_eq!(r.status, 200, "{id}: {}", String::from_utf8_lossy(&r.body));
    }

    // A session created through nginx, its instance stopped, its step through nginx: the
    // instance's backups answer 421 wrong_instance, not nginx's 502.
    let id = session_id(&session(&t, "dh-psi", 3, &[]));
    let dead = name_of(&id).to_string();
    servers
        .lock()
        .unwrap()
        .remove(&dead)
        .unwrap()
        .shutdown()
        .unwrap();
    let r = send(
        &t,
        Method::Post,
        &format!("/v1/sessions/{id}/dh/query"),
        &bin,
        &query(epoch, 3),
    );
    assert_eq!(r.status, 421, "{}", nginx.logs());
    assert_eq!(error_code(&r), "wrong_instance");

    // A client run whose session's instance dies after the session was created: its step
    // gets wrong_instance, and the retry, from a new session, completes on the instance left.
    *transport.kill_next.lock().unwrap() = true;
    transport.seen.lock().unwrap().clear();
    let mut retried = Vec::new();
    let report = client(2)
        .match_items(
            items.clone(),
            Protocol::Dh,
            &mut |p: Progress| retried.extend(p.retry.map(|r| r.cause)),
            &CancelToken::new(),
        )
        .unwrap_or_else(|e| panic!("retry through nginx: {e}\n{}", nginx.logs()));
    check(&report);
    assert_eq!(
        retried,
        [RetryCause::Http {
            status: 421,
            code: ErrorCode::WrongInstance,
            retry_after: None
        }]
    );
    let killed = transport.killed.lock().unwrap().clone();
    let alive: HashSet<String> = servers.lock().unwrap().keys().cloned().collect();
    assert_eq!(alive.len(), 1);
    assert!(!killed.iter().any(|k| alive.contains(k) || *k == dead));
    let seen = transport.seen.lock().unwrap().clone();
    assert_eq!(seen.first(), killed.first(), "the first attempt's session");
    assert!(
        alive.contains(seen.last().unwrap()),
        "the retry's session: {seen:?}"
    );
}

fn config_epoch(servers: &Mutex<HashMap<String, RunningServer>>) -> u32 {
    let servers = servers.lock().unwrap();
    servers
        .values()
        .next()
        .unwrap()
        .state
        .registry()
        .stats()
        .epoch
}

/// The group relay behind nginx (docs/deploy/nginx.conf, ADR 0051 decision 8): a group
/// lives on the instance that created it, nginx sends every request of the group there
/// (the other instances never hold it), the run gives the plain intersection, and a
/// request for the group sent straight to another instance is `421 wrong_instance`.
#[test]
fn nginx_routes_a_group_to_the_instance_that_holds_it() {
    within(LIMIT, || {
        use psi_client::group::GroupOptions;
        let config = shared("routing-group");
        let names = ["psi1", "psi2", "psi3"];
        let servers: Vec<RunningServer> = names.iter().map(|n| instance(&config, n)).collect();
        let addrs: Vec<_> = servers.iter().map(|s| s.addr).collect();
        let nginx = TempNginx::start(&nginx_conf(&addrs));
        let client = || {
            Client::new(
                &nginx.base_url(),
                ClientConfig::default().with_timeout(Duration::from_secs(30)),
            )
        };
        let common: Vec<Vec<u8>> = (0..12u64).map(|i| id(i).into_bytes()).collect();
        let book = |p: u64| {
            let mut b = common.clone();
            b.extend((0..20u64).map(|i| format!("+1303{p}{i:06}").into_bytes()));
            psi_core::ItemSet::new(b)
        };
        let mut opts = GroupOptions::default();
        opts.deadline = Duration::from_secs(60);
        opts.poll = Duration::from_millis(500);
        let leader_client = client();
        let leader = leader_client.group_create(3).unwrap();
        let code = leader.code();
        let holder = name_of(code.split('.').next().unwrap()).to_string();
        let held = |s: &RunningServer| s.state.group_counts().groups;
        for (n, s) in names.iter().zip(&servers) {
            assert_eq!(held(s), usize::from(*n == holder), "{n} {}", nginx.logs());
        }
        // Straight to another instance: typed and retryable.
        let other = servers
            .iter()
            .zip(names)
            .find(|(_, n)| *n != holder)
            .unwrap()
            .0;
        let gid = code.split('.').next().unwrap();
        let r = send(
            &raw(other),
            Method::Post,
            &format!("/v1/groups/{gid}/join"),
            &[("content-type", "application/json")],
            format!(r#"{{"key":"{}"}}"#, "00".repeat(64)).as_bytes(),
        );
        assert_eq!((r.status, error_code(&r).as_str()), (421, "wrong_instance"));
        let reports = std::thread::scope(|s| {
            let members: Vec<_> = (1..3u64)
                .map(|p| {
                    let code = code.clone();
                    let opts = opts.clone();
                    let book = book(p);
                    let c = client();
                    s.spawn(move || c.group_join(&code).unwrap().run(book, &opts).unwrap())
                })
                .collect();
            let mut out = vec![leader.run(book(0), &opts).unwrap()];
            out.extend(members.into_iter().map(|h| h.join().unwrap()));
            out
        });
        let want: BTreeSet<Vec<u8>> = common.iter().cloned().collect();
        for r in &reports {
            let got: BTreeSet<Vec<u8>> = r.common.clone().unwrap().into_iter().collect();
            assert_eq!(got, want, "party {}", r.party);
        }
        for s in &servers {
            assert_eq!(s.state.group_counts(), Default::default());
        }
        drop(nginx);
        for s in servers {
            s.shutdown().unwrap();
        }
    });
}
