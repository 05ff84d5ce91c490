//! Group PSI wire messages (wire id 0x05), byte by byte in `docs/protocol/group-psi.md`.
//!
//! Every message goes between the leader and one member (the star). Which member a message
//! is from or for is not in its bytes: the leader's state machine is told by its driver (the
//! relay's addressing), a member's has one peer. All integers are big-endian. Every decoder
//! checks exact lengths and hard limits and returns a [`DecodeError`]; none panics.

use super::params::{self, INSTANCE_BITS, MAX_ITEMS, MAX_PARTIES, MIN_PARTIES};
use crate::chunked::{BASE_OT_FIELD_LEN, put_base_ot, read_base_ot, read_suite};
use crate::error::DecodeError;
use crate::ote::base_ot::RECEIVER_MSG_LEN;
use crate::ote::iknp;
use crate::wire::{self, Reader, check_limit as limit};

/// Header byte 3 of every group PSI message. Not a [`crate::Protocol`]: group PSI is not a
/// two-party session of the server (ADR 0050); the id is reserved here and in
/// `docs/protocol/README.md`.
pub const WIRE_ID: u8 = 0x05;

/// Message types (header byte 4).
pub mod message_type {
    /// Member to leader: set size, key-agreement point, base-OT receiver messages.
    pub const HELLO: u8 = 0x01;
    /// Leader to member: parameters, the member's index, base-OT sender point, the roster.
    pub const SETUP: u8 = 0x02;
    /// Leader to member: a run of IKNP instances' matrices (choice bits = `BF_0`).
    pub const MATRIX_CHUNK: u8 = 0x03;
    /// Member to leader: the cell corrections of the same instances.
    pub const CELL_CHUNK: u8 = 0x04;
}

/// The parameter suite: σ = 40, κ = 128, 128 MR19 base OTs over ristretto255 extended by
/// IKNP, ristretto255 key agreement and SHA-256 for the pairwise seeds, AES-128 CTR for the
/// positions and the shares, GBF-PSI's item digests.
pub const SUITE: u8 = 0x01;
/// Bytes of one IKNP instance's matrix (128 columns of 512 bits).
pub const INSTANCE_LEN: usize = iknp::U_LEN;
/// Bytes of a chunk's fixed fields (first instance, instance count).
pub const CHUNK_FIELDS_LEN: usize = 4 + 2;
/// Body length of a hello.
pub const HELLO_BODY_LEN: usize = 1 + 32 + 4 + 32 + BASE_OT_FIELD_LEN;
/// Bytes of one roster entry (a member's nonce and key-agreement point).
pub const ROSTER_ENTRY_LEN: usize = 32 + 32;
/// Body length of a setup before the roster.
pub const SETUP_FIXED_LEN: usize = 1 + 32 + 1 + 1 + 4 + 4 + 1 + 4 + 1 + 32;

/// A decoded message.
#[derive(Debug)]
pub(crate) enum Message<'a> {
    Hello(Hello),
    Setup(Setup),
    Matrix(Chunk<'a>),
    Cells(Chunk<'a>),
}

impl Message<'_> {
    pub(crate) fn message_type(&self) -> u8 {
        match self {
            Message::Hello(_) => message_type::HELLO,
            Message::Setup(_) => message_type::SETUP,
            Message::Matrix(_) => message_type::MATRIX_CHUNK,
            Message::Cells(_) => message_type::CELL_CHUNK,
        }
    }
}

/// Decodes any group PSI message.
pub(crate) fn decode(bytes: &[u8]) -> Result<Message<'_>, DecodeError> {
    wire::decode_with_id(bytes, WIRE_ID, |t, r| {
        Ok(match t {
            message_type::HELLO => Message::Hello(Hello::read(r)?),
            message_type::SETUP => Message::Setup(Setup::read(r)?),
            message_type::MATRIX_CHUNK => Message::Matrix(Chunk::read(r, INSTANCE_LEN)?),
            message_type::CELL_CHUNK => Message::Cells(Chunk::read_cells(r)?),
            t => return Err(DecodeError::UnknownMessageType(t)),
        })
    })
}

/// Checks that `bytes` decode as a group PSI message; returns its type (for fuzzing and
/// drivers' sanity checks).
pub fn check(bytes: &[u8]) -> Result<u8, DecodeError> {
    decode(bytes).map(|m| m.message_type())
}

/// Message 0x01, member to leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hello {
    pub(crate) nonce: [u8; 32],
    pub(crate) items: u32,
    /// The member's key-agreement point `E_j = e_j·G`.
    pub(crate) point: [u8; 32],
    pub(crate) base_ot: Vec<[u8; RECEIVER_MSG_LEN]>,
}

impl Hello {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = wire::begin_id(WIRE_ID, message_type::HELLO, HELLO_BODY_LEN);
        out.push(SUITE);
        out.extend_from_slice(&self.nonce);
        out.extend_from_slice(&self.items.to_be_bytes());
        out.extend_from_slice(&self.point);
        put_base_ot(&mut out, &self.base_ot);
        wire::finish(out)
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        read_suite(r, SUITE)?;
        let nonce = r.array()?;
        let items = r.u32()?;
        limit("member items", items as u64, MAX_ITEMS as u64)?;
        let point = r.array()?;
        let base_ot = read_base_ot(r)?;
        Ok(Hello {
            nonce,
            items,
            point,
            base_ot,
        })
    }
}

/// One member in the roster: its nonce and key-agreement point, in member order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RosterEntry {
    pub(crate) nonce: [u8; 32],
    pub(crate) point: [u8; 32],
}

/// Message 0x02, leader to member `index` (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Setup {
    pub(crate) nonce: [u8; 32],
    pub(crate) parties: u8,
    pub(crate) index: u8,
    pub(crate) leader_items: u32,
    pub(crate) max_items: u32,
    pub(crate) hashes: u8,
    pub(crate) filter_bits: u32,
    pub(crate) cell_bytes: u8,
    /// The leader's base-OT sender point `A_j` for this member.
    pub(crate) sender_point: [u8; 32],
    /// Members `1 .. t - 1`, `t - 1` entries.
    pub(crate) roster: Vec<RosterEntry>,
}

impl Setup {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let body = SETUP_FIXED_LEN + self.roster.len() * ROSTER_ENTRY_LEN;
        let mut out = wire::begin_id(WIRE_ID, message_type::SETUP, body);
        out.push(SUITE);
        out.extend_from_slice(&self.nonce);
        out.push(self.parties);
        out.push(self.index);
        out.extend_from_slice(&self.leader_items.to_be_bytes());
        out.extend_from_slice(&self.max_items.to_be_bytes());
        out.push(self.hashes);
        out.extend_from_slice(&self.filter_bits.to_be_bytes());
        out.push(self.cell_bytes);
        out.extend_from_slice(&self.sender_point);
        for e in &self.roster {
            out.extend_from_slice(&e.nonce);
            out.extend_from_slice(&e.point);
        }
        wire::finish(out)
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        read_suite(r, SUITE)?;
        let nonce = r.array()?;
        let parties = r.u8()?;
        if !(MIN_PARTIES..=MAX_PARTIES).contains(&parties) {
            return Err(DecodeError::InvalidParameter { what: "parties" });
        }
        let index = r.u8()?;
        if index == 0 || index >= parties {
            return Err(DecodeError::InvalidParameter {
                what: "member index",
            });
        }
        let leader_items = r.u32()?;
        limit("leader items", leader_items as u64, MAX_ITEMS as u64)?;
        let max_items = r.u32()?;
        limit("max items", max_items as u64, MAX_ITEMS as u64)?;
        let hashes = r.u8()?;
        let filter_bits = r.u32()?;
        if filter_bits == 0 || !filter_bits.is_multiple_of(INSTANCE_BITS) {
            return Err(DecodeError::InvalidParameter {
                what: "filter bits",
            });
        }
        let cell_bytes = r.u8()?;
        if !(5..=8).contains(&cell_bytes) {
            return Err(DecodeError::InvalidParameter { what: "cell bytes" });
        }
        let sender_point = r.array()?;
        let members = parties as usize - 1;
        if r.remaining() != members * ROSTER_ENTRY_LEN {
            return Err(DecodeError::LengthMismatch {
                what: "roster",
                declared: (members * ROSTER_ENTRY_LEN) as u64,
                actual: r.remaining() as u64,
            });
        }
        let roster = (0..members)
            .map(|_| {
                Ok(RosterEntry {
                    nonce: r.array()?,
                    point: r.array()?,
                })
            })
            .collect::<Result<_, DecodeError>>()?;
        Ok(Setup {
            nonce,
            parties,
            index,
            leader_items,
            max_items,
            hashes,
            filter_bits,
            cell_bytes,
            sender_point,
            roster,
        })
    }
}

/// Messages 0x03 and 0x04: instances `first_instance ..` of the leader's IKNP matrices
/// (`instance_count · 8192` bytes), or the member's cell corrections for them
/// (`instance_count · 512 · w` bytes); `data` borrows the message bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chunk<'a> {
    pub(crate) first_instance: u32,
    pub(crate) instance_count: u16,
    pub(crate) data: &'a [u8],
}

impl Chunk<'_> {
    /// Starts a chunk of `message` with `count` instances of `per_instance` bytes; the
    /// caller appends the data and calls `wire::finish`.
    pub(crate) fn begin(message: u8, first: u32, count: u16, per_instance: usize) -> Vec<u8> {
        let body = CHUNK_FIELDS_LEN + count as usize * per_instance;
        let mut out = wire::begin_id(WIRE_ID, message, body);
        out.extend_from_slice(&first.to_be_bytes());
        out.extend_from_slice(&count.to_be_bytes());
        out
    }

    fn read<'a>(r: &mut Reader<'a>, per_instance: usize) -> Result<Chunk<'a>, DecodeError> {
        let first_instance = r.u32()?;
        let instance_count = r.u16()?;
        if instance_count == 0 {
            return Err(DecodeError::InvalidParameter {
                what: "chunk instances",
            });
        }
        let len = instance_count as usize * per_instance;
        if r.remaining() != len {
            return Err(DecodeError::LengthMismatch {
                what: "chunk",
                declared: len as u64,
                actual: r.remaining() as u64,
            });
        }
        Ok(Chunk {
            first_instance,
            instance_count,
            data: r.take(len)?,
        })
    }

    /// A cell chunk: its length must be a whole number of cells of 5 to 8 bytes per
    /// instance; the receiver checks `w` against the run's parameters.
    fn read_cells<'a>(r: &mut Reader<'a>) -> Result<Chunk<'a>, DecodeError> {
        let first_instance = r.u32()?;
        let instance_count = r.u16()?;
        if instance_count == 0 {
            return Err(DecodeError::InvalidParameter {
                what: "chunk instances",
            });
        }
        let per = instance_count as usize * INSTANCE_BITS as usize;
        let rest = r.remaining();
        if !rest.is_multiple_of(per) || !(5..=8).contains(&(rest / per)) {
            return Err(DecodeError::LengthMismatch {
                what: "cell chunk",
                declared: (per * 8) as u64,
                actual: rest as u64,
            });
        }
        Ok(Chunk {
            first_instance,
            instance_count,
            data: r.take(rest)?,
        })
    }

    /// Bytes per cell of a cell chunk.
    pub(crate) fn cell_bytes(&self) -> usize {
        self.data.len() / (self.instance_count as usize * INSTANCE_BITS as usize)
    }
}

/// Bytes of a setup for `t` parties.
pub fn setup_len(parties: u8) -> usize {
    wire::HEADER_LEN + SETUP_FIXED_LEN + (parties as usize - 1) * ROSTER_ENTRY_LEN
}

/// Bytes of a matrix chunk of `count` instances.
pub fn matrix_chunk_len(count: usize) -> usize {
    wire::HEADER_LEN + CHUNK_FIELDS_LEN + count * INSTANCE_LEN
}

/// Bytes of a cell chunk of `count` instances for parameters `p`.
pub fn cell_chunk_len(p: &params::Params, count: usize) -> usize {
    wire::HEADER_LEN + CHUNK_FIELDS_LEN + count * INSTANCE_BITS as usize * p.cell_bytes as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(parties: u8) -> Setup {
        Setup {
            nonce: [1; 32],
            parties,
            index: 1,
            leader_items: 10,
            max_items: 20,
            hashes: 45,
            filter_bits: 1024,
            cell_bytes: 6,
            sender_point: [2; 32],
            roster: (0..parties - 1)
                .map(|i| RosterEntry {
                    nonce: [i; 32],
                    point: [i + 100; 32],
                })
                .collect(),
        }
    }

    #[test]
    fn round_trips_and_lengths() {
        let s = setup(5);
        let bytes = s.encode();
        assert_eq!(bytes.len(), setup_len(5));
        let Message::Setup(back) = decode(&bytes).unwrap() else {
            panic!("not a setup")
        };
        assert_eq!(back, s);
        let h = Hello {
            nonce: [3; 32],
            items: 7,
            point: [4; 32],
            base_ot: vec![[5; RECEIVER_MSG_LEN]; crate::ote::base_ot::BASE_OTS],
        };
        let bytes = h.encode();
        assert_eq!(bytes.len(), wire::HEADER_LEN + HELLO_BODY_LEN);
        assert!(matches!(decode(&bytes).unwrap(), Message::Hello(b) if b == h));
        let mut c = Chunk::begin(message_type::CELL_CHUNK, 2, 1, 512 * 6);
        c.resize(c.len() + 512 * 6, 9);
        let c = wire::finish(c);
        assert_eq!(
            c.len(),
            cell_chunk_len(&params::Params::new(2, 1, 1).unwrap(), 1) + 512
        );
        let Message::Cells(back) = decode(&c).unwrap() else {
            panic!("not cells")
        };
        assert_eq!((back.first_instance, back.cell_bytes()), (2, 6));
    }

    /// Every field's range is checked, and every prefix and extension of a valid message
    /// is a typed error.
    #[test]
    fn malformed_messages_are_typed_errors() {
        let good = setup(3).encode();
        for cut in 0..good.len() {
            assert!(decode(&good[..cut]).is_err(), "{cut}");
        }
        let mut long = good.clone();
        long.push(0);
        assert!(decode(&long).is_err());
        // parties (body offset 33), index (34), cell bytes (48).
        for (off, v, what) in [
            (9 + 33, 1u8, "parties"),
            (9 + 33, 17, "parties"),
            (9 + 34, 0, "member index"),
            (9 + 34, 3, "member index"),
            (9 + 48, 4, "cell bytes"),
        ] {
            let mut bad = good.clone();
            bad[off] = v;
            assert_eq!(
                decode(&bad).unwrap_err(),
                DecodeError::InvalidParameter { what },
                "{what}"
            );
        }
        // A roster one entry short for the declared parties.
        let mut bad = setup(3);
        bad.roster.pop();
        assert!(matches!(
            decode(&bad.encode()).unwrap_err(),
            DecodeError::LengthMismatch { what: "roster", .. }
        ));
        // A cell chunk with 4-byte cells.
        let mut c = Chunk::begin(message_type::CELL_CHUNK, 0, 1, 512 * 4);
        c.resize(c.len() + 512 * 4, 0);
        assert!(matches!(
            decode(&wire::finish(c)).unwrap_err(),
            DecodeError::LengthMismatch { .. }
        ));
        assert_eq!(
            decode(&wire::finish(wire::begin_id(WIRE_ID, 9, 0))).unwrap_err(),
            DecodeError::UnknownMessageType(9)
        );
        assert!(crate::Protocol::from_wire_id(WIRE_ID).is_none());
    }
}
