//! The bounded probe: its size and response slack, and whether an unmeasured link is
//! worth probing before a choice (docs/protocol-choice.md, "Bounded probe").

use super::link::MIN_RATE_SAMPLE_BYTES;
use super::source::Source;

/// Bytes each way of the bounded probe: the smallest transfer that gives a rate sample
/// ([`MIN_RATE_SAMPLE_BYTES`]) twice over.
pub const PROBE_BYTES: u64 = 2 * MIN_RATE_SAMPLE_BYTES;

/// Bytes a probe response may carry beyond the body asked for (an error body, the
/// upstream answer's JSON): the client caps each probe response at the body plus this.
pub const PROBE_RESPONSE_SLACK: u64 = 4096;

// The probe stays within the server's cap each way, gives a rate sample, and its response
// slack is too small to pass for one.
const _: () = assert!(
    PROBE_BYTES <= psi_http::PROBE_MAX_BYTES
        && PROBE_BYTES >= MIN_RATE_SAMPLE_BYTES
        && PROBE_RESPONSE_SLACK < MIN_RATE_SAMPLE_BYTES
);

/// How far off a link prior may be, as a factor on its rates and RTT: 4 for the built-in
/// default (it knows nothing of the network), 2 for the platform's hints (a bandwidth
/// class, not a measurement).
pub fn prior_uncertainty(source: Source) -> f64 {
    match source {
        Source::Given => 2.0,
        _ => 4.0,
    }
}

/// Whether an unmeasured link is worth a bounded probe: the choice under the prior
/// differs from the choice under some link within `factor` of it (rates and RTT each
/// scaled by `1/factor`, 1 or `factor`), and there the prior's pick would lose more time
/// than the probe costs on that link. Pure (docs/protocol-choice.md, "Bounded probe").
pub fn probe_worthwhile(
    w: &psi_core::cost::Workload,
    inputs: &psi_core::cost::Inputs,
    policy: psi_core::cost::Policy,
    candidates: &[psi_core::Protocol],
    factor: f64,
) -> bool {
    use psi_core::cost::{Link, choose};
    let l = inputs.link;
    let sane = |x: f64| x.is_finite() && x > 0.0;
    // A factor of 1 or less (or not a number) allows no other link; a prior that is not
    // a link (hints are filtered into one, but `inputs` is public) gives no probe.
    if !(factor.is_finite() && factor > 1.0 && sane(l.rtt) && sane(l.up) && sane(l.down)) {
        return false;
    }
    let Some(prior) = choose(w, inputs, policy, candidates) else {
        return false;
    };
    if prior.predictions.len() < 2 {
        return false;
    }
    let scales = [1.0 / factor, 1.0, factor];
    for &r in &scales {
        for &t in &scales {
            let link = Link {
                rtt: l.rtt * t,
                up: l.up * r,
                down: l.down * r,
            };
            let mut i = *inputs;
            i.link = link;
            let Some(c) = choose(w, &i, policy, candidates) else {
                continue;
            };
            if c.protocol == prior.protocol {
                continue;
            }
            let time = |p| c.prediction(p).map_or(0.0, |p| p.total());
            let regret = time(prior.protocol) - time(c.protocol);
            let probe = link.exchange(0, 0)
                + link.exchange(0, PROBE_BYTES)
                + link.exchange(PROBE_BYTES, 16);
            if regret > probe {
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::link::{DEFAULT_LINK, LinkEstimate, LinkHints};
    use psi_core::cost::{Link, Policy, UnitCosts, Workload};

    fn reference(link: Link) -> psi_core::cost::Inputs {
        psi_core::cost::Inputs {
            link,
            client: UnitCosts::REFERENCE,
            server: UnitCosts::REFERENCE,
        }
    }

    const BOTH: [psi_core::Protocol; 2] = [psi_core::Protocol::Dh, psi_core::Protocol::Ot];

    /// Probe decisions on the reference machine (both sides) and the default prior, runs
    /// without labels (with labels, OT-PSI's label query over every item makes DH-PSI the
    /// clear choice for balanced sets: docs/adr/0033-a-label-for-every-match.md).
    fn worthwhile(n_c: u64, n_s: u64, link: Link, policy: Policy, factor: f64) -> bool {
        probe_worthwhile(
            &Workload::new(n_c, n_s).with_labels(false),
            &reference(link),
            policy,
            &BOTH,
            factor,
        )
    }

    #[test]
    fn close_choices_are_probed_and_clear_ones_are_not() {
        // 2,048 against 8,192: DH-PSI and OT-PSI within 4% on the default link; a link 4x
        // faster or slower flips the choice by more than the probe's three requests.
        assert!(worthwhile(2048, 8192, DEFAULT_LINK, Policy::Fastest, 4.0));
        // The same workload with hints (a factor of 2): no link that close changes enough.
        assert!(!worthwhile(2048, 8192, DEFAULT_LINK, Policy::Fastest, 2.0));
        // With labels, DH-PSI wins clearly: no probe.
        assert!(!probe_worthwhile(
            &Workload::new(4096, 4096),
            &reference(DEFAULT_LINK),
            Policy::Fastest,
            &BOTH,
            4.0
        ));
        // 1,000 against 10^5: DH-PSI by about 2x under any link within 4x.
        assert!(!worthwhile(
            1000,
            100_000,
            DEFAULT_LINK,
            Policy::Fastest,
            4.0
        ));
        // Small sets: DH-PSI whatever the link.
        assert!(!worthwhile(256, 4096, DEFAULT_LINK, Policy::Fastest, 4.0));
        // Fewest bytes does not depend on the link at all.
        assert!(!worthwhile(
            4096,
            4096,
            DEFAULT_LINK,
            Policy::FewestBytes,
            4.0
        ));
        // One candidate: nothing to choose.
        let w = Workload::new(4096, 4096);
        let i = reference(DEFAULT_LINK);
        assert!(!probe_worthwhile(
            &w,
            &i,
            Policy::Fastest,
            &[psi_core::Protocol::Dh],
            4.0
        ));
        assert!(!probe_worthwhile(&w, &i, Policy::Fastest, &[], 4.0));
    }

    #[test]
    fn degenerate_factors_and_links_give_no_probe() {
        for factor in [f64::NAN, 0.0, -4.0, 0.5, 1.0, f64::INFINITY] {
            assert!(
                !worthwhile(4096, 4096, DEFAULT_LINK, Policy::Fastest, factor),
                "{factor}"
            );
        }
        for bad in [f64::NAN, 0.0, -1.0, f64::INFINITY] {
            for link in [
                Link {
                    rtt: bad,
                    ..DEFAULT_LINK
                },
                Link {
                    up: bad,
                    ..DEFAULT_LINK
                },
                Link {
                    down: bad,
                    ..DEFAULT_LINK
                },
            ] {
                assert!(
                    !worthwhile(4096, 4096, link, Policy::Fastest, 4.0),
                    "{link:?}"
                );
            }
        }
        // A huge but finite link (a hint of 10^12 Mbit/s) is a link: no panic, no NaN.
        let fast = LinkEstimate::from_hints(
            &LinkHints::new("x")
                .with_bandwidth(1e12, 1e12)
                .with_rtt_ms(1e-9),
        );
        assert!(fast.link().up.is_finite() && fast.link().rtt > 0.0);
        let _ = worthwhile(4096, 4096, fast.link(), Policy::Fastest, 4.0);
        // Counts past the model's bound are read as the bound.
        let _ = worthwhile(u64::MAX, u64::MAX, DEFAULT_LINK, Policy::Fastest, 4.0);
    }

    #[test]
    fn a_prior_from_hints_is_less_uncertain_than_the_default() {
        assert_eq!(prior_uncertainty(Source::Given), 2.0);
        assert_eq!(prior_uncertainty(Source::Default), 4.0);
    }
}
