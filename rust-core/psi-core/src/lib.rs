//! # psi-core
//!
//! Sans-IO private set intersection protocols for contact discovery. Nothing in this
//! crate opens a socket, reads a clock or picks its own randomness: every protocol is a
//! state machine that takes bytes and returns bytes, with the RNG passed in. Drivers
//! (the CLI, the HTTP server, the client driver behind the platform SDKs) move the bytes.
//!
//! - [`Protocol`]: which protocol (wire id, API name, display name), and the false-match
//!   rule every protocol shares ([`protocol::false_match_bits`]).
//! - [`dh`]: DH-PSI on the RFC 9497 OPRF over ristretto255 (fewest bytes; the server's
//!   encoded set can be cached by clients).
//! - [`ot`]: OT-extension PSI (KKRT16 batched OPRF with Cuckoo hashing; least computation).
//! - [`cm20`]: CM20 PSI (Chase-Miao multi-point OPRF from OT extension; fewer bytes than
//!   OT-PSI at similar computation; semi-honest clients).
//! - [`gbf`]: GBF-PSI (PSZ14's random garbled Bloom filter over OT extension, after
//!   DCW13; semi-honest clients).
//! - [`mpsi`]: group PSI for 2 to 16 parties (IOP18's MPSI-Aug over the star: the
//!   members' garbled Bloom filters, additively shared, through OT extension to the
//!   leader; augmented semi-honest).
//! - `ote` (crate-private): the OT extension OT-PSI and CM20-PSI stand on (base OTs,
//!   IKNP, the pseudorandom code, the bit transpose).
//! - [`chunked`]: the session skeleton OT-PSI and CM20-PSI share (message types, phases,
//!   the client's [`chunked::ClientStep`]).
//! - [`labels`]: labels revealed only to holders of the item, client and server sides.
//! - [`sync`]: sync mode for large registries: short tags downloaded once, deltas
//!   between versions, candidates confirmed by a fixed-shape fetch (ADR 0047 §3).
//! - [`cost`]: the pure cost model that picks a protocol for a workload, link and
//!   devices (docs/protocol-choice.md).
//! - [`Phase`]: the phases of a run, for progress and timings.
//!
//! Wire framing shared by all protocols is in [`wire`]; the byte-level specification
//! lives in `docs/protocol/`. The optional `os-rng` feature adds [`rng`], the OS-seeded
//! generator the drivers use.

// `deny`, not `forbid`: the one exception is the SSE2 bit-transpose kernel call in
// `ote::transpose` (`#[allow(unsafe_code)]`, see its SAFETY comment).
#![deny(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "calibrate")]
pub mod calibrate;
pub mod chunked;
pub mod cm20;
pub mod cost;
mod cost_terms;
pub mod dh;
pub mod error;
pub mod gbf;
pub mod golomb;
pub mod items;
pub mod labels;
pub mod lanes;
pub mod mpsi;
pub mod oprf;
pub mod ot;
mod ote;
pub mod output;
pub mod parallel;
pub mod phase;
mod plug;
pub mod protocol;
#[cfg(feature = "os-rng")]
pub mod rng;
pub mod sync;
pub mod wire;

pub use error::{DecodeError, Error, Result};
pub use items::{ItemList, ItemSet, ItemSetBuilder, Items};
pub use output::{Match, MatchOutput, MatchedOutputs, RunLabels};
pub use parallel::Threads;
pub use phase::Phase;
pub use plug::ServerSet;
pub use protocol::Protocol;
