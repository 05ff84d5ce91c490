//! GBF-PSI wire messages (protocol id 0x04), byte by byte in `docs/protocol/gbf-psi.md`.
//!
//! All integers are big-endian. Every decoder checks exact lengths and hard limits and
//! returns a [`DecodeError`]; none panics on any input.

use super::params::{self, INSTANCE_BITS};
use crate::chunked::{self, put_base_ot, read_base_ot, read_suite};
use crate::error::DecodeError;
use crate::ote::base_ot::RECEIVER_MSG_LEN;
use crate::ote::iknp;
use crate::protocol::Protocol;
use crate::wire::{self, Reader, check_limit as limit};

/// Message types (byte 4 of the frame header): hello (set size, the client's base-OT
/// sender point), setup (set size, filter parameters, the server's base-OT receiver
/// messages), matrix chunk (a run of IKNP instances' matrices), chunk ack, outputs (the
/// server's values, sorted and Golomb-Rice coded).
pub use crate::chunked::message_type;

/// The parameter suite byte: σ = 40, κ = 128, 128 MR19 base OTs over ristretto255
/// extended by IKNP, AES-128 CTR for the filter positions, SHA-256 for the item digests.
pub const SUITE: u8 = 0x01;
/// Most items either side may have (2^24).
pub const MAX_ITEMS: u32 = 1 << 24;
/// Bytes of one IKNP instance's matrix in a chunk (128 columns of 512 bits).
pub const INSTANCE_LEN: usize = iknp::U_LEN;
/// Bytes of a matrix chunk's fixed fields (first instance, instance count).
pub const CHUNK_FIELDS_LEN: usize = 4 + 2;
/// Bytes of the outputs message's fixed fields.
pub const OUTPUTS_FIELDS_LEN: usize = chunked::SORTED_OUTPUTS_FIELDS_LEN;
/// Body length of a hello message.
pub const HELLO_BODY_LEN: usize = 1 + 32 + 4 + 32;
/// Body length of a setup message.
pub const SETUP_BODY_LEN: usize = 1 + 32 + 4 + 1 + 4 + 1 + chunked::BASE_OT_FIELD_LEN;

/// A decoded message.
pub(crate) type Message<'a> = chunked::Message<Hello, Setup, Chunk<'a>, Ack, Outputs<'a>>;

/// Decodes any GBF-PSI message.
pub(crate) fn decode(bytes: &[u8]) -> Result<Message<'_>, DecodeError> {
    wire::decode_with(bytes, Protocol::Gbf, |t, r| {
        Ok(match t {
            message_type::HELLO => Message::Hello(Hello::read(r)?),
            message_type::SETUP => Message::Setup(Setup::read(r)?),
            message_type::MATRIX_CHUNK => Message::Chunk(Chunk::read(r)?),
            message_type::CHUNK_ACK => Message::Ack(Ack {
                next_instance: r.u32()?,
            }),
            message_type::OUTPUTS => Message::Outputs(Outputs::read(r, MAX_ITEMS, false)?),
            t => return Err(DecodeError::UnknownMessageType(t)),
        })
    })
}

/// Checks that `bytes` decode as a GBF-PSI message (for fuzzing and drivers' sanity checks).
pub fn check(bytes: &[u8]) -> Result<u8, DecodeError> {
    decode(bytes).map(|m| m.message_type())
}

/// Message 0x01.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hello {
    pub(crate) client_nonce: [u8; 32],
    pub(crate) client_items: u32,
    pub(crate) sender_point: [u8; 32],
}

impl Hello {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = wire::begin(Protocol::Gbf, message_type::HELLO, HELLO_BODY_LEN);
        out.push(SUITE);
        out.extend_from_slice(&self.client_nonce);
        out.extend_from_slice(&self.client_items.to_be_bytes());
        out.extend_from_slice(&self.sender_point);
        wire::finish(out)
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        read_suite(r, SUITE)?;
        let client_nonce = r.array()?;
        let client_items = r.u32()?;
        limit("client items", client_items as u64, MAX_ITEMS as u64)?;
        let sender_point = r.array()?;
        Ok(Hello {
            client_nonce,
            client_items,
            sender_point,
        })
    }
}

/// Message 0x02.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Setup {
    pub(crate) server_nonce: [u8; 32],
    pub(crate) server_items: u32,
    pub(crate) hashes: u8,
    pub(crate) filter_bits: u32,
    pub(crate) output_bits: u8,
    pub(crate) base_ot: Vec<[u8; RECEIVER_MSG_LEN]>,
}

impl Setup {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = wire::begin(Protocol::Gbf, message_type::SETUP, SETUP_BODY_LEN);
        out.push(SUITE);
        out.extend_from_slice(&self.server_nonce);
        out.extend_from_slice(&self.server_items.to_be_bytes());
        out.push(self.hashes);
        out.extend_from_slice(&self.filter_bits.to_be_bytes());
        out.push(self.output_bits);
        put_base_ot(&mut out, &self.base_ot);
        wire::finish(out)
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        read_suite(r, SUITE)?;
        let server_nonce = r.array()?;
        let server_items = r.u32()?;
        limit("server items", server_items as u64, MAX_ITEMS as u64)?;
        let hashes = r.u8()?;
        if (hashes as u32) < params::MIN_HASHES {
            return Err(DecodeError::InvalidParameter { what: "hashes" });
        }
        let filter_bits = r.u32()?;
        if filter_bits == 0 || !filter_bits.is_multiple_of(INSTANCE_BITS) {
            return Err(DecodeError::InvalidParameter {
                what: "filter bits",
            });
        }
        let output_bits = r.u8()?;
        if !(40..=128).contains(&output_bits) {
            return Err(DecodeError::InvalidParameter {
                what: "output bits",
            });
        }
        let base_ot = read_base_ot(r)?;
        Ok(Setup {
            server_nonce,
            server_items,
            hashes,
            filter_bits,
            output_bits,
            base_ot,
        })
    }
}

/// Message 0x03: instances `first_instance ..` of the client's IKNP matrices;
/// `matrices` borrows the request bytes (`instance_count · 8192` bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chunk<'a> {
    pub(crate) first_instance: u32,
    pub(crate) instance_count: u16,
    pub(crate) matrices: &'a [u8],
}

impl Chunk<'_> {
    /// Starts a chunk message; the caller appends the matrices and calls `wire::finish`.
    pub(crate) fn begin(first: u32, count: u16) -> Vec<u8> {
        let body = CHUNK_FIELDS_LEN + count as usize * INSTANCE_LEN;
        let mut out = wire::begin(Protocol::Gbf, message_type::MATRIX_CHUNK, body);
        out.extend_from_slice(&first.to_be_bytes());
        out.extend_from_slice(&count.to_be_bytes());
        out
    }

    fn read<'a>(r: &mut Reader<'a>) -> Result<Chunk<'a>, DecodeError> {
        let first_instance = r.u32()?;
        let instance_count = r.u16()?;
        if instance_count == 0 {
            return Err(DecodeError::InvalidParameter {
                what: "chunk instances",
            });
        }
        let len = instance_count as usize * INSTANCE_LEN;
        if r.remaining() != len {
            return Err(DecodeError::LengthMismatch {
                what: "matrix chunk",
                declared: len as u64,
                actual: r.remaining() as u64,
            });
        }
        let matrices = r.take(len)?;
        Ok(Chunk {
            first_instance,
            instance_count,
            matrices,
        })
    }
}

/// Message 0x04.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ack {
    pub(crate) next_instance: u32,
}

impl Ack {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = wire::begin(Protocol::Gbf, message_type::CHUNK_ACK, 4);
        out.extend_from_slice(&self.next_instance.to_be_bytes());
        wire::finish(out)
    }
}

/// Message 0x05, the layout CM20-PSI's outputs have ([`chunked::SortedOutputs`]).
pub(crate) type Outputs<'a> = chunked::SortedOutputs<'a>;
