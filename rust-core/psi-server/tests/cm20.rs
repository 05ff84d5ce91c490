//! CM20-PSI over real HTTP on loopback: matches and labels through the client driver, the
//! number of requests a run makes, opt-in, the charge, the round route's checks, and a
//! server that keeps serving after malformed rounds.

mod common;

use common::*;
use psi_client::{CancelToken, Client, ClientConfig, Method, Protocol};
use psi_core::Threads;
use psi_core::cm20::{ClientStep, Cm20Client, Cm20Config};
use std::collections::HashSet;

fn items(registry: u64) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = (0..300)
        .map(|j| format!("+1303{j:07}").into_bytes())
        .collect();
    v.extend((0..50).map(|k| id(k * (registry / 50)).into_bytes()));
    v
}

fn cm20_server(name: &str, registry: u64) -> psi_server::RunningServer {
    let mut config = config(name);
    config.enable_cm20 = true;
    fill(&config, registry, |i| i % 2 == 0);
    start(config)
}

#[test]
fn matches_labels_and_request_count() {
    let registry = 20_000;
    let server = cm20_server("cm20-e2e", registry);
    // Sessions start from the registry's prepared set (Cm20Server::with_set).
    assert!(server.state.registry().stats().cm20_prepared);
    let client = Client::new(
        &server.url(),
        ClientConfig::default().with_threads(Threads::new(2)),
    );
    let items = items(registry);
    let report = client
        .match_items(
            items.clone(),
            Protocol::Cm20,
            &mut |_| {},
            &CancelToken::new(),
        )
        .unwrap();
    let reg: HashSet<Vec<u8>> = (0..registry).map(|i| id(i).into_bytes()).collect();
    let expected: Vec<usize> = (0..items.len())
        .filter(|&i| reg.contains(&items[i]))
        .collect();
    let got: Vec<usize> = report.matches.iter().map(|m| m.index).collect();
    assert_eq!(got, expected);
    assert_eq!(report.protocol, Protocol::Cm20);
    for m in &report.matches {
        let i: u64 = std::str::from_utf8(&m.item).unwrap()[5..].parse().unwrap();
        assert_eq!(
            m.label,
            i.is_multiple_of(2).then(|| format!("user-{i}")),
            "entry {i}"
        );
    }
    // 350 items: m = 512, 64-byte columns, the whole matrix in one chunk: the protocol is
    // two round trips (hello, matrix). The labels ("user-19998", at most 10 bytes) ride on
    // the run in label lanes (cm20-psi.md §4.7; they move fewer bytes than the label query
    // and fetch here), so the run is session + 2 rounds (the server ends the session with
    // the outputs: no delete).
    assert_eq!(report.stats.round_trips, 2);
    assert_eq!(report.stats.requests, 3, "{:?}", report.stats);
    assert_eq!(report.stats.label_bytes, 0);
    // The protocol bytes are the analytic ones (client to server exactly), the lanes
    // included.
    let t = psi_core::cm20::sizes::traffic(350, registry);
    assert_eq!(report.stats.protocol_bytes_sent, t.client_to_server);
    let down = t.server_to_client + psi_core::cm20::sizes::lanes(registry, 10);
    let rel = (report.stats.protocol_bytes_received as f64 - down as f64).abs() / down as f64;
    assert!(
        rel < 0.01,
        "{} vs {down}",
        report.stats.protocol_bytes_received
    );
    assert_eq!(server.state.live_sessions(), 0);
    assert_eq!(
        server.state.ot_runs_in_progress(),
        0,
        "the OT slot is freed at the end"
    );
    server.shutdown().unwrap();
}

#[test]
fn off_unless_enabled() {
    let config = config("cm20-off");
    fill(&config, 100, |_| false);
    let server = start(config);
    let t = raw(&server);
    let r = session(&t, "cm20-psi", 10, &[]);
    assert_eq!(r.status, 400);
    assert_eq!(error_code(&r), "unsupported_protocol");
    let health = send(&t, Method::Get, "/v1/health", &[], &[]);
    // Not among the protocols (the costs name the CM20 lookup unit whatever is enabled).
    let health: serde_json::Value = serde_json::from_slice(&health.body).unwrap();
    let protocols = health["protocols"].as_array().unwrap();
    assert!(!protocols.iter().any(|p| p == "cm20-psi"), "{health}");
    assert_eq!(protocols.len(), 2);
    let client = Client::new(&server.url(), ClientConfig::default());
    assert!(
        client
            .match_items(
                vec![b"x".to_vec()],
                Protocol::Cm20,
                &mut |_| {},
                &CancelToken::new()
            )
            .is_err()
    );
    server.shutdown().unwrap();
}

#[test]
fn round_route_checks_and_the_server_keeps_serving() {
    let server = cm20_server("cm20-bad", 500);
    let t = raw(&server);
    let bin = [("content-type", "application/octet-stream")];
    // The CM20 route on an OT session, and the OT route on a CM20 session: wrong phase.
    let ot = session_id(&session(&t, "ot-psi", 10, &[]));
    let r = send(
        &t,
        Method::Post,
        &format!("/v1/sessions/{ot}/cm20/round"),
        &bin,
        b"x",
    );
    assert_eq!(r.status, 409, "{}", String::from_utf8_lossy(&r.body));
    let id = session_id(&session(&t, "cm20-psi", 10, &[]));
    let r = send(
        &t,
        Method::Post,
        &format!("/v1/sessions/{id}/ot/round"),
        &bin,
        b"x",
    );
    assert_eq!(r.status, 409);
    let path = format!("/v1/sessions/{id}/cm20/round");
    // Garbage, a truncated hello, a hello for another count: typed 400s, session kept.
    let mut rng = <rand_chacha::ChaCha20Rng as rand_core::SeedableRng>::seed_from_u64(3);
    let set = psi_core::ItemSet::new((0..10).map(id_of));
    let (mut client, hello) =
        Cm20Client::start(set, Cm20Config::new(Threads::ONE), &mut rng).unwrap();
    for body in [&b"garbage"[..], &hello[..hello.len() - 1]] {
        let r = send(&t, Method::Post, &path, &bin, body);
        assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    }
    // A hello for another count, on another session: a third 400 would end this one
    // (ADR 0036). The OT session's slot is given back for it first.
    let other = psi_core::ItemSet::new((0..11).map(id_of));
    let (_, hello11) = Cm20Client::start(other, Cm20Config::new(Threads::ONE), &mut rng).unwrap();
    let r = send(&t, Method::Delete, &format!("/v1/sessions/{ot}"), &[], &[]);
    assert_eq!(r.status, 204);
    let second = session_id(&session(&t, "cm20-psi", 10, &[]));
    let r = send(
        &t,
        Method::Post,
        &format!("/v1/sessions/{second}/cm20/round"),
        &bin,
        &hello11,
    );
    assert_eq!(r.status, 400);
    // The real run still completes.
    let mut request = hello;
    let out = loop {
        let r = send(&t, Method::Post, &path, &bin, &request);
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        match client.handle(&r.body).unwrap() {
            ClientStep::Send(next) => request = next,
            ClientStep::Done(out) => break out,
        }
    };
    assert_eq!(out.matches.len(), 10);
    // The run is over: another round is the wrong phase.
    let r = send(&t, Method::Post, &path, &bin, &request);
    assert_eq!(r.status, 409);
    server.shutdown().unwrap();
}

fn id_of(i: u64) -> String {
    id(i)
}
