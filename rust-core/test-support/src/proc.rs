//! Small process and file helpers shared by the PostgreSQL and nginx modules: commands run
//! with a deadline, fresh temporary directories, free ports, random secrets.

use std::io::Read;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Every wait in this crate ends after this long with a panic that says what was awaited.
pub(crate) const WAIT: Duration = Duration::from_secs(30);

/// Runs `cmd` to completion with stdout and stderr captured, killing it and panicking after
/// [`WAIT`]. `what` names the step in the panic message.
pub(crate) fn run_bounded(cmd: &mut Command, what: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: could not start {:?}: {e}", cmd.get_program()));
    // Readers on their own threads, so a chatty child cannot fill a pipe and stall.
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let out_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = out.read_to_end(&mut b);
        b
    });
    let err_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = err.read_to_end(&mut b);
        b
    });
    let deadline = Instant::now() + WAIT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{what}: still running after {} s; killed", WAIT.as_secs());
            }
            Err(e) => panic!("{what}: waiting failed: {e}"),
        }
    };
    Output {
        status,
        stdout: out_t.join().unwrap_or_default(),
        stderr: err_t.join().unwrap_or_default(),
    }
}

/// The effective user id, from /proc (Linux), else `id -u`.
pub(crate) fn euid() -> u32 {
    if let Ok(status) = std::fs::read_to_string("/proc/self/status")
        && let Some(line) = status.lines().find(|l| l.starts_with("Uid:"))
        && let Some(e) = line.split_whitespace().nth(2)
        && let Ok(id) = e.parse()
    {
        return id;
    }
    id_of("-u", None).expect("the effective user id (`id -u`)")
}

/// `id -u NAME` / `id -g NAME`; None when the user does not exist.
pub(crate) fn id_of(flag: &str, user: Option<&str>) -> Option<u32> {
    let mut cmd = Command::new("id");
    cmd.arg(flag);
    if let Some(u) = user {
        cmd.arg(u);
    }
    let out = cmd.stderr(Stdio::null()).output().ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// A new, empty directory `<temp>/<prefix>-<pid>-<n>-<random>`, mode 0755. The caller owns
/// its removal. Under the system temporary directory and not under the checkout: a checkout
/// may sit under a 0700 directory that an unprivileged server user cannot traverse.
pub fn fresh_dir(prefix: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "{prefix}-{}-{n}-{}",
        std::process::id(),
        &random_hex(4)
    ));
    std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("chmod 0755 {}: {e}", dir.display()));
    dir
}

/// `bytes` random bytes from the OS, as lower-case hex.
pub(crate) fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .expect("reading /dev/urandom");
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A port that was free on 127.0.0.1 a moment ago (bound to port 0, then released). Another
/// process can take it before the server binds it: callers retry on a clash.
pub(crate) fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("binding 127.0.0.1:0 to pick a free port")
}

/// Whether something accepts TCP connections on 127.0.0.1:`port` right now.
pub(crate) fn accepts(port: u16) -> bool {
    TcpStream::connect_timeout(
        &(Ipv4Addr::LOCALHOST, port).into(),
        Duration::from_millis(500),
    )
    .is_ok()
}

/// The first `name` found in the directories of PATH, then in `extra`.
pub(crate) fn find_program(name: &str, extra: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(extra.iter().map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

pub(crate) fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The last 40 lines of `s`, for panic messages.
pub(crate) fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// For the tests that a server left behind still goes away with its process: runs the
/// test `test` of this test binary again as a child (with `PSI_TS_CHILD` set, so the test
/// knows to start `what` and print `PSI_TS PORT DIR`), then waits until that port no
/// longer accepts and that directory is gone.
#[cfg(test)]
pub(crate) fn child_leaves_nothing(test: &str, what: &str) {
    let out = run_bounded(
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", test, "--nocapture"])
            .env("PSI_TS_CHILD", "1"),
        "the child test process",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("PSI_TS "))
        .expect("the child's report");
    let (port, dir) = line.split_once(' ').unwrap();
    let port: u16 = port.parse().unwrap();
    let dir = PathBuf::from(dir);
    let deadline = Instant::now() + WAIT;
    while accepts(port) || dir.exists() {
        assert!(Instant::now() < deadline, "{what} outlived its process");
        std::thread::sleep(Duration::from_millis(50));
    }
}
