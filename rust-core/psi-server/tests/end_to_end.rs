//! End to end over real HTTP on loopback: matches equal the plain intersection, labels
//! come back for labeled matches only, the encoded registry is cached by ETag.

mod common;

use common::*;
use psi_client::{CancelToken, Client, ClientConfig, Method, Protocol};
use psi_core::Threads;
use std::collections::HashSet;

fn contacts(overlap: &[u64], extra: usize) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = (0..extra)
        .map(|j| format!("+1303{j:07}").into_bytes())
        .collect();
    for (k, &i) in overlap.iter().enumerate() {
        v.insert((k * 7) % (v.len() + 1), id(i).into_bytes());
    }
    v
}

fn check(protocol: Protocol, registry: u64) {
    let mut config = config("e2e");
    config.enable_cm20 = protocol == Protocol::Cm20;
    fill(&config, registry, |i| i % 3 != 0);
    let server = start(config);
    let overlap: Vec<u64> = (0..40).map(|k| k * (registry / 40)).collect();
    let items = contacts(&overlap, 260);
    let client = Client::new(
        &server.url(),
        ClientConfig::default().with_threads(Threads::new(2)),
    );
    let report = client
        .match_items(items.clone(), protocol, &mut |_| {}, &CancelToken::new())
        .unwrap();
    // The plain intersection.
    let reg: HashSet<Vec<u8>> = (0..registry).map(|i| id(i).into_bytes()).collect();
    let expected: Vec<usize> = (0..items.len())
        .filter(|&i| reg.contains(&items[i]))
        .collect();
    let got: Vec<usize> = report.matches.iter().map(|m| m.index).collect();
    assert_eq!(got, expected);
    assert_eq!(report.server_items, registry);
    for m in &report.matches {
        let i: u64 = std::str::from_utf8(&m.item).unwrap()[5..].parse().unwrap();
        let want = (!i.is_multiple_of(3)).then(|| format!("user-{i}"));
        assert_eq!(m.label, want, "label of entry {i}");
    }
    if protocol == Protocol::Dh {
        assert!(!report.stats.set_from_cache);
        assert!(report.stats.set_bytes_downloaded > 0);
        // Second run: the cached set is used, nothing downloaded.
        let again = client
            .match_items(items, protocol, &mut |_| {}, &CancelToken::new())
            .unwrap();
        assert_eq!(again.matches, report.matches);
        assert!(again.stats.set_from_cache);
        assert_eq!(again.stats.set_bytes_downloaded, 0);
        // Conditional GET with the ETag: 304, empty body.
        let etag = server.state.registry().etag().to_string();
        let t = raw(&server);
        let r = send(
            &t,
            Method::Get,
            "/v1/dh/encoded-set",
            &[("if-none-match", &etag)],
            &[],
        );
        assert_eq!(r.status, 304);
        assert!(r.body.is_empty());
        // RFC 9110 weak comparison: a weak form of the same tag matches too.
        let weak = format!("W/{etag}");
        let r = send(
            &t,
            Method::Get,
            "/v1/dh/encoded-set",
            &[("if-none-match", &format!("\"other\", {weak}"))],
            &[],
        );
        assert_eq!(r.status, 304);
        let r = send(&t, Method::Get, "/v1/dh/encoded-set", &[], &[]);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("etag"), Some(etag.as_str()));
        assert_eq!(r.header("x-psi-epoch"), Some("1"));
        assert!(
            r.header("server-timing")
                .is_some_and(|v| v.starts_with("psi;dur="))
        );
    }
    assert_eq!(
        server.state.live_sessions(),
        0,
        "sessions are deleted after a run"
    );
    server.shutdown().unwrap();
}

#[test]
fn dh_psi_over_http_matches_and_labels() {
    check(Protocol::Dh, 3000);
}

#[test]
fn ot_psi_over_http_matches_and_labels() {
    check(Protocol::Ot, 1000);
}

#[test]
fn no_labels_when_disabled_and_empty_input_is_bad_input() {
    let config = config("nolabels");
    fill(&config, 100, |_| true);
    let server = start(config);
    let client = Client::new(&server.url(), ClientConfig::default().with_labels(false));
    let r = client
        .match_items(
            vec![id(5).into_bytes(), b"x".to_vec()],
            Protocol::Dh,
            &mut |_| {},
            &CancelToken::new(),
        )
        .unwrap();
    assert_eq!(r.matches.len(), 1);
    assert_eq!(r.matches[0].label, None);
    let e = client
        .match_items(vec![], Protocol::Dh, &mut |_| {}, &CancelToken::new())
        .unwrap_err();
    assert!(matches!(e, psi_client::ClientError::BadInput(_)), "{e}");
}

#[test]
fn cm20_psi_over_http_matches_and_labels() {
    check(Protocol::Cm20, 1000);
}
