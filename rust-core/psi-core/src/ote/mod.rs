//! The OT extension that OT-PSI ([`crate::ot`]) and CM20-PSI ([`crate::cm20`]) stand on,
//! and the chunked session skeleton ([`crate::chunked`]) frames: the 128 Masny-Rindal base
//! OTs over ristretto255 (`base_ot`, `docs/adr/0003-ot-psi-base-ot.md`), their IKNP
//! extension (`iknp`), the AES-128/SHA-256 building blocks with KKRT16's pseudorandom
//! code (`prc`), and the bit-matrix transpose (`transpose`).
//!
//! Nothing here knows a protocol's messages or sessions; the byte-level constructions are
//! specified in `docs/protocol/ot-psi.md` ("Constructions") and reused by
//! `docs/protocol/cm20-psi.md`. A protocol of the chunked family builds on these modules
//! and never on another protocol's module.

pub(crate) mod base_ot;
pub(crate) mod iknp;
pub(crate) mod prc;
pub(crate) mod transpose;
