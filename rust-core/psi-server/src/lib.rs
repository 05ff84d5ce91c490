//! # psi-server
//!
//! The reference HTTP server of the PSI SDK (`docs/api.md`). It only moves bytes into
//! and out of psi-core: DH-PSI queries go to a shared, stateless [`psi_core::dh::DhServer`],
//! OT-PSI rounds to one [`psi_core::ot::OtServer`] per session.
//!
//! - Registry: SQLite ([`storage::Store`]); the DH-PSI encoded set is built once per key
//!   epoch (and after changes, from stored per-entry outputs) and served with an ETag.
//! - Limits: body size, client set size, concurrent sessions, items per client per hour
//!   (per bearer token, else per client IP address or IPv6 prefix, behind trusted proxies
//!   taken from their forwarding header, and then also per IPv4 /24, IPv6 /48 and /32 and
//!   under a server-wide ceiling), budgets saved in the database, encoded-set download
//!   bytes per client per hour; optional bearer-token authentication (static tokens, and
//!   tokens issued into the database).
//! - Logs carry counts, sizes, session ids and status codes only: never contact data,
//!   labels or keys.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod accounts;
mod api;
mod caller;
mod config;
mod groups;
mod instance;
mod limits;
mod listen;
mod net;
mod registry;
mod remember;
pub mod sealing;
mod server;
mod sessions;
mod state;
pub mod storage;
mod store_health;
mod sync;
mod tls;

pub use api::{PROBE_REQUEST_FLOOR, router};
pub use config::Config;
pub use groups::{GroupCounts, GroupLimits};
pub use instance::{InstanceName, InvalidInstanceName, MAX_INSTANCE_NAME_LEN};
pub use net::{ClientIpHeader, InvalidIpNet, IpNet};
pub use registry::{Registry, RegistryStats};
pub use server::{RunningServer, serve};
pub use state::AppState;
pub use storage::{Database, ImportCounts, Readiness, Store, StoreError};
pub use tls::{ServerTls, TlsError};
