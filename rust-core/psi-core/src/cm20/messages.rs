//! CM20-PSI wire messages (protocol id 0x03), byte by byte in `docs/protocol/cm20-psi.md`.
//!
//! All integers are big-endian. Every decoder checks exact lengths and hard limits and
//! returns a [`DecodeError`]; none panics on any input.

use super::params::{self, MAX_WIDTH, MIN_HEIGHT};
use super::rot;
use crate::chunked::{self, put_base_ot, read_base_ot};
use crate::error::DecodeError;
use crate::lanes;
use crate::ote::base_ot::RECEIVER_MSG_LEN;
use crate::protocol::Protocol;
use crate::wire::{self, Reader, check_limit as limit};

/// Message types (byte 4 of the frame header): hello (set size, matrix height, base-OT
/// receiver messages), setup (set size, matrix width, base-OT sender point, IKNP
/// matrices), matrix chunk (the PRF key and a run of matrix columns), chunk ack, outputs
/// (the server's OPRF values, sorted and Golomb-Rice coded).
pub use crate::chunked::message_type;

/// The parameter suite byte: λ = 128, σ = 40, d = 128, 128 MR19 base OTs over
/// ristretto255 extended by IKNP, AES-128 for `F`, SHA-256 for `H1` and `H2`.
pub const SUITE: u8 = 0x01;
/// Suite [`SUITE`] with label lanes (ADR 0053, spec §4.7): a hello of this suite asks for
/// them; a setup of this suite grants them (and ends with the lane width `Λ`), and the
/// outputs are then [`LABELLED_OUTPUTS`], the sorted values followed by one padded label
/// per value.
pub const SUITE_LANES: u8 = lanes::SUITE_LANES;
/// The outputs message with label lanes (suite [`SUITE_LANES`]).
pub const LABELLED_OUTPUTS: u8 = message_type::LABELLED_OUTPUTS;
/// Most items either side may have (2^24).
pub const MAX_ITEMS: u32 = 1 << 24;
/// Largest matrix height: 4 times the default for the largest client set.
pub const MAX_HEIGHT: u32 = 1 << 26;
/// Bytes of a matrix chunk's fixed fields (PRF key, first column, column count).
pub const CHUNK_FIELDS_LEN: usize = 16 + 2 + 2;
/// Bytes of the outputs message's fixed fields.
pub const OUTPUTS_FIELDS_LEN: usize = chunked::SORTED_OUTPUTS_FIELDS_LEN;
/// Body length of a hello message.
pub const HELLO_BODY_LEN: usize = 1 + 32 + 4 + 4 + chunked::BASE_OT_FIELD_LEN;
/// Body length of a setup message for width `w` (suite [`SUITE`]; one byte more, `Λ`,
/// with lanes).
pub fn setup_body_len(width: usize) -> usize {
    1 + 32 + 4 + 2 + 1 + 32 + rot::u_len(width)
}

/// The heights a server accepts for `n_c` client items: powers of two from the default
/// [`params::height`]`(n_c)` to four times it (never above [`MAX_HEIGHT`]).
pub fn height_allowed(client_items: u32, height: u32) -> bool {
    let def = params::height(client_items as u64);
    height.is_power_of_two()
        && height >= MIN_HEIGHT
        && height >= def
        && height as u64 <= (def as u64 * 4).min(MAX_HEIGHT as u64)
}

/// A decoded message.
pub(crate) type Message<'a> = chunked::Message<Hello, Setup, Chunk<'a>, Ack, Outputs<'a>>;

/// Decodes any CM20-PSI message.
pub(crate) fn decode(bytes: &[u8]) -> Result<Message<'_>, DecodeError> {
    wire::decode_with(bytes, Protocol::Cm20, |t, r| {
        Ok(match t {
            message_type::HELLO => Message::Hello(Hello::read(r)?),
            message_type::SETUP => Message::Setup(Setup::read(r)?),
            message_type::MATRIX_CHUNK => Message::Chunk(Chunk::read(r)?),
            message_type::CHUNK_ACK => Message::Ack(Ack {
                next_column: r.u16()?,
            }),
            message_type::OUTPUTS => Message::Outputs(Outputs::read(r, MAX_ITEMS, false)?),
            LABELLED_OUTPUTS => Message::Outputs(Outputs::read(r, MAX_ITEMS, true)?),
            t => return Err(DecodeError::UnknownMessageType(t)),
        })
    })
}

/// Checks that `bytes` decode as a CM20-PSI message (for fuzzing and drivers' sanity checks).
pub fn check(bytes: &[u8]) -> Result<u8, DecodeError> {
    decode(bytes).map(|m| m.message_type())
}

/// Message 0x01.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hello {
    pub(crate) client_nonce: [u8; 32],
    pub(crate) client_items: u32,
    pub(crate) height: u32,
    pub(crate) base_ot: Vec<[u8; RECEIVER_MSG_LEN]>,
    /// Suite [`SUITE_LANES`]: the client asks for label lanes.
    pub(crate) lanes: bool,
}

impl Hello {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = wire::begin(Protocol::Cm20, message_type::HELLO, HELLO_BODY_LEN);
        out.push(if self.lanes { SUITE_LANES } else { SUITE });
        out.extend_from_slice(&self.client_nonce);
        out.extend_from_slice(&self.client_items.to_be_bytes());
        out.extend_from_slice(&self.height.to_be_bytes());
        put_base_ot(&mut out, &self.base_ot);
        wire::finish(out)
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let lanes = lanes::read_suite(r, SUITE)?;
        let client_nonce = r.array()?;
        let client_items = r.u32()?;
        limit("client items", client_items as u64, MAX_ITEMS as u64)?;
        let height = r.u32()?;
        limit("matrix height", height as u64, MAX_HEIGHT as u64)?;
        if !height_allowed(client_items, height) {
            return Err(DecodeError::InvalidParameter {
                what: "matrix height",
            });
        }
        let base_ot = read_base_ot(r)?;
        Ok(Hello {
            client_nonce,
            client_items,
            height,
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
    pub(crate) width: u16,
    pub(crate) output_bits: u8,
    pub(crate) sender_point: [u8; 32],
    pub(crate) iknp_u: Vec<u8>,
    /// Suite [`SUITE_LANES`]: label lanes of `Λ` label bytes (the setup's last byte).
    pub(crate) lane: Option<u8>,
}

impl Setup {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let body = setup_body_len(self.width as usize) + usize::from(self.lane.is_some());
        let mut out = wire::begin(Protocol::Cm20, message_type::SETUP, body);
        out.push(if self.lane.is_some() {
            SUITE_LANES
        } else {
            SUITE
        });
        out.extend_from_slice(&self.server_nonce);
        out.extend_from_slice(&self.server_items.to_be_bytes());
        out.extend_from_slice(&self.width.to_be_bytes());
        out.push(self.output_bits);
        out.extend_from_slice(&self.sender_point);
        out.extend_from_slice(&self.iknp_u);
        out.extend(self.lane);
        wire::finish(out)
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let lanes = lanes::read_suite(r, SUITE)?;
        let server_nonce = r.array()?;
        let server_items = r.u32()?;
        limit("server items", server_items as u64, MAX_ITEMS as u64)?;
        let width = r.u16()?;
        limit("matrix width", width as u64, MAX_WIDTH as u64)?;
        if (width as u32) < params::MIN_WEIGHT {
            return Err(DecodeError::InvalidParameter {
                what: "matrix width",
            });
        }
        let output_bits = r.u8()?;
        if !(40..=128).contains(&output_bits) {
            return Err(DecodeError::InvalidParameter {
                what: "output bits",
            });
        }
        let sender_point = r.array()?;
        let iknp_u = r.take(rot::u_len(width as usize))?.to_vec();
        let lane = if lanes {
            Some(lanes::read_width(r)?)
        } else {
            None
        };
        Ok(Setup {
            server_nonce,
            server_items,
            width,
            output_bits,
            sender_point,
            iknp_u,
            lane,
        })
    }
}

/// Message 0x03; `columns` borrows the request bytes (`column_count · m / 8` bytes, checked
/// by the server, which knows `m`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chunk<'a> {
    pub(crate) prf_key: [u8; 16],
    pub(crate) first_column: u16,
    pub(crate) column_count: u16,
    pub(crate) columns: &'a [u8],
}

impl Chunk<'_> {
    /// Starts a chunk message; the caller appends the columns and calls `wire::finish`.
    pub(crate) fn begin(prf_key: &[u8; 16], first: u16, count: u16, col_bytes: usize) -> Vec<u8> {
        let body = CHUNK_FIELDS_LEN + count as usize * col_bytes;
        let mut out = wire::begin(Protocol::Cm20, message_type::MATRIX_CHUNK, body);
        out.extend_from_slice(prf_key);
        out.extend_from_slice(&first.to_be_bytes());
        out.extend_from_slice(&count.to_be_bytes());
        out
    }

    fn read<'a>(r: &mut Reader<'a>) -> Result<Chunk<'a>, DecodeError> {
        let prf_key = r.array()?;
        let first_column = r.u16()?;
        let column_count = r.u16()?;
        limit("chunk columns", column_count as u64, MAX_WIDTH as u64)?;
        if column_count == 0 {
            return Err(DecodeError::InvalidParameter {
                what: "chunk columns",
            });
        }
        let n = r.remaining();
        if !n.is_multiple_of(column_count as usize) {
            return Err(DecodeError::LengthMismatch {
                what: "matrix chunk",
                declared: n as u64,
                actual: column_count as u64,
            });
        }
        let columns = r.take(n)?;
        Ok(Chunk {
            prf_key,
            first_column,
            column_count,
            columns,
        })
    }
}

/// Message 0x04.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ack {
    pub(crate) next_column: u16,
}

impl Ack {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = wire::begin(Protocol::Cm20, message_type::CHUNK_ACK, 2);
        out.extend_from_slice(&self.next_column.to_be_bytes());
        wire::finish(out)
    }
}

/// Message 0x05, or 0x06 with label lanes ([`chunked::SortedOutputs`], a layout GBF-PSI's
/// outputs share without lanes).
pub(crate) type Outputs<'a> = chunked::SortedOutputs<'a>;
