//! The fixed shape of a session's label step (docs/protocol/labels.md §5-§6,
//! docs/adr/0018-label-traffic-padding.md): how many elements a label query has and how
//! many buckets a fetch names, both functions of the session's `client_items` `n` and
//! its bucket layout only, never of the matches; and the smallest bucket occupancy a
//! client accepts.
//!
//! The client pads to exactly these counts; the server accepts at most these counts.

use crate::error::{DecodeError, Error, Result};

/// Sessions with at most this many client items get a label slot per item.
pub const MIN_LABEL_SLOTS: usize = 64;

/// Above [`MIN_LABEL_SLOTS`], a session gets one label slot per this many client items.
pub const LABEL_SLOTS_DIVISOR: usize = 4;

/// The fewest registry entries per bucket, on average, a client accepts before it
/// fetches buckets that do not cover the whole layout: half the server's default
/// `label_bucket_size` (32), so every server on the default layout passes with a margin
/// of two (docs/adr/0018-label-traffic-padding.md has the reasoning).
pub const MIN_BUCKET_OCCUPANCY: u64 = 16;

/// Label slots of a session with `client_items` items: the number of elements of its
/// label query (OT-PSI) and the most buckets its fetch names.
/// `min(n, max(MIN_LABEL_SLOTS, ceil(n / LABEL_SLOTS_DIVISOR)))`.
pub fn label_slots(client_items: usize) -> usize {
    client_items.min(MIN_LABEL_SLOTS.max(client_items.div_ceil(LABEL_SLOTS_DIVISOR)))
}

/// Buckets a label fetch names: `min(label_slots(n), 2^bucket_bits)` (every bucket when
/// there are no more buckets than slots). Bits above 24 count as 24.
pub fn fetch_buckets(client_items: usize, bucket_bits: u8) -> usize {
    let buckets = 1usize << bucket_bits.min(super::MAX_BUCKET_BITS);
    label_slots(client_items).min(buckets)
}

/// Checks the session's layout before a client asks for labels: `bucket_bits` at most
/// 24, and, unless the fetch covers every bucket, at least [`MIN_BUCKET_OCCUPANCY`]
/// registry entries per bucket on average (`registry_items / 2^bucket_bits`, both from
/// the session). Otherwise [`Error::LabelLayoutTooFine`].
pub fn check_layout(client_items: usize, registry_items: u64, bucket_bits: u8) -> Result<()> {
    if bucket_bits > super::MAX_BUCKET_BITS {
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
        assert_eq!(label_slots(0), 0);
        assert_eq!(label_slots(1), 1);
        assert_eq!(label_slots(64), 64);
        assert_eq!(label_slots(65), 64);
        assert_eq!(label_slots(256), 64);
        assert_eq!(label_slots(257), 65);
        assert_eq!(label_slots(1_000), 250);
        assert_eq!(label_slots(10_000), 2_500);
        for n in 0..5_000 {
            assert!(label_slots(n) <= n);
        }
        assert_eq!(fetch_buckets(1_000, 14), 250);
        assert_eq!(fetch_buckets(1_000, 7), 128);
        assert_eq!(fetch_buckets(1_000, 0), 1);
        assert_eq!(fetch_buckets(5, 30), 5);
    }

    #[test]
    fn layout_minimum() {
        // 10^6 entries at the default 32 per bucket: 2^14 buckets, about 61 each.
        assert!(check_layout(1_000, 1_000_000, 14).is_ok());
        // Exactly 16 per bucket passes; one entry fewer does not.
        assert!(check_layout(10, 16 << 10, 10).is_ok());
        assert!(matches!(
            check_layout(10, (16 << 10) - 1, 10),
            Err(Error::LabelLayoutTooFine {
                buckets: 1024,
                minimum: 16,
                ..
            })
        ));
        // 2^24 buckets over 10^6 entries: refused.
        assert!(check_layout(1_000, 1_000_000, 24).is_err());
        // A fetch of every bucket is fine whatever the occupancy (a tiny registry).
        assert!(check_layout(10, 3, 1).is_ok());
        assert!(check_layout(100, 5, 6).is_ok());
        assert!(check_layout(100, 5, 7).is_err());
        assert!(check_layout(1, 0, 0).is_ok());
        assert!(check_layout(1, 1 << 40, 25).is_err());
    }
}
