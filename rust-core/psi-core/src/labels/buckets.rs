//! Records grouped by bucket in one buffer: how the server keeps both kinds of record
//! (version 1 labels, [`super::LabelStore`]; sync mode's version 2 confirmation records,
//! [`crate::sync::ConfirmStore`]).
//!
//! Each record's bucket and length are known before it is sealed (the bucket from its
//! tag, the length from its label's), so the buffer is sized in a first pass and every
//! record written straight into its bucket's place in a second: the records of 10^7
//! entries take their own bytes and one offset per bucket, not a growable list per
//! bucket (which rounds each up by as much as half again, and a hash map beside them).

use super::record::{MAX_BUCKET_BITS, TAG_LEN, bucket};

/// Records by bucket: bucket `b`'s records are `data[starts[b]..starts[b + 1]]`.
#[derive(Clone, Default)]
pub(crate) struct BucketedRecords {
    bits: u8,
    records: usize,
    data: Vec<u8>,
    /// `2^bits + 1` offsets into `data` (empty for an empty layout).
    starts: Vec<usize>,
}

impl BucketedRecords {
    /// Lays out one record per entry in `2^bits` buckets. `place(e)` is the entry's
    /// bucket and its record's length, computed without sealing it; `seal(e)` is the
    /// record, which starts with the tag whose first `bits` bits are that bucket. Both
    /// are called once per entry, `place` over the whole list before any `seal`.
    ///
    /// # Panics
    /// If a record's bucket or length is not what `place` said (a bug of the caller's,
    /// never of the entries': both come from the same output and label).
    pub(crate) fn build<T: Copy>(
        entries: impl Iterator<Item = T> + Clone,
        bits: u8,
        place: impl Fn(T) -> (u32, usize),
        mut seal: impl FnMut(T) -> Vec<u8>,
    ) -> BucketedRecords {
        let bits = bits.min(MAX_BUCKET_BITS);
        let n = 1usize << bits;
        let mut starts = vec![0usize; n + 1];
        let mut records = 0;
        for e in entries.clone() {
            let (b, len) = place(e);
            starts[b as usize + 1] += len;
            records += 1;
        }
        for i in 0..n {
            starts[i + 1] += starts[i];
        }
        let mut data = vec![0u8; starts[n]];
        let mut cursor = starts[..n].to_vec();
        for e in entries {
            let rec = seal(e);
            let mut tag = [0u8; TAG_LEN];
            tag.copy_from_slice(&rec[..TAG_LEN]);
            let b = bucket(&tag, bits) as usize;
            let at = cursor[b];
            assert!(
                at + rec.len() <= starts[b + 1],
                "a record is not in the bucket or of the length its entry was placed with"
            );
            data[at..at + rec.len()].copy_from_slice(&rec);
            cursor[b] = at + rec.len();
        }
        assert!(
            cursor.iter().zip(&starts[1..]).all(|(c, end)| c == end),
            "fewer records were sealed than placed"
        );
        BucketedRecords {
            bits,
            records,
            data,
            starts,
        }
    }

    /// The bucket bits the records were laid out with.
    pub(crate) fn bits(&self) -> u8 {
        self.bits
    }

    /// Records held.
    pub(crate) fn len(&self) -> usize {
        self.records
    }

    /// Bytes of all records.
    pub(crate) fn record_bytes(&self) -> usize {
        self.data.len()
    }

    /// Bucket `b`'s records, back to back (empty for an empty bucket or one beyond the
    /// layout).
    pub(crate) fn bucket(&self, b: u32) -> &[u8] {
        let b = b as usize;
        match (self.starts.get(b), self.starts.get(b + 1)) {
            (Some(&from), Some(&to)) => &self.data[from..to],
            _ => &[],
        }
    }

    /// Bytes held for the layout and the records (what a registry's memory report
    /// counts).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.data.capacity() + self.starts.capacity() * std::mem::size_of::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record of `len` bytes whose tag starts with `b` (in the top `bits` bits).
    fn rec(b: u32, bits: u8, len: usize, fill: u8) -> Vec<u8> {
        let mut r = vec![fill; len.max(TAG_LEN)];
        let top = if bits == 0 {
            0
        } else {
            b << (32 - u32::from(bits))
        };
        r[..4].copy_from_slice(&top.to_be_bytes());
        r
    }

    #[test]
    fn records_land_in_their_buckets_in_entry_order_and_take_their_own_bytes() {
        let bits = 3;
        // (bucket, length, fill): buckets 1 and 5 twice, 7 once, the others empty.
        let entries = [
            (5u32, 20usize, 1u8),
            (1, 16, 2),
            (5, 40, 3),
            (7, 18, 4),
            (1, 30, 5),
        ];
        let r = BucketedRecords::build(
            entries.iter().copied(),
            bits,
            |(b, len, _)| (b, len),
            |(b, len, fill)| rec(b, bits, len, fill),
        );
        assert_eq!((r.len(), r.bits()), (5, 3));
        assert_eq!(r.record_bytes(), 20 + 16 + 40 + 18 + 30);
        assert_eq!(r.bucket(5), [rec(5, 3, 20, 1), rec(5, 3, 40, 3)].concat());
        assert_eq!(r.bucket(1), [rec(1, 3, 16, 2), rec(1, 3, 30, 5)].concat());
        assert_eq!(r.bucket(7), rec(7, 3, 18, 4));
        for empty in [0, 2, 3, 4, 6, 8, 1 << 20, u32::MAX] {
            assert!(r.bucket(empty).is_empty(), "{empty}");
        }
        // Exactly the records' bytes and one offset per bucket.
        assert_eq!(r.heap_bytes(), 124 + 9 * std::mem::size_of::<usize>());
    }

    #[test]
    fn an_empty_store_answers_every_bucket_empty() {
        let r = BucketedRecords::build(std::iter::empty::<(u32, usize)>(), 0, |e| e, |_| vec![]);
        assert_eq!((r.len(), r.record_bytes()), (0, 0));
        assert!(r.bucket(0).is_empty());
        assert!(BucketedRecords::default().bucket(0).is_empty());
    }

    /// Both stores place every record by its tag and the length of its label before
    /// sealing it: labels around the cut at `MAX_LABEL_LEN` (a multi-byte character
    /// across it) and none at all must land whole, in their own bucket, and open.
    #[test]
    fn both_stores_place_every_label_length_and_open_in_its_own_bucket() {
        use crate::labels::{LabelStore, MAX_LABEL_LEN, bucket, open, parse_records, tag};
        use crate::sync::{
            ConfirmStore, confirm_tag, open_record, parse_records as parse_records_v2,
        };
        use rand_chacha::rand_core::SeedableRng;
        let mut labels: Vec<String> = [0, 1, 15, 16, MAX_LABEL_LEN - 1, MAX_LABEL_LEN]
            .iter()
            .map(|&n| "a".repeat(n))
            .collect();
        labels.push("a".repeat(MAX_LABEL_LEN + 7));
        labels.push(format!("{}\u{00e9}", "a".repeat(MAX_LABEL_LEN - 1)));
        labels.push(format!("{}\u{1f600}", "a".repeat(MAX_LABEL_LEN - 2)));
        let outputs: Vec<[u8; 64]> = (0..200u8).map(|i| [i; 64]).collect();
        let label_of = |i: usize| labels[i % labels.len()].as_str();
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(7);
        let v1 = LabelStore::build(
            outputs.iter().enumerate().map(|(i, o)| (o, label_of(i))),
            4,
            &mut rng,
        );
        let v2 = ConfirmStore::build(
            1,
            1,
            outputs
                .iter()
                .enumerate()
                .map(|(i, o)| (o, (i % 3 != 0).then(|| label_of(i)))),
            4,
            &mut rng,
        );
        assert_eq!((v1.len(), v2.len()), (200, 200));
        for (i, o) in outputs.iter().enumerate() {
            let want = label_of(i);
            let cut = &want[..crate::labels::cut_len(want)];
            let b = bucket(&tag(o), v1.bucket_bits());
            let recs = v1.records.bucket(b);
            let found: Vec<String> = parse_records(recs)
                .unwrap()
                .iter()
                .filter_map(|r| open(o, r))
                .collect();
            assert_eq!(found, [cut], "v1 entry {i}");
            let b = bucket(&confirm_tag(o), v2.bucket_bits());
            let found: Vec<Option<String>> = parse_records_v2(v2.records.bucket(b))
                .unwrap()
                .iter()
                .filter_map(|r| open_record(o, r).unwrap())
                .collect();
            assert_eq!(
                found,
                [(i % 3 != 0).then(|| cut.to_string())],
                "v2 entry {i}"
            );
        }
        assert_eq!(
            v1.heap_bytes() - v1.record_bytes(),
            ((1 << v1.bucket_bits()) + 1) * std::mem::size_of::<usize>()
        );
    }

    #[test]
    #[should_panic(expected = "not in the bucket or of the length")]
    fn a_record_longer_than_placed_is_a_bug_caught() {
        BucketedRecords::build(
            [(0u32, 16usize)].into_iter(),
            1,
            |e| e,
            |(b, len)| rec(b, 1, len + 1, 0),
        );
    }
}
