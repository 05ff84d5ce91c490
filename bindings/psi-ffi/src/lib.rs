//! # psi-ffi
//!
//! The uniffi bindings of the PSI SDK: [`psi_client`] for Kotlin (JVM, Android) and Swift.
//! This crate is the bridge, not an API: it maps types and threads, and the platform SDKs
//! (`bindings/kotlin`, `ios/`) wrap what it exports in idiomatic APIs. The protocols, the
//! HTTP choreography, the registry cache and contact normalization all live in
//! psi-client and below; nothing here looks at protocol bytes.
//!
//! What it adds:
//! - [`DiscoveryClient`]: a psi-client `Client` whose runs are `async` for the foreign
//!   language. A run executes on its own Rust thread (CPU work never runs on a Kotlin
//!   dispatcher or an HTTP stack's thread); dropping the future (a cancelled coroutine or
//!   Swift task) cancels the run: the in-flight request is abandoned, the run stops at its
//!   next check and deletes its server session.
//! - [`HttpTransport`]: an async trait the platform implements with its HTTP stack
//!   (OkHttp, URLSession). It maps types only; the limits come with each request.
//! - The automatic protocol choice's surface ([`ProtocolChoice`], [`LinkHints`],
//!   [`ChoiceReport`]). Its measurements file, `measurements.json` in the configured
//!   directory, is psi-client's `MeasurementsFile` (shared by the clients of a process that
//!   name the same directory).
//! - [`native_http_transport`]: psi-client's own ureq transport behind [`HttpTransport`],
//!   opt-in for the desktop JVM (feature `native-http`; other builds export it but fail).
//! - Group overlap ([`GroupSession`], from [`DiscoveryClient::group_create`] and
//!   [`DiscoveryClient::group_join`]): which contacts every party of a group of 2 to 16
//!   holds (IOP18 multiparty PSI over the server's relay, docs/protocol/group-psi.md),
//!   with [`GroupResult`] and its failures as [`GroupError`].
//! - [`PsiError`]: one error whose variants say what the app can do. Panics (a rayon worker
//!   included) are caught at the boundary and become [`PsiError::Internal`].
//!
//! Threading: runs block their own thread on the foreign future; the foreign side must
//! not block waiting for the run on the thread that completes its HTTP calls (OkHttp's
//! `enqueue` and URLSession's delegate queue satisfy this).

#![warn(missing_docs)]

uniffi::setup_scaffolding!();

mod body;
mod cancel;
mod choice;
mod client;
mod config;
mod error;
mod group;
mod job;
mod native;
mod protocol;
mod report;
mod transport;

pub use cancel::CancelHandle;
pub use choice::{
    ChoiceReport, ChoiceWorkload, InputSource, LinkEstimate, LinkHints, Policy, Prediction,
    ProtocolChoice, UnitCosts,
};
pub use client::{DiscoveryClient, ProgressListener, live_clients};
pub use config::{DiscoveryConfig, default_discovery_config, preload};
pub use error::{GroupError, GroupFailure, PsiError, ServerErrorCode};
pub use group::{
    GroupMatch, GroupResult, GroupRunOptions, GroupSession, GroupStats, default_group_run_options,
};
pub use native::{has_native_http_transport, native_http_transport};
pub use protocol::Protocol;
pub use report::{
    ContactMatch, ContactReport, LabelStatus, Phase, PhaseTime, ProgressEvent, RejectReason,
    RejectedContact, RunStats, ServerHealth,
};
pub use transport::{
    HttpHeader, HttpMethod, HttpRequest, HttpResponse, HttpTransport, TransportError,
    max_error_body_bytes,
};
