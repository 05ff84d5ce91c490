//! `--protocol`: parsing a protocol or `auto`, and showing the choice (the inputs and every
//! protocol's prediction) in text and JSON.

use psi_client::{ChoiceReport, Policy, ProtocolChoice};
use serde_json::{Value, json};

/// A `--protocol` value: `auto` or a protocol.
#[derive(Debug, Clone, Copy)]
pub enum ProtocolArg {
    /// `auto`.
    Auto,
    /// `dh`, `ot`, `cm20` or their API names.
    Fixed(psi_core::Protocol),
}

/// Parses a protocol named on the command line (`dh`, `ot`, `cm20`, `gbf`, or the API
/// names `dh-psi`, `ot-psi`, `cm20-psi`, `gbf-psi`): `psi bench --protocol`, `psi loadgen --protocol`.
pub fn parse_protocol(s: &str) -> Result<psi_core::Protocol, String> {
    s.parse()
        .map_err(|e: psi_core::protocol::UnknownProtocol| e.to_string())
}

/// Parses `--protocol`: `auto` or a protocol (its short or API name, [`parse_protocol`]).
pub fn parse_arg(s: &str) -> Result<ProtocolArg, String> {
    if s.trim().eq_ignore_ascii_case("auto") {
        return Ok(ProtocolArg::Auto);
    }
    parse_protocol(s).map(ProtocolArg::Fixed).map_err(|_| {
        let short = psi_core::Protocol::ALL.iter().map(|p| p.short_name());
        let api = psi_core::Protocol::ALL.iter().map(|p| p.api_name());
        let names: Vec<&str> = std::iter::once("auto").chain(short).chain(api).collect();
        format!("unknown protocol (expected one of: {})", names.join(", "))
    })
}

/// The choice `--protocol` and `--policy` make.
pub fn resolve(protocol: ProtocolArg, policy: Policy) -> ProtocolChoice {
    match protocol {
        ProtocolArg::Auto => ProtocolChoice::Auto(policy),
        ProtocolArg::Fixed(p) => ProtocolChoice::Fixed(p),
    }
}

/// Parses `--policy`.
pub fn parse_policy(s: &str) -> Result<Policy, String> {
    Policy::parse(s).ok_or_else(|| "unknown policy (expected fastest or fewest-bytes)".into())
}

/// The choice as JSON: policy, protocol, inputs (workload, link, device, server) with
/// their sources, and each protocol's predicted requests, bytes and seconds.
pub fn to_json(r: &ChoiceReport) -> Value {
    let w = &r.workload;
    // The costs as measurements.json spells them (psi-client's one conversion of the
    // core's record), with the threads.
    let units = |u: &psi_client::UnitCosts| {
        let mut v = serde_json::to_value(psi_client::DeviceCosts::from_units(u))
            .unwrap_or_else(|_| json!({}));
        v["threads"] = json!(u.threads);
        v
    };
    json!({
        "policy": r.choice.policy.name(),
        "probe_requests": r.probe_requests,
        "probe_bytes": r.probe_bytes,
        "protocol": r.choice.protocol.api_name(),
        "fell_back_from": r.fell_back_from.map(|p| p.api_name()),
        "inputs": {
            "client_items": w.client_items,
            "server_items": w.server_items,
            "labels": w.labels,
            "cached_set": w.cached_set,
            "link": {
                "source": r.link_source.name(),
                "rtt_ms": r.link.rtt * 1e3,
                "up_mbit": r.link.up * 8.0 / 1e6,
                "down_mbit": r.link.down * 8.0 / 1e6,
                "samples": r.link.rtt_samples + r.link.up_samples + r.link.down_samples,
                "rtt_source": r.link_sources.rtt.name(),
                "up_source": r.link_sources.up.name(),
                "down_source": r.link_sources.down.name(),
                "rtt_samples": r.link.rtt_samples,
                "up_samples": r.link.up_samples,
                "down_samples": r.link.down_samples,
            },
            "device": units(&r.device),
            "device_source": r.device_source.name(),
            "server": units(&r.server),
            "server_source": r.server_source.name(),
        },
        "health_requested": r.health_requested,
        "health_with_session": r.health_with_session,
        "overhead_ms": r.overhead.as_secs_f64() * 1e3,
        "predictions": r.choice.predictions.iter().map(|p| json!({
            "protocol": p.protocol.api_name(),
            "requests": p.requests,
            "bytes_up": p.bytes_up,
            "bytes_down": p.bytes_down,
            "network_ms": p.network * 1e3,
            "client_ms": p.client * 1e3,
            "server_ms": p.server * 1e3,
            "total_ms": p.total() * 1e3,
        })).collect::<Vec<_>>(),
    })
}

/// The choice as text lines (for `psi match` and `psi demo`).
pub fn print(r: &ChoiceReport) {
    let l = &r.link;
    println!(
        "protocol chosen: {} (auto, {}); link {:.1} ms RTT ({}), {:.2} Mbit/s up ({}), {:.2} down ({}), device costs {}, server costs {}",
        r.choice.protocol,
        r.choice.policy.name(),
        l.rtt * 1e3,
        r.link_sources.rtt.name(),
        l.up * 8.0 / 1e6,
        r.link_sources.up.name(),
        l.down * 8.0 / 1e6,
        r.link_sources.down.name(),
        r.device_source.name(),
        if r.server_source == psi_client::Source::Measured {
            "advertised"
        } else {
            "default"
        },
    );
    println!(
        "  predicted     requests   bytes up  bytes down  network ms  client ms  server ms  total ms"
    );
    for p in &r.choice.predictions {
        println!(
            "  {:<8}{}  {:>10} {:>10} {:>11} {:>11.1} {:>10.1} {:>10.1} {:>9.1}",
            p.protocol.to_string(),
            if p.protocol == r.choice.protocol {
                " *"
            } else {
                "  "
            },
            p.requests,
            p.bytes_up,
            p.bytes_down,
            p.network * 1e3,
            p.client * 1e3,
            p.server * 1e3,
            p.total() * 1e3
        );
    }
    if let Some(p) = r.fell_back_from {
        println!("  the server had no capacity for {p}: the run fell back to DH-PSI");
    }
}
