//! The framing shared by every protocol message (docs/protocol/README.md).
//!
//! ```text
//! offset size field
//! 0      2    magic "PS" (0x50 0x53)
//! 2      1    wire version (1)
//! 3      1    protocol id (crate::Protocol::wire_id: 0x01 DH-PSI, 0x02 OT-PSI, 0x03 CM20-PSI,
//!             0x04 GBF-PSI; 0x05 group PSI, crate::mpsi::messages::WIRE_ID)
//! 4      1    message type (per protocol)
//! 5      4    body length, u32 big-endian
//! 9      ...  body
//! ```
//!
//! All integers are big-endian. A message is exactly `9 + body length` bytes:
//! shorter input is `Truncated`, longer is `TrailingBytes`.

use crate::error::DecodeError;
use crate::protocol::Protocol;

/// The two magic bytes every message starts with.
pub const MAGIC: [u8; 2] = *b"PS";
/// The wire version this crate writes and accepts.
pub const VERSION: u8 = 1;
/// Size of the common header in bytes.
pub const HEADER_LEN: usize = 9;
/// Hard limit on any message body (1 GiB); protocols set tighter ones.
pub const MAX_BODY_LEN: usize = 1 << 30;

/// A parsed header and the body it frames.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    /// Header byte 4.
    pub message_type: u8,
    /// The body, exactly as long as the header said.
    pub body: &'a [u8],
}

/// Starts a message: writes the header with a placeholder length.
pub(crate) fn begin(protocol: Protocol, message_type: u8, body_capacity: usize) -> Vec<u8> {
    begin_id(protocol.wire_id(), message_type, body_capacity)
}

/// [`begin`] for a wire id that is not a two-party [`Protocol`] (group PSI, `crate::mpsi`).
pub(crate) fn begin_id(wire_id: u8, message_type: u8, body_capacity: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + body_capacity);
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.push(wire_id);
    out.push(message_type);
    out.extend_from_slice(&[0; 4]);
    out
}

/// Finishes a message started with [`begin`]: fills in the body length.
pub(crate) fn finish(mut out: Vec<u8>) -> Vec<u8> {
    let body_len = out.len() - HEADER_LEN;
    assert!(
        body_len <= MAX_BODY_LEN,
        "encoder produced an oversized body"
    );
    out[5..9].copy_from_slice(&(body_len as u32).to_be_bytes());
    out
}

/// Parses the header, checks magic, version, protocol and exact length.
pub fn parse_frame(bytes: &[u8], protocol: Protocol) -> Result<Frame<'_>, DecodeError> {
    parse_frame_id(bytes, protocol.wire_id())
}

/// [`parse_frame`] for a wire id that is not a two-party [`Protocol`] (group PSI).
pub fn parse_frame_id(bytes: &[u8], wire_id: u8) -> Result<Frame<'_>, DecodeError> {
    if bytes.len() < HEADER_LEN {
        return Err(DecodeError::Truncated {
            needed: HEADER_LEN,
            available: bytes.len(),
        });
    }
    if bytes[0..2] != MAGIC {
        return Err(DecodeError::BadMagic);
    }
    if bytes[2] != VERSION {
        return Err(DecodeError::UnsupportedVersion(bytes[2]));
    }
    if bytes[3] != wire_id {
        return Err(DecodeError::WrongProtocol {
            expected: wire_id,
            found: bytes[3],
        });
    }
    let body_len = u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]) as usize;
    if body_len > MAX_BODY_LEN {
        return Err(DecodeError::LimitExceeded {
            what: "body length",
            value: body_len as u64,
            limit: MAX_BODY_LEN as u64,
        });
    }
    let total = HEADER_LEN + body_len;
    if bytes.len() < total {
        return Err(DecodeError::Truncated {
            needed: total,
            available: bytes.len(),
        });
    }
    if bytes.len() > total {
        return Err(DecodeError::TrailingBytes {
            extra: bytes.len() - total,
        });
    }
    Ok(Frame {
        message_type: bytes[4],
        body: &bytes[HEADER_LEN..],
    })
}

/// Decodes a whole message of `protocol`: parses the frame, hands its message type and
/// a [`Reader`] over the body to `read` (which returns `UnknownMessageType` for a type it
/// does not know), then requires that `read` consumed every body byte.
pub(crate) fn decode_with<'a, T>(
    bytes: &'a [u8],
    protocol: Protocol,
    read: impl FnOnce(u8, &mut Reader<'a>) -> Result<T, DecodeError>,
) -> Result<T, DecodeError> {
    decode_with_id(bytes, protocol.wire_id(), read)
}

/// [`decode_with`] for a wire id that is not a two-party [`Protocol`] (group PSI).
pub(crate) fn decode_with_id<'a, T>(
    bytes: &'a [u8],
    wire_id: u8,
    read: impl FnOnce(u8, &mut Reader<'a>) -> Result<T, DecodeError>,
) -> Result<T, DecodeError> {
    let frame = parse_frame_id(bytes, wire_id)?;
    let mut r = Reader::new(frame.body);
    let msg = read(frame.message_type, &mut r)?;
    r.end()?;
    Ok(msg)
}

/// `LimitExceeded { what, value, limit }` if `value > limit`.
pub(crate) fn check_limit(what: &'static str, value: u64, limit: u64) -> Result<(), DecodeError> {
    if value > limit {
        return Err(DecodeError::LimitExceeded { what, value, limit });
    }
    Ok(())
}

/// A bounds-checked cursor over a message body.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or(DecodeError::Truncated {
                needed: HEADER_LEN.saturating_add(self.pos).saturating_add(n),
                available: HEADER_LEN + self.buf.len(),
            })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    /// The next `N` bytes as an array.
    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        Ok(self.take(N)?.try_into().expect("take returned N bytes"))
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Errors unless every byte was consumed.
    pub(crate) fn end(self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            extra => Err(DecodeError::TrailingBytes { extra }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(body: &[u8]) -> Vec<u8> {
        let mut m = begin(Protocol::Dh, 7, body.len());
        m.extend_from_slice(body);
        finish(m)
    }

    #[test]
    fn frame_round_trip() {
        let m = msg(b"hello");
        assert_eq!(&m[..5], &[b'P', b'S', 1, 1, 7]);
        assert_eq!(&m[5..9], &[0, 0, 0, 5]);
        let f = parse_frame(&m, Protocol::Dh).unwrap();
        assert_eq!(f.message_type, 7);
        assert_eq!(f.body, b"hello");
    }

    #[test]
    fn frame_errors() {
        let m = msg(b"hello");
        assert!(matches!(
            parse_frame(&m[..4], Protocol::Dh),
            Err(DecodeError::Truncated {
                needed: 9,
                available: 4
            })
        ));
        assert!(matches!(
            parse_frame(&m[..12], Protocol::Dh),
            Err(DecodeError::Truncated {
                needed: 14,
                available: 12
            })
        ));
        let mut long = m.clone();
        long.push(0);
        assert_eq!(
            parse_frame(&long, Protocol::Dh).unwrap_err(),
            DecodeError::TrailingBytes { extra: 1 }
        );
        let mut bad = m.clone();
        bad[0] = b'X';
        assert_eq!(
            parse_frame(&bad, Protocol::Dh).unwrap_err(),
            DecodeError::BadMagic
        );
        let mut bad = m.clone();
        bad[2] = 9;
        assert_eq!(
            parse_frame(&bad, Protocol::Dh).unwrap_err(),
            DecodeError::UnsupportedVersion(9)
        );
        let mut bad = m.clone();
        bad[3] = 0x02;
        assert!(matches!(
            parse_frame(&bad, Protocol::Dh),
            Err(DecodeError::WrongProtocol { .. })
        ));
        let mut bad = m;
        bad[5..9].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            parse_frame(&bad, Protocol::Dh),
            Err(DecodeError::LimitExceeded { .. })
        ));
    }

    #[test]
    fn reader_bounds() {
        let mut r = Reader::new(&[1, 0, 0, 0, 2, 0, 3, 4, 5]);
        assert_eq!(r.u8().unwrap(), 1);
        assert_eq!(r.u32().unwrap(), 2);
        assert_eq!(r.u16().unwrap(), 3);
        assert_eq!(r.array::<2>().unwrap(), [4, 5]);
        assert!(r.u8().is_err());
        assert!(Reader::new(&[1]).array::<2>().is_err());
        let r = Reader::new(&[1]);
        assert_eq!(
            r.end().unwrap_err(),
            DecodeError::TrailingBytes { extra: 1 }
        );
    }
}
