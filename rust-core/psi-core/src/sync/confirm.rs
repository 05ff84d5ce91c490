//! The confirmation (docs/protocol/sync.md §5; ADR 0047 §1 and §3.2): the label fetch,
//! version 2, in mode `0x02`. Every registry entry has a record (with or without a
//! label) under a tag of its full OPRF output; the client fetches the buckets of its
//! candidates among exactly `fetch_buckets(n, b)` buckets, and a candidate is a match
//! exactly when its full tag is in its bucket.

use crate::error::{DecodeError, Error, Result};
use crate::labels::{self, BucketedRecords, MAX_LABEL_LEN, NONCE_LEN, TAG_LEN, messages as v1};
use crate::oprf::OUTPUT_LEN;
use chacha20poly1305::aead::{Aead, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Nonce};
use std::collections::HashMap;
use zeroize::Zeroizing;

const TAG_DST: &[u8] = b"psi-label-tag-v2";
const KEY_DST: &[u8] = b"psi-label-key-v2";

/// The version byte of a version-2 fetch request and response.
pub const FETCH_VERSION: u8 = 0x02;
/// Fetch mode: labels of DH-PSI matches (ADR 0047 §1; not built yet: version 1 serves it).
pub const MODE_LABELS: u8 = 0x01;
/// Fetch mode: the confirmation of sync-mode candidates.
pub const MODE_CONFIRM: u8 = 0x02;
/// Bytes of a version-2 request before its bucket ids.
pub const REQUEST_HEADER_LEN: usize = 18;
/// Bytes of a version-2 response before its sections.
pub const RESPONSE_HEADER_LEN: usize = 13;
/// Bytes of a record without a label: tag and length.
pub const RECORD_MIN_LEN: usize = TAG_LEN + 2;
/// Bytes a label adds to a record besides its own: nonce and Poly1305 tag.
pub const RECORD_LABEL_OVERHEAD: usize = NONCE_LEN + labels::AEAD_TAG_LEN;

/// The confirmation tag of an OPRF output: `SHA-512("psi-label-tag-v2" || o)[0..16]`.
pub fn confirm_tag(output: &[u8; OUTPUT_LEN]) -> [u8; TAG_LEN] {
    labels::tag_under(TAG_DST, output)
}

/// The record key: `SHA-512("psi-label-key-v2" || o)[0..32]`, digest wiped.
fn key(output: &[u8; OUTPUT_LEN]) -> ChaCha20Poly1305 {
    labels::key_under(KEY_DST, output)
}

/// The version-2 record of an entry: `tag || len u16` and, for a label,
/// `|| nonce || ChaCha20-Poly1305(key, nonce, label, aad = tag)` (`len` the ciphertext's
/// length, 0 for no label). Labels over [`MAX_LABEL_LEN`] bytes are cut on a character
/// boundary, as version 1 does.
pub fn seal_record(
    output: &[u8; OUTPUT_LEN],
    label: Option<&str>,
    nonce: [u8; NONCE_LEN],
) -> Vec<u8> {
    let t = confirm_tag(output);
    let mut rec = Vec::with_capacity(record_len(label));
    rec.extend_from_slice(&t);
    let Some(label) = label else {
        rec.extend_from_slice(&0u16.to_be_bytes());
        return rec;
    };
    let ct = labels::seal_label(&key(output), &nonce, label, &t);
    rec.extend_from_slice(&(ct.len() as u16).to_be_bytes());
    rec.extend_from_slice(&nonce);
    rec.extend_from_slice(&ct);
    rec
}

/// A version-2 record parsed from a response.
#[derive(Clone, PartialEq, Eq)]
pub struct RecordV2<'a> {
    /// The entry's confirmation tag.
    pub tag: [u8; TAG_LEN],
    /// Nonce and ciphertext, if the entry has a label.
    pub sealed: Option<([u8; NONCE_LEN], &'a [u8])>,
}

impl std::fmt::Debug for RecordV2<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordV2")
            .field("labelled", &self.sealed.is_some())
            .finish_non_exhaustive()
    }
}

/// Parses the records of one bucket.
pub fn parse_records(mut data: &[u8]) -> Result<Vec<RecordV2<'_>>, DecodeError> {
    let mut out = Vec::new();
    while !data.is_empty() {
        if data.len() < RECORD_MIN_LEN {
            return Err(DecodeError::Truncated {
                needed: RECORD_MIN_LEN,
                available: data.len(),
            });
        }
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&data[..TAG_LEN]);
        let len = usize::from(u16::from_be_bytes([data[TAG_LEN], data[TAG_LEN + 1]]));
        data = &data[RECORD_MIN_LEN..];
        if len == 0 {
            out.push(RecordV2 { tag, sealed: None });
            continue;
        }
        if !(labels::AEAD_TAG_LEN..=MAX_LABEL_LEN + labels::AEAD_TAG_LEN).contains(&len) {
            return Err(DecodeError::InvalidParameter {
                what: "label ciphertext length",
            });
        }
        if data.len() < NONCE_LEN + len {
            return Err(DecodeError::Truncated {
                needed: NONCE_LEN + len,
                available: data.len(),
            });
        }
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&data[..NONCE_LEN]);
        out.push(RecordV2 {
            tag,
            sealed: Some((nonce, &data[NONCE_LEN..NONCE_LEN + len])),
        });
        data = &data[NONCE_LEN + len..];
    }
    Ok(out)
}

/// What a record says to the holder of `output`: `None` if it is another entry's,
/// `Some(None)` for the entry without a label, `Some(Some(label))` with one; an error if
/// the tag is the holder's but the label does not authenticate (an altered record).
pub fn open_record(
    output: &[u8; OUTPUT_LEN],
    record: &RecordV2<'_>,
) -> Result<Option<Option<String>>> {
    if record.tag != confirm_tag(output) {
        return Ok(None);
    }
    let Some((nonce, ct)) = record.sealed else {
        return Ok(Some(None));
    };
    let pt = key(output)
        .decrypt(
            Nonce::from_slice(&nonce),
            Payload {
                msg: ct,
                aad: &record.tag,
            },
        )
        .map_err(|_| DecodeError::InvalidParameter {
            what: "label record does not authenticate",
        })?;
    let label = String::from_utf8(pt).map_err(|_| DecodeError::InvalidParameter {
        what: "label is not UTF-8",
    })?;
    Ok(Some(Some(label)))
}

/// A version-2 fetch request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    /// Fetch mode (fixed for the session).
    pub mode: u8,
    /// The session's key epoch.
    pub epoch: u32,
    /// The registry version of the client's synced set.
    pub have_version: u64,
    /// Bucket ids, strictly ascending.
    pub buckets: Vec<u32>,
}

impl FetchRequest {
    /// The request body: `0x02 || mode || epoch u32 || have_version u64 || K u32 || ids`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(REQUEST_HEADER_LEN + 4 * self.buckets.len());
        out.push(FETCH_VERSION);
        out.push(self.mode);
        out.extend_from_slice(&self.epoch.to_be_bytes());
        out.extend_from_slice(&self.have_version.to_be_bytes());
        out.extend_from_slice(&(self.buckets.len() as u32).to_be_bytes());
        out.extend_from_slice(&v1::encode_request(&self.buckets));
        out
    }

    /// Bytes of a request naming `buckets` ids.
    pub fn len_for(buckets: usize) -> usize {
        REQUEST_HEADER_LEN.saturating_add(v1::request_len(buckets))
    }

    /// Parses a request of a session whose fetch names exactly `expected_buckets` ids
    /// below `2^bucket_bits`, checked in this order: the length (against
    /// `expected_buckets`, before anything is read), the header, then the ids.
    pub fn from_bytes(
        body: &[u8],
        expected_buckets: usize,
        bucket_bits: u8,
    ) -> Result<FetchRequest, DecodeError> {
        let want = Self::len_for(expected_buckets);
        if body.len() != want {
            return Err(DecodeError::LengthMismatch {
                what: "sync fetch request (18 + 4 K bytes)",
                declared: body.len() as u64,
                actual: want as u64,
            });
        }
        if body[0] != FETCH_VERSION {
            return Err(DecodeError::UnsupportedVersion(body[0]));
        }
        let mode = body[1];
        let epoch = u32::from_be_bytes([body[2], body[3], body[4], body[5]]);
        let mut hv = [0u8; 8];
        hv.copy_from_slice(&body[6..14]);
        let have_version = u64::from_be_bytes(hv);
        let k = u32::from_be_bytes([body[14], body[15], body[16], body[17]]) as usize;
        if k != expected_buckets {
            return Err(DecodeError::InvalidParameter {
                what: "sync fetch bucket count (must be fetch_buckets(n, b))",
            });
        }
        let buckets = v1::decode_request(&body[REQUEST_HEADER_LEN..])?;
        let limit = 1u64 << bucket_bits.min(labels::MAX_BUCKET_BITS);
        if buckets.windows(2).any(|w| w[0] >= w[1]) {
            return Err(DecodeError::InvalidParameter {
                what: "sync fetch bucket ids (must be strictly ascending)",
            });
        }
        if buckets.last().is_some_and(|&b| u64::from(b) >= limit) {
            return Err(DecodeError::InvalidParameter {
                what: "bucket id (must be below 2^label_bucket_bits)",
            });
        }
        Ok(FetchRequest {
            mode,
            epoch,
            have_version,
            buckets,
        })
    }
}

/// Every registry entry's version-2 record, by bucket: the server side of the
/// confirmation, for one key epoch and registry version.
#[derive(Clone)]
pub struct ConfirmStore {
    epoch: u32,
    version: u64,
    /// (Crate-visible for the layout's tests, labels/buckets.rs.)
    pub(crate) records: BucketedRecords,
}

impl std::fmt::Debug for ConfirmStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfirmStore")
            .field("epoch", &self.epoch)
            .field("version", &self.version)
            .field("bucket_bits", &self.records.bits())
            .field("records", &self.records.len())
            .finish_non_exhaustive()
    }
}

/// The length of the record [`seal_record`] makes for `label`.
fn record_len(label: Option<&str>) -> usize {
    RECORD_MIN_LEN + label.map_or(0, |l| RECORD_LABEL_OVERHEAD + labels::cut_len(l))
}

impl ConfirmStore {
    /// Seals a record for every entry `(output, label)` (fresh nonces from `rng` for the
    /// labelled ones) in buckets of about `bucket_size` records on average
    /// ([`labels::bucket_bits`]). Goes over `entries` twice: once to size the buckets,
    /// once to seal.
    pub fn build<'a, R: rand_core::CryptoRng + ?Sized>(
        epoch: u32,
        version: u64,
        entries: impl ExactSizeIterator<Item = (&'a [u8; OUTPUT_LEN], Option<&'a str>)> + Clone,
        bucket_size: usize,
        rng: &mut R,
    ) -> ConfirmStore {
        let bits = labels::bucket_bits(entries.len(), bucket_size);
        let records = BucketedRecords::build(
            entries,
            bits,
            |(output, label)| {
                (
                    labels::bucket(&confirm_tag(output), bits),
                    record_len(label),
                )
            },
            |(output, label)| {
                let mut nonce = [0u8; NONCE_LEN];
                if label.is_some() {
                    rng.fill_bytes(&mut nonce);
                }
                seal_record(output, label, nonce)
            },
        );
        ConfirmStore {
            epoch,
            version,
            records,
        }
    }

    /// Bytes held in memory for the records and their layout.
    pub fn heap_bytes(&self) -> usize {
        self.records.heap_bytes()
    }

    /// Bucket bits `b` (sent with the session).
    pub fn bucket_bits(&self) -> u8 {
        self.records.bits()
    }

    /// Records held (one per entry).
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// True if the registry is empty.
    pub fn is_empty(&self) -> bool {
        self.records.len() == 0
    }

    /// Bytes of all records.
    pub fn record_bytes(&self) -> usize {
        self.records.record_bytes()
    }

    /// The registry version the records are of.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Answers the confirmation fetch of a session of `client_items` items:
    /// `0x02 || epoch u32 || served_version u64` and one section per requested bucket
    /// (`id u32 || length u32 || records`, labels.md §4), in ascending order.
    pub fn answer(&self, request: &[u8], client_items: usize) -> Result<Vec<u8>> {
        let bits = self.records.bits();
        let k = labels::fetch_buckets(client_items, bits);
        let req = FetchRequest::from_bytes(request, k, bits)?;
        if req.mode != MODE_CONFIRM {
            return Err(DecodeError::InvalidParameter {
                what: "sync fetch mode (this session confirms: 0x02)",
            }
            .into());
        }
        if req.epoch != self.epoch {
            return Err(Error::EpochMismatch {
                expected: self.epoch,
                found: req.epoch,
            });
        }
        let mut out = Vec::with_capacity(RESPONSE_HEADER_LEN + k * 8);
        out.push(FETCH_VERSION);
        out.extend_from_slice(&self.epoch.to_be_bytes());
        out.extend_from_slice(&self.version.to_be_bytes());
        for b in req.buckets {
            let recs = self.records.bucket(b);
            v1::push_section(&mut out, b, recs);
        }
        Ok(out)
    }
}

/// A confirmed match: the item's index in the outputs given, and its label.
#[derive(Clone, PartialEq, Eq)]
pub struct Confirmed {
    /// Index into the outputs passed to [`ConfirmClient::start`].
    pub index: usize,
    /// The entry's label (`None`: it has none).
    pub label: Option<String>,
}

impl Drop for Confirmed {
    fn drop(&mut self) {
        if let Some(l) = self.label.as_mut() {
            zeroize::Zeroize::zeroize(l);
        }
    }
}

impl std::fmt::Debug for Confirmed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Confirmed")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

/// What the confirmation tells the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confirmation {
    /// The matches, by ascending index.
    pub matches: Vec<Confirmed>,
    /// How many items were candidates (their short tag was in the synced set).
    pub candidates: usize,
    /// The version of the client's synced set.
    pub have_version: u64,
    /// The registry version the server's records are of.
    pub served_version: u64,
}

/// The client side of the confirmation. Its request depends on the session's
/// `client_items` and bucket layout only: never on how many items are candidates or
/// matches.
pub struct ConfirmClient {
    outputs: Zeroizing<Vec<[u8; OUTPUT_LEN]>>,
    candidates: Vec<usize>,
    requested: Vec<u32>,
    bucket_bits: u8,
    epoch: u32,
    have_version: u64,
}

impl std::fmt::Debug for ConfirmClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfirmClient")
            .field("requested", &self.requested.len())
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

impl ConfirmClient {
    /// Starts the confirmation for a session of `outputs.len()` items (all the run's
    /// OPRF outputs, in item order) against the synced set `synced`, with the session's
    /// `bucket_bits` and `registry_items`. Returns the client and the request body.
    pub fn start<R: rand_core::CryptoRng + ?Sized>(
        outputs: &[[u8; OUTPUT_LEN]],
        synced: &super::SyncedSet,
        bucket_bits: u8,
        registry_items: u64,
        rng: &mut R,
    ) -> Result<(ConfirmClient, Vec<u8>)> {
        labels::check_layout(outputs.len(), registry_items, bucket_bits)?;
        let candidates = synced.candidates(outputs)?;
        let mut real: Vec<u32> = candidates
            .iter()
            .map(|&i| labels::bucket(&confirm_tag(&outputs[i]), bucket_bits))
            .collect();
        real.sort_unstable();
        real.dedup();
        let k = labels::fetch_buckets(outputs.len(), bucket_bits);
        // The candidates' distinct buckets are at most min(n, 2^b) <= K: all fit.
        debug_assert!(real.len() <= k);
        let requested = labels::choose_buckets(real, k, bucket_bits, rng);
        let request = FetchRequest {
            mode: MODE_CONFIRM,
            epoch: synced.epoch(),
            have_version: synced.version(),
            buckets: requested.clone(),
        }
        .to_bytes();
        Ok((
            ConfirmClient {
                outputs: Zeroizing::new(outputs.to_vec()),
                candidates,
                requested,
                bucket_bits,
                epoch: synced.epoch(),
                have_version: synced.version(),
            },
            request,
        ))
    }

    /// Reads the response: exactly the requested buckets, in order. A candidate is a
    /// match when its full tag is among its bucket's records.
    pub fn finish(self, response: &[u8]) -> Result<Confirmation> {
        if response.len() < RESPONSE_HEADER_LEN {
            return Err(DecodeError::Truncated {
                needed: RESPONSE_HEADER_LEN,
                available: response.len(),
            }
            .into());
        }
        if response[0] != FETCH_VERSION {
            return Err(DecodeError::UnsupportedVersion(response[0]).into());
        }
        let epoch = u32::from_be_bytes([response[1], response[2], response[3], response[4]]);
        if epoch != self.epoch {
            return Err(Error::EpochMismatch {
                expected: self.epoch,
                found: epoch,
            });
        }
        let mut sv = [0u8; 8];
        sv.copy_from_slice(&response[5..13]);
        let served_version = u64::from_be_bytes(sv);
        let sections = v1::split_response(&response[RESPONSE_HEADER_LEN..])?;
        if sections.len() != self.requested.len()
            || sections
                .iter()
                .zip(&self.requested)
                .any(|((b, _), r)| b != r)
        {
            return Err(DecodeError::InvalidParameter {
                what: "sync fetch response (must answer exactly the requested buckets)",
            }
            .into());
        }
        let mut by_bucket: HashMap<u32, Vec<RecordV2<'_>>> = HashMap::new();
        for (b, data) in sections {
            by_bucket.insert(b, parse_records(data)?);
        }
        let mut matches = Vec::new();
        for &i in &self.candidates {
            let o = &self.outputs[i];
            let b = labels::bucket(&confirm_tag(o), self.bucket_bits);
            let records = by_bucket.get(&b).map_or(&[][..], Vec::as_slice);
            for rec in records {
                if let Some(label) = open_record(o, rec)? {
                    matches.push(Confirmed { index: i, label });
                    break;
                }
            }
        }
        Ok(Confirmation {
            matches,
            candidates: self.candidates.len(),
            have_version: self.have_version,
            served_version,
        })
    }
}
