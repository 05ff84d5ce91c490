//! The client driver: the HTTP choreography of a run (docs/api.md, "Flow"). The only
//! place that knows which requests a protocol makes; the protocols themselves are
//! psi-core's state machines.

use crate::cache::{CachedSet, MemoryCache, SetCache};
use crate::cancel::CancelToken;
use crate::config::ClientConfig;
use crate::error::ClientError;
use crate::measure::{
    ChoiceReport, Clock, LinkEstimate, MeasurementStore, ProtocolChoice, Sample,
    Source, SystemClock,
};
use crate::report::{MatchReport, Matched, Progress, RunStats};
use crate::server_input::{self, server_timing};
use crate::transport::{MAX_ERROR_BODY_BYTES, Request, Response, Transport, TransportError};
use psi_core::chunked::ChunkedClient;
use psi_core::dh::{DhClient, EncodedSet};
use psi_core::labels::{LabelClient, LabelStep};
use psi_core::ot::{ClientStep, OtClient, OtConfig};
use psi_core::{ItemSet, MatchOutput, MatchedOutputs, Phase, Protocol};
use psi_http::{ErrorBody, ErrorCode, Feature, Route, SessionCreated};
use rand_chacha::ChaCha20Rng;
use std::sync::Arc;
use std::time::{Duration, Instant};

type Result<T, E = ClientError> = std::result::Result<T, E>;

/// Most OT rounds a run accepts before giving up on a server that never finishes.
const MAX_OT_ROUNDS: usize = 1 << 16;

/// The client driver: runs psi-core's client state machines against a `psi-server`.
/// Cheap to share between threads; runs may go on in parallel.
pub struct Client {
    base: String,
    transport: Arc<dyn Transport>,
    cache: Arc<dyn SetCache>,
    config: ClientConfig,
    measurements: Arc<MeasurementStore>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client for the server at `base_url` (e.g. `http://127.0.0.1:8080`) over the
    /// default [`crate::HttpTransport`] (feature `http`), with an in-memory [`MemoryCache`].
    #[cfg(feature = "http")]
    pub fn new(base_url: &str, config: ClientConfig) -> Client {
        Client::with_transport(
            base_url,
            Arc::new(crate::transport::HttpTransport::new()),
            config,
        )
    }

    /// A client over any transport (e.g. the platform HTTP stack).
    pub fn with_transport(
        base_url: &str,
        transport: Arc<dyn Transport>,
        config: ClientConfig,
    ) -> Client {
        Client {
            base: base_url.trim_end_matches('/').to_string(),
            transport,
            cache: Arc::new(MemoryCache::new()),
            config,
            measurements: Arc::new(MeasurementStore::default()),
            clock: Arc::new(SystemClock::default()),
        }
    }

    /// Uses `store` for the inputs of the automatic protocol choice (device costs, link
    /// estimates per network, the servers' health): keep one per device, persisted in a
    /// [`crate::MeasurementsFile`], so a choice needs no calibration or extra
    /// request. Every run (automatic or not) updates it with its timings.
    pub fn with_measurements(mut self, store: Arc<MeasurementStore>) -> Client {
        self.measurements = store;
        self
    }

    /// The measurement store.
    pub fn measurements(&self) -> &Arc<MeasurementStore> {
        &self.measurements
    }

    /// Times requests with `clock` (a simulated link's clock in tests).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Client {
        self.clock = clock;
        self
    }

    /// `url` as a server base URL (`http://` or `https://`, a host, no query, fragment or
    /// spaces), without surrounding spaces and trailing slashes. `http://` is refused
    /// ([`ClientError::InsecureUrl`]) unless the host is loopback (`127.0.0.0/8`, `::1`,
    /// `localhost`) or `config` allows insecure HTTP. The one owner of the URL rule:
    /// every run checks it before its first request.
    pub fn check_base_url(url: &str, config: &ClientConfig) -> Result<String> {
        let url = url.trim();
        let (https, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err(ClientError::BadInput(
                "the server URL must start with http:// or https://".into(),
            ));
        };
        let host = host_of(rest);
        if host.is_empty() || rest.contains(['?', '#', ' ']) {
            return Err(ClientError::BadInput(
                "the server URL needs a host and no query, fragment or spaces".into(),
            ));
        }
        if !https && !config.allow_insecure_http && !is_loopback(host) {
            return Err(ClientError::InsecureUrl {
                host: host.to_string(),
            });
        }
        Ok(url.trim_end_matches('/').to_string())
    }
    /// Uses `cache` for the encoded registry (e.g. a [`crate::FileCache`] in the app's
    /// cache directory, shared by every client of the app).
    pub fn with_cache(mut self, cache: Arc<dyn SetCache>) -> Client {
        self.cache = cache;
        self
    }

    /// The encoded-registry cache.
    pub fn cache(&self) -> &Arc<dyn SetCache> {
        &self.cache
    }

    /// The server's base URL.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// The settings.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// `GET /v1/health`: the server's epoch, registry size, protocols, limits and
    /// features. Kept in the measurements for this server, so later runs (with a fixed
    /// protocol too) know what it supports without asking again.
    pub fn health(&self) -> Result<psi_http::Health> {
        Client::check_base_url(&self.base, &self.config)?;
        let cancel = CancelToken::new();
        let mut quiet = |_| {};
        let mut run = Run::new(self, &cancel, &mut quiet);
        let h = run.health()?;
        self.measurements
            .update(|m| m.servers.insert(self.base.clone(), h.clone()));
        Ok(h)
    }

    /// Whether this server's stored health lists `feature` (false when no health is
    /// stored: an unknown server is treated as an older one).
    fn stored_feature(&self, feature: Feature) -> bool {
        self.measurements.read(|m| {
            m.servers
                .get(&self.base)
                .is_some_and(|h| h.supports(feature))
        })
    }

    /// Matches `items` (normalized identifiers, see psi-contacts and
    /// [`Client::match_contacts`]) against the server's registry with `protocol` (a
    /// [`Protocol`], or a [`ProtocolChoice`] such as `ProtocolChoice::default()`: with
    /// `Auto`, the protocol the cost model predicts best, reported in
    /// [`MatchReport::choice`]), fetching the labels of the matches if configured. `progress` hears each phase as
    /// it starts, and each retry before its wait ([`Progress::retry`]: the attempt, its
    /// cause and the wait); `cancel` stops the run at its next check (before every request, between
    /// protocol steps and during a retry's wait), deleting the server session.
    ///
    /// A run that fails with a retryable error ([`ClientError::is_retryable`]: no
    /// response, a 5xx, `session_expired`, an epoch that moved...) is started again from a
    /// new session, up to [`ClientConfig::retries`] times, after an exponential backoff
    /// with jitter (250 ms doubling, at most 4 s) or the server's `Retry-After` when it is
    /// at most 30 s (a longer one ends the run with that error: the caller decides). The
    /// whole run is restarted, never the failed request: a protocol step changes the
    /// session's state on the server (the DH query, every OT round), so a resent step is
    /// refused as out of phase, and after a server restart or an expiry the session is
    /// gone altogether; a fresh session is always correct. The cost: each attempt is a
    /// new session, charged again against the caller's item budget. Each request stays
    /// bounded by [`ClientConfig::timeout`], so a run ends within about
    /// `(retries + 1)` runs' worth of timeouts plus the waits.
    pub fn match_items(
        &self,
        items: Vec<Vec<u8>>,
        protocol: impl Into<ProtocolChoice>,
        progress: &mut dyn FnMut(Progress),
        cancel: &CancelToken,
    ) -> Result<MatchReport> {
        let choice = protocol.into();
        Client::check_base_url(&self.base, &self.config)?;
        let set = ItemSet::new(items);
        if set.is_empty() {
            return Err(ClientError::BadInput("no items to match".into()));
        }
        if set
            .items()
            .iter()
            .any(|i| i.len() > psi_core::oprf::MAX_INPUT_LEN)
        {
            return Err(ClientError::BadInput(
                "an item is longer than 65,535 bytes".into(),
            ));
        }
        let (mut protocol, mut report) = match choice {
            ProtocolChoice::Fixed(p) => (p, None),
            ProtocolChoice::Auto(policy) => {
                let r = self.choose(set.len(), policy, cancel)?;
                (r.choice.protocol, Some(r))
            }
        };
        let mut attempt = 0;
        loop {
            // The attempt's last event: where it was when it failed.
            let mut last = (Phase::CreateSession, 0);
            let result = {
                let mut hook = |p: Progress| {
                    last = (p.phase, p.round);
                    progress(p)
                };
                self.match_once(set.clone(), protocol, &mut hook, cancel)
            }
            .map(|mut r| {
                r.choice = report.take();
                r
            });
            match result {
                // The server has no OT capacity left for the protocol the automatic choice
                // picked; DH-PSI is never refused for it (docs/api.md, "Errors"): run that
                // at once, once, and say so in the choice report.
                Err(ClientError::Http {
                    code: ErrorCode::OtCapacity,
                    ..
                }) if matches!(choice, ProtocolChoice::Auto(_))
                    && protocol != Protocol::Dh
                    && report.as_ref().is_some_and(|r| r.fell_back_from.is_none()) =>
                {
                    if let Some(r) = report.as_mut() {
                        r.fell_back_from = Some(protocol);
                    }
                    protocol = Protocol::Dh;
                }
                Err(e) if attempt < self.config.retries => {
                    let Some(wait) = retry_wait(&e, attempt, &mut self.jitter()) else {
                        return Err(e);
                    };
                    attempt += 1;
                    if let Some(cause) = crate::report::RetryCause::of(&e) {
                        progress(Progress {
                            phase: last.0,
                            round: last.1,
                            retry: Some(crate::report::Retry {
                                attempt,
                                retries: self.config.retries,
                                cause,
                                wait,
                            }),
                        });
                    }
                    wait_unless_cancelled(wait, cancel)?;
                }
                Err(e) => {
                    // A stored health that names a protocol the server no longer runs
                    // is dropped: the next automatic run asks again.
                    if matches!(choice, ProtocolChoice::Auto(_))
                        && matches!(
                            e,
                            ClientError::Http {
                                code: ErrorCode::UnsupportedProtocol,
                                ..
                            }
                        )
                    {
                        self.measurements.update(|m| m.servers.remove(&self.base));
                    }
                    return Err(e);
                }
                result => return result,
            }
        }
    }

    /// The automatic choice for `n` items: the server's health (stored, or one
    /// request), this device's costs (stored, or a calibration of about 30 ms), the
    /// link estimate of the current network (stored, or the hints' prior), then
    /// `psi_core::cost::choose`.
    pub fn choose(
        &self,
        n: usize,
        policy: psi_core::cost::Policy,
        cancel: &CancelToken,
    ) -> Result<ChoiceReport> {
        let started = self.clock.now();
        let hints = &self.config.link_hints;
        let stored = self.measurements.snapshot();
        let (health, health_requested) = match stored.servers.get(&self.base) {
            Some(h) => (h.clone(), false),
            None => {
                let mut quiet = |_| {};
                let mut run = Run::new(self, cancel, &mut quiet);
                let h = run.health()?;
                let samples = std::mem::take(&mut run.samples);
                self.measurements.update(|m| {
                    m.servers.insert(self.base.clone(), h.clone());
                    let e = m
                        .networks
                        .entry(hints.network.clone())
                        .or_insert_with(|| LinkEstimate::from_hints(hints));
                    e.update(&samples);
                });
                (h, true)
            }
        };
        let threads = self.config.threads.get() as u32;
        let (device, device_source) = match stored.device {
            // A store written before the CM20 lookup unit existed lacks it: calibrate.
            Some(d) if d.cm20_lookup_ns.is_some() => (d.units(threads), Source::Measured),
            _ => {
                let d = crate::measure::calibrate_device();
                self.measurements.update(|m| m.device = Some(d));
                (d.units(threads), Source::Measured)
            }
        };
        let (server, server_source) = match crate::measure::server_units(&health) {
            Some(u) => (u, Source::Measured),
            None => (psi_core::cost::UnitCosts::REFERENCE, Source::Default),
        };
        let link = self
            .measurements
            .snapshot()
            .networks
            .get(&hints.network)
            .copied();
        // Where the prior comes from: usable hints, else the default.
        let prior_source = if hints.informative() {
            Source::Given
        } else {
            Source::Default
        };
        let (mut link, mut link_source) = match link {
            Some(e) if e.rtt_samples + e.up_samples + e.down_samples > 0 => (e, Source::Measured),
            _ => (LinkEstimate::from_hints(hints), prior_source),
        };
        let cached = self.cache.load(&self.base).is_some_and(|c| {
            !health.encoded_set_etag.is_empty() && c.etag == health.encoded_set_etag
        });
        let workload = psi_core::cost::Workload::new(n as u64, health.registry_items)
            .with_labels(self.config.fetch_labels)
            .with_cached_set(cached)
            .with_limits(u64::from(health.max_client_items), health.max_body_bytes)
            .with_label_layout(
                (!health.encoded_set_etag.is_empty()).then_some(health.label_bucket_bits),
                (!health.encoded_set_etag.is_empty()).then_some(health.label_record_bytes),
            );
        let policy = if hints.constrained {
            psi_core::cost::Policy::FewestBytes
        } else {
            policy
        };
        let served: Vec<Protocol> = health
            .protocols
            .iter()
            .filter_map(|p| Protocol::from_api_name(p))
            .collect();
        // Only protocols whose outputs fit this client's response cap are candidates.
        let served =
            server_input::fitting_protocols(&served, &workload, self.config.max_response_bytes);
        let mut inputs = psi_core::cost::Inputs {
            link: link.link(),
            client: device,
            server,
        };
        // No rate measured on this network yet (at most the RTT of a health request), and
        // the prior's uncertainty could flip the choice at a cost above the probe's: one
        // bounded probe each way first (its time is in `overhead`, its requests and bytes
        // in the report). Only a server that lists the probe is probed (an older one costs
        // nothing), and not one that refused it for its budget until its `Retry-After`
        // has passed. A refusal or any failure leaves the prior in place: the probe never
        // fails a run, but a cancellation still cancels it.
        let mut probe = (0, 0);
        let now = crate::measure::unix_now();
        if link.up_samples + link.down_samples == 0
            && health.supports(Feature::Probe)
            && self.measurements.read(|m| m.probe_allowed(&self.base, now))
        {
            let factor = crate::measure::prior_uncertainty(prior_source);
            if crate::measure::probe_worthwhile(&workload, &inputs, policy, &served, factor) {
                let mut quiet = |_| {};
                let mut run = Run::new(self, cancel, &mut quiet);
                let outcome = run.probe(crate::measure::PROBE_BYTES);
                probe = (
                    run.stats.requests,
                    run.stats.bytes_sent + run.stats.bytes_received,
                );
                match outcome {
                    Ok(()) => {
                        let samples = std::mem::take(&mut run.samples);
                        let mut e = link;
                        e.update(&samples);
                        self.measurements.update(|m| {
                            m.networks.insert(hints.network.clone(), e);
                        });
                        link = e;
                        link_source = Source::Measured;
                        inputs.link = link.link();
                    }
                    Err(ClientError::Cancelled) => return Err(ClientError::Cancelled),
                    Err(ClientError::Http {
                        code: ErrorCode::RateLimited,
                        retry_after,
                        ..
                    }) => self
                        .measurements
                        .update(|m| m.pause_probe(&self.base, now, retry_after)),
                    Err(_) => {}
                }
            }
        }
        let choice = psi_core::cost::choose(&workload, &inputs, policy, &served)
            .ok_or_else(|| ClientError::BadResponse("the server runs no known protocol".into()))?;
        Ok(ChoiceReport {
            choice,
            fell_back_from: None,
            workload,
            link,
            link_source,
            link_sources: link.sources(hints),
            device,
            device_source,
            server,
            server_source,
            health_requested,
            probe_requests: probe.0 as u32,
            probe_bytes: probe.1,
            overhead: self.clock.now().saturating_sub(started),
        })
    }

    fn jitter(&self) -> impl FnMut() -> f64 {
        let mut rng = psi_core::rng::os_rng().ok();
        move || {
            use rand_chacha::rand_core::Rng;
            rng.as_mut()
                .map_or(0.5, |r| f64::from(r.next_u32()) / f64::from(u32::MAX))
        }
    }

    /// One attempt of [`Client::match_items`]: one session, created and deleted.
    fn match_once(
        &self,
        set: ItemSet,
        protocol: Protocol,
        progress: &mut dyn FnMut(Progress),
        cancel: &CancelToken,
    ) -> Result<MatchReport> {
        let mut run = Run::new(self, cancel, progress);
        let n = set.len();
        let (session, said_no_labels) = run.create_session(protocol, n)?;
        // A layout that would pin matched entries down is refused before anything is
        // matched (docs/protocol/labels.md §5.1): the caller asked for labels.
        let layout = if self.config.fetch_labels {
            psi_core::labels::check_layout(n, session.registry_items, session.label_bucket_bits)
        } else {
            Ok(())
        };
        let result = layout
            .map_err(ClientError::from)
            .and_then(|()| run.protocol(&session, set, protocol))
            .and_then(|(output, source)| {
                // Labels off, and the server was told: the protocol's final response was
                // the session's last. (Not told, it waits for a label step: DELETE.)
                run.session_complete = said_no_labels;
                let labels = run.labels(&session, output.client_items, output.matches, source)?;
                Ok((output.client_items, output.duplicates, labels))
            });
        // A server that ends sessions itself has freed this one with its final response
        // when the run got that far (ADR 0025): no DELETE, one round trip less. Otherwise
        // (an error, a cancellation, a label step that failed, an older server) free the
        // server's slot; an error here changes nothing for the caller.
        if !(session.ends_on_completion && run.session_complete) {
            let _ = run.delete_session(&session.session_id);
        }
        let (client_items, duplicates, (matches, label_error, labels_skipped)) = result?;
        // What this run saw of the link and the registry goes into the store.
        let hints = &self.config.link_hints;
        self.measurements.update(|m| {
            m.networks
                .entry(hints.network.clone())
                .or_insert_with(|| LinkEstimate::from_hints(hints))
                .update(&run.samples);
            if let Some(h) = m.servers.get_mut(&self.base) {
                h.epoch = session.epoch;
                h.registry_items = session.registry_items;
                h.encoded_set_etag = session.encoded_set_etag.clone();
                h.label_bucket_bits = session.label_bucket_bits;
                h.max_client_items = session.max_client_items;
                h.max_body_bytes = session.max_body_bytes;
            }
        });
        let label_status = crate::report::LabelStatus::of(
            self.config.fetch_labels,
            label_error.as_deref(),
            labels_skipped,
        );
        Ok(MatchReport {
            choice: None,
            labels_missing: matches.iter().filter(|m| m.label.is_none()).count(),
            label_status,
            label_error,
            labels_skipped,
            matches,
            client_items,
            duplicates,
            server_items: session.registry_items,
            epoch: session.epoch,
            registry_etag: session.encoded_set_etag.clone(),
            protocol,
            stats: run.stats,
        })
    }
}

/// First wait before a retry; it doubles with each attempt.
const RETRY_BASE: Duration = Duration::from_millis(250);
/// Longest wait of the backoff.
const RETRY_CAP: Duration = Duration::from_secs(4);
/// Longest `Retry-After` honoured by waiting; a server asking for more gets its error
/// returned to the caller.
const RETRY_AFTER_CAP: Duration = Duration::from_secs(30);

/// How long to wait before retrying after `e` on attempt `attempt` (0-based), or `None`
/// when `e` is not worth retrying. Backoff: `RETRY_BASE * 2^attempt` capped at
/// `RETRY_CAP`, "equal jitter" (half fixed, half drawn from `jitter()` in [0, 1]) so
/// clients failed by the same outage do not return in step. A `Retry-After` of at most
/// `RETRY_AFTER_CAP` is waited out in full (and at least the backoff).
fn retry_wait(e: &ClientError, attempt: u32, jitter: &mut dyn FnMut() -> f64) -> Option<Duration> {
    if !e.is_retryable() {
        return None;
    }
    let backoff = RETRY_BASE
        .saturating_mul(1u32.checked_shl(attempt).unwrap_or(u32::MAX))
        .min(RETRY_CAP);
    let backoff = backoff / 2 + (backoff / 2).mul_f64(jitter().clamp(0.0, 1.0));
    match e {
        ClientError::Http {
            retry_after: Some(s),
            ..
        } => {
            let asked = Duration::from_secs(*s);
            (asked <= RETRY_AFTER_CAP).then(|| asked.max(backoff))
        }
        _ => Some(backoff),
    }
}

/// Sleeps `wait`, ending early with [`ClientError::Cancelled`] if `cancel` fires.
fn wait_unless_cancelled(wait: Duration, cancel: &CancelToken) -> Result<()> {
    let until = Instant::now() + wait;
    loop {
        if cancel.is_cancelled() {
            return Err(ClientError::Cancelled);
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

/// The host of a URL's part after `scheme://`: without user info and port, IPv6
/// addresses without brackets.
fn host_of(rest: &str) -> &str {
    let authority = rest.split('/').next().unwrap_or("");
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split(']').next().unwrap_or("");
    }
    authority.split(':').next().unwrap_or("")
}

/// Loopback: `localhost`, `127.0.0.0/8`, `::1` (and `::ffff:127.0.0.0/104`). Names other
/// than `localhost` are not resolved: the rule must hold before any connection.
fn is_loopback(host: &str) -> bool {
    if host.eq_ignore_ascii_case("localhost") || host.eq_ignore_ascii_case("localhost.") {
        return true;
    }
    match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(a)) => a.is_loopback(),
        Ok(std::net::IpAddr::V6(a)) => {
            a.is_loopback() || a.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        Err(_) => false,
    }
}

/// How a run's labels are obtained.
enum LabelSource {
    /// The run computed the matches' full OPRF outputs (DH-PSI).
    Outputs(MatchedOutputs),
    /// The run gave no outputs: one OPRF query over the matches first (OT-PSI).
    Query,
}

/// One run in progress: its statistics, cancellation and progress hooks.
struct Run<'a> {
    client: &'a Client,
    cancel: &'a CancelToken,
    progress: &'a mut dyn FnMut(Progress),
    stats: RunStats,
    rng: Option<ChaCha20Rng>,
    /// The timing of each request, for the link estimate.
    samples: Vec<Sample>,
    /// The session's final response arrived (the label fetch's, or with labels off the
    /// protocol's last): a server that ends sessions itself has ended it.
    session_complete: bool,
    /// A cap on response bodies below the configured one (the probe's: it knows what
    /// it asked for).
    max_response: Option<u64>,
    /// The cap on the protocol steps' responses, sized for the session
    /// ([`server_input::step_response_cap`]) once it is created.
    step_cap: Option<u64>,
}

impl<'a> Run<'a> {
    fn new(
        client: &'a Client,
        cancel: &'a CancelToken,
        progress: &'a mut dyn FnMut(Progress),
    ) -> Self {
        Run {
            client,
            cancel,
            progress,
            stats: RunStats::default(),
            rng: None,
            samples: Vec::new(),
            session_complete: false,
            max_response: None,
            step_cap: None,
        }
    }

    fn rng(&mut self) -> Result<&mut ChaCha20Rng> {
        if self.rng.is_none() {
            self.rng =
                Some(psi_core::rng::os_rng().map_err(|e| ClientError::BadInput(e.to_string()))?);
        }
        Ok(self.rng.as_mut().expect("set above"))
    }

    fn check(&self) -> Result<()> {
        if self.cancel.is_cancelled() {
            Err(ClientError::Cancelled)
        } else {
            Ok(())
        }
    }

    fn enter(&mut self, phase: Phase) -> Result<Instant> {
        self.check()?;
        (self.progress)(Progress {
            phase,
            round: self.stats.round_trips,
            retry: None,
        });
        Ok(Instant::now())
    }

    fn leave(&mut self, phase: Phase, started: Instant) {
        self.stats.add_phase(phase, started.elapsed());
    }

    /// Sends one request (checking cancellation first) and turns error statuses into
    /// typed errors.
    fn send(
        &mut self,
        route: Route,
        session: &str,
        body: Vec<u8>,
        content_type: Option<&str>,
        extra: Vec<(String, String)>,
    ) -> Result<Response> {
        self.send_to(route, route.path(session), body, content_type, extra)
    }

    /// [`Run::send`] to `path` (a route's path, with a query if it takes one).
    fn send_to(
        &mut self,
        route: Route,
        path: String,
        body: Vec<u8>,
        content_type: Option<&str>,
        extra: Vec<(String, String)>,
    ) -> Result<Response> {
        if route != Route::DeleteSession {
            self.check()?;
        }
        let config = &self.client.config;
        let mut headers = extra;
        if let Some(t) = &config.token {
            headers.push(("authorization".into(), format!("Bearer {t}")));
        }
        if let Some(c) = content_type {
            headers.push(("content-type".into(), c.to_string()));
        }
        let sent = body.len() as u64;
        let cap = server_input::route_cap(
            route,
            self.step_cap,
            self.max_response,
            config.max_response_bytes,
        );
        let t0 = self.client.clock.now();
        let mut resp = self.client.transport.send(Request {
            method: route.method(),
            url: format!("{}{}", self.client.base, path),
            headers,
            body,
            timeout: config.timeout,
            max_response_bytes: cap,
            abandon_on_cancel: !matches!(route, Route::CreateSession | Route::DeleteSession),
        })?;
        let elapsed = self.client.clock.now().saturating_sub(t0);
        // Checked again whatever the transport did: a platform transport that does not
        // honour a cap must not get an oversized health into the measurements. An error
        // body over its cap is dropped (its status still counts).
        if resp.status >= 400 && resp.body.len() as u64 > MAX_ERROR_BODY_BYTES.min(cap) {
            resp.body = Vec::new();
        }
        if resp.body.len() as u64 > cap {
            return Err(TransportError {
                message: format!("response body over its cap of {cap} bytes"),
                timeout: false,
            }
            .into());
        }
        self.stats.requests += 1;
        self.stats.bytes_sent += sent;
        self.stats.bytes_received += resp.body.len() as u64;
        let server = resp.header("server-timing").and_then(server_timing);
        if let Some(d) = server {
            self.stats.server_time += d;
        }
        if resp.status < 400 {
            self.samples.push(Sample {
                up: sent,
                down: resp.body.len() as u64,
                elapsed: elapsed.as_secs_f64(),
                server: server.unwrap_or_default().as_secs_f64(),
            });
        }
        if (300..400).contains(&resp.status) && resp.status != 304 {
            // Transports follow no redirect (crate::transport): the API has none.
            return Err(ClientError::BadResponse(format!(
                "HTTP {} redirect, not followed",
                resp.status
            )));
        }
        if resp.status >= 400 {
            let retry_after = resp
                .header("retry-after")
                .and_then(server_input::retry_after);
            let (code, message) = match serde_json::from_slice::<ErrorBody>(&resp.body) {
                Ok(e) => (e.error, e.message),
                Err(_) => (ErrorCode::Unknown, "non-JSON error response".to_string()),
            };
            return Err(ClientError::Http {
                status: resp.status,
                code,
                message,
                retry_after,
            });
        }
        Ok(resp)
    }

    /// The bounded probe: `GET /v1/probe?bytes=0` (the RTT), `GET /v1/probe?bytes=n` and
    /// `POST /v1/probe` with `n` bytes (timed like every request: the link estimate takes
    /// them as samples). `n` is capped at [`psi_http::PROBE_MAX_BYTES`], and each response
    /// at the body asked for plus [`crate::measure::PROBE_RESPONSE_SLACK`], whatever the
    /// server sends.
    fn probe(&mut self, n: u64) -> Result<()> {
        let n = n.min(psi_http::PROBE_MAX_BYTES);
        let result = self.probe_requests(n);
        self.max_response = None;
        result
    }

    fn probe_requests(&mut self, n: u64) -> Result<()> {
        let slack = crate::measure::PROBE_RESPONSE_SLACK;
        let down = |bytes: u64| format!("{}?bytes={bytes}", Route::ProbeDown.template());
        self.max_response = Some(slack);
        self.send_to(Route::ProbeDown, down(0), Vec::new(), None, vec![])?;
        self.max_response = Some(n + slack);
        let r = self.send_to(Route::ProbeDown, down(n), Vec::new(), None, vec![])?;
        if r.body.len() as u64 != n {
            return Err(ClientError::BadResponse("probe body".into()));
        }
        self.max_response = Some(slack);
        let r = self.send_to(
            Route::ProbeUp,
            Route::ProbeUp.template().to_string(),
            vec![0; n as usize],
            Some(psi_http::BINARY),
            vec![],
        )?;
        match serde_json::from_slice::<psi_http::ProbeReceived>(&r.body) {
            Ok(p) if p.bytes == n => Ok(()),
            _ => Err(ClientError::BadResponse("probe answer".into())),
        }
    }

    fn health(&mut self) -> Result<psi_http::Health> {
        let r = self.send(Route::Health, "", Vec::new(), None, vec![])?;
        serde_json::from_slice(&r.body).map_err(|_| ClientError::BadResponse("health body".into()))
    }

    fn post_binary(&mut self, route: Route, session: &str, body: Vec<u8>) -> Result<Vec<u8>> {
        Ok(self
            .send(route, session, body, Some(psi_http::BINARY), vec![])?
            .body)
    }

    /// `POST /v1/sessions`. With labels off, `"labels": false` is sent only to a server
    /// whose stored health lists [`Feature::SessionLabelsOption`] (older servers refuse
    /// the unknown field); returns the session and whether it was sent. A `bad_request`
    /// to a request that carried it (a server replaced by an older one since its health
    /// was stored) drops the stored health and asks once more without it.
    fn create_session(&mut self, protocol: Protocol, n: usize) -> Result<(SessionCreated, bool)> {
        let t = self.enter(Phase::CreateSession)?;
        let say_no_labels = !self.client.config.fetch_labels
            && self.client.stored_feature(Feature::SessionLabelsOption);
        let session = match self.create(protocol, n, say_no_labels) {
            Err(ClientError::Http {
                code: ErrorCode::BadRequest,
                ..
            }) if say_no_labels => {
                let base = &self.client.base;
                self.client.measurements.update(|m| m.servers.remove(base));
                self.create(protocol, n, false).map(|s| (s, false))
            }
            r => r.map(|s| (s, say_no_labels)),
        }?;
        self.leave(Phase::CreateSession, t);
        Ok(session)
    }

    fn create(&mut self, protocol: Protocol, n: usize, no_labels: bool) -> Result<SessionCreated> {
        let body = serde_json::to_vec(&psi_http::CreateSession {
            protocol: protocol.api_name().to_string(),
            client_items: n as u64,
            // Said only when off: a request with labels on is as before this field.
            labels: no_labels.then_some(false),
        })
        .map_err(|_| ClientError::BadInput("session request".into()))?;
        let r = self.send(Route::CreateSession, "", body, Some(psi_http::JSON), vec![])?;
        let s: SessionCreated = serde_json::from_slice(&r.body)
            .map_err(|_| ClientError::BadResponse("session body".into()))?;
        if let Err(e) = server_input::check_session(&s, protocol) {
            // A session refused for its fields is still freed on the server, when its id
            // can be named.
            if server_input::plain_session_id(&s.session_id) {
                let _ = self.delete_session(&s.session_id);
            }
            return Err(e);
        }
        self.step_cap = server_input::step_response_cap(protocol, n, &s);
        Ok(s)
    }

    fn delete_session(&mut self, id: &str) -> Result<()> {
        self.send(Route::DeleteSession, id, Vec::new(), None, vec![])
            .map(drop)
    }

    fn protocol(
        &mut self,
        session: &SessionCreated,
        set: ItemSet,
        protocol: Protocol,
    ) -> Result<(MatchOutput, LabelSource)> {
        match protocol {
            Protocol::Dh => self.dh(session, set),
            Protocol::Ot => self.ot(session, set),
            Protocol::Cm20 => self.cm20(session, set),
            _ => Err(ClientError::BadInput(format!(
                "{protocol} is not supported by this client"
            ))),
        }
    }

    fn round_trip(&mut self, route: Route, id: &str, request: Vec<u8>) -> Result<Vec<u8>> {
        self.stats.round_trips += 1;
        let t = self.enter(Phase::RoundTrip)?;
        self.stats.protocol_bytes_sent += request.len() as u64;
        let response = self.post_binary(route, id, request)?;
        self.stats.protocol_bytes_received += response.len() as u64;
        self.leave(Phase::RoundTrip, t);
        Ok(response)
    }

    fn dh(&mut self, session: &SessionCreated, set: ItemSet) -> Result<(MatchOutput, LabelSource)> {
        let threads = self.client.config.threads;
        let t = self.enter(Phase::ClientStart)?;
        let (mut client, query) = DhClient::start(set, session.epoch, threads, self.rng()?)?;
        self.leave(Phase::ClientStart, t);
        let evaluation = self.round_trip(Route::DhQuery, &session.session_id, query)?;
        let t = self.enter(Phase::ClientFinalize)?;
        client.handle(&evaluation)?;
        self.leave(Phase::ClientFinalize, t);
        let t = self.enter(Phase::EncodedSet)?;
        let encoded = self.encoded_set(session)?;
        self.leave(Phase::EncodedSet, t);
        let t = self.enter(Phase::ClientFinish)?;
        client.use_encoded_set(encoded)?;
        let (output, outputs) = client.finish_with_outputs()?;
        self.leave(Phase::ClientFinish, t);
        Ok((output, LabelSource::Outputs(outputs)))
    }

    /// The encoded registry for the session: from the cache if its ETag is the one the
    /// session names, otherwise downloaded conditionally (a 304 confirms the cached one).
    /// A new ETag (an import, a key rotation) therefore always means a fresh download.
    fn encoded_set(&mut self, session: &SessionCreated) -> Result<EncodedSet> {
        let cache = self.client.cache.clone();
        let base = self.client.base.clone();
        // Each set is decoded once. A stored set that no longer decodes (a damaged file)
        // counts as absent: it is downloaded again and replaced, instead of failing every
        // run until the ETag moves.
        let cached = cache.load(&base).and_then(|c| {
            let set = EncodedSet::from_bytes(&c.bytes).ok()?;
            Some((c.etag, c.bytes.len(), set))
        });
        let (set, len) = match cached {
            Some((etag, len, set)) if etag == session.encoded_set_etag => {
                self.stats.set_from_cache = true;
                (set, len)
            }
            cached => {
                // The set of the session's epoch: right after a key rotation the server
                // still serves the previous epoch's set to that epoch's sessions.
                let mut extra = vec![(
                    psi_http::EPOCH_HEADER.to_string(),
                    session.epoch.to_string(),
                )];
                if let Some((etag, ..)) = &cached {
                    extra.push(("if-none-match".to_string(), etag.clone()));
                }
                let r = self.send(Route::DhEncodedSet, "", Vec::new(), None, extra)?;
                if r.status == 304 {
                    self.stats.set_from_cache = true;
                    let (_, len, set) = cached.ok_or_else(|| {
                        ClientError::BadResponse("304 for a set not in the cache".into())
                    })?;
                    (set, len)
                } else {
                    self.stats.set_bytes_downloaded = r.body.len() as u64;
                    // Decoded before it is stored: a malformed set is never cached.
                    let set = EncodedSet::from_bytes(&r.body)?;
                    if let Some(etag) = r.header("etag") {
                        let stored = CachedSet {
                            etag: etag.to_string(),
                            bytes: r.body,
                        };
                        // A cache that cannot store costs the next run a download, no more.
                        let _ = cache.store(&base, &stored);
                    }
                    let len = set.encoded_len();
                    (set, len)
                }
            }
        };
        self.stats.set_bytes = len as u64;
        self.stats.truncation_bits = set.truncation_bits;
        Ok(set)
    }

    fn ot(&mut self, session: &SessionCreated, set: ItemSet) -> Result<(MatchOutput, LabelSource)> {
        let config = OtConfig::new(self.client.config.threads)
            .with_max_request_bytes(session.max_body_bytes);
        let t = self.enter(Phase::ClientStart)?;
        let (mut client, request) = OtClient::start(set, config, self.rng()?)?;
        self.leave(Phase::ClientStart, t);
        self.chunked_rounds(session, Route::OtRound, "OT", &mut client, request)
    }

    /// CM20-PSI: hello, then one round per matrix chunk (sized to the server's body limit),
    /// the outputs answering the last. Labels follow as for OT-PSI (an OPRF query over the
    /// matches).
    fn cm20(
        &mut self,
        session: &SessionCreated,
        set: ItemSet,
    ) -> Result<(MatchOutput, LabelSource)> {
        use psi_core::cm20::{Cm20Client, Cm20Config};
        let config = Cm20Config::for_body_limit(self.client.config.threads, session.max_body_bytes);
        let t = self.enter(Phase::ClientStart)?;
        let (mut client, request) = Cm20Client::start(set, config, self.rng()?)?;
        self.leave(Phase::ClientStart, t);
        self.chunked_rounds(session, Route::Cm20Round, "CM20", &mut client, request)
    }

    /// The rounds of OT-PSI and CM20-PSI (psi_core::chunked): each request to `route`, its
    /// response to the client's `handle`, until the outputs; at most `MAX_OT_ROUNDS`.
    /// While a request is out, a helper thread (one for the run, so its worker pool is built
    /// once) has the client build what it can of its next step (`work_ahead`: the next
    /// chunk, or its side of the matching), so that work overlaps the network and the
    /// server's; the requests are the same either way. If the helper cannot be started, or
    /// working ahead fails, the run goes on without it (`handle` then does that work).
    fn chunked_rounds<C: ChunkedClient>(
        &mut self,
        session: &SessionCreated,
        route: Route,
        name: &str,
        client: &mut C,
        mut request: Vec<u8>,
    ) -> Result<(MatchOutput, LabelSource)> {
        std::thread::scope(|s| {
            let (to_helper, jobs) = std::sync::mpsc::channel::<&mut C>();
            let (done, from_helper) = std::sync::mpsc::channel::<(&mut C, Duration)>();
            let helper = std::thread::Builder::new()
                .name("psi-work-ahead".into())
                .spawn_scoped(s, move || {
                    for c in jobs {
                        let t = Instant::now();
                        // A failure leaves the client as it was: `handle` does the work.
                        let _ = c.work_ahead();
                        if done.send((c, t.elapsed())).is_err() {
                            return;
                        }
                    }
                });
            let ahead_on = helper.is_ok();
            let mut client = client;
            let mut first = true;
            loop {
                if self.stats.round_trips >= MAX_OT_ROUNDS {
                    return Err(ClientError::BadResponse(format!("too many {name} rounds")));
                }
                let mut ahead = Duration::ZERO;
                let response = if ahead_on && client.has_work_ahead() {
                    match to_helper.send(client) {
                        Ok(()) => {
                            let response = self.round_trip(route, &session.session_id, request);
                            // The helper only ends early by panicking, which the scope
                            // passes on when it ends.
                            let Ok((c, d)) = from_helper.recv() else {
                                return Err(ClientError::BadInput("work-ahead thread".into()));
                            };
                            (client, ahead) = (c, d);
                            response
                        }
                        Err(std::sync::mpsc::SendError(c)) => {
                            client = c;
                            self.round_trip(route, &session.session_id, request)
                        }
                    }
                } else {
                    self.round_trip(route, &session.session_id, request)
                }?;
                let phase = if first {
                    Phase::ClientSetup
                } else {
                    Phase::ClientChunk
                };
                first = false;
                let t = self.enter(phase)?;
                match client.handle(&response)? {
                    ClientStep::Send(next) => {
                        self.leave(phase, t);
                        self.stats.work_ahead += ahead;
                        request = next;
                    }
                    ClientStep::Done(output) => {
                        self.leave(Phase::ClientFinish, t);
                        self.stats.work_ahead += ahead;
                        return Ok((output, LabelSource::Query));
                    }
                }
            }
        })
    }

    /// The label step, run whenever labels are on, matches or not: its requests and their
    /// sizes depend on `n` and the session's layout only (docs/protocol/labels.md §6). A
    /// failure here (say, the hourly budget ran out) costs the labels, not the matches,
    /// which are computed and paid for: it is reported in the result. Cancellation is not
    /// a failure of the step: the run ends with `Cancelled`. Returns the matches, the
    /// failure and the number of matches whose label did not fit the step.
    fn labels(
        &mut self,
        session: &SessionCreated,
        n: usize,
        matches: Vec<psi_core::Match>,
        source: LabelSource,
    ) -> Result<(Vec<Matched>, Option<String>, usize)> {
        let mut out: Vec<Matched> = matches
            .into_iter()
            .map(|mut m| Matched {
                index: m.index,
                // `Match` zeroizes its item on drop: take it out.
                item: std::mem::take(&mut m.item),
                label: None,
            })
            .collect();
        if !self.client.config.fetch_labels {
            return Ok((out, None, 0));
        }
        match self.fetch_labels(session, n, &out, source) {
            Ok((labels, skipped)) => {
                for (m, l) in out.iter_mut().zip(labels) {
                    m.label = l;
                }
                Ok((out, None, skipped))
            }
            Err(ClientError::Cancelled) => Err(ClientError::Cancelled),
            Err(e) => Ok((out, Some(e.to_string()), 0)),
        }
    }

    fn fetch_labels(
        &mut self,
        session: &SessionCreated,
        n: usize,
        matches: &[Matched],
        source: LabelSource,
    ) -> Result<(Vec<Option<String>>, usize)> {
        let t = self.enter(Phase::Labels)?;
        let id = session.session_id.clone();
        let bits = session.label_bucket_bits;
        let (mut client, mut request, mut route) = match source {
            LabelSource::Outputs(outputs) => {
                let (c, r) = LabelClient::from_outputs(outputs, n, bits, self.rng()?)?;
                (c, r, Route::LabelFetch)
            }
            LabelSource::Query => {
                let items: Vec<Vec<u8>> = matches.iter().map(|m| m.item.clone()).collect();
                let threads = self.client.config.threads;
                let (c, r) =
                    LabelClient::start_query(&items, n, session.epoch, bits, threads, self.rng()?)?;
                (c, r, Route::LabelQuery)
            }
        };
        let labels = loop {
            let sent = request.len() as u64;
            let response = self.post_binary(route, &id, request)?;
            self.stats.label_bytes += sent + response.len() as u64;
            match client.handle(&response, self.rng()?)? {
                LabelStep::Send(next) => {
                    request = next;
                    route = Route::LabelFetch;
                }
                LabelStep::Done(labels) => {
                    self.session_complete = true;
                    break labels;
                }
                _ => return Err(ClientError::BadResponse("unknown label step".into())),
            }
        };
        self.leave(Phase::Labels, t);
        Ok((labels, client.skipped()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Retry, RetryCause};
    use crate::transport::{HttpTransport, TransportError};
    use std::sync::Mutex;

    fn http(status: u16, retry_after: Option<u64>) -> ClientError {
        ClientError::Http {
            status,
            code: if status == 429 {
                ErrorCode::RateLimited
            } else {
                ErrorCode::Unknown
            },
            message: String::new(),
            retry_after,
        }
    }

    fn network() -> ClientError {
        TransportError {
            message: "reset".into(),
            timeout: false,
        }
        .into()
    }

    #[test]
    fn retry_waits_back_off_exponentially_with_jitter_and_a_cap() {
        let mid = |e: &ClientError, a| retry_wait(e, a, &mut || 0.5);
        let ms = |m| Some(Duration::from_millis(m));
        // Half fixed, half jitter: 0.75 of the backoff at jitter 0.5.
        assert_eq!(mid(&network(), 0), Some(Duration::from_micros(187_500)));
        assert_eq!(mid(&network(), 1), ms(375));
        assert_eq!(mid(&network(), 2), ms(750));
        assert_eq!(mid(&network(), 4), ms(3000)); // 4 s cap
        assert_eq!(mid(&network(), 40), ms(3000)); // no overflow
        assert_eq!(retry_wait(&network(), 1, &mut || 0.0), ms(250));
        assert_eq!(retry_wait(&network(), 1, &mut || 1.0), ms(500));
        // Retry-After up to 30 s is waited out; longer ends the run.
        assert_eq!(mid(&http(503, Some(2)), 0), ms(2000));
        assert_eq!(mid(&http(503, Some(0)), 2), ms(750));
        assert_eq!(mid(&http(429, Some(30)), 0), ms(30_000));
        assert_eq!(mid(&http(429, Some(31)), 0), None);
        assert_eq!(
            mid(&http(503, None), 0),
            Some(Duration::from_micros(187_500))
        );
        // Not retryable: bad requests, protocol errors, cancellation.
        assert_eq!(mid(&http(400, None), 0), None);
        assert_eq!(mid(&ClientError::Cancelled, 0), None);
        assert_eq!(mid(&ClientError::BadResponse("x".into()), 0), None);
    }

    /// One injected failure, replacing the server's answer to a request.
    #[derive(Clone, Copy, Debug)]
    enum Fault {
        /// 503 with `Retry-After: 0` (a server shedding load).
        Busy,
        /// The connection closed before the body was complete (as `HttpTransport`
        /// reports a body cut short).
        CutShort,
        /// No answer until the request's timeout.
        Stall,
        /// 400: not retryable.
        BadRequest,
    }

    /// Forwards to a real server, replacing the answer to the `at`-th request (0-based)
    /// of the listed kinds with the fault. Counts session creations.
    struct Flaky {
        inner: HttpTransport,
        faults: Mutex<Vec<(usize, Fault)>>,
        seen: Mutex<usize>,
        sessions: Mutex<usize>,
    }

    impl Transport for Flaky {
        fn send(&self, request: Request) -> Result<Response, TransportError> {
            let n = {
                let mut s = self.seen.lock().unwrap();
                *s += 1;
                *s - 1
            };
            if request.url.ends_with("/v1/sessions") {
                *self.sessions.lock().unwrap() += 1;
            }
            let fault = self
                .faults
                .lock()
                .unwrap()
                .iter()
                .find(|(at, _)| *at == n)
                .map(|(_, f)| *f);
            let json = |status: u16, code: &str, extra: &[(&str, &str)]| Response {
                status,
                headers: extra
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                body: format!(r#"{{"error":"{code}","message":"injected"}}"#).into_bytes(),
            };
            match fault {
                None => self.inner.send(request),
                Some(Fault::Busy) => Ok(json(503, "server_busy", &[("retry-after", "0")])),
                Some(Fault::BadRequest) => Ok(json(400, "bad_request", &[])),
                Some(Fault::CutShort) => {
                    // The server did the work; the client never sees the end of it.
                    let _ = self.inner.send(request);
                    Err(TransportError {
                        message: "connection closed before the response body was complete".into(),
                        timeout: false,
                    })
                }
                Some(Fault::Stall) => {
                    std::thread::sleep(request.timeout);
                    Err(TransportError {
                        message: "timeout".into(),
                        timeout: true,
                    })
                }
            }
        }
    }

    fn server() -> psi_server::RunningServer {
        let mut config = psi_server::Config::default();
        config.db = psi_server::Database::memory();
        config.build_threads = 1;
        config.workers = 1;
        let mut store = psi_server::Store::open(std::path::Path::new(":memory:")).unwrap();
        store
            .add_entries([("+14155550123", Some("alice")), ("bob@example.com", None)])
            .unwrap();
        let registry =
            psi_server::Registry::from_store(&mut store, &config, &mut |_, _| {}).unwrap();
        psi_server::RunningServer::start(
            psi_server::AppState::with_registry(config, registry),
            ([127, 0, 0, 1], 0).into(),
        )
        .unwrap()
    }

    fn flaky(
        srv: &psi_server::RunningServer,
        faults: &[(usize, Fault)],
        retries: u32,
    ) -> (Client, Arc<Flaky>) {
        let t = Arc::new(Flaky {
            inner: HttpTransport::new(),
            faults: Mutex::new(faults.to_vec()),
            seen: Mutex::new(0),
            sessions: Mutex::new(0),
        });
        let config = ClientConfig::default()
            .with_threads(psi_core::Threads::ONE)
            .with_timeout(Duration::from_millis(400))
            .with_retries(retries);
        (Client::with_transport(&srv.url(), t.clone(), config), t)
    }

    fn items() -> Vec<Vec<u8>> {
        vec![b"+14155550123".to_vec(), b"carol@example.com".to_vec()]
    }

    fn run(c: &Client, protocol: Protocol) -> Result<MatchReport> {
        c.match_items(items(), protocol, &mut |_| {}, &CancelToken::new())
    }

    #[test]
    fn a_503_a_cut_short_body_and_a_stall_are_retried_with_a_new_session() {
        let srv = server();
        for (protocol, faults) in [
            // DH: request 1 is the query; 0 the session.
            (Protocol::Dh, vec![(0, Fault::Busy), (2, Fault::CutShort)]),
            (Protocol::Dh, vec![(1, Fault::Stall)]),
            // OT: the second round of the first attempt.
            (Protocol::Ot, vec![(2, Fault::CutShort), (5, Fault::Busy)]),
        ] {
            let (c, t) = flaky(&srv, &faults, 2);
            let started = Instant::now();
            let r = run(&c, protocol).unwrap_or_else(|e| panic!("{protocol} {faults:?}: {e}"));
            assert_eq!(r.matches.len(), 1, "{protocol} {faults:?}");
            assert_eq!(r.matches[0].item, b"+14155550123");
            assert_eq!(r.matches[0].label.as_deref(), Some("alice"));
            assert_eq!(*t.sessions.lock().unwrap(), faults.len() + 1, "{faults:?}");
            assert!(started.elapsed() < Duration::from_secs(10));
        }
    }

    #[test]
    fn retries_run_out_with_the_last_typed_error_within_the_bound() {
        let srv = server();
        // Every first request stalls: three attempts of one 400 ms timeout, two waits.
        let (c, t) = flaky(
            &srv,
            &[(0, Fault::Stall), (1, Fault::Stall), (2, Fault::Stall)],
            2,
        );
        let started = Instant::now();
        let e = run(&c, Protocol::Dh).unwrap_err();
        let took = started.elapsed();
        assert!(
            matches!(e, ClientError::Network { timeout: true, .. }),
            "{e:?}"
        );
        assert!(e.is_retryable());
        assert_eq!(*t.sessions.lock().unwrap(), 3);
        // 3 x 400 ms + at most 250 + 500 ms of backoff, with slack for a loaded machine.
        assert!(took >= Duration::from_millis(1200), "{took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
        // With retries off, the first failure is returned.
        let (c, t) = flaky(&srv, &[(0, Fault::Busy)], 0);
        let e = run(&c, Protocol::Dh).unwrap_err();
        assert!(matches!(e, ClientError::Http { status: 503, .. }), "{e:?}");
        assert_eq!(*t.sessions.lock().unwrap(), 1);
    }

    #[test]
    fn each_retry_is_reported_with_its_cause_and_wait_before_the_new_attempt() {
        let srv = server();
        // DH: a 503 on the first session, the query's answer cut short on the second.
        let (c, _) = flaky(&srv, &[(0, Fault::Busy), (2, Fault::CutShort)], 2);
        let mut events = Vec::new();
        let r = c
            .match_items(
                items(),
                Protocol::Dh,
                &mut |p| events.push(p),
                &CancelToken::new(),
            )
            .unwrap();
        assert_eq!(r.matches.len(), 1);
        let retries: Vec<(usize, Retry)> = events
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.retry.map(|r| (i, r)))
            .collect();
        assert_eq!(retries.len(), 2, "{events:?}");
        let (i, first) = retries[0];
        assert_eq!((first.attempt, first.retries), (1, 2));
        assert_eq!(
            first.cause,
            RetryCause::Http {
                status: 503,
                code: ErrorCode::Unknown, // "server_busy" is not an API code
                retry_after: Some(0),
            }
        );
        // Where the attempt failed, then the new attempt from its first phase.
        assert_eq!(events[i].phase, Phase::CreateSession);
        assert_eq!(events[i + 1].phase, Phase::CreateSession);
        assert_eq!(events[i + 1].retry, None);
        // No Retry-After: the backoff with jitter of the first retry, 125..=250 ms.
        assert!(first.wait <= Duration::from_millis(250), "{first:?}");
        let (j, second) = retries[1];
        assert_eq!((second.attempt, second.retries), (2, 2));
        assert_eq!(second.cause, RetryCause::Network { timeout: false });
        assert_eq!(events[j].phase, Phase::RoundTrip);
        assert_eq!(events[j].round, 1);
        assert!(
            (Duration::from_millis(250)..=Duration::from_millis(500)).contains(&second.wait),
            "{second:?}"
        );
        // The text names the attempt, the code and the wait; nothing of the items.
        let text = second.to_string();
        assert!(
            text.starts_with("retry 2 of 2 after network error, waiting "),
            "{text}"
        );
        assert_eq!(first.cause.to_string(), "HTTP 503 (unknown)");
        assert_eq!(RetryCause::Network { timeout: true }.to_string(), "timeout");
        // Every other event enters a phase.
        assert!(events.iter().filter(|p| p.retry.is_none()).count() > 2 * 5);
    }

    #[test]
    fn the_last_errors_cause_is_chained() {
        use std::error::Error as _;
        let srv = server();
        let (c, _) = flaky(
            &srv,
            &[
                (0, Fault::Stall),
                (1, Fault::CutShort),
                (2, Fault::CutShort),
            ],
            2,
        );
        let mut causes = Vec::new();
        let e = c
            .match_items(
                items(),
                Protocol::Dh,
                &mut |p| causes.extend(p.retry.map(|r| r.cause)),
                &CancelToken::new(),
            )
            .unwrap_err();
        assert_eq!(
            causes,
            [
                RetryCause::Network { timeout: true },
                RetryCause::Network { timeout: false }
            ]
        );
        assert!(
            matches!(e, ClientError::Network { timeout: false, .. }),
            "{e:?}"
        );
        let source = e
            .source()
            .expect("a network error has its transport error as source");
        let t = source
            .downcast_ref::<TransportError>()
            .expect("the source is the transport's error");
        assert_eq!(
            t.message,
            "connection closed before the response body was complete"
        );
        assert!(!t.timeout);
        assert_eq!(
            e.to_string(),
            "network error: connection closed before the response body was complete"
        );
        // A protocol error chains psi-core's; a server's answer has no cause below it.
        let p = ClientError::from(psi_core::Error::EpochMismatch {
            expected: 1,
            found: 2,
        });
        assert!(p.source().is_some());
        assert!(http(503, None).source().is_none());
    }

    #[test]
    fn errors_that_are_not_retryable_are_not_retried() {
        let srv = server();
        let (c, t) = flaky(&srv, &[(1, Fault::BadRequest)], 2);
        let e = run(&c, Protocol::Dh).unwrap_err();
        assert!(matches!(e, ClientError::Http { status: 400, .. }), "{e:?}");
        assert_eq!(*t.sessions.lock().unwrap(), 1);
    }

    #[test]
    fn cancelling_during_a_retry_wait_ends_the_run_promptly() {
        let srv = server();
        let t = Arc::new(Flaky {
            inner: HttpTransport::new(),
            faults: Mutex::new(vec![]),
            seen: Mutex::new(0),
            sessions: Mutex::new(0),
        });
        // The server asks for 20 s; the caller cancels after 200 ms.
        struct Slow(Arc<Flaky>);
        impl Transport for Slow {
            fn send(&self, r: Request) -> Result<Response, TransportError> {
                if r.url.ends_with("/v1/sessions") {
                    *self.0.sessions.lock().unwrap() += 1;
                    return Ok(Response {
                        status: 503,
                        headers: vec![("retry-after".into(), "20".into())],
                        body: br#"{"error":"server_busy","message":"x"}"#.to_vec(),
                    });
                }
                self.0.send(r)
            }
        }
        let c = Client::with_transport(
            &srv.url(),
            Arc::new(Slow(t.clone())),
            ClientConfig::default().with_retries(2),
        );
        let cancel = CancelToken::new();
        let c2 = cancel.clone();
        let canceller = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            c2.cancel();
        });
        let started = Instant::now();
        let e = c
            .match_items(items(), Protocol::Dh, &mut |_| {}, &cancel)
            .unwrap_err();
        canceller.join().unwrap();
        assert!(matches!(e, ClientError::Cancelled), "{e:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(*t.sessions.lock().unwrap(), 1);
    }
}
