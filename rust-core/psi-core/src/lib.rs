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

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod dh;
pub mod error;
pub mod golomb;
pub mod items;
pub mod oprf;
pub mod parallel;
pub mod wire;

pub use error::{DecodeError, Error, Result};
pub use items::ItemSet;
pub use parallel::Threads;
