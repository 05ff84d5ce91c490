//! GBF-PSI parameters, derived the same way by both sides from the two set sizes
//! (docs/protocol/gbf-psi.md §2, where the derivation and a table stand).
//!
//! - `k`, the Bloom filter's hash functions: `σ + ceil(log2 n_s)` with `σ = 40`. A filter
//!   built at its optimal size (below) accepts an item it does not hold with probability
//!   at most `2^-k` (DCW13 §6.1 sets `k = λ` for "a false positive probability of at most
//!   `2^-λ`"); over the server's `n_s` items the client learns the value of one that is
//!   not in its set with probability at most `n_s 2^-k <= 2^-40` per run (PSZ14 §4.3,
//!   "Security": the filter's false positives are the only way the client's view depends
//!   on items outside the intersection).
//! - `m`, the filter's bits: `k n_c / ln 2` (DCW13 §6.1's "optimal value `kn log2 e`"),
//!   computed as `ceil(k n_c 1442696 / 10^6)` (1.442696 >= 1/ln 2, so never below the
//!   optimum, where the false-positive bound holds) and rounded up to whole IKNP
//!   instances of 512 bits; at least 512.
//! - `ℓ`, the bits of each compared value: `40 + ceil(log2 n_c) + ceil(log2 n_s)` (PSZ14
//!   §4.3's `λ + log2 n1 + log2 n2`, the rule of every protocol here).

use crate::protocol::{STATISTICAL_SECURITY, ceil_log2, false_match_bits};

/// OTs per IKNP instance: the filter's size is a multiple of it.
pub const INSTANCE_BITS: u32 = 512;
/// Fewest hash functions (`n_s <= 1`).
pub const MIN_HASHES: u32 = STATISTICAL_SECURITY;

/// The filter's hash functions `k` for `n_s` server items.
pub fn hashes(server_items: u64) -> u32 {
    STATISTICAL_SECURITY + ceil_log2(server_items)
}

/// The filter's bits `m` for `n_c` client items and `k` hash functions (`None` above
/// `u32::MAX` rounded down to whole instances).
pub fn filter_bits(client_items: u64, hashes: u32) -> Option<u32> {
    let raw = (hashes as u128 * client_items.max(1) as u128 * 1_442_696).div_ceil(1_000_000);
    let m = raw.div_ceil(INSTANCE_BITS as u128) * INSTANCE_BITS as u128;
    u32::try_from(m).ok()
}

/// Bits of each compared value `ℓ`.
pub fn output_bits(client_items: u64, server_items: u64) -> u32 {
    false_match_bits(client_items, server_items)
}

/// All parameters of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// Client items `n_c`.
    pub client_items: u32,
    /// Server items `n_s`.
    pub server_items: u32,
    /// Hash functions `k`.
    pub hashes: u32,
    /// Filter bits `m` (the number of random OTs), a multiple of [`INSTANCE_BITS`].
    pub filter_bits: u32,
    /// Bits of each compared value `ℓ`.
    pub output_bits: u32,
}

impl Params {
    /// The parameters for `n_c` and `n_s` (`None` if the filter would not fit a u32).
    pub fn new(client_items: u32, server_items: u32) -> Option<Params> {
        let hashes = hashes(server_items as u64);
        Some(Params {
            client_items,
            server_items,
            hashes,
            filter_bits: filter_bits(client_items as u64, hashes)?,
            output_bits: output_bits(client_items as u64, server_items as u64),
        })
    }

    /// IKNP instances: `m / 512`.
    pub fn instances(&self) -> u32 {
        self.filter_bits / INSTANCE_BITS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table in docs/protocol/gbf-psi.md §2. A change here is a protocol change.
    #[test]
    fn parameters_match_the_spec_table() {
        let table: &[(u32, u32, u32, u32, u32)] = &[
            // n_c, n_s, k, m, ℓ
            (0, 0, 40, 512, 40),
            (1, 1, 40, 512, 40),
            (1000, 100_000, 57, 82_432, 67),
            (1000, 1_000_000, 60, 87_040, 70),
            (1 << 12, 1 << 12, 52, 307_712, 64),
            (1 << 16, 1 << 16, 56, 5_295_104, 72),
            (1 << 20, 1 << 20, 60, 90_766_848, 80),
        ];
        for &(n_c, n_s, k, m, l) in table {
            let p = Params::new(n_c, n_s).unwrap();
            assert_eq!(
                (p.hashes, p.filter_bits, p.output_bits),
                (k, m, l),
                "{n_c} x {n_s}"
            );
        }
    }

    /// Never below the optimum `k n / ln 2`, where the false-positive bound `2^-k` holds,
    /// and less than one instance above it.
    #[test]
    fn filter_is_at_least_optimal() {
        for n in [1u64, 7, 1000, 65_536, 1_000_000] {
            for k in [40u32, 57, 64] {
                let m = filter_bits(n, k).unwrap() as f64;
                let opt = k as f64 * n as f64 / std::f64::consts::LN_2;
                assert!(m >= opt && m < opt + 513.0, "n {n} k {k}");
                let fp = (1.0 - (-(k as f64) * n as f64 / m).exp()).powi(k as i32);
                assert!(fp <= 2f64.powi(-(k as i32)) * (1.0 + 1e-9), "n {n} k {k}");
            }
        }
    }
}
