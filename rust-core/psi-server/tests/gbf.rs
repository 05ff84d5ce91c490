//! GBF-PSI over real HTTP on loopback: matches and labels through the client driver, the
//! requests a run makes and their bytes, opt-in, the round route's checks, and a server
//! that keeps serving after malformed rounds.

mod common;

use common::*;
use psi_client::{CancelToken, Client, ClientConfig, Method, Protocol};
use psi_core::Threads;
use psi_core::gbf::{ClientStep, GbfClient, GbfConfig};
use std::collections::HashSet;

fn items(registry: u64) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = (0..300)
        .map(|j| format!("+1303{j:07}").into_bytes())
        .collect();
    v.extend((0..50).map(|k| id(k * (registry / 50)).into_bytes()));
    v
}

fn gbf_server(name: &str, registry: u64) -> psi_server::RunningServer {
    let mut config = config(name);
    config.enable_gbf = true;
    fill(&config, registry, |i| i % 2 == 0);
    start(config)
}

#[test]
fn matches_labels_and_request_count() {
    let registry = 20_000;
    let server = gbf_server("gbf-e2e", registry);
    // Sessions start from the registry's prepared digests (psi_core::gbf::GbfSet).
    assert!(server.state.registry().stats().gbf_prepared);
    assert!(!server.state.registry().stats().cm20_prepared);
    let client = Client::new(
        &server.url(),
        ClientConfig::default().with_threads(Threads::new(2)),
    );
    let items = items(registry);
    let report = client
        .match_items(
            items.clone(),
            Protocol::Gbf,
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
    assert_eq!(report.protocol, Protocol::Gbf);
    for m in &report.matches {
        let i: u64 = std::str::from_utf8(&m.item).unwrap()[5..].parse().unwrap();
        assert_eq!(
            m.label,
            i.is_multiple_of(2).then(|| format!("user-{i}")),
            "entry {i}"
        );
    }
    // 350 items against 20,000: k = 55, m = 28,160 bits, 55 instances of 8 KiB: the
    // matrices fit one request, so the protocol is two round trips (hello, matrices), and
    // the run is session + 2 rounds + label query + label fetch (no delete).
    let p = psi_core::gbf::Params::new(350, registry as u32).unwrap();
    assert_eq!((p.hashes, p.filter_bits), (55, 28_160));
    assert_eq!(report.stats.round_trips, 2);
    assert_eq!(report.stats.requests, 5, "{:?}", report.stats);
    // The protocol bytes are the analytic ones (client to server exactly).
    let t = psi_core::gbf::sizes::traffic(350, registry);
    assert_eq!(report.stats.protocol_bytes_sent, t.client_to_server);
    let rel = (report.stats.protocol_bytes_received as f64 - t.server_to_client as f64).abs()
        / t.server_to_client as f64;
    assert!(
        rel < 0.01,
        "{} vs {}",
        report.stats.protocol_bytes_received,
        t.server_to_client
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
    let config = config("gbf-off");
    fill(&config, 100, |_| false);
    let server = start(config);
    let t = raw(&server);
    let r = session(&t, "gbf-psi", 10, &[]);
    assert_eq!(r.status, 400);
    assert_eq!(error_code(&r), "unsupported_protocol");
    let health = send(&t, Method::Get, "/v1/health", &[], &[]);
    let health: serde_json::Value = serde_json::from_slice(&health.body).unwrap();
    let protocols = health["protocols"].as_array().unwrap();
    assert!(!protocols.iter().any(|p| p == "gbf-psi"), "{health}");
    let client = Client::new(&server.url(), ClientConfig::default());
    assert!(
        client
            .match_items(
                vec![b"x".to_vec()],
                Protocol::Gbf,
                &mut |_| {},
                &CancelToken::new()
            )
            .is_err()
    );
    server.shutdown().unwrap();
}

#[test]
fn round_route_checks_and_the_server_keeps_serving() {
    let server = gbf_server("gbf-bad", 500);
    let t = raw(&server);
    let bin = [("content-type", "application/octet-stream")];
    let sid = session_id(&session(&t, "gbf-psi", 10, &[]));
    // The OT and CM20 routes on a GBF session: wrong phase.
    for other in ["ot", "cm20"] {
        let r = send(
            &t,
            Method::Post,
            &format!("/v1/sessions/{sid}/{other}/round"),
            &bin,
            b"x",
        );
        assert_eq!(
            r.status,
            409,
            "{other}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
    let path = format!("/v1/sessions/{sid}/gbf/round");
    // Garbage and a truncated hello: typed 400s, the session kept.
    let mut rng = <rand_chacha::ChaCha20Rng as rand_core::SeedableRng>::seed_from_u64(3);
    let set = psi_core::ItemSet::new((0..10).map(id));
    let (mut client, hello) =
        GbfClient::start(set, GbfConfig::new(Threads::ONE), &mut rng).unwrap();
    for body in [&b"garbage"[..], &hello[..hello.len() - 1]] {
        let r = send(&t, Method::Post, &path, &bin, body);
        assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(error_code(&r), "invalid_message");
    }
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
