//! Helpers shared by the CLI's integration tests.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};

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
