//! Label records: derivation of the tag and key from an OPRF output, sealing, parsing
//! and opening (docs/protocol/labels.md §2-3).

use crate::error::DecodeError;
use crate::oprf::OUTPUT_LEN;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use sha2::{Digest, Sha512};
use zeroize::Zeroizing;

/// Most tag bits used as a bucket id (2^24 buckets).
pub const MAX_BUCKET_BITS: u8 = 24;

/// Bytes of a label tag.
pub const TAG_LEN: usize = 16;
/// Bytes of a nonce.
pub const NONCE_LEN: usize = 12;
/// Longest label in bytes (UTF-8); longer labels are cut on a character boundary.
pub const MAX_LABEL_LEN: usize = 1024;
/// Poly1305 tag appended to every ciphertext.
pub const AEAD_TAG_LEN: usize = 16;
/// Bytes of a record before its ciphertext: tag, nonce, length.
pub const RECORD_HEADER_LEN: usize = TAG_LEN + NONCE_LEN + 2;

const TAG_DST: &[u8] = b"psi-label-tag-v1";
const KEY_DST: &[u8] = b"psi-label-key-v1";

/// The lookup tag of an OPRF output: `SHA-512("psi-label-tag-v1" || o)[0..16]`.
pub fn tag(output: &[u8; OUTPUT_LEN]) -> [u8; TAG_LEN] {
    tag_under(TAG_DST, output)
}

/// `SHA-512(dst || o)[0..16]`: the tag of version 1 (`psi-label-tag-v1`) and of sync
/// mode's version-2 records (`psi-label-tag-v2`, [`crate::sync::confirm_tag`]).
pub(crate) fn tag_under(dst: &[u8], output: &[u8; OUTPUT_LEN]) -> [u8; TAG_LEN] {
    let h = Sha512::new()
        .chain_update(dst)
        .chain_update(output)
        .finalize();
    let mut t = [0u8; TAG_LEN];
    t.copy_from_slice(&h[..TAG_LEN]);
    t
}

/// The record key of an OPRF output: `SHA-512("psi-label-key-v1" || o)[0..32]`.
fn key(output: &[u8; OUTPUT_LEN]) -> ChaCha20Poly1305 {
    key_under(KEY_DST, output)
}

/// `SHA-512(dst || o)[0..32]` as a ChaCha20-Poly1305 key (versions 1 and 2). The hash
/// state and the digest are zeroized (sha2's `zeroize` feature, and a digest written
/// straight into a wiped buffer); the cipher wipes its key on drop.
pub(crate) fn key_under(dst: &[u8], output: &[u8; OUTPUT_LEN]) -> ChaCha20Poly1305 {
    let mut h = Sha512::new();
    h.update(dst);
    h.update(output);
    let mut digest = Zeroizing::new([0u8; 64]);
    h.finalize_into((&mut *digest).into());
    ChaCha20Poly1305::new(Key::from_slice(&digest[..32]))
}

/// The length `label` is sealed at: at most [`MAX_LABEL_LEN`] bytes, cut on a character
/// boundary so that a long label still decrypts to valid UTF-8.
pub(crate) fn cut_len(label: &str) -> usize {
    let mut end = label.len().min(MAX_LABEL_LEN);
    while !label.is_char_boundary(end) {
        end -= 1;
    }
    end
}

/// The length of the record [`seal`] makes for `label`.
pub(crate) fn sealed_len(label: &str) -> usize {
    RECORD_HEADER_LEN + cut_len(label) + AEAD_TAG_LEN
}

/// `label` cut to at most [`MAX_LABEL_LEN`] bytes on a character boundary, sealed under
/// `key` with `nonce` and `aad = tag` (versions 1 and 2).
pub(crate) fn seal_label(
    key: &ChaCha20Poly1305,
    nonce: &[u8; NONCE_LEN],
    label: &str,
    tag: &[u8; TAG_LEN],
) -> Vec<u8> {
    let end = cut_len(label);
    key.encrypt(
        Nonce::from_slice(nonce),
        Payload {
            msg: &label.as_bytes()[..end],
            aad: tag,
        },
    )
    .expect("ChaCha20-Poly1305 encryption of a short label cannot fail")
}

/// The bucket of a tag: its first `bits` bits as a big-endian integer (`bits` 0..=24;
/// 0 gives bucket 0).
pub fn bucket(tag: &[u8; TAG_LEN], bits: u8) -> u32 {
    let v = u32::from_be_bytes([tag[0], tag[1], tag[2], tag[3]]);
    if bits == 0 {
        0
    } else {
        v >> (32 - u32::from(bits.min(MAX_BUCKET_BITS)))
    }
}

/// Encrypts `label` for the holder of the item whose OPRF output is `output`; `nonce`
/// must be fresh random bytes. Returns the record
/// `tag || nonce || len u16 || ChaCha20-Poly1305(key, nonce, label, aad = tag)`.
pub fn seal(output: &[u8; OUTPUT_LEN], label: &str, nonce: [u8; NONCE_LEN]) -> Vec<u8> {
    let t = tag(output);
    let ct = seal_label(&key(output), &nonce, label, &t);
    let mut rec = Vec::with_capacity(RECORD_HEADER_LEN + ct.len());
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

impl std::fmt::Debug for Record<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Record")
            .field("ciphertext_len", &self.ciphertext.len())
            .finish_non_exhaustive()
    }
}

/// Decrypts `record` with the key of `output`; `None` if the record is not for this
/// output, was tampered with, or is not UTF-8.
pub fn open(output: &[u8; OUTPUT_LEN], record: &Record<'_>) -> Option<String> {
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

/// Parses a concatenation of records (the records of one bucket in a fetch response).
pub fn parse_records(mut data: &[u8]) -> Result<Vec<Record<'_>>, DecodeError> {
    let mut out = Vec::new();
    while !data.is_empty() {
        if data.len() < RECORD_HEADER_LEN {
            return Err(DecodeError::Truncated {
                needed: RECORD_HEADER_LEN,
                available: data.len(),
            });
        }
        let (head, rest) = data.split_at(RECORD_HEADER_LEN);
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&head[..TAG_LEN]);
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&head[TAG_LEN..TAG_LEN + NONCE_LEN]);
        let len = usize::from(u16::from_be_bytes([
            head[TAG_LEN + NONCE_LEN],
            head[TAG_LEN + NONCE_LEN + 1],
        ]));
        if !(AEAD_TAG_LEN..=MAX_LABEL_LEN + AEAD_TAG_LEN).contains(&len) {
            return Err(DecodeError::InvalidParameter {
                what: "label ciphertext length",
            });
        }
        if rest.len() < len {
            return Err(DecodeError::Truncated {
                needed: len,
                available: rest.len(),
            });
        }
        out.push(Record {
            tag,
            nonce,
            ciphertext: &rest[..len],
        });
        data = &rest[len..];
    }
    Ok(out)
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
        assert!(parse_records(&rec[..rec.len() - 1]).is_err());
        assert!(parse_records(&rec[..5]).is_err());
    }

    #[test]
    fn buckets() {
        let t = [0xAB, 0xCD, 0xEF, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(bucket(&t, 0), 0);
        assert_eq!(bucket(&t, 8), 0xAB);
        assert_eq!(bucket(&t, 12), 0xABC);
        assert_eq!(bucket(&t, 24), 0xABCDEF);
    }
}
