//! The client driver: the HTTP choreography of a run (docs/api.md, "Flow"). The only
//! place that knows which requests a protocol makes; the protocols themselves are
//! psi-core's state machines. This facade holds [`Client`]'s runs (`health`,
//! `match_items` and its retry loop, one attempt); the modules below own one concept each:
//! the client value (`client`), the URL rule (`urls`), the retry policy (`retry`), the
//! automatic choice (`choice`), a run's state (`run`), its requests (`http`, `session`,
//! `probe`), the protocols' steps (`runs`) and the label step (`labels`).

mod choice;
mod client;
mod http;
mod labels;
mod probe;
mod retry;
mod run;
mod runs;
mod session;
mod urls;

pub use client::Client;

use crate::cancel::CancelToken;
use crate::error::{ClientError, Result};
use crate::measure::{LinkEstimate, ProtocolChoice};
use crate::report::{MatchReport, Progress};
use psi_core::{ItemSet, Phase, Protocol};
use psi_http::ErrorCode;
use retry::{jitter, retry_wait, wait_unless_cancelled};
use run::Run;
use std::time::Instant;

impl Client {
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
    /// new session, up to [`ClientConfig::retries`](crate::ClientConfig::retries) times, after an exponential backoff
    /// with jitter (250 ms doubling, at most 4 s) or the server's `Retry-After` when it is
    /// at most 30 s (a longer one ends the run with that error: the caller decides). The
    /// whole run is restarted, never the failed request: a protocol step changes the
    /// session's state on the server (the DH query, every OT round), so a resent step is
    /// refused as out of phase, and after a server restart or an expiry the session is
    /// gone altogether; a fresh session is always correct. The cost: each attempt is a
    /// new session, charged again against the caller's item budget. Each request stays
    /// bounded by [`ClientConfig::timeout`](crate::ClientConfig::timeout), so a run ends within about
    /// `(retries + 1)` runs' worth of timeouts plus the waits, and within
    /// [`ClientConfig::deadline`](crate::ClientConfig::deadline) when one is set (each request's
    /// timeout is cut to what is left of it, and no attempt starts after it). The automatic
    /// choice's requests are part of the first attempt and retried the same way.
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
        // A fixed protocol, or the automatic choice's, made in the first attempt that gets
        // that far (DH-PSI stands in until then).
        let (mut protocol, policy) = match choice {
            ProtocolChoice::Fixed(p) => (p, None),
            ProtocolChoice::Auto(policy) => (Protocol::Dh, Some(policy)),
        };
        let mut report = None;
        let mut attempt = 0;
        let deadline = self.config.deadline.map(|d| Instant::now() + d);
        loop {
            // The attempt's last event: where it was when it failed.
            let mut last = (Phase::CreateSession, 0);
            // The choice is part of the attempt: a failure of its health request is retried
            // like any other request of the run (one retry policy for every request).
            // A first run's choice may open the run's session with it (ADR 0054).
            let mut opened = None;
            let chosen = match policy {
                Some(policy) if report.is_none() => self
                    .choose_within(set.len(), policy, cancel, deadline, true)
                    .map(|(r, o)| {
                        protocol = r.choice.protocol;
                        report = Some(r);
                        opened = o;
                    }),
                _ => Ok(()),
            };
            let result = chosen
                .and_then(|()| {
                    let mut hook = |p: Progress| {
                        last = (p.phase, p.round);
                        progress(p)
                    };
                    self.match_once(set.clone(), protocol, &mut hook, cancel, deadline, opened)
                })
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
                    let Some(wait) = retry_wait(&e, attempt, &mut jitter()) else {
                        return Err(e);
                    };
                    // No attempt starts after the run's deadline.
                    if deadline.is_some_and(|d| Instant::now() + wait >= d) {
                        return Err(e);
                    }
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
                            requests_done: 0,
                            requests_planned: None,
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

    /// One attempt of [`Client::match_items`]: one session, created (or taken over from
    /// the choice that `opened` it) and deleted.
    fn match_once(
        &self,
        set: ItemSet,
        protocol: Protocol,
        progress: &mut dyn FnMut(Progress),
        cancel: &CancelToken,
        deadline: Option<Instant>,
        opened: Option<session::Opened>,
    ) -> Result<MatchReport> {
        let mut run = Run::new(self, cancel, progress);
        run.deadline = deadline;
        let n = set.len();
        let (session, said_no_labels) = match opened {
            Some(o) => run.take_over(o, protocol, n)?,
            None => run.create_session(protocol, n)?,
        };
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
