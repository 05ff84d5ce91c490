//! # psi-client
//!
//! The client driver of the PSI SDK: runs psi-core's client state machines against a
//! `psi-server` over HTTP (`docs/api.md`). The CLI (`psi match`) and the platform
//! bindings use it; they plug in their own HTTP stack through [`Transport`] and their
//! own storage through [`SetCache`].
//!
//! ```no_run
//! use psi_client::{CancelToken, Client, ClientConfig, Protocol};
//! let client = Client::new("http://127.0.0.1:8080", ClientConfig::default());
//! let contacts = ["+1 415 555 0123", "alice@example.com", "not a contact"];
//! let report = client.match_contacts(&contacts, Protocol::Dh, &mut |_| {}, &CancelToken::new())?;
//! for m in &report.matches {
//!     println!("row {} label {:?}", m.row, m.label);
//! }
//! for r in &report.rejected {
//!     println!("row {} rejected: {}", r.row, r.reason);
//! }
//! # Ok::<(), psi_client::ClientError>(())
//! ```
//!
//! One run: create a session (naming the protocol and the set size), run the protocol
//! (DH-PSI: one query plus the encoded registry, cached by ETag; OT-PSI: one POST per
//! round), fetch the labels of the matches (DH-PSI: derived from the run's own OPRF
//! outputs, one fetch; OT-PSI: an OPRF query over the matches, then the fetch), delete
//! the session.
//!
//! Modules, one concept each: [`driver`] holds [`Client`] and the HTTP choreography;
//! [`transport`] the [`Transport`] seam and the default [`HttpTransport`]; [`cache`] the
//! [`SetCache`] seam with [`MemoryCache`] and [`FileCache`]; [`cancel`] the
//! [`CancelToken`]; [`contacts`] [`Client::match_contacts`] (raw contacts in, rows out);
//! [`report`] [`MatchReport`], [`RunStats`] and [`Progress`]; [`measure`] the inputs of the
//! automatic protocol choice ([`ProtocolChoice`], [`LinkHints`], [`Measurements`]);
//! [`measurements_file`] the file that keeps them, `measurements.json`
//! ([`MeasurementsFile`]).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cache;
pub mod cancel;
pub mod config;
pub mod contacts;
pub mod driver;
mod error;
pub mod group;
pub mod measure;
pub mod measurements_file;
pub mod report;
pub mod server_input;
pub mod transport;

pub use cache::{CachedSet, FileCache, MemoryCache, SetCache};
pub use cancel::CancelToken;
pub use config::ClientConfig;
pub use contacts::{ContactMatch, ContactReport, Rejected};
pub use driver::Client;
pub use error::ClientError;
pub use measure::{
    ChoiceReport, Clock, DeviceCosts, LinkEstimate, LinkHints, MeasurementStore, Measurements,
    ProtocolChoice, Source,
};
pub use measurements_file::{MeasurementsFile, MeasurementsFileError};
/// Whether the phone-number metadata is loaded (`psi_contacts::metadata_loaded`).
pub use psi_contacts::metadata_loaded as phone_metadata_loaded;
pub use psi_contacts::{Invalid, preload_metadata};
pub use psi_core::cost::{Policy, Prediction, UnitCosts};
pub use psi_core::{Phase, Protocol, Threads};
pub use psi_http::{ErrorCode, Feature, Health, StoreState};
pub use report::{LabelStatus, MatchReport, Matched, Progress, RunStats, SyncReport};
#[cfg(feature = "http")]
pub use transport::HttpTransport;
pub use transport::{Method, Request, Response, Transport, TransportError};
