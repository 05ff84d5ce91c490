//! The bounded probe (`/v1/probe`, docs/protocol-choice.md "Bounded probe"): it sends and
//! accepts at most `PROBE_MAX_BYTES`, refuses more with a typed error, and is charged to
//! the caller's hourly probe budget.

mod common;

use common::*;
use psi_client::Method;

#[test]
fn the_probe_sends_and_accepts_bounded_bodies() {
    let mut config = config("probe");
    config.probe_bytes_per_hour = 1 << 20;
    fill(&config, 4, |_| false);
    let server = start(config);
    let t = raw(&server);
    let cap = psi_http::PROBE_MAX_BYTES as usize;
    let r = send(&t, Method::Get, "/v1/probe?bytes=1000", &[], b"");
    assert_eq!((r.status, r.body.len()), (200, 1000));
    let r = send(&t, Method::Get, &format!("/v1/probe?bytes={cap}"), &[], b"");
    assert_eq!((r.status, r.body.len()), (200, cap));
    // Above the cap, missing or not a number: 400, nothing sent.
    for q in [
        format!("?bytes={}", cap + 1),
        "".into(),
        "?bytes=x".into(),
        "?bytes=-1".into(),
    ] {
        let r = send(&t, Method::Get, &format!("/v1/probe{q}"), &[], b"");
        assert_eq!(
            (r.status, error_code(&r).as_str()),
            (400, "bad_request"),
            "{q}"
        );
    }
    let bin = [("content-type", "application/octet-stream")];
    let r = send(&t, Method::Post, "/v1/probe", &bin, &vec![7; 5000]);
    assert_eq!(r.status, 200);
    let got: psi_http::ProbeReceived = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(got.bytes, 5000);
    // Above the cap: 413, decided on the declared length. Only the head is sent: the server
    // answers before reading a body it refuses, so writing the body could meet a closed
    // socket (a broken pipe in the sender, not the server's answer).
    {
        use std::io::{Read, Write};
        let addr = server.url().trim_start_matches("http://").to_string();
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let head = format!(
            "POST /v1/probe HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            cap + 1
        );
        s.write_all(head.as_bytes()).unwrap();
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
        assert!(answer.contains("body_too_large"), "{answer}");
    }
    // The hourly budget (1 MiB here): a few full probes, then 429 with Retry-After.
    let mut limited = None;
    for _ in 0..8 {
        let r = send(&t, Method::Get, &format!("/v1/probe?bytes={cap}"), &[], b"");
        if r.status != 200 {
            limited = Some(r);
            break;
        }
    }
    let r = limited.expect("the probe budget runs out");
    assert_eq!((r.status, error_code(&r).as_str()), (429, "rate_limited"));
    assert!(r.header("retry-after").is_some());
    // A body without Content-Length (chunked) could not be charged before it is read: 400.
    {
        use std::io::{Read, Write};
        let addr = server.url().trim_start_matches("http://").to_string();
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        s.write_all(
            b"POST /v1/probe HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n\
              Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n4\r\nabcd\r\n0\r\n\r\n",
        )
        .unwrap();
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        assert!(answer.contains("bad_request"), "{answer}");
    }
    // The server keeps serving.
    assert_eq!(send(&t, Method::Get, "/v1/health", &[], b"").status, 200);
    server.shutdown().unwrap();
}

/// Every probe request is charged at least `PROBE_REQUEST_FLOOR`: a budget of 16 floors
/// lets 16 empty or tiny probes through, then 429 (charged 1 byte each, as before, it
/// would have let 16,384 through).
#[test]
fn each_probe_request_is_charged_at_least_the_floor() {
    let floor = psi_server::PROBE_REQUEST_FLOOR;
    let mut config = config("probe-floor");
    // Refills at 16 KiB an hour: 4.6 bytes a second, a floor's worth in 3.7 minutes.
    config.probe_bytes_per_hour = 16 * floor;
    fill(&config, 4, |_| false);
    let server = start(config);
    let t = raw(&server);
    let bin = [("content-type", "application/octet-stream")];
    for i in 0..16 {
        let r = if i % 2 == 0 {
            send(&t, Method::Get, "/v1/probe?bytes=0", &[], b"")
        } else {
            send(&t, Method::Post, "/v1/probe", &bin, &[0; 10])
        };
        assert_eq!(r.status, 200, "request {i} is within the budget");
    }
    for r in [
        send(&t, Method::Get, "/v1/probe?bytes=0", &[], b""),
        send(&t, Method::Post, "/v1/probe", &bin, b""),
    ] {
        assert_eq!((r.status, error_code(&r).as_str()), (429, "rate_limited"));
        let wait: u64 = r.header("retry-after").unwrap().parse().unwrap();
        assert!(
            wait > 60,
            "a floor's worth takes minutes to come back: {wait}"
        );
    }
    server.shutdown().unwrap();
}
