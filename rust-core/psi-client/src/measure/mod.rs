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
//!
//! One module per concept, all their items public here: `link` (hints, the estimate, a
//! request's timing, the clock), `costs` (the device's and a server's unit costs),
//! `store` (what the caller keeps), `opening` (a first run's session plan), `probe` (the
//! bounded probe and when it is worth making), `choice` (how a run's protocol is picked and what the choice reports) and
//! `source` (where an input came from).

mod choice;
mod costs;
mod link;
mod opening;
mod probe;
mod source;
mod store;

pub use choice::{ChoiceReport, ProtocolChoice};
pub use costs::{
    Calibration, DEVICE_PRIOR_RANGE, DeviceCosts, MAX_SERVER_THREADS, SERVER_COST_RANGE,
    calibrate_device, calibration_matters, server_units,
};
pub use link::{
    Clock, DEFAULT_LINK, LinkEstimate, LinkHints, MIN_RATE_SAMPLE_BYTES, Sample, SystemClock,
    usable_hint,
};
pub use opening::opening_plan;
pub use probe::{PROBE_BYTES, PROBE_RESPONSE_SLACK, prior_uncertainty, probe_worthwhile};
pub use source::{LinkSources, Source};
pub(crate) use store::unix_now;
pub use store::{
    MeasurementStore, Measurements, PROBE_PAUSE_BOUNDS_SECS, PROBE_PAUSE_DEFAULT_SECS,
};
