//! Labels revealed only to holders of the item (docs/api.md, "Labels";
//! docs/adr/0011-labels.md).
//!
//! For a registry entry with full 64-byte OPRF output `o` (RFC 9497 `Finalize`, which
//! only the server or a holder of the item who ran the OPRF can compute):
//!
//! - `tag = SHA-512("psi-label-tag-v1" || o)[0..16]`: looks the record up;
//! - `key = SHA-512("psi-label-key-v1" || o)[0..32]`: ChaCha20-Poly1305 key;
//! - record = `tag || nonce[12] || len u16 || ChaCha20-Poly1305(key, nonce, label, aad = tag)`;
//! - bucket = the first `bucket_bits` bits of `tag` (big-endian), so the client asks for
//!   a bucket of many entries, not for the entry itself.

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use sha2::{Digest, Sha512};

/// Bytes of a label tag.
pub const TAG_LEN: usize = 16;
/// Bytes of a nonce.
pub const NONCE_LEN: usize = 12;
/// Longest label in bytes (UTF-8).
pub const MAX_LABEL_LEN: usize = 1024;
/// Poly1305 tag appended to every ciphertext.
pub const AEAD_TAG_LEN: usize = 16;

const TAG_DST: &[u8] = b"psi-label-tag-v1";
const KEY_DST: &[u8] = b"psi-label-key-v1";

/// The lookup tag of an OPRF output.
pub fn tag(output: &[u8; 64]) -> [u8; TAG_LEN] {
    let h = Sha512::new()
        .chain_update(TAG_DST)
        .chain_update(output)
        .finalize();
    let mut t = [0u8; TAG_LEN];
    t.copy_from_slice(&h[..TAG_LEN]);
    t
}

fn key(output: &[u8; 64]) -> ChaCha20Poly1305 {
    let h = Sha512::new()
        .chain_update(KEY_DST)
        .chain_update(output)
        .finalize();
    ChaCha20Poly1305::new(Key::from_slice(&h[..32]))
}

/// The bucket of a tag: its first `bits` bits (0..=24).
pub fn bucket(tag: &[u8; TAG_LEN], bits: u8) -> u32 {
    let v = u32::from_be_bytes([tag[0], tag[1], tag[2], tag[3]]);
    if bits == 0 {
        0
    } else {
        v >> (32 - u32::from(bits.min(24)))
    }
}

/// Encrypts `label` for the holder of the item with OPRF output `output`; `nonce` must
/// be fresh random bytes. Returns the record.
pub fn seal(output: &[u8; 64], label: &str, nonce: [u8; NONCE_LEN]) -> Vec<u8> {
    let t = tag(output);
    // Truncate on a character boundary, so a long label still decrypts to valid UTF-8.
    let mut end = label.len().min(MAX_LABEL_LEN);
    while !label.is_char_boundary(end) {
        end -= 1;
    }
    let label = &label.as_bytes()[..end];
    let ct = key(output)
        .encrypt(
            Nonce::from_slice(&nonce),
            Payload {
                msg: label,
                aad: &t,
            },
        )
        .expect("ChaCha20-Poly1305 encryption of a short label cannot fail");
    let mut rec = Vec::with_capacity(TAG_LEN + NONCE_LEN + 2 + ct.len());
    rec.extend_from_slice(&t);
    rec.extend_from_slice(&nonce);
    rec.extend_from_slice(&(ct.len() as u16).to_be_bytes());
    rec.extend_from_slice(&ct);
    rec
}

/// One record parsed from a fetch response.
#[derive(Clone, PartialEq, Eq)]
pub struct Record<'a> {
    /// Lookup tag.
    pub tag: [u8; TAG_LEN],
    /// Nonce.
    pub nonce: [u8; NONCE_LEN],
    /// Ciphertext with its Poly1305 tag.
    pub ciphertext: &'a [u8],
}

/// Decrypts `record` with the key of `output`; `None` if the record is not for this
/// output or was tampered with.
pub fn open(output: &[u8; 64], record: &Record<'_>) -> Option<String> {
    if record.tag != tag(output) {
        return None;
    }
    let pt = key(output)
        .decrypt(
            Nonce::from_slice(&record.nonce),
            Payload {
                msg: record.ciphertext,
                aad: &record.tag,
            },
        )
        .ok()?;
    String::from_utf8(pt).ok()
}

/// Parses a concatenation of records (the body of a bucket in a fetch response).
pub fn parse_records(mut data: &[u8]) -> Option<Vec<Record<'_>>> {
    let mut out = Vec::new();
    while !data.is_empty() {
        if data.len() < TAG_LEN + NONCE_LEN + 2 {
            return None;
        }
        let tag: [u8; TAG_LEN] = data[..TAG_LEN].try_into().ok()?;
        let nonce: [u8; NONCE_LEN] = data[TAG_LEN..TAG_LEN + NONCE_LEN].try_into().ok()?;
        let len =
            u16::from_be_bytes([data[TAG_LEN + NONCE_LEN], data[TAG_LEN + NONCE_LEN + 1]]) as usize;
        let start = TAG_LEN + NONCE_LEN + 2;
        if data.len() < start + len || len < AEAD_TAG_LEN {
            return None;
        }
        out.push(Record {
            tag,
            nonce,
            ciphertext: &data[start..start + len],
        });
        data = &data[start + len..];
    }
    Some(out)
}

/// Encodes a fetch request: the bucket ids, each a big-endian u32.
pub fn encode_fetch(buckets: &[u32]) -> Vec<u8> {
    buckets.iter().flat_map(|b| b.to_be_bytes()).collect()
}

/// Decodes a fetch request; `None` if its length is not a multiple of 4.
pub fn decode_fetch(body: &[u8]) -> Option<Vec<u32>> {
    if body.len() % 4 != 0 {
        return None;
    }
    Some(
        body.chunks_exact(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}

/// Splits a fetch response into `(bucket, records bytes)` sections: each section is
/// `bucket u32 || length u32 || records`.
pub fn split_fetch_response(mut data: &[u8]) -> Option<Vec<(u32, &[u8])>> {
    let mut out = Vec::new();
    while !data.is_empty() {
        if data.len() < 8 {
            return None;
        }
        let b = u32::from_be_bytes(data[..4].try_into().ok()?);
        let len = u32::from_be_bytes(data[4..8].try_into().ok()?) as usize;
        if data.len() - 8 < len {
            return None;
        }
        out.push((b, &data[8..8 + len]));
        data = &data[8 + len..];
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_labels_are_cut_on_a_character_boundary() {
        let o = [7u8; 64];
        let long = "é".repeat(MAX_LABEL_LEN); // 2 bytes each: the cut falls inside one
        let rec = seal(&o, &long, [1; NONCE_LEN]);
        let recs = parse_records(&rec).unwrap();
        let opened = open(&o, &recs[0]).expect("valid UTF-8");
        assert!(opened.len() <= MAX_LABEL_LEN && long.starts_with(&opened));
    }

    #[test]
    fn seal_open_round_trip_and_wrong_output() {
        let o = [7u8; 64];
        let rec = seal(&o, "user-42", [1; NONCE_LEN]);
        let recs = parse_records(&rec).unwrap();
        assert_eq!(open(&o, &recs[0]).as_deref(), Some("user-42"));
        assert_eq!(open(&[8u8; 64], &recs[0]), None);
        let mut bad = rec.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert_eq!(open(&o, &parse_records(&bad).unwrap()[0]), None);
        assert!(parse_records(&rec[..rec.len() - 1]).is_none());
    }

    #[test]
    fn buckets_and_fetch_codec() {
        let t = [0xAB, 0xCD, 0xEF, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(bucket(&t, 0), 0);
        assert_eq!(bucket(&t, 8), 0xAB);
        assert_eq!(bucket(&t, 12), 0xABC);
        assert_eq!(
            decode_fetch(&encode_fetch(&[1, 2, 0xABC])),
            Some(vec![1, 2, 0xABC])
        );
        assert_eq!(decode_fetch(&[0, 1, 2]), None);
        let mut resp = Vec::new();
        resp.extend_from_slice(&5u32.to_be_bytes());
        resp.extend_from_slice(&2u32.to_be_bytes());
        resp.extend_from_slice(&[9, 9]);
        assert_eq!(split_fetch_response(&resp), Some(vec![(5, &[9u8, 9][..])]));
        assert_eq!(split_fetch_response(&resp[..9]), None);
    }
}
