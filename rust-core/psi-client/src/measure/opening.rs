//! What a first run asks for before it knows the server: the protocols by registry size
//! (a session plan, docs/adr/0054-first-runs.md), so that the session the run opens with
//! the server's health is, most often, the one its choice then keeps.

use psi_core::Protocol;
use psi_core::cost::{Inputs, Policy, Workload, choose};
use psi_http::{MAX_PLAN_STEPS, PlanStep};

/// The protocols a first plan considers: those every server runs by default. A choice of an
/// opt-in protocol (CM20-PSI, GBF-PSI) replaces the opened session.
const PLANNED: [Protocol; 2] = [Protocol::Dh, Protocol::Ot];

/// The largest registry a plan distinguishes: the model's largest count (2^32; it reads
/// larger counts as that).
const MAX_PLANNED_REGISTRY: u64 = 1 << 32;

/// The label lanes a plan assumes: the widest (a registry with longer labels has none, and
/// its OT-PSI runs fetch labels: a plan's OT-PSI step is then replaced where it loses).
const ASSUMED_LANE_WIDTH: u8 = psi_core::ot::MAX_LANE_LABEL;

/// The session plan for `n` items with the choice's inputs before the health (the link
/// prior, the device's costs or the reference's, the reference server): for each range of
/// registry sizes, the protocol `psi_core::cost::choose` picks between DH-PSI and OT-PSI,
/// ranges found by doubling the size and then bisecting each change to the entry. The
/// last range's protocol is the request's own (DH-PSI where the largest registries call
/// for it, as they always do: OT-PSI's bytes grow with the registry faster than DH-PSI's
/// encoded set), so the plan lists the ranges before it; empty when DH-PSI is the pick for
/// every size. At most [`MAX_PLAN_STEPS`] steps.
pub fn opening_plan(n: u64, labels: bool, inputs: &Inputs, policy: Policy) -> Vec<PlanStep> {
    let pick = |m: u64| {
        let w = Workload::new(n, m)
            .with_labels(labels)
            .with_label_lanes(Some(ASSUMED_LANE_WIDTH));
        choose(&w, inputs, policy, &PLANNED).map_or(Protocol::Dh, |c| c.protocol)
    };
    // (protocol, largest size with it) for each run of equal picks, smallest sizes first.
    let mut runs: Vec<(Protocol, u64)> = Vec::new();
    let mut m = 1u64;
    let mut last = (pick(1), 1u64);
    while m < MAX_PLANNED_REGISTRY {
        let next = (m * 2).min(MAX_PLANNED_REGISTRY);
        let p = pick(next);
        if p != last.0 {
            // The change is in (m, next]: bisect to the last size with the old pick.
            let (mut lo, mut hi) = (m, next);
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if pick(mid) == last.0 {
                    lo = mid
                } else {
                    hi = mid
                }
            }
            runs.push((last.0, lo));
            last = (p, hi);
        }
        m = next;
    }
    // The last run is the request's own protocol when it is DH-PSI; otherwise it is a step
    // too (up to the largest size), and the request's DH-PSI covers the rest.
    if last.0 != Protocol::Dh {
        runs.push((last.0, MAX_PLANNED_REGISTRY));
    }
    runs.into_iter()
        .take(MAX_PLAN_STEPS)
        .map(|(p, max)| PlanStep {
            protocol: p.api_name().to_string(),
            max_registry_items: max,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use psi_core::cost::{Link, UnitCosts};

    fn plan(n: u64, labels: bool, link: Link) -> Vec<PlanStep> {
        opening_plan(
            n,
            labels,
            &Inputs {
                link,
                client: UnitCosts::REFERENCE.with_threads(2),
                server: UnitCosts::REFERENCE,
            },
            Policy::Fastest,
        )
    }

    #[test]
    fn a_plan_gives_ot_psi_the_balanced_registries_of_fast_links_and_dh_psi_the_rest() {
        // A LAN with labels: OT-PSI (with lanes) for registries near the client's size.
        let lan = plan(4096, true, Link::mbit(0.4, 1000.0, 1000.0));
        assert!(!lan.is_empty(), "{lan:?}");
        let first = &lan[0];
        assert_eq!(first.protocol, "ot-psi");
        assert!(first.max_registry_items >= 4096, "{lan:?}");
        // Contact discovery sizes are DH-PSI's: a registry of 10^7 is past every OT step.
        assert_eq!(
            psi_http::plan_pick(&lan, 10_000_000, |_| true).unwrap_or("dh-psi"),
            "dh-psi",
            "{lan:?}"
        );
        // A server without OT-PSI skips its steps.
        assert_eq!(
            psi_http::plan_pick(&lan, 4096, |p| p != "ot-psi").unwrap_or("dh-psi"),
            "dh-psi"
        );
    }

    #[test]
    fn a_plan_follows_the_models_pick_at_every_size() {
        let link = Link::mbit(100.0, 10.0, 10.0);
        let inputs = Inputs {
            link,
            client: UnitCosts::REFERENCE.with_threads(2),
            server: UnitCosts::REFERENCE,
        };
        for n in [256u64, 1024, 4096, 1 << 16] {
            let p = opening_plan(n, true, &inputs, Policy::Fastest);
            for k in 0..40 {
                let m = 1u64 << k;
                let w = Workload::new(n, m)
                    .with_labels(true)
                    .with_label_lanes(Some(ASSUMED_LANE_WIDTH));
                let want = choose(&w, &inputs, Policy::Fastest, &PLANNED)
                    .unwrap()
                    .protocol;
                let got = psi_http::plan_pick(&p, m, |_| true).unwrap_or("dh-psi");
                assert_eq!(got, want.api_name(), "n {n}, m {m}: {p:?}");
            }
        }
    }
}
