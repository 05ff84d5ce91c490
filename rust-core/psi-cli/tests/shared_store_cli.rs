//! The `psi` binary on a shared PostgreSQL database (issue 22): `psi import`, `psi token
//! add` and `psi rotate-key` with `--db postgres://...`, two `psi serve` instances on it;
//! a token issued by the command is accepted by both, an import and a rotation are served
//! by both; a URL with a password is refused; `psi reseal`. Real PostgreSQL and servers on
//! 127.0.0.1.

mod common;

use psi_test_support::pg::TempPostgres;
use std::path::{Path, PathBuf};

use std::time::{Duration, Instant};

/// Runs `psi ARGS`, killed after 60 s: (success, stdout, stderr).
fn psi(args: &[&str]) -> (bool, String, String) {
    common::run_psi(args, Duration::from_secs(60))
}

/// A `psi serve` killed when dropped (also when a test fails).
struct Served {
    child: std::process::Child,
    url: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn temp_dir(name: &str) -> PathBuf {
    common::temp_dir("pg", name)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `psi match --json` against `url`: the matched identifiers, or the failure's stderr.
fn matches(url: &str, token: &Path, contacts: &Path) -> Result<Vec<String>, String> {
    let (ok, out, err) = psi(&[
        "match",
        "--server",
        url,
        "--protocol",
        "dh",
        "--token-file",
        s(token),
        "--json",
        s(contacts),
    ]);
    if !ok {
        return Err(err);
    }
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let mut ids: Vec<String> = v["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["identifier"].as_str().unwrap_or_default().to_string())
        .collect();
    ids.sort();
    Ok(ids)
}

#[test]
fn two_servers_on_one_database_follow_the_commands() {
    let pg = TempPostgres::shared();
    let url = pg.fresh_database();
    let dir = temp_dir("two");
    let seal = dir.join("seal.key");
    let pw = pg.password_file();
    assert!(psi(&["seal-key", "new", s(&seal)]).0);
    let db = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = vec![
            "--db".into(),
            url.clone(),
            "--db-password-file".into(),
            s(&pw).into(),
            "--seal-key-file".into(),
            s(&seal).into(),
        ];
        a.extend(extra.iter().map(|x| x.to_string()));
        a
    };
    let run = |cmd: &[&str], extra: &[&str]| {
        let mut args: Vec<String> = cmd.iter().map(|x| x.to_string()).collect();
        args.extend(db(extra));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        psi(&refs)
    };

    // A URL with a password is refused, without echoing it.
    let with_pw = url.replacen("psi@", &format!("psi:{}@", pg.password()), 1);
    let (ok, _, err) = psi(&["token", "list", "--db", &with_pw]);
    assert!(!ok);
    assert!(err.contains("--db-password-file"), "{err}");
    assert!(!err.contains(pg.password()), "the password leaked: {err}");

    let contacts = dir.join("contacts.txt");
    std::fs::write(&contacts, "+12025550101\n+12025550102\n+12025550103\n").unwrap();
    let (ok, out, err) = run(&["import", s(&contacts)], &["--max-client-items", "100"]);
    assert!(ok, "{out}\n{err}");

    let (ok, token, err) = run(&["token", "add", "--name", "cli"], &[]);
    assert!(ok, "{err}");
    let token_file = dir.join("t.token");
    std::fs::write(&token_file, token.trim()).unwrap();
    let bad_token = dir.join("bad.token");
    std::fs::write(&bad_token, "psi_0000").unwrap();

    let servers: Vec<Served> = (0..2)
        .map(|_| {
            let mut args = db(&[
                "--listen",
                "127.0.0.1:0",
                "--max-client-items",
                "100",
                "--watch-store",
                "1s",
            ]);
            args.insert(0, "--items-per-hour".into());
            args.insert(1, "0".into());
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let (child, line) = common::spawn_serve(&refs, &[]);
            let url = common::url_of(&line);
            assert!(url.starts_with("http://127.0.0.1:"), "{line}");
            Served { child, url }
        })
        .collect();

    let query = dir.join("query.txt");
    std::fs::write(&query, "+12025550102\n+12025550104\n+13035550100\n").unwrap();
    for srv in &servers {
        assert_eq!(
            matches(&srv.url, &token_file, &query).unwrap(),
            vec!["+12025550102"]
        );
        let refused = matches(&srv.url, &bad_token, &query).unwrap_err();
        assert!(refused.contains("401"), "{refused}");
    }

    // An import and a rotation by the commands reach both servers.
    let more = dir.join("more.txt");
    std::fs::write(&more, "+12025550104\n").unwrap();
    let (ok, out, err) = run(&["import", s(&more)], &["--max-client-items", "100"]);
    assert!(ok, "{out}\n{err}");
    let (ok, out, err) = run(&["rotate-key"], &["--max-client-items", "100"]);
    assert!(ok, "{out}\n{err}");
    for srv in &servers {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let got = matches(&srv.url, &token_file, &query).unwrap();
            if got == vec!["+12025550102", "+12025550104"] {
                break;
            }
            assert!(Instant::now() < deadline, "not picked up: {got:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    // psi reseal: nothing to do while the key file's first key sealed everything.
    let (ok, _, err) = run(&["reseal"], &[]);
    assert!(ok && err.contains("0 key(s) re-sealed"), "{err}");
    // Without the key file the server refuses to start, naming the flag.
    let (ok, _, err) = psi(&["rotate-key", "--db", &url, "--db-password-file", s(&pw)]);
    assert!(!ok && err.contains("--seal-key-file"), "{err}");
    drop(servers);
    std::fs::remove_dir_all(&dir).unwrap();
}
