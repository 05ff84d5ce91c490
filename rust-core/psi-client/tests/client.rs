//! The client driver: typed errors for each failure, the transport seam (owned requests
//! carrying their limits), the registry cache, cancellation, contact matching, and the
//! exact requests of a run. The protocols themselves are tested in psi-core and end to
//! end in psi-server/tests.

use psi_client::{
    CancelToken, Client, ClientConfig, ClientError, ErrorCode, FileCache, HttpTransport, Method,
    Phase, Protocol, Request, Response, Transport, TransportError,
};
use psi_server::{AppState, Config, Registry, RunningServer, Store};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Answers every request with the same response (or error).
struct Scripted {
    reply: Result<Response, TransportError>,
}

impl Transport for Scripted {
    fn send(&self, _: Request) -> Result<Response, TransportError> {
        self.reply.clone()
    }
}

fn client(reply: Result<Response, TransportError>) -> Client {
    Client::with_transport(
        "http://test",
        Arc::new(Scripted { reply }),
        ClientConfig::default().with_insecure_http(true),
    )
}

fn json(status: u16, body: &str, headers: &[(&str, &str)]) -> Response {
    Response {
        status,
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .chain([("content-type".to_string(), "application/json".to_string())])
            .collect(),
        body: body.as_bytes().to_vec(),
    }
}

fn none() -> CancelToken {
    CancelToken::new()
}

fn run(c: &Client) -> ClientError {
    c.match_items(
        vec![b"+14155550123".to_vec()],
        Protocol::Dh,
        &mut |_| {},
        &none(),
    )
    .unwrap_err()
}

#[test]
fn http_errors_are_typed_with_code_and_retry_after() {
    let e = run(&client(Ok(json(
        429,
        r#"{"error":"rate_limited","message":"items-per-hour limit reached; retry in 7 s"}"#,
        &[("Retry-After", "7")],
    ))));
    match &e {
        ClientError::Http {
            status,
            code,
            retry_after,
            ..
        } => assert_eq!(
            (*status, *code, *retry_after),
            (429, ErrorCode::RateLimited, Some(7))
        ),
        other => panic!("{other}"),
    }
    assert!(e.is_retryable());
    let e = run(&client(Ok(json(
        401,
        r#"{"error":"invalid_token","message":"x"}"#,
        &[],
    ))));
    assert!(matches!(
        &e,
        ClientError::Http {
            status: 401,
            code: ErrorCode::InvalidToken,
            ..
        }
    ));
    assert!(!e.is_retryable());
    let e = run(&client(Ok(json(
        410,
        r#"{"error":"session_expired","message":"x"}"#,
        &[],
    ))));
    assert!(e.is_retryable(), "a new run opens a new session");
    let e = run(&client(Ok(json(502, "<html>bad gateway</html>", &[]))));
    assert!(matches!(
        &e,
        ClientError::Http {
            status: 502,
            code: ErrorCode::Unknown,
            ..
        }
    ));
    assert!(e.is_retryable());
}

#[test]
fn network_bad_response_and_bad_input_errors() {
    let e = run(&client(Err(TransportError::failed("connection refused"))));
    assert!(matches!(e, ClientError::Network { timeout: false, .. }));
    assert!(e.is_retryable());
    let e = run(&client(Ok(json(201, "{\"not\":\"a session\"}", &[]))));
    assert!(matches!(e, ClientError::BadResponse(_)), "{e}");
    let c = client(Ok(json(200, "{}", &[])));
    let e = c
        .match_items(vec![], Protocol::Dh, &mut |_| {}, &none())
        .unwrap_err();
    assert!(matches!(e, ClientError::BadInput(_)));
    let e = c
        .match_items(vec![vec![0u8; 70_000]], Protocol::Dh, &mut |_| {}, &none())
        .unwrap_err();
    assert!(matches!(e, ClientError::BadInput(_)));
}

/// Records every request (method, URL, timeout, size cap, token) and forwards it to a
/// real transport, or answers with a fake session and a malformed protocol message.
struct Recording {
    inner: Option<HttpTransport>,
    seen: Arc<Mutex<Vec<Request>>>,
}

impl Recording {
    fn new(inner: Option<HttpTransport>) -> (Arc<Self>, Arc<Mutex<Vec<Request>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        (
            Arc::new(Recording {
                inner,
                seen: seen.clone(),
            }),
            seen,
        )
    }
}

impl Transport for Recording {
    fn send(&self, r: Request) -> Result<Response, TransportError> {
        self.seen.lock().unwrap().push(r.clone());
        if let Some(t) = &self.inner {
            return t.send(r);
        }
        Ok(match (r.method, r.url.as_str()) {
            (Method::Post, "http://fake/v1/sessions") => json(
                201,
                r#"{"session_id":"ab","protocol":"dh-psi","epoch":1,"registry_items":5,
                    "max_client_items":100,"max_body_bytes":1000000,"encoded_set_etag":"\"x\"",
                    "label_bucket_bits":0,"expires_in_secs":300}"#,
                &[],
            ),
            (Method::Delete, _) => json(204, "", &[]),
            _ => Response {
                status: 200,
                headers: vec![],
                body: b"PS\x01\x01\x02\x00\x00\x00\x00".to_vec(),
            },
        })
    }
}

fn routes(seen: &[Request]) -> Vec<String> {
    seen.iter()
        .map(|r| {
            let path = r.url.split_once("/v1/").map_or("", |(_, p)| p);
            // Session ids vary (and name their instance): keep the route's shape.
            let mut after_sessions = false;
            let path: Vec<&str> = path
                .split('/')
                .map(|s| {
                    let seg = if after_sessions { "{id}" } else { s };
                    after_sessions = s == "sessions";
                    seg
                })
                .collect();
            format!("{} /v1/{}", r.method.as_str(), path.join("/"))
        })
        .collect()
}

/// A malformed protocol answer is a protocol error; the session is still deleted; every
/// request carries the configured timeout, size cap and token, with an absolute URL.
#[test]
fn requests_carry_the_config_and_a_bad_answer_is_a_protocol_error() {
    let (t, seen) = Recording::new(None);
    let config = ClientConfig::default()
        .with_timeout(Duration::from_millis(1234))
        .with_max_response_bytes(4321)
        .with_token("t0k")
        .with_insecure_http(true);
    let c = Client::with_transport("http://fake/", t, config);
    let e = run(&c);
    assert!(matches!(e, ClientError::Protocol(_)), "{e}");
    let seen = seen.lock().unwrap();
    // The fake server's session id is "ab".
    assert!(
        seen[1].url.ends_with("/v1/sessions/ab/dh/query"),
        "{}",
        seen[1].url
    );
    assert_eq!(
        routes(&seen),
        [
            "POST /v1/sessions",
            "POST /v1/sessions/{id}/dh/query",
            "DELETE /v1/sessions/{id}"
        ]
    );
    for r in seen.iter() {
        assert!(r.url.starts_with("http://fake/v1/"), "{}", r.url);
        assert_eq!(r.timeout, Duration::from_millis(1234));
        assert_eq!(r.max_response_bytes, 4321);
        assert_eq!(r.header("authorization"), Some("Bearer t0k"));
    }
    assert_eq!(
        seen[1].header("content-type"),
        Some("application/octet-stream")
    );
    assert!(
        !format!("{:?}", seen[1]).contains("t0k"),
        "Debug hides headers"
    );
}

#[test]
fn requests_time_out() {
    // A loopback server that accepts and never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let hold = std::thread::spawn(move || {
        let conn = listener.accept();
        std::thread::sleep(Duration::from_secs(3));
        drop(conn);
    });
    let c = Client::new(
        &format!("http://{addr}"),
        ClientConfig::default().with_timeout(Duration::from_millis(500)),
    );
    let t = Instant::now();
    let e = run(&c);
    assert!(t.elapsed() < Duration::from_secs(3));
    assert!(
        matches!(e, ClientError::Network { timeout: true, .. }),
        "{e}"
    );
    hold.join().unwrap();
}

/// A real server on loopback over an in-memory registry.
fn server(entries: &[(&str, Option<&str>)], tune: impl FnOnce(&mut Config)) -> RunningServer {
    let mut config = Config::default();
    config.db = psi_server::Database::memory();
    config.build_threads = 2;
    config.workers = 2;
    tune(&mut config);
    let mut store = Store::open(std::path::Path::new(":memory:")).unwrap();
    store.add_entries(entries.iter().copied()).unwrap();
    let registry = Registry::from_store(&mut store, &config, &mut |_, _| {}).unwrap();
    RunningServer::start(
        AppState::with_registry(config, registry),
        ([127, 0, 0, 1], 0).into(),
    )
    .unwrap()
}

/// A DH-PSI run with labels makes exactly: session, query, encoded set, label fetch (no
/// label OPRF query: the labels come from the run's own outputs; no DELETE: the server
/// ends the session with the fetch's answer). The second run takes the encoded registry
/// from the cache and makes no request for it.
#[test]
fn a_dh_run_with_labels_makes_exactly_four_requests_and_the_cache_saves_one() {
    let srv = server(
        &[("+14155550123", Some("alice")), ("bob@example.com", None)],
        |c| c.tokens = vec!["t0k".into()],
    );
    let (t, seen) = Recording::new(Some(HttpTransport::new()));
    let c = Client::with_transport(&srv.url(), t, ClientConfig::default().with_token("t0k"));
    let items = vec![
        b"bob@example.com".to_vec(),
        b"+14155550123".to_vec(),
        b"x@y.z".to_vec(),
    ];
    let r = c
        .match_items(items.clone(), Protocol::Dh, &mut |_| {}, &none())
        .unwrap();
    let labels: Vec<Option<&str>> = r.matches.iter().map(|m| m.label.as_deref()).collect();
    assert_eq!(labels, vec![None, Some("alice")]);
    assert_eq!(
        routes(&seen.lock().unwrap()),
        [
            "POST /v1/sessions",
            "POST /v1/sessions/{id}/dh/query",
            "GET /v1/dh/encoded-set",
            "POST /v1/sessions/{id}/labels/fetch",
        ]
    );
    assert_eq!(r.stats.requests, 4);
    assert_eq!(r.stats.round_trips, 1);
    seen.lock().unwrap().clear();
    let r2 = c
        .match_items(items, Protocol::Dh, &mut |_| {}, &none())
        .unwrap();
    assert_eq!(r2.matches, r.matches);
    assert!(r2.stats.set_from_cache);
    assert_eq!(
        routes(&seen.lock().unwrap()),
        [
            "POST /v1/sessions",
            "POST /v1/sessions/{id}/dh/query",
            "POST /v1/sessions/{id}/labels/fetch",
        ]
    );
    assert_eq!(c.health().unwrap().registry_items, 2);
    assert_eq!(srv.state.live_sessions(), 0);
    srv.shutdown().unwrap();
}

/// The file cache is shared by two client instances (as by two launches of an app): the
/// second downloads nothing. A changed registry (new ETag, same epoch) is downloaded
/// again: the ETag, not the epoch, names the set.
#[test]
fn a_file_cache_is_reused_across_clients_and_refreshed_on_a_new_etag() {
    let srv = server(&[("+14155550123", Some("alice"))], |_| {});
    let dir = std::env::temp_dir().join(format!("psi-client-file-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let items = vec![b"+14155550123".to_vec(), b"+14155550199".to_vec()];
    let new_client = || {
        Client::new(&srv.url(), ClientConfig::default()).with_cache(Arc::new(FileCache::new(&dir)))
    };
    let first = new_client()
        .match_items(items.clone(), Protocol::Dh, &mut |_| {}, &none())
        .unwrap();
    assert!(!first.stats.set_from_cache && first.stats.set_bytes_downloaded > 0);
    let second = new_client()
        .match_items(items.clone(), Protocol::Dh, &mut |_| {}, &none())
        .unwrap();
    assert!(second.stats.set_from_cache);
    assert_eq!(second.stats.set_bytes_downloaded, 0);
    assert_eq!(second.matches, first.matches);
    // The cached set's tag no longer names the server's set (as after an import, which
    // keeps the epoch): the client asks with If-None-Match, gets the new set, stores it.
    let set_file = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "set"))
        .unwrap();
    let real = std::fs::read(&set_file).unwrap();
    let nl = real.iter().position(|&b| b == b'\n').unwrap();
    let mut stale = b"\"stale\"".to_vec();
    stale.extend_from_slice(&real[nl..]);
    std::fs::write(&set_file, &stale).unwrap();
    let third = new_client()
        .match_items(items.clone(), Protocol::Dh, &mut |_| {}, &none())
        .unwrap();
    assert!(!third.stats.set_from_cache);
    assert!(third.stats.set_bytes_downloaded > 0);
    assert_eq!(third.matches, first.matches);
    assert_eq!(std::fs::read(&set_file).unwrap(), real);
    // A damaged cached set under the current tag: downloaded again, not a failed run.
    let mut damaged = real.clone();
    damaged.truncate(nl + 20);
    std::fs::write(&set_file, &damaged).unwrap();
    let fourth = new_client()
        .match_items(items.clone(), Protocol::Dh, &mut |_| {}, &none())
        .unwrap();
    assert!(!fourth.stats.set_from_cache);
    assert_eq!(fourth.matches, first.matches);
    assert_eq!(std::fs::read(&set_file).unwrap(), real);
    std::fs::remove_dir_all(&dir).unwrap();
    srv.shutdown().unwrap();
}

/// A server of `n` numbers `+1202555iiii` (no labels) that takes small bodies (10,000
/// bytes: 128-row OT-PSI chunks, 16-column CM20-PSI chunks), so a run of a few thousand items
/// takes many rounds; up to 4,000 client items, no hourly limit, CM20-PSI on.
fn small_body_server(n: usize) -> RunningServer {
    let entries: Vec<(String, Option<String>)> =
        (0..n).map(|i| (format!("+1202555{i:04}"), None)).collect();
    let entries: Vec<(&str, Option<&str>)> = entries
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_deref()))
        .collect();
    server(&entries, |c| {
        c.max_body_bytes = 10_000;
        c.max_client_items = 4_000;
        c.items_per_hour = 0;
        c.enable_cm20 = true;
    })
}

/// Cancelling in the middle of a multi-round OT-PSI run: the run stops with `Cancelled`
/// before its next request and the server session is deleted.
#[test]
fn cancelling_mid_ot_run_frees_the_server_session() {
    let srv = small_body_server(300);
    let (t, seen) = Recording::new(Some(HttpTransport::new()));
    let c = Client::with_transport(&srv.url(), t, ClientConfig::default());
    let items: Vec<Vec<u8>> = (0..2_000)
        .map(|i| format!("+1303555{i:04}").into_bytes())
        .collect();
    let cancel = CancelToken::new();
    let mut events = Vec::new();
    let e = c
        .match_items(
            items,
            Protocol::Ot,
            &mut |p| {
                events.push(p);
                if p.phase == Phase::RoundTrip && p.round == 3 {
                    cancel.cancel();
                }
            },
            &cancel,
        )
        .unwrap_err();
    assert!(matches!(e, ClientError::Cancelled), "{e}");
    assert!(!e.is_retryable());
    let routes = routes(&seen.lock().unwrap());
    assert_eq!(routes.last().unwrap(), "DELETE /v1/sessions/{id}");
    let rounds = routes.iter().filter(|r| r.ends_with("/ot/round")).count();
    assert_eq!(rounds, 2, "the third round was never sent: {routes:?}");
    assert_eq!(srv.state.live_sessions(), 0);
    // Progress came in order: session, start, then alternating rounds and client steps.
    let phases: Vec<Phase> = events.iter().map(|p| p.phase).collect();
    assert_eq!(
        phases[..5],
        [
            Phase::CreateSession,
            Phase::ClientStart,
            Phase::RoundTrip,
            Phase::ClientSetup,
            Phase::RoundTrip
        ]
    );
    srv.shutdown().unwrap();
}

/// Raw contacts in: normalized, matched, mapped back to the rows (all rows of a repeated
/// identifier), rejected rows with their reason; the region comes from the config.
#[test]
fn match_contacts_maps_results_to_rows() {
    let srv = server(
        &[
            ("+14155550123", Some("alice")),
            ("bob@example.com", None),
            ("+442079460000", None),
        ],
        |_| {},
    );
    let c = Client::new(
        &srv.url(),
        ClientConfig::default().with_default_region("US"),
    );
    let rows = [
        "(415) 555-0123",    // 0: US number, matches
        "not a phone",       // 1: rejected
        " Bob@Example.COM ", // 2: matches
        "+1 415 555 0123",   // 3: same person as row 0
        "carol@example.com", // 4: not registered
        "",                  // 5: rejected
        "+44 20 7946 0000",  // 6: matches
    ];
    let r = c
        .match_contacts(&rows, Protocol::Dh, &mut |_| {}, &none())
        .unwrap();
    let got: Vec<(usize, &str, Option<&str>)> = r
        .matches
        .iter()
        .map(|m| (m.row, m.identifier.as_str(), m.label.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            (0, "+14155550123", Some("alice")),
            (2, "bob@example.com", None),
            (3, "+14155550123", Some("alice")),
            (6, "+442079460000", None),
        ]
    );
    let rejected: Vec<usize> = r.rejected.iter().map(|x| x.row).collect();
    assert_eq!(rejected, [1, 5]);
    assert_eq!(r.rows, 7);
    assert_eq!(r.run.client_items, 4);
    let e = Client::new(
        &srv.url(),
        ClientConfig::default().with_default_region("ZZ"),
    )
    .match_contacts(&rows, Protocol::Dh, &mut |_| {}, &none())
    .unwrap_err();
    assert!(matches!(e, ClientError::BadInput(_)), "{e}");
    srv.shutdown().unwrap();
}

/// Cancelling during the label step ends the run with `Cancelled` (not matches with a
/// label error), and the session is deleted.
#[test]
fn cancelling_during_labels_is_cancelled() {
    let srv = server(&[("+14155550123", Some("alice"))], |_| {});
    let c = Client::new(&srv.url(), ClientConfig::default());
    let cancel = CancelToken::new();
    let e = c
        .match_items(
            vec![b"+14155550123".to_vec()],
            Protocol::Dh,
            &mut |p| {
                if p.phase == Phase::Labels {
                    cancel.cancel();
                }
            },
            &cancel,
        )
        .unwrap_err();
    assert!(matches!(e, ClientError::Cancelled), "{e}");
    assert_eq!(srv.state.live_sessions(), 0);
    srv.shutdown().unwrap();
}

/// `(route, request body bytes)` of the label requests among `seen`.
fn label_traffic(seen: &[Request]) -> Vec<(String, usize)> {
    routes(seen)
        .into_iter()
        .zip(seen)
        .filter(|(route, _)| route.contains("/labels/"))
        .map(|(route, r)| (route, r.body.len()))
        .collect()
}

/// The label step sends the same requests with the same sizes whether nothing or
/// everything matched (same `n`, same server layout): the server cannot count matches
/// from it (docs/protocol/labels.md §6-§7). Both protocols, real server on loopback,
/// with every label right for the run where every item matched (a label slot per item:
/// the step used to cover at most 64 or a quarter of the items).
#[test]
fn label_traffic_does_not_depend_on_the_matches() {
    // 4,096 labeled entries at the default 8 per bucket: 2^9 buckets, more than the 100
    // buckets a 100-item run fetches, so the fetch does not simply name every bucket.
    let ids: Vec<String> = (0..4096).map(|i| format!("+1202{i:07}")).collect();
    let names: Vec<String> = (0..4096).map(|i| format!("user-{i}")).collect();
    let entries: Vec<(&str, Option<&str>)> = ids
        .iter()
        .zip(&names)
        .map(|(i, l)| (i.as_str(), Some(l.as_str())))
        .collect();
    let srv = server(&entries, |_| {});
    let n = 100;
    assert_eq!(psi_core::labels::fetch_buckets(n, 9), n);
    let hits: Vec<Vec<u8>> = ids[..n].iter().map(|s| s.clone().into_bytes()).collect();
    let misses: Vec<Vec<u8>> = (0..n)
        .map(|i| format!("+1303{i:07}").into_bytes())
        .collect();
    for protocol in [Protocol::Dh, Protocol::Ot] {
        let mut traffic = Vec::new();
        for items in [&misses, &hits] {
            let (t, seen) = Recording::new(Some(HttpTransport::new()));
            let c = Client::with_transport(&srv.url(), t, ClientConfig::default());
            let r = c
                .match_items(items.clone(), protocol, &mut |_| {}, &none())
                .unwrap();
            assert_eq!(r.label_error, None);
            assert_eq!(r.labels_skipped, 0);
            assert_eq!(r.label_status, psi_client::LabelStatus::Complete);
            assert_eq!(r.labels_missing, 0);
            if std::ptr::eq(items, &hits) {
                assert_eq!(r.matches.len(), n);
                for m in &r.matches {
                    assert_eq!(m.label.as_deref(), Some(names[m.index].as_str()));
                }
            } else {
                assert!(r.matches.is_empty());
            }
            let seen = seen.lock().unwrap();
            traffic.push((routes(&seen), label_traffic(&seen)));
        }
        let (routes_none, labels_none) = &traffic[0];
        let (routes_all, labels_all) = &traffic[1];
        let want = match protocol {
            Protocol::Dh => vec![("POST /v1/sessions/{id}/labels/fetch".to_string(), 4 * n)],
            Protocol::Ot | Protocol::Cm20 | Protocol::Gbf => vec![
                (
                    "POST /v1/sessions/{id}/labels/query".to_string(),
                    17 + 32 * n,
                ),
                ("POST /v1/sessions/{id}/labels/fetch".to_string(), 4 * n),
            ],
        };
        assert_eq!(labels_none, &want, "{protocol}: no match");
        assert_eq!(labels_all, &want, "{protocol}: all matched");
        assert_eq!(routes_none, routes_all, "{protocol}: same requests");
    }
    srv.shutdown().unwrap();
}

/// A session whose layout puts fewer than 4 registry entries in a bucket on average
/// (here 1: `label_bucket_size` 1) is refused before anything is matched when labels are
/// on, with a typed error; the session is deleted. With labels off the run works.
#[test]
fn a_too_fine_label_layout_is_refused() {
    let ids: Vec<String> = (0..512).map(|i| format!("+1202{i:07}")).collect();
    let entries: Vec<(&str, Option<&str>)> = ids.iter().map(|i| (i.as_str(), Some("x"))).collect();
    let srv = server(&entries, |c| c.label_bucket_size = 1);
    let items = vec![ids[3].clone().into_bytes(), b"+13030000000".to_vec()];
    let (t, seen) = Recording::new(Some(HttpTransport::new()));
    let c = Client::with_transport(&srv.url(), t, ClientConfig::default());
    let e = c
        .match_items(items.clone(), Protocol::Dh, &mut |_| {}, &none())
        .unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::Protocol(psi_core::Error::LabelLayoutTooFine {
                registry_items: 512,
                buckets: 512,
                minimum: 4,
            })
        ),
        "{e}"
    );
    assert!(!e.is_retryable());
    assert_eq!(
        routes(&seen.lock().unwrap()),
        ["POST /v1/sessions", "DELETE /v1/sessions/{id}"]
    );
    let c = Client::new(&srv.url(), ClientConfig::default().with_labels(false));
    let r = c
        .match_items(items, Protocol::Dh, &mut |_| {}, &none())
        .unwrap();
    assert_eq!(r.matches.len(), 1);
    assert_eq!(srv.state.live_sessions(), 0);
    srv.shutdown().unwrap();
}

/// Every protocol, labels on and off: a complete run makes exactly the requests the cost
/// model counts, none of them a DELETE, and the server holds no session afterwards (it
/// ended each with its final response: ADR 0025). Labels off, the client says so
/// (`"labels": false`) because the server's stored health lists the option.
#[test]
fn complete_runs_send_no_delete_and_leave_no_session() {
    let srv = server(
        &[("+14155550123", Some("alice")), ("bob@example.com", None)],
        |c| c.enable_cm20 = true,
    );
    let items = vec![b"bob@example.com".to_vec(), b"x@y.z".to_vec()];
    for p in [Protocol::Dh, Protocol::Ot, Protocol::Cm20] {
        for labels in [true, false] {
            let (t, seen) = Recording::new(Some(HttpTransport::new()));
            let config = ClientConfig::default().with_labels(labels);
            // A fresh cache each time: DH-PSI downloads the encoded set.
            let c = Client::with_transport(&srv.url(), t, config)
                .with_cache(std::sync::Arc::new(psi_client::MemoryCache::new()));
            // The health, stored in the client's measurements, lists every feature.
            let h = c.health().unwrap();
            assert!(psi_client::Feature::ALL.iter().all(|&f| h.supports(f)));
            seen.lock().unwrap().clear();
            let r = c
                .match_items(items.clone(), p, &mut |_| {}, &none())
                .unwrap();
            assert_eq!(r.matches.len(), 1, "{p} labels {labels}");
            let routes = routes(&seen.lock().unwrap());
            assert!(
                routes.iter().all(|r| !r.starts_with("DELETE")),
                "{p} labels {labels}: {routes:?}"
            );
            // The server's labels ("alice") fit label lanes: its OT-PSI sessions offer them.
            let w = psi_core::cost::Workload::new(2, 2)
                .with_labels(labels)
                .with_limits(10_000, 8 << 20)
                .with_label_lanes(h.label_lane_width);
            let expect = psi_core::cost::cost(p, &w).unwrap().requests.len();
            assert_eq!(r.stats.requests, expect, "{p} labels {labels}: {routes:?}");
            assert_eq!(routes.len(), expect);
            let create: serde_json::Value =
                serde_json::from_slice(&seen.lock().unwrap()[0].body).unwrap();
            assert_eq!(create.get("labels").is_some(), !labels, "{create}");
            assert_eq!(srv.state.live_sessions(), 0, "{p} labels {labels}");
        }
    }
    srv.shutdown().unwrap();
}

/// OT-PSI and CM20-PSI over many rounds (small bodies) through the real server: the client
/// builds each next chunk while the previous one is out (`work_ahead`), and the requests are
/// the ones a client that does not work ahead sends: as many rounds, as many bytes, the same
/// matches, every one of them found.
#[test]
fn many_round_runs_work_ahead_and_find_every_match() {
    let srv = small_body_server(1_500);
    // 2,000 items, 500 of them in the registry.
    let items: Vec<Vec<u8>> = (1_000..3_000)
        .map(|i| format!("+1202555{i:04}").into_bytes())
        .collect();
    for p in [Protocol::Ot, Protocol::Cm20] {
        let c = Client::new(&srv.url(), ClientConfig::default().with_labels(false));
        let mut events = Vec::new();
        let r = c
            .match_items(items.clone(), p, &mut |e| events.push(e), &none())
            .unwrap();
        // One vocabulary (issue 34): the phases timed are the phases entered, and the
        // outputs' handling is the client's finish, entered last.
        let entered: std::collections::BTreeSet<&str> =
            events.iter().map(|e| e.phase.name()).collect();
        let timed: std::collections::BTreeSet<&str> =
            r.stats.phases.iter().map(|(ph, _)| ph.name()).collect();
        assert_eq!(entered, timed, "{p}");
        assert_eq!(events.last().unwrap().phase, Phase::ClientFinish, "{p}");
        assert!(events.iter().any(|e| e.phase == Phase::ClientChunk), "{p}");
        // The progress fraction grows with the requests, below 1.
        let fractions: Vec<f64> = events.iter().map(|e| e.fraction()).collect();
        assert!(
            fractions.windows(2).all(|w| w[0] <= w[1]),
            "{p}: {fractions:?}"
        );
        assert!(
            *fractions.last().unwrap() > 0.5 && *fractions.last().unwrap() < 1.0,
            "{p}"
        );
        let mut found: Vec<usize> = r.matches.iter().map(|m| m.index).collect();
        found.sort_unstable();
        assert_eq!(found, (0..500).collect::<Vec<_>>(), "{p}");
        let w = psi_core::cost::Workload::new(2_000, 1_500)
            .with_labels(false)
            .with_limits(4_000, 10_000);
        let model = psi_core::cost::cost(p, &w).unwrap();
        let rounds = r.stats.round_trips;
        assert!(rounds > 5, "{p}: {rounds} rounds");
        assert!(
            r.stats.work_ahead > std::time::Duration::ZERO,
            "{p}: no work ahead"
        );
        let sent: u64 = model.requests.iter().map(|q| q.up).sum();
        assert_eq!(
            r.stats.protocol_bytes_sent,
            sent - model.requests[0].up,
            "{p}"
        );
    }
    srv.shutdown().unwrap();
}

/// Labels off with a fixed protocol and no stored health: the server is not known to
/// accept `labels`, so the field is left out (as for an older server) and the run ends
/// with a DELETE, one request more than with the health stored; either way the server
/// holds no session afterwards.
#[test]
fn labels_off_without_a_stored_health_omits_the_field_and_deletes() {
    let srv = server(&[("bob@example.com", None)], |_| {});
    let (t, seen) = Recording::new(Some(HttpTransport::new()));
    let c = Client::with_transport(&srv.url(), t, ClientConfig::default().with_labels(false));
    let items = vec![b"bob@example.com".to_vec(), b"x@y.z".to_vec()];
    let r = c
        .match_items(items.clone(), Protocol::Ot, &mut |_| {}, &none())
        .unwrap();
    assert_eq!(r.matches.len(), 1);
    let routes = routes(&seen.lock().unwrap());
    assert_eq!(routes.first().unwrap(), "POST /v1/sessions");
    assert_eq!(routes.last().unwrap(), "DELETE /v1/sessions/{id}");
    let create: serde_json::Value = serde_json::from_slice(&seen.lock().unwrap()[0].body).unwrap();
    assert!(create.get("labels").is_none(), "{create}");
    assert_eq!(srv.state.live_sessions(), 0);
    // With the health stored: the field, no DELETE, one request fewer.
    c.health().unwrap();
    seen.lock().unwrap().clear();
    let again = c
        .match_items(items, Protocol::Ot, &mut |_| {}, &none())
        .unwrap();
    assert_eq!(again.stats.requests + 1, r.stats.requests);
    assert!(routes_of(&seen).iter().all(|r| !r.starts_with("DELETE")));
    assert_eq!(srv.state.live_sessions(), 0);
    srv.shutdown().unwrap();
}

fn routes_of(seen: &Arc<Mutex<Vec<Request>>>) -> Vec<String> {
    routes(&seen.lock().unwrap())
}
