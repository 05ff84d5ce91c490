//! Every bad request gets its documented status and JSON error code, and the server
//! keeps serving (a full match works afterwards).

mod common;

use common::*;
use psi_client::{CancelToken, Client, ClientConfig, ErrorCode, Method, Protocol};
use std::time::Duration;

const BIN: (&str, &str) = ("content-type", "application/octet-stream");

#[test]
fn bad_requests_get_documented_errors_and_the_server_keeps_serving() {
    let mut config = config("bad");
    config.max_body_bytes = 64 * 1024;
    config.max_client_items = 1000;
    config.session_ttl = Duration::from_secs(2);
    fill(&config, 500, |i| i % 2 == 0);
    let server = start(config);
    let t = raw(&server);
    let expect = |r: psi_client::Response, status: u16, code: &str| {
        assert_eq!(r.status, status, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(error_code(&r), code);
        assert_eq!(r.header("content-type"), Some("application/json"));
    };

    // Session creation.
    expect(session(&t, "rsa-psi", 10, &[]), 400, "unsupported_protocol");
    expect(session(&t, "dh-psi", 1001, &[]), 400, "too_many_items");
    expect(session(&t, "dh-psi", 0, &[]), 400, "bad_request");
    expect(
        send(
            &t,
            Method::Post,
            "/v1/sessions",
            &[("content-type", "application/json")],
            b"{nope",
        ),
        400,
        "bad_request",
    );
    expect(
        send(
            &t,
            Method::Post,
            "/v1/sessions",
            &[("content-type", "text/plain")],
            b"{}",
        ),
        415,
        "unsupported_media_type",
    );
    expect(
        send(&t, Method::Get, "/v1/nothing", &[], &[]),
        404,
        "not_found",
    );
    expect(
        send(&t, Method::Delete, "/v1/health", &[], &[]),
        405,
        "method_not_allowed",
    );

    // Protocol rounds. A session ends at its third step refused with a 400 (ADR 0036;
    // tests/failed_steps.rs), so the 400s below are spread over sessions, two at most each.
    let dh = || session_id(&session(&t, "dh-psi", 3, &[]));
    let id = dh();
    let q = format!("/v1/sessions/{id}/dh/query");
    expect(
        send(&t, Method::Post, &q, &[BIN], b"garbage"),
        400,
        "invalid_message",
    );
    expect(
        send(
            &t,
            Method::Post,
            &q,
            &[("content-type", "application/json")],
            &query(1, 3),
        ),
        415,
        "unsupported_media_type",
    );
    expect(
        send(&t, Method::Post, &q, &[BIN], &query(1, 2)),
        400,
        "count_mismatch",
    );
    expect(
        send(&t, Method::Post, &q, &[BIN], &query(9, 3)),
        409,
        "epoch_mismatch",
    );
    // A third 400 (a query longer than the session's) ends the session.
    expect(
        send(&t, Method::Post, &q, &[BIN], &query(1, 4)),
        409,
        "session_failed",
    );
    expect(
        send(&t, Method::Post, &q, &[BIN], &query(1, 3)),
        409,
        "wrong_phase",
    );
    let q = format!("/v1/sessions/{}/dh/query", dh());
    expect(
        send(&t, Method::Post, &q, &[BIN], &vec![0u8; 65 * 1024]),
        413,
        "body_too_large",
    );
    let mut bad_point = query(1, 3);
    bad_point[17..49].fill(0xFF);
    expect(
        send(&t, Method::Post, &q, &[BIN], &bad_point),
        400,
        "invalid_message",
    );
    expect(
        send(&t, Method::Post, &q, &[BIN], &query(1, 4)),
        400,
        "count_mismatch",
    );
    let id = dh();
    let q = format!("/v1/sessions/{id}/dh/query");
    expect(
        send(
            &t,
            Method::Post,
            &format!("/v1/sessions/{id}/ot/round"),
            &[BIN],
            b"x",
        ),
        409,
        "wrong_phase",
    );
    expect(
        send(
            &t,
            Method::Post,
            &format!("/v1/sessions/{id}/labels/fetch"),
            &[BIN],
            &[0; 4],
        ),
        409,
        "wrong_phase",
    );
    expect(
        send(
            &t,
            Method::Post,
            &format!("/v1/sessions/{id}/labels/query"),
            &[BIN],
            &query(1, 1),
        ),
        409,
        "wrong_phase",
    );
    // After the errors (none a 400) the query still works, once.
    let r = send(&t, Method::Post, &q, &[BIN], &query(1, 3));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/octet-stream"));
    assert_eq!(r.body.len(), 17 + 3 * 32);
    expect(
        send(&t, Method::Post, &q, &[BIN], &query(1, 3)),
        409,
        "wrong_phase",
    );
    // Labels: more elements than the session declared; a bad fetch body.
    let lq = format!("/v1/sessions/{id}/labels/query");
    expect(
        send(&t, Method::Post, &lq, &[BIN], &query(1, 4)),
        400,
        "too_many_items",
    );
    assert_eq!(
        send(&t, Method::Post, &lq, &[BIN], &query(1, 2)).status,
        200
    );
    let lf = format!("/v1/sessions/{id}/labels/fetch");
    expect(
        send(&t, Method::Post, &lf, &[BIN], &[1, 2, 3]),
        400,
        "invalid_message",
    );
    assert_eq!(send(&t, Method::Post, &lf, &[BIN], &[0; 4]).status, 200);
    expect(
        send(&t, Method::Post, &lf, &[BIN], &[0; 4]),
        409,
        "wrong_phase",
    );
    let id = dh();
    let q = format!("/v1/sessions/{id}/dh/query");
    assert_eq!(send(&t, Method::Post, &q, &[BIN], &query(1, 3)).status, 200);
    expect(
        send(
            &t,
            Method::Post,
            &format!("/v1/sessions/{id}/labels/fetch"),
            &[BIN],
            &[0xFF; 4],
        ),
        400,
        "invalid_message",
    );

    // OT session fed garbage and a DH message.
    let ot = session_id(&session(&t, "ot-psi", 5, &[]));
    let r = format!("/v1/sessions/{ot}/ot/round");
    expect(
        send(
            &t,
            Method::Post,
            &r,
            &[BIN],
            b"PS\x01\x02\x09\x00\x00\x00\x00",
        ),
        400,
        "invalid_message",
    );
    expect(
        send(&t, Method::Post, &r, &[BIN], &query(1, 5)),
        400,
        "invalid_message",
    );
    expect(
        send(
            &t,
            Method::Post,
            &format!("/v1/sessions/{ot}/dh/query"),
            &[BIN],
            &query(1, 5),
        ),
        409,
        "wrong_phase",
    );

    // Unknown and expired sessions.
    expect(
        send(
            &t,
            Method::Post,
            "/v1/sessions/0123456789abcdef0123456789abcdef/dh/query",
            &[BIN],
            &query(1, 3),
        ),
        404,
        "unknown_session",
    );
    let late = session_id(&session(&t, "dh-psi", 3, &[]));
    std::thread::sleep(Duration::from_millis(2200));
    expect(
        send(
            &t,
            Method::Post,
            &format!("/v1/sessions/{late}/dh/query"),
            &[BIN],
            &query(1, 3),
        ),
        410,
        "session_expired",
    );

    // Still serving.
    assert_eq!(send(&t, Method::Get, "/v1/health", &[], &[]).status, 200);
    let client = Client::new(&server.url(), ClientConfig::default());
    let report = client
        .match_items(
            vec![
                common::id(4).into_bytes(),
                common::id(5).into_bytes(),
                b"+13030000000".to_vec(),
            ],
            Protocol::Dh,
            &mut |_| {},
            &CancelToken::new(),
        )
        .unwrap();
    let labels: Vec<Option<&str>> = report.matches.iter().map(|m| m.label.as_deref()).collect();
    assert_eq!(labels, vec![Some("user-4"), None]);
}

#[test]
fn rate_limit_auth_and_session_cap() {
    let mut config = config("limits");
    config.items_per_hour = 500;
    config.max_sessions = 3;
    // Long: no session is idle long enough to be evicted at the cap while the client
    // below retries (ADR 0034), so the cap's typed error reaches it.
    config.session_idle_timeout = std::time::Duration::from_secs(600);
    config.tokens = vec!["s3cret".into(), "other".into()];
    fill(&config, 100, |_| true);
    let server = start(config);
    let t = raw(&server);
    let ok = [("authorization", "Bearer s3cret")];
    let expect = |r: psi_client::Response, status: u16, code: &str| {
        assert_eq!(r.status, status, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(error_code(&r), code);
    };
    // Authentication; health needs none.
    assert_eq!(send(&t, Method::Get, "/v1/health", &[], &[]).status, 200);
    expect(session(&t, "dh-psi", 10, &[]), 401, "missing_token");
    expect(
        session(&t, "dh-psi", 10, &[("authorization", "Bearer wrong")]),
        401,
        "invalid_token",
    );
    expect(
        session(&t, "dh-psi", 10, &[("authorization", "Basic s3cret")]),
        401,
        "invalid_token",
    );
    expect(
        send(&t, Method::Get, "/v1/dh/encoded-set", &[], &[]),
        401,
        "missing_token",
    );
    assert_eq!(
        send(&t, Method::Get, "/v1/dh/encoded-set", &ok, &[]).status,
        200
    );

    // Items per hour, per token.
    session_id(&session(&t, "dh-psi", 400, &ok));
    let r = session(&t, "dh-psi", 200, &ok);
    expect(r.clone(), 429, "rate_limited");
    let wait: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!(wait > 0 && wait <= 3600, "{wait}");
    // Another token has its own budget.
    session_id(&session(
        &t,
        "dh-psi",
        200,
        &[("authorization", "Bearer other")],
    ));
    // Session cap: 2 live; one more fits, then 503.
    session_id(&session(
        &t,
        "dh-psi",
        10,
        &[("authorization", "Bearer other")],
    ));
    let r = session(&t, "dh-psi", 10, &[("authorization", "Bearer other")]);
    expect(r.clone(), 503, "too_many_sessions");
    assert!(r.header("retry-after").is_some());
    // The typed client error carries the code.
    let client = Client::new(&server.url(), ClientConfig::default().with_token("s3cret"));
    let e = client
        .match_items(
            vec![id(1).into_bytes()],
            Protocol::Dh,
            &mut |_| {},
            &CancelToken::new(),
        )
        .unwrap_err();
    match e {
        psi_client::ClientError::Http { status, code, .. } => {
            assert!(status == 503 || status == 429, "{status}");
            assert!(matches!(
                code,
                ErrorCode::TooManySessions | ErrorCode::RateLimited
            ));
        }
        other => panic!("{other}"),
    }
    assert_eq!(send(&t, Method::Get, "/v1/health", &[], &[]).status, 200);
}

#[test]
fn per_caller_and_ot_session_caps_and_no_echo() {
    let mut config = config("caps");
    config.items_per_hour = 0;
    config.max_sessions_per_client = 2;
    config.max_ot_sessions = 1;
    // An empty configured token must not open the door to malformed credentials.
    config.tokens = vec!["".into(), "a".into(), "b".into()];
    fill(&config, 50, |_| false);
    let server = start(config);
    let t = raw(&server);
    let expect = |r: psi_client::Response, status: u16, code: &str| {
        assert_eq!(r.status, status, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(error_code(&r), code);
    };
    expect(
        session(&t, "dh-psi", 1, &[("authorization", "x")]),
        401,
        "invalid_token",
    );
    expect(
        session(&t, "dh-psi", 1, &[("authorization", "Bearer ")]),
        401,
        "invalid_token",
    );
    let a = [("authorization", "Bearer a")];
    let b = [("authorization", "Bearer b")];
    // One caller cannot take more than its share of the slots...
    session_id(&session(&t, "dh-psi", 1, &a));
    session_id(&session(&t, "dh-psi", 1, &a));
    expect(session(&t, "dh-psi", 1, &a), 503, "too_many_sessions");
    // ...while another caller still gets one.
    session_id(&session(&t, "ot-psi", 1, &b));
    // OT sessions hold registry-sized state: their own, smaller cap.
    expect(session(&t, "ot-psi", 1, &b), 503, "ot_capacity");
    // Error bodies never quote the request's values.
    let r = send(
        &t,
        Method::Post,
        "/v1/sessions",
        &[
            ("content-type", "application/json"),
            ("authorization", "Bearer b"),
        ],
        br#"{"protocol":"dh-psi","client_items":"+14155550123"}"#,
    );
    expect(r.clone(), 400, "bad_request");
    assert!(!String::from_utf8_lossy(&r.body).contains("4155550123"));
    assert_eq!(send(&t, Method::Get, "/v1/health", &[], &[]).status, 200);
}

#[test]
fn a_failed_label_step_keeps_the_matches() {
    let mut config = config("label-budget");
    // The OT session (10 items, charged its table size m(10) = 76 bins) fits the hourly
    // budget; the label OPRF query over the 5 matches does not, so the label step fails
    // after matching succeeded. (DH-PSI runs need no label query: their labels come from
    // the run's own outputs; nor do OT-PSI runs with label lanes, so the registry's labels
    // here are too long for lanes: over 15 bytes.)
    config.items_per_hour = u64::from(psi_core::ot::messages::max_bins_for(10)) + 2;
    let mut store = psi_server::Store::open(config.db.sqlite_path().unwrap()).unwrap();
    let rows: Vec<(String, String)> = (0..100)
        .map(|i| (id(i), format!("a label of user {i:06}")))
        .collect();
    store
        .add_entries(rows.iter().map(|(a, b)| (a.as_str(), Some(b.as_str()))))
        .unwrap();
    drop(store);
    let server = start(config);
    let client = Client::new(&server.url(), ClientConfig::default());
    let items: Vec<Vec<u8>> = (0..5)
        .map(id)
        .chain((1000..1005).map(|i| format!("nobody{i}@example.com")))
        .map(String::into_bytes)
        .collect();
    let report = client
        .match_items(items, Protocol::Ot, &mut |_| {}, &CancelToken::new())
        .unwrap();
    assert_eq!(report.matches.len(), 5);
    assert!(report.matches.iter().all(|m| m.label.is_none()));
    let e = report.label_error.expect("label error reported");
    assert!(e.contains("rate_limited") || e.contains("429"), "{e}");
    assert!(!e.contains("+1202"), "{e}");
}

#[test]
fn stalled_uploads_time_out() {
    use std::io::{Read, Write};
    let mut config = config("stall");
    config.request_timeout = Duration::from_millis(800);
    fill(&config, 10, |_| false);
    let server = start(config);
    let addr = server.url().trim_start_matches("http://").to_string();
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // Announce 1,000 bytes, send 10, then stall.
    conn.write_all(
        b"POST /v1/sessions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"protoco",
    )
    .unwrap();
    let t = std::time::Instant::now();
    let mut buf = vec![0u8; 4096];
    let n = conn.read(&mut buf).unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("request_timeout"), "{text}");
    assert!(t.elapsed() < Duration::from_secs(5));
    // Still serving.
    assert_eq!(
        send(&raw(&server), Method::Get, "/v1/health", &[], &[]).status,
        200
    );
}

/// A label query is capped at the session's label slots (`n`) and a label fetch at its
/// fetch size (64 buckets for `n = 20`): a client cannot buy more label lookups or name
/// more buckets than the fixed shape the reference client always sends
/// (docs/protocol/labels.md §1, §4, §5.1).
#[test]
fn label_query_and_fetch_are_capped_at_the_sessions_label_slots() {
    let mut config = config("label-slots");
    // 1,024 labeled entries, one per bucket on average: 2^10 buckets, more than a fetch.
    config.label_bucket_size = 1;
    fill(&config, 1024, |_| true);
    let server = start(config);
    let t = raw(&server);
    let n = 20;
    let slots = psi_core::labels::label_slots(n);
    assert_eq!(slots, n);
    let buckets = psi_core::labels::fetch_buckets(n, 10);
    assert_eq!(buckets, 64);
    let created = session(&t, "dh-psi", n as u32, &[]);
    let id = session_id(&created);
    let v: serde_json::Value = serde_json::from_slice(&created.body).unwrap();
    assert_eq!(v["label_bucket_bits"], 10);
    let ok = |r: psi_client::Response| {
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        r
    };
    let too_many = |r: psi_client::Response| {
        assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(error_code(&r), "too_many_items");
    };
    ok(send(
        &t,
        Method::Post,
        &format!("/v1/sessions/{id}/dh/query"),
        &[BIN],
        &query(1, n),
    ));
    let lq = format!("/v1/sessions/{id}/labels/query");
    too_many(send(&t, Method::Post, &lq, &[BIN], &query(1, slots + 1)));
    let r = ok(send(&t, Method::Post, &lq, &[BIN], &query(1, slots)));
    assert_eq!(r.body.len(), 17 + 32 * slots);
    let lf = format!("/v1/sessions/{id}/labels/fetch");
    let ids = |k: u32| -> Vec<u8> { (0..k).flat_map(|b| b.to_be_bytes()).collect() };
    too_many(send(
        &t,
        Method::Post,
        &lf,
        &[BIN],
        &ids(buckets as u32 + 1),
    ));
    // Repeats count: 64 distinct ids in 65 is over the cap (the length is checked before
    // the ids are read; docs/adr/0036-failed-steps-end-sessions.md). Another session: this
    // one has had two refused steps, and a third would end it.
    let id = session_id(&session(&t, "dh-psi", n as u32, &[]));
    ok(send(
        &t,
        Method::Post,
        &format!("/v1/sessions/{id}/dh/query"),
        &[BIN],
        &query(1, n),
    ));
    let lf = format!("/v1/sessions/{id}/labels/fetch");
    let mut repeat = ids(buckets as u32);
    repeat.extend_from_slice(&0u32.to_be_bytes());
    too_many(send(&t, Method::Post, &lf, &[BIN], &repeat));
    // Within the cap a repeat is answered once.
    let mut repeat = ids(buckets as u32 - 1);
    repeat.extend_from_slice(&0u32.to_be_bytes());
    let r = ok(send(&t, Method::Post, &lf, &[BIN], &repeat));
    let sections = psi_core::labels::messages::split_response(&r.body).unwrap();
    assert_eq!(sections.len(), buckets - 1);
}
