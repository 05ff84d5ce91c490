//! What a first run asks for before it knows the server: the protocols by registry size
//! (a session plan, docs/adr/0054-first-runs.md), so that the session the run opens with
//! the server's health is, most often, the one its choice then keeps.

use psi_core::Protocol;
use psi_core::cost::{Inputs, Policy, Workload, choose};
use psi_http::{MAX_PLAN_STEPS, PlanStep};

/// The protocols every server runs by default: a plan's second part picks among them.
const DEFAULT_SET: [Protocol; 2] = [Protocol::Dh, Protocol::Ot];

/// With CM20-PSI, which servers run only when enabled (`--enable-cm20`): a plan's first
/// part names its ranges, which a server without it skips. GBF-PSI (opt-in too, and never
/// the fastest in this project's grid) is not planned: a choice of it replaces the session.
const WITH_CM20: [Protocol; 3] = [Protocol::Dh, Protocol::Ot, Protocol::Cm20];

/// The largest registry a plan distinguishes: the model's largest count (2^32; it reads
/// larger counts as that).
const MAX_PLANNED_REGISTRY: u64 = 1 << 32;

/// The label lanes a plan assumes: the widest (a registry with longer labels has none, and
/// its runs fetch labels: a plan's step is then replaced where it loses).
const ASSUMED_LANE_WIDTH: u8 = psi_core::lanes::MAX_LANE_LABEL;

/// The session plan for `n` items with the choice's inputs before the health (the link
/// prior, the device's costs or the reference's, the reference server): the ranges of
/// registry sizes where `psi_core::cost::choose` picks CM20-PSI among DH-PSI, OT-PSI and
/// CM20-PSI, then those where it picks OT-PSI between DH-PSI and OT-PSI. A server takes the
/// first step it runs whose range holds its registry, so one with CM20-PSI gets the pick of
/// the three, one without it the pick of the two (where the three's pick is not CM20-PSI it
/// is the two's), and DH-PSI (the request's own protocol) covers the rest. Ranges are found
/// by doubling the size from 1 to 2^32 and bisecting each change to the entry. At most
/// [`MAX_PLAN_STEPS`] steps; empty where DH-PSI is the pick at every size.
pub fn opening_plan(n: u64, labels: bool, inputs: &Inputs, policy: Policy) -> Vec<PlanStep> {
    let mut steps: Vec<PlanStep> = ranges(n, labels, inputs, policy, &WITH_CM20)
        .into_iter()
        .filter(|r| r.0 == Protocol::Cm20)
        .chain(
            ranges(n, labels, inputs, policy, &DEFAULT_SET)
                .into_iter()
                .filter(|r| r.0 == Protocol::Ot),
        )
        .map(|(p, lo, hi)| PlanStep {
            protocol: p.api_name().to_string(),
            min_registry_items: if lo <= 1 { 0 } else { lo },
            max_registry_items: if hi >= MAX_PLANNED_REGISTRY {
                u64::MAX
            } else {
                hi
            },
        })
        .collect();
    steps.truncate(MAX_PLAN_STEPS);
    steps
}

/// The runs of equal picks among `candidates` over registry sizes 1 to 2^32: (protocol,
/// smallest size, largest size), smallest sizes first, covering every size.
fn ranges(
    n: u64,
    labels: bool,
    inputs: &Inputs,
    policy: Policy,
    candidates: &[Protocol],
) -> Vec<(Protocol, u64, u64)> {
    let pick = |m: u64| {
        let w = Workload::new(n, m)
            .with_labels(labels)
            .with_label_lanes(Some(ASSUMED_LANE_WIDTH));
        choose(&w, inputs, policy, candidates).map_or(Protocol::Dh, |c| c.protocol)
    };
    let mut runs = Vec::new();
    let (mut current, mut start) = (pick(1), 1u64);
    let mut m = 1u64;
    while m < MAX_PLANNED_REGISTRY {
        let next = (m * 2).min(MAX_PLANNED_REGISTRY);
        let p = pick(next);
        if p != current {
            // The change is in (m, next]: bisect to the last size with the current pick.
            let (mut lo, mut hi) = (m, next);
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if pick(mid) == current {
                    lo = mid
                } else {
                    hi = mid
                }
            }
            runs.push((current, start, lo));
            (current, start) = (pick(hi), hi);
        }
        m = next;
    }
    runs.push((current, start, MAX_PLANNED_REGISTRY));
    runs
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
    fn a_plan_gives_the_balanced_registries_of_fast_links_to_ot_psi_and_the_rest_to_dh_psi() {
        // A LAN with labels: OT-PSI (with lanes) for registries near the client's size.
        let lan = plan(4096, true, Link::mbit(0.4, 1000.0, 1000.0));
        assert!(!lan.is_empty(), "{lan:?}");
        assert!(
            psi_http::plan_pick(&lan, 4096, |p| p != "cm20-psi") == Some("ot-psi"),
            "{lan:?}"
        );
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
    fn a_plan_follows_the_models_pick_at_every_size_with_and_without_cm20() {
        for link in [
            Link::mbit(0.4, 1000.0, 1000.0),
            Link::mbit(100.0, 10.0, 10.0),
            Link::mbit(1000.0, 3.6, 3.6),
            Link::mbit(200.0, 0.5, 2.0),
        ] {
            let inputs = Inputs {
                link,
                client: UnitCosts::REFERENCE.with_threads(2),
                server: UnitCosts::REFERENCE,
            };
            for n in [256u64, 1024, 4096, 1 << 16] {
                let p = opening_plan(n, true, &inputs, Policy::Fastest);
                for k in 0..36 {
                    // Powers of two and the sizes around them.
                    for m in [(1u64 << k).saturating_sub(1).max(1), 1 << k, (1 << k) + 1] {
                        let w = Workload::new(n, m)
                            .with_labels(true)
                            .with_label_lanes(Some(ASSUMED_LANE_WIDTH));
                        for (set, runs_cm20) in [(&WITH_CM20[..], true), (&DEFAULT_SET[..], false)]
                        {
                            let want = choose(&w, &inputs, Policy::Fastest, set).unwrap().protocol;
                            let got =
                                psi_http::plan_pick(&p, m, |name| runs_cm20 || name != "cm20-psi")
                                    .unwrap_or("dh-psi");
                            assert_eq!(got, want.api_name(), "n {n}, m {m}, {link:?}: {p:?}");
                        }
                    }
                }
            }
        }
    }
}
