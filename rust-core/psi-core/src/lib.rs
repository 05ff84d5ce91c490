//! # psi-core
//!
//! Sans-IO private set intersection protocols for contact discovery. Nothing in this
//! crate opens a socket, reads a clock or picks its own randomness: every protocol is a
//! state machine that takes bytes and returns bytes, with the RNG passed in. Drivers
//! (the CLI, the HTTP server, the platform SDKs) move the bytes.
//!
//! Protocols:
//! - [`dh`]: DH-PSI on the RFC 9497 OPRF over ristretto255 (fewest bytes; the server's
//!   encoded set can be cached by clients).
//!
//! Wire framing shared by all protocols is in [`wire`]; the byte-level specification
//! lives in `docs/protocol/`.

// `deny`, not `forbid`: the one exception is the SSE2 bit-transpose kernel call in
// `ot::transpose` (`#[allow(unsafe_code)]`, see its SAFETY comment).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod dh;
pub mod error;
pub mod golomb;
pub mod items;
pub mod oprf;
/// OT-extension PSI (KKRT16 batched OPRF with Cuckoo hashing); see `docs/protocol/ot-psi.md`.
pub mod ot;
pub mod output;
pub mod parallel;
pub mod wire;

pub use error::{DecodeError, Error, Result};
pub use items::ItemSet;
pub use output::{Match, MatchOutput};
pub use parallel::Threads;
