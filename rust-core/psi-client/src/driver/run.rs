//! One run in progress: its statistics, request timings, response caps, cancellation
//! and progress hooks, and the phases it enters and leaves.

use super::client::Client;
use crate::cancel::CancelToken;
use crate::error::{ClientError, Result};
use crate::measure::Sample;
use crate::report::{Progress, RunStats};
use psi_core::Phase;
use rand_chacha::ChaCha20Rng;
use std::time::Instant;

/// One run in progress: its statistics, cancellation and progress hooks.
pub(super) struct Run<'a> {
    pub(super) client: &'a Client,
    cancel: &'a CancelToken,
    progress: &'a mut dyn FnMut(Progress),
    pub(super) stats: RunStats,
    rng: Option<ChaCha20Rng>,
    /// The timing of each request, for the link estimate.
    pub(super) samples: Vec<Sample>,
    /// The session's final response arrived (the label fetch's, or with labels off the
    /// protocol's last): a server that ends sessions itself has ended it.
    pub(super) session_complete: bool,
    /// A cap on response bodies below the configured one (the probe's: it knows what
    /// it asked for).
    pub(super) max_response: Option<u64>,
    /// The cap on the protocol steps' responses, sized for the session
    /// ([`crate::server_input::step_response_cap`]) once it is created.
    pub(super) step_cap: Option<u64>,
    /// The requests the cost model predicts for the session, once it is created (for the
    /// progress fraction, [`Progress::fraction`]).
    pub(super) requests_planned: Option<usize>,
    /// When the whole run must end ([`crate::ClientConfig::deadline`]): each request's
    /// timeout is cut to what is left.
    pub(super) deadline: Option<std::time::Instant>,
}

impl<'a> Run<'a> {
    pub(super) fn new(
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
            requests_planned: None,
            deadline: None,
        }
    }

    pub(super) fn rng(&mut self) -> Result<&mut ChaCha20Rng> {
        if self.rng.is_none() {
            self.rng =
                Some(psi_core::rng::os_rng().map_err(|e| ClientError::BadInput(e.to_string()))?);
        }
        Ok(self.rng.as_mut().expect("set above"))
    }

    pub(super) fn check(&self) -> Result<()> {
        if self.cancel.is_cancelled() {
            Err(ClientError::Cancelled)
        } else {
            Ok(())
        }
    }

    pub(super) fn enter(&mut self, phase: Phase) -> Result<Instant> {
        self.check()?;
        (self.progress)(Progress {
            phase,
            round: self.stats.round_trips,
            retry: None,
            requests_done: self.stats.requests,
            requests_planned: self.requests_planned,
        });
        Ok(Instant::now())
    }

    pub(super) fn leave(&mut self, phase: Phase, started: Instant) {
        self.stats.add_phase(phase, started.elapsed());
    }
}
