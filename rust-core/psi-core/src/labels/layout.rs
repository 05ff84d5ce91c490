//! The fixed shape of a session's label step (docs/protocol/labels.md §5-§6,
//! docs/adr/0033-a-label-for-every-match.md): how many elements a label query has and
//! how many buckets a fetch names, both functions of the session's `client_items` `n`
//! and its bucket layout only, never of the matches; and the smallest bucket occupancy a
//! client accepts.
//!
//! Every item has a label slot, so every match gets its label; the client pads to
//! exactly these counts; the server accepts at most these counts.

use crate::error::{DecodeError, Error, Result};

/// The fewest buckets a fetch names (fewer only when the layout has fewer): a session
/// of a few items still hides its matched buckets among at least this many.
pub const MIN_FETCH_BUCKETS: usize = 64;

/// The fewest registry entries per bucket, on average, a client accepts before it
/// fetches buckets that do not cover the whole layout: half the server's default
/// `label_bucket_size` (8), so every server on the default layout passes with a margin
/// of two (docs/adr/0033-a-label-for-every-match.md has the reasoning).
pub const MIN_BUCKET_OCCUPANCY: u64 = 4;

/// Label slots of a session with `client_items` items: the number of elements of its
/// label query (OT-PSI), one per item, so that every match has one.
pub fn label_slots(client_items: usize) -> usize {
    client_items
}

/// Buckets a label fetch names: `min(2^bucket_bits, max(n, MIN_FETCH_BUCKETS))` for a
/// session of `n >= 1` items (every bucket when there are no more buckets than that),
/// 0 for `n = 0`. At least as many as the session has items, so the matches' buckets
/// always fit. Bits above 24 count as 24.
pub fn fetch_buckets(client_items: usize, bucket_bits: u8) -> usize {
    if client_items == 0 {
        return 0;
    }
    let buckets = 1usize << bucket_bits.min(super::record::MAX_BUCKET_BITS);
    label_slots(client_items)
        .max(MIN_FETCH_BUCKETS)
        .min(buckets)
}

/// Checks the session's layout before a client asks for labels: `bucket_bits` at most
/// 24, and, unless the fetch covers every bucket, at least [`MIN_BUCKET_OCCUPANCY`]
/// registry entries per bucket on average (`registry_items / 2^bucket_bits`, both from
/// the session). Otherwise [`Error::LabelLayoutTooFine`].
pub fn check_layout(client_items: usize, registry_items: u64, bucket_bits: u8) -> Result<()> {
    if bucket_bits > super::record::MAX_BUCKET_BITS {
        return Err(DecodeError::InvalidParameter {
            what: "label bucket bits",
        }
        .into());
    }
    let buckets = 1u64 << bucket_bits;
    if fetch_buckets(client_items, bucket_bits) as u64 >= buckets {
        // The fetch names every bucket: it says nothing about the matches.
        return Ok(());
    }
    if registry_items < MIN_BUCKET_OCCUPANCY * buckets {
        return Err(Error::LabelLayoutTooFine {
            registry_items,
            buckets,
            minimum: MIN_BUCKET_OCCUPANCY,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_and_fetch_counts() {
        for n in 0..5_000 {
            assert_eq!(label_slots(n), n);
        }
        assert_eq!(fetch_buckets(0, 14), 0);
        assert_eq!(fetch_buckets(1, 16), 64);
        assert_eq!(fetch_buckets(64, 16), 64);
        assert_eq!(fetch_buckets(65, 16), 65);
        assert_eq!(fetch_buckets(1_000, 16), 1_000);
        assert_eq!(fetch_buckets(1_000, 7), 128);
        assert_eq!(fetch_buckets(1, 3), 8);
        assert_eq!(fetch_buckets(1_000, 0), 1);
        assert_eq!(fetch_buckets(5, 30), 64);
        assert_eq!(fetch_buckets(1 << 25, 30), 1 << 24);
        // The matches' distinct buckets always fit: at most min(n, 2^b) of them.
        for n in 1..300 {
            for b in 0..=12u8 {
                assert!(fetch_buckets(n, b) >= n.min(1 << b));
            }
        }
    }

    #[test]
    fn layout_minimum() {
        // 10^6 entries at the default 8 per bucket: 2^16 buckets, about 15 each.
        assert!(check_layout(1_000, 1_000_000, 16).is_ok());
        // Exactly 4 per bucket passes; one entry fewer does not.
        assert!(check_layout(10, 4 << 10, 10).is_ok());
        assert!(matches!(
            check_layout(10, (4 << 10) - 1, 10),
            Err(Error::LabelLayoutTooFine {
                buckets: 1024,
                minimum: 4,
                ..
            })
        ));
        // 2^24 buckets over 10^6 entries: refused.
        assert!(check_layout(1_000, 1_000_000, 24).is_err());
        // A fetch of every bucket is fine whatever the occupancy (a tiny registry).
        assert!(check_layout(10, 3, 1).is_ok());
        assert!(check_layout(100, 5, 6).is_ok());
        assert!(check_layout(100, 5, 7).is_err());
        assert!(check_layout(1, 5, 6).is_ok());
        assert!(check_layout(1, 5, 7).is_err());
        assert!(check_layout(1, 0, 0).is_ok());
        assert!(check_layout(1, 1 << 40, 25).is_err());
    }
}
