//! The automatic protocol choice: the server's health, this device's costs and the
//! current network's link estimate (stored, or asked, calibrated, probed), then the
//! cost model's pick.

use super::client::Client;
use super::run::Run;
use crate::cancel::CancelToken;
use crate::error::{ClientError, Result};
use crate::measure::{ChoiceReport, LinkEstimate, Source};
use crate::server_input;
use psi_core::Protocol;
use psi_http::{ErrorCode, Feature};

impl Client {
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
        self.choose_within(n, policy, cancel, None)
    }

    /// [`Client::choose`] whose requests end by `deadline` (a run's,
    /// [`crate::ClientConfig::deadline`]).
    pub(super) fn choose_within(
        &self,
        n: usize,
        policy: psi_core::cost::Policy,
        cancel: &CancelToken,
        deadline: Option<std::time::Instant>,
    ) -> Result<ChoiceReport> {
        let started = self.clock.now();
        let hints = &self.config.link_hints;
        let stored = self.measurements.snapshot();
        let (health, health_requested) = match stored.servers.get(&self.base) {
            Some(h) => (h.clone(), false),
            None => {
                let mut quiet = |_| {};
                let mut run = Run::new(self, cancel, &mut quiet);
                run.deadline = deadline;
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
            // A store written before one of the protocols' own units existed lacks it:
            // calibrate again.
            Some(d) if d.own.is_complete() => (d.units(threads), Source::Measured),
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
            )
            .with_label_lanes(health.label_lane_width);
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
            health_requested,
            probe_requests: probe.0 as u32,
            probe_bytes: probe.1,
            overhead: self.clock.now().saturating_sub(started),
        })
    }
}
