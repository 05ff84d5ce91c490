//! The link: the platform's hints, the estimate kept per network and folded from the
//! timings of the requests runs make anyway, and the clock those requests are timed with.

use super::source::{LinkSources, Source};
use psi_core::cost::Link;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// What the platform knows about the current network (Android `NetworkCapabilities`,
/// iOS `NWPath`), passed in by the SDKs: priors until runs have measured the link.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LinkHints {
    /// The caller's name for the network (e.g. `wifi`, `cellular`, a hash of the SSID):
    /// link estimates are kept per network. Empty: one shared estimate.
    pub network: String,
    /// Estimated downstream bandwidth, Mbit/s (Android `getLinkDownstreamBandwidthKbps`).
    pub down_mbit: Option<f64>,
    /// Estimated upstream bandwidth, Mbit/s.
    pub up_mbit: Option<f64>,
    /// Round-trip time, ms, if the platform knows one.
    pub rtt_ms: Option<f64>,
    /// The network is metered (Android `NET_CAPABILITY_NOT_METERED` absent, iOS
    /// `isExpensive`). Reported; the caller picks the policy.
    pub metered: bool,
    /// The user asked to save data (iOS `isConstrained`, Android Data Saver): an
    /// `Auto` choice uses the fewest-bytes policy.
    pub constrained: bool,
}

impl LinkHints {
    /// Hints for the network named `network`.
    pub fn new(network: impl Into<String>) -> Self {
        LinkHints {
            network: network.into(),
            ..LinkHints::default()
        }
    }
    /// Sets the bandwidth estimates (Mbit/s).
    pub fn with_bandwidth(mut self, down_mbit: f64, up_mbit: f64) -> Self {
        self.down_mbit = Some(down_mbit);
        self.up_mbit = Some(up_mbit);
        self
    }
    /// Sets the round-trip time (ms).
    pub fn with_rtt_ms(mut self, rtt_ms: f64) -> Self {
        self.rtt_ms = Some(rtt_ms);
        self
    }
    /// Sets the metered and constrained flags.
    pub fn with_flags(mut self, metered: bool, constrained: bool) -> Self {
        self.metered = metered;
        self.constrained = constrained;
        self
    }
}

/// The link assumed when nothing is known: 50 ms, 10 Mbit/s down, 5 up (a middling
/// mobile or home connection). Runs replace it with measurements.
pub const DEFAULT_LINK: Link = Link {
    rtt: 0.050,
    up: 5e6 / 8.0,
    down: 10e6 / 8.0,
};

/// Smallest transfer (bytes, one direction) whose timing updates a throughput estimate:
/// below it latency dominates and the rate would be noise.
pub const MIN_RATE_SAMPLE_BYTES: u64 = 32 * 1024;

/// A hint's value if it is one: a finite positive number whose conversion to bytes per
/// second (or seconds) stays finite. Anything else (NaN, 0, negative, infinite, absurdly
/// large) is unknown. The one rule for hints: the bindings filter with it too.
pub fn usable_hint(v: Option<f64>) -> Option<f64> {
    v.filter(|x| x.is_finite() && *x > 0.0 && (x * 1e6).is_finite())
}

impl LinkHints {
    /// Whether any of the link hints is usable ([`LinkEstimate::from_hints`] takes
    /// something from them): the prior is then `Given`, else `Default`.
    pub fn informative(&self) -> bool {
        [self.down_mbit, self.up_mbit, self.rtt_ms]
            .into_iter()
            .any(|v| usable_hint(v).is_some())
    }
}

/// A link estimate and how much it rests on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LinkEstimate {
    /// Round-trip time, seconds.
    pub rtt: f64,
    /// Upstream bytes per second.
    pub up: f64,
    /// Downstream bytes per second.
    pub down: f64,
    /// Requests whose timing went into `rtt`.
    pub rtt_samples: u32,
    /// Transfers whose timing went into `up`.
    pub up_samples: u32,
    /// Transfers whose timing went into `down`.
    pub down_samples: u32,
}

impl LinkEstimate {
    /// The estimate as the model's link.
    pub fn link(&self) -> Link {
        Link {
            rtt: self.rtt,
            up: self.up,
            down: self.down,
        }
    }

    /// An estimate from `link` with no samples.
    pub fn prior(link: Link) -> Self {
        LinkEstimate {
            rtt: link.rtt,
            up: link.up,
            down: link.down,
            rtt_samples: 0,
            up_samples: 0,
            down_samples: 0,
        }
    }

    /// The prior from platform hints over [`DEFAULT_LINK`].
    pub fn from_hints(h: &LinkHints) -> Self {
        let pos = usable_hint;
        let down = pos(h.down_mbit).map_or(DEFAULT_LINK.down, |m| m * 1e6 / 8.0);
        // Platforms often know only the downstream: assume a quarter of it upstream.
        let up = pos(h.up_mbit).map_or(
            if pos(h.down_mbit).is_some() {
                down / 4.0
            } else {
                DEFAULT_LINK.up
            },
            |m| m * 1e6 / 8.0,
        );
        let rtt = pos(h.rtt_ms).map_or(DEFAULT_LINK.rtt, |ms| ms / 1e3);
        LinkEstimate::prior(Link { rtt, up, down })
    }

    /// Where each figure came from, `hints` being the current network's: a figure with
    /// samples is `Measured`. One without is a prior: `Given` when the hints give it now
    /// (the upstream also when only the downstream is given: a quarter of it) or when it
    /// differs from [`DEFAULT_LINK`] (an estimate stored with earlier hints), else
    /// `Default`. An RTT measured by a health request leaves both rates at the prior.
    pub fn sources(&self, hints: &LinkHints) -> LinkSources {
        let figure = |samples: u32, hinted: bool, value: f64, default: f64| {
            if samples > 0 {
                Source::Measured
            } else if hinted || value != default {
                Source::Given
            } else {
                Source::Default
            }
        };
        let down_hinted = usable_hint(hints.down_mbit).is_some();
        let up_hinted = usable_hint(hints.up_mbit).is_some() || down_hinted;
        let rtt_hinted = usable_hint(hints.rtt_ms).is_some();
        LinkSources {
            rtt: figure(self.rtt_samples, rtt_hinted, self.rtt, DEFAULT_LINK.rtt),
            up: figure(self.up_samples, up_hinted, self.up, DEFAULT_LINK.up),
            down: figure(self.down_samples, down_hinted, self.down, DEFAULT_LINK.down),
        }
    }

    /// Folds in the timings of one run's requests. RTT: the fastest small request
    /// (less the server's reported time). Throughput: each transfer of at least
    /// [`MIN_RATE_SAMPLE_BYTES`] one way, its time less this run's RTT and the server's
    /// time, taken in two passes (ADR 0057):
    ///
    /// 1. A one-way transfer (one direction carries at least [`ONE_WAY`] times the
    ///    other's bytes) is a sample of that direction, the few bytes the other way taken
    ///    off at the current estimate.
    /// 2. A mixed transfer (as an OT-PSI chunk with label lanes: the last of the matrix
    ///    up, every output and lane down) is a sample of the direction pass 1 did not
    ///    measure in this run, the other direction taken off at its fresh figure. Where
    ///    pass 1 measured neither, it scales both rates by the one factor that explains
    ///    its time (which direction was off cannot be told from one mix); where pass 1
    ///    measured both, it is left out. Blaming a mixed transfer's error on one
    ///    direction at a guess fed back into the other's next sample: with lanes the
    ///    estimates ran off to 3x and 0.2x the truth (ADR 0053).
    ///
    /// A new value within a factor of 2 of the estimate is averaged 1:1 with it (noise is
    /// smoothed); one further off replaces it (the network changed: followed at once).
    pub fn update(&mut self, samples: &[Sample]) {
        fn fold(old: &mut f64, new: f64, n: &mut u32) {
            let ratio = new / *old;
            *old = if *n == 0 || !(0.5..=2.0).contains(&ratio) {
                new
            } else {
                (*old + new) / 2.0
            };
            *n = n.saturating_add(1);
        }
        let rtt = samples
            .iter()
            .filter(|s| s.up + s.down < 4096)
            .map(|s| (s.elapsed - s.server).max(1e-5))
            .min_by(f64::total_cmp);
        if let Some(r) = rtt {
            fold(&mut self.rtt, r, &mut self.rtt_samples);
        }
        let rtt = rtt.unwrap_or(self.rtt);
        // A transfer faster than the clock resolves counts as 0.1 ms.
        let rate = |bytes: u64, left: f64| bytes as f64 / left.max(1e-4);
        // A sample of one direction: the other direction's bytes taken off at its
        // current figure.
        let down_sample = |e: &mut Self, s: &Sample, left: f64| {
            let r = rate(s.down, left - s.up as f64 / e.up);
            fold(&mut e.down, r, &mut e.down_samples);
        };
        let up_sample = |e: &mut Self, s: &Sample, left: f64| {
            let r = rate(s.up, left - s.down as f64 / e.down);
            fold(&mut e.up, r, &mut e.up_samples);
        };
        let (mut measured_up, mut measured_down) = (false, false);
        let mut mixed = Vec::new();
        for s in samples {
            let left = s.elapsed - s.server - rtt;
            if s.down >= MIN_RATE_SAMPLE_BYTES && s.down >= ONE_WAY.saturating_mul(s.up) {
                down_sample(self, s, left);
                measured_down = true;
            } else if s.up >= MIN_RATE_SAMPLE_BYTES && s.up >= ONE_WAY.saturating_mul(s.down) {
                up_sample(self, s, left);
                measured_up = true;
            } else if s.up.max(s.down) >= MIN_RATE_SAMPLE_BYTES {
                mixed.push((s, left));
            }
        }
        for (s, left) in mixed {
            match (measured_up, measured_down) {
                (true, false) => down_sample(self, s, left),
                (false, true) => up_sample(self, s, left),
                (false, false) => {
                    // Both rates times the factor that makes the predicted time this one.
                    let predicted = s.up as f64 / self.up + s.down as f64 / self.down;
                    let factor = predicted / left.max(1e-4);
                    let (up, down) = (self.up * factor, self.down * factor);
                    fold(&mut self.up, up, &mut self.up_samples);
                    fold(&mut self.down, down, &mut self.down_samples);
                }
                (true, true) => {}
            }
        }
    }
}

/// How many times the other direction's bytes one direction must carry for a transfer
/// to be a sample of that direction alone ([`LinkEstimate::update`]): the bytes the other
/// way then take at most an eighth of the time on a symmetric link, and as long as the
/// one-way bytes on one 8x slower that way.
const ONE_WAY: u64 = 8;

/// The timing of one request: body bytes each way, seconds from send to the complete
/// response, and the server's reported computation (`Server-Timing`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Request body bytes.
    pub up: u64,
    /// Response body bytes.
    pub down: u64,
    /// Seconds from send to the full response.
    pub elapsed: f64,
    /// Seconds of server computation reported.
    pub server: f64,
}

/// The clock the driver times requests with. [`SystemClock`] by default; a simulated
/// link supplies its own (psi-client/tests/simlink.rs).
pub trait Clock: Send + Sync {
    /// Time since an arbitrary fixed start.
    fn now(&self) -> Duration;
}

/// The monotonic system clock.
#[derive(Debug)]
pub struct SystemClock(Instant);

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock(Instant::now())
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        self.0.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request of `up` and `down` body bytes with `server` seconds of the server's work,
    /// as timed on `link`.
    fn on(link: Link) -> impl Fn(u64, u64, f64) -> Sample {
        move |up, down, server| Sample {
            up,
            down,
            elapsed: link.rtt + up as f64 / link.up + down as f64 / link.down + server,
            server,
        }
    }

    #[test]
    fn each_figure_of_the_link_names_its_own_source() {
        use Source::{Default as D, Given as G, Measured as M};
        let src = |e: &LinkEstimate, h: &LinkHints| {
            let s = e.sources(h);
            (s.rtt, s.up, s.down)
        };
        let none = LinkHints::default();
        let mut e = LinkEstimate::from_hints(&none);
        assert_eq!(src(&e, &none), (D, D, D));
        // A health request's timing: the RTT only (the loopback case of `psi demo`).
        e.update(&[Sample {
            up: 0,
            down: 300,
            elapsed: 0.001,
            server: 0.0,
        }]);
        assert_eq!((e.rtt_samples, e.up_samples, e.down_samples), (1, 0, 0));
        assert_eq!(src(&e, &none), (M, D, D));
        // Only the downstream hinted: the upstream is derived from it.
        let down = LinkHints {
            down_mbit: Some(20.0),
            ..LinkHints::default()
        };
        assert_eq!(src(&LinkEstimate::from_hints(&down), &down), (D, G, G));
        assert_eq!(src(&e, &down), (M, G, G));
        let rtt = LinkHints::new("x").with_rtt_ms(30.0);
        assert_eq!(src(&LinkEstimate::from_hints(&rtt), &rtt), (G, D, D));
        // A downstream transfer measured (the probe's answer), the upstream not.
        e.update(&[Sample {
            up: 16,
            down: 2 * MIN_RATE_SAMPLE_BYTES,
            elapsed: 0.05,
            server: 0.0,
        }]);
        assert_eq!(src(&e, &none), (M, D, M));
        // A stored prior made from earlier hints (not the default's figures) is given.
        let stored = LinkEstimate::from_hints(&LinkHints::new("x").with_bandwidth(32.0, 8.0));
        assert_eq!(src(&stored, &none), (D, G, G));
    }

    #[test]
    fn estimates_recover_a_link_from_its_timings() {
        // A 100 ms, 2 Mbit/s down, 0.5 Mbit/s up link, seen through a prior that is
        // far off (the default).
        let truth = Link::mbit(100.0, 0.5, 2.0);
        let time = on(truth);
        let mut e = LinkEstimate::from_hints(&LinkHints::default());
        for _ in 0..6 {
            e.update(&[
                time(44, 300, 0.001),
                time(32_017, 32_017, 0.02),
                time(0, 680_000, 0.0),
                time(200_000, 21, 0.01),
                time(0, 0, 0.0),
            ]);
        }
        let close = |a: f64, b: f64| (a / b - 1.0).abs() < 0.1;
        assert!(close(e.rtt, truth.rtt), "{e:?}");
        assert!(close(e.down, truth.down), "{e:?}");
        assert!(close(e.up, truth.up), "{e:?}");
        assert!(e.rtt_samples >= 6 && e.down_samples >= 6 && e.up_samples >= 6);
    }

    /// An OT-PSI run with label lanes: matrix chunks up, then a last chunk that carries
    /// the rest of the matrix up and every output and lane down.
    fn lanes_run(time: impl Fn(u64, u64, f64) -> Sample) -> Vec<Sample> {
        vec![
            time(300, 200, 0.0),
            time(4_000, 4_000, 0.01),
            time(400_000, 60, 0.05),
            time(400_000, 60, 0.05),
            time(150_000, 700_000, 0.08),
        ]
    }

    #[test]
    fn a_mixed_transfer_teaches_the_direction_the_run_did_not_measure() {
        // 3G (0.5 up, 2 down), seen through the default prior (5 up, 10 down): the pure
        // upload chunks give the up rate, the mixed last chunk then gives the down rate.
        let truth = Link::mbit(200.0, 0.5, 2.0);
        let time = on(truth);
        let mut e = LinkEstimate::from_hints(&LinkHints::default());
        for _ in 0..4 {
            e.update(&lanes_run(&time));
        }
        let close = |a: f64, b: f64| (a / b - 1.0).abs() < 0.05;
        assert!(close(e.up, truth.up), "{e:?}");
        assert!(close(e.down, truth.down), "{e:?}");
        assert!(e.down_samples >= 4, "{e:?}");
        // The same with a prior off the other way (a LAN's figures).
        let mut e = LinkEstimate::prior(Link::mbit(0.4, 1000.0, 1000.0));
        for _ in 0..4 {
            e.update(&lanes_run(&time));
        }
        assert!(close(e.up, truth.up), "{e:?}");
        assert!(close(e.down, truth.down), "{e:?}");
    }

    #[test]
    fn runs_of_mixed_transfers_only_keep_the_estimate_where_it_explains_them() {
        // Every transfer carries both directions in the same proportion: which one was
        // slow cannot be told, so the rates move together until the predicted time is
        // the measured one, and stay finite and positive whatever the prior.
        let truth = Link::mbit(100.0, 0.5, 2.0);
        let time = |up, down| on(truth)(up, down, 0.0);
        for prior in [
            Link::mbit(100.0, 5.0, 10.0),
            Link::mbit(100.0, 0.05, 0.1),
            Link::mbit(100.0, 50.0, 0.5),
        ] {
            let mut e = LinkEstimate::prior(prior);
            for _ in 0..8 {
                e.update(&[
                    time(200, 200),
                    time(200_000, 300_000),
                    time(200_000, 300_000),
                ]);
            }
            let predicted = 200_000.0 / e.up + 300_000.0 / e.down;
            let measured = 200_000.0 / truth.up + 300_000.0 / truth.down;
            assert!(
                (predicted / measured - 1.0).abs() < 0.05,
                "{prior:?}: {e:?}"
            );
            assert!(e.up.is_finite() && e.up > 0.0 && e.down.is_finite() && e.down > 0.0);
            // The ratio of the two rates stays the prior's: nothing told them apart.
            let ratio = |l: f64, r: f64| l / r;
            assert!((ratio(e.up, e.down) / ratio(prior.up, prior.down) - 1.0).abs() < 1e-9);
        }
    }

    #[test]
    fn a_mixed_transfer_beside_a_download_teaches_the_up_rate() {
        // A DH-PSI run of a few thousand contacts: the encoded set down, then the blinded
        // elements up and the evaluated ones down, equal bytes; the link four times
        // slower up. The download gives the down rate, the mixed transfer then the up
        // rate (it used to count as a down sample, since down >= up, with the slow upload
        // taken off at a guess).
        let truth = Link::mbit(50.0, 1.0, 4.0);
        let time = |up, down| on(truth)(up, down, 0.0);
        let mut e = LinkEstimate::from_hints(&LinkHints::default());
        e.update(&[time(100, 100), time(20, 1_400_000), time(128_000, 128_000)]);
        assert_eq!((e.up_samples, e.down_samples), (1, 1), "{e:?}");
        let close = |a: f64, b: f64| (a / b - 1.0).abs() < 0.01;
        assert!(close(e.down, truth.down), "{e:?}");
        assert!(close(e.up, truth.up), "{e:?}");
    }

    #[test]
    fn hints_make_the_prior() {
        let e = LinkEstimate::from_hints(&LinkHints::new("cell").with_bandwidth(20.0, 5.0));
        assert_eq!(e.down, 2.5e6);
        assert_eq!(e.up, 625_000.0);
        assert_eq!(e.rtt, DEFAULT_LINK.rtt);
        let only_down = LinkEstimate::from_hints(&LinkHints {
            down_mbit: Some(8.0),
            up_mbit: Some(f64::NAN),
            ..LinkHints::default()
        });
        assert_eq!(only_down.up, 250_000.0);
    }

    #[test]
    fn unusable_hints_are_no_hints() {
        for bad in [f64::NAN, 0.0, -3.0, f64::INFINITY, f64::MAX] {
            let h = LinkHints {
                down_mbit: Some(bad),
                up_mbit: Some(bad),
                rtt_ms: Some(bad),
                ..LinkHints::new("n")
            };
            assert!(!h.informative(), "{bad}");
            assert_eq!(
                LinkEstimate::from_hints(&h),
                LinkEstimate::prior(DEFAULT_LINK),
                "{bad}"
            );
        }
        assert!(!LinkHints::new("n").informative());
        assert!(LinkHints::new("n").with_rtt_ms(30.0).informative());
        assert!(
            LinkHints::new("n")
                .with_bandwidth(5.0, f64::NAN)
                .informative()
        );
    }
}
