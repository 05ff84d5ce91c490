//! The `psi` binary end to end: the demo finds the known overlap, the bench smoke run
//! completes with correct results, and bad arguments fail cleanly.

mod common;

use std::process::Command;

use psi_test_support::pki;

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

/// A `psi serve` on a free loopback port, killed when dropped (also when a test fails).
struct Served {
    child: std::process::Child,
    url: String,
}

impl Served {
    /// `psi serve --db DB --listen 127.0.0.1:0 EXTRA...`; waits for its address line.
    fn start(db: &str, extra: &[&str]) -> Served {
        let mut args = vec!["--db", db, "--listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let (child, line) = common::spawn_serve(&args, &[]);
        Served {
            child,
            url: common::url_of(&line),
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn demo_finds_the_known_overlap() {
    let (ok, out, err) = psi(&[
        "demo",
        "--registry-size",
        "3000",
        "--threads",
        "2",
        "--protocol",
        "dh",
    ]);
    assert!(ok, "{out}\n{err}");
    assert!(
        out.contains("36 of 250 contacts are registered (expected 36)"),
        "{out}"
    );
    assert!(out.contains("bytes client -> server:      8,017"), "{out}");
    assert!(!out.contains("protocol chosen"), "{out}");
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
    // CM20-PSI and KKRT end to end over loopback TCP (each run checks its matches).
    assert!(out.contains("End to end over loopback TCP"), "{out}");
    assert!(out.contains("| 4,096 | 4,096 | 2 |"), "{out}");
}

/// The lanes benchmark runs OT-PSI and CM20-PSI with and without label lanes (each run
/// checks its matches, the lanes run that every match got its label) and prints a row per
/// protocol; a protocol without lanes is refused with a clear error.
#[test]
fn bench_lanes_runs_both_protocols_and_refuses_one_without_lanes() {
    let (ok, out, err) = psi(&["bench", "--lanes", "--quick", "--threads", "1"]);
    assert!(ok, "{out}\n{err}");
    for row in ["| ot-psi | 2^10 |", "| cm20-psi | 2^10 |"] {
        assert!(out.contains(row), "{row}\n{out}");
    }
    let (ok, out, err) = psi(&["bench", "--lanes", "--quick", "--protocol", "dh"]);
    assert!(!ok, "{out}");
    assert!(err.contains("dh-psi has no label lanes"), "{err}");
}

/// The sync-mode benchmark runs the real path at a small size: the first sync, runs in
/// sync, the day's churn and the delta (each run checks its matches and labels, the delta
/// run that the removed entry stopped matching and the added one matched) and prints a
/// row per figure beside the formula.
#[test]
fn bench_sync_runs_the_real_path_and_checks_results() {
    let (ok, out, err) = psi(&["bench", "--sync=4000", "--threads", "1"]);
    assert!(ok, "{out}\n{err}");
    for row in [
        "| first sync (snapshot) | 4,000 |",
        "| one run, 1 contact, labels, both ways | 4,000 |",
        "| one run, 1,000 contacts | 4,000 |",
        "| a day later: delta, 0.1% churn (half added, half removed) | 4,000 |",
    ] {
        assert!(out.contains(row), "{row}\n{out}");
    }
    assert!(out.contains("2 added, 2 removed"), "{out}");
    assert!(out.contains("At 10^8 the formula uses w = 28"), "{out}");
}

/// The fixed-cost benchmark runs the streamed loopback TCP run, the base OTs alone and the
/// in-process run (each checks its result) and prints the split.
#[test]
fn bench_ot_fixed_cost_runs_and_splits() {
    let (ok, out, err) = psi(&["bench", "--ot-fixed-cost", "2"]);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("median over loopback TCP:"), "{out}");
    assert!(
        out.contains("fixed-cost split (medians): base OTs client"),
        "{out}"
    );
    let walls = out
        .lines()
        .find_map(|l| l.strip_prefix("tcp wall ms per round: "))
        .expect("per-round line");
    assert_eq!(walls.split_whitespace().count(), 2, "{out}");
}

/// `--pin` puts the client and the server each on a CPU of its own: the first two this
/// process may use (Linux; a process allowed one CPU gets a clear error).
#[cfg(target_os = "linux")]
#[test]
fn bench_ot_fixed_cost_pins_each_side_to_a_core() {
    let (ok, out, err) = psi(&["bench", "--ot-fixed-cost", "1", "--pin"]);
    if !ok && err.contains("--pin needs two CPUs") {
        return;
    }
    assert!(ok, "{out}\n{err}");
    let pins = out
        .lines()
        .find_map(|l| l.split(", client pinned to CPU ").nth(1))
        .expect("the pinned CPUs in the header");
    let (client, rest) = pins
        .split_once(" and server to CPU ")
        .expect("the server's CPU");
    let server = rest.split(',').next().unwrap_or_default();
    assert_ne!(client, server, "{out}");
    assert!(out.contains("median over loopback TCP:"), "{out}");
}

#[test]
fn bad_arguments_fail_with_usage() {
    let (ok, _, err) = psi(&["demo", "--protocol", "nope"]);
    assert!(!ok);
    assert!(err.contains("invalid value 'nope'"), "{err}");
}

#[test]
fn demo_in_process_runs_every_protocol() {
    for protocol in ["dh", "ot", "cm20"] {
        let (ok, out, err) = psi(&[
            "demo",
            "--in-process",
            "--protocol",
            protocol,
            "--registry-size",
            "2000",
            "--threads",
            "1",
        ]);
        assert!(ok, "{protocol}: {out}\n{err}");
        assert!(
            out.contains("36 of 250 contacts are registered (expected 36)"),
            "{out}"
        );
    }
}

/// `psi ... --json | head`: output to a closed pipe ends the command quietly.
#[test]
fn a_closed_stdout_pipe_is_not_a_panic() {
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_psi"))
        .args(["demo", "--registry-size", "100", "--threads", "1", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run psi");
    drop(child.stdout.take()); // the reader goes away before the demo prints
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(out.status.success(), "{err}");
}

/// Rejected lines of a CRLF file are reported with their real line numbers.
#[test]
fn import_reports_rejected_lines_of_crlf_files() {
    let dir = std::env::temp_dir().join(format!("psi-cli-crlf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let csv = dir.join("contacts.csv");
    std::fs::write(
        &csv,
        "identifier,label\r\n+14155550123,alice\r\n\r\nnot a number,bad\r\nbob@example.com,bob\r\n",
    )
    .unwrap();
    let db = dir.join("r.sqlite");
    let (ok, out, err) = psi(&[
        "import",
        "--db",
        db.to_str().unwrap(),
        "--json",
        csv.to_str().unwrap(),
    ]);
    assert!(ok, "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["accepted"], 2);
    assert_eq!(v["rejected_rows"][0]["line"], 4, "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 26: a labeled registry whose first row has no label was read as plain text and
/// every labeled row rejected; `psi match` did the same. The whole file decides (any
/// comma: CSV), through the real `psi import` and `psi match`; both `--json` outputs give
/// the stable reason names (docs/contacts.md), with the message apart.
#[test]
fn import_and_match_read_csv_whose_first_row_has_no_label() {
    let dir = std::env::temp_dir().join(format!("psi-cli-first-unlabeled-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();
    std::fs::write(
        path("reg.csv"),
        "+14155550101\n+14155550102,Alice\n+14155550103,\n+14155550104,\"Smith, Bob\"\nnot a number,x\n",
    )
    .unwrap();
    std::fs::write(
        path("contacts.csv"),
        "+14155550101\n+14155550102,My Alice\ncall me,Nobody\n+14155550104,Bob\nbad@,x\n+14155550109,\n",
    )
    .unwrap();
    // A row that cannot be read like the others: refused, by line, without its data.
    std::fs::write(path("bad.csv"), "+14155550101\n+14155550102,Smith, John\n").unwrap();
    let db = path("r.sqlite");
    let (ok, out, err) = psi(&["import", "--db", &db, "--json", &path("reg.csv")]);
    assert!(ok, "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["accepted"], 4, "{out}");
    assert_eq!(v["rejected"], 1, "{out}");
    assert_eq!(v["format"], "csv", "{out}");
    assert_eq!(v["rows"], 5, "{out}");
    assert_eq!(v["labeled_rows"], 3, "{out}");
    assert_eq!(v["rejected_rows"][0]["line"], 5, "{out}");
    assert_eq!(v["rejected_rows"][0]["reason"], "NotAPhoneNumber", "{out}");
    assert_eq!(
        v["rejected_rows"][0]["message"], "not a phone number or email",
        "{out}"
    );
    let refused = psi(&["import", "--db", &db, &path("bad.csv")]);
    assert!(!refused.0, "{}", refused.1);
    assert!(refused.2.contains("line 2 has 3 cells"), "{}", refused.2);
    assert!(
        !refused.2.contains("Smith") && !refused.2.contains("555"),
        "{}",
        refused.2
    );
    let server = Served::start(&db, &[]);
    let (ok, out, err) = psi(&[
        "match",
        "--server",
        &server.url,
        "--protocol",
        "dh",
        "--json",
        &path("contacts.csv"),
    ]);
    let refused = psi(&["match", "--server", &server.url, &path("bad.csv")]);
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(ok, "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let matches: Vec<(u64, &str, Option<&str>, Option<&str>)> = v["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["line"].as_u64().unwrap(),
                m["identifier"].as_str().unwrap(),
                m["name"].as_str(),
                m["label"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        matches,
        vec![
            (1, "+14155550101", None, None),
            (2, "+14155550102", Some("My Alice"), Some("Alice")),
            (4, "+14155550104", Some("Bob"), Some("Smith, Bob")),
        ],
        "{out}"
    );
    assert_eq!(v["rows"], 6, "{out}");
    let rejected: Vec<(u64, &str)> = v["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["line"].as_u64().unwrap(), r["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(
        rejected,
        vec![(3, "NotAPhoneNumber"), (5, "BadEmail")],
        "{out}"
    );
    assert_eq!(
        v["rejected"][1]["message"], "malformed email address",
        "{out}"
    );
    assert!(!refused.0, "{}", refused.1);
    assert!(refused.2.contains("line 2 has 3 cells"), "{}", refused.2);
}

/// A fresh scratch directory `psi-cli-NAME-PID` with `reg.csv` (alice and bob, labeled),
/// `contacts.csv` (alice and carol) and `r.sqlite` imported from `reg.csv`.
fn two_entry_registry(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("psi-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();
    std::fs::write(
        path("reg.csv"),
        "alice@example.com,Alice\nbob@example.com,Bob\n",
    )
    .unwrap();
    std::fs::write(
        path("contacts.csv"),
        "alice@example.com\ncarol@example.com\n",
    )
    .unwrap();
    let (ok, _, err) = psi(&["import", "--db", &path("r.sqlite"), &path("reg.csv")]);
    assert!(ok, "{err}");
    dir
}

/// `--token-file` keeps the token out of the process list: the server reads its tokens from
/// a file, the client its token from another, and a wrong token is refused.
#[test]
fn tokens_come_from_files() {
    let dir = two_entry_registry("token-file");
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();
    std::fs::write(
        path("server-tokens"),
        "# accepted tokens\n\nfirst-token\nsecond-token\n",
    )
    .unwrap();
    std::fs::write(path("good"), "second-token\n").unwrap();
    std::fs::write(path("bad"), "not-a-token\n").unwrap();
    std::fs::write(path("empty"), "# nothing\n\n").unwrap();
    let db = path("r.sqlite");
    let tokens = path("server-tokens");
    let server = Served::start(&db, &["--token-file", &tokens]);
    let url = server.url.clone();
    let run = |token_file: &str| {
        psi(&[
            "match",
            "--server",
            &url,
            "--token-file",
            &path(token_file),
            &path("contacts.csv"),
        ])
    };
    let good = run("good");
    let bad = run("bad");
    let empty = run("empty");
    let missing = run("missing");
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(good.0, "{}", good.2);
    assert!(good.1.contains("alice@example.com"), "{}", good.1);
    assert!(!bad.0 && bad.2.contains("401"), "{}", bad.2);
    assert!(
        !empty.0 && empty.2.contains("no token in it"),
        "{}",
        empty.2
    );
    assert!(
        !missing.0 && missing.2.contains("token file"),
        "{}",
        missing.2
    );
    assert!(
        !bad.2.contains("not-a-token"),
        "the token leaked into an error: {}",
        bad.2
    );
}

/// `psi serve --tls-cert/--tls-key` and `psi match --tls-ca`: a match over HTTPS with a
/// private CA generated here; without `--tls-ca` the certificate is not trusted; plain
/// `http://` to a host that is not loopback is refused before any connection.
#[test]
fn serve_and_match_over_tls() {
    let dir = std::env::temp_dir().join(format!("psi-cli-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let (ca, cert, key) = pki::pki();
    std::fs::write(path("ca.pem"), ca).unwrap();
    std::fs::write(path("cert.pem"), cert).unwrap();
    std::fs::write(path("key.pem"), key).unwrap();
    std::fs::write(path("reg.csv"), "alice@example.com,Alice\n").unwrap();
    std::fs::write(
        path("contacts.csv"),
        "alice@example.com\ncarol@example.com\n",
    )
    .unwrap();
    let db = path("r.sqlite");
    let (ok, _, err) = psi(&["import", "--db", &db, &path("reg.csv")]);
    assert!(ok, "{err}");
    let (ok, _, err) = psi(&["serve", "--db", &db, "--tls-cert", &path("cert.pem")]);
    assert!(!ok && err.contains("--tls-key"), "{err}");
    let (cert, key) = (path("cert.pem"), path("key.pem"));
    let server = Served::start(
        &db,
        &[
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--header-read-timeout",
            "5",
            "--idle-timeout",
            "5",
            "--max-connections",
            "8",
            "--max-connections-per-address",
            "4",
            "--min-send-rate",
            "4096",
            "--send-grace",
            "5",
            "--max-response-bytes-in-flight",
            "67108864",
            "--max-response-bytes-per-address",
            "16777216",
            "--health-per-hour",
            "100",
        ],
    );
    let url = server.url.clone();
    let contacts = path("contacts.csv");
    let trusted = psi(&[
        "match",
        "--server",
        &url,
        "--tls-ca",
        &path("ca.pem"),
        &contacts,
    ]);
    let untrusted = psi(&["match", "--server", &url, &contacts]);
    let plain = psi(&[
        "match",
        "--server",
        &url.replace("https", "http"),
        &contacts,
    ]);
    drop(server);
    let remote = psi(&["match", "--server", "http://192.0.2.1:8080", &contacts]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    assert!(trusted.0, "{}", trusted.2);
    assert!(trusted.1.contains("alice@example.com"), "{}", trusted.1);
    assert!(
        // An untrusted certificate is its own, non-retryable reason (issue 34 item 8).
        !untrusted.0 && untrusted.2.contains("TLS failed") && untrusted.2.contains("UnknownIssuer"),
        "{}",
        untrusted.2
    );
    assert!(!plain.0 && plain.2.contains("https://"), "{}", plain.2);
    assert!(
        !remote.0 && remote.2.contains("refusing plain http://"),
        "{}",
        remote.2
    );
}

/// `psi token add/list/revoke` against the database of a running `psi serve`: an issued
/// token works at once, `list` never shows a token, and a revoked token is refused by the
/// same server without a restart.
#[test]
fn tokens_are_issued_and_revoked_while_the_server_runs() {
    let dir = std::env::temp_dir().join(format!("psi-cli-token-cmd-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();
    std::fs::write(path("reg.csv"), "alice@example.com,Alice\n").unwrap();
    std::fs::write(path("contacts.csv"), "alice@example.com\n").unwrap();
    let db = path("r.sqlite");
    let (ok, _, err) = psi(&["import", "--db", &db, &path("reg.csv")]);
    assert!(ok, "{err}");
    let (ok, out, err) = psi(&["token", "list", "--db", &db]);
    assert!(ok && out.contains("no tokens issued"), "{out}\n{err}");

    let server = Served::start(&db, &[]);
    let url = server.url.clone();
    let matched = |token_file: Option<&str>| {
        let mut args = vec!["match", "--server", &url];
        let tf;
        if let Some(f) = token_file {
            tf = path(f);
            args.extend(["--token-file", &tf]);
        }
        let c = path("contacts.csv");
        args.push(&c);
        psi(&args)
    };
    let open = matched(None);

    let (ok, token, err) = psi(&[
        "token",
        "add",
        "--db",
        &db,
        "--name",
        "alice app",
        "--items-per-hour",
        "500",
    ]);
    assert!(ok, "{err}");
    let token = token.trim().to_string();
    assert!(token.starts_with("psi_") && token.len() == 68, "{token}");
    assert!(err.contains("issued token 1 (alice app)"), "{err}");
    std::fs::write(path("alice.token"), &token).unwrap();
    let (_, second, _) = psi(&["token", "add", "--db", &db]);
    assert_ne!(second.trim(), token);

    let without = matched(None);
    let with = matched(Some("alice.token"));
    let (ok, list, err) = psi(&["token", "list", "--db", &db, "--json"]);
    assert!(ok, "{err}");
    let (ok, out, err) = psi(&["token", "revoke", "--db", &db, "1"]);
    assert!(ok && out.contains("token 1 revoked"), "{out}\n{err}");
    let revoked = matched(Some("alice.token"));
    let (ok, table, _) = psi(&["token", "list", "--db", &db]);
    assert!(ok);
    let (ok, _, missing) = psi(&["token", "revoke", "--db", &db, "99"]);
    assert!(!ok && missing.contains("no token with id 99"), "{missing}");
    let (ok, _, bad_name) = psi(&["token", "add", "--db", &db, "--name", ""]);
    assert!(!ok && bad_name.contains("token name"), "{bad_name}");
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();

    assert!(open.0, "no token issued yet: open server\n{}", open.2);
    assert!(
        !without.0 && without.2.contains("401"),
        "the first issued token turns authentication on: {}",
        without.2
    );
    assert!(with.0 && with.1.contains("alice@example.com"), "{}", with.2);
    let v: serde_json::Value = serde_json::from_str(&list).unwrap();
    assert_eq!(v[0]["id"], 1);
    assert_eq!(v[0]["name"], "alice app");
    assert_eq!(v[0]["items_per_hour"], 500);
    assert_eq!(v[0]["revoked"], false);
    assert_eq!(v[1]["items_per_hour"], serde_json::Value::Null);
    assert!(!list.contains(&token) && !table.contains(&token));
    assert!(
        !revoked.0 && revoked.2.contains("401"),
        "revoked without a restart: {}",
        revoked.2
    );
    assert!(
        !revoked.2.contains(&token),
        "the token leaked: {}",
        revoked.2
    );
    assert!(
        table
            .lines()
            .nth(1)
            .is_some_and(|l| l.contains("revoked") && l.contains("alice app")),
        "{table}"
    );
}

/// `--protocol auto` is the default: `psi demo --json` reports the choice (inputs and both
/// predictions) and runs the chosen protocol; `--policy fewest-bytes` picks DH-PSI; the
/// in-process demo prints its predictions.
#[test]
fn demo_chooses_the_protocol_and_shows_why() {
    let demo = |extra: &[&str]| {
        let mut args = vec![
            "demo",
            "--registry-size",
            "2000",
            "--threads",
            "1",
            "--json",
        ];
        args.extend_from_slice(extra);
        let (ok, out, err) = psi(&args);
        assert!(ok, "{out}\n{err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    let v = demo(&[]);
    let c = &v["choice"];
    assert_eq!(c["protocol"], v["protocol"], "{v}");
    assert_eq!(c["policy"], "fastest");
    assert_eq!(c["predictions"].as_array().unwrap().len(), 2, "{c}");
    assert_eq!(c["inputs"]["server_source"], "measured", "{c}");
    assert_eq!(c["inputs"]["client_items"], 250);
    assert_eq!(c["inputs"]["server_items"], 2000);
    assert_eq!(c["health_requested"], true);
    for p in c["predictions"].as_array().unwrap() {
        assert!(p["total_ms"].as_f64().unwrap() > 0.0, "{p}");
        assert!(p["bytes_up"].as_u64().unwrap() > 8000, "{p}");
    }
    let lean = demo(&["--policy", "fewest-bytes"]);
    assert_eq!(lean["protocol"], "dh-psi", "{lean}");
    assert_eq!(lean["choice"]["policy"], "fewest-bytes");
    let fixed = demo(&["--protocol", "ot"]);
    assert_eq!(fixed["protocol"], "ot-psi");
    assert!(fixed["choice"].is_null(), "{fixed}");
    let (ok, out, err) = psi(&[
        "demo",
        "--in-process",
        "--registry-size",
        "2000",
        "--threads",
        "1",
    ]);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("<- chosen"), "{out}");
    assert!(out.contains("36 of 250 contacts are registered"), "{out}");
    let (ok, _, err) = psi(&["demo", "--policy", "cheapest"]);
    assert!(!ok && err.contains("fewest-bytes"), "{err}");
}

/// `psi match --cache-dir` keeps the measurements: the first automatic run asks for the
/// server's health and calibrates the device, the next uses what was stored and the
/// link the first run measured.
#[test]
fn match_keeps_its_measurements_in_the_cache_dir() {
    let dir = two_entry_registry("auto");
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let db = path("r.sqlite");
    let server = Served::start(&db, &[]);
    let cache = path("cache");
    let run = || {
        let (ok, out, err) = psi(&[
            "match",
            "--server",
            &server.url,
            "--cache-dir",
            &cache,
            "--network",
            "lab",
            "--json",
            &path("contacts.csv"),
        ]);
        assert!(ok, "{out}\n{err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    let first = run();
    let second = run();
    let stored = std::fs::read_to_string(path("cache/measurements.json")).unwrap();
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(first["matches"].as_array().unwrap().len(), 1, "{first}");
    assert_eq!(first["choice"]["health_requested"], true, "{first}");
    assert_eq!(first["choice"]["inputs"]["link"]["source"], "measured");
    assert_eq!(second["choice"]["health_requested"], false, "{second}");
    assert_eq!(second["choice"]["inputs"]["link"]["source"], "measured");
    assert!(
        second["choice"]["inputs"]["link"]["samples"]
            .as_u64()
            .unwrap()
            > 1
    );
    assert_eq!(second["matches"].as_array().unwrap().len(), 1);
    let m: serde_json::Value = serde_json::from_str(&stored).unwrap();
    // The device is calibrated where it could change the choice, else not (ADR 0054).
    if first["choice"]["inputs"]["device_source"] == "measured" {
        assert!(m["device"]["scalar_mult_ns"].as_f64().unwrap() > 0.0, "{m}");
    } else {
        assert!(m["device"].is_null(), "{m}");
    }
    assert_eq!(first["choice"]["health_with_session"], true, "{first}");
    assert!(m["networks"]["lab"]["rtt"].as_f64().unwrap() > 0.0, "{m}");
    assert_eq!(m["servers"].as_object().unwrap().len(), 1);
}

/// `psi demo --protocol gbf` over loopback HTTP, and `psi serve --enable-gbf` with
/// `psi match --protocol gbf` (refused by a server without the flag).
#[test]
fn gbf_demo_and_serve_match() {
    let (dir, server) = opt_in_demo_and_serve("gbf", "GBF-PSI", "--enable-gbf");
    let (ok, out, err) = psi(&[
        "match",
        "--server",
        &server.url,
        "--protocol",
        "gbf",
        "--json",
        dir.join("contacts.csv").to_str().unwrap(),
    ]);
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("alice@example.com"), "{out}");
    assert!(out.contains("gbf-psi"), "{out}");
}

/// The part of an opt-in protocol's CLI test both protocols share: `psi demo --protocol
/// <name>` finds the demo's 36 contacts and names `display`; a server without `flag` refuses
/// `psi match --protocol <name>`. Returns the two-entry registry's directory and a server
/// started with `flag` on it.
fn opt_in_demo_and_serve(name: &str, display: &str, flag: &str) -> (std::path::PathBuf, Served) {
    let (ok, out, err) = psi(&[
        "demo",
        "--protocol",
        name,
        "--registry-size",
        "3000",
        "--threads",
        "2",
    ]);
    assert!(ok, "{out}\n{err}");
    assert!(
        out.contains("36 of 250 contacts are registered (expected 36)"),
        "{out}"
    );
    assert!(out.contains(display), "{out}");
    let dir = two_entry_registry(name);
    let path = |file: &str| dir.join(file).to_str().unwrap().to_string();
    let db = path("r.sqlite");
    let plain = Served::start(&db, &[]);
    let refused = psi(&[
        "match",
        "--server",
        &plain.url,
        "--protocol",
        name,
        &path("contacts.csv"),
    ]);
    drop(plain);
    assert!(!refused.0, "{}", refused.1);
    assert!(refused.2.contains("unsupported"), "{}", refused.2);
    let server = Served::start(&db, &[flag]);
    (dir, server)
}

/// `psi demo --protocol cm20` over loopback HTTP, and `psi serve --enable-cm20` with
/// `psi match --protocol cm20` (refused by a server without the flag).
#[test]
fn cm20_demo_and_serve_match() {
    let (dir, server) = opt_in_demo_and_serve("cm20", "CM20-PSI", "--enable-cm20");
    let path = |file: &str| dir.join(file).to_str().unwrap().to_string();
    let (ok, out, err) = psi(&[
        "match",
        "--server",
        &server.url,
        "--protocol",
        "cm20",
        "--json",
        &path("contacts.csv"),
    ]);
    // `--protocol auto` (the default) against it: three candidates predicted, a run.
    let auto = psi(&[
        "match",
        "--server",
        &server.url,
        "--protocol",
        "auto",
        "--json",
        &path("contacts.csv"),
    ]);
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("alice@example.com"), "{out}");
    assert!(out.contains("cm20-psi"), "{out}");
    assert!(auto.0, "{}\n{}", auto.1, auto.2);
    let auto: serde_json::Value = serde_json::from_str(&auto.1).unwrap();
    assert_eq!(auto["matches"].as_array().unwrap().len(), 1, "{auto}");
    let predicted: Vec<&str> = auto["choice"]["predictions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["protocol"].as_str().unwrap())
        .collect();
    assert!(predicted.contains(&"cm20-psi"), "{auto}");
    assert_eq!(predicted.len(), 3, "{auto}");
}

/// `psi serve --probe-bytes-per-hour N` bounds each caller's probe bytes (429 with
/// Retry-After past it, the server keeps serving); 0 leaves the probe unlimited.
#[test]
fn serve_bounds_the_probe_budget_and_zero_is_unlimited() {
    use psi_client::{HttpTransport, Method, Request, Transport};
    let dir = two_entry_registry("probe-budget");
    let db = dir.join("r.sqlite").to_str().unwrap().to_string();
    let get = |url: &str, bytes: u64| {
        HttpTransport::new()
            .send(Request {
                method: Method::Get,
                url: format!("{url}/v1/probe?bytes={bytes}"),
                headers: vec![],
                body: vec![],
                timeout: std::time::Duration::from_secs(10),
                max_response_bytes: 1 << 20,
                abandon_on_cancel: true,
            })
            .unwrap()
    };
    let limited = Served::start(&db, &["--probe-bytes-per-hour", "100000"]);
    assert_eq!(get(&limited.url, 65_536).status, 200);
    let r = get(&limited.url, 65_536);
    assert_eq!(r.status, 429);
    assert!(r.header("retry-after").is_some());
    assert_eq!(
        get(&limited.url, 1000).status,
        200,
        "still within the budget"
    );
    drop(limited);
    // Unlimited: more than the default budget of 16 MiB (64 probes of 256 KiB).
    let open = Served::start(&db, &["--probe-bytes-per-hour", "0"]);
    for _ in 0..66 {
        assert_eq!(get(&open.url, 256 * 1024).status, 200);
    }
}

/// `psi serve --encoded-set-bytes-per-hour N` bounds each caller's full downloads of the
/// encoded set (a set larger than N is charged N: one download, then 429 with
/// Retry-After), while a 304 stays free.
#[test]
fn serve_bounds_encoded_set_downloads_and_304s_are_free() {
    use psi_client::{HttpTransport, Method, Request, Transport};
    let dir = two_entry_registry("download-budget");
    let db = dir.join("r.sqlite").to_str().unwrap().to_string();
    let get = |url: &str, etag: Option<&str>| {
        HttpTransport::new()
            .send(Request {
                method: Method::Get,
                url: format!("{url}/v1/dh/encoded-set"),
                headers: etag
                    .map(|e| ("if-none-match".to_string(), e.to_string()))
                    .into_iter()
                    .collect(),
                body: vec![],
                timeout: std::time::Duration::from_secs(10),
                max_response_bytes: 1 << 20,
                abandon_on_cancel: true,
            })
            .unwrap()
    };
    let served = Served::start(&db, &["--encoded-set-bytes-per-hour", "1"]);
    let first = get(&served.url, None);
    assert_eq!(first.status, 200);
    let etag = first.header("etag").unwrap().to_string();
    let r = get(&served.url, None);
    assert_eq!(r.status, 429, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.header("retry-after").is_some());
    assert_eq!(get(&served.url, Some(&etag)).status, 304);
}

/// `psi serve --label-bucket-size` sets the label layout the server advertises (issue 34:
/// the documents named the knob, but no flag set it), and a size clients would refuse
/// (below `MIN_BUCKET_OCCUPANCY`) is refused at start.
#[test]
fn label_bucket_size_sets_the_layout_and_is_checked() {
    let dir = common::temp_dir("cli", "label-bucket-size");
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let rows: String = (0..1000)
        .map(|i| format!("user{i}@example.com,User {i}\n"))
        .collect();
    std::fs::write(path("reg.csv"), rows).unwrap();
    let db = path("r.sqlite");
    let (ok, _, err) = psi(&["import", "--db", &db, &path("reg.csv")]);
    assert!(ok, "{err}");
    let bits = |extra: &[&str]| {
        let server = Served::start(&db, extra);
        let client = psi_client::Client::new(&server.url, psi_client::ClientConfig::default());
        client.health().expect("health").label_bucket_bits
    };
    // 1,000 labelled entries: 1000 / 8 = 125 buckets -> 6 bits; 1000 / 64 = 15 -> 3 bits.
    assert_eq!(bits(&[]), 6);
    assert_eq!(bits(&["--label-bucket-size", "64"]), 3);
    let (ok, _, err) = psi(&["serve", "--db", &db, "--label-bucket-size", "3"]);
    assert!(!ok && err.contains("below 4"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `psi demo --group 3`: three simulated phones through the embedded relay find the common
/// contacts (the demo checks them against the synthetic books and fails otherwise), print
/// the table of bytes and time per phone, and leave no group on the server.
#[test]
fn demo_group_of_three_finds_the_common_contacts() {
    let (ok, out, err) = psi(&["demo", "--group", "3", "--group-items", "120"]);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("30 contacts every phone holds"), "{out}");
    assert!(
        out.contains("result matches the common contacts; groups left on the server: 0"),
        "{out}"
    );
    for role in ["leader", "member"] {
        assert!(out.contains(role), "{out}");
    }
    let (ok, out, err) = psi(&["demo", "--group", "3", "--group-items", "40", "--json"]);
    assert!(ok, "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("JSON");
    assert_eq!(v["correct"], true, "{out}");
    assert_eq!(v["common"], 10, "{out}");
    assert_eq!(v["groups_left_on_server"], 0, "{out}");
    let phones = v["phones"].as_array().unwrap();
    assert_eq!(phones.len(), 3);
    for p in phones {
        assert!(p["bytes_sent"].as_u64().unwrap() > 0, "{out}");
        assert!(p["protocol_bytes_received"].as_u64().unwrap() > 0, "{out}");
    }
    let (ok, _, err) = psi(&["demo", "--group", "17"]);
    assert!(!ok && err.contains("2 to 16"), "{err}");
}

/// `psi group create` and `psi group join` against a `psi serve`: the leader prints the
/// code, two members join with it, and all three print the contacts every file holds.
#[test]
fn group_create_and_join_through_psi_serve() {
    use std::io::{BufRead, BufReader};
    let dir = common::temp_dir("cli", "group");
    let file = |name: &str, lines: &[&str]| {
        let p = dir.join(name);
        std::fs::write(&p, lines.join("\n")).unwrap();
        p.to_string_lossy().into_owned()
    };
    let a = file(
        "a.txt",
        &[
            "+1 202 555 0101",
            "+12025550102",
            "carol@example.com",
            "+12025550199",
        ],
    );
    let b = file(
        "b.txt",
        &["carol@Example.com", "+12025550101", "+12025550150"],
    );
    let c = file(
        "c.txt",
        &["(202) 555-0101", "CAROL@example.com", "+12025550102"],
    );
    let db = dir.join("r.sqlite").to_string_lossy().into_owned();
    let server = Served::start(&db, &[]);
    let mut leader = Command::new(env!("CARGO_BIN_EXE_psi"))
        .args([
            "group",
            "create",
            "--server",
            &server.url,
            "--size",
            "3",
            "--deadline",
            "60",
            &a,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("psi group create");
    let mut lines = BufReader::new(leader.stdout.take().unwrap()).lines();
    let mut code = None;
    for line in lines.by_ref().take(3) {
        let line = line.unwrap();
        if let Some(c) = line.strip_prefix("  ") {
            code = Some(c.trim().to_string());
            break;
        }
    }
    let code = code.expect("the code line");
    let join = |f: &str| {
        Command::new(env!("CARGO_BIN_EXE_psi"))
            .args([
                "group",
                "join",
                "--server",
                &server.url,
                "--code",
                &code,
                "--deadline",
                "60",
                f,
            ])
            .output()
            .expect("psi group join")
    };
    let (jb, jc) = std::thread::scope(|s| {
        let hb = s.spawn(|| join(&b));
        let hc = s.spawn(|| join(&c));
        (hb.join().unwrap(), hc.join().unwrap())
    });
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    let status = leader.wait().unwrap();
    let rest = rest.join("\n");
    assert!(status.success(), "{rest}");
    assert!(rest.contains("2 contacts every phone holds"), "{rest}");
    for m in [&jb, &jc] {
        let out = String::from_utf8_lossy(&m.stdout);
        assert!(
            m.status.success(),
            "{out}\n{}",
            String::from_utf8_lossy(&m.stderr)
        );
        assert!(out.contains("2 contacts every phone holds"), "{out}");
        assert!(
            out.contains("+12025550101") && out.contains("carol@example.com"),
            "{out}"
        );
        assert!(!out.contains("+12025550102"), "{out}");
    }
    // A wrong code is refused before any request, with a clear message.
    let (ok, _, err) = psi(&[
        "group",
        "join",
        "--server",
        &server.url,
        "--code",
        "nope",
        &b,
    ]);
    assert!(!ok && err.contains("not a group code"), "{err}");
}
