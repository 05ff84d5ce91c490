//! Unknown credentials against the real server on loopback (issue 35 items 3 and 4,
//! docs/adr/0046-remembered-credentials.md): a caller inventing bearer tokens is charged
//! for each one it presents (`Config::invalid_tokens_per_hour`), and is refused once its
//! address's budget is spent, while other callers and valid tokens are served; with
//! PostgreSQL a request without a credential costs no lookup while no token exists.
//!
//! Callers are told apart by `X-Forwarded-For` from the trusted loopback proxy. Every
//! request is one `DELETE /v1/sessions/{unknown}`: authenticated like every step, then
//! answered `404 unknown_session` without other work. Bounded: at most a few hundred
//! small requests per test.

mod common;

use common::pg::fresh;
use common::*;
use psi_client::Method;
use psi_server::storage::Database;
use psi_server::{AppState, Config, RunningServer};
use std::time::{Duration, Instant};

/// One authenticated request that does nothing: its status and error code.
fn poke(t: &Raw, from: &str, token: Option<&str>) -> (u16, String) {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut h = vec![("x-forwarded-for", from)];
    if let Some(b) = &bearer {
        h.push(("authorization", b.as_str()));
    }
    let r = send(t, Method::Delete, "/v1/sessions/nosuchsession", &h, b"");
    let code = error_code(&r);
    if r.status == 429 {
        assert!(r.header("retry-after").is_some(), "429 without Retry-After");
    }
    (r.status, code)
}

fn made_up(i: usize) -> String {
    format!("psi_{i:064x}")
}

fn proxied(name: &str, tune: impl FnOnce(&mut Config)) -> (Config, RunningServer) {
    let mut c = config(name);
    fill(&c, 20, |_| false);
    c.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap()];
    tune(&mut c);
    let s = start(c.clone());
    (c, s)
}

#[test]
fn an_address_inventing_tokens_is_refused_once_its_budget_is_spent_and_others_are_served() {
    let (config, server) = proxied("creds-on", |c| c.invalid_tokens_per_hour = 20);
    let mut store = psi_server::Store::open(config.db.sqlite_path().unwrap()).unwrap();
    let valid = store.add_token(Some("honest"), None).unwrap();
    let valid = valid.token.as_str();
    let t = raw(&server);
    // The valid token, seen once from elsewhere.
    assert_eq!(poke(&t, "198.51.100.1", Some(valid)).0, 404);
    let mut codes = std::collections::BTreeMap::<(u16, String), u32>::new();
    for i in 0..60 {
        *codes
            .entry(poke(&t, "203.0.113.7", Some(&made_up(i))))
            .or_default() += 1;
    }
    assert_eq!(
        codes.get(&(401, "invalid_token".into())),
        Some(&20),
        "{codes:?}"
    );
    assert_eq!(
        codes.get(&(429, "rate_limited".into())),
        Some(&40),
        "{codes:?}"
    );
    // A valid token from the same address is still served (it is not charged), and a
    // request without one still says what is missing.
    assert_eq!(poke(&t, "203.0.113.7", Some(valid)).0, 404);
    assert_eq!(poke(&t, "203.0.113.7", None), (401, "missing_token".into()));
    // Another address has a budget of its own.
    assert_eq!(
        poke(&t, "203.0.114.9", Some(&made_up(1000))),
        (401, "invalid_token".into())
    );
    server.shutdown().unwrap();
}

#[test]
fn without_authentication_made_up_tokens_are_served_as_callers_without_one() {
    let (_config, server) = proxied("creds-off", |c| c.invalid_tokens_per_hour = 5);
    let t = raw(&server);
    for i in 0..30 {
        assert_eq!(
            poke(&t, "203.0.113.7", Some(&made_up(i))),
            (404, "unknown_session".into()),
            "request {i}"
        );
    }
    server.shutdown().unwrap();
}

/// Runs `sql` on the test database of `settings`.
fn exec(settings: &psi_server::storage::PgSettings, sql: &str) {
    let mut c = settings.connect_blocking().unwrap();
    c.batch_execute(sql).unwrap();
}

#[test]
fn with_postgresql_a_request_without_a_credential_costs_no_lookup_while_no_token_exists() {
    let (settings, _dir) = fresh("creds-pg");
    common::pg::import(&settings, 0..20, |_| false);
    let mut c = config("creds-pg");
    c.db = Database::Postgres(settings.clone());
    c.watch_store = Some(Duration::from_millis(300));
    c.rotate_every = None;
    c.items_per_hour = 0;
    c.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap()];
    let server =
        RunningServer::start(AppState::open(c).unwrap(), ([127, 0, 0, 1], 0).into()).unwrap();
    let t = raw(&server);
    // The watcher has answered "no tokens" once the first tokenless request is served.
    assert_eq!(poke(&t, "203.0.113.1", None).0, 404);
    std::thread::sleep(Duration::from_millis(700));
    // The tokens table is out of reach: a lookup would fail (500). Requests without a
    // credential are answered from the watcher's answer.
    exec(&settings, "ALTER TABLE tokens RENAME TO tokens_away");
    let answers: Vec<u16> = (0..20)
        .map(|i| poke(&t, &format!("203.0.113.{}", 10 + i), None).0)
        .collect();
    exec(&settings, "ALTER TABLE tokens_away RENAME TO tokens");
    assert!(answers.iter().all(|&s| s == 404), "{answers:?}");
    // The first token turns authentication on within a few watch intervals.
    let mut accounts = Database::Postgres(settings.clone())
        .open_accounts()
        .unwrap();
    let token = accounts.add_token(Some("t"), None).unwrap();
    let t0 = Instant::now();
    loop {
        let (status, code) = poke(&t, "203.0.113.2", None);
        if status == 401 {
            assert_eq!(code, "missing_token");
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "auth never turned on"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(poke(&t, "203.0.113.2", Some(token.token.as_str())).0, 404);
    assert_eq!(
        poke(&t, "203.0.113.2", Some(&made_up(1))),
        (401, "invalid_token".into())
    );
    server.shutdown().unwrap();
}
