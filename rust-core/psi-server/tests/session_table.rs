//! The session table cannot be filled (docs/adr/0034-session-table-limits.md), over
//! loopback HTTP against the real server: sessions are capped per address block beside
//! the per-caller cap; a session with no successful step ends after the idle period in
//! every phase, and refused requests do not keep it alive; an OT-PSI session must get its
//! hello answered within the hello deadline; at the total cap the oldest idle session of
//! the biggest block makes room; an OT slot shortage never refuses DH-PSI.
//!
//! The callers' addresses come from `X-Forwarded-For`, with loopback as a trusted proxy.

mod common;

use common::*;
use psi_client::{Method, Response};
use psi_core::ItemSet;
use psi_core::ot::{OtClient, OtConfig};
use psi_server::{Config, RunningServer};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use std::time::{Duration, Instant};

const BIN: (&str, &str) = ("content-type", "application/octet-stream");

fn server(name: &str, tune: impl FnOnce(&mut Config)) -> RunningServer {
    proxied_server(name, 50, |_| false, tune)
}

fn from(ip: &str) -> [(&'static str, &str); 1] {
    [("x-forwarded-for", ip)]
}

/// Status and error code ("" for a 201) of a new session of `protocol` from `ip`.
fn create(t: &Raw, protocol: &str, ip: &str) -> (u16, String) {
    let r = session(t, protocol, 1, &from(ip));
    let code = if r.status == 201 {
        String::new()
    } else {
        error_code(&r)
    };
    (r.status, code)
}

fn post(t: &Raw, ip: &str, path: &str, content_type: &'static str, body: &[u8]) -> Response {
    send(
        t,
        Method::Post,
        path,
        &[("content-type", content_type), ("x-forwarded-for", ip)],
        body,
    )
}

fn dh_query(t: &Raw, ip: &str, sid: &str) -> Response {
    let path = format!("/v1/sessions/{sid}/dh/query");
    post(t, ip, &path, BIN.1, &query(1, 1))
}

fn ot_round(t: &Raw, ip: &str, sid: &str, body: &[u8]) -> Response {
    post(t, ip, &format!("/v1/sessions/{sid}/ot/round"), BIN.1, body)
}

fn hello(seed: u64) -> Vec<u8> {
    let items = ItemSet::new([id(0)]);
    OtClient::start(
        items,
        OtConfig::default(),
        &mut ChaCha20Rng::seed_from_u64(seed),
    )
    .unwrap()
    .1
}

/// Asserts `r` is the refusal `status`, or (once the server ended the session) the
/// answer to a request of an ended session.
fn refused(r: &Response, status: u16) {
    let body = String::from_utf8_lossy(&r.body);
    assert!(
        r.status == status || (r.status == 409 && body.contains("ended by the server")),
        "{} {body}",
        r.status
    );
}

/// Requests the server refuses without touching the session: 415 (no binary content
/// type), 409 (labels before the protocol run). (A 400 is a failed step, and the third
/// ends the session: tests/failed_steps.rs. [`two_bad_requests`] sends the two a session
/// may have.)
fn refused_requests(t: &Raw, ip: &str, sid: &str) {
    let round = format!("/v1/sessions/{sid}/ot/round");
    refused(&post(t, ip, &round, "text/plain", b"x"), 415);
    let fetch = format!("/v1/sessions/{sid}/labels/fetch");
    refused(&post(t, ip, &fetch, BIN.1, &[0; 4]), 409);
}

/// Two label queries that do not decode (400): refused, and as many failed steps as a
/// session may have without being ended for them.
fn two_bad_requests(t: &Raw, ip: &str, sid: &str) {
    let lq = format!("/v1/sessions/{sid}/labels/query");
    for _ in 0..2 {
        refused(&post(t, ip, &lq, BIN.1, b"garbage"), 400);
    }
}

/// Polls `done` every 50 ms for at most `within`.
fn eventually(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn assert_ended(r: &Response) {
    assert_eq!(r.status, 409, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(error_code(r), "wrong_phase");
    assert!(String::from_utf8_lossy(&r.body).contains("ended by the server"));
}

#[test]
fn many_addresses_of_one_block_cannot_lock_out_another_block() {
    // The reported attack, scaled down: many addresses of one network, each at its own
    // cap, used to fill the table (then every caller got 503, both protocols).
    let server = server("table-block", |c| {
        c.max_sessions = 12;
        c.max_sessions_per_client = 2;
        c.max_sessions_per_block = 4;
    });
    let t = raw(&server);
    let mut admitted = 0;
    for host in 1..=20 {
        let ip = format!("198.51.100.{host}");
        for _ in 0..2 {
            match create(&t, "dh-psi", &ip) {
                (201, _) => admitted += 1,
                (503, code) => assert_eq!(code, "too_many_sessions"),
                other => panic!("{other:?}"),
            }
        }
    }
    assert_eq!(admitted, 4, "one /24 holds at most its block cap");
    let r = session(&t, "dh-psi", 1, &from("198.51.100.99"));
    assert_eq!(r.status, 503);
    assert!(String::from_utf8_lossy(&r.body).contains("network"));
    // Likewise many /56s of one IPv6 /48 (each its own caller by the default /56).
    for net in 1..=10 {
        let ip = format!("2001:db8:7:{net:x}00::1");
        create(&t, "dh-psi", &ip);
    }
    assert_eq!(server.state.live_sessions(), 8);
    // Callers of other blocks still get sessions, both protocols.
    assert_eq!(create(&t, "dh-psi", "203.0.113.7").0, 201);
    assert_eq!(create(&t, "ot-psi", "203.0.113.7").0, 201);
    assert_eq!(create(&t, "dh-psi", "2001:db8:8::1").0, 201);
}

#[test]
fn a_session_without_a_successful_step_ends_after_the_idle_period() {
    let server = server("table-idle", |c| {
        c.session_idle_timeout = Duration::from_millis(300);
    });
    let t = raw(&server);
    let ip = "198.51.100.1";
    // A DH session that never sends its query, but keeps sending refused requests: they
    // do not count as activity.
    let silent = session_id(&session(&t, "dh-psi", 1, &from(ip)));
    two_bad_requests(&t, ip, &silent);
    let ended = eventually(Duration::from_secs(5), || {
        refused_requests(&t, ip, &silent);
        server.state.live_sessions() == 0
    });
    assert!(
        ended,
        "a DH session without a step lived past the idle period"
    );
    assert_ended(&dh_query(&t, ip, &silent));
    // A session that made its step and then waits (for a label fetch that never comes)
    // ends too: every phase.
    let stalled = session_id(&session(&t, "dh-psi", 1, &from(ip)));
    assert_eq!(dh_query(&t, ip, &stalled).status, 200);
    assert_eq!(server.state.live_sessions(), 1);
    assert!(eventually(Duration::from_secs(5), || server
        .state
        .live_sessions()
        == 0));
    // A session that keeps stepping within the period is not ended: a whole run with a
    // pause shorter than the idle period between its steps succeeds.
    let sid = session_id(&session(&t, "dh-psi", 1, &from(ip)));
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(dh_query(&t, ip, &sid).status, 200);
}

#[test]
fn at_the_total_cap_the_oldest_idle_session_of_the_biggest_block_is_evicted() {
    // Idle 2 s: a session quiet for half a second (a quarter of it) may be evicted.
    let server = server("table-evict", |c| {
        c.max_sessions = 6;
        c.max_sessions_per_client = 2;
        c.max_sessions_per_block = 8;
        c.session_idle_timeout = Duration::from_secs(2);
    });
    let t = raw(&server);
    // Block B (one caller, 2 sessions) first: the oldest sessions overall.
    let b: Vec<String> = (0..2)
        .map(|_| session_id(&session(&t, "dh-psi", 1, &from("192.0.2.1"))))
        .collect();
    // Block A: 4 sessions from 2 addresses; the table is full.
    let a: Vec<(String, &str)> = ["198.51.100.1", "198.51.100.1", "198.51.100.2"]
        .into_iter()
        .chain(["198.51.100.2"])
        .map(|ip| (session_id(&session(&t, "dh-psi", 1, &from(ip))), ip))
        .collect();
    assert_eq!(server.state.live_sessions(), 6);
    // A newcomer right away: every session stepped (was created) within the grace
    // period, so none is evicted.
    assert_eq!(
        create(&t, "dh-psi", "203.0.113.9"),
        (503, "too_many_sessions".into())
    );
    std::thread::sleep(Duration::from_millis(700));
    // Now the newcomer gets its session: the oldest of the biggest block (A) made room,
    // not block B's older ones.
    assert_eq!(create(&t, "dh-psi", "203.0.113.9").0, 201);
    assert_eq!(server.state.live_sessions(), 6);
    assert_ended(&dh_query(&t, a[0].1, &a[0].0));
    assert_eq!(dh_query(&t, "192.0.2.1", &b[0]).status, 200);
    assert_eq!(dh_query(&t, a[1].1, &a[1].0).status, 200);
    // Block A (3 live, 1 of them just stepped) is still the biggest: its oldest quiet
    // session goes next.
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(create(&t, "dh-psi", "203.0.113.10").0, 201);
    assert_ended(&dh_query(&t, a[2].1, &a[2].0));
    assert_eq!(dh_query(&t, a[3].1, &a[3].0).status, 200);
}

#[test]
fn refused_requests_do_not_keep_an_ot_session_alive() {
    let server = server("table-ot-refused", |c| {
        c.max_ot_sessions = 1;
        c.ot_idle_timeout = Duration::from_millis(500);
    });
    let t = raw(&server);
    let ip = "198.51.100.1";
    let sid = session_id(&session(&t, "ot-psi", 1, &from(ip)));
    assert_eq!(ot_round(&t, ip, &sid, &hello(1)).status, 200);
    assert_eq!(server.state.ot_runs_in_progress(), 1);
    // Two 400s, then 415 and 409 every few ms, well within the idle period each time: the
    // run still ends, because none of them is a step.
    two_bad_requests(&t, ip, &sid);
    let ended = eventually(Duration::from_secs(5), || {
        refused_requests(&t, ip, &sid);
        let dh = format!("/v1/sessions/{sid}/dh/query");
        refused(&post(&t, ip, &dh, BIN.1, &query(1, 1)), 409);
        server.state.ot_runs_in_progress() == 0
    });
    assert!(ended, "refused requests kept an OT run and its slot alive");
    assert_ended(&ot_round(&t, ip, &sid, &hello(2)));
    assert_eq!(create(&t, "ot-psi", "198.51.100.2").0, 201);
}

#[test]
fn an_ot_session_without_a_hello_within_the_deadline_ends_and_frees_its_slot() {
    let server = server("table-ot-hello", |c| {
        c.max_ot_sessions = 1;
        c.ot_hello_timeout = Duration::from_millis(400);
    });
    let t = raw(&server);
    let ip = "198.51.100.1";
    let sid = session_id(&session(&t, "ot-psi", 1, &from(ip)));
    // The only slot is taken; the OT refusal says it is OT capacity (DH may be tried).
    let r = session(&t, "ot-psi", 1, &from("198.51.100.2"));
    assert_eq!((r.status, error_code(&r).as_str()), (503, "ot_capacity"));
    assert!(String::from_utf8_lossy(&r.body).contains("OT-PSI capacity"));
    // Forged hellos (400, two: a third would end the session as failed), refused all the
    // same, and other refused requests: no hello is answered, so the session ends at the
    // deadline and its slot is free.
    let mut forged = hello(1);
    forged[46..50].copy_from_slice(&80u32.to_be_bytes());
    for _ in 0..2 {
        refused(&ot_round(&t, ip, &sid, &forged), 400);
    }
    let ended = eventually(Duration::from_secs(5), || {
        refused_requests(&t, ip, &sid);
        server.state.ot_runs_in_progress() == 0
    });
    assert!(ended, "an OT session without a hello kept its slot");
    assert_eq!(server.state.live_sessions(), 0);
    assert_ended(&ot_round(&t, ip, &sid, &hello(1)));
    // The slot is free: a new OT session whose hello comes in time runs on.
    let next = session_id(&session(&t, "ot-psi", 1, &from("198.51.100.2")));
    assert_eq!(ot_round(&t, "198.51.100.2", &next, &hello(3)).status, 200);
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(server.state.ot_runs_in_progress(), 1);
}

#[test]
fn dh_sessions_are_created_while_every_ot_slot_is_taken() {
    let server = server("table-ot-full", |c| {
        c.max_ot_sessions = 2;
        c.max_ot_sessions_per_client = 1;
        c.max_sessions_per_client = 3;
    });
    let t = raw(&server);
    assert_eq!(create(&t, "ot-psi", "198.51.100.1").0, 201);
    assert_eq!(create(&t, "ot-psi", "198.51.100.2").0, 201);
    assert_eq!(server.state.ot_runs_in_progress(), 2);
    for ip in ["198.51.100.1", "198.51.100.2", "198.51.100.3"] {
        // OT capacity: 503 ot_capacity, "OT-PSI capacity: ...".
        let r = session(&t, "ot-psi", 1, &from(ip));
        assert_eq!((r.status, error_code(&r).as_str()), (503, "ot_capacity"));
        assert!(String::from_utf8_lossy(&r.body).contains("OT-PSI capacity"));
        // DH-PSI is admitted all the same, by the callers holding the slots too.
        for _ in 0..2 {
            assert_eq!(create(&t, "dh-psi", ip).0, 201, "{ip}");
        }
    }
    // (The hourly OT budget is refused otherwise: 429 rate_limited, ot_admission.rs.)
}
