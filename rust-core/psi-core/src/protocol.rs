//! The protocols this crate implements: one enum for the wire id (header byte 3), the
//! name used by the HTTP API and the command line, and the name shown to people.
//! Adding a protocol adds a variant here; what differs per protocol (its cost terms,
//! what a session is charged) is reached through the methods in `plug.rs`, each
//! answered by the protocol's own module.

use std::fmt;
use std::str::FromStr;

/// A PSI protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
// Not `#[non_exhaustive]`: every per-protocol `match` in the workspace names every protocol,
// so a new one fails to compile until each arm is written (issue 38, ADR 0039's plug).
pub enum Protocol {
    /// DH-PSI over the RFC 9497 OPRF, ristretto255-SHA512: fewest bytes; the server's
    /// encoded set is cacheable (docs/protocol/dh-psi.md).
    Dh = 0x01,
    /// OT-extension PSI (KKRT16 batched OPRF with Cuckoo hashing): less computation,
    /// more bytes (docs/protocol/ot-psi.md).
    Ot = 0x02,
    /// CM20 PSI (Chase-Miao lightweight multi-point OPRF from OT extension): KKRT-like
    /// computation with fewer bytes; semi-honest clients only (docs/protocol/cm20-psi.md).
    Cm20 = 0x03,
    /// GBF-PSI (PSZ14's random garbled Bloom filter over OT extension, after DCW13): the
    /// client's Bloom filter chooses the OTs; more bytes up than the others, no group
    /// operations per item; semi-honest clients (docs/protocol/gbf-psi.md).
    Gbf = 0x04,
}

impl Protocol {
    /// Every protocol, in wire-id order.
    pub const ALL: &'static [Protocol] =
        &[Protocol::Dh, Protocol::Ot, Protocol::Cm20, Protocol::Gbf];

    /// The protocol id in byte 3 of every message header.
    pub fn wire_id(self) -> u8 {
        self as u8
    }

    /// The protocol with wire id `id`.
    pub fn from_wire_id(id: u8) -> Option<Protocol> {
        Protocol::ALL.iter().copied().find(|p| p.wire_id() == id)
    }

    /// The name in the HTTP API (`"dh-psi"`, `"ot-psi"`, `"cm20-psi"`).
    pub fn api_name(self) -> &'static str {
        match self {
            Protocol::Dh => "dh-psi",
            Protocol::Ot => "ot-psi",
            Protocol::Cm20 => "cm20-psi",
            Protocol::Gbf => "gbf-psi",
        }
    }

    /// The protocol with API name `name` (exact match).
    pub fn from_api_name(name: &str) -> Option<Protocol> {
        Protocol::ALL.iter().copied().find(|p| p.api_name() == name)
    }

    /// The short name used on the command line (`"dh"`, `"ot"`, `"cm20"`).
    pub fn short_name(self) -> &'static str {
        match self {
            Protocol::Dh => "dh",
            Protocol::Ot => "ot",
            Protocol::Cm20 => "cm20",
            Protocol::Gbf => "gbf",
        }
    }

    /// True for the protocols that run as client-driven rounds of OT extension (OT-PSI,
    /// CM20-PSI): a server admits them with OT slots and runs their rounds on its OT workers.
    pub fn runs_in_rounds(self) -> bool {
        match self {
            Protocol::Dh => false,
            Protocol::Ot | Protocol::Cm20 | Protocol::Gbf => true,
        }
    }

    /// True for the protocols whose labels need a query round of their own
    /// (docs/protocol/labels.md): the label keys derive from DH-PSI's OPRF outputs, which a
    /// DH-PSI run already holds; after an OT-PSI or CM20-PSI run the client first sends an
    /// OPRF query for its label slots.
    pub fn labels_need_query(self) -> bool {
        match self {
            Protocol::Dh => false,
            Protocol::Ot | Protocol::Cm20 | Protocol::Gbf => true,
        }
    }

    /// A one-line description for people.
    pub fn description(self) -> &'static str {
        match self {
            Protocol::Dh => {
                "DH-PSI (RFC 9497 OPRF, ristretto255-SHA512): fewest bytes, cacheable registry"
            }
            Protocol::Ot => {
                "OT-PSI (KKRT16 OT extension + Cuckoo hashing): less computation, more bytes"
            }
            Protocol::Cm20 => {
                "CM20-PSI (Chase-Miao OPRF from OT extension): OT-like computation, fewer bytes \
                 than OT-PSI; semi-honest clients"
            }
            Protocol::Gbf => {
                "GBF-PSI (PSZ14 random garbled Bloom filter over OT extension): no group \
                 operations per item, most bytes up; semi-honest clients"
            }
        }
    }
}

/// `DH-PSI`, `OT-PSI`, `CM20-PSI`.
impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Dh => "DH-PSI",
            Protocol::Ot => "OT-PSI",
            Protocol::Cm20 => "CM20-PSI",
            Protocol::Gbf => "GBF-PSI",
        })
    }
}

/// The protocol name was not recognised (the text is not echoed: it may be user input).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown protocol (expected one of: dh, ot, cm20, gbf, dh-psi, ot-psi, cm20-psi, gbf-psi)")]
pub struct UnknownProtocol;

/// Parses the short name or the API name, case-insensitively.
impl FromStr for Protocol {
    type Err = UnknownProtocol;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        Protocol::ALL
            .iter()
            .copied()
            .find(|p| {
                s.eq_ignore_ascii_case(p.short_name()) || s.eq_ignore_ascii_case(p.api_name())
            })
            .ok_or(UnknownProtocol)
    }
}

/// Statistical security: a run reports a false match with probability at most 2^-40.
pub const STATISTICAL_SECURITY: u32 = 40;

/// `ceil(log2 n)`, with `ceil(log2 0) = ceil(log2 1) = 0`.
pub fn ceil_log2(n: u64) -> u32 {
    if n <= 1 {
        0
    } else {
        64 - (n - 1).leading_zeros()
    }
}

/// The false-match rule shared by every protocol: the number of bits of each compared
/// pseudorandom value, `40 + ceil(log2 n_c) + ceil(log2 n_s)`. Two unrelated values agree
/// with probability `2^-bits`, so a run of `n_c x n_s` comparisons reports a false match
/// with probability at most `n_c n_s 2^-bits <= 2^-40`.
pub fn false_match_bits(client_items: u64, server_items: u64) -> u32 {
    STATISTICAL_SECURITY + ceil_log2(client_items) + ceil_log2(server_items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for &p in Protocol::ALL {
            assert_eq!(Protocol::from_wire_id(p.wire_id()), Some(p));
            assert_eq!(Protocol::from_api_name(p.api_name()), Some(p));
            assert_eq!(p.short_name().parse::<Protocol>(), Ok(p));
            assert_eq!(p.api_name().to_uppercase().parse::<Protocol>(), Ok(p));
        }
        assert_eq!(Protocol::Dh.wire_id(), 0x01);
        assert_eq!(Protocol::Ot.wire_id(), 0x02);
        assert_eq!(Protocol::from_wire_id(0), None);
        assert_eq!(Protocol::Cm20.wire_id(), 0x03);
        assert_eq!("cm20".parse::<Protocol>(), Ok(Protocol::Cm20));
        assert_eq!("cm20-psi".parse::<Protocol>(), Ok(Protocol::Cm20));
        assert_eq!(Protocol::Gbf.wire_id(), 0x04);
        assert_eq!("gbf".parse::<Protocol>(), Ok(Protocol::Gbf));
        assert_eq!(Protocol::Gbf.to_string(), "GBF-PSI");
        assert_eq!("cm21".parse::<Protocol>(), Err(UnknownProtocol));
        assert_eq!(Protocol::Ot.to_string(), "OT-PSI");
    }

    #[test]
    fn false_match_rule() {
        assert_eq!(ceil_log2(0), 0);
        assert_eq!(ceil_log2(1), 0);
        assert_eq!(ceil_log2(2), 1);
        assert_eq!(ceil_log2(1000), 10);
        assert_eq!(ceil_log2(1024), 10);
        assert_eq!(ceil_log2(1025), 11);
        assert_eq!(false_match_bits(1000, 1_000_000), 70);
        assert_eq!(false_match_bits(1, 1), 40);
    }
}
