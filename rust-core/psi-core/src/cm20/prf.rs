//! The hash functions and the PRF of CM20 and the column work both sides share
//! (docs/protocol/cm20-psi.md §3).
//!
//! - `H1(x) = SHA-256(len || ds::H1 || x)` (`l1 = 256` bits; section 3.3).
//! - `F_k(h0 || h1)` (section 4.2, second construction): `k_0 .. k_t` are AES-CTR blocks
//!   `0 .. t` under the client's key `k`; `z = AES_{k_0}(h0) ⊕ h1`, and the output is
//!   `AES_{k_1}(z) || ... || AES_{k_t}(z)`. Index `v[c]` of column `c` is the `log2 m` bits
//!   `c · log2 m ..` of that string (bit `j` is bit `j % 8` of byte `j / 8`), little-endian.
//! - `H2(bits) = SHA-256(len || ds::H2 || sid || zeros to 64 bytes || bits)`, where `bits`
//!   are the `w` looked-up matrix bits (bit `c` in bit `c % 8` of byte `c / 8`,
//!   `ceil(w / 8)` bytes); the output value is the first `l2` bits, big-endian.
//!
//! Matrices are held column by column, and so are the per-item lookups (`acc`: row `c` has
//! bit `i` for item `i`), so that one column (`m / 8` bytes) stays in cache while every item
//! is looked up in it; [`outputs`] transposes `acc` back to one row per item for `H2`.

use crate::ot::prc::{Block, Prg, hash, session_prefix};
use crate::ot::transpose::transpose_cols;
use aes::Aes128;
use aes::cipher::{Array, BlockCipherEncrypt, KeyInit};
use rayon::prelude::*;
use sha2::Digest as _;
use zeroize::Zeroizing;

/// Domain separators.
pub(crate) mod ds {
    pub(crate) const SESSION: &[u8] = b"PSI-CM20-v1 session";
    pub(crate) const H1: &[u8] = b"PSI-CM20-v1 h1";
    pub(crate) const H2: &[u8] = b"PSI-CM20-v1 h2";
    pub(crate) const ROT_SID: &[u8] = b"PSI-CM20-v1 rot sid";
    pub(crate) const ROT_KEY: &[u8] = b"PSI-CM20-v1 rot key";
}

/// Columns one task handles together (they share `F`'s output blocks).
pub(crate) const GROUP: usize = 16;
/// Items a task looks up together (64 Ki items: 3 MiB of `F` output for 16 columns of
/// 20-bit indices), so one column stays in cache while the batch is looked up in it.
const ITEM_BATCH: usize = 1 << 16;

fn cipher(key: &Block) -> Aes128 {
    Aes128::new(&Array::from(*key))
}

fn encrypt(aes: &Aes128, blocks: &mut [Block]) {
    aes.encrypt_blocks(Array::cast_slice_from_core_mut(blocks));
}

/// `F_k`, keyed for one session.
pub(crate) struct Prf {
    k0: Aes128,
    keys: Vec<Aes128>,
    index_bits: u32,
}

impl Prf {
    /// `k_0 .. k_t` from the client's key; `t = prf_blocks`.
    pub(crate) fn new(key: &Block, prf_blocks: usize, index_bits: u32) -> Prf {
        let mut ks = Zeroizing::new(vec![[0u8; 16]; prf_blocks + 1]);
        Prg::new(key).fill(0, ks.as_flattened_mut());
        Prf {
            k0: cipher(&ks[0]),
            keys: ks[1..].iter().map(cipher).collect(),
            index_bits,
        }
    }

    /// `z = AES_{k_0}(h0) ⊕ h1` with `h0 || h1 = H1(x)`, for every item.
    pub(crate) fn inputs(&self, items: &[Vec<u8>]) -> Zeroizing<Vec<Block>> {
        let mut z = Zeroizing::new(vec![[0u8; 16]; items.len()]);
        z.par_chunks_mut(64)
            .zip(items.par_chunks(64))
            .for_each(|(z, items)| {
                let mut h1 = Zeroizing::new([[0u8; 16]; 64]);
                for ((z, h), x) in z.iter_mut().zip(h1.iter_mut()).zip(items) {
                    let d = Zeroizing::new(hash(ds::H1, &[x]));
                    z.copy_from_slice(&d[..16]);
                    h.copy_from_slice(&d[16..]);
                }
                encrypt(&self.k0, z);
                for (z, h) in z.iter_mut().zip(h1.iter()) {
                    for (a, b) in z.iter_mut().zip(h) {
                        *a ^= b;
                    }
                }
            });
        z
    }
}

/// Looks every item up in columns `c0 .. c0 + ncols` (any `c0`): for column `c` and item
/// `i` with index `v = v_c(i)`, sets bit `i` of `acc` row `c - c0` to bit `v` of column `c`
/// of `cols`, and (client) clears bit `v` of column `c` of `clear`.
///
/// `cols` and `clear` hold `ncols` columns of `col_bytes` bytes; `acc` holds `ncols` rows
/// of `acc_bytes >= ceil(n / 64) * 8` bytes.
#[allow(clippy::too_many_arguments)]
pub(crate) fn lookup(
    prf: &Prf,
    z: &[Block],
    c0: usize,
    ncols: usize,
    col_bytes: usize,
    cols: &[u8],
    acc: &mut [u8],
    acc_bytes: usize,
    clear: Option<&mut [u8]>,
) {
    assert_eq!(cols.len(), ncols * col_bytes);
    assert_eq!(acc.len(), ncols * acc_bytes);
    assert!(acc_bytes >= z.len().div_ceil(64) * 8);
    let groups = ncols.div_ceil(GROUP);
    let clears: Vec<Option<&mut [u8]>> = match clear {
        Some(c) => {
            assert_eq!(c.len(), cols.len());
            c.chunks_mut(GROUP * col_bytes).map(Some).collect()
        }
        None => (0..groups).map(|_| None).collect(),
    };
    cols.par_chunks(GROUP * col_bytes)
        .zip(acc.par_chunks_mut(GROUP * acc_bytes))
        .zip(clears)
        .enumerate()
        .for_each(|(g, ((cols, acc), mut clear))| {
            let first = c0 + g * GROUP;
            let gc = cols.len() / col_bytes;
            lookup_group(
                prf, z, first, gc, col_bytes, cols, acc, acc_bytes, &mut clear,
            );
        });
}

#[allow(clippy::too_many_arguments)]
fn lookup_group(
    prf: &Prf,
    z: &[Block],
    c0: usize,
    gc: usize,
    col_bytes: usize,
    cols: &[u8],
    acc: &mut [u8],
    acc_bytes: usize,
    clear: &mut Option<&mut [u8]>,
) {
    let b = prf.index_bits as usize;
    let mask = (1u64 << b) - 1;
    let first_block = c0 * b / 128;
    let last_block = ((c0 + gc) * b - 1) / 128;
    let nb = last_block - first_block + 1;
    // `F`'s output blocks `first_block ..= last_block` of a batch of items as 64-bit
    // little-endian words, word-major: `fw[w * n + i]` is word `w` (bits `64 w ..` of the
    // group's blocks) of item `i`. One word per item and column is read (two when the
    // index straddles a word), with plain 64-bit shifts.
    let mut fw: Zeroizing<Vec<u64>> = Zeroizing::new(Vec::new());
    let mut buf: Zeroizing<Vec<Block>> = Zeroizing::new(Vec::new());
    for (bi, zb) in z.chunks(ITEM_BATCH).enumerate() {
        let n = zb.len();
        let base = bi * ITEM_BATCH;
        fw.clear();
        fw.resize(2 * nb * n, 0);
        for j in 0..nb {
            buf.clear();
            buf.extend_from_slice(zb);
            encrypt(&prf.keys[first_block + j], &mut buf);
            let (lo, hi) = fw[2 * j * n..2 * (j + 1) * n].split_at_mut(n);
            for ((l, h), blk) in lo.iter_mut().zip(hi.iter_mut()).zip(buf.iter()) {
                let (a, c) = blk.split_at(8);
                *l = u64::from_le_bytes(a.try_into().expect("8 bytes"));
                *h = u64::from_le_bytes(c.try_into().expect("8 bytes"));
            }
        }
        for k in 0..gc {
            let bit = (c0 + k) * b - first_block * 128;
            let (wi, sh) = (bit / 64, (bit % 64) as u32);
            let lo = &fw[wi * n..(wi + 1) * n];
            let col = &cols[k * col_bytes..(k + 1) * col_bytes];
            let row = &mut acc[k * acc_bytes..(k + 1) * acc_bytes];
            let out = &mut row[base / 8..base / 8 + n.div_ceil(64) * 8];
            let clear_col = clear
                .as_deref_mut()
                .map(|d| &mut d[k * col_bytes..(k + 1) * col_bytes]);
            // An index that straddles two words takes its high bits from the next one.
            if sh as usize + b > 64 {
                let hi = &fw[(wi + 1) * n..(wi + 2) * n];
                let v = |t: usize| ((lo[t] >> sh) | (hi[t] << (64 - sh))) & mask;
                scan(n, v, col, clear_col, out);
            } else {
                let v = |t: usize| (lo[t] >> sh) & mask;
                scan(n, v, col, clear_col, out);
            }
        }
    }
}

/// For items `0 .. n` with index `v(t)`: bit `t` of `out` (little-endian 64-bit words) is
/// bit `v(t)` of `col`, and (client) bit `v(t)` of `clear` is cleared.
#[inline(always)]
fn scan(n: usize, v: impl Fn(usize) -> u64, col: &[u8], clear: Option<&mut [u8]>, out: &mut [u8]) {
    let bit = |i: u64| (col[(i >> 3) as usize] >> (i & 7)) & 1;
    match clear {
        None => {
            for (wi, o) in out.chunks_exact_mut(8).enumerate() {
                let (t0, t1) = (wi * 64, (wi * 64 + 64).min(n));
                let mut word = 0u64;
                for t in t0..t1 {
                    word |= (bit(v(t)) as u64) << (t - t0);
                }
                o.copy_from_slice(&word.to_le_bytes());
            }
        }
        Some(d) => {
            for (wi, o) in out.chunks_exact_mut(8).enumerate() {
                let (t0, t1) = (wi * 64, (wi * 64 + 64).min(n));
                let mut word = 0u64;
                for t in t0..t1 {
                    let i = v(t);
                    word |= (bit(i) as u64) << (t - t0);
                    d[(i >> 3) as usize] &= !(1u8 << (i & 7));
                }
                o.copy_from_slice(&word.to_le_bytes());
            }
        }
    }
}

/// Bytes per `acc` row for `n` items: `n` rounded up to a multiple of 128 bits.
pub(crate) fn acc_bytes(n: usize) -> usize {
    n.div_ceil(128).max(1) * 16
}

/// Rows of `acc`: `w` rounded up to a multiple of 16 (the transpose's tile).
pub(crate) fn acc_rows(width: usize) -> usize {
    width.div_ceil(16) * 16
}

/// `H2` of every item's `w` looked-up bits, truncated to `l2` bits. `acc` has
/// [`acc_rows`]`(w)` rows of [`acc_bytes`]`(n)` bytes (rows from `w` on are zero).
pub(crate) fn outputs(
    sid: &[u8; 32],
    acc: &[u8],
    n: usize,
    width: usize,
    output_bits: u32,
) -> Zeroizing<Vec<u128>> {
    let rows = acc_rows(width);
    let row_bytes = acc_bytes(n);
    assert_eq!(acc.len(), rows * row_bytes);
    let prefix = session_prefix(ds::H2, sid);
    let in_len = width.div_ceil(8);
    let out_row = rows / 8;
    let mut values = Zeroizing::new(vec![0u128; n]);
    // 1024 items (128 bytes of each acc row) per task.
    values
        .par_chunks_mut(1024)
        .enumerate()
        .for_each(|(t, vals)| {
            let c0 = t * 128;
            let c1 = (c0 + vals.len().div_ceil(8)).min(row_bytes);
            let mut items = Zeroizing::new(vec![0u8; (c1 - c0) * rows]);
            transpose_cols(acc, rows, row_bytes, c0, c1, &mut items);
            for (v, bits) in vals.iter_mut().zip(items.chunks_exact(out_row)) {
                let mut h = prefix.clone();
                h.update(&bits[..in_len]);
                let d: [u8; 32] = h.finalize().into();
                let top = u128::from_be_bytes(d[..16].try_into().expect("16 bytes"));
                *v = top >> (128 - output_bits);
            }
        });
    values
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The blocked lookup equals a direct per-item evaluation of the definitions.
    #[test]
    fn lookup_matches_the_definition() {
        let m = 256usize;
        let b = 8u32;
        let w = 37usize;
        let t = (w * b as usize).div_ceil(128);
        let prf = Prf::new(&[3; 16], t, b);
        let items: Vec<Vec<u8>> = (0..300u32).map(|i| i.to_be_bytes().to_vec()).collect();
        let z = prf.inputs(&items);
        let cb = m / 8;
        let cols: Vec<u8> = (0..w * cb).map(|i| (i * 7 + 3) as u8).collect();
        let ab = acc_bytes(items.len());
        let mut acc = vec![0u8; acc_rows(w) * ab];
        let mut clear = vec![0xffu8; w * cb];
        // Two calls, as two chunks would make.
        lookup(
            &prf,
            &z,
            0,
            20,
            cb,
            &cols[..20 * cb],
            &mut acc[..20 * ab],
            ab,
            Some(&mut clear[..20 * cb]),
        );
        lookup(
            &prf,
            &z,
            20,
            17,
            cb,
            &cols[20 * cb..],
            &mut acc[20 * ab..w * ab],
            ab,
            Some(&mut clear[20 * cb..]),
        );
        let mut zeros = std::collections::HashSet::new();
        for (i, x) in items.iter().enumerate() {
            let h = hash(ds::H1, &[x]);
            let mut z0: Block = h[..16].try_into().unwrap();
            encrypt(&prf.k0, std::slice::from_mut(&mut z0));
            for (a, b) in z0.iter_mut().zip(&h[16..]) {
                *a ^= b;
            }
            let mut f = Vec::new();
            for k in &prf.keys {
                let mut blk = z0;
                encrypt(k, std::slice::from_mut(&mut blk));
                f.extend_from_slice(&blk);
            }
            for c in 0..w {
                let mut v = 0usize;
                for j in 0..b as usize {
                    let bit = c * b as usize + j;
                    v |= (((f[bit / 8] >> (bit % 8)) & 1) as usize) << j;
                }
                zeros.insert((c, v));
                let want = (cols[c * cb + v / 8] >> (v % 8)) & 1;
                let got = (acc[c * ab + i / 8] >> (i % 8)) & 1;
                assert_eq!(got, want, "item {i} column {c}");
            }
        }
        for c in 0..w {
            for v in 0..m {
                let bit = (clear[c * cb + v / 8] >> (v % 8)) & 1;
                assert_eq!(bit == 0, zeros.contains(&(c, v)));
            }
        }
    }
}
