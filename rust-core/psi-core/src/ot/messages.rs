//! OT-PSI wire messages (protocol id 0x02), byte by byte in `docs/protocol/ot-psi.md`.
//!
//! All integers are big-endian. Every decoder checks exact lengths and hard limits and
//! returns a [`DecodeError`]; none panics on any input.

use crate::chunked::{self, put_base_ot, read_base_ot};
use crate::error::DecodeError;
use crate::lanes;
use crate::ote::base_ot::{BASE_OTS, RECEIVER_MSG_LEN};
use crate::ote::iknp::U_LEN;
use crate::ote::prc::CODE_BYTES;
use crate::protocol::Protocol;
use crate::wire::{self, Reader, check_limit};

/// Message types (byte 4 of the frame header): hello, setup, matrix chunk (rows of the
/// OT-extension matrix), chunk ack, outputs (three shuffled lists).
pub use crate::chunked::message_type;

/// The parameter suite byte: κ = 128, σ = 40, 128 MR19 base OTs over ristretto255, IKNP to
/// 512 OTs, KKRT16 with a 512-bit AES-128 code, 3-way Cuckoo hashing, SHA-256.
pub const SUITE: u8 = 0x01;
/// Suite [`SUITE`] with label lanes (ADR 0053): a hello of this suite asks for them; a setup
/// of this suite grants them (and ends with the lane width `Λ`), and the outputs are then
/// [`LABELLED_OUTPUTS`], each value followed by its entry's padded label.
pub const SUITE_LANES: u8 = lanes::SUITE_LANES;
/// The outputs message with label lanes (suite [`SUITE_LANES`]).
pub const LABELLED_OUTPUTS: u8 = message_type::LABELLED_OUTPUTS;
/// Most items either side may have (2^24).
pub const MAX_ITEMS: u32 = 1 << 24;
/// Most Cuckoo bins a client may ask for (2^25).
pub const MAX_BINS: u32 = 1 << 25;
/// Most matrix rows in one chunk (2^20 rows = 64 MiB).
pub const MAX_CHUNK_ROWS: u32 = 1 << 20;
/// Bytes of a matrix chunk's fixed fields (row offset, row count), before its rows.
pub const CHUNK_FIELDS_LEN: usize = 8;

/// Shortest and longest OPRF value the protocol sends, in bytes.
pub const MIN_OUT_LEN: u8 = 5;
/// See [`MIN_OUT_LEN`].
pub const MAX_OUT_LEN: u8 = 16;

/// Highest table size a server accepts for `n` client items: exactly the default
/// [`super::table_size`]`(n)`, never above [`MAX_BINS`]. One owner: the client's default
/// table and the server's cap are the same function, so a client cannot ask for more bins
/// than the default table has. Each bin is one OPRF evaluation a (malicious) client can
/// direct at any input, so this is also what a server charges an OT-PSI session of `n`
/// items (`docs/api.md`, "Limits"). A client may use fewer bins (its own risk of a Cuckoo
/// failure), never more.
pub fn max_bins_for(client_items: u32) -> u32 {
    (super::cuckoo::table_size(client_items as usize) as u64).min(MAX_BINS as u64) as u32
}

/// A decoded message.
pub(crate) type Message<'a> = chunked::Message<Hello, Setup, Chunk<'a>, Ack, Outputs<'a>>;

/// Decodes any OT-PSI message.
pub(crate) fn decode(bytes: &[u8]) -> Result<Message<'_>, DecodeError> {
    wire::decode_with(bytes, Protocol::Ot, |t, r| {
        Ok(match t {
            message_type::HELLO => Message::Hello(Hello::read(r)?),
            message_type::SETUP => Message::Setup(Setup::read(r)?),
            message_type::MATRIX_CHUNK => Message::Chunk(Chunk::read(r)?),
            message_type::CHUNK_ACK => Message::Ack(Ack { next_row: r.u32()? }),
            message_type::OUTPUTS => Message::Outputs(Outputs::read(r, false)?),
            LABELLED_OUTPUTS => Message::Outputs(Outputs::read(r, true)?),
            t => return Err(DecodeError::UnknownMessageType(t)),
        })
    })
}

/// `LimitExceeded` if a u32 field is above its limit.
fn limit(what: &'static str, value: u32, limit: u32) -> Result<(), DecodeError> {
    check_limit(what, value.into(), limit.into())
}

/// Message 0x01.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hello {
    pub(crate) client_nonce: [u8; 32],
    pub(crate) client_items: u32,
    pub(crate) bins: u32,
    pub(crate) base_ot: Vec<[u8; RECEIVER_MSG_LEN]>,
    /// Suite [`SUITE_LANES`]: the client asks for label lanes.
    pub(crate) lanes: bool,
}

/// Body length of a hello message.
pub(crate) const HELLO_BODY_LEN: usize = 1 + 32 + 4 + 4 + chunked::BASE_OT_FIELD_LEN;
/// Offsets in a whole hello (frame header included), for drivers that send or receive it in
/// parts: the client nonce, and the first base-OT message (the messages are the hello's tail).
pub(crate) const HELLO_NONCE_AT: usize = wire::HEADER_LEN + 1;
/// See [`HELLO_NONCE_AT`].
pub(crate) const HELLO_OTS_AT: usize =
    wire::HEADER_LEN + HELLO_BODY_LEN - BASE_OTS * RECEIVER_MSG_LEN;

impl Hello {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = wire::begin(Protocol::Ot, message_type::HELLO, HELLO_BODY_LEN);
        out.push(if self.lanes { SUITE_LANES } else { SUITE });
        out.extend_from_slice(&self.client_nonce);
        out.extend_from_slice(&self.client_items.to_be_bytes());
        out.extend_from_slice(&self.bins.to_be_bytes());
        put_base_ot(&mut out, &self.base_ot);
        wire::finish(out)
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let lanes = lanes::read_suite(r, SUITE)?;
        let client_nonce = r.array()?;
        let client_items = r.u32()?;
        limit("client items", client_items, MAX_ITEMS)?;
        let bins = r.u32()?;
        limit("bins", bins, max_bins_for(client_items))?;
        if bins < 3 || bins < client_items {
            return Err(DecodeError::InvalidParameter { what: "bins" });
        }
        let base_ot = read_base_ot(r)?;
        Ok(Hello {
            client_nonce,
            client_items,
            bins,
            base_ot,
            lanes,
        })
    }
}

/// Message 0x02.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Setup {
    pub(crate) server_nonce: [u8; 32],
    pub(crate) server_items: u32,
    pub(crate) out_len: u8,
    pub(crate) sender_point: [u8; 32],
    pub(crate) iknp_u: Vec<u8>,
    /// Suite [`SUITE_LANES`]: label lanes of `Λ` label bytes (the setup's last byte).
    pub(crate) lane: Option<u8>,
}

/// Body length of a setup message of suite [`SUITE`] (one byte more with lanes).
pub(crate) const SETUP_BODY_LEN: usize = 1 + 32 + 4 + 1 + 32 + U_LEN;
/// Bytes of a whole setup (frame header included) up to and including the sender point
/// `A`, for drivers that send or receive it in parts (the IKNP matrix is the setup's tail).
pub const SETUP_HEAD_LEN: usize = wire::HEADER_LEN + SETUP_BODY_LEN - U_LEN;

impl Setup {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let body = SETUP_BODY_LEN + usize::from(self.lane.is_some());
        let mut out = wire::begin(Protocol::Ot, message_type::SETUP, body);
        out.push(if self.lane.is_some() {
            SUITE_LANES
        } else {
            SUITE
        });
        out.extend_from_slice(&self.server_nonce);
        out.extend_from_slice(&self.server_items.to_be_bytes());
        out.push(self.out_len);
        out.extend_from_slice(&self.sender_point);
        out.extend_from_slice(&self.iknp_u);
        out.extend(self.lane);
        wire::finish(out)
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let lanes = lanes::read_suite(r, SUITE)?;
        let server_nonce = r.array()?;
        let server_items = r.u32()?;
        limit("server items", server_items, MAX_ITEMS)?;
        let out_len = r.u8()?;
        if !(MIN_OUT_LEN..=MAX_OUT_LEN).contains(&out_len) {
            return Err(DecodeError::InvalidParameter {
                what: "output length",
            });
        }
        let sender_point = r.array()?;
        let iknp_u = r.take(U_LEN)?.to_vec();
        let lane = if lanes {
            Some(lanes::read_width(r)?)
        } else {
            None
        };
        Ok(Setup {
            server_nonce,
            server_items,
            out_len,
            sender_point,
            iknp_u,
            lane,
        })
    }
}

/// Message 0x03; `rows` borrows the request bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chunk<'a> {
    pub(crate) row_offset: u32,
    pub(crate) row_count: u32,
    pub(crate) rows: &'a [u8],
}

impl Chunk<'_> {
    /// Starts a chunk message; the caller appends `row_count` rows and calls `wire::finish`.
    pub(crate) fn begin(row_offset: u32, row_count: u32) -> Vec<u8> {
        let body = CHUNK_FIELDS_LEN + row_count as usize * CODE_BYTES;
        let mut out = wire::begin(Protocol::Ot, message_type::MATRIX_CHUNK, body);
        out.extend_from_slice(&row_offset.to_be_bytes());
        out.extend_from_slice(&row_count.to_be_bytes());
        out
    }

    #[cfg(test)]
    pub(crate) fn encode_with(row_offset: u32, rows: &[u8]) -> Vec<u8> {
        let mut out = Self::begin(row_offset, (rows.len() / CODE_BYTES) as u32);
        out.extend_from_slice(rows);
        wire::finish(out)
    }

    fn read<'a>(r: &mut Reader<'a>) -> Result<Chunk<'a>, DecodeError> {
        let row_offset = r.u32()?;
        let row_count = r.u32()?;
        limit("chunk rows", row_count, MAX_CHUNK_ROWS)?;
        if row_count == 0 {
            return Err(DecodeError::InvalidParameter { what: "chunk rows" });
        }
        let need = row_count as usize * CODE_BYTES;
        if r.remaining() != need {
            return Err(DecodeError::LengthMismatch {
                what: "matrix chunk",
                declared: r.remaining() as u64,
                actual: need as u64,
            });
        }
        let rows = r.take(need)?;
        Ok(Chunk {
            row_offset,
            row_count,
            rows,
        })
    }
}

/// Message 0x04.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ack {
    pub(crate) next_row: u32,
}

impl Ack {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = wire::begin(Protocol::Ot, message_type::CHUNK_ACK, 4);
        out.extend_from_slice(&self.next_row.to_be_bytes());
        wire::finish(out)
    }
}

/// Message 0x05, or 0x06 with label lanes; `lists` borrows the response bytes
/// (`3 * server_items * row_len()` bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outputs<'a> {
    pub(crate) out_len: u8,
    /// Message 0x06: `Λ`, each value followed by a lane of `1 + Λ` bytes.
    pub(crate) lane: Option<u8>,
    pub(crate) server_items: u32,
    pub(crate) lists: &'a [u8],
}

/// Bytes of one output row: the value, then its lane if any.
pub(crate) fn row_len(out_len: usize, lane: Option<u8>) -> usize {
    out_len + lane.map_or(0, |w| 1 + w as usize)
}

impl Outputs<'_> {
    /// Starts an outputs message (0x06 with `lane`); the caller appends the three lists and
    /// calls `wire::finish`.
    pub(crate) fn begin(out_len: u8, lane: Option<u8>, server_items: u32) -> Vec<u8> {
        let rows = 3 * server_items as usize * row_len(out_len as usize, lane);
        let (kind, fields) = match lane {
            None => (message_type::OUTPUTS, 5),
            Some(_) => (LABELLED_OUTPUTS, 6),
        };
        let mut out = wire::begin(Protocol::Ot, kind, fields + rows);
        out.push(out_len);
        out.extend(lane);
        out.extend_from_slice(&server_items.to_be_bytes());
        out
    }

    /// Bytes of one row of the lists.
    pub(crate) fn row_len(&self) -> usize {
        row_len(self.out_len as usize, self.lane)
    }

    #[cfg(test)]
    pub(crate) fn encode_with(
        out_len: u8,
        lane: Option<u8>,
        server_items: u32,
        lists: [&[u8]; 3],
    ) -> Vec<u8> {
        let mut out = Self::begin(out_len, lane, server_items);
        for l in lists {
            out.extend_from_slice(l);
        }
        wire::finish(out)
    }

    fn read<'a>(r: &mut Reader<'a>, labelled: bool) -> Result<Outputs<'a>, DecodeError> {
        let out_len = r.u8()?;
        if !(MIN_OUT_LEN..=MAX_OUT_LEN).contains(&out_len) {
            return Err(DecodeError::InvalidParameter {
                what: "output length",
            });
        }
        let lane = if labelled {
            Some(lanes::read_width(r)?)
        } else {
            None
        };
        let server_items = r.u32()?;
        limit("server items", server_items, MAX_ITEMS)?;
        let need = 3 * server_items as usize * row_len(out_len as usize, lane);
        if r.remaining() != need {
            return Err(DecodeError::LengthMismatch {
                what: "server outputs",
                declared: r.remaining() as u64,
                actual: need as u64,
            });
        }
        let lists = r.take(need)?;
        Ok(Outputs {
            out_len,
            lane,
            server_items,
            lists,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lanes::MAX_LANE_LABEL;

    fn hello() -> Hello {
        Hello {
            client_nonce: [1; 32],
            client_items: 10,
            bins: 76, // table_size(10)
            base_ot: vec![[2; RECEIVER_MSG_LEN]; BASE_OTS],
            lanes: false,
        }
    }

    #[test]
    fn round_trips() {
        let h = hello();
        let bytes = h.encode();
        assert_eq!(bytes.len(), wire::HEADER_LEN + HELLO_BODY_LEN);
        match decode(&bytes).unwrap() {
            Message::Hello(d) => assert_eq!(d, h),
            m => panic!("wrong type {}", m.message_type()),
        }
        let s = Setup {
            server_nonce: [3; 32],
            server_items: 7,
            out_len: 9,
            sender_point: [4; 32],
            iknp_u: vec![5; U_LEN],
            lane: None,
        };
        let bytes = s.encode();
        assert_eq!(bytes.len(), wire::HEADER_LEN + SETUP_BODY_LEN);
        assert!(matches!(decode(&bytes).unwrap(), Message::Setup(d) if d == s));
        let rows = vec![6u8; 3 * CODE_BYTES];
        let bytes = Chunk::encode_with(128, &rows);
        assert!(matches!(decode(&bytes).unwrap(),
            Message::Chunk(c) if c.row_offset == 128 && c.row_count == 3 && c.rows == &rows[..]));
        let bytes = Ack { next_row: 5 }.encode();
        assert!(matches!(
            decode(&bytes).unwrap(),
            Message::Ack(Ack { next_row: 5 })
        ));
        let l = [1u8; 10];
        let bytes = Outputs::encode_with(5, None, 2, [&l, &l, &l]);
        assert!(matches!(decode(&bytes).unwrap(), Message::Outputs(o) if o.lists.len() == 30));
    }

    /// Suite 0x02: the hello's suite byte asks, the setup ends with `Λ`, the outputs are
    /// message 0x06 with `Λ` after `L` and rows of `L + 1 + Λ` bytes.
    #[test]
    fn lane_messages_round_trip_and_check_the_width() {
        let mut h = hello();
        h.lanes = true;
        let bytes = h.encode();
        assert_eq!(bytes[wire::HEADER_LEN], SUITE_LANES);
        assert!(matches!(decode(&bytes).unwrap(), Message::Hello(d) if d == h));
        let s = Setup {
            server_nonce: [3; 32],
            server_items: 7,
            out_len: 9,
            sender_point: [4; 32],
            iknp_u: vec![5; U_LEN],
            lane: Some(11),
        };
        let bytes = s.encode();
        assert_eq!(bytes.len(), wire::HEADER_LEN + SETUP_BODY_LEN + 1);
        assert_eq!(bytes[wire::HEADER_LEN], SUITE_LANES);
        assert_eq!(*bytes.last().unwrap(), 11);
        assert!(matches!(decode(&bytes).unwrap(), Message::Setup(d) if d == s));
        for n in 0..bytes.len() {
            assert!(decode(&bytes[..n]).is_err(), "setup prefix {n}");
        }
        let mut wide = bytes.clone();
        *wide.last_mut().unwrap() = MAX_LANE_LABEL + 1;
        assert_eq!(
            decode(&wide).unwrap_err(),
            DecodeError::InvalidParameter {
                what: "label lane width"
            }
        );
        // A plain setup claiming suite 0x02 lacks the width byte.
        let mut plain = Setup { lane: None, ..s }.encode();
        plain[wire::HEADER_LEN] = SUITE_LANES;
        assert!(decode(&plain).is_err());
        let l = [1u8; 2 * (5 + 1 + 3)];
        let bytes = Outputs::encode_with(5, Some(3), 2, [&l, &l, &l]);
        assert_eq!(bytes[4], LABELLED_OUTPUTS);
        assert_eq!(bytes.len(), wire::HEADER_LEN + 6 + 3 * 2 * 9);
        assert!(matches!(decode(&bytes).unwrap(),
            Message::Outputs(o) if o.lane == Some(3) && o.row_len() == 9 && o.lists.len() == 54));
        for n in 0..bytes.len() {
            assert!(decode(&bytes[..n]).is_err(), "outputs prefix {n}");
        }
        let mut wide = bytes.clone();
        wide[wire::HEADER_LEN + 1] = 16;
        assert!(decode(&wide).is_err());
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = hello().encode();
        for n in 0..bytes.len() {
            assert!(decode(&bytes[..n]).is_err(), "prefix {n}");
        }
    }

    #[test]
    fn bad_fields() {
        let mut bytes = hello().encode();
        bytes[wire::HEADER_LEN] = 9;
        assert_eq!(
            decode(&bytes).unwrap_err(),
            DecodeError::InvalidParameter { what: "suite" }
        );
        let mut h = hello();
        h.bins = 2;
        assert!(matches!(
            decode(&h.encode()),
            Err(DecodeError::InvalidParameter { what: "bins" })
        ));
        h.bins = 77; // one above table_size(10): the cap is the default table, exactly
        assert_eq!(
            decode(&h.encode()).unwrap_err(),
            DecodeError::LimitExceeded {
                what: "bins",
                value: 77,
                limit: 76
            }
        );
        h.bins = 10_000;
        assert!(matches!(
            decode(&h.encode()),
            Err(DecodeError::LimitExceeded { .. })
        ));
        let mut h = hello();
        h.client_items = MAX_ITEMS + 1;
        assert!(matches!(
            decode(&h.encode()),
            Err(DecodeError::LimitExceeded { .. })
        ));
        let mut h = hello();
        h.base_ot.pop();
        assert!(matches!(
            decode(&h.encode()),
            Err(DecodeError::InvalidParameter { .. })
        ));
        // Chunk claiming more rows than it carries.
        let mut bytes = Chunk::encode_with(0, &[0u8; 64]);
        bytes[wire::HEADER_LEN + 7] = 2;
        assert!(matches!(
            decode(&bytes),
            Err(DecodeError::LengthMismatch { .. })
        ));
        let mut bytes = Chunk::encode_with(0, &[0u8; 64]);
        bytes[wire::HEADER_LEN + 4..wire::HEADER_LEN + 8].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            decode(&bytes),
            Err(DecodeError::LimitExceeded { .. })
        ));
        let mut bytes = Ack { next_row: 1 }.encode();
        bytes[4] = 0x77;
        assert_eq!(
            decode(&bytes).unwrap_err(),
            DecodeError::UnknownMessageType(0x77)
        );
        let bytes = Outputs::encode_with(4, None, 0, [&[], &[], &[]]);
        assert!(matches!(
            decode(&bytes),
            Err(DecodeError::InvalidParameter { .. })
        ));
    }
}
