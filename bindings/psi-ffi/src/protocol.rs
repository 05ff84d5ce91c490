//! The protocol identity as the platforms see it: psi-core's `Protocol`, mirrored because
//! uniffi cannot export the core's `#[non_exhaustive]` enum. Converted here, in one place;
//! the run's records ([`crate::report`]) and the choice ([`crate::choice`]) both import it.

/// A protocol (docs/protocol/).
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Enum)]
pub enum Protocol {
    /// DH-PSI: the fewest bytes; the encoded registry is cached between runs.
    Dh,
    /// OT-PSI: far less computation, more bytes, several round trips.
    Ot,
    /// CM20-PSI: OT-like computation with fewer bytes than OT-PSI; only against servers
    /// that enable it (it trusts the client to follow the protocol).
    Cm20,
    /// GBF-PSI: PSZ14's random garbled Bloom filter; no group operations per item, the
    /// most bytes up; only against servers that enable it (it trusts the client to follow
    /// the protocol).
    Gbf,
}

impl From<Protocol> for psi_client::Protocol {
    fn from(p: Protocol) -> Self {
        match p {
            Protocol::Dh => psi_client::Protocol::Dh,
            Protocol::Ot => psi_client::Protocol::Ot,
            Protocol::Cm20 => psi_client::Protocol::Cm20,
            Protocol::Gbf => psi_client::Protocol::Gbf,
        }
    }
}

impl Protocol {
    /// `None` for a protocol these bindings do not export yet.
    pub(crate) fn from_core(p: psi_client::Protocol) -> Option<Protocol> {
        match p {
            psi_client::Protocol::Dh => Some(Protocol::Dh),
            psi_client::Protocol::Ot => Some(Protocol::Ot),
            psi_client::Protocol::Cm20 => Some(Protocol::Cm20),
            psi_client::Protocol::Gbf => Some(Protocol::Gbf),
        }
    }
}
