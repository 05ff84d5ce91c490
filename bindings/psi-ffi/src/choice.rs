//! The automatic protocol choice as the platforms see it: how a run picks its protocol
//! ([`ProtocolChoice`]), what the platform knows of the network ([`LinkHints`]), and what
//! the choice was based on ([`ChoiceReport`]). Converted from and to psi-client's
//! `measure` types here, in one place; the model and the measurements live in psi-client
//! and psi-core (docs/protocol-choice.md).

use crate::protocol::Protocol;
use std::time::Duration;

/// What an automatic choice optimises (`psi_core::cost::Policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Enum)]
pub enum Policy {
    /// The least predicted time (the default).
    Fastest,
    /// The fewest bytes both ways (metered or constrained networks); time breaks ties.
    FewestBytes,
}

impl From<Policy> for psi_client::Policy {
    fn from(p: Policy) -> Self {
        match p {
            Policy::Fastest => psi_client::Policy::Fastest,
            Policy::FewestBytes => psi_client::Policy::FewestBytes,
        }
    }
}

impl Policy {
    /// `None` for a policy these bindings do not export yet.
    pub(crate) fn from_core(p: psi_client::Policy) -> Option<Policy> {
        match p {
            psi_client::Policy::Fastest => Some(Policy::Fastest),
            psi_client::Policy::FewestBytes => Some(Policy::FewestBytes),
            _ => None,
        }
    }
}

/// How a run picks its protocol (`psi_client::ProtocolChoice`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Enum)]
pub enum ProtocolChoice {
    /// Predict every protocol the server runs and take the best by `policy`.
    Auto {
        /// What to optimise.
        policy: Policy,
    },
    /// Always `protocol`.
    Fixed {
        /// The protocol.
        protocol: Protocol,
    },
}

impl Default for ProtocolChoice {
    /// `Auto { policy: Fastest }`, as psi-client.
    fn default() -> Self {
        ProtocolChoice::Auto {
            policy: Policy::Fastest,
        }
    }
}

impl From<ProtocolChoice> for psi_client::ProtocolChoice {
    fn from(c: ProtocolChoice) -> Self {
        match c {
            ProtocolChoice::Auto { policy } => psi_client::ProtocolChoice::Auto(policy.into()),
            ProtocolChoice::Fixed { protocol } => {
                psi_client::ProtocolChoice::Fixed(protocol.into())
            }
        }
    }
}

/// What the platform knows about the current network, passed with each run: Android's
/// `NetworkCapabilities` and Data Saver, iOS's `NWPath`. Before any run has timed a
/// network, its hints are the link prior of the choice; the measured link estimates are
/// kept under [`LinkHints::network`].
#[derive(Debug, Clone, Default, PartialEq, uniffi::Record)]
pub struct LinkHints {
    /// The app's name for the network (such as `wifi`, `cellular`, or a hash of the
    /// Wi-Fi network's name): link estimates are kept per name. Empty: one shared
    /// estimate. Stored in the measurements file: not an SSID in the clear.
    pub network: String,
    /// Downstream bandwidth estimate, Mbit/s (Android `linkDownstreamBandwidthKbps`).
    pub down_mbit: Option<f64>,
    /// Upstream bandwidth estimate, Mbit/s (Android `linkUpstreamBandwidthKbps`).
    pub up_mbit: Option<f64>,
    /// Round-trip time, milliseconds, if the platform knows one.
    pub rtt_ms: Option<f64>,
    /// The user pays by the byte (Android: not `NET_CAPABILITY_NOT_METERED`; iOS
    /// `isExpensive`). Reported back in the choice; the app picks the policy.
    pub metered: bool,
    /// The user asked to save data (Android Data Saver on a metered network; iOS
    /// `isConstrained`): an automatic choice then uses [`Policy::FewestBytes`].
    pub constrained: bool,
}

impl From<&LinkHints> for psi_client::LinkHints {
    fn from(h: &LinkHints) -> Self {
        let mut hints =
            psi_client::LinkHints::new(h.network.clone()).with_flags(h.metered, h.constrained);
        // Values that are not hints (psi-client's rule: NaN, 0, negative, infinite,
        // absurdly large) are unknown, so nothing further carries them.
        let known = psi_client::measure::usable_hint;
        hints.down_mbit = known(h.down_mbit);
        hints.up_mbit = known(h.up_mbit);
        hints.rtt_ms = known(h.rtt_ms);
        hints
    }
}

/// Where an input of the choice came from (`psi_client::Source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Enum)]
pub enum InputSource {
    /// Measured: by earlier runs or this one (the link, the device), or advertised by
    /// the server (its costs).
    Measured,
    /// From the platform's hints (the link).
    Given,
    /// The built-in default (no measurement and no hint).
    Default,
}

impl From<psi_client::Source> for InputSource {
    fn from(s: psi_client::Source) -> Self {
        match s {
            psi_client::Source::Measured => InputSource::Measured,
            psi_client::Source::Given => InputSource::Given,
            _ => InputSource::Default,
        }
    }
}

/// Where each figure of the link came from (`psi_client::measure::LinkSources`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Record)]
pub struct LinkSources {
    /// The round-trip time's.
    pub rtt: InputSource,
    /// The upstream rate's.
    pub up: InputSource,
    /// The downstream rate's.
    pub down: InputSource,
}

impl From<psi_client::measure::LinkSources> for LinkSources {
    fn from(s: psi_client::measure::LinkSources) -> Self {
        LinkSources {
            rtt: s.rtt.into(),
            up: s.up.into(),
            down: s.down.into(),
        }
    }
}

/// The link the choice assumed (`psi_client::LinkEstimate`).
#[derive(Debug, Clone, Copy, PartialEq, uniffi::Record)]
pub struct LinkEstimate {
    /// Round-trip time, milliseconds.
    pub rtt_ms: f64,
    /// Upstream throughput, Mbit/s.
    pub up_mbit: f64,
    /// Downstream throughput, Mbit/s.
    pub down_mbit: f64,
    /// Requests whose timing went into the RTT (0: a prior).
    pub rtt_samples: u32,
    /// Transfers whose timing went into the upstream rate.
    pub up_samples: u32,
    /// Transfers whose timing went into the downstream rate.
    pub down_samples: u32,
}

impl From<psi_client::LinkEstimate> for LinkEstimate {
    fn from(e: psi_client::LinkEstimate) -> Self {
        let mbit = |bytes_per_s: f64| bytes_per_s * 8.0 / 1e6;
        LinkEstimate {
            rtt_ms: e.rtt * 1e3,
            up_mbit: mbit(e.up),
            down_mbit: mbit(e.down),
            rtt_samples: e.rtt_samples,
            up_samples: e.up_samples,
            down_samples: e.down_samples,
        }
    }
}

/// A side's unit costs (`psi_core::cost::UnitCosts`): nanoseconds per operation on one
/// thread, and the threads used.
#[derive(Debug, Clone, Copy, PartialEq, uniffi::Record)]
pub struct UnitCosts {
    /// ns per ristretto255 scalar multiplication.
    pub scalar_mult_ns: f64,
    /// ns per hash-to-group.
    pub hash_to_group_ns: f64,
    /// ns per element decoding.
    pub element_decode_ns: f64,
    /// ns per AES-128 block.
    pub aes_block_ns: f64,
    /// ns per hash compression block.
    pub hash_block_ns: f64,
    /// ns per entry of memory work.
    pub entry_ns: f64,
    /// ns per CM20-PSI column lookup (`None`: not measured; the model then uses the
    /// reference machine's).
    pub cm20_lookup_ns: Option<f64>,
    /// Threads the side uses for a run's heavy steps.
    pub threads: u32,
}

impl From<&psi_client::UnitCosts> for UnitCosts {
    /// The one conversion from the core's record (`psi_core::cost::UnitCosts`, which owns
    /// the fields). The core always has CM20-PSI's own unit (measured, advertised or the
    /// reference machine's), so `cm20_lookup_ns` is always set. The other protocols' own
    /// units (GBF-PSI's `gbf_xor_ns`) are not in this record yet (issue 38).
    fn from(u: &psi_client::UnitCosts) -> Self {
        UnitCosts {
            scalar_mult_ns: u.scalar_mult,
            hash_to_group_ns: u.hash_to_group,
            element_decode_ns: u.element_decode,
            aes_block_ns: u.aes_block,
            hash_block_ns: u.hash_block,
            entry_ns: u.entry,
            cm20_lookup_ns: u.own(psi_client::Protocol::Cm20),
            threads: u.threads,
        }
    }
}

/// The workload the choice predicted (`psi_core::cost::Workload`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Record)]
pub struct ChoiceWorkload {
    /// Distinct identifiers queried.
    pub client_items: u64,
    /// Entries in the registry (the server's last advertised count).
    pub server_items: u64,
    /// Whether labels are fetched.
    pub labels: bool,
    /// Whether the client held the server's current encoded registry.
    pub cached_set: bool,
}

/// One candidate protocol's predicted cost (`psi_core::cost::Prediction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Record)]
pub struct Prediction {
    /// The protocol.
    pub protocol: Protocol,
    /// HTTP requests of the run.
    pub requests: u32,
    /// Request body bytes.
    pub bytes_up: u64,
    /// Response body bytes.
    pub bytes_down: u64,
    /// Predicted time of the whole run, microseconds.
    pub total_micros: u64,
    /// Of which on the network (latency and transfer).
    pub network_micros: u64,
    /// Of which client computation.
    pub client_micros: u64,
    /// Of which server computation.
    pub server_micros: u64,
}

impl Prediction {
    /// `None` for a protocol these bindings do not export yet.
    fn from_core(p: &psi_client::Prediction) -> Option<Prediction> {
        Some(Prediction {
            protocol: Protocol::from_core(p.protocol)?,
            requests: p.requests,
            bytes_up: p.bytes_up,
            bytes_down: p.bytes_down,
            total_micros: seconds_to_micros(p.total()),
            network_micros: seconds_to_micros(p.network),
            client_micros: seconds_to_micros(p.client),
            server_micros: seconds_to_micros(p.server),
        })
    }
}

/// How an automatic choice was made: the protocol, the policy applied, every candidate's
/// prediction and the inputs (`psi_client::ChoiceReport`). `None` in a report when the
/// protocol was fixed.
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct ChoiceReport {
    /// The protocol chosen (the one that ran).
    pub protocol: Protocol,
    /// The policy applied: the one asked for, or [`Policy::FewestBytes`] when the hints
    /// said the network is constrained.
    pub policy: Policy,
    /// Every candidate's prediction (the protocols the server runs), in a fixed order.
    pub predictions: Vec<Prediction>,
    /// The workload predicted.
    pub workload: ChoiceWorkload,
    /// The network the link estimate is kept under ([`LinkHints::network`]).
    pub network: String,
    /// Whether the hints said the network is metered.
    pub metered: bool,
    /// Whether the hints said the network is constrained.
    pub constrained: bool,
    /// The link assumed.
    pub link: LinkEstimate,
    /// Where it came from as a whole: measured (stored or this run's first request) as
    /// soon as one figure was (often only the RTT), the hints, or the default.
    pub link_source: InputSource,
    /// Where each figure of the link came from: the RTT, the upstream rate and the
    /// downstream rate separately.
    pub link_sources: LinkSources,
    /// The protocol the choice picked (`protocol`), when the server refused it for lack
    /// of OT capacity and the run went on with DH-PSI (the report's `protocol`); `None`
    /// otherwise.
    pub fell_back_from: Option<Protocol>,
    /// This device's unit costs (calibrated once, then stored).
    pub device: UnitCosts,
    /// Where they came from.
    pub device_source: InputSource,
    /// The server's unit costs (advertised in its health, else the reference machine).
    pub server: UnitCosts,
    /// Where they came from.
    pub server_source: InputSource,
    /// Whether the choice asked the server for its health (one request) rather than
    /// using the stored one.
    pub health_requested: bool,
    /// Requests of the bounded probe made for this choice (0: none).
    pub probe_requests: u32,
    /// Body bytes of the probe, both ways.
    pub probe_bytes: u64,
    /// Time spent choosing (a calibration, a health request), microseconds.
    pub overhead_micros: u64,
}

impl ChoiceReport {
    /// The record of `r`, made with `hints`. `None` if the chosen protocol or policy is
    /// one these bindings do not export (a newer core).
    pub(crate) fn from_client(
        r: &psi_client::ChoiceReport,
        hints: &psi_client::LinkHints,
    ) -> Option<ChoiceReport> {
        Some(ChoiceReport {
            protocol: Protocol::from_core(r.choice.protocol)?,
            policy: Policy::from_core(r.choice.policy)?,
            predictions: r
                .choice
                .predictions
                .iter()
                .filter_map(Prediction::from_core)
                .collect(),
            workload: ChoiceWorkload {
                client_items: r.workload.client_items,
                server_items: r.workload.server_items,
                labels: r.workload.labels,
                cached_set: r.workload.cached_set,
            },
            network: hints.network.clone(),
            metered: hints.metered,
            constrained: hints.constrained,
            link: r.link.into(),
            link_source: r.link_source.into(),
            link_sources: r.link_sources.into(),
            fell_back_from: r.fell_back_from.and_then(Protocol::from_core),
            device: (&r.device).into(),
            device_source: r.device_source.into(),
            server: (&r.server).into(),
            server_source: r.server_source.into(),
            health_requested: r.health_requested,
            probe_requests: r.probe_requests,
            probe_bytes: r.probe_bytes,
            overhead_micros: duration_micros(r.overhead),
        })
    }
}

/// Seconds (a prediction; finite and non-negative, else 0) to whole microseconds.
fn seconds_to_micros(s: f64) -> u64 {
    if s.is_finite() && s > 0.0 {
        // `as` saturates at u64::MAX.
        (s * 1e6).round() as u64
    } else {
        0
    }
}

fn duration_micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use psi_client::{CancelToken, Client, ClientConfig, DeviceCosts, MeasurementStore};
    use std::sync::Arc;

    /// A transport that must not be used: every input of the choice below is stored.
    struct Offline;
    impl psi_client::Transport for Offline {
        fn send(
            &self,
            _: psi_client::Request,
        ) -> Result<psi_client::Response, psi_client::TransportError> {
            Err(psi_client::TransportError::failed("offline"))
        }
    }

    const BASE: &str = "http://127.0.0.1:1";

    fn costs(scale: f64) -> DeviceCosts {
        // The reference units scaled, every protocol's own unit with them.
        let r = psi_client::UnitCosts::REFERENCE;
        let shared = psi_client::UnitCosts::new(
            r.scalar_mult * scale,
            r.hash_to_group * scale,
            r.element_decode * scale,
            r.aes_block * scale,
            r.hash_block * scale,
            r.entry * scale,
            1,
        );
        let u = psi_client::Protocol::ALL
            .iter()
            .fold(shared, |u, &p| match r.own(p) {
                Some(ns) => u.with_own(p, ns * scale),
                None => u,
            });
        DeviceCosts::from_units(&u)
    }

    /// A client whose store holds the server's health (DH-PSI and OT-PSI, advertised
    /// costs), this device's costs and a measured estimate of network `wifi`.
    fn stored_client(hints: &LinkHints) -> Client {
        let device = costs(2.0);
        let server = costs(0.5);
        // The store as psi-client writes it (measurements.json).
        let json = format!(
            r#"{{
              "device": {device},
              "networks": {{"wifi": {{"rtt": 0.04, "up": 1e6, "down": 4e6,
                "rtt_samples": 3, "up_samples": 0, "down_samples": 0}}}},
              "servers": {{"{BASE}": {{"status": "ok", "epoch": 3, "registry_items": 100000,
                "protocols": ["dh-psi", "ot-psi"], "max_client_items": 10000,
                "max_body_bytes": 8388608,
                "costs": {server}}}}}
            }}"#,
            device = costs_json(device),
            // The health's costs: the same record, flat beside the thread counts.
            server = costs_json(server).replacen(
                '{',
                r#"{"threads_per_step": 1, "workers": 2, "ot_workers": 1, "#,
                1
            ),
        );
        let m = psi_client::Measurements::from_json(&json);
        assert!(m.device.is_some() && m.servers.contains_key(BASE), "{json}");
        let config = ClientConfig::default()
            .with_threads(psi_client::Threads::new(2))
            .with_link_hints(hints.into());
        Client::with_transport(BASE, Arc::new(Offline), config)
            .with_measurements(Arc::new(MeasurementStore::new(m)))
    }

    /// The record as psi-client stores it: the shared units, then each protocol's own
    /// unit under its field (psi-core's table).
    fn costs_json(c: DeviceCosts) -> String {
        let own: String = psi_client::Protocol::ALL
            .iter()
            .filter_map(|&p| Some(format!(r#", "{}": {}"#, p.unit()?.field, c.own.get(p)?)))
            .collect();
        format!(
            r#"{{"scalar_mult_ns": {}, "hash_to_group_ns": {}, "element_decode_ns": {},
                "aes_block_ns": {}, "hash_block_ns": {}, "entry_ns": {}{own}}}"#,
            c.scalar_mult_ns,
            c.hash_to_group_ns,
            c.element_decode_ns,
            c.aes_block_ns,
            c.hash_block_ns,
            c.entry_ns,
        )
    }

    #[test]
    fn choices_and_policies_map_to_psi_client() {
        assert_eq!(
            psi_client::ProtocolChoice::from(ProtocolChoice::default()),
            psi_client::ProtocolChoice::default()
        );
        assert_eq!(
            psi_client::ProtocolChoice::from(ProtocolChoice::Auto {
                policy: Policy::FewestBytes
            }),
            psi_client::ProtocolChoice::Auto(psi_client::Policy::FewestBytes)
        );
        for p in [Protocol::Dh, Protocol::Ot, Protocol::Cm20, Protocol::Gbf] {
            assert_eq!(
                psi_client::ProtocolChoice::from(ProtocolChoice::Fixed { protocol: p }),
                psi_client::ProtocolChoice::Fixed(p.into())
            );
        }
        for p in [Policy::Fastest, Policy::FewestBytes] {
            assert_eq!(Policy::from_core(p.into()), Some(p));
        }
    }

    #[test]
    fn hints_keep_positive_numbers_and_the_flags() {
        let h = LinkHints {
            network: "cellular".into(),
            down_mbit: Some(12.5),
            up_mbit: Some(f64::NAN),
            rtt_ms: Some(-3.0),
            metered: true,
            constrained: false,
        };
        let c = psi_client::LinkHints::from(&h);
        assert_eq!(c.network, "cellular");
        assert_eq!(c.down_mbit, Some(12.5));
        assert_eq!((c.up_mbit, c.rtt_ms), (None, None));
        assert!(c.metered && !c.constrained);
        let zero = psi_client::LinkHints::from(&LinkHints {
            down_mbit: Some(0.0),
            up_mbit: Some(f64::INFINITY),
            ..LinkHints::default()
        });
        assert_eq!((zero.down_mbit, zero.up_mbit), (None, None));
        // psi-client's rule: a value whose conversion to bytes per second overflows is
        // no hint either (the earlier filter here let it through).
        let huge = psi_client::LinkHints::from(&LinkHints {
            down_mbit: Some(f64::MAX),
            ..LinkHints::default()
        });
        assert_eq!(huge.down_mbit, None);
    }

    #[test]
    fn a_choice_report_carries_every_prediction_and_input() {
        let hints = LinkHints {
            network: "wifi".into(),
            metered: true,
            ..LinkHints::default()
        };
        let client = stored_client(&hints);
        let cancel = CancelToken::new();
        for policy in [psi_client::Policy::Fastest, psi_client::Policy::FewestBytes] {
            let core = client.choose(1000, policy, &cancel).unwrap();
            let r = ChoiceReport::from_client(&core, &client.config().link_hints).unwrap();
            assert_eq!(Some(r.protocol), Protocol::from_core(core.choice.protocol));
            assert_eq!(Some(r.policy), Policy::from_core(policy));
            assert_eq!(r.predictions.len(), 2);
            for (p, c) in r.predictions.iter().zip(&core.choice.predictions) {
                assert_eq!(Some(p.protocol), Protocol::from_core(c.protocol));
                assert_eq!((p.bytes_up, p.bytes_down), (c.bytes_up, c.bytes_down));
                assert_eq!(p.requests, c.requests);
                assert_eq!(p.total_micros, (c.total() * 1e6).round() as u64);
                assert!(p.network_micros > 0 && p.client_micros > 0 && p.server_micros > 0);
                let parts = p.network_micros + p.client_micros + p.server_micros;
                assert!(parts.abs_diff(p.total_micros) <= 2, "{p:?}");
            }
            let fewest = r
                .predictions
                .iter()
                .min_by_key(|p| p.bytes_up + p.bytes_down)
                .unwrap();
            if policy == psi_client::Policy::FewestBytes {
                assert_eq!(r.protocol, fewest.protocol);
            }
            assert_eq!(
                r.workload,
                ChoiceWorkload {
                    client_items: 1000,
                    server_items: 100_000,
                    labels: true,
                    cached_set: false
                }
            );
            assert_eq!(
                (r.network.as_str(), r.metered, r.constrained),
                ("wifi", true, false)
            );
            assert!((r.link.rtt_ms - 40.0).abs() < 1e-9);
            assert!((r.link.up_mbit - 8.0).abs() < 1e-9 && (r.link.down_mbit - 32.0).abs() < 1e-9);
            assert_eq!(r.link.rtt_samples, 3);
            assert_eq!(r.link_source, InputSource::Measured);
            assert_eq!(
                r.link_sources,
                // Only the RTT measured; the stored rates are a prior from earlier
                // hints (not the default's 5 and 10 Mbit/s).
                LinkSources {
                    rtt: InputSource::Measured,
                    up: InputSource::Given,
                    down: InputSource::Given
                }
            );
            assert_eq!(r.device, UnitCosts::from(&costs(2.0).units(2)));
            assert_eq!(r.device_source, InputSource::Measured);
            assert_eq!(r.server, UnitCosts::from(&costs(0.5).units(1)));
            assert_eq!(r.device.scalar_mult_ns, 80_000.0);
            assert_eq!((r.device.cm20_lookup_ns, r.device.threads), (Some(2.0), 2));
            assert_eq!(r.server_source, InputSource::Measured);
            assert!(!r.health_requested);
        }
    }

    #[test]
    fn constrained_hints_turn_fastest_into_fewest_bytes_and_a_new_network_uses_the_hints() {
        let hints = LinkHints {
            network: "hotspot".into(),
            down_mbit: Some(2.0),
            constrained: true,
            ..LinkHints::default()
        };
        let client = stored_client(&hints);
        let core = client
            .choose(1000, psi_client::Policy::Fastest, &CancelToken::new())
            .unwrap();
        let r = ChoiceReport::from_client(&core, &client.config().link_hints).unwrap();
        assert_eq!(r.policy, Policy::FewestBytes);
        assert!(r.constrained);
        assert_eq!(r.link_source, InputSource::Given);
        assert_eq!(r.link.rtt_samples, 0);
        // The rates from the hints (the upstream derived), the RTT from nothing.
        assert_eq!(
            r.link_sources,
            LinkSources {
                rtt: InputSource::Default,
                up: InputSource::Given,
                down: InputSource::Given
            }
        );
        assert!((r.link.down_mbit - 2.0).abs() < 1e-9);
        // Only the downstream known: a quarter of it upstream (psi-client's prior).
        assert!((r.link.up_mbit - 0.5).abs() < 1e-9);
    }

    #[test]
    fn predictions_in_seconds_become_whole_microseconds() {
        assert_eq!(seconds_to_micros(1.2345674), 1_234_567);
        assert_eq!(seconds_to_micros(-1.0), 0);
        assert_eq!(seconds_to_micros(f64::NAN), 0);
        assert_eq!(seconds_to_micros(f64::INFINITY), 0);
        assert_eq!(seconds_to_micros(1e300), u64::MAX);
    }
}
