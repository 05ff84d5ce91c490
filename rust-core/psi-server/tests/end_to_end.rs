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

/// OT-PSI with labels on rides the labels on the run (label lanes, ADR 0053): the same
/// labels as DH-PSI's for the same registry, no label step (no label bytes, no label
/// route), the session ended by the outputs, and the session response names the width.
#[test]
fn ot_psi_labels_ride_on_the_run_and_equal_dh_psis() {
    let config = config("lanes");
    fill(&config, 2000, |i| i % 3 != 0);
    let server = start(config);
    let items = contacts(&(0..50).map(|k| k * 37).collect::<Vec<_>>(), 200);
    let client = Client::new(
        &server.url(),
        ClientConfig::default().with_threads(Threads::new(2)),
    );
    let run = |p| {
        client
            .match_items(items.clone(), p, &mut |_| {}, &CancelToken::new())
            .unwrap()
    };
    let (dh, ot) = (run(Protocol::Dh), run(Protocol::Ot));
    assert_eq!(ot.matches, dh.matches);
    assert_eq!(ot.matches.len(), 50);
    assert!(ot.matches.iter().any(|m| m.label.is_none()));
    assert!(dh.stats.label_bytes > 0);
    assert_eq!(ot.stats.label_bytes, 0, "no label step");
    assert_eq!(
        server.state.live_sessions(),
        0,
        "the outputs ended the session"
    );
    // The session and health responses name the lane width: "user-1999", 9 bytes.
    let t = raw(&server);
    let r = send(
        &t,
        Method::Post,
        "/v1/sessions",
        &[("content-type", "application/json")],
        br#"{"protocol":"ot-psi","client_items":3}"#,
    );
    assert_eq!(r.status, 201);
    let created: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(created["label_lane_width"], 9);
    let r = send(
        &t,
        Method::Post,
        "/v1/sessions",
        &[("content-type", "application/json")],
        br#"{"protocol":"ot-psi","client_items":3,"labels":false}"#,
    );
    let created: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert!(
        created.get("label_lane_width").is_none(),
        "labels off: no lanes"
    );
    let r = send(&t, Method::Get, "/v1/health", &[], &[]);
    let health: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(health["label_lane_width"], 9);
    server.shutdown().unwrap();
}

/// CM20-PSI with labels on rides the labels on the run too (label lanes, cm20-psi.md
/// §4.7): the same labels as DH-PSI's for the same registry, no label step (no label bytes),
/// the `Labels` progress phase still reported, the session ended by the outputs, and a
/// CM20-PSI session response names the width.
#[test]
fn cm20_psi_labels_ride_on_the_run_and_equal_dh_psis() {
    let mut config = config("cm20lanes");
    config.enable_cm20 = true;
    fill(&config, 2000, |i| i % 3 != 0);
    let server = start(config);
    let items = contacts(&(0..50).map(|k| k * 37).collect::<Vec<_>>(), 200);
    let client = Client::new(
        &server.url(),
        ClientConfig::default().with_threads(Threads::new(2)),
    );
    let mut phases = Vec::new();
    let dh = client
        .match_items(
            items.clone(),
            Protocol::Dh,
            &mut |_| {},
            &CancelToken::new(),
        )
        .unwrap();
    let cm20 = client
        .match_items(
            items.clone(),
            Protocol::Cm20,
            &mut |p| phases.push(p.phase),
            &CancelToken::new(),
        )
        .unwrap();
    assert_eq!(cm20.matches, dh.matches);
    assert_eq!(cm20.matches.len(), 50);
    assert!(cm20.matches.iter().any(|m| m.label.is_none()));
    assert!(cm20.matches.iter().any(|m| m.label.is_some()));
    assert!(dh.stats.label_bytes > 0);
    assert_eq!(cm20.stats.label_bytes, 0, "no label step");
    assert_eq!(phases.last(), Some(&psi_client::Phase::Labels));
    assert_eq!(
        server.state.live_sessions(),
        0,
        "the outputs ended the session"
    );
    // The CM20-PSI session response names the lane width: "user-1999", 9 bytes; not with
    // labels off.
    let t = raw(&server);
    for (body, want) in [
        (&br#"{"protocol":"cm20-psi","client_items":3}"#[..], Some(9)),
        (
            br#"{"protocol":"cm20-psi","client_items":3,"labels":false}"#,
            None,
        ),
    ] {
        let r = send(
            &t,
            Method::Post,
            "/v1/sessions",
            &[("content-type", "application/json")],
            body,
        );
        assert_eq!(r.status, 201);
        let created: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(
            created.get("label_lane_width").and_then(|v| v.as_u64()),
            want
        );
    }
    server.shutdown().unwrap();
}

/// A registry with a label over 15 bytes offers no lanes: OT-PSI's labels come from the
/// label query, as before, and are still right.
#[test]
fn ot_psi_with_long_labels_uses_the_label_query() {
    long_labels_use_the_label_query(Protocol::Ot, "longlabels");
}

/// The same for CM20-PSI: no lanes for a label over 15 bytes, the label query instead.
#[test]
fn cm20_psi_with_long_labels_uses_the_label_query() {
    long_labels_use_the_label_query(Protocol::Cm20, "cm20longlabels");
}

fn long_labels_use_the_label_query(protocol: Protocol, name: &str) {
    let mut config = config(name);
    config.enable_cm20 = protocol == Protocol::Cm20;
    let mut store = psi_server::Store::open(config.db.sqlite_path().unwrap()).unwrap();
    let rows: Vec<(String, Option<String>)> = (0..300)
        .map(|i| {
            (
                id(i),
                (i % 2 == 0).then(|| format!("a-much-longer-label-{i}")),
            )
        })
        .collect();
    store
        .add_entries(rows.iter().map(|(a, b)| (a.as_str(), b.as_deref())))
        .unwrap();
    drop(store);
    let server = start(config);
    let items = contacts(&[0, 1, 2, 3, 250], 20);
    let client = Client::new(&server.url(), ClientConfig::default());
    let r = client
        .match_items(items, protocol, &mut |_| {}, &CancelToken::new())
        .unwrap();
    assert_eq!(r.matches.len(), 5);
    assert!(r.stats.label_bytes > 0, "the label query ran");
    for m in &r.matches {
        let i: u64 = std::str::from_utf8(&m.item).unwrap()[5..].parse().unwrap();
        let want = i
            .is_multiple_of(2)
            .then(|| format!("a-much-longer-label-{i}"));
        assert_eq!(m.label, want);
    }
    server.shutdown().unwrap();
}
