//! The server side: label records built once per registry, grouped in buckets, and the
//! answer to a fetch request.

use super::BucketedRecords;
use super::messages;
use super::record::{self, NONCE_LEN, sealed_len};
use crate::error::{DecodeError, Error, Result};
use crate::oprf::OUTPUT_LEN;

/// The encrypted label records of a registry, by bucket. Built from each labeled
/// entry's full OPRF output; holds only ciphertexts, so it can be kept in memory.
#[derive(Clone, Default)]
pub struct LabelStore {
    /// (Crate-visible for the layout's tests, labels/buckets.rs.)
    pub(crate) records: BucketedRecords,
}

impl std::fmt::Debug for LabelStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LabelStore")
            .field("bucket_bits", &self.records.bits())
            .field("records", &self.records.len())
            .field("record_bytes", &self.records.record_bytes())
            .finish()
    }
}

/// Bucket bits so that buckets hold about `target` records on average: the largest `b`
/// (at most 24) with `2^b <= floor(records / target)`, or 0 when that quotient is at most 1.
pub fn bucket_bits(records: usize, target: usize) -> u8 {
    let buckets = records / target.max(1);
    if buckets <= 1 {
        0
    } else {
        (usize::BITS - 1 - buckets.leading_zeros()).min(u32::from(super::record::MAX_BUCKET_BITS))
            as u8
    }
}

impl LabelStore {
    /// Seals every `(output, label)` pair with a fresh nonce from `rng` and groups the
    /// records so that buckets hold about `bucket_size` records on average. Goes over
    /// `entries` twice: once to size the buckets, once to seal ([`BucketedRecords`]).
    pub fn build<'a, R: rand_core::CryptoRng + ?Sized>(
        entries: impl ExactSizeIterator<Item = (&'a [u8; OUTPUT_LEN], &'a str)> + Clone,
        bucket_size: usize,
        rng: &mut R,
    ) -> LabelStore {
        let bits = bucket_bits(entries.len(), bucket_size);
        let records = BucketedRecords::build(
            entries,
            bits,
            |(output, label)| {
                (
                    record::bucket(&record::tag(output), bits),
                    sealed_len(label),
                )
            },
            |(output, label)| {
                let mut nonce = [0u8; NONCE_LEN];
                rng.fill_bytes(&mut nonce);
                record::seal(output, label, nonce)
            },
        );
        LabelStore { records }
    }

    /// Bytes held in memory for the records and their layout.
    pub fn heap_bytes(&self) -> usize {
        self.records.heap_bytes()
    }

    /// The number of tag bits that name a bucket (sent to clients with the session).
    pub fn bucket_bits(&self) -> u8 {
        self.records.bits()
    }

    /// Records held.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Bytes of all records together (what fetching every bucket returns, without the
    /// section headers).
    pub fn record_bytes(&self) -> usize {
        self.records.record_bytes()
    }

    /// True if no entry has a label.
    pub fn is_empty(&self) -> bool {
        self.records.len() == 0
    }

    /// Answers a fetch request of at most `max_buckets` bucket ids: one section per
    /// distinct requested bucket, in ascending order (an empty section for an empty
    /// bucket). Repeated ids are answered once, but count against `max_buckets`: the
    /// request's length is checked before it is decoded or sorted.
    pub fn answer_fetch(&self, request: &[u8], max_buckets: usize) -> Result<Vec<u8>> {
        let named = request.len() / messages::BUCKET_ID_LEN;
        if request.len().is_multiple_of(messages::BUCKET_ID_LEN) && named > max_buckets {
            return Err(Error::InputTooLarge {
                what: "label buckets requested",
                value: named as u64,
                limit: max_buckets as u64,
            });
        }
        let mut ids = messages::decode_request(request)?;
        ids.sort_unstable();
        ids.dedup();
        if ids
            .iter()
            .any(|&b| u64::from(b) >= 1u64 << self.records.bits())
        {
            return Err(DecodeError::InvalidParameter {
                what: "bucket id (must be below 2^label_bucket_bits)",
            }
            .into());
        }
        let mut out = Vec::new();
        for b in ids {
            let recs = self.records.bucket(b);
            messages::push_section(&mut out, b, recs);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_bits_target() {
        assert_eq!(bucket_bits(0, 32), 0);
        assert_eq!(bucket_bits(63, 32), 0);
        assert_eq!(bucket_bits(64, 32), 1);
        assert_eq!(bucket_bits(1_000_000, 32), 14);
        assert_eq!(bucket_bits(usize::MAX, 1), 24);
    }
}
