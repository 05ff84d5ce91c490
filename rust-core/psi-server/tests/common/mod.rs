//! Shared helpers: a server on 127.0.0.1 port 0 over a store in a fresh temp dir.
#![allow(dead_code)]

pub mod pg;

use psi_client::{HttpTransport, Method, Request, Response, Transport};
use psi_server::{AppState, Config, Registry, RunningServer, Store};
use std::io::Read;
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

pub fn temp_dir(name: &str) -> PathBuf {
    psi_test_support::fresh_dir(&format!("psi-server-test-{name}"))
}

pub fn config(name: &str) -> Config {
    let mut c = Config::default();
    c.db = (temp_dir(name).join("registry.sqlite")).into();
    c.build_threads = 2;
    c.workers = 2;
    c
}

/// `+1202xxxxxxx` entries; entry `i` labeled `user-i` when `labeled(i)`.
pub fn fill(config: &Config, n: u64, labeled: impl Fn(u64) -> bool) {
    let mut store = Store::open(config.db.sqlite_path().unwrap()).unwrap();
    let rows: Vec<(String, Option<String>)> = (0..n)
        .map(|i| (id(i), labeled(i).then(|| format!("user-{i}"))))
        .collect();
    store
        .add_entries(rows.iter().map(|(a, b)| (a.as_str(), b.as_deref())))
        .unwrap();
}

pub fn id(i: u64) -> String {
    format!("+1202{i:07}")
}

pub fn start(config: Config) -> RunningServer {
    let registry = Registry::load(&config, &mut |_, _| {}).unwrap();
    RunningServer::start(
        AppState::with_registry(config, registry),
        ([127, 0, 0, 1], 0).into(),
    )
    .unwrap()
}

/// A server of `n` unlabeled-or-`labeled` entries whose callers are told apart by
/// `X-Forwarded-For` from a trusted loopback proxy, with no items budget and session
/// timers long enough that nothing ends by the clock unless `tune` shortens them.
pub fn proxied_server(
    name: &str,
    n: u64,
    labeled: impl Fn(u64) -> bool,
    tune: impl FnOnce(&mut Config),
) -> RunningServer {
    let mut c = config(name);
    c.items_per_hour = 0;
    c.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap()];
    c.session_idle_timeout = Duration::from_secs(60);
    c.ot_idle_timeout = Duration::from_secs(60);
    c.ot_hello_timeout = Duration::from_secs(60);
    tune(&mut c);
    fill(&c, n, labeled);
    start(c)
}

/// Reads one HTTP/1.1 response from a raw socket (head and `content-length` body);
/// returns its status and its head, lower-cased.
pub fn read_response(s: &mut TcpStream) -> (u16, String) {
    let mut data = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        let n = s.read(&mut buf).expect("a response");
        assert!(n > 0, "closed before a full response");
        data.extend_from_slice(&buf[..n]);
        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if data.len() >= end + 4 + len {
                return (head[9..12].parse().unwrap(), head);
            }
        }
    }
}

/// Raw HTTP to one server, for requests the client driver would never make.
pub struct Raw {
    transport: HttpTransport,
    base: String,
}

pub fn raw(server: &RunningServer) -> Raw {
    raw_url(&server.url())
}

/// Raw HTTP to `base` (`http://host:port`), e.g. a proxy in front of servers.
pub fn raw_url(base: &str) -> Raw {
    Raw {
        transport: HttpTransport::new(),
        base: base.to_string(),
    }
}

pub fn send(
    t: &Raw,
    method: Method,
    path: &str,
    headers: &[(&'static str, &str)],
    body: &[u8],
) -> Response {
    try_send(t, method, path, headers, body).unwrap()
}

/// [`send`], its transport error returned.
pub fn try_send(
    t: &Raw,
    method: Method,
    path: &str,
    headers: &[(&'static str, &str)],
    body: &[u8],
) -> Result<Response, psi_client::TransportError> {
    t.transport.send(Request {
        method,
        url: format!("{}{path}", t.base),
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        body: body.to_vec(),
        timeout: Duration::from_secs(30),
        max_response_bytes: 64 << 20,
        abandon_on_cancel: true,
    })
}

pub fn error_code(r: &Response) -> String {
    let v: serde_json::Value = serde_json::from_slice(&r.body)
        .unwrap_or_else(|_| panic!("non-JSON error body, status {}", r.status));
    v["error"].as_str().unwrap().to_string()
}

/// Creates a session and returns its JSON.
pub fn session(t: &Raw, protocol: &str, n: u32, auth: &[(&'static str, &str)]) -> Response {
    let body = format!(r#"{{"protocol":"{protocol}","client_items":{n}}}"#);
    let mut h = vec![("content-type", "application/json")];
    h.extend_from_slice(auth);
    send(t, Method::Post, "/v1/sessions", &h, body.as_bytes())
}

pub fn session_id(r: &Response) -> String {
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    v["session_id"].as_str().unwrap().to_string()
}

/// A well-formed DH-PSI QUERY with `n` valid elements for `epoch`.
pub fn query(epoch: u32, n: usize) -> Vec<u8> {
    let items = psi_core::ItemSet::new((0..n).map(|i| format!("q{i}")));
    let mut rng = <rand_chacha::ChaCha20Rng as rand_core::SeedableRng>::from_seed([7; 32]);
    psi_core::dh::DhClient::start(items, epoch, psi_core::Threads::ONE, &mut rng)
        .unwrap()
        .1
}
