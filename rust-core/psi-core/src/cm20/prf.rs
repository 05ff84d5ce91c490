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
//! The client reads `A_c[v]` and clears `D_c[v]` in the same lookup, so it holds each
//! column pair interleaved in 64-bit words ([`Pair`]: both bits in one cache line) while
//! it is looked up. `F`'s output is computed per group of [`GROUP`] columns and batch of
//! items, a few AES blocks at a time from `z` straight into 64-bit word planes.

use crate::items::ItemList;
use crate::ote::prc::{Block, Midstate, Prg, session_midstate};
use crate::ote::transpose::transpose_cols;
use aes::Aes128;
use aes::cipher::{Array, BlockCipherEncrypt, KeyInit};
use rayon::prelude::*;
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
/// Blocks `F` encrypts at a time (on the stack, 1 KiB).
const AES_BATCH: usize = 64;

fn cipher(key: &Block) -> Aes128 {
    Aes128::new(&Array::from(*key))
}

fn encrypt(aes: &Aes128, blocks: &mut [Block]) {
    aes.encrypt_blocks(Array::cast_slice_from_core_mut(blocks));
}

/// `H1(x)` of every item: it does not depend on the session (the PRF key comes after it),
/// so a server computes it once for its set ([`super::Cm20Set`]).
pub(crate) fn h1_digests(items: &(impl ItemList + ?Sized)) -> Zeroizing<Vec<[u8; 32]>> {
    let prefix = h1_prefix();
    let mut out = Zeroizing::new(vec![[0u8; 32]; items.count()]);
    out.par_chunks_mut(1024).enumerate().for_each(|(c, out)| {
        for (j, o) in out.iter_mut().enumerate() {
            *o = prefix.hash(items.item(c * 1024 + j));
        }
    });
    out
}

/// `H1`'s fixed prefix `len(ds::H1) || ds::H1`.
fn h1_prefix() -> Midstate {
    let mut p = vec![ds::H1.len() as u8];
    p.extend_from_slice(ds::H1);
    Midstate::new(&p)
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
    pub(crate) fn inputs(&self, items: &(impl ItemList + ?Sized)) -> Zeroizing<Vec<Block>> {
        let h1_prefix = h1_prefix();
        self.inputs_by(items.count(), |i| {
            Zeroizing::new(h1_prefix.hash(items.item(i)))
        })
    }

    /// [`Prf::inputs`] from the items' `H1` digests ([`h1_digests`]).
    pub(crate) fn inputs_from_digests(&self, digests: &[[u8; 32]]) -> Zeroizing<Vec<Block>> {
        self.inputs_by(digests.len(), |i| Zeroizing::new(digests[i]))
    }

    /// `z` of items `0 .. n`, item `i`'s `H1` digest from `digest(i)`.
    fn inputs_by(
        &self,
        n: usize,
        digest: impl Fn(usize) -> Zeroizing<[u8; 32]> + Sync,
    ) -> Zeroizing<Vec<Block>> {
        let mut z = Zeroizing::new(vec![[0u8; 16]; n]);
        z.par_chunks_mut(64).enumerate().for_each(|(t, z)| {
            let mut h1 = Zeroizing::new([[0u8; 16]; 64]);
            for (i, (z, h)) in z.iter_mut().zip(h1.iter_mut()).enumerate() {
                let d = digest(t * 64 + i);
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

/// One matrix column as the lookup reads it.
pub(crate) trait Column {
    /// Bit `i` of the column (0 or 1); a client's column also clears bit `i` of its `D`.
    fn lookup(&mut self, i: u64) -> u64;
}

/// A server's column `C_c`: `m / 8` bytes, bit `i` in bit `i % 8` of byte `i / 8`.
impl Column for &[u8] {
    #[inline(always)]
    fn lookup(&mut self, i: u64) -> u64 {
        ((self[(i >> 3) as usize] >> (i & 7)) & 1) as u64
    }
}

/// 64 bits of a client's column `A_c` and the same 64 bits of its `D_c`, side by side so
/// that the lookup's read of `A` and clear of `D` touch one cache line (16-byte aligned).
#[derive(Clone, Copy, Default)]
#[repr(C, align(16))]
pub(crate) struct Pair {
    a: u64,
    d: u64,
}

impl zeroize::DefaultIsZeroes for Pair {}

/// A client's columns `A_c` and `D_c`, interleaved: `m / 64` [`Pair`]s, pair `j` holds
/// bits `64 j .. 64 j + 63` of each (bit `i` in bit `i % 64`).
pub(crate) struct ClientColumn<'a>(pub(crate) &'a mut [Pair]);

impl Column for ClientColumn<'_> {
    #[inline(always)]
    fn lookup(&mut self, i: u64) -> u64 {
        let p = &mut self.0[(i >> 6) as usize];
        p.d &= !(1u64 << (i & 63));
        (p.a >> (i & 63)) & 1
    }
}

/// Fills `pairs` with the column `a` (bytes, bit `i` in bit `i % 8` of byte `i / 8`) and a
/// `D` of all ones; `a` has `8 · pairs.len()` bytes.
pub(crate) fn interleave(a: &[u8], pairs: &mut [Pair]) {
    assert_eq!(a.len(), pairs.len() * 8);
    for (p, a) in pairs.iter_mut().zip(a.chunks_exact(8)) {
        p.a = u64::from_le_bytes(a.try_into().expect("8 bytes"));
        p.d = !0;
    }
}

/// `out ^= A ⊕ D` for the interleaved columns `pairs` (`out` as bytes, as [`interleave`]).
pub(crate) fn xor_a_d(pairs: &[Pair], out: &mut [u8]) {
    assert_eq!(out.len(), pairs.len() * 8);
    for (p, o) in pairs.iter().zip(out.chunks_exact_mut(8)) {
        let x = u64::from_le_bytes((&*o).try_into().expect("8 bytes")) ^ p.a ^ p.d;
        o.copy_from_slice(&x.to_le_bytes());
    }
}

/// Looks every item up in the server's columns `c0 .. c0 + cols.len()` (any `c0`), a task
/// per [`GROUP`] columns: see [`lookup_group`].
pub(crate) fn lookup(
    prf: &Prf,
    z: &[Block],
    c0: usize,
    cols: &mut [&[u8]],
    acc: &mut [u8],
    acc_bytes: usize,
) {
    assert_eq!(acc.len(), cols.len() * acc_bytes);
    cols.par_chunks_mut(GROUP)
        .zip(acc.par_chunks_mut(GROUP * acc_bytes))
        .enumerate()
        .for_each(|(g, (cols, acc))| {
            lookup_group(prf, z, c0 + g * GROUP, cols, acc, acc_bytes);
        });
}

/// Looks every item up in columns `c0 .. c0 + cols.len()` (at most [`GROUP`] of them, they
/// share `F`'s output blocks): for column `c` and item `i` with index `v = v_c(i)`, sets
/// bit `i` of `acc` row `c - c0` to [`Column::lookup`]`(v)` of column `c`.
///
/// `acc` holds `cols.len()` rows of `acc_bytes >= ceil(n / 64) * 8` bytes.
pub(crate) fn lookup_group<C: Column>(
    prf: &Prf,
    z: &[Block],
    c0: usize,
    cols: &mut [C],
    acc: &mut [u8],
    acc_bytes: usize,
) {
    let gc = cols.len();
    assert!(gc <= GROUP);
    assert_eq!(acc.len(), gc * acc_bytes);
    assert!(acc_bytes >= z.len().div_ceil(64) * 8);
    if gc == 0 {
        return;
    }
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
    // AES is applied to a few blocks at a time on the stack, from `z` to the planes.
    let mut buf: Zeroizing<[Block; AES_BATCH]> = Zeroizing::new([[0u8; 16]; AES_BATCH]);
    for (bi, zb) in z.chunks(ITEM_BATCH).enumerate() {
        let n = zb.len();
        let base = bi * ITEM_BATCH;
        // Every word is written below, so the previous batch's are not cleared first.
        fw.resize(2 * nb * n, 0);
        for (s, zs) in zb.chunks(AES_BATCH).enumerate() {
            let t0 = s * AES_BATCH;
            for j in 0..nb {
                let blocks = &mut buf[..zs.len()];
                blocks.copy_from_slice(zs);
                encrypt(&prf.keys[first_block + j], blocks);
                let (lo, hi) = fw[2 * j * n..2 * (j + 1) * n].split_at_mut(n);
                let (lo, hi) = (&mut lo[t0..t0 + zs.len()], &mut hi[t0..t0 + zs.len()]);
                for ((l, h), blk) in lo.iter_mut().zip(hi.iter_mut()).zip(blocks.iter()) {
                    let (a, c) = blk.split_at(8);
                    *l = u64::from_le_bytes(a.try_into().expect("8 bytes"));
                    *h = u64::from_le_bytes(c.try_into().expect("8 bytes"));
                }
            }
        }
        for (k, col) in cols.iter_mut().enumerate() {
            let bit = (c0 + k) * b - first_block * 128;
            let (wi, sh) = (bit / 64, (bit % 64) as u32);
            let lo = &fw[wi * n..(wi + 1) * n];
            let row = &mut acc[k * acc_bytes..(k + 1) * acc_bytes];
            let out = &mut row[base / 8..base / 8 + n.div_ceil(64) * 8];
            // An index that straddles two words takes its high bits from the next one.
            if sh as usize + b > 64 {
                let hi = &fw[(wi + 1) * n..(wi + 2) * n];
                scan::<C, true>(lo, hi, sh, mask, col, out);
            } else {
                scan::<C, false>(lo, lo, sh, mask, col, out);
            }
        }
    }
}

/// For items `t = 0 .. lo.len()` with index `v = (lo[t] >> sh | hi[t] << (64 - sh)) & mask`
/// (`hi` only if `STRADDLE`): bit `t` of `out` (little-endian 64-bit words) is
/// [`Column::lookup`]`(v)`. Whole words of 64 items take a loop of fixed length.
#[inline(always)]
fn scan<C: Column, const STRADDLE: bool>(
    lo: &[u64],
    hi: &[u64],
    sh: u32,
    mask: u64,
    col: &mut C,
    out: &mut [u8],
) {
    let index = |l: u64, h: u64| {
        if STRADDLE {
            ((l >> sh) | (h << (64 - sh))) & mask
        } else {
            (l >> sh) & mask
        }
    };
    let n = lo.len();
    assert_eq!(hi.len(), n);
    assert_eq!(out.len(), n.div_ceil(64) * 8);
    let full = n / 64;
    for ((l, h), o) in lo
        .chunks_exact(64)
        .zip(hi.chunks_exact(64))
        .zip(out.chunks_exact_mut(8))
    {
        let (l, h): (&[u64; 64], &[u64; 64]) = (l.try_into().unwrap(), h.try_into().unwrap());
        let mut word = 0u64;
        for (j, (&l, &h)) in l.iter().zip(h).enumerate() {
            word |= col.lookup(index(l, h)) << j;
        }
        o.copy_from_slice(&word.to_le_bytes());
    }
    if full * 64 < n {
        let mut word = 0u64;
        for (j, (&l, &h)) in lo[full * 64..].iter().zip(&hi[full * 64..]).enumerate() {
            word |= col.lookup(index(l, h)) << j;
        }
        out[full * 8..].copy_from_slice(&word.to_le_bytes());
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
/// With `pad_len > 0` (label lanes), also each item's lane pad: bytes
/// `16 .. 16 + pad_len` of its `H2` digest, `pad_len` bytes per item in item order.
pub(crate) fn outputs(
    sid: &[u8; 32],
    acc: &[u8],
    n: usize,
    width: usize,
    output_bits: u32,
    pad_len: usize,
) -> Digests {
    let rows = acc_rows(width);
    let row_bytes = acc_bytes(n);
    assert_eq!(acc.len(), rows * row_bytes);
    let prefix = session_midstate(ds::H2, sid);
    let out_row = rows / 8;
    for_each_block(n, pad_len, |t, vals, pads| {
        let mut items = Zeroizing::new(vec![0u8; vals.len().div_ceil(8) * 8 * out_row]);
        transpose_block(acc, rows, row_bytes, t, vals.len(), &mut items);
        for (i, (v, bits)) in vals.iter_mut().zip(items.chunks_exact(out_row)).enumerate() {
            let d = h2_digest(&prefix, bits, width);
            *v = value_of(&d, output_bits);
            put_pad(&d, pads, i, pad_len);
        }
    })
}

/// Every item's value and, with `pad_len > 0`, its lane pad ([`outputs`]). Zeroized on
/// drop.
pub(crate) struct Digests {
    pub(crate) values: Zeroizing<Vec<u128>>,
    pub(crate) pads: Zeroizing<Vec<u8>>,
}

/// Runs `f(t, values, pads)` on each block of [`TRANSPOSE_ITEMS`] items in parallel, with
/// the block's values and pads (`pad_len` bytes per item; empty when 0) to fill.
fn for_each_block(
    n: usize,
    pad_len: usize,
    f: impl Fn(usize, &mut [u128], &mut [u8]) + Sync,
) -> Digests {
    let mut values = Zeroizing::new(vec![0u128; n]);
    let mut pads = Zeroizing::new(vec![0u8; n * pad_len]);
    if pad_len == 0 {
        values
            .par_chunks_mut(TRANSPOSE_ITEMS)
            .enumerate()
            .for_each(|(t, vals)| f(t, vals, &mut []));
    } else {
        values
            .par_chunks_mut(TRANSPOSE_ITEMS)
            .zip(pads.par_chunks_mut(TRANSPOSE_ITEMS * pad_len))
            .enumerate()
            .for_each(|(t, (vals, p))| f(t, vals, p));
    }
    Digests { values, pads }
}

/// Item `i`'s lane pad, bytes `16 .. 16 + pad_len` of its digest `d`, into `pads`.
#[inline]
fn put_pad(d: &[u8; 32], pads: &mut [u8], i: usize, pad_len: usize) {
    if pad_len > 0 {
        let at = crate::lanes::PAD_AT;
        pads[i * pad_len..(i + 1) * pad_len].copy_from_slice(&d[at..at + pad_len]);
    }
}

/// Items per transpose task: 128 bytes of every `acc` row.
const TRANSPOSE_ITEMS: usize = 1024;

/// Transposes block `t` of [`TRANSPOSE_ITEMS`] items (`len` of them, the last block may be
/// short) of the `rows` rows of `acc` (`row_bytes` each) into `out`: item `t·1024 + i`'s
/// `rows` bits at bytes `i·rows/8 ..`, bit `r` at bit `r % 8` of byte `r / 8`. `out` holds
/// `ceil(len / 8) · 8` items.
fn transpose_block(
    acc: &[u8],
    rows: usize,
    row_bytes: usize,
    t: usize,
    len: usize,
    out: &mut [u8],
) {
    let c0 = t * (TRANSPOSE_ITEMS / 8);
    let c1 = c0 + len.div_ceil(8);
    assert!(c1 <= row_bytes);
    transpose_cols(acc, rows, row_bytes, c0, c1, out);
}

/// `H2` of one item's bit string (`bits`, at least `ceil(w / 8)` bytes, zero from bit `w`
/// on): the whole digest, whose first `l2` bits are the value ([`value_of`]) and whose
/// bytes from 16 on pad the item's label lane.
#[inline]
fn h2_digest(prefix: &Midstate, bits: &[u8], width: usize) -> Zeroizing<[u8; 32]> {
    Zeroizing::new(prefix.hash(&bits[..width.div_ceil(8)]))
}

/// The OPRF value of a digest: its first `output_bits` bits.
#[inline]
fn value_of(d: &[u8; 32], output_bits: u32) -> u128 {
    let top = u128::from_be_bytes(d[..16].try_into().expect("16 bytes"));
    top >> (128 - output_bits)
}

/// The server's half-way transpose of one chunk: `acc` holds the looked-up rows of the
/// chunk's columns (`rows` of them, a multiple of 16, rows past the last column zero,
/// [`acc_bytes`]`(n)` bytes each). Returns them item by item: `rows / 8` bytes per item
/// (bit `r` of the chunk at bit `r % 8` of byte `r / 8`), for `8 ·` [`acc_bytes`]`(n)`
/// items (the last few past `n` are padding). Each chunk's part is written in one
/// sequential pass, so that the outputs need no transpose once the last chunk is in
/// ([`hash_parts`]).
pub(crate) fn transpose_chunk(acc: &[u8], rows: usize, n: usize) -> Zeroizing<Vec<u8>> {
    let row_bytes = acc_bytes(n);
    assert!(rows.is_multiple_of(16));
    assert_eq!(acc.len(), rows * row_bytes);
    let part = rows / 8;
    let mut out = Zeroizing::new(vec![0u8; row_bytes * 8 * part]);
    out.par_chunks_mut(TRANSPOSE_ITEMS * part)
        .enumerate()
        .for_each(|(t, dst)| {
            transpose_block(acc, rows, row_bytes, t, dst.len() / part, dst);
        });
    out
}

/// [`outputs`] from the chunks' parts that [`transpose_chunk`] returned, in column order
/// (each chunk but the last a multiple of 16 columns, so every part starts at a byte).
pub(crate) fn hash_parts(
    sid: &[u8; 32],
    parts: &[Zeroizing<Vec<u8>>],
    n: usize,
    width: usize,
    output_bits: u32,
    pad_len: usize,
) -> Digests {
    let items = acc_bytes(n) * 8;
    let sizes: Vec<usize> = parts.iter().map(|p| p.len() / items).collect();
    let item_bytes: usize = sizes.iter().sum();
    assert!(item_bytes >= width.div_ceil(8));
    for (p, s) in parts.iter().zip(&sizes) {
        assert_eq!(p.len(), items * s);
    }
    let prefix = session_midstate(ds::H2, sid);
    for_each_block(n, pad_len, |t, vals, pads| {
        let mut bits = Zeroizing::new(vec![0u8; item_bytes]);
        for (i, v) in vals.iter_mut().enumerate() {
            let item = t * TRANSPOSE_ITEMS + i;
            let mut off = 0;
            for (p, &s) in parts.iter().zip(&sizes) {
                bits[off..off + s].copy_from_slice(&p[item * s..(item + 1) * s]);
                off += s;
            }
            let d = h2_digest(&prefix, &bits, width);
            *v = value_of(&d, output_bits);
            put_pad(&d, pads, i, pad_len);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ote::prc::hash;

    /// `F`'s index `v_c` of every item for every column, from the definitions (one item at
    /// a time, bit by bit).
    fn naive_indices(prf: &Prf, items: &[Vec<u8>], w: usize) -> Vec<Vec<usize>> {
        let b = prf.index_bits as usize;
        items
            .iter()
            .map(|x| {
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
                (0..w)
                    .map(|c| {
                        (0..b).fold(0usize, |v, j| {
                            let bit = c * b + j;
                            v | ((((f[bit / 8] >> (bit % 8)) & 1) as usize) << j)
                        })
                    })
                    .collect()
            })
            .collect()
    }

    /// The blocked lookup equals a direct per-item evaluation of the definitions, on the
    /// server's byte columns (no clear) and on the client's interleaved `A`/`D` columns
    /// (with clear), with column counts and offsets that are not multiples of [`GROUP`].
    #[test]
    fn lookup_matches_the_definition() {
        let m = 256usize;
        let b = 8u32;
        let w = 37usize;
        let t = (w * b as usize).div_ceil(128);
        let prf = Prf::new(&[3; 16], t, b);
        let items: Vec<Vec<u8>> = (0..300u32).map(|i| i.to_be_bytes().to_vec()).collect();
        let z = prf.inputs(&items);
        let v = naive_indices(&prf, &items, w);
        let cb = m / 8;
        let cols: Vec<u8> = (0..w * cb).map(|i| (i * 7 + 3) as u8).collect();
        let ab = acc_bytes(items.len());
        // Server: two calls, as two chunks would make.
        let mut acc = vec![0u8; acc_rows(w) * ab];
        let mut server: Vec<&[u8]> = cols.chunks(cb).collect();
        let (s0, s1) = server.split_at_mut(20);
        let (a0, a1) = acc[..w * ab].split_at_mut(20 * ab);
        lookup(&prf, &z, 0, s0, a0, ab);
        lookup(&prf, &z, 20, s1, a1, ab);
        // Client: interleaved columns, groups of 16, 4, 16 and 1 columns.
        let mut client_acc = vec![0u8; acc_rows(w) * ab];
        let mut pairs = vec![Pair::default(); w * cb / 8];
        for (a, p) in cols.chunks(cb).zip(pairs.chunks_mut(cb / 8)) {
            interleave(a, p);
        }
        let mut c0 = 0;
        for gc in [16, 4, 16, 1] {
            let mut group: Vec<_> = pairs[c0 * cb / 8..(c0 + gc) * cb / 8]
                .chunks_mut(cb / 8)
                .map(ClientColumn)
                .collect();
            let acc = &mut client_acc[c0 * ab..(c0 + gc) * ab];
            lookup_group(&prf, &z, c0, &mut group, acc, ab);
            c0 += gc;
        }
        assert_eq!(c0, w);
        assert_eq!(acc, client_acc, "server and client lookups");
        assert!(acc[w * ab..].iter().all(|&x| x == 0), "rows from w on");
        let mut zeros = std::collections::HashSet::new();
        for (i, v) in v.iter().enumerate() {
            for (c, &v) in v.iter().enumerate() {
                zeros.insert((c, v));
                let want = (cols[c * cb + v / 8] >> (v % 8)) & 1;
                let got = (acc[c * ab + i / 8] >> (i % 8)) & 1;
                assert_eq!(got, want, "item {i} column {c}");
            }
        }
        // D is zero exactly where some item looked up; A is unchanged.
        let mut d = vec![0u8; w * cb];
        for (p, d) in pairs.chunks(cb / 8).zip(d.chunks_mut(cb)) {
            xor_a_d(p, d);
        }
        for c in 0..w {
            for v in 0..m {
                let a = (cols[c * cb + v / 8] >> (v % 8)) & 1;
                let ad = (d[c * cb + v / 8] >> (v % 8)) & 1;
                assert_eq!(a ^ ad == 0, zeros.contains(&(c, v)), "D column {c} bit {v}");
            }
        }
    }

    /// A small xorshift generator for the layout tests.
    fn xorshift(seed: u64) -> impl FnMut() -> u64 {
        let mut x = seed | 1;
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// The server's per-chunk transposes and [`hash_parts`] give [`outputs`]'s values, for
    /// chunks of 16 columns or more and a final partial group.
    #[test]
    fn chunked_transpose_gives_the_same_outputs() {
        let mut next = xorshift(11);
        let sid = [3u8; 32];
        for (n, w, split) in [
            (1000usize, 141usize, vec![48usize, 80, 13]),
            (130, 160, vec![160]),
            (2051, 40, vec![32, 8]),
            (0, 20, vec![16, 4]),
        ] {
            let ab = acc_bytes(n);
            let mut acc = vec![0u8; acc_rows(w) * ab];
            for row in acc.chunks_mut(ab).take(w) {
                for (i, b) in row.iter_mut().enumerate().take(n.div_ceil(8)) {
                    *b = next() as u8;
                    // Bits past the last item stay zero, as the lookups leave them.
                    if (i + 1) * 8 > n {
                        *b &= (1u16 << (n % 8)).wrapping_sub(1) as u8;
                    }
                }
            }
            let want = outputs(&sid, &acc, n, w, 52, 0);
            assert!(want.pads.is_empty());
            // With pads (label lanes): the same values, and the pads are the digests'
            // bytes 16.. (checked against the values' own digest bytes 0..16 by being
            // equal between the two paths; the lane tests check them end to end).
            let padded = outputs(&sid, &acc, n, w, 52, 9);
            assert_eq!(*padded.values, *want.values);
            assert_eq!(padded.pads.len(), 9 * n);
            let mut parts = Vec::new();
            let mut c0 = 0;
            for &count in &split {
                let rows = acc_rows(count);
                let mut chunk = vec![0u8; rows * ab];
                chunk[..count * ab].copy_from_slice(&acc[c0 * ab..(c0 + count) * ab]);
                parts.push(transpose_chunk(&chunk, rows, n));
                c0 += count;
            }
            assert_eq!(c0, w);
            assert_eq!(
                *hash_parts(&sid, &parts, n, w, 52, 0).values,
                *want.values,
                "{n} {w}"
            );
            let parted = hash_parts(&sid, &parts, n, w, 52, 9);
            assert_eq!(*parted.values, *want.values, "{n} {w}");
            assert_eq!(*parted.pads, *padded.pads, "{n} {w}");
        }
    }

    /// `interleave` then `xor_a_d` with nothing cleared gives back `out ⊕ A ⊕ 1`, and the
    /// interleaved words are the column's little-endian words.
    #[test]
    fn interleave_round_trip() {
        let mut next = xorshift(5);
        for words in [1usize, 2, 16, 2048] {
            let a: Vec<u8> = (0..words * 8).map(|_| next() as u8).collect();
            let mut pairs = vec![Pair { a: 1, d: 2 }; words];
            interleave(&a, &mut pairs);
            for (j, p) in pairs.iter().enumerate() {
                assert_eq!(
                    p.a,
                    u64::from_le_bytes(a[8 * j..8 * j + 8].try_into().unwrap())
                );
                assert_eq!(p.d, !0);
            }
            let out0: Vec<u8> = (0..words * 8).map(|_| next() as u8).collect();
            let mut out = out0.clone();
            xor_a_d(&pairs, &mut out);
            for ((o, o0), a) in out.iter().zip(&out0).zip(&a) {
                assert_eq!(*o, o0 ^ a ^ 0xff);
            }
        }
    }

    /// Bit by bit against a plain reference, on random columns and indices: a byte column
    /// reads bit `i` and changes nothing; a client column reads bit `i` of `A`, clears bit
    /// `i` of `D` and leaves every other bit as it was.
    #[test]
    fn column_lookup_matches_a_bitwise_reference() {
        let mut next = xorshift(9);
        let m = 4096usize;
        let bytes: Vec<u8> = (0..m / 8).map(|_| next() as u8).collect();
        let mut pairs = vec![Pair::default(); m / 64];
        interleave(&bytes, &mut pairs);
        let bits: Vec<u64> = (0..m)
            .map(|i| ((bytes[i / 8] >> (i % 8)) & 1) as u64)
            .collect();
        let mut d_ref = vec![1u64; m];
        let mut server: &[u8] = &bytes;
        let mut client = ClientColumn(&mut pairs);
        for _ in 0..3000 {
            let i = next() % m as u64;
            assert_eq!(server.lookup(i), bits[i as usize], "byte column bit {i}");
            assert_eq!(client.lookup(i), bits[i as usize], "client column bit {i}");
            d_ref[i as usize] = 0;
        }
        for (i, (&a, &d)) in bits.iter().zip(&d_ref).enumerate() {
            let p = pairs[i / 64];
            assert_eq!((p.a >> (i % 64)) & 1, a, "A bit {i}");
            assert_eq!((p.d >> (i % 64)) & 1, d, "D bit {i}");
        }
        assert!(d_ref.contains(&0) && d_ref.contains(&1));
    }
}
