//! Group PSI parameters, derived the same way by every party from the number of parties
//! `t`, the leader's set size `n_0` and the largest set size `N` (docs/protocol/group-psi.md
//! §2, where the table stands).
//!
//! - `N = max(n_0, n_1, ..., n_{t-1})`: one filter size for every party. The leader's Bloom
//!   filter `BF_0` and every member's garbled Bloom filter `GBF_j` share `m` and the hash
//!   functions (IOP18 Fig. 2: all parties hold `m, k, λ`; IOP18 Def. 1 sizes them from the
//!   bound `M` on any set, here the largest declared size).
//! - `k = 40 + ceil(log2((t - 1) N))` ([`gbf::params::hashes`] of `(t - 1) N`). Two things
//!   fail with probability at most `2^-k` per item when `m >= k N / ln 2` (DCW13 §6.1): an
//!   item of a member that is not in the leader's set is a false positive of `BF_0` (the
//!   leader then receives all of its cells, PSZ14 §4.3 "Security"), and a member's item finds
//!   no free cell when it is inserted into `GBF_j` (DCW13's `BuildGBF`). The union bound over
//!   the at most `(t - 1) N` member items gives `2^-40` per run.
//! - `m = ceil(1.442696 k N)` rounded up to 512 ([`gbf::params::filter_bits`], GBF-PSI's rule
//!   with `N` for `n_c`).
//! - `ℓ`, the bits of a cell: `40 + ceil(log2 n_0)` rounded up to whole bytes (`w = ℓ / 8`
//!   bytes on the wire, at most 8 for `n_0 <= 2^24`). The leader tests each of its `n_0`
//!   items once against zero; an item outside the intersection has a uniform `ℓ`-bit sum, so
//!   a run reports a false match with probability at most `n_0 2^-ℓ <= 2^-40` (IOP18's `λ`,
//!   DCW13 §6.1's string length for a false-positive probability `2^-λ` per query).
//! - Computational security 128 bits: 128 base OTs (MR19 over ristretto255) extended by IKNP,
//!   AES-128, SHA-256, ristretto255 key agreement for the pairwise seeds.

use crate::gbf::params as gbf_params;
use crate::protocol::{STATISTICAL_SECURITY, ceil_log2};

pub use crate::gbf::params::INSTANCE_BITS;

/// Fewest parties: a leader and one member.
pub const MIN_PARTIES: u8 = 2;
/// Most parties (issue 38: 2 to 16 phones).
pub const MAX_PARTIES: u8 = 16;
/// Most items any party may have (2^20).
pub const MAX_ITEMS: u32 = 1 << 20;

/// Bytes of a cell `w` for a leader with `n_0` items.
pub fn cell_bytes(leader_items: u64) -> u32 {
    (STATISTICAL_SECURITY + ceil_log2(leader_items)).div_ceil(8)
}

/// All parameters of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// Parties `t`, the leader included.
    pub parties: u8,
    /// The leader's items `n_0`.
    pub leader_items: u32,
    /// The largest set of any party `N`.
    pub max_items: u32,
    /// Hash functions `k`.
    pub hashes: u32,
    /// Filter bits `m` (the random OTs per member), a multiple of [`INSTANCE_BITS`].
    pub filter_bits: u32,
    /// Bytes of a cell `w` (`ℓ = 8 w` bits).
    pub cell_bytes: u32,
}

impl Params {
    /// The parameters for `t` parties, `n_0` leader items and the largest set `N`
    /// (`None` if `t` is out of range or the filter would not fit a u32).
    pub fn new(parties: u8, leader_items: u32, max_items: u32) -> Option<Params> {
        if !(MIN_PARTIES..=MAX_PARTIES).contains(&parties) || max_items < leader_items {
            return None;
        }
        let members = (parties - 1) as u64;
        let hashes = gbf_params::hashes(members * max_items as u64);
        Some(Params {
            parties,
            leader_items,
            max_items,
            hashes,
            filter_bits: gbf_params::filter_bits(max_items as u64, hashes)?,
            cell_bytes: cell_bytes(leader_items as u64),
        })
    }

    /// IKNP instances per member: `m / 512`.
    pub fn instances(&self) -> u32 {
        self.filter_bits / INSTANCE_BITS
    }

    /// Members `t - 1`.
    pub fn members(&self) -> usize {
        self.parties as usize - 1
    }

    /// The mask of a cell's `8 w` bits in a u64.
    pub(crate) fn cell_mask(&self) -> u64 {
        cell_mask(self.cell_bytes)
    }
}

/// The mask of `w` low bytes.
pub(crate) fn cell_mask(cell_bytes: u32) -> u64 {
    if cell_bytes >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * cell_bytes)) - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table in docs/protocol/group-psi.md §2. A change here is a protocol change.
    #[test]
    fn parameters_match_the_spec_table() {
        let table: &[(u8, u32, u32, u32, u32, u32)] = &[
            // t, n_0, N, k, m, w
            (2, 0, 0, 40, 512, 5),
            (2, 1, 1, 40, 512, 5),
            (3, 1000, 1000, 51, 73_728, 7),
            (2, 1 << 10, 1 << 10, 50, 74_240, 7),
            (8, 1 << 12, 1 << 12, 55, 325_120, 7),
            (2, 1 << 16, 1 << 16, 56, 5_295_104, 7),
            (8, 1 << 16, 1 << 16, 59, 5_578_752, 7),
            (16, 1 << 20, 1 << 20, 64, 96_818_176, 8),
        ];
        for &(t, n0, n, k, m, w) in table {
            let p = Params::new(t, n0, n).unwrap();
            assert_eq!(
                (p.hashes, p.filter_bits, p.cell_bytes),
                (k, m, w),
                "t {t} n0 {n0} N {n}"
            );
        }
    }

    #[test]
    fn out_of_range() {
        assert_eq!(Params::new(1, 1, 1), None);
        assert_eq!(Params::new(17, 1, 1), None);
        assert_eq!(Params::new(3, 10, 9), None);
        assert_eq!(cell_mask(5), 0xff_ffff_ffff);
        assert_eq!(cell_mask(8), u64::MAX);
    }
}
