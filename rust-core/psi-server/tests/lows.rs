//! Issue 35 item 6, against the real server on loopback: `X-Forwarded-For` is split
//! without quoted strings, a malformed one is refused (400) and never charged to the
//! trusted proxy's own address; label buckets are charged to the download budget.
//! Callers' addresses come from `X-Forwarded-For`, with loopback as a trusted proxy.
//! Bounded: a few dozen small requests.

mod common;

use common::*;
use psi_client::Method;
use std::time::Duration;

const BIN: (&str, &str) = ("content-type", "application/octet-stream");

fn health(t: &Raw, xff: Option<&str>) -> (u16, String) {
    let h: Vec<(&'static str, &str)> = xff.map(|v| ("x-forwarded-for", v)).into_iter().collect();
    let r = send(t, Method::Get, "/v1/health", &h, b"");
    let code = if r.status == 200 {
        String::new()
    } else {
        error_code(&r)
    };
    (r.status, code)
}

#[test]
fn a_quote_in_x_forwarded_for_hides_no_client_and_a_malformed_one_is_refused_not_charged_to_the_proxy()
 {
    let server = proxied_server(
        "xff-quote",
        20,
        |_| false,
        |c| {
            c.health_per_hour = 3;
            c.items_per_hour = 100;
        },
    );
    let t = raw(&server);
    // The client wrote a quote; the proxy appended the client's address.
    let quoted = "\"x, 203.0.113.5";
    for _ in 0..3 {
        assert_eq!(health(&t, Some(quoted)).0, 200);
    }
    // Charged to 203.0.113.5, the client.
    assert_eq!(health(&t, Some(quoted)), (429, "rate_limited".into()));
    assert_eq!(health(&t, Some("203.0.113.6")).0, 200);
    // Malformed where the walk needs an address: refused, and not charged to the proxy.
    for _ in 0..5 {
        assert_eq!(
            health(&t, Some("203.0.113.5, garbage")),
            (400, "bad_request".into())
        );
    }
    // The balancer probing from the proxy's own address is served.
    assert_eq!(health(&t, None).0, 200);
    // The same header on an authenticated route: the client's own session.
    let r = session(&t, "dh-psi", 1, &[("x-forwarded-for", quoted)]);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    server.shutdown().unwrap();
}

/// A DH-PSI session of 3 items from `ip` run up to its label fetch: the fetch's status
/// and error code.
fn fetch_labels(t: &Raw, ip: &str) -> (u16, String) {
    let h = [("x-forwarded-for", ip)];
    let id = session_id(&session(t, "dh-psi", 3, &h));
    let q = format!("/v1/sessions/{id}/dh/query");
    let r = send(t, Method::Post, &q, &[BIN, h[0]], &query(1, 3));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let lf = format!("/v1/sessions/{id}/labels/fetch");
    let r = send(t, Method::Post, &lf, &[BIN, h[0]], &[0; 4]);
    if r.status == 200 {
        assert!(!r.body.is_empty());
        return (200, String::new());
    }
    (r.status, error_code(&r))
}

#[test]
fn label_buckets_are_charged_to_the_download_budget() {
    let server = proxied_server(
        "label-charge",
        200,
        |_| true,
        |c| {
            // Smaller than one fetch's answer: one fetch an hour per caller.
            c.encoded_set_bytes_per_hour = 64;
            c.session_idle_timeout = Duration::from_secs(60);
        },
    );
    let t = raw(&server);
    assert_eq!(fetch_labels(&t, "203.0.113.5").0, 200);
    let (status, code) = fetch_labels(&t, "203.0.113.5");
    assert_eq!((status, code.as_str()), (429, "rate_limited"));
    // Another caller has a budget of its own.
    assert_eq!(fetch_labels(&t, "198.51.100.7").0, 200);
    server.shutdown().unwrap();
}
