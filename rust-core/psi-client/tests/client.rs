//! The client driver: typed errors for each failure, the transport trait, the encoded
//! registry cache, timeouts. The protocol itself is tested in psi-core and end to end
//! in psi-server/tests.

use psi_client::{
    Client, ClientConfig, ClientError, HttpTransport, Method, Protocol, Request, Response,
    Transport, TransportError,
};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Answers every request with the same response (or error) and records the paths.
struct Scripted {
    reply: Result<Response, TransportError>,
    seen: Arc<Mutex<Vec<(Method, String)>>>,
}

impl Transport for Scripted {
    fn send(&self, r: Request<'_>) -> Result<Response, TransportError> {
        self.seen
            .lock()
            .unwrap()
            .push((r.method, r.path.to_string()));
        self.reply.clone()
    }
}

fn client(reply: Result<Response, TransportError>) -> Client {
    Client::with_transport(
        Box::new(Scripted {
            reply,
            seen: Arc::default(),
        }),
        ClientConfig::default(),
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

fn run(c: &Client) -> ClientError {
    c.match_items(vec![b"+14155550123".to_vec()], Protocol::Dh, &mut |_| {})
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
        } => {
            assert_eq!(
                (*status, code.as_str(), *retry_after),
                (429, "rate_limited", Some(7))
            );
        }
        other => panic!("{other}"),
    }
    assert!(e.is_retryable());
    let e = run(&client(Ok(json(
        401,
        r#"{"error":"invalid_token","message":"x"}"#,
        &[],
    ))));
    assert!(matches!(&e, ClientError::Http { status: 401, code, .. } if code == "invalid_token"));
    assert!(!e.is_retryable());
    let e = run(&client(Ok(json(502, "<html>bad gateway</html>", &[]))));
    assert!(matches!(&e, ClientError::Http { status: 502, code, .. } if code == "unknown"));
    assert!(e.is_retryable());
}

#[test]
fn network_bad_response_and_bad_input_errors() {
    let e = run(&client(Err(TransportError {
        message: "connection refused".into(),
        timeout: false,
    })));
    assert!(matches!(e, ClientError::Network { timeout: false, .. }));
    assert!(e.is_retryable());
    let e = run(&client(Ok(json(201, "{\"not\":\"a session\"}", &[]))));
    assert!(matches!(e, ClientError::BadResponse(_)), "{e}");
    let c = client(Ok(json(200, "{}", &[])));
    let e = c
        .match_items(vec![], Protocol::Dh, &mut |_| {})
        .unwrap_err();
    assert!(matches!(e, ClientError::BadInput(_)));
    let e = c
        .match_items(vec![vec![0u8; 70_000]], Protocol::Dh, &mut |_| {})
        .unwrap_err();
    assert!(matches!(e, ClientError::BadInput(_)));
}

/// A session whose query answer is not a protocol message: a protocol error, and the
/// session is still deleted.
#[test]
fn malformed_protocol_answer_is_a_protocol_error() {
    struct Fake(Arc<Mutex<Vec<(Method, String)>>>);
    impl Transport for Fake {
        fn send(&self, r: Request<'_>) -> Result<Response, TransportError> {
            self.0.lock().unwrap().push((r.method, r.path.to_string()));
            Ok(match (r.method, r.path) {
                (Method::Post, "/v1/sessions") => json(
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
    let seen = Arc::new(Mutex::new(Vec::new()));
    let c = Client::with_transport(Box::new(Fake(seen.clone())), ClientConfig::default());
    let e = run(&c);
    assert!(matches!(e, ClientError::Protocol(_)), "{e}");
    let seen = seen.lock().unwrap();
    assert_eq!(
        seen.last().unwrap(),
        &(Method::Delete, "/v1/sessions/ab".to_string())
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
    let c = Client::with_transport(
        Box::new(HttpTransport::new(
            &format!("http://{addr}"),
            Duration::from_millis(500),
            1 << 20,
        )),
        ClientConfig::default(),
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

/// Against the real server: the second run takes the encoded registry from the cache
/// (no request for it at all), the token is sent, and the transport sees every request.
#[test]
fn caches_the_encoded_registry_per_epoch() {
    struct Counting(HttpTransport, Arc<Mutex<Vec<(Method, String)>>>);
    impl Transport for Counting {
        fn send(&self, r: Request<'_>) -> Result<Response, TransportError> {
            assert!(
                r.headers
                    .iter()
                    .any(|(k, v)| *k == "authorization" && v == "Bearer t0k")
            );
            self.1.lock().unwrap().push((r.method, r.path.to_string()));
            self.0.send(r)
        }
    }
    let mut config = psi_server::Config::default();
    config.db_path = ":memory:".into();
    config.tokens = vec!["t0k".into()];
    let mut store = psi_server::Store::open(std::path::Path::new(":memory:")).unwrap();
    store
        .add_entries([("+14155550123", Some("alice")), ("bob@example.com", None)])
        .unwrap();
    let registry = psi_server::Registry::from_store(&mut store, &config, &mut |_, _| {}).unwrap();
    let server = psi_server::RunningServer::start(
        psi_server::AppState::with_registry(config, registry),
        ([127, 0, 0, 1], 0).into(),
    )
    .unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let c = Client::with_transport(
        Box::new(Counting(
            HttpTransport::new(&server.url(), Duration::from_secs(20), 1 << 24),
            seen.clone(),
        )),
        ClientConfig::default().with_token("t0k"),
    );
    let items = vec![
        b"bob@example.com".to_vec(),
        b"+14155550123".to_vec(),
        b"x@y.z".to_vec(),
    ];
    let r = c
        .match_items(items.clone(), Protocol::Dh, &mut |_| {})
        .unwrap();
    let labels: Vec<Option<&str>> = r.matches.iter().map(|m| m.label.as_deref()).collect();
    assert_eq!(labels, vec![None, Some("alice")]);
    let downloads =
        |s: &[(Method, String)]| s.iter().filter(|(_, p)| p == "/v1/dh/encoded-set").count();
    assert_eq!(downloads(&seen.lock().unwrap()), 1);
    let r2 = c.match_items(items, Protocol::Dh, &mut |_| {}).unwrap();
    assert_eq!(r2.matches, r.matches);
    assert_eq!(
        downloads(&seen.lock().unwrap()),
        1,
        "second run used the cache"
    );
    assert!(r2.stats.set_from_cache);
    assert_eq!(c.health().unwrap().registry_items, 2);
    server.shutdown().unwrap();
}
