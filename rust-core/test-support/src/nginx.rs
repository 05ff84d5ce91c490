//! A throwaway nginx on 127.0.0.1 for tests: the load balancer in front of several
//! `psi serve` instances (issue 22).
//!
//! [`TempNginx::start`] writes a whole nginx.conf around the `http { }` body the test gives,
//! with every path (pid, logs, temporary files) in a fresh directory, and runs nginx in the
//! foreground as a child of the test. Dropping it stops nginx (SIGTERM, so the master takes
//! its worker down too) and removes the directory; a watchdog does the same when the test
//! process dies first (`crate::guard`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::guard::ExitGuard;
use crate::proc::{WAIT, accepts, euid, find_program, free_port, fresh_dir, tail};

/// The placeholder in the body that becomes `127.0.0.1:PORT`.
pub const LISTEN: &str = "{{listen}}";

pub struct TempNginx {
    dir: PathBuf,
    port: u16,
    child: Child,
    guard: ExitGuard,
}

impl TempNginx {
    /// Starts nginx with `http_body` (the inside of `http { }`, with `{{listen}}` where a
    /// `listen` directive takes its address) on a free port; returns once the port accepts
    /// connections. Panics (naming ci/setup.sh) when nginx is not installed, and with
    /// nginx's error log when it does not start.
    pub fn start(http_body: &str) -> TempNginx {
        assert!(
            http_body.contains(LISTEN),
            "TempNginx::start: the http body has no {LISTEN} placeholder"
        );
        let nginx = find_program("nginx", &["/usr/sbin", "/usr/local/sbin", "/usr/local/nginx/sbin"])
            .unwrap_or_else(|| {
                panic!(
                    "nginx not found on PATH or in /usr/sbin. The Rust tests start their own \
                     nginx; install it with `source ci/setup.sh && psi_setup_nginx` (ci/test.sh does)."
                )
            });
        let dir = fresh_dir("psi-nginx");
        let mut guard = Some(ExitGuard::spawn(
            r#"read -r note
dir=$1
if [ "$note" != stopped ] && [ -s "$dir/master.pid" ]; then
  pid=$(cat "$dir/master.pid")
  kill -TERM "$pid" 2>/dev/null
  i=0
  while kill -0 "$pid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
fi
rm -rf "$dir"
"#,
            &[dir.as_os_str()],
        ));

        // The port is picked free and bound by nginx a moment later; on a clash, another.
        for attempt in 1..=5 {
            let port = free_port();
            std::fs::write(dir.join("nginx.conf"), config(&dir, port, http_body))
                .unwrap_or_else(|e| panic!("writing nginx.conf: {e}"));
            let error_log = dir.join("error.log");
            let _ = std::fs::remove_file(&error_log);
            let stderr = std::fs::File::create(dir.join("stderr.log"))
                .unwrap_or_else(|e| panic!("creating nginx's stderr file: {e}"));
            let mut child = Command::new(&nginx)
                .arg("-p")
                .arg(&dir)
                .arg("-c")
                .arg(dir.join("nginx.conf"))
                .arg("-e")
                .arg(&error_log)
                .current_dir(&dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(stderr)
                .spawn()
                .unwrap_or_else(|e| panic!("starting {}: {e}", nginx.display()));
            let _ = std::fs::write(dir.join("master.pid"), child.id().to_string());

            let deadline = Instant::now() + WAIT;
            loop {
                if accepts(port) {
                    return TempNginx {
                        dir,
                        port,
                        child,
                        guard: guard.take().expect("set above"),
                    };
                }
                if let Ok(Some(status)) = child.try_wait() {
                    let logs = logs(&dir);
                    if attempt < 5 && logs.contains("Address already in use") {
                        break;
                    }
                    panic!(
                        "nginx exited ({status}) before accepting connections:\n{}",
                        tail(&logs)
                    );
                }
                if Instant::now() >= deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "nginx did not accept connections on 127.0.0.1:{port} within 30 s:\n{}",
                        tail(&logs(&dir))
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// nginx's error log and stderr so far, for a test's failure message.
    pub fn logs(&self) -> String {
        logs(&self.dir)
    }

    /// The directory of its config, logs and temporary files; removed on drop.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for TempNginx {
    fn drop(&mut self) {
        // SIGTERM (fast shutdown): the master stops its worker, then exits. SIGKILL would
        // leave the worker listening.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Ok(None) => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break;
                }
            }
        }
        self.guard.release("stopped");
    }
}

fn config(dir: &Path, port: u16, http_body: &str) -> String {
    let d = dir.display();
    // As root, workers would run as `nobody`; root keeps the temporary paths writable
    // without chowning them (a test machine, loopback only).
    let user = if euid() == 0 { "user root;\n" } else { "" };
    let body = http_body.replace(LISTEN, &format!("127.0.0.1:{port}"));
    format!(
        "daemon off;
master_process on;
worker_processes 1;
{user}pid {d}/nginx.pid;
error_log {d}/error.log notice;
events {{}}
http {{
    access_log {d}/access.log;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
{body}
}}
"
    )
}

fn logs(dir: &Path) -> String {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    format!("{}{}", read("stderr.log"), read("error.log"))
}

/// The project's tested example, docs/deploy/nginx.conf, with its example addresses
/// replaced by a test's: the listen address by [`LISTEN`], instance `psiN`'s
/// `10.0.0.1N:8080` by `addrs[N-1]`. Panics when the file no longer holds one of them.
pub fn deploy_conf(addrs: &[std::net::SocketAddr]) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/deploy/nginx.conf");
    let mut conf = std::fs::read_to_string(path).unwrap();
    let mut swap = |from: &str, to: &str| {
        assert!(
            conf.contains(from),
            "docs/deploy/nginx.conf has no `{from}`"
        );
        conf = conf.replace(from, to);
    };
    swap("listen 80;", &format!("listen {LISTEN};"));
    for (i, addr) in addrs.iter().enumerate() {
        swap(&format!("10.0.0.1{}:8080", i + 1), &addr.to_string());
    }
    conf
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{Ipv4Addr, TcpListener, TcpStream};

    /// A one-route HTTP responder on its own thread: answers each request with `body` and
    /// an `x-upstream` header naming itself.
    fn upstream(body: &'static str) -> u16 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { return };
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                let mut req = Vec::new();
                let mut buf = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nx-upstream: {port}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        port
    }

    fn get(port: u16, path: &str) -> String {
        let mut s = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut resp = String::new();
        s.read_to_string(&mut resp).unwrap();
        resp
    }

    #[test]
    fn proxies_to_an_upstream_and_stops_on_drop() {
        let up = upstream("hello from upstream");
        let nginx = TempNginx::start(&format!(
            "server {{ listen {LISTEN}; location / {{ proxy_pass http://127.0.0.1:{up}; }} }}"
        ));
        assert_eq!(
            nginx.base_url(),
            format!("http://127.0.0.1:{}", nginx.port())
        );
        let resp = get(nginx.port(), "/x");
        assert!(resp.starts_with("HTTP/1.1 200"), "{resp}\n{}", nginx.logs());
        assert!(resp.contains("hello from upstream"), "{resp}");
        assert!(resp.contains(&format!("x-upstream: {up}")), "{resp}");
        assert!(
            resp.to_ascii_lowercase().contains("server: nginx"),
            "not through nginx: {resp}"
        );

        let (port, dir) = (nginx.port(), nginx.dir().to_path_buf());
        drop(nginx);
        assert!(!accepts(port), "nginx still listening after drop");
        assert!(!dir.exists(), "{} left behind", dir.display());
    }

    #[test]
    fn balances_across_two_upstreams() {
        let (a, b) = (upstream("a"), upstream("b"));
        let nginx = TempNginx::start(&format!(
            "upstream psi {{ server 127.0.0.1:{a}; server 127.0.0.1:{b}; }}
             server {{ listen {LISTEN}; location / {{ proxy_pass http://psi; }} }}"
        ));
        let seen: std::collections::HashSet<String> = (0..4)
            .map(|_| {
                let r = get(nginx.port(), "/");
                r.lines()
                    .find(|l| l.starts_with("x-upstream"))
                    .unwrap_or_default()
                    .to_string()
            })
            .collect();
        assert_eq!(seen.len(), 2, "round robin reached {seen:?}");
    }

    /// A TempNginx that is never dropped (leaked, as a static would be) still goes away
    /// with its process: a child copy of this test binary leaks one and exits.
    #[test]
    fn a_leaked_nginx_stops_when_the_process_ends() {
        if std::env::var_os("PSI_TS_CHILD").is_some() {
            let nginx = TempNginx::start(&format!("server {{ listen {LISTEN}; return 204; }}"));
            println!("PSI_TS {} {}", nginx.port(), nginx.dir().display());
            std::mem::forget(nginx);
            return;
        }
        crate::proc::child_leaves_nothing(
            "nginx::tests::a_leaked_nginx_stops_when_the_process_ends",
            "the leaked nginx",
        );
    }

    #[test]
    #[should_panic(expected = "nginx exited")]
    fn a_bad_config_fails_with_the_log() {
        let _ = TempNginx::start(&format!(
            "server {{ listen {LISTEN}; no_such_directive on; }}"
        ));
    }
}
