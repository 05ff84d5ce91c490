//! Helpers shared by the end-to-end tests of the protocols (`dh_psi.rs`, `ot_psi.rs`,
//! `cm20_psi.rs`): the plain intersection the results are checked against, item lists,
//! the in-memory run of an OT-extension protocol with its transcript ([`chunked`]), and
//! the transcript vector's common parts. Each test binary uses a part of it.
#![allow(dead_code)]

pub mod chunked;
pub mod lanes;

use psi_core::{DecodeError, Error, MatchOutput};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::path::PathBuf;

/// `prefix0`, `prefix1`, ... as bytes.
pub fn items(prefix: &str, range: std::ops::Range<usize>) -> Vec<Vec<u8>> {
    range.map(|i| format!("{prefix}{i}").into_bytes()).collect()
}

/// The plain intersection: indices (first occurrence) of client items the server holds.
pub fn expected(client_items: &[Vec<u8>], server_items: &[Vec<u8>]) -> Vec<usize> {
    let server: HashSet<&[u8]> = server_items.iter().map(|v| v.as_slice()).collect();
    let mut seen = HashSet::new();
    client_items
        .iter()
        .enumerate()
        .filter(|(_, it)| seen.insert(it.as_slice()) && server.contains(it.as_slice()))
        .map(|(i, _)| i)
        .collect()
}

/// A client set and a server set.
pub type Sets = (Vec<Vec<u8>>, Vec<Vec<u8>>);

/// The edge cases every protocol is checked on: empty sets, one item each, empty
/// strings, duplicates on both sides, binary and long items.
pub fn edge_cases() -> Vec<Sets> {
    let empty: Vec<Vec<u8>> = Vec::new();
    let long: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; 1000 + i as usize]).collect();
    vec![
        (empty.clone(), empty.clone()),
        (empty.clone(), items("a", 0..5)),
        (items("a", 0..5), empty),
        (items("a", 0..1), items("a", 0..1)),
        (items("a", 0..1), items("b", 0..1)),
        (
            vec![
                b"".to_vec(),
                b"x".to_vec(),
                b"".to_vec(),
                vec![0, 255, 0],
                b"x".to_vec(),
                b"y".to_vec(),
            ],
            vec![
                b"x".to_vec(),
                b"".to_vec(),
                b"".to_vec(),
                vec![0, 255, 0],
                b"z".to_vec(),
            ],
        ),
        (long.clone(), long[5..].to_vec()),
    ]
}

/// Checks a run's output against the plain intersection and the set sizes.
pub fn check_output(out: &MatchOutput, client_items: &[Vec<u8>], server_items: &[Vec<u8>]) {
    let want = expected(client_items, server_items);
    let got: Vec<usize> = out.matches.iter().map(|m| m.index).collect();
    assert_eq!(
        got,
        want,
        "n_c={} n_s={}",
        client_items.len(),
        server_items.len()
    );
    for m in &out.matches {
        assert_eq!(m.item, client_items[m.index]);
    }
    let distinct: HashSet<&Vec<u8>> = client_items.iter().collect();
    assert_eq!(out.client_items, distinct.len());
    assert_eq!(out.duplicates, client_items.len() - distinct.len());
    let server_distinct: HashSet<&Vec<u8>> = server_items.iter().collect();
    assert_eq!(out.server_items as usize, server_distinct.len());
}

/// The error of a call that must fail to decode.
pub fn decode_err(r: Result<impl std::fmt::Debug, Error>) -> DecodeError {
    match r {
        Err(Error::Decode(e)) => e,
        other => panic!("expected a decode error, got {other:?}"),
    }
}

/// A whole message of the protocol with wire id `protocol`: the 9-byte header, then `body`.
pub fn frame(protocol: u8, message_type: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![b'P', b'S', 1, protocol, message_type];
    m.extend_from_slice(&(body.len() as u32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

// ---- the transcript vectors of OT-PSI and CM20-PSI --------------------------------------

/// `tests/vectors/<name>` of the repository.
pub fn vector_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/vectors")
        .join(name)
}

/// The JSON vector `tests/vectors/<name>` as checked in.
pub fn stored_vector(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(vector_path(name))
        .unwrap_or_else(|e| panic!("tests/vectors/{name}: {e} (see the test's module docs)"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("tests/vectors/{name}: {e}"))
}

/// Writes `now` as `tests/vectors/<name>` when `PSI_REGENERATE_VECTORS` is set (only when
/// a format changes on purpose; the other tests of the same run may read the old file).
pub fn regenerate_vector_if_asked(name: &str, now: &serde_json::Value) {
    if std::env::var_os("PSI_REGENERATE_VECTORS").is_some() {
        std::fs::write(
            vector_path(name),
            serde_json::to_string_pretty(now).unwrap() + "\n",
        )
        .unwrap();
    }
}

/// The items of both transcript vectors: 300 + a duplicate + the empty string on the
/// client, 150 of them plus 50 others and the empty string on the server.
pub fn vector_sets() -> (Vec<String>, Vec<String>) {
    let mut client: Vec<String> = (0..300).map(|i| format!("+1555{i:07}")).collect();
    client.push("+15550000005".into()); // a duplicate
    client.push(String::new()); // the empty string
    let mut server: Vec<String> = (250..400).map(|i| format!("+1555{i:07}")).collect();
    server.extend((0..50).map(|i| format!("+4420{i:07}")));
    server.push(String::new());
    (client, server)
}

/// [`vector_sets`] as bytes.
pub fn vector_items() -> Sets {
    let (client, server) = vector_sets();
    (
        client.into_iter().map(String::into_bytes).collect(),
        server.into_iter().map(String::into_bytes).collect(),
    )
}

/// A transcript's `messages` entry of the vector: sender, type, length and SHA-256 of each.
pub fn vector_messages(transcript: &[Vec<u8>]) -> Vec<serde_json::Value> {
    transcript
        .iter()
        .enumerate()
        .map(|(i, m)| {
            serde_json::json!({
                "from": if i % 2 == 0 { "client" } else { "server" },
                "type": m[4],
                "len": m.len(),
                "sha256": hex::encode(Sha256::digest(m)),
            })
        })
        .collect()
}

/// Compares a regenerated transcript vector, made with one thread (`one`) and with two
/// (`two`), with the checked-in file `name` (rewritten first if the environment variable
/// `write_var` is set), message by message first for a readable failure; then checks
/// the stored matches against the plain intersection of [`vector_sets`].
pub fn check_vector(name: &str, write_var: &str, one: &serde_json::Value, two: &serde_json::Value) {
    check_vector_of(name, write_var, one, two, &vector_items());
}

/// [`check_vector`] for a vector of other sets than [`vector_items`]: `items`, whose plain
/// intersection the vector's `match_indices` must be.
pub fn check_vector_of(
    name: &str,
    write_var: &str,
    one: &serde_json::Value,
    two: &serde_json::Value,
    items: &Sets,
) {
    let stored = compare_vector(name, write_var, one, two);
    let (c, s) = items;
    assert_eq!(serde_json::json!(expected(c, s)), stored["match_indices"]);
}

/// The comparison every transcript vector makes: the run made with one thread (`one`)
/// equals the one made with two (`two`), and the checked-in file `name` (rewritten first
/// if the environment variable `write_var` is set) equals it, message by message first
/// for a readable failure. Returns the stored vector, for the caller's own checks.
pub fn compare_vector(
    name: &str,
    write_var: &str,
    one: &serde_json::Value,
    two: &serde_json::Value,
) -> serde_json::Value {
    assert_eq!(
        one, two,
        "the transcript must not depend on the thread count"
    );
    let path = vector_path(name);
    if std::env::var_os(write_var).is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, serde_json::to_string_pretty(one).unwrap() + "\n").unwrap();
    }
    let stored: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!("{}: {e} (set {write_var}=1 to create it)", path.display())
        }))
        .unwrap();
    let (got, want) = (
        one["messages"].as_array().unwrap(),
        stored["messages"].as_array().unwrap(),
    );
    assert_eq!(got.len(), want.len(), "number of messages");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g, w, "message {i}");
    }
    assert!(
        *one == stored,
        "transcript vector differs outside the messages"
    );
    stored
}

/// The sets of the round protocols' property tests: `n_c` client and `n_s` server items of
/// which `overlap_pct` percent of the smaller set are shared, `dups` repeated items on each
/// side, and the empty string on both if `with_empty`.
pub fn overlapping_sets(
    n_c: usize,
    n_s: usize,
    overlap_pct: usize,
    dups: usize,
    with_empty: bool,
) -> Sets {
    let common = n_c.min(n_s) * overlap_pct / 100;
    let mut c = items("", 0..n_c);
    let mut s = items("", n_c - common..n_c - common + n_s);
    for d in 0..dups.min(c.len()) {
        let again = c[d * 7 % c.len()].clone();
        c.push(again);
        let again = s[d * 5 % s.len().max(1)..].first().cloned();
        s.extend(again);
    }
    if with_empty {
        c.push(Vec::new());
        s.insert(0, Vec::new());
    }
    (c, s)
}
