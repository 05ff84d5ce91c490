//! CM20 parameters (Chase-Miao, CRYPTO 2020, section 3.3 and 4.1), derived the same way by
//! both sides from the two set sizes. The derivation and a table for the supported sizes
//! are in `docs/protocol/cm20-psi.md`, section 2.

use crate::protocol::{STATISTICAL_SECURITY, ceil_log2, false_match_bits};

/// `d`: the Hamming weight every non-member's row of `D` must have (the paper's section
/// 4.1 sets `d = λ = 128`).
pub const MIN_WEIGHT: u32 = 128;
/// Computational security λ in bits.
pub const COMPUTATIONAL_SECURITY: u32 = 128;
/// Smallest matrix height (one AES block per column).
pub const MIN_HEIGHT: u32 = 128;
/// Widest matrix the protocol accepts.
pub const MAX_WIDTH: u32 = 2048;
/// Bits of `H1`'s output (`l1 = 2λ`, section 3.3).
pub const H1_BITS: u32 = 256;

/// The matrix height `m` for `n_c` client items: `n_c` rounded up to a power of two, at
/// least [`MIN_HEIGHT`] (so every index is exactly `log2 m` bits of `F`'s output, with no
/// modulo bias; docs/adr/0021-cm20-psi.md).
pub fn height(client_items: u64) -> u32 {
    let n = client_items.max(MIN_HEIGHT as u64);
    (1u64 << ceil_log2(n)) as u32
}

/// `log2 m`: the bits of `F`'s output per column index.
pub fn index_bits(height: u32) -> u32 {
    debug_assert!(height.is_power_of_two());
    height.trailing_zeros()
}

/// `ln` of the probability that a non-member's `w` looked-up bits of `D` hold fewer than
/// `d` ones, `ln Σ_{k<d} C(w,k) p^k (1-p)^(w-k)` with `p = (1 - 1/m)^n_c` (section 3.3).
fn ln_tail(width: u32, p: f64) -> f64 {
    if p >= 1.0 {
        return f64::NEG_INFINITY; // every bit of D is one
    }
    let l1p = (-p).ln_1p();
    let ratio = p.ln() - l1p;
    let mut term = width as f64 * l1p;
    let mut terms = Vec::with_capacity(MIN_WEIGHT as usize);
    terms.push(term);
    for k in 0..MIN_WEIGHT - 1 {
        term += ((width - k) as f64 / (k + 1) as f64).ln() + ratio;
        terms.push(term);
    }
    let max = terms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    max + terms.iter().map(|t| (t - max).exp()).sum::<f64>().ln()
}

/// The matrix width `w` for `n_c` client items, `n_s` server items and height `m`: the
/// smallest `w >= d` with `n_s · Σ_{k<d} C(w,k) p^k (1-p)^(w-k) <= 2^-40`
/// (the union bound of section 3.3 over the server's items) and
/// `(1/2 + 1/(2m))^w <= 2^-128` (the extra condition of section 3.3 for a malicious
/// server). `None` if no `w <= MAX_WIDTH` qualifies.
pub fn width(client_items: u64, server_items: u64, height: u32) -> Option<u32> {
    let m = height as f64;
    let p = (client_items as f64 * (-1.0 / m).ln_1p()).exp();
    let bound = -(STATISTICAL_SECURITY as f64) * std::f64::consts::LN_2;
    let ln_ns = (server_items.max(1) as f64).ln();
    let per_column = -(0.5 + 0.5 / m).log2();
    let qualifies = |w: u32| {
        w as f64 * per_column >= COMPUTATIONAL_SECURITY as f64 && ln_ns + ln_tail(w, p) <= bound
    };
    // Both conditions only get easier as `w` grows (more columns, a smaller tail of
    // `Bin(w, p)` below `d`), so the smallest qualifying width is found by bisection: the
    // cost model asks for it many times (a first run's plan, ADR 0054).
    if !qualifies(MAX_WIDTH) {
        return None;
    }
    let (mut lo, mut hi) = (MIN_WEIGHT, MAX_WIDTH);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if qualifies(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Some(lo)
}

/// Bits of each server output `l2 = 40 + ceil(log2 n_c) + ceil(log2 n_s)` (section 3.3,
/// the same rule as every protocol here, [`false_match_bits`]).
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
    /// Matrix height `m`.
    pub height: u32,
    /// Matrix width `w` (the number of random OTs).
    pub width: u32,
    /// Output bits `l2`.
    pub output_bits: u32,
}

impl Params {
    /// The parameters for `n_c` and `n_s` (`None` if no width qualifies).
    pub fn new(client_items: u32, server_items: u32) -> Option<Params> {
        let height = height(client_items as u64);
        Some(Params {
            client_items,
            server_items,
            height,
            width: width(client_items as u64, server_items as u64, height)?,
            output_bits: output_bits(client_items as u64, server_items as u64),
        })
    }

    /// Bytes of one matrix column (`m / 8`).
    pub fn column_bytes(&self) -> usize {
        self.height as usize / 8
    }

    /// `t`: AES blocks of `F`'s output per item, `ceil(w · log2 m / 128)`.
    pub fn prf_blocks(&self) -> usize {
        (self.width as usize * index_bits(self.height) as usize).div_ceil(128)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table in docs/protocol/cm20-psi.md §2 (computed there with the same formula in
    /// double precision). A change here is a protocol change.
    #[test]
    fn width_matches_the_spec_table() {
        let table: &[(u64, u64, u32, u32, u32)] = &[
            // n_c, n_s, m, w, l2
            (0, 0, 128, 130, 40),
            (1, 1, 128, 142, 40),
            (256, 256, 256, 585, 56),
            (1 << 10, 1 << 10, 1 << 10, 591, 60),
            (1 << 12, 1 << 12, 1 << 12, 597, 64),
            (1 << 16, 1 << 16, 1 << 16, 609, 72),
            (1 << 20, 1 << 20, 1 << 20, 621, 80),
            (1 << 24, 1 << 24, 1 << 24, 633, 88),
            (250, 20_000, 256, 589, 63),
            (1000, 100_000, 1024, 595, 67),
            (1000, 1_000_000, 1024, 605, 70),
            (1_000_000, 1000, 1 << 20, 561, 70),
        ];
        for &(n_c, n_s, m, w, l2) in table {
            assert_eq!(height(n_c), m, "m for {n_c}");
            assert_eq!(width(n_c, n_s, m), Some(w), "w for {n_c} x {n_s}");
            assert_eq!(output_bits(n_c, n_s), l2);
        }
    }

    #[test]
    fn the_bisected_width_is_the_smallest_qualifying_one() {
        // The linear search the bisection replaces, over sizes from tiny to the largest.
        let linear = |n_c: u64, n_s: u64, height: u32| {
            let m = height as f64;
            let p = (n_c as f64 * (-1.0 / m).ln_1p()).exp();
            let bound = -(STATISTICAL_SECURITY as f64) * std::f64::consts::LN_2;
            let ln_ns = (n_s.max(1) as f64).ln();
            let per_column = -(0.5 + 0.5 / m).log2();
            (MIN_WEIGHT..=MAX_WIDTH).find(|&w| {
                w as f64 * per_column >= COMPUTATIONAL_SECURITY as f64
                    && ln_ns + ln_tail(w, p) <= bound
            })
        };
        for a in 0..=24 {
            for b in (0..=32).step_by(2) {
                let (n_c, n_s) = (1u64 << a, 1u64 << b);
                let h = height(n_c);
                assert_eq!(width(n_c, n_s, h), linear(n_c, n_s, h), "{n_c} {n_s}");
                assert_eq!(width(n_c + 3, n_s + 7, h), linear(n_c + 3, n_s + 7, h));
            }
        }
    }

    #[test]
    fn width_is_monotone_in_the_server_set() {
        let m = height(5000);
        let a = width(5000, 10, m).unwrap();
        let b = width(5000, 1 << 24, m).unwrap();
        assert!(a <= b);
        assert!(a >= MIN_WEIGHT);
    }
}
