//! How a run's protocol is picked ([`ProtocolChoice`]) and what an automatic choice
//! reports: the pick, its inputs and where each came from ([`ChoiceReport`]).

use super::link::LinkEstimate;
use super::source::{LinkSources, Source};
use psi_core::cost::UnitCosts;
use std::time::Duration;

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
    /// Whether the choice got the server's health from the server (a `GET /v1/health`,
    /// or with the run's session: `health_with_session`) rather than the stored one.
    pub health_requested: bool,
    /// Whether that health came with the run's first session (a first run's session,
    /// opened for DH-PSI before the choice: no request of its own, docs/adr/0054-first-runs.md).
    pub health_with_session: bool,
    /// Requests of the bounded probe made for this choice (0: none; docs/protocol-choice.md,
    /// "Bounded probe").
    pub probe_requests: u32,
    /// Body bytes of the probe, both ways.
    pub probe_bytes: u64,
    /// Time spent choosing (the health, or the first session that brought it; the part of
    /// the calibration not hidden behind it; a probe), included in nothing else.
    pub overhead: Duration,
}
