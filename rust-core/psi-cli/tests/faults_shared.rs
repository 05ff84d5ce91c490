//! An instance SIGKILLed mid-run (issue 22, "Faults"; docs/deploy.md, "Faults"): three
//! `psi serve` processes on one PostgreSQL behind nginx configured by
//! docs/deploy/nginx.conf itself; the instance holding a run's session is killed with
//! SIGKILL between two steps of the run. The session's next step, through nginx, is `421
//! wrong_instance` (typed, retryable), and the client's retry completes on another
//! instance with the right result. Real PostgreSQL (a private cluster), nginx and servers
//! on 127.0.0.1; every process is stopped at the end, on failure too.

mod common;

use psi_client::report::RetryCause;
use psi_client::{
    CancelToken, Client, ClientConfig, ErrorCode, HttpTransport, Method, Progress, Protocol,
    Request, Response, Threads, Transport, TransportError,
};
use psi_test_support::TempNginx;
use psi_test_support::pg::TempPostgres;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A `psi serve` killed (SIGKILL) and reaped when dropped, also when the test fails.
struct Served {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn temp_dir(name: &str) -> PathBuf {
    common::temp_dir("faults", name)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs `psi ARGS`, killed after 60 s; panics when it fails.
fn psi(args: &[&str]) {
    let (ok, _, err) = common::run_psi(args, Duration::from_secs(60));
    assert!(ok, "psi {args:?}: {err}");
}

/// docs/deploy/nginx.conf with the test's addresses.
fn nginx_conf(addrs: &[SocketAddr]) -> String {
    psi_test_support::nginx::deploy_conf(addrs)
}

/// The instance name of a session id (`NAME-HEX`).
fn name_of(id: &str) -> String {
    id.split_once('-')
        .expect("a named session id")
        .0
        .to_string()
}

/// The client's transport: before the first step of a session (the session created, its
/// instance chosen), SIGKILLs the instance holding it, once, when armed.
struct Killer {
    inner: HttpTransport,
    servers: Arc<Mutex<HashMap<String, Served>>>,
    armed: Mutex<bool>,
    killed: Mutex<Option<(String, u32)>>,
    /// The instance of every session request, in order.
    seen: Mutex<Vec<String>>,
}

impl Transport for Killer {
    fn send(&self, request: Request) -> Result<Response, TransportError> {
        let path = request.url.splitn(4, '/').nth(3).unwrap_or_default();
        if let Some(rest) = path.strip_prefix("v1/sessions/") {
            let name = name_of(rest.split('/').next().unwrap());
            self.seen.lock().unwrap().push(name.clone());
            if std::mem::take(&mut *self.armed.lock().unwrap()) {
                let mut served = self.servers.lock().unwrap().remove(&name).expect("live");
                let pid = served.child.id();
                served.child.kill().unwrap(); // SIGKILL: no shutdown, no cleanup.
                let status = served.child.wait().unwrap();
                use std::os::unix::process::ExitStatusExt;
                assert_eq!(status.signal(), Some(9), "{status:?}");
                *self.killed.lock().unwrap() = Some((name, pid));
            }
        }
        self.inner.send(request)
    }
}

/// Raw HTTP through `t`.
fn send(t: &HttpTransport, method: Method, url: String, ct: &str, body: &[u8]) -> Response {
    t.send(Request {
        method,
        url,
        headers: vec![("content-type".into(), ct.into())],
        body: body.to_vec(),
        timeout: Duration::from_secs(30),
        max_response_bytes: 1 << 20,
        abandon_on_cancel: true,
    })
    .unwrap()
}

fn error_code(r: &Response) -> String {
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    v["error"].as_str().unwrap().to_string()
}

#[test]
fn an_instance_killed_mid_run_is_retried_on_another_through_nginx() {
    let started = Instant::now();
    let pg = TempPostgres::start();
    let dir = temp_dir("sigkill");
    let seal = dir.join("seal.key");
    psi(&["seal-key", "new", s(&seal)]);
    let pw = pg.password_file();
    let url = pg.url();
    let db = [
        "--db",
        url.as_str(),
        "--db-password-file",
        s(&pw),
        "--seal-key-file",
        s(&seal),
        "--max-client-items",
        "1000",
    ];
    // 300 registry entries, `+1202` and 7 digits, entry i labeled `user-i`.
    let mut import = vec!["import", "--synthetic", "300"];
    import.extend(db);
    psi(&import);

    let names = ["psi1", "psi2", "psi3"];
    let mut servers = HashMap::new();
    for name in names {
        let mut args = vec![
            "--listen",
            "127.0.0.1:0",
            "--instance",
            name,
            "--items-per-hour",
            "0",
            "--trusted-proxy",
            "127.0.0.0/8",
        ];
        args.extend(db);
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
        let (child, line) = common::spawn_serve_logging(&args, &[], log);
        let url = common::url_of(&line);
        let addr: SocketAddr = url
            .strip_prefix("http://")
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        servers.insert(name.to_string(), Served { child, addr });
    }
    let addrs: Vec<SocketAddr> = names.iter().map(|n| servers[*n].addr).collect();
    let pids: Vec<u32> = names.iter().map(|n| servers[*n].child.id()).collect();
    let nginx = TempNginx::start(&nginx_conf(&addrs));
    let servers = Arc::new(Mutex::new(servers));
    let transport = Arc::new(Killer {
        inner: HttpTransport::new(),
        servers: servers.clone(),
        armed: Mutex::new(false),
        killed: Mutex::new(None),
        seen: Mutex::new(Vec::new()),
    });

    // 100 contacts, 40 of them in the registry.
    let items: Vec<Vec<u8>> = (0..100u64)
        .map(|k| {
            if k % 5 < 2 {
                format!("+1202{:07}", k * 7 % 300).into_bytes()
            } else {
                format!("+1303{k:07}").into_bytes()
            }
        })
        .collect();
    let expected: Vec<usize> = (0..items.len()).filter(|k| k % 5 < 2).collect();
    let check = |report: &psi_client::MatchReport| {
        let got: Vec<usize> = report.matches.iter().map(|m| m.index).collect();
        assert_eq!(got, expected, "{}", nginx.logs());
        for m in &report.matches {
            let i: u64 = std::str::from_utf8(&m.item).unwrap()[5..].parse().unwrap();
            assert_eq!(m.label, Some(format!("user-{i}")));
        }
    };
    let client = Client::with_transport(
        &nginx.base_url(),
        transport.clone(),
        ClientConfig::default()
            .with_threads(Threads::new(2))
            .with_timeout(Duration::from_secs(30))
            .with_retries(2),
    );

    // Mid-run: the session is created, its instance SIGKILLed before the first step; the
    // step through nginx is 421 wrong_instance and the retry completes elsewhere.
    *transport.armed.lock().unwrap() = true;
    let mut retried = Vec::new();
    let report = client
        .match_items(
            items.clone(),
            Protocol::Dh,
            &mut |p: Progress| retried.extend(p.retry.map(|r| r.cause)),
            &CancelToken::new(),
        )
        .unwrap_or_else(|e| panic!("the retry through nginx: {e}\n{}", nginx.logs()));
    check(&report);
    assert_eq!(
        retried,
        [RetryCause::Http {
            status: 421,
            code: ErrorCode::WrongInstance,
            retry_after: None
        }],
        "{}",
        nginx.logs()
    );
    let (dead, dead_pid) = transport.killed.lock().unwrap().clone().expect("killed");
    let seen = transport.seen.lock().unwrap().clone();
    assert_eq!(
        seen.first(),
        Some(&dead),
        "the first session was the killed one's"
    );
    let last = seen.last().unwrap();
    assert_ne!(*last, dead, "the retry ran on a live instance: {seen:?}");
    assert!(!Path::new(&format!("/proc/{dead_pid}")).exists());

    // By hand, through nginx: a session of a live instance, that instance killed, the
    // session's step is wrong_instance from a backup (never nginx's 502).
    let t = HttpTransport::new();
    let base = nginx.base_url();
    let r = send(
        &t,
        Method::Post,
        format!("{base}/v1/sessions"),
        "application/json",
        br#"{"protocol":"dh-psi","client_items":3}"#,
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let id = v["session_id"].as_str().unwrap().to_string();
    let holder = name_of(&id);
    assert_ne!(holder, dead);
    drop(
        servers
            .lock()
            .unwrap()
            .remove(&holder)
            .expect("a live instance"),
    );
    let r = send(
        &t,
        Method::Post,
        format!("{base}/v1/sessions/{id}/dh/query"),
        "application/octet-stream",
        &[0u8; 16],
    );
    assert_eq!(r.status, 421, "{}", nginx.logs());
    assert_eq!(error_code(&r), "wrong_instance");
    // The instance left serves a whole run through nginx.
    let report = client
        .match_items(
            items.clone(),
            Protocol::Dh,
            &mut |_| {},
            &CancelToken::new(),
        )
        .unwrap_or_else(|e| panic!("a run on the last instance: {e}\n{}", nginx.logs()));
    check(&report);

    // The instance left stops cleanly on SIGTERM (its blocking PostgreSQL connections are
    // closed off the async workers: dropping one there panicked).
    let (last, mut served) = servers.lock().unwrap().drain().next().expect("one left");
    let term = Command::new("kill")
        .args(["-TERM", &served.child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = served.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "{last} did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = std::fs::read_to_string(dir.join(format!("{last}.log"))).unwrap();
    assert!(
        status.success() && !log.contains("panicked"),
        "{last} on SIGTERM: {status:?}\n{log}"
    );
    drop(served);

    // Every server process is gone once dropped: none left behind.
    drop(client);
    drop(transport);
    drop(servers);
    for pid in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "psi serve {pid} left running"
        );
    }
    drop(nginx);
    drop(pg);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(180),
        "{:?}",
        started.elapsed()
    );
}
