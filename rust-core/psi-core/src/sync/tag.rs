//! Short sync tags (docs/protocol/sync.md §2): a few bits of a hash of an entry's
//! OPRF output, so that a download of every entry's tag costs a few bits per entry.
//! A contact whose tag is in the synced set is only a *candidate*; the confirmation
//! ([`super::confirm`]) decides.

use crate::oprf::OUTPUT_LEN;
use sha2::{Digest, Sha512};

/// Domain separation of the sync tag hash.
const SYNC_TAG_DST: &[u8] = b"psi-sync-tag-v1";

/// Narrowest tag width.
pub const MIN_SYNC_WIDTH: u8 = 1;
/// Widest tag width: 48 bits, enough for `2^46` entries at the default extra bits.
pub const MAX_SYNC_WIDTH: u8 = 48;
/// Bits of width above `ceil(log2 R)` by default (`f`): at a sync epoch's start a contact
/// outside the registry is a candidate with probability between 0.22 and 0.40
/// (`R / 2^w` in `(1/4, 1/2]`; docs/protocol/sync.md §2).
pub const DEFAULT_EXTRA_BITS: u8 = 1;

/// The sync tag of an OPRF output at width `w` (`MIN_SYNC_WIDTH..=MAX_SYNC_WIDTH`;
/// others are clamped): `u64(SHA-512("psi-sync-tag-v1" || o)[0..8]) >> (64 - w)`.
pub fn sync_tag(output: &[u8; OUTPUT_LEN], width: u8) -> u64 {
    let w = width.clamp(MIN_SYNC_WIDTH, MAX_SYNC_WIDTH);
    let h = Sha512::new()
        .chain_update(SYNC_TAG_DST)
        .chain_update(output)
        .finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&h[..8]);
    u64::from_be_bytes(first) >> (64 - u32::from(w))
}

/// The tag width of a sync epoch whose registry holds `registry_items` entries when it
/// starts: `ceil(log2 max(R, 1)) + extra_bits`, clamped to
/// `MIN_SYNC_WIDTH..=MAX_SYNC_WIDTH`. Integer arithmetic only, so every implementation
/// gets the same width.
pub fn sync_width(registry_items: u64, extra_bits: u8) -> u8 {
    let r = registry_items.max(1);
    // ceil(log2 r): the bit length of r - 1 (0 for r = 1).
    let ceil_log2 = (64 - (r - 1).leading_zeros()) as u8;
    ceil_log2
        .saturating_add(extra_bits)
        .clamp(MIN_SYNC_WIDTH, MAX_SYNC_WIDTH)
}

/// The chance that a contact outside the registry is a candidate, at most
/// `R / 2^w` (a union bound over the `R` tags; the exact value is
/// `1 - (1 - 2^-w)^R`, slightly less).
pub fn candidate_rate(registry_items: u64, width: u8) -> f64 {
    let w = width.clamp(MIN_SYNC_WIDTH, MAX_SYNC_WIDTH);
    1.0 - (1.0 - 0.5f64.powi(i32::from(w))).powf(registry_items as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths() {
        assert_eq!(sync_width(0, 1), 1);
        assert_eq!(sync_width(1, 1), 1);
        assert_eq!(sync_width(2, 1), 2);
        assert_eq!(sync_width(1_000_000, 1), 21);
        assert_eq!(sync_width(10_000_000, 1), 25);
        assert_eq!(sync_width(100_000_000, 1), 28);
        assert_eq!(sync_width(1 << 20, 1), 21);
        assert_eq!(sync_width((1 << 20) + 1, 1), 22);
        assert_eq!(sync_width(u64::MAX, 1), MAX_SYNC_WIDTH);
        assert_eq!(sync_width(1_000_000, 2), 22);
    }

    #[test]
    fn tags_fit_their_width_and_differ_by_output() {
        for w in MIN_SYNC_WIDTH..=MAX_SYNC_WIDTH {
            let t = sync_tag(&[0xFF; OUTPUT_LEN], w);
            assert!(t >> w == 0);
        }
        assert_ne!(
            sync_tag(&[1; OUTPUT_LEN], 40),
            sync_tag(&[2; OUTPUT_LEN], 40)
        );
        // A narrower tag is the prefix of a wider one.
        let o = [9u8; OUTPUT_LEN];
        assert_eq!(sync_tag(&o, 40) >> 15, sync_tag(&o, 25));
    }

    #[test]
    fn candidate_rate_at_the_default_width() {
        for r in [1_000u64, 1_000_000, 10_000_000, 100_000_000] {
            let rho = candidate_rate(r, sync_width(r, DEFAULT_EXTRA_BITS));
            assert!((0.22..0.40).contains(&rho), "{r}: {rho}");
        }
    }
}
