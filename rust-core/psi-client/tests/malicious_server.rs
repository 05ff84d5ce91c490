//! A malicious or broken server (docs/security.md §4, issue 23 items 6 and 9): every number
//! the client reads from a server (the health and session JSON fields, the probe's answer,
//! `Retry-After`, `Server-Timing`, `X-PSI-Epoch`) set to NaN, infinities, -1, 1e300 and
//! integers beyond `u32`/`u64` gives a typed error or is ignored, never a panic; responses
//! are capped per route (a huge health is refused and never stored); redirects are not
//! followed; an oversized error body keeps its status.
//!
//! The real server on loopback answers, with one field of its answer rewritten by the
//! transport, or a small raw HTTP server where the answer must be one no server of ours
//! gives (a redirect, a 1 MiB health).

mod common;

use psi_client::server_input::{HEALTH_RESPONSE_BYTES, SESSION_RESPONSE_BYTES};
use psi_client::transport::MAX_ERROR_BODY_BYTES;
use psi_client::{
    CancelToken, Client, ClientConfig, ClientError, HttpTransport, MeasurementsFile, Protocol,
    ProtocolChoice, Request, Response, Transport, TransportError,
};
use psi_server::{Config, RunningServer};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The reference server with a registry of three entries, two labelled.
fn server() -> RunningServer {
    let mut config = Config::default();
    config.db = psi_server::Database::memory();
    config.build_threads = 1;
    config.workers = 1;
    // Runs that fail before they know their session leave it to the idle timeout: room
    // for all of them, and budgets for every run of the tests.
    config.max_sessions_per_client = 10_000;
    config.max_sessions_per_block = 10_000;
    config.max_ot_sessions = 1_000;
    config.max_ot_sessions_per_client = 1_000;
    config.ot_sessions_per_hour = 1 << 40;
    config.items_per_hour = 1 << 40;
    config.probe_bytes_per_hour = 1 << 40;
    common::serve_entries(
        config,
        [
            ("+14155550123", Some("alice")),
            ("bob@example.com", None),
            ("+14155550199", Some("carol")),
        ],
    )
}

fn items() -> Vec<Vec<u8>> {
    vec![b"+14155550123".to_vec(), b"carol@example.com".to_vec()]
}

type Rewrite = dyn Fn(&Request, Response) -> Response + Send + Sync;

/// Forwards to the real server and rewrites its answers; records each request's route
/// and cap.
struct Rewriting {
    inner: HttpTransport,
    rewrite: Box<Rewrite>,
    seen: Mutex<Vec<(String, u64)>>,
}

impl Transport for Rewriting {
    fn send(&self, request: Request) -> Result<Response, TransportError> {
        let path = request
            .url
            .split_once("/v1/")
            .map_or(String::new(), |(_, p)| {
                format!("{} /v1/{p}", request.method.as_str())
            });
        self.seen
            .lock()
            .unwrap()
            .push((path, request.max_response_bytes));
        let r = self.inner.send(request.clone())?;
        Ok((self.rewrite)(&request, r))
    }
}

fn client(
    srv: &RunningServer,
    config: ClientConfig,
    rewrite: Box<Rewrite>,
) -> (Client, Arc<Rewriting>) {
    let t = Arc::new(Rewriting {
        inner: HttpTransport::new(),
        rewrite,
        seen: Mutex::new(Vec::new()),
    });
    let config = config
        .with_threads(psi_client::Threads::ONE)
        .with_timeout(Duration::from_secs(20));
    (Client::with_transport(&srv.url(), t.clone(), config), t)
}

/// `body` (JSON) with the value at `path` replaced by the raw text `raw` (which need not
/// be valid JSON: `NaN` is what a broken server could send).
fn with_raw(body: &[u8], path: &[&str], raw: &str) -> Vec<u8> {
    let mut v: serde_json::Value = serde_json::from_slice(body).unwrap();
    let mut slot = &mut v;
    for k in path {
        if slot.is_null() {
            *slot = serde_json::json!({});
        }
        slot = slot
            .as_object_mut()
            .unwrap()
            .entry(k.to_string())
            .or_insert(serde_json::Value::Null);
    }
    *slot = serde_json::Value::String("@@RAW@@".into());
    serde_json::to_string(&v)
        .unwrap()
        .replace("\"@@RAW@@\"", raw)
        .into_bytes()
}

/// What a server could put where the client expects a number.
const RAW: &[&str] = &[
    "NaN",
    "Infinity",
    "-Infinity",
    "-1",
    "1e300",
    "-1e300",
    "1.5",
    "0",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "340282366920938463463374607431768211456",
];

/// A typed error of the kinds a bad answer may give (the run must not panic, which would
/// end the test).
fn typed(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::BadResponse(_)
            | ClientError::Protocol(_)
            | ClientError::Http { .. }
            | ClientError::Network { .. }
    )
}

#[test]
fn every_number_in_the_health_and_the_probe_answer_is_checked() {
    let srv = server();
    let health_fields: &[&[&str]] = &[
        &["epoch"],
        &["registry_items"],
        &["max_client_items"],
        &["max_body_bytes"],
        &["label_bucket_bits"],
        &["label_record_bytes"],
        &["costs", "scalar_mult_ns"],
        &["costs", "hash_to_group_ns"],
        &["costs", "element_decode_ns"],
        &["costs", "aes_block_ns"],
        &["costs", "hash_block_ns"],
        &["costs", "entry_ns"],
        &["costs", "cm20_lookup_ns"],
        &["costs", "gbf_xor_ns"],
        &["costs", "threads_per_step"],
        &["costs", "workers"],
        &["costs", "ot_workers"],
    ];
    let mut ok = 0;
    for field in health_fields {
        for raw in RAW {
            let (f, v) = (field.to_vec(), raw.to_string());
            let rewrite = Box::new(move |r: &Request, mut resp: Response| {
                if r.url.ends_with("/v1/health") {
                    resp.body = with_raw(&resp.body, &f, &v);
                }
                if r.url.ends_with("/v1/probe") && !r.body.is_empty() {
                    resp.body = with_raw(&resp.body, &["bytes"], &v);
                }
                resp
            });
            let (c, _) = client(&srv, ClientConfig::default().with_retries(0), rewrite);
            match c.match_items(
                items(),
                ProtocolChoice::default(),
                &mut |_| {},
                &CancelToken::new(),
            ) {
                Ok(r) => {
                    ok += 1;
                    // Whatever the advertisement, the costs the choice used are plausible.
                    let choice = r.choice.expect("an automatic run reports its choice");
                    let s = choice.server;
                    let reference = psi_client::UnitCosts::REFERENCE;
                    let range = psi_client::measure::SERVER_COST_RANGE;
                    for (v, r) in [
                        (s.scalar_mult, reference.scalar_mult),
                        (s.hash_to_group, reference.hash_to_group),
                        (s.element_decode, reference.element_decode),
                        (s.aes_block, reference.aes_block),
                        (s.hash_block, reference.hash_block),
                        (s.entry, reference.entry),
                    ] {
                        assert!(v >= r / range && v <= r * range, "{field:?} {v}");
                    }
                    for &p in psi_core::Protocol::ALL {
                        if let (Some(v), Some(r)) = (s.own(p), reference.own(p)) {
                            assert!(v >= r / range && v <= r * range, "{field:?} {p} {v}");
                        }
                    }
                    assert!((1..=psi_client::measure::MAX_SERVER_THREADS).contains(&s.threads));
                    assert_eq!(r.matches.len(), 1);
                }
                Err(e) => assert!(typed(&e), "{field:?}={raw}: {e:?}"),
            }
        }
    }
    // The finite in-range values of the cost fields (0, 1.5, -1, 1e300...) are clamped,
    // not refused: most runs complete.
    assert!(ok >= 30, "{ok}");
}

#[test]
fn every_number_in_the_session_is_checked() {
    let srv = server();
    let fields = [
        "epoch",
        "registry_items",
        "max_client_items",
        "max_body_bytes",
        "label_bucket_bits",
        "expires_in_secs",
        "session_id",
        "ends_on_completion",
    ];
    for protocol in [Protocol::Dh, Protocol::Ot] {
        for field in fields {
            for raw in RAW.iter().chain(&["25", "255", "\"../../x\"", "\"a?b\""]) {
                let raw = raw.to_string();
                let rewrite = Box::new(move |r: &Request, mut resp: Response| {
                    if r.url.ends_with("/v1/sessions") {
                        resp.body = with_raw(&resp.body, &[field], &raw);
                    }
                    resp
                });
                let (c, t) = client(&srv, ClientConfig::default().with_retries(0), rewrite);
                let r = c.match_items(items(), protocol, &mut |_| {}, &CancelToken::new());
                if let Err(e) = &r {
                    assert!(typed(e), "{protocol} {field}: {e:?}");
                }
                // A session id that is not a plain token never reaches a URL.
                let seen = t.seen.lock().unwrap();
                assert!(
                    seen.iter()
                        .all(|(p, _)| !p.contains("..") && !p.contains('?')),
                    "{seen:?}"
                );
            }
        }
    }
}

#[test]
fn headers_with_strange_numbers_are_ignored_or_typed() {
    let srv = server();
    for raw in RAW {
        let v = raw.to_string();
        let first = Arc::new(AtomicBool::new(true));
        let rewrite = Box::new(move |r: &Request, mut resp: Response| {
            for (k, v) in [
                ("server-timing", format!("psi;dur={v}")),
                ("x-psi-epoch", v.clone()),
                ("retry-after", v.clone()),
            ] {
                resp.headers.push((k.to_string(), v));
            }
            // The first session creation is refused as busy, with that Retry-After.
            if r.url.ends_with("/v1/sessions") && first.swap(false, Ordering::SeqCst) {
                resp.status = 503;
                resp.body = br#"{"error":"server_busy","message":"injected"}"#.to_vec();
            }
            resp
        });
        let (c, _) = client(&srv, ClientConfig::default().with_retries(1), rewrite);
        for protocol in [Protocol::Dh, Protocol::Ot] {
            match c.match_items(items(), protocol, &mut |_| {}, &CancelToken::new()) {
                Ok(r) => {
                    assert_eq!(r.matches.len(), 1);
                    assert!(r.stats.server_time <= Duration::from_secs(100_000_000));
                }
                Err(ClientError::Http {
                    status: 503,
                    retry_after,
                    ref message,
                    ..
                }) => {
                    // Not retried: only a whole number of seconds above 30 ends the run.
                    assert!(
                        retry_after.is_some_and(|s| (31..=86_400).contains(&s)),
                        "{raw} {protocol} {retry_after:?} {message}"
                    );
                }
                Err(e) => panic!("{raw}: {e:?}"),
            }
        }
    }
}

#[test]
fn each_route_has_its_own_cap() {
    let srv = server();
    let configured = 32 << 20;
    for protocol in [Protocol::Dh, Protocol::Ot] {
        let (c, t) = client(
            &srv,
            ClientConfig::default().with_max_response_bytes(configured),
            Box::new(|_: &Request, r: Response| r),
        );
        c.health().unwrap();
        let r = c
            .match_items(items(), protocol, &mut |_| {}, &CancelToken::new())
            .unwrap();
        assert_eq!(r.matches.len(), 1);
        for (route, cap) in t.seen.lock().unwrap().iter() {
            let want = if route.ends_with("/v1/health") {
                HEALTH_RESPONSE_BYTES
            } else if route.ends_with("/v1/sessions") {
                // A created session may carry the health (ADR 0054).
                SESSION_RESPONSE_BYTES + HEALTH_RESPONSE_BYTES
            } else if route.starts_with("DELETE") {
                SESSION_RESPONSE_BYTES
            } else if route.contains("/labels/") {
                configured
            } else {
                // Protocol steps against three entries: the model's size, about 1 MiB.
                assert!(*cap < 2 << 20, "{route} {cap}");
                continue;
            };
            assert_eq!(*cap, want, "{route}");
        }
    }
}

/// A loopback HTTP/1.1 server answering every request with `answer(request head)` (a whole
/// raw response, then the connection closes); stops when dropped. Counts connections.
struct RawServer {
    addr: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
    hits: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RawServer {
    fn start(answer: impl Fn(&str) -> Vec<u8> + Send + 'static) -> RawServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let hits = Arc::new(AtomicUsize::new(0));
        let (s, h) = (stop.clone(), hits.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let Ok((mut conn, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                h.fetch_add(1, Ordering::SeqCst);
                conn.set_nonblocking(false).unwrap();
                conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && head.len() < 64 << 10 {
                    match conn.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => break,
                    }
                }
                let head = String::from_utf8_lossy(&head).to_string();
                let _ = conn.write_all(&answer(&head));
                let _ = conn.flush();
            }
        });
        RawServer {
            addr,
            stop,
            hits,
            thread: Some(thread),
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn raw_response(status: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    r.push_str("\r\n");
    let mut r = r.into_bytes();
    r.extend_from_slice(body);
    r
}

/// A health of the reference server's shape padded to `size` bytes by an unknown field
/// (which the client's JSON reading ignores: only the cap refuses it).
fn padded_health(size: usize) -> Vec<u8> {
    let h = format!(
        r#"{{"status":"ok","epoch":1,"registry_items":3,"protocols":["dh-psi"],"max_client_items":10,"max_body_bytes":1000,"pad":"{}"}}"#,
        "x".repeat(size)
    );
    h.into_bytes()
}

#[test]
fn an_oversized_health_is_refused_and_never_stored() {
    let big = RawServer::start(|_| {
        raw_response(
            "200 OK",
            &[("content-type", "application/json")],
            &padded_health(1 << 20),
        )
    });
    let dir = std::env::temp_dir().join(format!("psi-malicious-health-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // Through the real transport (the cap refuses the body as it arrives) and through one
    // that ignores the cap (the driver checks again).
    struct IgnoresCaps(HttpTransport);
    impl Transport for IgnoresCaps {
        fn send(&self, mut r: Request) -> Result<Response, TransportError> {
            r.max_response_bytes = u64::MAX;
            self.0.send(r)
        }
    }
    let transports: [Arc<dyn Transport>; 2] = [
        Arc::new(HttpTransport::new()),
        Arc::new(IgnoresCaps(HttpTransport::new())),
    ];
    for t in transports {
        let file = MeasurementsFile::open(&dir);
        let c = Client::with_transport(&big.url(), t, ClientConfig::default())
            .with_measurements(file.store());
        let e = c.health().unwrap_err();
        assert!(matches!(e, ClientError::Network { .. }), "{e:?}");
        let e = c
            .match_items(
                items(),
                ProtocolChoice::default(),
                &mut |_| {},
                &CancelToken::new(),
            )
            .unwrap_err();
        assert!(matches!(e, ClientError::Network { .. }), "{e:?}");
        file.save().unwrap();
        let stored = std::fs::read_to_string(file.path().unwrap()).unwrap_or_default();
        assert!(!stored.contains("xxxx"), "the padded health was stored");
        assert!(stored.len() < 64 << 10, "{}", stored.len());
    }
    // The same health under the cap is taken (the padding is what refused it).
    let small = RawServer::start(|_| raw_response("200 OK", &[], &padded_health(1000)));
    let c = Client::new(&small.url(), ClientConfig::default());
    assert_eq!(c.health().unwrap().registry_items, 3);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn redirects_are_not_followed() {
    let target = RawServer::start(|_| raw_response("200 OK", &[], &padded_health(10)));
    let location = format!("{}/v1/health", target.url());
    for status in [
        "301 Moved Permanently",
        "302 Found",
        "307 Temporary Redirect",
        "308 Permanent Redirect",
    ] {
        let loc = location.clone();
        let origin = RawServer::start(move |_| raw_response(status, &[("location", &loc)], b""));
        let c = Client::new(&origin.url(), ClientConfig::default().with_retries(0));
        let e = c.health().unwrap_err();
        assert!(
            matches!(&e, ClientError::BadResponse(m) if m.contains("redirect")),
            "{status}: {e:?}"
        );
        let e = c
            .match_items(items(), Protocol::Dh, &mut |_| {}, &CancelToken::new())
            .unwrap_err();
        assert!(
            matches!(&e, ClientError::BadResponse(m) if m.contains("redirect")),
            "{e:?}"
        );
        assert!(origin.hits.load(Ordering::SeqCst) >= 2);
    }
    assert_eq!(
        target.hits.load(Ordering::SeqCst),
        0,
        "a redirect was followed"
    );
}

#[test]
fn an_oversized_error_body_keeps_its_status() {
    let huge = vec![b'x'; 1 << 20];
    let busy = RawServer::start(move |_| {
        raw_response("503 Service Unavailable", &[("retry-after", "31")], &huge)
    });
    let c = Client::new(&busy.url(), ClientConfig::default().with_retries(0));
    for e in [
        c.health().unwrap_err(),
        c.match_items(items(), Protocol::Dh, &mut |_| {}, &CancelToken::new())
            .unwrap_err(),
    ] {
        assert!(
            matches!(
                e,
                ClientError::Http {
                    status: 503,
                    retry_after: Some(31),
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.is_retryable());
    }
    // Under the cap, the body is read as usual.
    let small = format!(
        r#"{{"error":"rate_limited","message":"{}"}}"#,
        "y".repeat(MAX_ERROR_BODY_BYTES as usize / 2)
    );
    let limited = RawServer::start(move |_| {
        raw_response(
            "429 Too Many Requests",
            &[("retry-after", "40")],
            small.as_bytes(),
        )
    });
    let c = Client::new(&limited.url(), ClientConfig::default().with_retries(0));
    let e = c.health().unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::Http {
                status: 429,
                code: psi_client::ErrorCode::RateLimited,
                ..
            }
        ),
        "{e:?}"
    );
}
