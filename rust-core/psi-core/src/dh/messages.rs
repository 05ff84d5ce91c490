//! DH-PSI messages and their byte encodings (docs/protocol/dh-psi.md).

use super::limits::{MAX_CLIENT_ITEMS, MAX_SERVER_ITEMS};
use crate::error::DecodeError;
use crate::golomb::{self, MAX_RICE_BITS};
use crate::oprf::ELEMENT_LEN;
use crate::protocol::Protocol;
use crate::wire::{self, Reader};

/// Message type bytes of DH-PSI (header byte 4).
pub mod message_type {
    /// Client -> server: blinded elements.
    pub const QUERY: u8 = 0x01;
    /// Server -> client: evaluated elements.
    pub const EVALUATION: u8 = 0x02;
    /// Server -> client: the server's truncated OPRF outputs, Golomb-Rice coded.
    pub const ENCODED_SET: u8 = 0x03;
    /// Server -> client: the short sync tags of a registry version (sync mode,
    /// docs/protocol/sync.md; [`crate::sync::Snapshot`]).
    pub const SYNC_SNAPSHOT: u8 = 0x04;
    /// Server -> client: the short sync tags added and removed between two registry
    /// versions (sync mode; [`crate::sync::Delta`]).
    pub const SYNC_DELTA: u8 = 0x05;
}

/// Size of the header and fixed fields of a query or evaluation message.
pub const ELEMENTS_OVERHEAD: usize = wire::HEADER_LEN + 8;
/// Size of the header and fixed fields of an encoded-set message.
pub const ENCODED_SET_OVERHEAD: usize = wire::HEADER_LEN + 18;

/// A list of ristretto255 elements under a key epoch (the body of a query or an
/// evaluation). Elements are kept as bytes; they are validated when used.
#[derive(Clone, PartialEq, Eq)]
pub struct Elements {
    /// Key epoch the elements belong to.
    pub epoch: u32,
    /// Encoded group elements.
    pub elements: Vec<[u8; ELEMENT_LEN]>,
}

impl std::fmt::Debug for Elements {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elements")
            .field("epoch", &self.epoch)
            .field("count", &self.elements.len())
            .finish()
    }
}

impl Elements {
    /// The QUERY (`message_type::QUERY`) or EVALUATION (`message_type::EVALUATION`)
    /// message carrying these elements.
    pub fn to_bytes(&self, message_type: u8) -> Vec<u8> {
        debug_assert!(matches!(
            message_type,
            message_type::QUERY | message_type::EVALUATION
        ));
        self.encode(message_type)
    }

    /// Decodes a QUERY or EVALUATION message, which must be of `expected_type`
    /// (another DH-PSI message type is [`Error::WrongPhase`](crate::Error::WrongPhase)).
    /// Elements are returned as bytes; they are validated when used.
    pub fn from_bytes(bytes: &[u8], expected_type: u8) -> crate::Result<Self> {
        let frame = wire::parse_frame(bytes, Protocol::Dh)?;
        match frame.message_type {
            t if t == expected_type => Ok(Self::decode_body(frame.body)?),
            t @ (message_type::QUERY | message_type::EVALUATION | message_type::ENCODED_SET) => {
                Err(crate::Error::WrongPhase {
                    phase: "expecting another DH-PSI message",
                    message: t,
                })
            }
            t => Err(DecodeError::UnknownMessageType(t).into()),
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.elements.len()
    }

    /// True if there are no elements.
    pub fn is_empty(&self) -> bool {
        self.elements.is_empty()
    }

    /// Encodes as a message of the given type.
    pub(crate) fn encode(&self, message_type: u8) -> Vec<u8> {
        let mut out = wire::begin(
            Protocol::Dh,
            message_type,
            8 + self.elements.len() * ELEMENT_LEN,
        );
        out.extend_from_slice(&self.epoch.to_be_bytes());
        out.extend_from_slice(&(self.elements.len() as u32).to_be_bytes());
        for e in &self.elements {
            out.extend_from_slice(e);
        }
        wire::finish(out)
    }

    /// Decodes a message body (after the frame header).
    pub(crate) fn decode_body(body: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let epoch = r.u32()?;
        let count = r.u32()? as usize;
        if count > MAX_CLIENT_ITEMS {
            return Err(DecodeError::LimitExceeded {
                what: "element count",
                value: count as u64,
                limit: MAX_CLIENT_ITEMS as u64,
            });
        }
        let need = count * ELEMENT_LEN;
        if r.remaining() != need {
            return Err(DecodeError::LengthMismatch {
                what: "element list",
                declared: r.remaining() as u64,
                actual: need as u64,
            });
        }
        let raw = r.take(need)?;
        let elements = raw
            .chunks_exact(ELEMENT_LEN)
            .map(|c| {
                let mut e = [0u8; ELEMENT_LEN];
                e.copy_from_slice(c);
                e
            })
            .collect();
        r.end()?;
        Ok(Elements { epoch, elements })
    }
}

/// The server's set, encoded once per key epoch and reusable by every client of that
/// epoch: the first `truncation_bits` bits of each item's OPRF output, sorted and
/// Golomb-Rice coded.
#[derive(Clone, PartialEq, Eq)]
pub struct EncodedSet {
    /// Key epoch whose key produced the outputs.
    pub epoch: u32,
    /// Number of values (distinct server items).
    pub element_count: u32,
    /// Largest client set this encoding was sized for (informational; the client checks
    /// `truncation_bits` against its own size).
    pub max_client_items: u32,
    /// L: bits kept of each OPRF output.
    pub truncation_bits: u8,
    /// k: the Rice parameter.
    pub rice_bits: u8,
    /// The coded values.
    pub data: Vec<u8>,
}

impl std::fmt::Debug for EncodedSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncodedSet")
            .field("epoch", &self.epoch)
            .field("element_count", &self.element_count)
            .field("max_client_items", &self.max_client_items)
            .field("truncation_bits", &self.truncation_bits)
            .field("rice_bits", &self.rice_bits)
            .field("data_len", &self.data.len())
            .finish()
    }
}

impl EncodedSet {
    /// The message bytes (message type 0x03). Cache these: they are all a client needs.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = wire::begin(
            Protocol::Dh,
            message_type::ENCODED_SET,
            18 + self.data.len(),
        );
        out.extend_from_slice(&self.epoch.to_be_bytes());
        out.extend_from_slice(&self.element_count.to_be_bytes());
        out.extend_from_slice(&self.max_client_items.to_be_bytes());
        out.push(self.truncation_bits);
        out.push(self.rice_bits);
        out.extend_from_slice(&(self.data.len() as u32).to_be_bytes());
        out.extend_from_slice(&self.data);
        wire::finish(out)
    }

    /// Parses and checks an encoded-set message (not the coded values themselves,
    /// which are checked while they are streamed during matching).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, DecodeError> {
        let frame = wire::parse_frame(bytes, Protocol::Dh)?;
        if frame.message_type != message_type::ENCODED_SET {
            return Err(match frame.message_type {
                message_type::QUERY | message_type::EVALUATION => DecodeError::InvalidParameter {
                    what: "expected an encoded set message",
                },
                t => DecodeError::UnknownMessageType(t),
            });
        }
        Self::decode_body(frame.body)
    }

    pub(crate) fn decode_body(body: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let epoch = r.u32()?;
        let element_count = r.u32()?;
        let max_client_items = r.u32()?;
        let truncation_bits = r.u8()?;
        let rice_bits = r.u8()?;
        let data_len = r.u32()? as usize;
        if element_count as usize > MAX_SERVER_ITEMS {
            return Err(DecodeError::LimitExceeded {
                what: "server element count",
                value: u64::from(element_count),
                limit: MAX_SERVER_ITEMS as u64,
            });
        }
        if max_client_items as usize > MAX_CLIENT_ITEMS {
            return Err(DecodeError::LimitExceeded {
                what: "max client items",
                value: u64::from(max_client_items),
                limit: MAX_CLIENT_ITEMS as u64,
            });
        }
        if truncation_bits == 0 || truncation_bits > 128 {
            return Err(DecodeError::InvalidParameter {
                what: "truncation bits",
            });
        }
        if rice_bits > truncation_bits.min(MAX_RICE_BITS) {
            return Err(DecodeError::InvalidParameter { what: "rice bits" });
        }
        if data_len != r.remaining() {
            return Err(DecodeError::LengthMismatch {
                what: "encoded set data",
                declared: data_len as u64,
                actual: r.remaining() as u64,
            });
        }
        // Each value takes at least k + 1 bits: a cheap bound before any decoding.
        let min_bits = u64::from(element_count) * (u64::from(rice_bits) + 1);
        if (data_len as u64) * 8 < min_bits {
            return Err(DecodeError::MalformedSet(
                "data too short for the element count",
            ));
        }
        let data = r.take(data_len)?.to_vec();
        r.end()?;
        Ok(EncodedSet {
            epoch,
            element_count,
            max_client_items,
            truncation_bits,
            rice_bits,
            data,
        })
    }

    /// Streams the sorted truncated values.
    pub fn values(&self) -> golomb::Decoder<'_> {
        golomb::Decoder::new(
            &self.data,
            u64::from(self.element_count),
            self.truncation_bits,
            self.rice_bits,
        )
    }

    /// Size of the message in bytes.
    pub fn encoded_len(&self) -> usize {
        ENCODED_SET_OVERHEAD + self.data.len()
    }
}
