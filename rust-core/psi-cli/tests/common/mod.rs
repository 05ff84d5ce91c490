//! Helpers shared by the CLI's integration tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `psi ARGS` with no input, killed (and the test failed) after `limit`:
/// (success, stdout, stderr).
pub fn run_psi(args: &[&str], limit: Duration) -> (bool, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_psi"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run psi");
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("wait for psi").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("psi {args:?} took over {} s", limit.as_secs());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("psi output");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A fresh directory for one test, `psi-cli-PREFIX-NAME-...` under the system's temporary
/// directory (`psi_test_support::fresh_dir`).
pub fn temp_dir(prefix: &str, name: &str) -> PathBuf {
    psi_test_support::fresh_dir(&format!("psi-cli-{prefix}-{name}"))
}

/// Starts `psi serve ARGS...` (with `env` added) and waits for its first stdout line, the
/// "listening on URL" line: returns the process and that line.
pub fn spawn_serve(args: &[&str], env: &[(&str, &str)]) -> (Child, String) {
    spawn_serve_logging(args, env, Stdio::null())
}

/// [`spawn_serve`] with the server's log (stderr) sent to `log`, a file for instance.
pub fn spawn_serve_logging(
    args: &[&str],
    env: &[(&str, &str)],
    log: impl Into<Stdio>,
) -> (Child, String) {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_psi"))
        .envs(env.iter().copied())
        .arg("serve")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line)
}

/// The URL at the end of `psi serve`'s "listening on URL" line.
pub fn url_of(line: &str) -> String {
    line.split_whitespace()
        .last()
        .unwrap_or_default()
        .to_string()
}
