//! The Bloom filter both sides index (spec §3): each item's `k` positions in a filter of
//! `m` bits, the client's filter bits (its choice bits in the random OTs), and the value
//! of an item, the XOR of the OT seeds at its positions (PSZ14 §4.3's random garbled
//! Bloom filter).
//!
//! - `digest(x) = SHA-256(ds_item, x)[0..16]`: it does not depend on the session, so a
//!   server could keep it for its registry.
//! - positions: the words `w_j = LE64` of bytes `8j .. 8j + 7` of the AES-128 CTR stream
//!   under key `digest(x)` (stream block `b` is `AES(LE128 b)`), `p_j = (w_j · m) >> 64`
//!   for `j < k`; an item's position *set* is the distinct `p_j` (a repeated position
//!   counts once, in the filter and in the value).
//! - value: `V(x) = ⊕_{p in positions(x)} seed_p`, the top `ℓ` bits of it read as a
//!   big-endian u128. The server uses `seed¹_p` at every position; the client holds
//!   `seed¹_p` exactly where its filter has a one, so it can compute `V(x)` for its own
//!   items (and, with probability at most `2^-k` each, for items it does not hold: the
//!   filter's false positives, which the parameters bound, `params`).

use super::params::INSTANCE_BITS;
use crate::items::ItemList;
use crate::ote::prc::{Block, Midstate, Prg, Row};
use rayon::prelude::*;
use zeroize::Zeroizing;

/// Domain separators (spec §3).
pub(crate) mod ds {
    pub(crate) const SESSION: &[u8] = b"PSI-GBF-v1 session";
    pub(crate) const ITEM: &[u8] = b"PSI-GBF-v1 item";
}

/// Items hashed per task.
const BATCH: usize = 1024;

/// `digest(x)` of every item.
pub(crate) fn digests(items: &(impl ItemList + ?Sized)) -> Zeroizing<Vec<Block>> {
    let mut p = vec![ds::ITEM.len() as u8];
    p.extend_from_slice(ds::ITEM);
    let prefix = Midstate::new(&p);
    let mut out = Zeroizing::new(vec![[0u8; 16]; items.count()]);
    out.par_chunks_mut(BATCH).enumerate().for_each(|(c, out)| {
        for (j, o) in out.iter_mut().enumerate() {
            let h = Zeroizing::new(prefix.hash(items.item(c * BATCH + j)));
            o.copy_from_slice(&h[..16]);
        }
    });
    out
}

/// The distinct positions of the item with digest `d` among `m`, sorted, into `out`
/// (cleared first).
pub(crate) fn positions(d: &Block, hashes: u32, filter_bits: u32, out: &mut Vec<u32>) {
    out.clear();
    let prg = Prg::new(d);
    let mut words = prg.words();
    for _ in 0..hashes {
        let w = words.next_u64();
        out.push(((w as u128 * filter_bits as u128) >> 64) as u32);
    }
    out.sort_unstable();
    out.dedup();
}

/// The client's filter: bit `p` is one iff `p` is a position of one of its items. As
/// the OTs' choice rows, 64 bytes per IKNP instance, bit `p` at byte `p / 8`, bit `p % 8`.
pub(crate) fn filter(all_positions: &[Vec<u32>], filter_bits: u32) -> Zeroizing<Vec<Row>> {
    let rows = (filter_bits / INSTANCE_BITS) as usize;
    let mut f = Zeroizing::new(vec![[0u8; 64]; rows]);
    for ps in all_positions {
        for &p in ps {
            let p = p as usize;
            f[p / INSTANCE_BITS as usize][(p % INSTANCE_BITS as usize) / 8] |= 1 << (p % 8);
        }
    }
    f
}

/// `V(x)` from the seeds at positions `ps`: their XOR's top `ℓ` bits.
pub(crate) fn value(seeds: &[Block], ps: &[u32], output_bits: u32) -> u128 {
    let mut acc = 0u128;
    for &p in ps {
        acc ^= u128::from_be_bytes(seeds[p as usize]);
    }
    acc >> (128 - output_bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_distinct_sorted_and_in_range() {
        let d = digests(&[b"alice@example.com".to_vec(), b"bob".to_vec()]);
        assert_ne!(d[0], d[1]);
        let mut ps = Vec::new();
        positions(&d[0], 57, 82_432, &mut ps);
        assert!(ps.windows(2).all(|w| w[0] < w[1]));
        assert!(ps.iter().all(|&p| p < 82_432));
        assert!(ps.len() > 50);
        // A tiny filter: repeats collapse.
        positions(&d[0], 57, 512, &mut ps);
        assert!(ps.len() < 57 && ps.iter().all(|&p| p < 512));
    }

    /// About half the bits of a filter at its optimal size are ones (PSZ14 §4.3,
    /// "Efficiency"), and every item's positions are ones.
    #[test]
    fn an_optimal_filter_is_half_full() {
        let items: Vec<Vec<u8>> = (0u32..2000).map(|i| i.to_be_bytes().to_vec()).collect();
        let p = super::super::params::Params::new(2000, 1 << 16).unwrap();
        let d = digests(&items);
        let all: Vec<Vec<u32>> = d
            .iter()
            .map(|d| {
                let mut v = Vec::new();
                positions(d, p.hashes, p.filter_bits, &mut v);
                v
            })
            .collect();
        let f = filter(&all, p.filter_bits);
        let ones: u32 = f.iter().flatten().map(|b| b.count_ones()).sum();
        let frac = ones as f64 / p.filter_bits as f64;
        assert!((0.47..0.53).contains(&frac), "{frac}");
        for ps in &all {
            for &q in ps {
                let q = q as usize;
                assert_eq!((f[q / 512][(q % 512) / 8] >> (q % 8)) & 1, 1);
            }
        }
    }
}
