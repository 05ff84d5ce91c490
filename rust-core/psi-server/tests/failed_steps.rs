//! Failed steps cost the server little and cannot be repeated
//! (docs/adr/0036-failed-steps-end-sessions.md), over loopback HTTP against the real
//! server: a session ends at its third step refused with a 400 (`409 session_failed`, then
//! the answer of an ended session), an OT-PSI session's slot with it; a step whose
//! declared length is above what the session allows (a DH query of more elements than
//! the session's `n`, a label fetch of more bucket ids, an OT hello longer than a hello)
//! is refused before its body is read, with or without a `Content-Length`.

mod common;

use common::*;
use psi_client::{Method, Response};
use psi_core::ItemSet;
use psi_core::ot::{OtClient, OtConfig};
use psi_server::{Config, RunningServer};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const BIN: (&str, &str) = ("content-type", "application/octet-stream");

fn server(name: &str, tune: impl FnOnce(&mut Config)) -> RunningServer {
    proxied_server(name, 50, |i| i % 2 == 0, tune)
}

fn post(t: &Raw, ip: &str, path: &str, body: &[u8]) -> Response {
    send(t, Method::Post, path, &[BIN, ("x-forwarded-for", ip)], body)
}

fn status_code(r: &Response) -> (u16, String) {
    (r.status, error_code(r))
}

/// An OT-PSI hello for one item.
fn hello(seed: u64) -> Vec<u8> {
    OtClient::start(
        ItemSet::new([id(0)]),
        OtConfig::default(),
        &mut ChaCha20Rng::seed_from_u64(seed),
    )
    .unwrap()
    .1
}

#[test]
fn a_dh_session_ends_at_its_third_refused_step() {
    let server = server("failed-dh", |_| {});
    let t = raw(&server);
    let ip = "198.51.100.1";
    let sid = session_id(&session(&t, "dh-psi", 3, &[("x-forwarded-for", ip)]));
    let q = format!("/v1/sessions/{sid}/dh/query");
    // The last element is not a group element: the costly refusal (n - 1 decodings).
    let mut bad_last = query(1, 3);
    let len = bad_last.len();
    bad_last[len - 32..].fill(0xFF);
    assert_eq!(
        status_code(&post(&t, ip, &q, &bad_last)),
        (400, "invalid_message".into())
    );
    assert_eq!(
        status_code(&post(&t, ip, &q, &query(1, 2))),
        (400, "count_mismatch".into())
    );
    // Refusals that cost no decoding do not count: the session is still there.
    let r = send(
        &t,
        Method::Post,
        &q,
        &[("x-forwarded-for", ip)],
        &query(1, 3),
    );
    assert_eq!(status_code(&r), (415, "unsupported_media_type".into()));
    assert_eq!(server.state.live_sessions(), 1);
    // The third 400 ends it.
    let r = post(&t, ip, &q, &bad_last);
    assert_eq!(status_code(&r), (409, "session_failed".into()));
    let text = String::from_utf8_lossy(&r.body);
    assert!(text.contains("ended by the server"), "{text}");
    assert!(
        text.contains("invalid_message"),
        "the step's own reason: {text}"
    );
    assert_eq!(server.state.live_sessions(), 0);
    // Later requests, a correct query included, get the answer of an ended session.
    let r = post(&t, ip, &q, &query(1, 3));
    assert_eq!(status_code(&r), (409, "wrong_phase".into()));
    assert!(String::from_utf8_lossy(&r.body).contains("ended by the server"));
    // A session with two refused steps still completes.
    let sid = session_id(&session(&t, "dh-psi", 3, &[("x-forwarded-for", ip)]));
    let q = format!("/v1/sessions/{sid}/dh/query");
    for _ in 0..2 {
        assert_eq!(post(&t, ip, &q, &bad_last).status, 400);
    }
    assert_eq!(post(&t, ip, &q, &query(1, 3)).status, 200);
}

#[test]
fn an_ot_session_ends_at_its_third_bad_hello_and_frees_its_slot() {
    let server = server("failed-ot", |c| c.max_ot_sessions = 1);
    let t = raw(&server);
    let ip = "198.51.100.1";
    let sid = session_id(&session(&t, "ot-psi", 1, &[("x-forwarded-for", ip)]));
    let round = format!("/v1/sessions/{sid}/ot/round");
    // The last base-OT message is not a point: refused after the others' work.
    let mut bad = hello(1);
    let len = bad.len();
    bad[len - 64..].fill(0xFF);
    for _ in 0..2 {
        let r = post(&t, ip, &round, &bad);
        assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    }
    assert_eq!(server.state.ot_runs_in_progress(), 1);
    let r = post(&t, ip, &round, &bad);
    assert_eq!(status_code(&r), (409, "session_failed".into()));
    // Its OT slot is free at once (not at the hello deadline, a minute away here).
    assert_eq!(server.state.ot_runs_in_progress(), 0);
    assert_eq!(
        status_code(&post(&t, ip, &round, &hello(2))),
        (409, "wrong_phase".into())
    );
    let other = "198.51.100.2";
    let next = session_id(&session(&t, "ot-psi", 1, &[("x-forwarded-for", other)]));
    let r = post(
        &t,
        other,
        &format!("/v1/sessions/{next}/ot/round"),
        &hello(3),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}

/// Sends `head` (request line and headers, the blank line included) and `body_start`
/// over a new connection, never the rest of the body, and returns what the server
/// answers within 10 s (the server's own request timeout is 60 s).
fn answer_before_the_body(server: &RunningServer, head: &str, body_start: &[u8]) -> String {
    let addr = server.url().trim_start_matches("http://").to_string();
    let mut conn = TcpStream::connect(&addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    conn.write_all(head.as_bytes()).unwrap();
    conn.write_all(body_start).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline && !String::from_utf8_lossy(&got).contains('}') {
        match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

fn post_head(path: &str, length: Option<usize>) -> String {
    let length = match length {
        Some(n) => format!("content-length: {n}\r\n"),
        None => "transfer-encoding: chunked\r\n".to_string(),
    };
    format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/octet-stream\r\n{length}\r\n"
    )
}

fn assert_refused(answer: &str, code: &str) {
    assert!(
        answer.starts_with("HTTP/1.1 400") && answer.contains(code),
        "expected 400 {code} before the body was sent, got: {answer:?}"
    );
}

#[test]
fn steps_longer_than_the_session_allows_are_refused_before_their_body_is_read() {
    let server = server("failed-early", |c| {
        c.request_timeout = Duration::from_secs(60);
    });
    let t = raw(&server);
    let n = 2;
    let created = session(&t, "dh-psi", n as u32, &[]);
    let dh = session_id(&created);
    let v: serde_json::Value = serde_json::from_slice(&created.body).unwrap();
    let bits = v["label_bucket_bits"].as_u64().unwrap() as u8;
    let path = format!("/v1/sessions/{dh}/dh/query");
    // A query declaring 1,000 elements for a session of 2 (32 KB, well below the 8 MiB
    // body limit): the declared length alone is refused, with the count's code.
    let big = query(1, 1000);
    assert_refused(
        &answer_before_the_body(&server, &post_head(&path, Some(big.len())), &big[..49]),
        "count_mismatch",
    );
    // The same without a length (chunked): reading stops at the session's query size.
    let chunk = &big[..200];
    let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
    framed.extend_from_slice(chunk);
    framed.extend_from_slice(b"\r\n");
    assert_refused(
        &answer_before_the_body(&server, &post_head(&path, None), &framed),
        "count_mismatch",
    );
    // A label fetch naming more bucket ids than the session's fetch size, repeats or not.
    let k = psi_core::labels::fetch_buckets(n, bits);
    // (Another session: the first has had two refused steps already.)
    let other = session_id(&session(&t, "dh-psi", n as u32, &[]));
    let fetch = format!("/v1/sessions/{other}/labels/fetch");
    assert_refused(
        &answer_before_the_body(&server, &post_head(&fetch, Some(4 * (k + 1))), &[0; 8]),
        "too_many_items",
    );
    // An OT hello longer than a hello.
    let ot = session_id(&session(&t, "ot-psi", 1, &[]));
    let round = format!("/v1/sessions/{ot}/ot/round");
    let hello = hello(1);
    assert_refused(
        &answer_before_the_body(
            &server,
            &post_head(&round, Some(hello.len() + 4096)),
            &hello[..64],
        ),
        "invalid_message",
    );
    // The DH session has had two failed steps, the OT session one: both still work.
    let r = send(&t, Method::Post, &path, &[BIN], &query(1, n));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let r = send(&t, Method::Post, &round, &[BIN], &hello);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}

/// A session request refused for its item budget is refused before the session table is
/// touched (ADR 0036): at the total cap it evicts nobody's idle session.
#[test]
fn a_session_request_refused_for_its_budget_evicts_nobody() {
    let server = server("failed-budget", |c| {
        c.items_per_hour = 100;
        c.max_sessions = 2;
        // Idle sessions may be evicted after a quarter of this (2 s), and none ends as
        // idle during the test.
        c.session_idle_timeout = Duration::from_secs(8);
        c.tokens = vec!["a".into(), "b".into()];
    });
    let t = raw(&server);
    let a = [("authorization", "Bearer a")];
    let b = [("authorization", "Bearer b")];
    let first = session_id(&session(&t, "dh-psi", 1, &a));
    let second = session_id(&session(&t, "dh-psi", 1, &a));
    assert_eq!(server.state.live_sessions(), 2);
    // Both are now idle long enough to be evicted for a newcomer.
    std::thread::sleep(Duration::from_millis(2500));
    let r = session(&t, "dh-psi", 150, &b);
    assert_eq!(status_code(&r), (429, "rate_limited".into()));
    assert_eq!(
        server.state.live_sessions(),
        2,
        "a refused request evicted a session"
    );
    for sid in [first, second] {
        let r = send(
            &t,
            Method::Post,
            &format!("/v1/sessions/{sid}/dh/query"),
            &[BIN, a[0]],
            &query(1, 1),
        );
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    }
    // Once they are idle again, an admitted newcomer does evict one (the cap still works).
    std::thread::sleep(Duration::from_millis(2500));
    let r = session(&t, "dh-psi", 1, &b);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
}
