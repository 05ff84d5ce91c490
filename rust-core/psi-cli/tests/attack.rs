//! `psi attack --quick` against the real `psi serve` on loopback: two attacks of issue 23
//! (the session table filled, item 1; the OT slots held by refused requests, item 2) and
//! the budget drain of issue 35 (item 5), each beside honest clients, and every honest run
//! completes correctly. Keeps the harness of
//! docs/reliability.md ("Attacks beside honest clients") from rotting. No timed
//! assertions: the command is bounded by its own --max-secs and --setup-secs, and the test
//! kills it after 300 s.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `psi attack --quick --json` with `attacks`, 2 honest clients and `runs` runs of 50
/// contacts per phase: its rows.
fn attack_rows(attacks: &str, runs: u64) -> Vec<serde_json::Value> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_psi"))
        .args(["attack", "--quick", "--json", "--registry-size", "2000"])
        .args(["--attack", attacks])
        .args(["--honest-clients", "2", "--contacts", "50"])
        .args([
            "--runs",
            &runs.to_string(),
            "--max-secs",
            "90",
            "--setup-secs",
            "60",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        // At most 1 MiB of output.
        let _ = (&mut stdout).take(1 << 20).read_to_string(&mut s);
        s
    });
    let mut stderr = child.stderr.take().unwrap();
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = (&mut stderr).take(1 << 20).read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = reader.join().unwrap();
    let err = err_reader.join().unwrap();
    let status = status.unwrap_or_else(|| panic!("psi attack did not end in 300 s: {err}"));
    assert!(status.success(), "psi attack failed: {err}\n{out}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    rows.as_array().unwrap().clone()
}

#[test]
fn honest_clients_complete_beside_the_session_fill_and_ot_slot_attacks() {
    let runs = 4;
    let rows = attack_rows("session-fill,ot-slot-hold", runs);
    let out = serde_json::to_string(&rows).unwrap();
    assert_eq!(rows.len(), 2, "{out}");
    for (row, name) in rows.iter().zip(["session-fill", "ot-slot-hold"]) {
        assert_eq!(row["attack"], name);
        assert_eq!(row["attack_in_place"], true, "{name}: {out}");
        for phase in ["baseline", "under_attack"] {
            let h = &row[phase];
            assert_eq!(h["ok"], runs, "{name} {phase}: {out}");
            assert_eq!(h["wrong"], 0, "{name} {phase}: {out}");
            assert_eq!(h["failed"], 0, "{name} {phase}: {out}");
        }
        // The attacker was answered (sessions created, then refused).
        let outcomes = row["attacker_outcomes"].as_object().unwrap();
        assert!(!outcomes.is_empty(), "{name}: {out}");
    }
    let fill = rows[0]["attacker_outcomes"].as_object().unwrap();
    assert!(
        fill.get("201").and_then(|v| v.as_u64()).unwrap_or(0) >= 100,
        "the attack filled the table: {out}"
    );
    let hold = rows[1]["attacker_outcomes"].as_object().unwrap();
    assert!(
        hold.get("create: 201")
            .and_then(|v| v.as_u64())
            .unwrap_or(0)
            >= 8,
        "the attack took every OT slot: {out}"
    );
}

/// Issue 35 item 5: other addresses of the honest clients' /24s drain their networks'
/// budgets and the server-wide ceiling; each honest client, below its floor (ADR 0044),
/// still completes every run.
#[test]
fn honest_clients_below_their_floor_complete_beside_the_budget_drain() {
    let runs = 4;
    let rows = attack_rows("budget-drain", runs);
    let out = serde_json::to_string(&rows).unwrap();
    assert_eq!(rows.len(), 1, "{out}");
    let row = &rows[0];
    assert_eq!(row["attack_in_place"], true, "{out}");
    for phase in ["baseline", "under_attack"] {
        assert_eq!(row[phase]["ok"], runs, "{phase}: {out}");
        assert_eq!(row[phase]["failed"], 0, "{phase}: {out}");
    }
    // The shared levels were spent: the attacker was refused.
    let outcomes = row["attacker_outcomes"].as_object().unwrap();
    assert!(
        outcomes
            .get("429 rate_limited")
            .and_then(|v| v.as_u64())
            .unwrap_or(0)
            > 0,
        "{out}"
    );
}
