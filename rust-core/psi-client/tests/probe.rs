//! The bounded link probe (docs/protocol-choice.md, "Bounded probe") against the real
//! server over loopback: an automatic choice on a network with no measured rate probes
//! when the prior's uncertainty could flip a close choice, and not when a rate is stored,
//! the choice is clear, or the protocol is fixed; an older server (no features in its
//! health) is never probed nor sent `"labels": false`; a server over its probe budget
//! leaves the prior in place, the run goes on, and it is not probed again until its
//! `Retry-After` has passed.
//!
//! The device and the server are the reference machine (a stored device calibration and a
//! stored health without costs), so the decisions do not depend on this machine's speed;
//! the server, its answers and the link estimate are real.

mod common;

use psi_client::measure::{PROBE_BYTES, PROBE_RESPONSE_SLACK, probe_worthwhile};
use psi_client::{
    CancelToken, Client, ClientConfig, DeviceCosts, HttpTransport, LinkHints, MeasurementStore,
    Method, Policy, Protocol, ProtocolChoice, Request, Response, Source, Transport, TransportError,
};
use psi_core::cost::{Inputs, UnitCosts, Workload};
use psi_server::{Config, RunningServer};
use std::sync::{Arc, Mutex};

fn items(prefix: &str, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("{prefix}{i}@example.com").into_bytes())
        .collect()
}

/// A loopback server with `n` entries (no labels), OT-PSI on, the item and session
/// budgets off; `tune` adjusts the rest.
fn server(n: usize, tune: impl FnOnce(&mut Config)) -> RunningServer {
    let mut config = Config::default();
    config.db = psi_server::Database::memory();
    config.build_threads = 2;
    config.workers = 2;
    config.ot_workers = 1;
    config.items_per_hour = 0;
    config.ot_sessions_per_hour = 0;
    config.max_client_items = 10_000;
    tune(&mut config);
    let entries = items("s", n);
    common::serve_entries(
        config,
        entries
            .iter()
            .map(|e| (std::str::from_utf8(e).unwrap(), None)),
    )
}

/// Forwards to the real server and records each request; `old_server` makes it a server
/// from before the optional features: its health and sessions say nothing of them
/// (no `features`, `ends_on_completion` false), the probe route is a 404, and a session
/// request with the `labels` field is refused as an unknown field (400 `bad_request`).
struct Recording {
    inner: HttpTransport,
    seen: Mutex<Vec<Request>>,
    old_server: bool,
}

impl Recording {
    fn new(old_server: bool) -> Arc<Self> {
        Arc::new(Recording {
            inner: HttpTransport::new(),
            seen: Mutex::new(Vec::new()),
            old_server,
        })
    }
    /// The probe requests seen so far.
    fn probes(&self) -> Vec<Request> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.url.contains("/v1/probe"))
            .cloned()
            .collect()
    }
}

impl Transport for Recording {
    fn send(&self, r: Request) -> Result<Response, TransportError> {
        self.seen.lock().unwrap().push(r.clone());
        if !self.old_server {
            return self.inner.send(r);
        }
        let error = |status: u16, code: &str| Response {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: format!(r#"{{"error":"{code}","message":"old server"}}"#).into_bytes(),
        };
        if r.url.contains("/v1/probe") {
            return Ok(error(404, "not_found"));
        }
        let session_request = r.method == Method::Post && r.url.ends_with("/v1/sessions");
        if session_request {
            let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
            if body.get("labels").is_some() {
                return Ok(error(400, "bad_request"));
            }
        }
        let health = r.url.ends_with("/v1/health");
        let mut resp = self.inner.send(r)?;
        if (health || session_request) && resp.status < 300 {
            let mut v: serde_json::Value = serde_json::from_slice(&resp.body).unwrap();
            let o = v.as_object_mut().unwrap();
            o.remove("features");
            o.remove("ends_on_completion");
            resp.body = serde_json::to_vec(&v).unwrap();
        }
        Ok(resp)
    }
}

/// A client of `srv` whose store holds the reference device and the server's health
/// without costs (so the server is the reference machine too), and no link estimate.
fn reference_client(
    srv: &RunningServer,
    t: Arc<Recording>,
    hints: LinkHints,
) -> (Client, Arc<MeasurementStore>) {
    reference_client_with(srv, t, hints, true)
}

/// [`reference_client`] with labels on or off.
fn reference_client_with(
    srv: &RunningServer,
    t: Arc<Recording>,
    hints: LinkHints,
    labels: bool,
) -> (Client, Arc<MeasurementStore>) {
    let store = Arc::new(MeasurementStore::default());
    let config = ClientConfig::default()
        .with_threads(psi_core::Threads::ONE)
        .with_retries(0)
        .with_labels(labels)
        .with_link_hints(hints);
    let client =
        Client::with_transport(&srv.url(), t.clone(), config).with_measurements(store.clone());
    let mut health = client.health().unwrap();
    health.costs = None;
    t.seen.lock().unwrap().clear();
    store.update(|m| {
        m.servers.insert(srv.url(), health);
        m.device = Some(DeviceCosts::from_units(&UnitCosts::REFERENCE));
        m.networks.clear();
    });
    (client, store)
}

/// What `Client::choose` will decide about probing `n_c` items against `n_s` on the
/// default prior (factor 4), for a run without labels: the test's precondition, from the
/// model itself. (With labels, OT-PSI's label query over every item makes DH-PSI the
/// clear choice: docs/adr/0033-a-label-for-every-match.md; the close cases run without.)
fn close_on_the_default_prior(n_c: u64, n_s: u64) -> bool {
    let inputs = Inputs {
        link: psi_client::measure::DEFAULT_LINK,
        client: DeviceCosts::from_units(&UnitCosts::REFERENCE).units(1),
        server: UnitCosts::REFERENCE,
    };
    probe_worthwhile(
        &Workload::new(n_c, n_s).with_labels(false),
        &inputs,
        Policy::Fastest,
        &[Protocol::Dh, Protocol::Ot],
        4.0,
    )
}

#[test]
fn an_unmeasured_network_is_probed_when_the_choice_is_close_and_not_again() {
    let srv = server(8192, |_| {});
    assert!(close_on_the_default_prior(2048, 8192));
    let t = Recording::new(false);
    // Hints that are not numbers are no hints: the default prior, the widest factor.
    let hints = LinkHints::new("new-net")
        .with_bandwidth(f64::NAN, -1.0)
        .with_rtt_ms(0.0);
    let (client, store) = reference_client_with(&srv, t.clone(), hints, false);
    let mut set = items("s", 512);
    set.extend(items("c", 2048 - 512));
    let r = client
        .match_items(
            set,
            ProtocolChoice::default(),
            &mut |_| {},
            &CancelToken::new(),
        )
        .unwrap();
    assert_eq!(r.matches.len(), 512);
    let c = r.choice.unwrap();
    // Three probe requests: the RTT, PROBE_BYTES down, PROBE_BYTES up (and its JSON
    // answer), each response capped at the size asked for plus the slack.
    assert_eq!(c.probe_requests, 3);
    assert!(
        (2 * PROBE_BYTES..2 * PROBE_BYTES + 64).contains(&c.probe_bytes),
        "{}",
        c.probe_bytes
    );
    let probes = t.probes();
    let shapes: Vec<(Method, String)> = probes
        .iter()
        .map(|r| (r.method, r.url.rsplit_once("/v1/").unwrap().1.to_string()))
        .collect();
    assert_eq!(
        shapes,
        [
            (Method::Get, "probe?bytes=0".to_string()),
            (Method::Get, format!("probe?bytes={PROBE_BYTES}")),
            (Method::Post, "probe".to_string()),
        ]
    );
    assert!(probes[0].max_response_bytes <= PROBE_RESPONSE_SLACK);
    assert!(probes.iter().all(
        |r| r.max_response_bytes <= PROBE_BYTES + PROBE_RESPONSE_SLACK
            && r.body.len() as u64 <= PROBE_BYTES
    ));
    // The probe's samples made a measured estimate: RTT and both rates, stored for
    // the network, and the choice used it.
    assert_eq!(c.link_source, Source::Measured);
    let e = store.snapshot().networks["new-net"];
    assert!(
        e.rtt_samples >= 1 && e.down_samples >= 1 && e.up_samples >= 1,
        "{e:?}"
    );
    assert!(
        e.up.is_finite() && e.down.is_finite() && e.rtt > 0.0,
        "{e:?}"
    );
    // The next choice on this network has a measured rate: no probe.
    let before = t.probes().len();
    let again = client
        .choose(2048, Policy::Fastest, &CancelToken::new())
        .unwrap();
    assert_eq!((again.probe_requests, again.probe_bytes), (0, 0));
    assert_eq!(again.link_source, Source::Measured);
    assert_eq!(t.probes().len(), before);
}

#[test]
fn a_clear_choice_or_a_fixed_protocol_sends_no_probe() {
    let srv = server(4096, |_| {});
    // 256 against 4,096: DH-PSI under any link within 4x of the default.
    assert!(!close_on_the_default_prior(256, 4096));
    let t = Recording::new(false);
    let (client, store) = reference_client(&srv, t.clone(), LinkHints::new("n"));
    let c = client
        .choose(256, Policy::Fastest, &CancelToken::new())
        .unwrap();
    assert_eq!(c.choice.protocol, Protocol::Dh);
    assert_eq!((c.probe_requests, c.probe_bytes), (0, 0));
    assert_eq!(c.link_source, Source::Default);
    // 1,000 against 10^5 (the registry size as the stored health says): DH-PSI wins by
    // about 2x whatever the link.
    assert!(!close_on_the_default_prior(1000, 100_000));
    store.update(|m| m.servers.get_mut(&srv.url()).unwrap().registry_items = 100_000);
    let c = client
        .choose(1000, Policy::Fastest, &CancelToken::new())
        .unwrap();
    assert_eq!(c.choice.protocol, Protocol::Dh);
    assert_eq!(c.probe_requests, 0);
    // The fewest-bytes policy does not depend on the link.
    store.update(|m| m.servers.get_mut(&srv.url()).unwrap().registry_items = 4096);
    let c = client
        .choose(4096, Policy::FewestBytes, &CancelToken::new())
        .unwrap();
    assert_eq!(c.probe_requests, 0);
    // A fixed protocol makes no choice at all, on a close workload too.
    let mut set = items("s", 8);
    set.extend(items("c", 4088));
    let r = client
        .match_items(set, Protocol::Ot, &mut |_| {}, &CancelToken::new())
        .unwrap();
    assert!(r.choice.is_none());
    assert!(t.probes().is_empty());
}

/// The session requests of `t` (URL, body as JSON) and whether the run ended with a
/// DELETE.
fn session_requests(t: &Recording) -> (Vec<serde_json::Value>, bool) {
    let seen = t.seen.lock().unwrap();
    let bodies = seen
        .iter()
        .filter(|r| r.method == Method::Post && r.url.ends_with("/v1/sessions"))
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    (bodies, seen.last().unwrap().method == Method::Delete)
}

#[test]
fn an_older_server_gets_no_probe_and_no_labels_field_and_its_sessions_are_deleted() {
    let mut set = items("s", 100);
    set.extend(items("c", 1948));
    assert!(close_on_the_default_prior(2048, 8192));
    let srv = server(8192, |_| {});
    // Automatic choice, labels off, on a close workload and an unmeasured network: a
    // newer server would be probed and told `"labels": false`. This one lists no
    // features: no probe request at all, the field left out, the session deleted.
    let t = Recording::new(true);
    let (client, store) = reference_client_with(&srv, t.clone(), LinkHints::new("old"), false);
    assert!(store.snapshot().servers[&srv.url()].features.is_empty());
    let r = client
        .match_items(
            set.clone(),
            ProtocolChoice::default(),
            &mut |_| {},
            &CancelToken::new(),
        )
        .unwrap();
    assert_eq!(r.matches.len(), 100);
    let c = r.choice.unwrap();
    assert_eq!((c.probe_requests, c.probe_bytes), (0, 0));
    assert_eq!(c.link_source, Source::Default);
    assert!(t.probes().is_empty());
    let (bodies, deleted) = session_requests(&t);
    assert_eq!(bodies.len(), 1);
    assert!(bodies[0].get("labels").is_none(), "{}", bodies[0]);
    assert!(deleted);
    assert_eq!(srv.state.live_sessions(), 0);
    // The run's own requests measured the link afterwards, as without a probe.
    assert!(store.snapshot().networks["old"].rtt_samples >= 1);

    // A fixed protocol and no stored health: the same, without asking for the health.
    let t = Recording::new(true);
    let config = ClientConfig::default()
        .with_threads(psi_core::Threads::ONE)
        .with_retries(0)
        .with_labels(false);
    let fresh = Client::with_transport(&srv.url(), t.clone(), config.clone());
    let r = fresh
        .match_items(set.clone(), Protocol::Dh, &mut |_| {}, &CancelToken::new())
        .unwrap();
    assert_eq!(r.matches.len(), 100);
    let (bodies, deleted) = session_requests(&t);
    assert!(bodies.len() == 1 && bodies[0].get("labels").is_none());
    assert!(deleted);
    assert!(
        !t.seen
            .lock()
            .unwrap()
            .iter()
            .any(|r| r.url.ends_with("/v1/health"))
    );
    assert_eq!(srv.state.live_sessions(), 0);

    // A stored health that lists the option, from a server since replaced by an older
    // one: the refused request drops it, the same run asks again without the field.
    let t = Recording::new(true);
    let stale = Arc::new(MeasurementStore::default());
    let mut health = Client::new(&srv.url(), config.clone()).health().unwrap();
    assert!(health.supports(psi_http::Feature::SessionLabelsOption));
    health.costs = None;
    stale.update(|m| m.servers.insert(srv.url(), health));
    let c = Client::with_transport(&srv.url(), t.clone(), config).with_measurements(stale.clone());
    let r = c
        .match_items(set, Protocol::Ot, &mut |_| {}, &CancelToken::new())
        .unwrap();
    assert_eq!(r.matches.len(), 100);
    let (bodies, deleted) = session_requests(&t);
    assert_eq!(bodies.len(), 2);
    assert_eq!(bodies[0]["labels"], false);
    assert!(bodies[1].get("labels").is_none());
    assert!(deleted);
    assert!(stale.snapshot().servers.is_empty());
    assert_eq!(srv.state.live_sessions(), 0);
}

#[test]
fn a_server_over_its_probe_budget_leaves_the_prior_and_is_not_probed_again_for_a_while() {
    // A server whose probe budget allows the RTT request (charged the per-request floor)
    // but not the 64 KiB download: 429 on the second request, the prior stays.
    let srv = server(8192, |c| {
        c.probe_bytes_per_hour = 2 * psi_server::PROBE_REQUEST_FLOOR
    });
    assert!(close_on_the_default_prior(2048, 8192));
    let t = Recording::new(false);
    let (client, store) = reference_client_with(&srv, t.clone(), LinkHints::new("limited"), false);
    let before = psi_client::measure::PROBE_PAUSE_BOUNDS_SECS.0;
    let c = client
        .choose(2048, Policy::Fastest, &CancelToken::new())
        .unwrap();
    assert_eq!(c.probe_requests, 2);
    assert_eq!(c.link_source, Source::Default);
    assert!(!store.snapshot().networks.contains_key("limited"));
    // The refusal is remembered for this server until its Retry-After (at least the
    // lower bound from now).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let until = store.snapshot().probe_paused_until[&srv.url()];
    assert!(until >= now + before - 5, "{until} {now}");
    assert!(until <= now + psi_client::measure::PROBE_PAUSE_BOUNDS_SECS.1);
    // The next choices do not probe, however close.
    for _ in 0..3 {
        let c = client
            .choose(2048, Policy::Fastest, &CancelToken::new())
            .unwrap();
        assert_eq!((c.probe_requests, c.probe_bytes), (0, 0));
    }
    assert_eq!(t.probes().len(), 2);
    // Once the pause is over, the server is probed again.
    store.update(|m| m.probe_paused_until.insert(srv.url(), now - 1));
    let c = client
        .choose(2048, Policy::Fastest, &CancelToken::new())
        .unwrap();
    assert!(c.probe_requests >= 1);
    assert!(t.probes().len() > 2);
    store.update(|m| m.probe_paused_until.clear());
    // A cancelled choice is cancelled, not a fallback.
    let cancel = CancelToken::new();
    cancel.cancel();
    let e = client.choose(2048, Policy::Fastest, &cancel).unwrap_err();
    assert!(matches!(e, psi_client::ClientError::Cancelled), "{e:?}");
}

/// An automatic choice of OT-PSI that the server refuses for lack of OT capacity
/// (`503 ot_capacity`: its only OT slot is held) runs DH-PSI at once, with no wait and no
/// retry, and the choice report says so; a fixed OT-PSI gets the typed error instead.
#[test]
fn no_ot_capacity_falls_back_to_dh_psi_and_the_choice_report_says_so() {
    let srv = server(4096, |c| c.max_ot_sessions = 1);
    // Hold the only OT slot: a session that sends nothing (its hello is due in 10 s).
    let held = HttpTransport::new()
        .send(Request {
            method: Method::Post,
            url: format!("{}/v1/sessions", srv.url()),
            headers: vec![("content-type".into(), "application/json".into())],
            body: br#"{"protocol":"ot-psi","client_items":1}"#.to_vec(),
            timeout: std::time::Duration::from_secs(10),
            max_response_bytes: 1 << 16,
            abandon_on_cancel: false,
        })
        .unwrap();
    assert_eq!(held.status, 201);
    let t = Recording::new(false);
    let (client, _) = reference_client_with(&srv, t.clone(), LinkHints::new("n"), false);
    // 4,096 against 4,096 without labels: OT-PSI by a clear margin, no probe.
    assert!(!close_on_the_default_prior(4096, 4096));
    let mut set = items("s", 100);
    set.extend(items("c", 3996));
    let r = client
        .match_items(
            set.clone(),
            ProtocolChoice::default(),
            &mut |_| {},
            &CancelToken::new(),
        )
        .unwrap();
    assert_eq!(r.protocol, Protocol::Dh);
    assert_eq!(r.matches.len(), 100);
    let c = r.choice.unwrap();
    assert_eq!(c.choice.protocol, Protocol::Ot);
    assert_eq!(c.fell_back_from, Some(Protocol::Ot));
    let (bodies, _) = session_requests(&t);
    let asked: Vec<&str> = bodies
        .iter()
        .map(|b| b["protocol"].as_str().unwrap())
        .collect();
    assert_eq!(asked, ["ot-psi", "dh-psi"]);
    // A fixed protocol is the caller's: no fallback, the typed (retryable) error.
    let fixed = reference_client_with(&srv, Recording::new(false), LinkHints::new("n"), false)
        .0
        .match_items(set, Protocol::Ot, &mut |_| {}, &CancelToken::new())
        .map(|_| ())
        .unwrap_err();
    assert!(
        matches!(
            fixed,
            psi_client::ClientError::Http {
                status: 503,
                code: psi_client::ErrorCode::OtCapacity,
                ..
            }
        ),
        "{fixed}"
    );
}
