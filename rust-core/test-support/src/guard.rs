//! Cleanup that also happens when the test process dies without running destructors: a
//! panic in a test that holds a process-wide server (a `static` is never dropped), a
//! `std::process::exit`, a SIGKILL from a harness timeout.
//!
//! Each server gets a small `sh` watchdog, started before the server itself, whose stdin is
//! a pipe that only this process holds (std marks its pipe ends close-on-exec, so no other
//! child inherits it). The watchdog blocks reading that pipe. When the owner releases the
//! guard, or the process ends and the kernel closes the pipe, the read returns and the
//! watchdog runs its cleanup script (stop the server, remove its directory). One path for
//! the normal end and the abnormal one; no polling, no pid that could be reused.

use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Instant;

use crate::proc::WAIT;

pub(crate) struct ExitGuard {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl ExitGuard {
    /// Starts `sh -c` with `script`, which must begin by reading one line from stdin
    /// (`read -r note`): that line is what [`ExitGuard::release`] sends, or empty when the
    /// process ended. `args` are the script's positional parameters ($1...).
    pub(crate) fn spawn(script: &str, args: &[&std::ffi::OsStr]) -> ExitGuard {
        // SIGINT and SIGHUP are ignored so that Ctrl-C on `cargo test`, which reaches the
        // whole foreground process group, still lets the watchdog clean up.
        let full = format!("trap '' INT HUP\n{script}");
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(full)
            .arg("psi-test-support-guard")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting the cleanup watchdog (sh): {e}"));
        let stdin = child.stdin.take();
        ExitGuard { child, stdin }
    }

    /// Tells the watchdog to clean up now, passing `note` as its first line, and waits (at
    /// most [`WAIT`]) until it has.
    pub(crate) fn release(&mut self, note: &str) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = writeln!(stdin, "{note}");
            drop(stdin);
        }
        let deadline = Instant::now() + WAIT;
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(20))
                }
                Ok(None) => {
                    // Not a panic: this runs from Drop, maybe while unwinding.
                    eprintln!(
                        "psi-test-support: cleanup watchdog still running after 30 s; killed"
                    );
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return;
                }
            }
        }
    }
}

impl Drop for ExitGuard {
    fn drop(&mut self) {
        self.release("");
    }
}
