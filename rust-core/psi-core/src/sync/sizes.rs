//! The bytes sync mode moves, as the design predicts them (docs/protocol/sync.md §6):
//! expected values for uniformly random tags, which `examples/sync_scale.rs` sets beside
//! measured sizes at 10^6 and 10^7 entries and extrapolates to 10^8.

use super::confirm::{
    RECORD_LABEL_OVERHEAD, RECORD_MIN_LEN, REQUEST_HEADER_LEN, RESPONSE_HEADER_LEN,
};
use super::messages::{DELTA_OVERHEAD, SNAPSHOT_OVERHEAD, TAG_LIST_HEADER_LEN};
use crate::dh::messages::ELEMENTS_OVERHEAD;
use crate::labels::{fetch_buckets, messages::SECTION_HEADER_LEN};
use crate::oprf::ELEMENT_LEN;

/// Expected coded bits of `count` uniformly random `width`-bit tags with the best Rice
/// parameter. The gaps between sorted tags are close to geometric with
/// `P(d >= x) = q^x`, `1/q = 1 + count / 2^w`, so a gap costs `k + 1` bits plus a unary
/// quotient of expected length `1 / ((1 + count / 2^w)^(2^k) - 1)`:
/// `count * min_k (k + 1 + 1 / ((1 + count / 2^w)^(2^k) - 1))`. (For sparse lists this is
/// dh-psi.md §6's `1 / (e^(2^k n / 2^L) - 1)`; a synced set is dense, a few bits per tag,
/// where the exponential form undercounts by about 6%.)
pub fn tag_list_bits(count: u64, width: u8) -> f64 {
    if count == 0 {
        return 0.0;
    }
    let c = count as f64;
    let density = (c / (2f64).powi(i32::from(width))).ln_1p();
    (0..=width)
        .map(|k| {
            let grown = ((2f64).powi(i32::from(k)) * density).exp_m1();
            f64::from(k) + 1.0 + 1.0 / grown
        })
        .fold(f64::INFINITY, f64::min)
        * c
}

/// Expected bytes of a tag list on the wire.
pub fn tag_list_bytes(count: u64, width: u8) -> f64 {
    TAG_LIST_HEADER_LEN as f64 + (tag_list_bits(count, width) / 8.0).ceil()
}

/// Expected bytes of a snapshot of `registry_items` entries: the first sync.
pub fn snapshot_bytes(registry_items: u64, width: u8) -> f64 {
    SNAPSHOT_OVERHEAD as f64 + tag_list_bytes(registry_items, width)
}

/// Expected bytes of a delta with `added` and `removed` entries.
pub fn delta_bytes(added: u64, removed: u64, width: u8) -> f64 {
    DELTA_OVERHEAD as f64 + tag_list_bytes(added, width) + tag_list_bytes(removed, width)
}

/// Expected bytes, both ways, of a sync-mode run of `client_items` items against
/// `registry_items` entries in `2^bucket_bits` buckets, of which a fraction `labelled`
/// carry a label of `label_len` bytes, when the candidates fall in `candidate_buckets`
/// distinct buckets: the query and evaluation, the fetch request and the response
/// (`K` sections of `R / 2^b` records each on average, plus one for each bucket fetched
/// because a candidate's entry is in it). The request's size depends on `n` and `b`
/// only; the response's also on the records of the fetched buckets, which the server
/// chose to send.
pub fn run_bytes(
    client_items: u64,
    registry_items: u64,
    bucket_bits: u8,
    labelled: f64,
    label_len: f64,
    candidate_buckets: f64,
) -> f64 {
    let n = client_items as usize;
    let k = fetch_buckets(n, bucket_bits) as f64;
    let elements = 2.0 * (ELEMENTS_OVERHEAD + ELEMENT_LEN * n) as f64;
    let request = (REQUEST_HEADER_LEN + 4 * fetch_buckets(n, bucket_bits)) as f64;
    let per_bucket = registry_items as f64 / (2f64).powi(i32::from(bucket_bits));
    let record = RECORD_MIN_LEN as f64 + labelled * (RECORD_LABEL_OVERHEAD as f64 + label_len);
    let records = k * per_bucket + candidate_buckets.min(k);
    let response = RESPONSE_HEADER_LEN as f64 + k * SECTION_HEADER_LEN as f64 + records * record;
    elements + request + response
}

/// Expected distinct buckets the candidates of `client_items` items fall in, `matches`
/// of them registered and the rest candidates with probability `rate`, among
/// `2^bucket_bits` buckets.
pub fn candidate_buckets(client_items: u64, matches: u64, rate: f64, bucket_bits: u8) -> f64 {
    let d = matches as f64 + rate * client_items.saturating_sub(matches) as f64;
    let buckets = (2f64).powi(i32::from(bucket_bits));
    // Distinct among d uniform draws.
    buckets * -(-d / buckets).exp_m1()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_adr_figures() {
        // About 2.8 to 3.3 bits per entry at f = 1 (ADR 0047 §3.1 estimated 2.6 to 3.2 with
        // the exponential form).
        for (r, w, lo, hi) in [
            (1_000_000u64, 21u8, 2.6, 3.0),
            (10_000_000, 25, 3.0, 3.5),
            (100_000_000, 28, 2.9, 3.3),
        ] {
            let bits = tag_list_bits(r, w) / r as f64;
            assert!((lo..hi).contains(&bits), "{r}: {bits}");
        }
        assert_eq!(tag_list_bits(0, 20), 0.0);
        // A run of 1,000 items against 10^8 in 2^23 buckets stays under 1.5 MB.
        assert!(run_bytes(1_000, 100_000_000, 23, 1.0, 11.0, 700.0) < 1.5e6);
        let d = candidate_buckets(1_000, 500, 0.3, 23);
        assert!((649.0..650.0).contains(&d), "{d}");
    }
}
