//! The label fetch request and response bodies (docs/protocol/labels.md §4). They are
//! sent as HTTP bodies without the protocol frame of `docs/protocol/README.md`.

use crate::error::DecodeError;

/// Bytes of a bucket id in a request or a section header.
pub const BUCKET_ID_LEN: usize = 4;
/// Bytes of a response section header: bucket id, records length.
pub const SECTION_HEADER_LEN: usize = 8;

/// Encodes a fetch request: the bucket ids, each a big-endian u32.
pub fn encode_request(buckets: &[u32]) -> Vec<u8> {
    buckets.iter().flat_map(|b| b.to_be_bytes()).collect()
}

/// Bytes of a fetch request naming `buckets` ids: a server refuses a longer request by its
/// length, before reading or decoding it.
pub fn request_len(buckets: usize) -> usize {
    buckets.saturating_mul(BUCKET_ID_LEN)
}

/// Decodes a fetch request (its length must be a multiple of 4).
pub fn decode_request(body: &[u8]) -> Result<Vec<u32>, DecodeError> {
    if !body.len().is_multiple_of(BUCKET_ID_LEN) {
        return Err(DecodeError::LengthMismatch {
            what: "label fetch request (4 bytes per bucket id)",
            declared: body.len() as u64,
            actual: (body.len() / BUCKET_ID_LEN * BUCKET_ID_LEN) as u64,
        });
    }
    Ok(body
        .chunks_exact(BUCKET_ID_LEN)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// Appends one response section: `bucket u32 || length u32 || records`.
pub fn push_section(out: &mut Vec<u8>, bucket: u32, records: &[u8]) {
    out.extend_from_slice(&bucket.to_be_bytes());
    out.extend_from_slice(&(records.len() as u32).to_be_bytes());
    out.extend_from_slice(records);
}

/// Splits a fetch response into `(bucket, records bytes)` sections.
pub fn split_response(mut data: &[u8]) -> Result<Vec<(u32, &[u8])>, DecodeError> {
    let mut out = Vec::new();
    while !data.is_empty() {
        if data.len() < SECTION_HEADER_LEN {
            return Err(DecodeError::Truncated {
                needed: SECTION_HEADER_LEN,
                available: data.len(),
            });
        }
        let b = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
        let len = u32::from_be_bytes([data[4], data[5], data[6], data[7]]) as usize;
        let rest = &data[SECTION_HEADER_LEN..];
        if rest.len() < len {
            return Err(DecodeError::Truncated {
                needed: len,
                available: rest.len(),
            });
        }
        out.push((b, &rest[..len]));
        data = &rest[len..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_and_response_codec() {
        assert_eq!(
            decode_request(&encode_request(&[1, 2, 0xABC])).unwrap(),
            vec![1, 2, 0xABC]
        );
        assert!(decode_request(&[0, 1, 2]).is_err());
        let mut resp = Vec::new();
        push_section(&mut resp, 5, &[9, 9]);
        assert_eq!(split_response(&resp).unwrap(), vec![(5, &[9u8, 9][..])]);
        assert!(split_response(&resp[..9]).is_err());
        assert!(split_response(&resp[..7]).is_err());
    }
}
