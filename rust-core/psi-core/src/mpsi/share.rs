//! A member's share of the members' intersection GBF (IOP18 Fig. 2, "Local GBFs generation"
//! and "Obtaining intermediate shares", with the seeds of IOP18 §4 "Sending short seeds").
//!
//! - `GBF_j`: DCW13's `BuildGBF` with target zero. Every cell starts uniformly random (an
//!   AES-CTR stream under a key from the member's RNG); each item, in order, takes the first
//!   of its distinct positions that no earlier item claimed as its final cell and sets it so
//!   that the XOR of the cells at its positions is zero; all its positions are then claimed.
//!   An item whose positions are all claimed fails the build (probability at most `2^-k` per
//!   item, [`super::params`]).
//! - The zero share `Z_j = ⊕_{i != j} PRG(s_{ij})`: `s_{ij} = s_{ji}` is the pairwise seed of
//!   members `i` and `j` ([`super::pairwise`]), so `⊕_j Z_j = 0`.
//! - The share `GBF_j ⊕ Z_j`: uniform to anyone who lacks one of `j`'s pairwise seeds, and
//!   the XOR over all members is `⊕_j GBF_j`, whose cells at the positions of an item in
//!   every member's set XOR to zero.
//!
//! Cell `p` of a stream is its bytes `8p .. 8p + w` (`w`-byte cells in 8-byte slots), held in
//! a u64 as `LE64(bytes 8p .. 8p + 7) & mask`.

use super::params::Params;
use crate::error::{Error, Result};
use crate::ote::prc::{Block, Prg};
use zeroize::Zeroizing;

/// Cells per PRG call.
const STREAM_CELLS: usize = 4096;

/// XORs cells `0 .. cells.len()` of the AES-CTR stream under `key` into `cells`.
pub(crate) fn xor_stream(cells: &mut [u64], key: &Block, mask: u64) {
    let prg = Prg::new(key);
    let mut buf = Zeroizing::new(vec![0u8; STREAM_CELLS * 8]);
    for (c, part) in cells.chunks_mut(STREAM_CELLS).enumerate() {
        let bytes = &mut buf[..part.len().div_ceil(2) * 16];
        prg.fill((c * STREAM_CELLS / 2) as u64, bytes);
        for (cell, b) in part.iter_mut().zip(bytes.chunks_exact(8)) {
            *cell ^= u64::from_le_bytes(b.try_into().expect("8 bytes")) & mask;
        }
    }
}

/// `GBF_j` of the items with distinct positions `positions`: random cells from `key`, then
/// each item's final cell. `Err(GbfInsertionFailed)` if an item finds no free cell.
pub(crate) fn garbled_filter(
    positions: &[Vec<u32>],
    p: &Params,
    key: &Block,
) -> Result<Zeroizing<Vec<u64>>> {
    let m = p.filter_bits as usize;
    let mut cells = Zeroizing::new(vec![0u64; m]);
    xor_stream(&mut cells, key, p.cell_mask());
    // Which cells the items claimed: as secret as their positions.
    let mut claimed = Zeroizing::new(vec![0u64; m.div_ceil(64)]);
    let is_claimed = |c: &[u64], q: u32| (c[q as usize / 64] >> (q % 64)) & 1 == 1;
    for ps in positions {
        let Some(&last) = ps.iter().find(|&&q| !is_claimed(&claimed, q)) else {
            return Err(Error::GbfInsertionFailed {
                items: positions.len() as u64,
                bits: p.filter_bits as u64,
            });
        };
        let mut acc = 0u64;
        for &q in ps {
            if q != last {
                acc ^= cells[q as usize];
            }
            claimed[q as usize / 64] |= 1 << (q % 64);
        }
        cells[last as usize] = acc;
    }
    Ok(cells)
}

/// The member's share: `GBF_j` XOR the PRG streams of its pairwise seeds.
pub(crate) fn share(
    positions: &[Vec<u32>],
    p: &Params,
    key: &Block,
    pair_seeds: &[Block],
) -> Result<Zeroizing<Vec<u64>>> {
    let mut cells = garbled_filter(positions, p, key)?;
    for s in pair_seeds {
        xor_stream(&mut cells, s, p.cell_mask());
    }
    Ok(cells)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gbf::bloom;

    fn positions_of(items: &[Vec<u8>], p: &Params) -> Vec<Vec<u32>> {
        bloom::digests(items)
            .iter()
            .map(|d| {
                let mut v = Vec::new();
                bloom::positions(d, p.hashes, p.filter_bits, &mut v);
                v
            })
            .collect()
    }

    fn xor_at(cells: &[u64], ps: &[u32]) -> u64 {
        ps.iter().fold(0, |a, &q| a ^ cells[q as usize])
    }

    /// Every inserted item's cells XOR to zero; other items' cells do not; the cells are
    /// `w` bytes.
    #[test]
    fn inserted_items_xor_to_zero() {
        let p = Params::new(2, 500, 500).unwrap();
        let items: Vec<Vec<u8>> = (0u32..500).map(|i| i.to_be_bytes().to_vec()).collect();
        let others: Vec<Vec<u8>> = (500u32..1000).map(|i| i.to_be_bytes().to_vec()).collect();
        let g = garbled_filter(&positions_of(&items, &p), &p, &[7; 16]).unwrap();
        for ps in positions_of(&items, &p) {
            assert_eq!(xor_at(&g, &ps), 0);
        }
        for ps in positions_of(&others, &p) {
            assert_ne!(xor_at(&g, &ps), 0);
        }
        assert!(g.iter().all(|&c| c <= p.cell_mask()));
        assert!(g.iter().any(|&c| c > p.cell_mask() >> 8));
    }

    /// The shares of three members XOR to the XOR of their filters: the pairwise streams
    /// cancel.
    #[test]
    fn pairwise_streams_cancel() {
        let p = Params::new(4, 10, 10).unwrap();
        let (s12, s13, s23) = ([1u8; 16], [2u8; 16], [3u8; 16]);
        let none: Vec<Vec<u32>> = Vec::new();
        let a = share(&none, &p, &[9; 16], &[s12, s13]).unwrap();
        let b = share(&none, &p, &[8; 16], &[s12, s23]).unwrap();
        let c = share(&none, &p, &[7; 16], &[s13, s23]).unwrap();
        let ga = garbled_filter(&none, &p, &[9; 16]).unwrap();
        let gb = garbled_filter(&none, &p, &[8; 16]).unwrap();
        let gc = garbled_filter(&none, &p, &[7; 16]).unwrap();
        for q in 0..p.filter_bits as usize {
            assert_eq!(a[q] ^ b[q] ^ c[q], ga[q] ^ gb[q] ^ gc[q]);
        }
        assert_ne!(a[..], ga[..]);
    }

    /// A share alone does not give its member's items away: with a pairwise stream in it,
    /// the cells of an inserted item no longer XOR to zero.
    #[test]
    fn a_share_alone_hides_the_filter() {
        let p = Params::new(3, 200, 200).unwrap();
        let items: Vec<Vec<u8>> = (0u32..200).map(|i| i.to_be_bytes().to_vec()).collect();
        let ps = positions_of(&items, &p);
        let s = share(&ps, &p, &[4; 16], &[[5; 16]]).unwrap();
        assert!(ps.iter().all(|q| xor_at(&s, q) != 0));
    }

    /// A filter far too small for its items fails with a typed error.
    #[test]
    fn a_full_filter_is_an_error() {
        let p = Params::new(2, 1, 1).unwrap();
        let items: Vec<Vec<u8>> = (0u32..600).map(|i| i.to_be_bytes().to_vec()).collect();
        assert!(matches!(
            garbled_filter(&positions_of(&items, &p), &p, &[1; 16]),
            Err(Error::GbfInsertionFailed { .. })
        ));
    }
}
