//! Item digests, the three bin hash functions, Cuckoo placement (client) and simple
//! hashing (server).
//!
//! Each item is hashed once per session:
//! `d = SHA-256(len(ds::ITEM) || ds::ITEM || sid || zeros to 64 bytes || item)` (32 bytes).
//! - OPRF input for hash function `h ∈ {0,1,2}`: `x_h = d[0..16]` with the two low bits of
//!   byte 15 replaced by `h` (126 bits of item digest plus the hash index, KKRT16's trick so
//!   one item placed by two hash functions in one bin gets two distinct OPRF values).
//! - Bins: three distinct bins, uniform over ordered triples:
//!   `b0 = ⌊u0·m / 2^64⌋`, `b1' = ⌊u1·(m−1) / 2^64⌋`, `b2' = ⌊u2·(m−2) / 2^64⌋`, with
//!   `u0 = LE64(d[16..24])`, `u1 = LE64(d[24..32])`, `u2 = LE64(d[8..16])`; `b1 = b1' + [b1' ≥ b0]`,
//!   and `b2` is `b2'` stepped over the smaller, then the larger, of `b0, b1`.
//!
//! The client needs every item in one of its three bins, at most one item per bin. A
//! placement exists exactly when Hall's condition holds; the insertion below (random walk,
//! then breadth-first augmenting-path search) always finds one when it exists, so the
//! failure probability is the probability that none exists (see [`table_size`]).

use crate::error::{Error, Result};
use crate::items::ItemList;
use crate::ote::prc::{Block, ds, session_prefix};
use rayon::prelude::*;
use sha2::Digest as _;

/// Number of hash functions.
pub(crate) const HASHES: usize = 3;
/// Marks an empty bin in the client's table.
pub(crate) const EMPTY: u32 = u32::MAX;
/// From this many items on, the table has ⌈1.27 n⌉ bins (PSTY19); below, the rigorous
/// bound's sizes, precomputed in [`SMALL_TABLE_SIZES`].
pub(crate) const LARGE_N: usize = 1 << 12;

/// What both sides keep of an item: the OPRF input with the hash-index bits cleared, and
/// its three bins.
#[derive(Clone, Copy)]
pub(crate) struct ItemDigest {
    pub(crate) block: Block,
    pub(crate) bins: [u32; HASHES],
}

impl ItemDigest {
    /// The OPRF input `x_h` for hash function `h`.
    #[inline]
    pub(crate) fn input(&self, h: usize) -> Block {
        let mut b = self.block;
        b[15] |= h as u8;
        b
    }
}

#[inline]
fn reduce(u: u64, range: u64) -> u64 {
    ((u as u128 * range as u128) >> 64) as u64
}

/// Digest of one item for session `sid` and table size `m >= 3`.
pub(crate) fn digest(prefix: &sha2::Sha256, item: &[u8], m: u32) -> ItemDigest {
    let mut h = prefix.clone();
    h.update(item);
    let d: [u8; 32] = h.finalize().into();
    let le = |r: core::ops::Range<usize>| u64::from_le_bytes(d[r].try_into().expect("8 bytes"));
    let bins = bins_of([le(16..24), le(24..32), le(8..16)], m);
    let mut block: Block = d[..16].try_into().expect("16 bytes");
    block[15] &= 0xfc;
    ItemDigest { block, bins }
}

/// The three distinct bins for the digest words `u = [u0, u1, u2]` and table size `m >= 3`.
fn bins_of(u: [u64; HASHES], m: u32) -> [u32; HASHES] {
    let m = m as u64;
    let b0 = reduce(u[0], m);
    let mut b1 = reduce(u[1], m - 1);
    if b1 >= b0 {
        b1 += 1;
    }
    let mut b2 = reduce(u[2], m - 2);
    let (lo, hi) = if b0 < b1 { (b0, b1) } else { (b1, b0) };
    if b2 >= lo {
        b2 += 1;
    }
    if b2 >= hi {
        b2 += 1;
    }
    [b0 as u32, b1 as u32, b2 as u32]
}

/// Digests of all items (in parallel inside the caller's pool).
pub(crate) fn digest_all(
    items: &(impl ItemList + ?Sized),
    sid: &[u8; 32],
    m: u32,
) -> Vec<ItemDigest> {
    let prefix = session_prefix(ds::ITEM, sid);
    (0..items.count())
        .into_par_iter()
        .with_min_len(1024)
        .map(|i| digest(&prefix, items.item(i), m))
        .collect()
}

/// [`table_size`] below [`LARGE_N`], precomputed: `rigorous_table_size(n)` for every
/// `n < 4096` (checked by the test `small_table_sizes_are_the_rigorous_ones`). A lookup, so
/// a server prices an OT-PSI session request (`max_bins_for`) in constant time, not with
/// the bound's O(n log n) search (about 9 times a trivial request's cost at n = 4095).
const SMALL_TABLE_SIZES: [u16; LARGE_N] = include!("cuckoo_sizes.in");

/// Number of bins for `n` client items: ⌈1.27 n⌉ for `n >= 4096` (Pinkas-Schneider-
/// Tkachenko-Yanai, Eurocrypt 2019: three hash functions, no stash, failure ≤ 2^-40), and
/// the smallest `m` for which the union bound of [`failure_bound_log2`] is ≤ 2^-40 below
/// (precomputed). Never less than 3.
pub fn table_size(n: usize) -> usize {
    match SMALL_TABLE_SIZES.get(n) {
        Some(&m) => usize::from(m),
        None => (n * 127).div_ceil(100),
    }
}

/// Smallest `m >= max(3, n)` with [`failure_bound_log2`]`(n, m) <= -40`: the computation
/// behind [`SMALL_TABLE_SIZES`], kept for the test that checks the table against it. `lf`
/// is `ln_factorials(up_to)` for any `up_to >= 16 n + 64` (its entries do not depend on
/// `up_to`, so one table serves every `n`).
#[cfg(test)]
fn rigorous_table_size(n: usize, lf: &[f64]) -> usize {
    let mut lo = n.max(3);
    let mut hi = 16 * n + 64;
    assert!(lf.len() > hi, "ln_factorials too short for n = {n}");
    while lo < hi {
        let mid = (lo + hi) / 2;
        if bound_ln(n, mid, lf) <= -40.0 * core::f64::consts::LN_2 {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

fn ln_factorials(up_to: usize) -> Vec<f64> {
    let mut lf = Vec::with_capacity(up_to + 1);
    let mut acc = 0.0f64;
    lf.push(0.0);
    for i in 1..=up_to {
        acc += (i as f64).ln();
        lf.push(acc);
    }
    lf
}

fn ln_binom(lf: &[f64], a: usize, b: usize) -> f64 {
    lf[a] - lf[b] - lf[a - b]
}

/// Natural log of `Σ_{k=4}^{n} C(n,k)·C(m,k−1)·(C(k−1,3)/C(m,3))^k`: a union bound, over
/// every set S of k items and every set B of k−1 bins, on the event that all of S's bin
/// triples lie inside B (Hall's condition fails for S exactly when such a B exists; sets
/// of at most 3 items always have at least 3 bins because each item's bins are distinct).
fn bound_ln(n: usize, m: usize, lf: &[f64]) -> f64 {
    let mut terms = Vec::new();
    let denom = ln_binom(lf, m, 3);
    for k in 4..=n.min(m + 1) {
        let t = ln_binom(lf, n, k)
            + ln_binom(lf, m, k - 1)
            + k as f64 * (ln_binom(lf, k - 1, 3) - denom);
        terms.push(t);
    }
    let max = terms.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    if max == f64::NEG_INFINITY {
        return f64::NEG_INFINITY;
    }
    max + terms.iter().map(|t| (t - max).exp()).sum::<f64>().ln()
}

/// The same bound in bits (log2), for documentation and tests.
pub fn failure_bound_log2(n: usize, m: usize) -> f64 {
    let lf = ln_factorials(m.max(n) + 1);
    bound_ln(n, m, &lf) / core::f64::consts::LN_2
}

/// Places every item: returns `table[bin] = (item << 2) | h` or [`EMPTY`].
/// Deterministic given the digests and `seed` (which drives the random walk).
pub(crate) fn place(digests: &[ItemDigest], m: usize, seed: u64) -> Result<Vec<u32>> {
    let fail = || Error::CuckooFailed {
        items: digests.len() as u64,
        bins: m as u64,
    };
    if digests.len() > m {
        return Err(fail());
    }
    // The three bins of every item, packed (12 bytes per item) for cache efficiency.
    let all: Vec<[u32; HASHES]> = digests.iter().map(|d| d.bins).collect();
    let mut table = vec![EMPTY; m];
    let mut rng = seed | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let max_kicks = 500;
    let mut bfs = Bfs::default();
    for (x, &bins) in all.iter().enumerate() {
        let mut cur = (x as u32) << 2;
        let mut cur_bins = bins;
        let mut from = usize::MAX; // bin index (0..3) the current item was evicted from
        let mut placed = false;
        for _ in 0..max_kicks {
            if let Some(h) = (0..HASHES).find(|&h| table[cur_bins[h] as usize] == EMPTY) {
                table[cur_bins[h] as usize] = cur | h as u32;
                placed = true;
                break;
            }
            // Evict from a random bin other than the one we were just pushed out of.
            let mut h = (next() % HASHES as u64) as usize;
            if h == from {
                h = (h + 1 + (next() % 2) as usize) % HASHES;
            }
            let bin = cur_bins[h] as usize;
            let evicted = table[bin];
            table[bin] = cur | h as u32;
            cur = evicted & !3;
            cur_bins = all[(cur >> 2) as usize];
            from = cur_bins
                .iter()
                .position(|&b| b as usize == bin)
                .expect("evicted from own bin");
        }
        if !placed && !bfs.insert(&mut table, &all, cur) {
            return Err(fail());
        }
    }
    Ok(table)
}

/// Breadth-first search for an augmenting path (complete: finds a placement for the
/// homeless item whenever the items placed so far plus it can all be placed).
#[derive(Default)]
struct Bfs {
    stamp: Vec<u32>,
    parent: Vec<u32>,
    epoch: u32,
    queue: Vec<u32>,
}

impl Bfs {
    fn insert(&mut self, table: &mut [u32], all: &[[u32; HASHES]], item: u32) -> bool {
        let m = table.len();
        if self.stamp.len() != m {
            self.stamp = vec![0; m];
            self.parent = vec![0; m];
        }
        self.epoch += 1;
        let epoch = self.epoch;
        self.queue.clear();
        const ROOT: u32 = u32::MAX;
        for &b in &all[(item >> 2) as usize] {
            if self.stamp[b as usize] != epoch {
                self.stamp[b as usize] = epoch;
                self.parent[b as usize] = ROOT;
                self.queue.push(b);
            }
        }
        let mut head = 0;
        while head < self.queue.len() {
            let b = self.queue[head] as usize;
            head += 1;
            if table[b] == EMPTY {
                // Shift items along the path back to the root.
                let mut cur = b;
                loop {
                    let p = self.parent[cur];
                    let (mover, bins) = if p == ROOT {
                        (item >> 2, all[(item >> 2) as usize])
                    } else {
                        let occ = table[p as usize] >> 2;
                        (occ, all[occ as usize])
                    };
                    let h = bins
                        .iter()
                        .position(|&x| x as usize == cur)
                        .expect("path bin") as u32;
                    table[cur] = (mover << 2) | h;
                    if p == ROOT {
                        return true;
                    }
                    cur = p as usize;
                }
            }
            let occ = (table[b] >> 2) as usize;
            for &nb in &all[occ] {
                if self.stamp[nb as usize] != epoch {
                    self.stamp[nb as usize] = epoch;
                    self.parent[nb as usize] = b as u32;
                    self.queue.push(nb);
                }
            }
        }
        false
    }
}

/// Bins per group in the server's simple-hashing table (the OT-extension matrix is
/// processed in runs of whole groups).
pub(crate) const GROUP_BINS: usize = 128;

/// One (item, hash function) pair of the server: the OPRF input `x_h` and the bin `b_h`.
#[derive(Clone, Copy, Default)]
pub(crate) struct Entry {
    pub(crate) input: Block,
    pub(crate) bin: u32,
    /// The item's index in the server's set (its label lane's row).
    pub(crate) item: u32,
}

impl Entry {
    /// The hash function index `h` (the low two bits of the input's last byte).
    #[inline]
    pub(crate) fn hash_index(&self) -> usize {
        (self.input[15] & 3) as usize
    }
}

/// Simple hashing for the server: every item under every hash function, grouped by
/// [`GROUP_BINS`]-bin group of its bin (counting sort; within a group in item order, then
/// hash order). `entries[starts[g]..starts[g + 1]]` are the entries of group `g`.
pub(crate) struct SimpleTable {
    pub(crate) starts: Vec<u32>,
    pub(crate) entries: Vec<Entry>,
}

impl SimpleTable {
    pub(crate) fn new(digests: &[ItemDigest], m: usize) -> Self {
        let groups = m.div_ceil(GROUP_BINS);
        let mut starts = vec![0u32; groups + 1];
        for d in digests {
            for &b in &d.bins {
                starts[b as usize / GROUP_BINS + 1] += 1;
            }
        }
        for g in 0..groups {
            starts[g + 1] += starts[g];
        }
        let mut fill = starts.clone();
        let mut entries = vec![Entry::default(); HASHES * digests.len()];
        for (item, d) in digests.iter().enumerate() {
            for (h, &b) in d.bins.iter().enumerate() {
                let slot = &mut fill[b as usize / GROUP_BINS];
                entries[*slot as usize] = Entry {
                    input: d.input(h),
                    bin: b,
                    item: item as u32,
                };
                *slot += 1;
            }
        }
        SimpleTable { starts, entries }
    }

    /// Entries whose bins lie in the groups covering bins `j0 .. j1` (`j0` a multiple of
    /// [`GROUP_BINS`]).
    pub(crate) fn entries_for(&self, j0: usize, j1: usize) -> &[Entry] {
        let (g0, g1) = (j0 / GROUP_BINS, j1.div_ceil(GROUP_BINS));
        &self.entries[self.starts[g0] as usize..self.starts[g1] as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digests(n: usize, m: u32, seed: u8) -> Vec<ItemDigest> {
        let items: Vec<Vec<u8>> = (0..n as u32).map(|i| i.to_le_bytes().to_vec()).collect();
        digest_all(&items, &[seed; 32], m)
    }

    fn check(table: &[u32], ds: &[ItemDigest]) {
        let mut seen = vec![false; ds.len()];
        for (b, &e) in table.iter().enumerate() {
            if e != EMPTY {
                let (x, h) = ((e >> 2) as usize, (e & 3) as usize);
                assert_eq!(ds[x].bins[h] as usize, b);
                assert!(!seen[x]);
                seen[x] = true;
            }
        }
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn bins_are_distinct_and_in_range() {
        for m in [3u32, 4, 5, 100] {
            for d in digests(500, m, 1) {
                assert!(d.bins.iter().all(|&b| b < m));
                assert!(d.bins[0] != d.bins[1] && d.bins[1] != d.bins[2] && d.bins[0] != d.bins[2]);
                assert_eq!(d.block[15] & 3, 0);
            }
        }
    }

    #[test]
    fn table_sizes() {
        assert_eq!(table_size(0), 3);
        assert_eq!(table_size(3), 3);
        assert_eq!(table_size(1 << 20), 1_331_692);
        // The server's cap is the default table size, exactly (one owner).
        for n in (0..64)
            .chain((64..4200).step_by(37))
            .chain([4095, 4096, 1 << 20, 1 << 24])
        {
            assert_eq!(
                table_size(n),
                super::super::messages::max_bins_for(n as u32) as usize,
                "n={n}"
            );
        }
        for n in [4usize, 10, 100, 1000, 4095] {
            let m = table_size(n);
            assert!(failure_bound_log2(n, m) <= -40.0, "n={n} m={m}");
            assert!(
                failure_bound_log2(n, m - 1) > -40.0,
                "n={n} m={m} is minimal"
            );
        }
    }

    /// The precomputed sizes are the rigorous computation's, for every `n < 4096` (in
    /// parallel: a few seconds in a debug build), and the rule changes at `LARGE_N`.
    #[test]
    fn small_table_sizes_are_the_rigorous_ones() {
        let lf = ln_factorials(16 * LARGE_N + 64);
        let wrong: Vec<(usize, usize, usize)> = (0..LARGE_N)
            .into_par_iter()
            .filter_map(|n| {
                let rigorous = rigorous_table_size(n, &lf);
                (table_size(n) != rigorous).then_some((n, table_size(n), rigorous))
            })
            .collect();
        assert!(wrong.is_empty(), "(n, table, rigorous): {wrong:?}");
        assert_eq!(table_size(LARGE_N - 1), 6422);
        assert_eq!(table_size(LARGE_N), 5202, "ceil(1.27 n) from 4096 on");
    }

    #[test]
    fn default_tables_never_fail_in_seeded_trials() {
        // Empirical check of the table sizes (the bound says ≤ 2^-40 per run).
        for &(n, reps) in &[
            (4usize, 2000u32),
            (16, 1000),
            (64, 500),
            (256, 200),
            (1024, 40),
            (4096, 15),
        ] {
            let m = table_size(n);
            let items: Vec<Vec<u8>> = (0..n as u32).map(|i| i.to_le_bytes().to_vec()).collect();
            for r in 0..reps {
                let mut sid = [0u8; 32];
                sid[..4].copy_from_slice(&r.to_le_bytes());
                sid[4..12].copy_from_slice(&(n as u64).to_le_bytes());
                let ds = digest_all(&items, &sid, m as u32);
                let table =
                    place(&ds, m, r as u64).unwrap_or_else(|e| panic!("n={n} trial {r}: {e}"));
                if r == 0 {
                    check(&table, &ds);
                }
            }
        }
    }

    #[test]
    fn placement_is_complete_when_tight() {
        // Near the load threshold the random walk gives up often; the BFS must finish.
        let n = 900;
        let m = 1000;
        let ds = digests(n, m as u32, 3);
        let table = place(&ds, m, 7).unwrap();
        check(&table, &ds);
    }

    #[test]
    fn too_small_table_fails() {
        let ds = digests(100, 99, 4);
        assert!(matches!(
            place(&ds, 99, 1),
            Err(Error::CuckooFailed {
                items: 100,
                bins: 99
            })
        ));
        let ds = digests(2000, 2000, 4);
        assert!(matches!(
            place(&ds, 2000, 1),
            Err(Error::CuckooFailed { .. })
        ));
    }

    #[test]
    fn simple_table_groups_by_bin() {
        let m = 1000;
        let ds = digests(300, m as u32, 5);
        let st = SimpleTable::new(&ds, m);
        assert_eq!(st.entries.len(), 3 * ds.len());
        let mut seen = 0;
        for j0 in (0..m).step_by(GROUP_BINS) {
            let j1 = (j0 + GROUP_BINS).min(m);
            for e in st.entries_for(j0, j1) {
                assert!((j0..j1).contains(&(e.bin as usize)));
                let h = e.hash_index();
                assert!(
                    ds.iter()
                        .any(|d| d.bins[h] == e.bin && d.input(h) == e.input)
                );
                seen += 1;
            }
        }
        assert_eq!(seen, 3 * ds.len());
    }

    /// Failure rates of the code's placement (`place`: random walk, then complete
    /// breadth-first augmenting paths) near the 3-ary Cuckoo threshold, for
    /// `docs/protocol/ot-psi.md` §6.1. Bins come from `bins_of` (the digest's own mapping)
    /// on SplitMix64 words, so no SHA-256 per item. Run in a release build:
    /// `CUCKOO_SIM_TRIALS=2000 cargo test --release -p psi-core --lib cuckoo_failure_rates -- --ignored --nocapture`
    /// (optionally `CUCKOO_SIM_N=256,1024,4096` and `CUCKOO_SIM_RATIOS=1.10,1.12,...`).
    /// Prints one row per (n, m/n): failures / trials, the rate and log2 of the rate.
    #[test]
    #[ignore = "simulation, minutes in a release build"]
    fn cuckoo_failure_rates() {
        let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
        let trials: u64 = env("CUCKOO_SIM_TRIALS", "2000").parse().unwrap();
        let ns: Vec<usize> = env("CUCKOO_SIM_N", "256,1024,4096,16384")
            .split(',')
            .map(|x| x.trim().parse().unwrap())
            .collect();
        let ratios: Vec<f64> = env(
            "CUCKOO_SIM_RATIOS",
            "1.09,1.10,1.11,1.12,1.13,1.14,1.15,1.16,1.18,1.20",
        )
        .split(',')
        .map(|x| x.trim().parse().unwrap())
        .collect();
        let mut state = 0x243f_6a88_85a3_08d3u64;
        let mut splitmix = move || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        println!("| n | m/n | m | failures / trials | rate | log2 rate |");
        println!("|---:|---:|---:|---:|---:|---:|");
        for &n in &ns {
            for &r in &ratios {
                let m = (n as f64 * r).ceil() as usize;
                let t0 = std::time::Instant::now();
                let mut fails = 0u64;
                let mut ds = vec![
                    ItemDigest {
                        block: [0; 16],
                        bins: [0; HASHES]
                    };
                    n
                ];
                for t in 0..trials {
                    for d in ds.iter_mut() {
                        d.bins = bins_of([splitmix(), splitmix(), splitmix()], m as u32);
                    }
                    if place(&ds, m, t + 1).is_err() {
                        fails += 1;
                    }
                }
                let rate = fails as f64 / trials as f64;
                println!(
                    "| {n} | {r:.2} | {m} | {fails} / {trials} | {rate:.4} | {} |  ({:.1} s)",
                    if fails == 0 {
                        format!("< {:.1}", -(trials as f64).log2())
                    } else {
                        format!("{:.2}", rate.log2())
                    },
                    t0.elapsed().as_secs_f64()
                );
            }
        }
    }
}
