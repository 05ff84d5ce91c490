//! `psi seal-key new`: the binary writes a private key file that loads, prints no key,
//! and never overwrites an existing file.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Runs `psi ARGS`, killed after 30 s: (success, stdout, stderr).
fn psi(args: &[&str]) -> (bool, String, String) {
    common::run_psi(args, Duration::from_secs(30))
}

/// A scratch directory, removed when dropped (also when the test fails).
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The key lines of a key file (neither comments nor blank).
fn key_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect()
}

#[test]
fn seal_key_new_writes_a_private_key_file_once() {
    let dir = Scratch(std::env::temp_dir().join(format!(
        "psi-cli-seal-key-{}-{:?}",
        std::process::id(),
        std::time::SystemTime::now()
    )));
    std::fs::create_dir_all(&dir.0).unwrap();
    let path = dir.0.join("at-rest.key");
    let file = path.to_str().unwrap();

    let (ok, out, err) = psi(&["seal-key", "new", file]);
    assert!(ok, "{out}\n{err}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");
    }
    let keys = key_lines(&path);
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert_eq!(keys[0].len(), 64);
    assert!(keys[0].bytes().all(|b| b.is_ascii_hexdigit()));
    // Where the file is and what to do next; never the key.
    assert!(out.contains(file), "{out}");
    assert!(out.contains("--seal-key-file"), "{out}");
    assert!(out.contains("psi reseal"), "{out}");
    assert!(!out.contains(&keys[0]) && !err.contains(&keys[0]));
    // The file loads as the server will load it.
    psi_server::sealing::SealKeys::from_file(&path).unwrap();

    // A second `new` on the same path fails and leaves the key as it was.
    let (ok, out, err) = psi(&["seal-key", "new", file]);
    assert!(!ok, "{out}\n{err}");
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(key_lines(&path), keys);
}
