//! The cost model and the driver on simulated links (after quinn-proto's `tests/util.rs`:
//! simulated time, latency and rate). A [`SimLink`] transport forwards each request to
//! the real `psi-server` over loopback and advances a simulated clock by the link's
//! round trip and the bytes at its rates; the run's computation (client and server) is
//! real and adds its wall time. So a run's simulated time is
//! `real compute + Σ (rtt + up / up_rate + down / down_rate)`, the same shape as the
//! model's prediction, with the network part exact and the computation measured.
//!
//! Checked per cell (network x workload): the predicted requests and bytes against the
//! run's, the predicted network time against the simulated one (exact but for HTTP heads),
//! and that the driver's automatic choice is the protocol the model predicts faster; the
//! ratio of the chosen run to the faster forced run and the computation's prediction error
//! are printed (real computation on a shared machine: the field tests hold those targets).
//! Then that the link estimator recovers a simulated link from a run's timings.

mod common;

use psi_client::measure::{Clock, DeviceCosts, LinkEstimate, LinkHints, Measurements};
use psi_client::{
    CancelToken, Client, ClientConfig, HttpTransport, MatchReport, MeasurementStore, Policy,
    Protocol, ProtocolChoice, Request, Response, Source, Transport, TransportError,
};
use psi_core::cost::{self, Link, Workload};
use psi_server::{Config, RunningServer};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A transport over a simulated link, and the clock of that simulation.
struct SimLink {
    inner: HttpTransport,
    link: Mutex<Link>,
    start: Instant,
    /// Simulated network seconds so far.
    delay: Mutex<f64>,
    /// Every request sent, as "METHOD path?query".
    seen: Mutex<Vec<String>>,
}

impl SimLink {
    fn new(link: Link) -> Arc<SimLink> {
        Arc::new(SimLink {
            inner: HttpTransport::new(),
            link: Mutex::new(link),
            start: Instant::now(),
            delay: Mutex::new(0.0),
            seen: Mutex::new(Vec::new()),
        })
    }
    fn set(&self, link: Link) {
        *self.link.lock().unwrap() = link;
    }
    fn seconds(&self) -> f64 {
        self.now().as_secs_f64()
    }
    /// Simulated network seconds so far.
    fn network(&self) -> f64 {
        *self.delay.lock().unwrap()
    }
    /// The requests sent since the last call, as "METHOD path?query".
    fn take_seen(&self) -> Vec<String> {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

fn header_bytes(h: &[(String, String)]) -> u64 {
    h.iter().map(|(k, v)| (k.len() + v.len() + 4) as u64).sum()
}

impl Transport for SimLink {
    fn send(&self, request: Request) -> Result<Response, TransportError> {
        // Request line and host header, then the headers and the body.
        let up = 40 + request.url.len() as u64 + header_bytes(&request.headers);
        let up = up + request.body.len() as u64;
        let path = request.url.find("/v1/").map_or("", |i| &request.url[i..]);
        self.seen
            .lock()
            .unwrap()
            .push(format!("{:?} {path}", request.method).to_uppercase());
        let resp = self.inner.send(request)?;
        let down = 17 + header_bytes(&resp.headers) + resp.body.len() as u64;
        let l = *self.link.lock().unwrap();
        *self.delay.lock().unwrap() += l.rtt + up as f64 / l.up + down as f64 / l.down;
        Ok(resp)
    }
}

impl Clock for SimLink {
    fn now(&self) -> Duration {
        self.start.elapsed() + Duration::from_secs_f64(*self.delay.lock().unwrap())
    }
}

/// The PSZ14 networks (one-way latency doubled to a round trip; the same rate both
/// ways) and three mobile ones: (name, RTT ms, up Mbit/s, down Mbit/s).
const NETWORKS: &[(&str, f64, f64, f64)] = &[
    ("LAN 1000 Mbit/s 0.2 ms", 0.4, 1000.0, 1000.0),
    ("WiFi 54 Mbit/s 0.2 ms", 0.4, 54.0, 54.0),
    ("WAN 25 Mbit/s 10 ms", 20.0, 25.0, 25.0),
    ("WAN 10 Mbit/s 50 ms", 100.0, 10.0, 10.0),
    ("HSDPA 3.6 Mbit/s 500 ms", 1000.0, 3.6, 3.6),
    ("4G 20/5 Mbit/s 30 ms", 60.0, 5.0, 20.0),
    ("3G 2/0.5 Mbit/s 100 ms", 200.0, 0.5, 2.0),
    ("satellite 10 Mbit/s 300 ms", 600.0, 10.0, 10.0),
];

fn link(n: &(&str, f64, f64, f64)) -> Link {
    Link::mbit(n.1, n.2, n.3)
}

fn items(prefix: &str, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("{prefix}{i}@example.com").into_bytes())
        .collect()
}

/// A server over loopback with `n` labelled entries, limits off (many sessions).
fn server(n: usize) -> RunningServer {
    server_with(n, false)
}

/// [`server`], running CM20-PSI too if `cm20`.
fn server_with(n: usize, cm20: bool) -> RunningServer {
    server_labelled(n, cm20, |i| format!("member-{i}"))
}

/// [`server_with`] with the labels `label(i)`.
fn server_labelled(n: usize, cm20: bool, label: impl Fn(usize) -> String) -> RunningServer {
    let mut config = Config::default();
    config.enable_cm20 = cm20;
    config.db = psi_server::Database::memory();
    config.build_threads = 2;
    config.workers = 2;
    config.ot_workers = 1;
    config.items_per_hour = 0;
    config.ot_sessions_per_hour = 0;
    // The grid downloads the encoded set and fetches labels far more often than a caller
    // may in an hour (label fetches count against the same byte budget, issue 35 item 6):
    // a refused label fetch would shorten the simulated run.
    config.encoded_set_bytes_per_hour = 0;
    config.max_client_items = 10_000;
    let entries = items("s", n);
    let labels: Vec<String> = (0..n).map(label).collect();
    common::serve_entries(
        config,
        entries
            .iter()
            .zip(&labels)
            .map(|(e, l)| (std::str::from_utf8(e).unwrap(), Some(l.as_str()))),
    )
}

/// The client's items: an eighth of them in the registry (every match gets its label:
/// the label step has a slot per item).
fn client_items(n_c: usize) -> Vec<Vec<u8>> {
    let mut v = items("s", n_c / 8);
    v.extend(items("c", n_c - n_c / 8));
    v
}

struct Cell {
    network: &'static str,
    workload: &'static str,
    predicted: [f64; 2],
    simulated: [f64; 2],
    chosen: Protocol,
}

/// Runs `choice` once over `sim` (already set to the cell's link) and returns the
/// report, the simulated seconds and the network's part of them.
fn timed3(
    client: &Client,
    sim: &SimLink,
    n_c: usize,
    choice: ProtocolChoice,
) -> (MatchReport, f64, f64) {
    let (t, n) = (sim.seconds(), sim.network());
    let r = client
        .match_items(client_items(n_c), choice, &mut |_| {}, &CancelToken::new())
        .unwrap();
    (r, sim.seconds() - t, sim.network() - n)
}

fn timed(client: &Client, sim: &SimLink, n_c: usize, choice: ProtocolChoice) -> (MatchReport, f64) {
    let (r, t, _) = timed3(client, sim, n_c, choice);
    (r, t)
}

#[test]
fn predictions_track_simulated_runs_and_auto_picks_the_faster_protocol() {
    // One client thread: the machine's 2 cores are shared with the server in this process
    // (and with other builds), so a second thread's speed-up is not what we test here.
    let threads = 1u32;
    let mut cells: Vec<Cell> = Vec::new();
    let mut worst_error: f64 = 0.0;
    let mut worst_compute: f64 = 1.0;
    // (name, n_c, n_s, warm encoded-set cache)
    let workloads: &[(&str, usize, usize, bool)] = &[
        ("balanced 2^10", 1 << 10, 1 << 10, false),
        ("balanced 2^12", 1 << 12, 1 << 12, false),
        ("1,000 vs 10^5 cold", 1000, 100_000, false),
        ("1,000 vs 10^5 warm", 1000, 100_000, true),
    ];
    let mut servers: Vec<(usize, RunningServer)> = Vec::new();
    for &(wname, n_c, n_s, warm) in workloads {
        if !servers.iter().any(|(n, _)| *n == n_s) {
            servers.push((n_s, server(n_s)));
        }
        let srv = &servers.iter().find(|(n, _)| *n == n_s).unwrap().1;
        let sim = SimLink::new(link(&NETWORKS[0]));
        // Calibrated now, under the machine's current load, as the server was at start.
        let device = psi_client::measure::calibrate_device();
        let mut m = Measurements::default();
        m.device = Some(device);
        let store = Arc::new(MeasurementStore::new(m));
        let config = ClientConfig::default().with_threads(psi_core::Threads::new(threads as usize));
        // Warm: one cache, filled once and shared by every run. Cold: a new empty cache
        // for each run.
        let warm_cache: Arc<dyn psi_client::SetCache> = Arc::new(psi_client::MemoryCache::new());
        let cache = || -> Arc<dyn psi_client::SetCache> {
            if warm {
                warm_cache.clone()
            } else {
                Arc::new(psi_client::MemoryCache::new())
            }
        };
        let client_with = |config: ClientConfig, store: Arc<MeasurementStore>| {
            Client::with_transport(&srv.url(), sim.clone(), config)
                .with_measurements(store)
                .with_clock(sim.clone())
                .with_cache(cache())
        };
        let client = client_with(config.clone(), store.clone());
        // The server's health (with its advertised costs) is stored, as after a first run.
        let health = client.health().unwrap();
        assert!(health.costs.is_some(), "the server advertises its costs");
        store.update(|m| {
            m.servers.insert(srv.url(), health.clone());
        });
        if warm {
            client
                .match_items(
                    client_items(n_c),
                    Protocol::Dh,
                    &mut |_| {},
                    &CancelToken::new(),
                )
                .unwrap();
        }
        for net in NETWORKS {
            let l = link(net);
            sim.set(l);
            let mut predicted = [0.0; 2];
            let mut simulated = [0.0; 2];
            for (i, p) in [Protocol::Dh, Protocol::Ot].into_iter().enumerate() {
                // The faster of two runs: less of the machine's noise in the comparison.
                let client = client_with(config.clone(), store.clone());
                let (r, t, net_t) = timed3(&client, &sim, n_c, p.into());
                let client = client_with(config.clone(), store.clone());
                let (_, t2, net_t2) = timed3(&client, &sim, n_c, p.into());
                let (t, net_t) = if t2 < t { (t2, net_t2) } else { (t, net_t) };
                assert_eq!(r.matches.len(), n_c / 8, "{wname} {p}");
                assert!(r.matches.iter().all(|m| m.label.is_some()));
                assert_eq!(r.stats.set_from_cache, warm && p == Protocol::Dh);
                let w = Workload::new(n_c as u64, n_s as u64)
                    .with_cached_set(warm)
                    .with_limits(u64::from(health.max_client_items), health.max_body_bytes)
                    .with_label_layout(
                        Some(health.label_bucket_bits),
                        Some(health.label_record_bytes),
                    )
                    .with_label_lanes(health.label_lane_width);
                let inputs = cost::Inputs {
                    link: l,
                    client: device.units(threads),
                    server: psi_client::measure::server_units(&health).unwrap(),
                };
                let pred = cost::predict(p, &w, &inputs).unwrap();
                // Requests exactly as the driver makes them; bytes by the spec formulas
                // (the label records' size is an estimate: within 5%).
                assert_eq!(
                    pred.requests as usize, r.stats.requests,
                    "{wname} {p} requests"
                );
                let c = cost::cost(p, &w).unwrap();
                // After the protocol's requests: DH-PSI's label fetch, OT-PSI's label query
                // and fetch (none when its run carried the labels in lanes).
                let label_steps = match p {
                    _ if c.labels_carried => 0,
                    Protocol::Dh => 1,
                    _ => 2,
                };
                let protocol_up: u64 = c.requests[1..c.requests.len() - label_steps]
                    .iter()
                    .map(|e| e.up)
                    .sum();
                assert_eq!(
                    protocol_up, r.stats.protocol_bytes_sent,
                    "{wname} {p} protocol bytes up"
                );
                let rel = |a: u64, b: u64| (a as f64 / b as f64 - 1.0).abs();
                assert!(
                    rel(pred.bytes_up, r.stats.bytes_sent) < 0.05,
                    "{wname} {p} up {pred:?} {:?}",
                    r.stats
                );
                assert!(
                    rel(pred.bytes_down, r.stats.bytes_received) < 0.05,
                    "{wname} {p} down {pred:?} {:?}",
                    r.stats
                );
                predicted[i] = pred.total();
                simulated[i] = t;
                let err = (pred.total() - t).abs() / t;
                worst_error = worst_error.max(err);
                eprintln!(
                    "{:<28} {:<20} {p}: predicted {:>8.1} ms (net {:>8.1}, client {:>6.1}, server {:>6.1}), simulated {:>8.1} ms, {} requests",
                    net.0,
                    wname,
                    pred.total() * 1e3,
                    pred.network * 1e3,
                    pred.client * 1e3,
                    pred.server * 1e3,
                    t * 1e3,
                    r.stats.requests
                );
                // The network part is simulated: the model's must match it (HTTP heads are
                // estimated: within 2% or 1 ms).
                assert!(
                    (pred.network - net_t).abs() <= 0.02 * net_t + 0.001,
                    "{} {wname} {p}: network predicted {:.4} s, simulated {net_t:.4} s",
                    net.0,
                    pred.network
                );
                // Computation is real and the machine is shared (CI runs other tests beside
                // this one), so how far the computation is from its prediction is printed,
                // not asserted: the field tests and `psi bench` measure it. 15 ms per request
                // is what the model leaves to the measured RTT on real links (HTTP
                // processing on both sides).
                let compute = t - net_t;
                let pc = pred.client + pred.server;
                let slack = 0.015 * r.stats.requests as f64;
                worst_compute = worst_compute
                    .max(compute / (pc + slack))
                    .max(pc / (compute + slack));
            }
            // The automatic choice, with the link given exactly (the estimator is tested
            // below) and the stored device and server costs: no extra request.
            let auto_client = client_with(
                config.clone().with_link_hints(
                    LinkHints::new(net.0)
                        .with_bandwidth(net.3, net.2)
                        .with_rtt_ms(net.1),
                ),
                Arc::new(MeasurementStore::new(store.snapshot())),
            );
            let (r, _) = timed(
                &auto_client,
                &sim,
                n_c,
                ProtocolChoice::Auto(Policy::Fastest),
            );
            let choice = r.choice.as_ref().expect("auto reports its choice");
            assert!(!choice.health_requested);
            assert_eq!(choice.choice.protocol, r.protocol);
            // The server does not offer CM20-PSI: two candidates.
            assert_eq!(choice.choice.predictions.len(), 2);
            assert_eq!(choice.workload.cached_set, warm, "{wname}");
            cells.push(Cell {
                network: net.0,
                workload: wname,
                predicted,
                simulated,
                chosen: r.protocol,
            });
        }
    }
    let mut within_110 = 0;
    let mut decided = 0;
    for c in &cells {
        let best = c.simulated[0].min(c.simulated[1]);
        let got = c.simulated[if c.chosen == Protocol::Dh { 0 } else { 1 }];
        let ratio = got / best;
        eprintln!(
            "{:<28} {:<20} DH {:>8.1} / {:>8.1} ms, OT {:>8.1} / {:>8.1} ms (predicted / simulated); auto {} at {ratio:.2}x the best",
            c.network,
            c.workload,
            c.predicted[0] * 1e3,
            c.simulated[0] * 1e3,
            c.predicted[1] * 1e3,
            c.simulated[1] * 1e3,
            c.chosen
        );
        if ratio <= 1.10 {
            within_110 += 1;
        }
        // Deterministic: with the same inputs, the driver's automatic choice is the
        // protocol the model predicts faster (the simulated times include real computation
        // on a shared machine, so the ratio above is printed, not asserted; the field
        // tests hold the 1.10x / 1.25x targets).
        // Where the two predictions are within 10% of each other, the driver's inputs (its
        // link estimate, updated by every earlier run of the store, and a device
        // calibration taken on a loaded machine) may tip the choice either way: a near tie,
        // where either protocol is within about 1.10x of the other. Elsewhere it must agree.
        let predicted_best = if c.predicted[0] <= c.predicted[1] {
            Protocol::Dh
        } else {
            Protocol::Ot
        };
        let apart = (c.predicted[0] - c.predicted[1]).abs() / c.predicted[0].min(c.predicted[1]);
        if apart > 0.10 {
            decided += 1;
            assert_eq!(c.chosen, predicted_best, "{} {}", c.network, c.workload);
        }
    }
    eprintln!(
        "auto within 1.10x of the faster simulated run in {within_110} of {} cells; worst prediction error {:.0}% of the total, computation off by up to {worst_compute:.2}x",
        cells.len(),
        worst_error * 100.0
    );
    // Most cells are not near ties, so the check above means something.
    assert!(
        decided * 2 > cells.len(),
        "{decided} of {} cells decided",
        cells.len()
    );
    // These runs fetch labels, and OT-PSI's label query is an OPRF query over every item
    // (docs/adr/0033-a-label-for-every-match.md): DH-PSI wins the cells. The choice
    // between the two without labels, where each wins somewhere, is checked by
    // `the_link_estimate_follows_the_simulated_link_and_drives_the_choice`.
    assert!(cells.iter().any(|c| c.chosen == Protocol::Dh));
}

/// CM20-PSI cells: on a server that offers it, a forced CM20 run's requests and protocol
/// bytes are the model's exactly, its bytes within 5% and its network time within 2% of
/// the simulation. The automatic choice, on the reference machine both sides (so the
/// answer does not depend on this machine's speed), weighs three candidates and takes
/// the one the cell's structure says wins: on WiFi (bandwidth plenty, computation
/// decides) CM20-PSI, a little ahead of OT-PSI (fewer bytes, one hash per item instead
/// of three) and far ahead of DH-PSI (scalar multiplications, at least 2x); on 3G
/// (0.5 Mbit/s up, bytes decide) DH-PSI, whose upload is a third of the others' (they
/// at least 1.4x slower). The inputs are fixed, so a regression of the model fails
/// here. On a server without it, CM20 is not a candidate.
#[test]
fn a_cm20_cell_matches_its_prediction_and_auto_weighs_three() {
    let (n_c, n_s) = (1 << 12, 1 << 12);
    let srv = server_with(n_s, true);
    let sim = SimLink::new(link(&NETWORKS[1]));
    let device = psi_client::measure::calibrate_device();
    let mut m = Measurements::default();
    m.device = Some(device);
    let store = Arc::new(MeasurementStore::new(m));
    let config = ClientConfig::default().with_threads(psi_core::Threads::ONE);
    let client_with = |config: ClientConfig, store: Arc<MeasurementStore>| {
        Client::with_transport(&srv.url(), sim.clone(), config)
            .with_measurements(store)
            .with_clock(sim.clone())
    };
    let health = client_with(config.clone(), store.clone()).health().unwrap();
    assert!(health.protocols.iter().any(|p| p == "cm20-psi"));
    assert!(health.costs.unwrap().units.own.is_complete());
    store.update(|m| {
        m.servers.insert(srv.url(), health.clone());
    });
    // WiFi (bandwidth plenty: computation decides) and 3G (bytes decide), with the
    // winner of each on the reference machine.
    let cells: [(_, _, &[(Protocol, f64)]); 2] = [
        (
            &NETWORKS[1],
            Protocol::Cm20,
            &[(Protocol::Ot, 1.0), (Protocol::Dh, 2.0)],
        ),
        (
            &NETWORKS[6],
            Protocol::Dh,
            &[(Protocol::Ot, 1.4), (Protocol::Cm20, 1.4)],
        ),
    ];
    for (net, winner, slower) in cells {
        let l = link(net);
        sim.set(l);
        let client = client_with(config.clone(), store.clone());
        let (r, t, net_t) = timed3(&client, &sim, n_c, Protocol::Cm20.into());
        assert_eq!(r.protocol, Protocol::Cm20);
        assert_eq!(r.matches.len(), n_c / 8);
        assert!(r.matches.iter().all(|m| m.label.is_some()));
        // The labels ("member-i") fit label lanes: the forced CM20-PSI run carries them
        // (cm20-psi.md §4.7), and the prediction counts the lanes, as the client does.
        assert!(health.label_lane_width.is_some());
        assert_eq!(
            r.stats.label_bytes, 0,
            "{}: the run carried the labels",
            net.0
        );
        let w = Workload::new(n_c as u64, n_s as u64)
            .with_limits(u64::from(health.max_client_items), health.max_body_bytes)
            .with_label_layout(
                Some(health.label_bucket_bits),
                Some(health.label_record_bytes),
            )
            .with_label_lanes(health.label_lane_width);
        let inputs = cost::Inputs {
            link: l,
            client: device.units(1),
            server: psi_client::measure::server_units(&health).unwrap(),
        };
        let pred = cost::predict(Protocol::Cm20, &w, &inputs).unwrap();
        assert_eq!(pred.requests as usize, r.stats.requests, "{}", net.0);
        let c = cost::cost(Protocol::Cm20, &w).unwrap();
        assert!(c.labels_carried);
        // Session first; no label step after the run's own requests.
        let protocol_up: u64 = c.requests[1..].iter().map(|e| e.up).sum();
        assert_eq!(protocol_up, r.stats.protocol_bytes_sent);
        let rel = |a: u64, b: u64| (a as f64 / b as f64 - 1.0).abs();
        assert!(rel(pred.bytes_up, r.stats.bytes_sent) < 0.05, "{pred:?}");
        assert!(
            rel(pred.bytes_down, r.stats.bytes_received) < 0.05,
            "{pred:?}"
        );
        assert!(
            (pred.network - net_t).abs() <= 0.02 * net_t + 0.001,
            "{}: network predicted {:.4} s, simulated {net_t:.4} s",
            net.0,
            pred.network
        );
        // The reference machine both sides: a device calibration and a server health
        // without costs.
        let mut reference = store.snapshot();
        reference.device = Some(DeviceCosts::from_units(&cost::UnitCosts::REFERENCE));
        if let Some(h) = reference.servers.get_mut(&srv.url()) {
            h.costs = None;
        }
        // The choice among the three without labels (with labels and no label lanes, the
        // OT-PSI family's label query over every item makes DH-PSI win: ADR 0033).
        let auto = client_with(
            config.clone().with_labels(false).with_link_hints(
                LinkHints::new(net.0)
                    .with_bandwidth(net.3, net.2)
                    .with_rtt_ms(net.1),
            ),
            Arc::new(MeasurementStore::new(reference)),
        );
        let (r, _) = timed(&auto, &sim, n_c, ProtocolChoice::Auto(Policy::Fastest));
        let c = r.choice.as_ref().unwrap();
        assert_eq!(c.device_source, Source::Measured);
        assert_eq!(c.server_source, Source::Default);
        let choice = &c.choice;
        assert_eq!(choice.predictions.len(), 3);
        assert_eq!(r.protocol, winner, "{}: {:?}", net.0, choice.predictions);
        let total = |p: Protocol| choice.prediction(p).unwrap().total();
        for &(p, factor) in slower {
            assert!(
                total(p) > factor * total(winner),
                "{}: {p} not {factor}x slower than {winner}: {:?}",
                net.0,
                choice.predictions
            );
        }
        eprintln!(
            "{:<28} CM20 predicted {:.1} ms (net {:.1}), simulated {:.1} ms; auto chose {} among {:?}",
            net.0,
            pred.total() * 1e3,
            pred.network * 1e3,
            t * 1e3,
            r.protocol,
            choice
                .predictions
                .iter()
                .map(|p| (p.protocol.api_name(), (p.total() * 1e3).round()))
                .collect::<Vec<_>>()
        );
    }
}

/// A client of `srv` over a simulated `link` on the network "cell" (no hints), with its
/// own measurement store and the link's clock.
fn on_cell(srv: &RunningServer, link: Link) -> (Arc<SimLink>, Arc<MeasurementStore>, Client) {
    let sim = SimLink::new(link);
    let store = Arc::new(MeasurementStore::default());
    let client = Client::with_transport(
        &srv.url(),
        sim.clone(),
        ClientConfig::default()
            .with_threads(psi_core::Threads::new(2))
            .with_link_hints(LinkHints::new("cell")),
    )
    .with_measurements(store.clone())
    .with_clock(sim.clone());
    (sim, store, client)
}

#[test]
fn the_link_estimate_follows_the_simulated_link_and_drives_the_choice() {
    // Labels too long for label lanes (over 15 bytes), so the forced OT-PSI runs below keep
    // the label query and fetch: the fetch is the pure download that teaches the estimator
    // its down rate. An OT-PSI run with lanes has none (its largest download shares a
    // request with the last matrix chunk), so the down rate comes from other runs (ADR
    // 0057; the next test runs with lanes).
    let srv = server_labelled(4096, false, |i| format!("member-label-{i:08}"));
    // 3G: 200 ms, 0.5 up, 2 down.
    let truth = Link::mbit(200.0, 0.5, 2.0);
    let (sim, store, client) = on_cell(&srv, truth);
    // The automatic choices run without labels: with them DH-PSI wins on every link
    // (docs/adr/0033-a-label-for-every-match.md). The forced runs that teach the
    // estimator keep them (the label query is the largest upload of an OT-PSI run).
    let chooser = Client::with_transport(
        &srv.url(),
        sim.clone(),
        client.config().clone().with_labels(false),
    )
    .with_measurements(store.clone())
    .with_clock(sim.clone());
    // First automatic run: no estimate for "cell", so the health request and the
    // default prior; the device is calibrated once.
    let (first, _) = timed(&chooser, &sim, 4096, ProtocolChoice::default());
    let c = first.choice.as_ref().unwrap();
    assert!(c.health_requested);
    // A few forced runs teach the estimator (every run feeds it).
    for _ in 0..3 {
        timed(&client, &sim, 4096, Protocol::Ot.into());
    }
    let m = store.snapshot();
    // Calibrated where the device could change that first choice, else not (ADR 0054).
    assert_eq!(m.device.is_some(), c.device_source == Source::Measured);
    let e: LinkEstimate = m.networks["cell"];
    let close = |a: f64, b: f64, tol: f64| (a / b - 1.0).abs() < tol;
    // The loopback server's real time is part of each request: RTT within 25%, rates
    // within 20%.
    assert!(close(e.rtt, truth.rtt, 0.25), "{e:?}");
    assert!(close(e.up, truth.up, 0.2), "{e:?}");
    assert!(close(e.down, truth.down, 0.2), "{e:?}");
    // With the measured link, the next choice needs no request and uses it.
    let (next, _) = timed(&chooser, &sim, 4096, ProtocolChoice::default());
    let c = next.choice.as_ref().unwrap();
    assert!(!c.health_requested);
    assert_eq!(c.link_source, psi_client::Source::Measured);
    assert_eq!(
        c.choice.protocol,
        Protocol::Dh,
        "{:?}",
        c.choice.predictions
    );
    // On a LAN the estimate moves within a few runs and the choice follows.
    sim.set(Link::mbit(0.4, 1000.0, 1000.0));
    for _ in 0..4 {
        timed(&client, &sim, 4096, Protocol::Ot.into());
    }
    let (lan, _) = timed(&chooser, &sim, 4096, ProtocolChoice::default());
    assert_eq!(lan.choice.as_ref().unwrap().choice.protocol, Protocol::Ot);
    // Fewest bytes picks DH-PSI whatever the link.
    let (lean, _) = timed(
        &chooser,
        &sim,
        4096,
        ProtocolChoice::Auto(Policy::FewestBytes),
    );
    assert_eq!(lean.protocol, Protocol::Dh);
}

#[test]
fn runs_with_label_lanes_keep_the_link_estimate_near_the_link() {
    // Labels short enough for label lanes. A balanced 2^12 OT-PSI run with lanes then makes
    // one large request: the matrix up (333 KB) and the outputs with their lanes down (209
    // KB). Which direction was slow cannot be told from it, so the estimator scales both
    // rates to explain its time (ADR 0057). It used to count it as an upload with the
    // download taken off at a guess, and three runs left the rates at 3x and 0.2x the
    // truth (ADR 0053).
    let srv = server_labelled(4096, false, |i| format!("m-{i:06}"));
    // 3G: 200 ms, 0.5 up, 2 down.
    let truth = Link::mbit(200.0, 0.5, 2.0);
    let (sim, store, client) = on_cell(&srv, truth);
    let mut bytes = (0, 0);
    for _ in 0..3 {
        let (r, _) = timed(&client, &sim, 4096, Protocol::Ot.into());
        assert_eq!(r.stats.label_bytes, 0, "labels came in the lanes");
        bytes = (r.stats.bytes_sent, r.stats.bytes_received);
    }
    let e: LinkEstimate = store.snapshot().networks["cell"];
    // Neither rate ran off: each within 2x of the truth (from the default prior's 5 up and
    // 10 down Mbit/s, 10x and 5x off).
    let within = |a: f64, b: f64, f: f64| a / b < f && b / a < f;
    assert!(within(e.up, truth.up, 2.0), "{e:?}");
    assert!(within(e.down, truth.down, 2.0), "{e:?}");
    // And together they explain a run's transfer time on the link within 10%.
    let time = |l: Link| bytes.0 as f64 / l.up + bytes.1 as f64 / l.down;
    assert!(within(time(e.link()), time(truth), 1.1), "{e:?} {bytes:?}");
}

/// A stored health can go stale: a server restarted without OT-PSI refuses the session
/// the choice asked for; the stale health is dropped and the next automatic run asks
/// again and picks a protocol the server runs.
#[test]
fn a_stale_stored_health_is_dropped_after_an_unsupported_protocol() {
    let mut config = Config::default();
    config.db = psi_server::Database::memory();
    config.enable_ot = false;
    config.items_per_hour = 0;
    let srv = common::serve_entries(config, [("s1@example.com", None)]);
    let sim = SimLink::new(Link::mbit(0.4, 1000.0, 1000.0));
    let measurements = Arc::new(MeasurementStore::default());
    let client = Client::with_transport(
        &srv.url(),
        sim.clone(),
        // Without labels, so that OT-PSI is the prediction (ADR 0033).
        ClientConfig::default().with_retries(0).with_labels(false),
    )
    .with_measurements(measurements.clone())
    .with_clock(sim.clone());
    // What a client stored while the server still ran OT-PSI (4,096 balanced on a LAN:
    // OT-PSI is the prediction).
    let mut stale = client.health().unwrap();
    assert_eq!(stale.protocols, ["dh-psi"]);
    stale.protocols.push("ot-psi".into());
    stale.registry_items = 4096;
    measurements.update(|m| {
        m.servers.insert(srv.url(), stale);
        m.device = Some(psi_client::measure::calibrate_device());
        // A LAN measured before.
        m.networks.insert(
            String::new(),
            LinkEstimate {
                rtt: 0.0004,
                up: 125e6,
                down: 125e6,
                rtt_samples: 1,
                up_samples: 1,
                down_samples: 1,
            },
        );
    });
    let run = || {
        client.match_items(
            client_items(4096),
            ProtocolChoice::default(),
            &mut |_| {},
            &CancelToken::new(),
        )
    };
    let e = run().unwrap_err();
    assert!(
        matches!(
            e,
            psi_client::ClientError::Http {
                code: psi_client::ErrorCode::UnsupportedProtocol,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(measurements.snapshot().servers.is_empty());
    let r = run().unwrap();
    assert_eq!(r.protocol, Protocol::Dh);
    assert!(r.choice.unwrap().health_requested);
}

/// The requests of `seen` without the bounded probe's (which a first run on a network may
/// add, and which is not what ADR 0054 changes).
fn without_probe(seen: Vec<String>) -> Vec<String> {
    seen.into_iter()
        .filter(|r| !r.contains("/V1/PROBE"))
        .collect()
}

/// A client of `srv` over `sim` with its own measurements (empty: a first run) and set
/// cache.
fn fresh_client(srv: &RunningServer, sim: &Arc<SimLink>, config: ClientConfig) -> Client {
    Client::with_transport(&srv.url(), sim.clone(), config)
        .with_measurements(Arc::new(MeasurementStore::default()))
        .with_clock(sim.clone())
}

/// A first run's client of `srv` over `sim` (a LAN) with the LAN's hints, no retries.
fn lan_first_client(srv: &RunningServer, sim: &Arc<SimLink>) -> Client {
    let hints = LinkHints::new("lan")
        .with_bandwidth(1000.0, 1000.0)
        .with_rtt_ms(0.4);
    fresh_client(
        srv,
        sim,
        ClientConfig::default()
            .with_threads(psi_core::Threads::new(2))
            .with_link_hints(hints)
            .with_retries(0),
    )
}

/// ADR 0054, where DH-PSI wins (a far, slow link: HSDPA's 1 s RTT): a first run asks for
/// the health with its DH-PSI session and goes on in it, so it makes the requests an app
/// that has run before makes, and no `GET /v1/health`.
#[test]
fn a_first_run_makes_a_warm_runs_requests_where_dh_psi_wins() {
    let srv = server(20_000);
    let sim = SimLink::new(Link::mbit(1000.0, 3.6, 3.6));
    let hints = LinkHints::new("hsdpa")
        .with_bandwidth(3.6, 3.6)
        .with_rtt_ms(1000.0);
    let config = ClientConfig::default()
        .with_threads(psi_core::Threads::new(2))
        .with_link_hints(hints);
    let first_client = fresh_client(&srv, &sim, config.clone());
    sim.take_seen();
    let (first, t_first, net_first) = timed3(&first_client, &sim, 256, ProtocolChoice::default());
    let first_seen = without_probe(sim.take_seen());
    let c = first.choice.as_ref().unwrap();
    assert_eq!(first.protocol, Protocol::Dh);
    assert!(c.health_requested && c.health_with_session, "{c:?}");
    assert!(
        !first_seen.iter().any(|r| r.contains("/V1/HEALTH")),
        "{first_seen:?}"
    );
    assert!(
        first_seen[0].starts_with("POST /V1/SESSIONS?HEALTH=1"),
        "{first_seen:?}"
    );
    assert_eq!(first.matches.len(), 32);
    // An app that has run before: the measurements the first run left, a new set cache
    // (the same cold workload).
    let warm_client = Client::with_transport(&srv.url(), sim.clone(), config)
        .with_measurements(first_client.measurements().clone())
        .with_clock(sim.clone());
    let (warm, t_warm, net_warm) = timed3(&warm_client, &sim, 256, ProtocolChoice::default());
    let warm_seen = sim.take_seen();
    assert_eq!(warm.protocol, Protocol::Dh);
    assert!(!warm.choice.as_ref().unwrap().health_requested);
    // The same requests but the query on the first session (session ids apart).
    let strip = |v: &[String]| -> Vec<String> {
        v.iter()
            .map(|r| {
                let r = match r.split_once('?') {
                    Some((path, _)) if r.starts_with("POST") => path.to_string(),
                    _ => r.clone(),
                };
                match r.split_once("/SESSIONS/") {
                    Some((head, tail)) => {
                        let rest = tail.split_once('/').map_or("", |(_, rest)| rest);
                        format!("{head}/SESSIONS/{{id}}/{rest}")
                    }
                    None => r,
                }
            })
            .collect()
    };
    assert_eq!(strip(&first_seen), strip(&warm_seen));
    assert_eq!(first.stats.requests, warm.stats.requests);
    // The network time of the run is the warm run's (the probe apart): one round trip of
    // 1 s is not added.
    let probe_net = if c.probe_requests > 0 { 3.0 * 1.1 } else { 0.0 };
    assert!(
        net_first <= net_warm + probe_net + 0.05 * net_warm,
        "first {net_first:.2} s of network against warm {net_warm:.2}"
    );
    println!(
        "first run {t_first:.2} s ({net_first:.2} s network, probe {} requests), warm run {t_warm:.2} s ({net_warm:.2} s network), device {:?}",
        c.probe_requests, c.device_source
    );
}

/// ADR 0054, where the choice is OT-PSI (balanced on a LAN): the first run's plan asks for
/// OT-PSI at this registry size, the server creates that session, and the run goes on in
/// it: one session request, no health request.
#[test]
fn a_first_runs_plan_gets_the_ot_psi_session_it_then_chooses() {
    let srv = one_session_server(4096, false);
    let sim = SimLink::new(Link::mbit(0.4, 1000.0, 1000.0));
    let client = lan_first_client(&srv, &sim);
    sim.take_seen();
    let (r, _) = timed(&client, &sim, 4096, ProtocolChoice::default());
    let seen = without_probe(sim.take_seen());
    assert_eq!(r.protocol, Protocol::Ot, "{:?}", r.choice);
    let c = r.choice.as_ref().unwrap();
    assert!(c.health_with_session);
    assert!(
        seen[0].contains("&PLAN=") && seen[0].contains("OT-PSI:"),
        "{seen:?}"
    );
    assert!(!seen.iter().any(|r| r.contains("/V1/HEALTH")), "{seen:?}");
    let sessions = seen
        .iter()
        .filter(|r| r.starts_with("POST /V1/SESSIONS?") || r.ends_with("/V1/SESSIONS"));
    assert_eq!(sessions.count(), 1, "{seen:?}");
    assert_eq!(r.matches.len(), 512);
    // Every match's label came with the run (OT-PSI's label lanes).
    assert!(r.matches.iter().all(|m| m.label.is_some()));
    assert_eq!(srv.state.live_sessions(), 0);
}

/// ADR 0054, where the choice is not what the plan assumed (a registry whose labels are
/// too long for label lanes: the plan assumed lanes and asked for OT-PSI, whose label step
/// over every item then makes DH-PSI the choice): the opened OT-PSI session is replaced by
/// the DH-PSI one on the server (with one session allowed per caller, the run could not go
/// on otherwise), and nothing is left behind.
#[test]
fn a_first_run_that_chooses_against_its_plan_replaces_its_session() {
    let srv = one_session_server_labelled(4096, false, |i| format!("member-label-{i:08}"));
    let sim = SimLink::new(Link::mbit(0.4, 1000.0, 1000.0));
    let client = lan_first_client(&srv, &sim);
    sim.take_seen();
    let (r, _) = timed(&client, &sim, 4096, ProtocolChoice::default());
    let seen = without_probe(sim.take_seen());
    assert_eq!(r.protocol, Protocol::Dh, "{:?}", r.choice);
    assert!(r.choice.as_ref().unwrap().health_with_session);
    assert!(!seen.iter().any(|r| r.contains("/V1/HEALTH")), "{seen:?}");
    let sessions: Vec<&String> = seen
        .iter()
        .filter(|r| r.starts_with("POST /V1/SESSIONS?") || r.ends_with("/V1/SESSIONS"))
        .collect();
    assert_eq!(sessions.len(), 2, "{seen:?}");
    assert!(
        sessions[0].contains("&PLAN=") && sessions[0].contains("OT-PSI:"),
        "{seen:?}"
    );
    assert_eq!(sessions[1], "POST /V1/SESSIONS", "{seen:?}");
    assert!(!seen.iter().any(|r| r.starts_with("DELETE")), "{seen:?}");
    assert!(!seen.iter().any(|r| r.contains("/OT/")), "{seen:?}");
    assert_eq!(r.matches.len(), 512);
    assert!(r.matches.iter().all(|m| m.label.is_some()));
    assert_eq!(srv.state.live_sessions(), 0);
}

/// A server that does not answer `?health=1` with the health (an older one: here the
/// query is dropped on the way, and the health lists neither feature of ADR 0054): the
/// first run asks `GET /v1/health` as before; an OT-PSI choice `DELETE`s the DH-PSI session
/// it opened, so one session per caller is still enough.
#[test]
fn a_first_run_against_an_older_server_asks_for_the_health() {
    struct Older(Arc<SimLink>);
    impl Transport for Older {
        fn send(&self, mut request: Request) -> Result<Response, TransportError> {
            if let Some((path, _)) = request.url.split_once('?')
                && path.ends_with("/v1/sessions")
            {
                request.url = path.to_string();
            }
            let health = request.url.ends_with("/v1/health");
            let mut resp = self.0.send(request)?;
            if health {
                let mut h: serde_json::Value = serde_json::from_slice(&resp.body).unwrap();
                h["features"] = serde_json::json!(["session-labels-option", "ends-sessions"]);
                resp.body = serde_json::to_vec(&h).unwrap();
            }
            Ok(resp)
        }
    }
    let srv = one_session_server(4096, false);
    let sim = SimLink::new(Link::mbit(0.4, 1000.0, 1000.0));
    let hints = LinkHints::new("lan")
        .with_bandwidth(1000.0, 1000.0)
        .with_rtt_ms(0.4);
    let client = Client::with_transport(
        &srv.url(),
        Arc::new(Older(sim.clone())),
        ClientConfig::default()
            .with_threads(psi_core::Threads::new(2))
            .with_link_hints(hints)
            .with_labels(false)
            .with_retries(0),
    )
    .with_clock(sim.clone());
    sim.take_seen();
    let r = client
        .match_items(
            client_items(4096),
            ProtocolChoice::default(),
            &mut |_| {},
            &CancelToken::new(),
        )
        .unwrap();
    let seen = without_probe(sim.take_seen());
    assert_eq!(r.protocol, Protocol::Ot, "{:?}", r.choice);
    let c = r.choice.as_ref().unwrap();
    assert!(c.health_requested && !c.health_with_session, "{c:?}");
    assert_eq!(seen[0], "POST /V1/SESSIONS", "{seen:?}");
    assert_eq!(seen[1], "GET /V1/HEALTH", "{seen:?}");
    assert!(seen[2].starts_with("DELETE /V1/SESSIONS/"), "{seen:?}");
    assert_eq!(seen[3], "POST /V1/SESSIONS", "{seen:?}");
    assert_eq!(r.matches.len(), 512);
    assert_eq!(srv.state.live_sessions(), 0);
}

/// A loopback server of `n` labelled entries that admits one session per caller, running
/// CM20-PSI too if `cm20`.
fn one_session_server(n: usize, cm20: bool) -> RunningServer {
    one_session_server_labelled(n, cm20, |i| format!("member-{i}"))
}

/// [`one_session_server`] with the labels `label(i)`.
fn one_session_server_labelled(
    n: usize,
    cm20: bool,
    label: impl Fn(usize) -> String,
) -> RunningServer {
    let mut config = Config::default();
    config.enable_cm20 = cm20;
    config.db = psi_server::Database::memory();
    config.items_per_hour = 0;
    config.ot_sessions_per_hour = 0;
    config.max_sessions_per_client = 1;
    config.max_ot_sessions_per_client = 1;
    config.max_client_items = 10_000;
    let entries = items("s", n);
    let labels: Vec<String> = (0..n).map(label).collect();
    common::serve_entries(
        config,
        entries
            .iter()
            .zip(&labels)
            .map(|(e, l)| (std::str::from_utf8(e).unwrap(), Some(l.as_str()))),
    )
}
