//! The `psi` binary end to end: the demo finds the known overlap, the bench smoke run
//! completes with correct results, and bad arguments fail cleanly.

use std::process::Command;

fn psi(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_psi"))
        .args(args)
        .output()
        .expect("run psi");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn demo_finds_the_known_overlap() {
    let (ok, out, err) = psi(&["demo", "--registry-size", "3000", "--threads", "2"]);
    assert!(ok, "{out}\n{err}");
    assert!(
        out.contains("36 of 250 contacts are registered (expected 36)"),
        "{out}"
    );
    assert!(out.contains("bytes client -> server:      8,017"), "{out}");
    // One line per match with the contact's name.
    assert!(out.contains("Ken Goldwasser"), "{out}");
}

#[test]
fn demo_with_a_tiny_registry_and_one_thread() {
    let (ok, out, err) = psi(&["demo", "--registry-size", "10", "--threads", "1"]);
    assert!(ok, "{out}\n{err}");
    assert!(
        out.contains("10 of 250 contacts are registered (expected 10)"),
        "{out}"
    );
}

#[test]
fn bench_quick_runs_and_checks_results() {
    let (ok, out, err) = psi(&["bench", "--quick", "--threads", "1"]);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("| 1,000 | 10,000 | 1 |"), "{out}");
    assert!(out.contains("scalar multiplication"), "{out}");
}

#[test]
fn bad_arguments_fail_with_usage() {
    let (ok, _, err) = psi(&["demo", "--protocol", "nope"]);
    assert!(!ok);
    assert!(err.contains("invalid value 'nope'"), "{err}");
}
