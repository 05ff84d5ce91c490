//! Transport security (docs/adr/0019-tls-and-connection-limits.md): a match over HTTPS
//! against a real server with a private CA, the default roots refusing that CA, plain HTTP
//! to a TLS server as a typed error, and the `http://` rule (checked before any request).

use psi_client::{
    CancelToken, Client, ClientConfig, ClientError, ErrorCode, HttpTransport, Protocol, Request,
    Response, Transport, TransportError,
};
use psi_server::{AppState, Config, Registry, RunningServer, ServerTls, Store};
use std::sync::{Arc, Mutex};

use psi_test_support::pki::pki;

/// A TLS server whose registry holds `+1202000000i` for i < 50; returns it and the CA PEM.
fn tls_server(name: &str) -> (RunningServer, String) {
    server(name, true)
}

/// The same server, over TLS or plain HTTP.
fn server(name: &str, tls: bool) -> (RunningServer, String) {
    let dir = psi_test_support::fresh_dir(&format!("psi-client-tls-{name}"));
    let (ca, cert, key) = pki();
    let mut config = Config::default();
    config.db = (dir.join("r.sqlite")).into();
    config.workers = 2;
    config.build_threads = 2;
    if tls {
        config.tls = Some(ServerTls::from_pem(cert.as_bytes(), key.as_bytes()).unwrap());
    }
    let mut store = Store::open(config.db.sqlite_path().unwrap()).unwrap();
    let ids: Vec<String> = (0..50).map(|i| format!("+1202{i:07}")).collect();
    store
        .add_entries(ids.iter().map(|i| (i.as_str(), Some("lbl"))))
        .unwrap();
    drop(store);
    let registry = Registry::load(&config, &mut |_, _| {}).unwrap();
    let srv = RunningServer::start(
        AppState::with_registry(config, registry),
        ([127, 0, 0, 1], 0).into(),
    )
    .unwrap();
    (srv, ca)
}

fn items() -> Vec<Vec<u8>> {
    vec![
        b"+12020000003".to_vec(),
        b"+12020000042".to_vec(),
        b"+19999999999".to_vec(),
    ]
}

#[test]
fn matches_over_https_with_a_private_ca_both_protocols() {
    let (srv, ca) = tls_server("match");
    assert!(srv.url().starts_with("https://127.0.0.1:"));
    let transport = Arc::new(HttpTransport::with_root_certificates(ca.as_bytes()).unwrap());
    // The certificate names both the address and `localhost`.
    let by_name = format!("https://localhost:{}", srv.addr.port());
    for url in [srv.url(), by_name] {
        let c = Client::with_transport(&url, transport.clone(), ClientConfig::default());
        assert_eq!(c.health().unwrap().registry_items, 50);
        for protocol in [Protocol::Dh, Protocol::Ot] {
            let r = c
                .match_items(items(), protocol, &mut |_| {}, &CancelToken::new())
                .unwrap();
            let mut found: Vec<usize> = r.matches.iter().map(|m| m.index).collect();
            found.sort();
            assert_eq!(found, [0, 1], "{protocol}");
            assert!(r.matches.iter().all(|m| m.label.as_deref() == Some("lbl")));
        }
    }
}

/// A failed handshake is a TLS error, and not retryable.
fn assert_tls(e: &ClientError, what: &str) {
    assert!(matches!(e, ClientError::Tls { .. }), "{what}: {e:?}");
    assert!(!e.is_retryable(), "{what}");
    assert!(e.to_string().starts_with("TLS failed: "), "{what}: {e}");
}

#[test]
fn an_untrusted_certificate_is_a_tls_error_and_not_retried() {
    let (srv, _) = tls_server("untrusted");
    // Mozilla's roots do not include the test CA.
    let c = Client::new(&srv.url(), ClientConfig::default());
    assert_tls(&c.health().unwrap_err(), "health, default roots");
    // A whole run fails on its first request, without the retries a network error gets.
    let mut retries = 0;
    let e = c
        .match_items(
            items(),
            Protocol::Dh,
            &mut |p| retries += usize::from(p.retry.is_some()),
            &CancelToken::new(),
        )
        .unwrap_err();
    assert_tls(&e, "run, default roots");
    assert_eq!(retries, 0);
    // Another private CA neither.
    let (other_ca, _, _) = pki();
    let t = Arc::new(HttpTransport::with_root_certificates(other_ca.as_bytes()).unwrap());
    let e = Client::with_transport(&srv.url(), t, ClientConfig::default())
        .health()
        .unwrap_err();
    assert_tls(&e, "another CA");
    assert!(matches!(
        HttpTransport::with_root_certificates(b"no pem here"),
        Err(ClientError::BadInput(_))
    ));
}

#[test]
fn https_to_a_plain_http_server_is_a_tls_error() {
    // The case: an `https://` URL to a server that does not speak TLS.
    let (srv, _) = server("plain-port", false);
    let url = format!("https://{}", srv.addr);
    let c = Client::new(&url, ClientConfig::default());
    assert_tls(&c.health().unwrap_err(), "health");
    let e = c
        .match_items(items(), Protocol::Ot, &mut |_| {}, &CancelToken::new())
        .unwrap_err();
    assert_tls(&e, "run");
    // A port with nothing listening stays a network error, retryable.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let e = Client::new(
        &format!("https://127.0.0.1:{port}"),
        ClientConfig::default(),
    )
    .health()
    .unwrap_err();
    assert!(matches!(e, ClientError::Network { .. }), "{e:?}");
    assert!(e.is_retryable());
}

#[test]
fn plain_http_to_a_tls_server_is_a_typed_bad_request() {
    let (srv, _) = tls_server("plain");
    let url = format!("http://{}", srv.addr);
    let c = Client::new(&url, ClientConfig::default());
    let e = c.health().unwrap_err();
    match &e {
        ClientError::Http {
            status: 400,
            code: ErrorCode::BadRequest,
            message,
            ..
        } => assert!(message.contains("https://"), "{message}"),
        other => panic!("{other}"),
    }
    // A whole run fails the same way, on its first request.
    let e = c
        .match_items(items(), Protocol::Dh, &mut |_| {}, &CancelToken::new())
        .unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::Http {
                code: ErrorCode::BadRequest,
                ..
            }
        ),
        "{e}"
    );
}

/// Counts requests and fails them: the URL rule must refuse before the first one.
#[derive(Default)]
struct Counting(Mutex<usize>);

impl Transport for Counting {
    fn send(&self, _: Request) -> Result<Response, TransportError> {
        *self.0.lock().unwrap() += 1;
        Err(TransportError::failed("no network in this test"))
    }
}

#[test]
fn plain_http_to_a_remote_host_is_refused_before_any_request_unless_allowed() {
    for url in [
        "http://discovery.example.com",
        "http://203.0.113.7:8080/",
        "http://[2001:db8::1]:80",
        "http://[::2]",
        "http://127.0.0.1.nip.io",
        "http://localhost.example.com",
        "http://localhost@evil.example",
        "http://10.0.0.1",
    ] {
        let t = Arc::new(Counting::default());
        let c = Client::with_transport(url, t.clone(), ClientConfig::default());
        let e = c
            .match_items(items(), Protocol::Dh, &mut |_| {}, &CancelToken::new())
            .unwrap_err();
        assert!(matches!(e, ClientError::InsecureUrl { .. }), "{url}: {e}");
        assert!(!e.is_retryable());
        assert!(matches!(
            c.health().unwrap_err(),
            ClientError::InsecureUrl { .. }
        ));
        assert_eq!(*t.0.lock().unwrap(), 0, "{url}: a request was sent");
        assert!(matches!(
            Client::check_base_url(url, &ClientConfig::default()),
            Err(ClientError::InsecureUrl { .. })
        ));
        // Allowed explicitly: the run goes to the transport.
        let allowed = ClientConfig::default().with_insecure_http(true);
        let c = Client::with_transport(url, t.clone(), allowed.clone());
        let e = c.health().unwrap_err();
        assert!(matches!(e, ClientError::Network { .. }), "{url}: {e}");
        assert_eq!(*t.0.lock().unwrap(), 1, "{url}");
        assert!(Client::check_base_url(url, &allowed).is_ok());
    }
    for url in [
        "http://127.0.0.1:8080",
        "http://127.8.9.10",
        "http://[::1]:8080/",
        "http://localhost:1",
        "http://LOCALHOST",
        "http://user@localhost",
        "http://[::ffff:127.0.0.1]",
        "https://discovery.example.com",
        "https://203.0.113.7:8443",
    ] {
        assert!(
            Client::check_base_url(url, &ClientConfig::default()).is_ok(),
            "{url}"
        );
    }
}
