//! The automatic choice: the server's health, this device's costs and the
//! current network's link estimate (stored, or asked, calibrated, probed), then the
//! cost model's pick. A first run asks for the health with its session and calibrates
//! only while the network waits or where the device can change the pick (ADR 0054).

use super::client::Client;
use super::run::Run;
use super::session::Opened;
use crate::cancel::CancelToken;
use crate::error::{ClientError, Result};
use crate::measure::{Calibration, ChoiceReport, LinkEstimate, Source};
use crate::server_input;
use psi_core::Protocol;
use psi_http::{ErrorCode, Feature};

impl Client {
    /// The automatic choice for `n` items: the server's health (stored, or one
    /// request), this device's costs (stored, or a calibration of about 50 ms where they
    /// can change the choice, else the reference machine's), the link estimate of the
    /// current network (stored, or the hints' prior), then `psi_core::cost::choose`.
    pub fn choose(
        &self,
        n: usize,
        policy: psi_core::cost::Policy,
        cancel: &CancelToken,
    ) -> Result<ChoiceReport> {
        self.choose_within(n, policy, cancel, None, false)
            .map(|(r, _)| r)
    }

    /// [`Client::choose`] whose requests end by `deadline` (a run's,
    /// [`crate::ClientConfig::deadline`]). With `open`, a server whose health is not
    /// stored gets the run's session at once, for DH-PSI and asking for the health with
    /// it (one round trip where `GET /v1/health` and `POST /v1/sessions` took two): the
    /// run takes it over or replaces it ([`Run::take_over`]). DH-PSI because it has the
    /// fewest round trips and bytes, every server runs it, and it is the choice where a
    /// round trip weighs most (the slow, far links, docs/adr/0054-first-runs.md).
    pub(super) fn choose_within(
        &self,
        n: usize,
        policy: psi_core::cost::Policy,
        cancel: &CancelToken,
        deadline: Option<std::time::Instant>,
        open: bool,
    ) -> Result<(ChoiceReport, Option<Opened>)> {
        let started = self.clock.now();
        let stored = self.measurements.snapshot();
        // A store written before one of the protocols' own units existed lacks it: that
        // device is calibrated again. The calibration starts before any request, so it
        // runs while the network waits.
        let calibration = match stored.device {
            Some(d) if d.own.is_complete() => None,
            _ => Some(Calibration::start()),
        };
        let mut opened = None;
        let (health, health_requested, health_with_session) = match stored.servers.get(&self.base) {
            Some(h) => (h.clone(), false, false),
            None => {
                let mut quiet = |_| {};
                let mut run = Run::new(self, cancel, &mut quiet);
                run.deadline = deadline;
                let session = if open {
                    let plan = self.opening_plan(n, policy, &stored);
                    match run.open_session(&plan, n) {
                        Ok(s) => Some(s),
                        Err(e) if opening_refused(&e) => None,
                        Err(e) => return Err(e),
                    }
                } else {
                    None
                };
                // The opening request's own counts, for the run that takes it over (a
                // health request after it, from an older server, is the choice's).
                let open_stats = std::mem::take(&mut run.stats);
                let (h, with_session) = match session.as_ref().and_then(|(s, _)| s.health.clone()) {
                    Some(h) => (h, true),
                    None => match run.health() {
                        Ok(h) => (h, false),
                        Err(e) => {
                            if let Some((s, _)) = &session {
                                let _ = run.delete_session(&s.session_id);
                            }
                            return Err(e);
                        }
                    },
                };
                let samples = std::mem::take(&mut run.samples);
                let hints = &self.config.link_hints;
                self.measurements.update(|m| {
                    m.servers.insert(self.base.clone(), h.clone());
                    let e = m
                        .networks
                        .entry(hints.network.clone())
                        .or_insert_with(|| LinkEstimate::from_hints(hints));
                    e.update(&samples);
                });
                opened = session.map(|(mut session, said_no_labels)| {
                    session.health = None;
                    Opened {
                        session,
                        said_no_labels,
                        stats: open_stats,
                    }
                });
                (h, true, with_session)
            }
        };
        let result = self.choose_with(n, policy, cancel, deadline, &health, calibration, started);
        match result {
            Ok(mut report) => {
                report.health_requested = health_requested;
                report.health_with_session = health_with_session;
                Ok((report, opened))
            }
            Err(e) => {
                // The opened session is freed when the choice fails after it.
                if let Some(o) = opened {
                    let mut quiet = |_| {};
                    let mut run = Run::new(self, cancel, &mut quiet);
                    let _ = run.delete_session(&o.session.session_id);
                }
                Err(e)
            }
        }
    }

    /// A first run's session plan ([`crate::measure::opening_plan`]) from what is known
    /// before the server answers: the link (stored for this network, or the hints'
    /// prior), the device (stored, or the reference machine), the reference server.
    fn opening_plan(
        &self,
        n: usize,
        policy: psi_core::cost::Policy,
        stored: &crate::measure::Measurements,
    ) -> Vec<psi_http::PlanStep> {
        let inputs = psi_core::cost::Inputs {
            link: self.link_estimate(stored).0.link(),
            client: self.device_units(stored),
            server: psi_core::cost::UnitCosts::REFERENCE,
        };
        let policy = self.policy(policy);
        crate::measure::opening_plan(n as u64, self.config.fetch_labels, &inputs, policy)
    }

    /// The link estimate of the current network and where it came from: the stored one if
    /// it has samples, else the hints' prior (`Given` when they are usable, else `Default`).
    fn link_estimate(&self, stored: &crate::measure::Measurements) -> (LinkEstimate, Source) {
        let hints = &self.config.link_hints;
        match stored.networks.get(&hints.network) {
            Some(e) if e.rtt_samples + e.up_samples + e.down_samples > 0 => (*e, Source::Measured),
            _ => (LinkEstimate::from_hints(hints), self.prior_source()),
        }
    }

    /// Where the link prior comes from: usable hints, else the default.
    fn prior_source(&self) -> Source {
        if self.config.link_hints.informative() {
            Source::Given
        } else {
            Source::Default
        }
    }

    /// The device's unit costs on the configured threads: the stored calibration if it
    /// has every unit, else the reference machine's (the prior).
    fn device_units(&self, stored: &crate::measure::Measurements) -> psi_core::cost::UnitCosts {
        let threads = self.config.threads.get() as u32;
        stored.device.filter(|d| d.own.is_complete()).map_or(
            psi_core::cost::UnitCosts::REFERENCE.with_threads(threads),
            |d| d.units(threads),
        )
    }

    /// `policy`, or the fewest bytes where the user asked to save data.
    fn policy(&self, policy: psi_core::cost::Policy) -> psi_core::cost::Policy {
        if self.config.link_hints.constrained {
            psi_core::cost::Policy::FewestBytes
        } else {
            policy
        }
    }

    /// The choice once the health is known: the device (stored, or calibrated where it
    /// matters), the link (stored, the hints, or a bounded probe), the model's pick.
    /// Sync mode's terms for the choice when the server serves it and this client uses
    /// it: the bytes this client still owes (0 when its cached set is current, a delta's
    /// or the snapshot's) and the confirmation's layout (docs/protocol/sync.md §6).
    fn sync_terms(&self, health: &psi_http::Health) -> Option<psi_core::cost::SyncTerms> {
        let info = health.sync.as_ref().filter(|_| self.config.sync)?;
        let have = self
            .cache
            .load(&crate::cache::synced_key(&self.base))
            .and_then(|c| psi_core::sync::SyncedSet::from_cache(&c.bytes).ok())
            .filter(|s| s.epoch() == info.epoch && s.width() == info.width)
            .map(|s| s.version());
        Some(psi_core::cost::SyncTerms {
            owed_bytes: info.bytes_owed(have),
            bucket_bits: info.bucket_bits,
            record_bytes: info.record_bytes,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn choose_with(
        &self,
        n: usize,
        policy: psi_core::cost::Policy,
        cancel: &CancelToken,
        deadline: Option<std::time::Instant>,
        health: &psi_http::Health,
        calibration: Option<Calibration>,
        started: std::time::Duration,
    ) -> Result<ChoiceReport> {
        let hints = &self.config.link_hints;
        let stored = self.measurements.snapshot();
        let threads = self.config.threads.get() as u32;
        let (server, server_source) = match crate::measure::server_units(health) {
            Some(u) => (u, Source::Measured),
            None => (psi_core::cost::UnitCosts::REFERENCE, Source::Default),
        };
        let (mut link, mut link_source) = self.link_estimate(&self.measurements.snapshot());
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
            )
            .with_label_lanes(health.label_lane_width)
            .with_sync(self.sync_terms(health));
        let policy = self.policy(policy);
        let served: Vec<Protocol> = health
            .protocols
            .iter()
            .filter_map(|p| Protocol::from_api_name(p))
            .collect();
        // Only protocols whose outputs fit this client's response cap are candidates.
        let served =
            server_input::fitting_protocols(&served, &workload, self.config.max_response_bytes);
        // The device: stored, or (not calibrated yet) the reference machine's costs as
        // the prior, and the calibration started before the health's request waited for
        // only where a device that much slower or faster would change the pick; else it
        // stops, and a later run calibrates where it matters.
        let mut inputs = psi_core::cost::Inputs {
            link: link.link(),
            client: self.device_units(&stored),
            server,
        };
        let device_source = match calibration {
            None => Source::Measured,
            Some(c)
                if crate::measure::calibration_matters(
                    &workload,
                    &inputs,
                    policy,
                    &served,
                    crate::measure::DEVICE_PRIOR_RANGE,
                ) =>
            {
                let d = c.finish();
                self.measurements.update(|m| m.device = Some(d));
                inputs.client = d.units(threads);
                Source::Measured
            }
            Some(c) => {
                c.stop();
                Source::Default
            }
        };
        let device = inputs.client;
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
            let factor = crate::measure::prior_uncertainty(self.prior_source());
            if crate::measure::probe_worthwhile(&workload, &inputs, policy, &served, factor) {
                let mut quiet = |_| {};
                let mut run = Run::new(self, cancel, &mut quiet);
                run.deadline = deadline;
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
            health_requested: true,
            health_with_session: false,
            probe_requests: probe.0 as u32,
            probe_bytes: probe.1,
            overhead: self.clock.now().saturating_sub(started),
        })
    }
}

/// Whether a first run's opening session was refused for something the choice with the
/// server's health may avoid (a server that does not run DH-PSI, or does not understand
/// the request; a 4xx without a JSON body, from a proxy in front of it): the choice then
/// asks `GET /v1/health` as before. Any other error (the caller's token, a budget, a busy
/// server, a 5xx of any body, no answer) is the run's: retried or reported like any
/// request's.
fn opening_refused(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::Http {
            status: 400..=499,
            code: ErrorCode::UnsupportedProtocol | ErrorCode::BadRequest | ErrorCode::Unknown,
            ..
        }
    )
}
