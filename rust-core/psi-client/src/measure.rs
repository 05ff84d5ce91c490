//! Inputs of the automatic protocol choice (docs/protocol-choice.md): the device's unit
//! costs (a short calibration, cached), the link (timed from the requests runs make
//! anyway, kept per network, with the platform's hints as priors) and the server's
//! advertised costs. The model itself is `psi_core::cost`.
//!
//! [`Measurements`] is the small store the caller keeps (per device; its link estimates
//! per network): [`Measurements::to_json`] / [`Measurements::from_json`] are its format,
//! and [`crate::MeasurementsFile`] the file that keeps it (`measurements.json`).
//!
//! The device's and the server's unit costs are `psi_core::cost::UnitCosts` (the one
//! record of them; `psi_core::calibrate` the one calibration). [`DeviceCosts`] is only
//! their stored spelling in `measurements.json` (psi-http's `UnitCostsNs`, the spelling the
//! server's health uses too), [`server_units`] the one reading of a server's advertised
//! costs.

use psi_core::cost::{Link, UnitCosts};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How a run's protocol is picked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProtocolChoice {
    /// Predict every protocol the server runs and take the best by the policy.
    Auto(psi_core::cost::Policy),
    /// Always this protocol.
    Fixed(psi_core::Protocol),
}

impl Default for ProtocolChoice {
    /// `Auto(Fastest)`.
    fn default() -> Self {
        ProtocolChoice::Auto(psi_core::cost::Policy::Fastest)
    }
}

impl From<psi_core::Protocol> for ProtocolChoice {
    fn from(p: psi_core::Protocol) -> Self {
        ProtocolChoice::Fixed(p)
    }
}

impl std::fmt::Display for ProtocolChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProtocolChoice::Auto(p) => write!(f, "auto ({})", p.name()),
            ProtocolChoice::Fixed(p) => write!(f, "{p}"),
        }
    }
}

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
    /// [`MIN_RATE_SAMPLE_BYTES`] one way, its time less this run's RTT, the server's time
    /// and the other direction's bytes at the current estimate. A new value within a
    /// factor of 2 of the estimate is averaged 1:1 with it (noise is smoothed); one
    /// further off replaces it (the network changed: followed at once).
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
        for s in samples {
            let left = s.elapsed - s.server - rtt;
            // A transfer faster than the clock resolves counts as 0.1 ms.
            if s.down >= MIN_RATE_SAMPLE_BYTES && s.down >= s.up {
                let t = (left - s.up as f64 / self.up).max(1e-4);
                fold(&mut self.down, s.down as f64 / t, &mut self.down_samples);
            } else if s.up >= MIN_RATE_SAMPLE_BYTES {
                let t = (left - s.down as f64 / self.down).max(1e-4);
                fold(&mut self.up, s.up as f64 / t, &mut self.up_samples);
            }
        }
    }
}

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

/// A device's unit costs as stored in `measurements.json`: psi-http's
/// [`psi_http::UnitCostsNs`], the same record a server's health advertises, with its one
/// conversion to and from the model's [`UnitCosts`].
pub type DeviceCosts = psi_http::UnitCostsNs;

/// Measures this device (about 42 ms): `psi_core::calibrate::unit_costs` on one thread.
pub fn calibrate_device() -> DeviceCosts {
    DeviceCosts::from_units(&psi_core::calibrate::unit_costs(psi_core::Threads::ONE))
}

/// How far a server's advertised unit costs are believed: each is taken within
/// `[reference / SERVER_COST_RANGE, reference * SERVER_COST_RANGE]` of
/// [`UnitCosts::REFERENCE`]'s. Real servers fall well inside (a machine without AES
/// instructions is about 10 times slower per AES block); a server claiming its OT-PSI
/// work costs nothing (or everything) to steer the automatic choice moves the prediction
/// of its own share at most this far (docs/security.md §4).
pub const SERVER_COST_RANGE: f64 = 16.0;
/// Most threads per session step taken from a server's advertisement.
pub const MAX_SERVER_THREADS: u32 = 64;

/// The server costs of a [`psi_http::Health`], if advertised: each unit cost clamped to
/// the plausible range ([`SERVER_COST_RANGE`]; one that is not a finite number is the
/// reference's), the threads to `1..=`[`MAX_SERVER_THREADS`].
pub fn server_units(h: &psi_http::Health) -> Option<UnitCosts> {
    let costs = h.costs?;
    let c = costs.units;
    let r = UnitCosts::REFERENCE;
    let f = |v: f64, reference: f64| {
        if v.is_finite() {
            v.clamp(reference / SERVER_COST_RANGE, reference * SERVER_COST_RANGE)
        } else {
            reference
        }
    };
    let u = UnitCosts::new(
        f(c.scalar_mult_ns, r.scalar_mult),
        f(c.hash_to_group_ns, r.hash_to_group),
        f(c.element_decode_ns, r.element_decode),
        f(c.aes_block_ns, r.aes_block),
        f(c.hash_block_ns, r.hash_block),
        f(c.entry_ns, r.entry),
        costs.threads_per_step.clamp(1, MAX_SERVER_THREADS),
    )
    .with_cm20_lookup(f(c.cm20_lookup_ns.unwrap_or(r.cm20_lookup), r.cm20_lookup));
    u.is_sane().then_some(u)
}

/// What the caller keeps between runs: the device's unit costs, a link estimate per
/// network, and each server's last health (so a choice needs no extra request).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Measurements {
    /// This device's unit costs, once calibrated.
    pub device: Option<DeviceCosts>,
    /// Link estimates by network name ([`LinkHints::network`]).
    pub networks: BTreeMap<String, LinkEstimate>,
    /// The last health of each server, by base URL.
    pub servers: BTreeMap<String, psi_http::Health>,
    /// Servers (by base URL) that refused the bounded probe for its budget (429), with
    /// the time (seconds since the Unix epoch) before which they are not probed again
    /// (docs/protocol-choice.md, "Bounded probe"). Absent from older stores.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub probe_paused_until: BTreeMap<String, u64>,
}

/// How long a server that refused the probe for its budget without a usable
/// `Retry-After` is left unprobed: the budget's window, an hour.
pub const PROBE_PAUSE_DEFAULT_SECS: u64 = 3600;
/// Bounds on the pause after a refused probe, whatever `Retry-After` says: at least a
/// minute (a `Retry-After: 0` must not make every choice probe), at most a day.
pub const PROBE_PAUSE_BOUNDS_SECS: (u64, u64) = (60, 86_400);

/// Seconds since the Unix epoch by the system clock (0 if it is set before 1970).
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Measurements {
    /// Whether the server at `base` may be probed at `now` (seconds since the Unix
    /// epoch): it has not refused a probe for its budget, or that pause is over.
    pub fn probe_allowed(&self, base: &str, now: u64) -> bool {
        self.probe_paused_until
            .get(base)
            .is_none_or(|&until| now >= until)
    }

    /// Records that the server at `base` refused the probe at `now` for its budget,
    /// asking to wait `retry_after` seconds: no probe until then, the wait taken within
    /// [`PROBE_PAUSE_BOUNDS_SECS`] ([`PROBE_PAUSE_DEFAULT_SECS`] if none was given).
    pub fn pause_probe(&mut self, base: &str, now: u64, retry_after: Option<u64>) {
        let (lo, hi) = PROBE_PAUSE_BOUNDS_SECS;
        let wait = retry_after
            .unwrap_or(PROBE_PAUSE_DEFAULT_SECS)
            .clamp(lo, hi);
        // Pauses that are over are dropped, so the map stays as small as the servers.
        self.probe_paused_until.retain(|_, &mut until| until > now);
        self.probe_paused_until
            .insert(base.to_string(), now.saturating_add(wait));
    }
}

impl Measurements {
    /// As JSON (for a file in the app's cache directory).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|_| "{}".into())
    }
    /// From [`Measurements::to_json`]'s output; anything unreadable gives an empty store
    /// (measurements are a cache: losing them costs a calibration and priors).
    pub fn from_json(s: &str) -> Self {
        serde_json::from_str(s).unwrap_or_default()
    }
}

/// A [`Measurements`] shared by the runs of one or more clients.
#[derive(Debug, Default)]
pub struct MeasurementStore(Mutex<Measurements>);

impl MeasurementStore {
    /// A store holding `m`.
    pub fn new(m: Measurements) -> Self {
        MeasurementStore(Mutex::new(m))
    }
    /// A copy of the contents.
    pub fn snapshot(&self) -> Measurements {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
    /// Reads the contents without copying them.
    pub fn read<T>(&self, f: impl FnOnce(&Measurements) -> T) -> T {
        f(&self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
    /// Changes the contents.
    pub fn update<T>(&self, f: impl FnOnce(&mut Measurements) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
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

/// Where an input of the choice came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Source {
    /// Measured during earlier runs or this one.
    Measured,
    /// From the platform's hints (link) or the configuration (device).
    Given,
    /// The built-in default ([`DEFAULT_LINK`], [`UnitCosts::REFERENCE`]).
    Default,
}

impl Source {
    /// `measured`, `given`, `default`.
    pub fn name(self) -> &'static str {
        match self {
            Source::Measured => "measured",
            Source::Given => "given",
            Source::Default => "default",
        }
    }
}

/// Where each figure of a [`LinkEstimate`] came from ([`LinkEstimate::sources`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LinkSources {
    /// The round-trip time's.
    pub rtt: Source,
    /// The upstream rate's.
    pub up: Source,
    /// The downstream rate's.
    pub down: Source,
}

/// The automatic choice of a run: what was chosen, from which inputs, and every
/// protocol's prediction.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ChoiceReport {
    /// The choice and the predictions.
    pub choice: psi_core::cost::Choice,
    /// The protocol the choice picked, when the server refused it for lack of OT capacity
    /// (`503 ot_capacity`) and the run went on with DH-PSI instead; `None` otherwise.
    /// `choice.protocol` stays the model's pick, [`crate::MatchReport::protocol`] is the
    /// protocol that ran.
    pub fell_back_from: Option<psi_core::Protocol>,
    /// The workload predicted.
    pub workload: psi_core::cost::Workload,
    /// The link assumed, and where it came from.
    pub link: LinkEstimate,
    /// Where the link came from as a whole: `Measured` as soon as one figure was (often
    /// only the RTT, by a health request); see `link_sources` for each figure.
    pub link_source: Source,
    /// Where each figure of the link came from: the RTT, the upstream and the downstream
    /// rate (measured by earlier runs or this choice, the hints, or the default).
    pub link_sources: LinkSources,
    /// The device's unit costs.
    pub device: UnitCosts,
    /// Where they came from.
    pub device_source: Source,
    /// The server's unit costs.
    pub server: UnitCosts,
    /// Where they came from (`Measured`: advertised by the server).
    pub server_source: Source,
    /// Whether the choice asked the server for its health (one request) rather than
    /// using the stored one.
    pub health_requested: bool,
    /// Requests of the bounded probe made for this choice (0: none; docs/protocol-choice.md,
    /// "Bounded probe").
    pub probe_requests: u32,
    /// Body bytes of the probe, both ways.
    pub probe_bytes: u64,
    /// Time spent choosing (calibration, health request), included in nothing else.
    pub overhead: Duration,
}

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
        let time = |up: u64, down: u64, server: f64| Sample {
            up,
            down,
            elapsed: truth.rtt + up as f64 / truth.up + down as f64 / truth.down + server,
            server,
        };
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
    fn the_store_round_trips_through_json_and_survives_garbage() {
        let mut m = Measurements {
            device: Some(DeviceCosts::from_units(&UnitCosts::REFERENCE)),
            ..Measurements::default()
        };
        m.networks
            .insert("wifi".into(), LinkEstimate::prior(DEFAULT_LINK));
        let back = Measurements::from_json(&m.to_json());
        assert_eq!(back.device, m.device);
        assert_eq!(back.networks, m.networks);
        assert!(Measurements::from_json("not json").device.is_none());
    }

    #[test]
    fn a_probe_pause_is_bounded_kept_per_server_and_persisted() {
        let mut m = Measurements::default();
        assert!(m.probe_allowed("https://a", 1000));
        // The server's Retry-After, within the bounds.
        m.pause_probe("https://a", 1000, Some(600));
        assert!(!m.probe_allowed("https://a", 1599));
        assert!(m.probe_allowed("https://a", 1600));
        assert!(m.probe_allowed("https://b", 1000));
        // None: the budget's hour; 0: a minute; a year: a day.
        m.pause_probe("https://b", 1000, None);
        assert_eq!(
            m.probe_paused_until["https://b"],
            1000 + PROBE_PAUSE_DEFAULT_SECS
        );
        m.pause_probe("https://c", 1000, Some(0));
        assert_eq!(m.probe_paused_until["https://c"], 1060);
        m.pause_probe("https://d", 1000, Some(365 * 86_400));
        assert_eq!(m.probe_paused_until["https://d"], 1000 + 86_400);
        assert_eq!(
            Measurements::from_json(&m.to_json()).probe_paused_until,
            m.probe_paused_until
        );
        // A later pause drops the ones that are over.
        m.pause_probe("https://e", 5000, Some(60));
        assert_eq!(
            m.probe_paused_until.keys().collect::<Vec<_>>(),
            ["https://d", "https://e"]
        );
        // A store from before the field reads as no pause.
        assert!(
            Measurements::from_json(r#"{"networks":{}}"#)
                .probe_paused_until
                .is_empty()
        );
    }

    use psi_core::cost::{Policy, Workload};

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
        assert_eq!(prior_uncertainty(Source::Given), 2.0);
        assert_eq!(prior_uncertainty(Source::Default), 4.0);
    }
}
