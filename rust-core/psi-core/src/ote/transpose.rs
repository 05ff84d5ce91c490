//! Bit-matrix transpose, the hot spot of OT extension.
//!
//! Bit order everywhere in OT-PSI is little-endian within a byte: bit `j` of a byte string
//! `b` is `(b[j / 8] >> (j % 8)) & 1`. A matrix with `rows` rows of `row_bytes` bytes has
//! bit `(i, j)` at bit `j` of row `i`; its transpose has `8 * row_bytes` rows of
//! `rows / 8` bytes with bit `(j, i)` equal to bit `(i, j)` of the input.
//!
//! Two kernels compute the same function:
//! - a portable one that gathers 8x8 bit blocks into a `u64` and transposes them with
//!   three delta swaps (Hacker's Delight, section 7-3); correct on every target;
//! - on x86-64, an SSE2 one (SSE2 is part of the x86-64 baseline) that transposes 16x16
//!   byte tiles with unpack instructions and then peels bit planes off with `movemask`.
//!
//! Tests check the two against a bit-by-bit reference.

/// Transposes the whole matrix. `rows` must be a multiple of 8 and
/// `input.len() == rows * row_bytes`; `out.len()` must equal `input.len()`.
pub(crate) fn transpose(input: &[u8], rows: usize, row_bytes: usize, out: &mut [u8]) {
    transpose_cols(input, rows, row_bytes, 0, row_bytes, out);
}

/// Transposes the byte columns `c0..c1` of the input, writing output rows
/// `8 * c0 .. 8 * c1` (each `rows / 8` bytes) into `out`, which holds exactly those rows.
/// Callers split the columns to run this in parallel.
pub(crate) fn transpose_cols(
    input: &[u8],
    rows: usize,
    row_bytes: usize,
    c0: usize,
    c1: usize,
    out: &mut [u8],
) {
    assert!(
        rows.is_multiple_of(8),
        "transpose needs a multiple of 8 rows"
    );
    assert_eq!(input.len(), rows * row_bytes, "input size");
    assert!(c0 <= c1 && c1 <= row_bytes, "column range");
    assert_eq!(out.len(), (c1 - c0) * rows, "output size");
    #[cfg(target_arch = "x86_64")]
    {
        if rows.is_multiple_of(16) {
            x86::transpose_cols(input, rows, row_bytes, c0, c1, out);
            return;
        }
    }
    portable_cols(input, rows, row_bytes, c0, c1, out);
}

/// Transposes an 8x8 bit block held in a `u64`: byte `k`, bit `b` moves to byte `b`, bit `k`.
#[inline(always)]
fn transpose8(mut x: u64) -> u64 {
    let t = (x ^ (x >> 7)) & 0x00AA_00AA_00AA_00AA;
    x ^= t ^ (t << 7);
    let t = (x ^ (x >> 14)) & 0x0000_CCCC_0000_CCCC;
    x ^= t ^ (t << 14);
    let t = (x ^ (x >> 28)) & 0x0000_0000_F0F0_F0F0;
    x ^= t ^ (t << 28);
    x
}

/// The portable kernel (also the reference the SIMD kernels are tested against).
pub(crate) fn portable_cols(
    input: &[u8],
    rows: usize,
    row_bytes: usize,
    c0: usize,
    c1: usize,
    out: &mut [u8],
) {
    let out_row_bytes = rows / 8;
    for rb in 0..rows / 8 {
        let base = rb * 8 * row_bytes;
        for c in c0..c1 {
            let mut x = 0u64;
            for k in 0..8 {
                x |= (input[base + k * row_bytes + c] as u64) << (8 * k);
            }
            let y = transpose8(x).to_le_bytes();
            let o = (c - c0) * 8 * out_row_bytes + rb;
            for (b, &byte) in y.iter().enumerate() {
                out[o + b * out_row_bytes] = byte;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::x86_64::*;

    /// Dispatches to the SSE2 kernel.
    #[allow(unsafe_code)]
    pub(super) fn transpose_cols(
        input: &[u8],
        rows: usize,
        row_bytes: usize,
        c0: usize,
        c1: usize,
        out: &mut [u8],
    ) {
        // SAFETY: `sse2_cols` is a safe function whose only requirement is that the CPU
        // supports SSE2, which every x86-64 CPU does (it is part of the x86-64 baseline
        // ABI). The kernel itself uses no raw pointers: all loads and stores go through
        // bounds-checked slices.
        unsafe { sse2_cols(input, rows, row_bytes, c0, c1, out) }
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    fn load(b: &[u8]) -> __m128i {
        let lo = u64::from_le_bytes(b[0..8].try_into().expect("8 bytes"));
        let hi = u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"));
        _mm_set_epi64x(hi as i64, lo as i64)
    }

    /// Emits the 8 bit planes of `v` (byte `k` of `v` = byte of input row `r0 + k`) as
    /// 16-bit pieces of output rows `8c .. 8c + 8`, at byte offset `o` of row 8c.
    #[inline]
    #[target_feature(enable = "sse2")]
    fn planes(mut v: __m128i, out: &mut [u8], o: usize, out_row_bytes: usize) {
        for b in (0..8).rev() {
            let m = _mm_movemask_epi8(v) as u16;
            let at = o + b * out_row_bytes;
            out[at..at + 2].copy_from_slice(&m.to_le_bytes());
            v = _mm_slli_epi64(v, 1);
        }
    }

    #[target_feature(enable = "sse2")]
    fn sse2_cols(
        input: &[u8],
        rows: usize,
        row_bytes: usize,
        c0: usize,
        c1: usize,
        out: &mut [u8],
    ) {
        let out_row_bytes = rows / 8;
        let full_end = c0 + (c1 - c0) / 16 * 16;
        // Column tiles outside, rows inside: the 128 output rows of a tile (8 KiB for 512
        // input rows) stay in L1 while the tile's input rows stream past.
        let mut c = c0;
        while c < full_end {
            for r0 in (0..rows).step_by(16) {
                tile(input, row_bytes, r0, c, c0, out, out_row_bytes);
            }
            c += 16;
        }
        // Remaining columns one at a time.
        for c in full_end..c1 {
            for r0 in (0..rows).step_by(16) {
                let mut b = [0u8; 16];
                for (k, bk) in b.iter_mut().enumerate() {
                    *bk = input[(r0 + k) * row_bytes + c];
                }
                planes(
                    load(&b),
                    out,
                    (c - c0) * 8 * out_row_bytes + r0 / 8,
                    out_row_bytes,
                );
            }
        }
    }

    /// One 16x16 byte tile: input rows `r0..r0 + 16`, byte columns `c..c + 16`.
    #[inline]
    #[target_feature(enable = "sse2")]
    fn tile(
        input: &[u8],
        row_bytes: usize,
        r0: usize,
        c: usize,
        c0: usize,
        out: &mut [u8],
        out_row_bytes: usize,
    ) {
        let mut x = [_mm_setzero_si128(); 16];
        for (k, xk) in x.iter_mut().enumerate() {
            let s = (r0 + k) * row_bytes + c;
            *xk = load(&input[s..s + 16]);
        }
        // Byte-level 16x16 transpose: after four rounds of interleaving every register
        // holds one byte column of rows r0..r0+16, in row order.
        let mut y = [_mm_setzero_si128(); 16];
        for i in 0..8 {
            y[2 * i] = _mm_unpacklo_epi8(x[2 * i], x[2 * i + 1]);
            y[2 * i + 1] = _mm_unpackhi_epi8(x[2 * i], x[2 * i + 1]);
        }
        for i in 0..4 {
            for h in 0..2 {
                x[4 * i + h] = _mm_unpacklo_epi16(y[4 * i + h], y[4 * i + 2 + h]);
                x[4 * i + 2 + h] = _mm_unpackhi_epi16(y[4 * i + h], y[4 * i + 2 + h]);
            }
        }
        for i in 0..2 {
            for h in 0..4 {
                y[8 * i + h] = _mm_unpacklo_epi32(x[8 * i + h], x[8 * i + 4 + h]);
                y[8 * i + 4 + h] = _mm_unpackhi_epi32(x[8 * i + h], x[8 * i + 4 + h]);
            }
        }
        for h in 0..8 {
            x[h] = _mm_unpacklo_epi64(y[h], y[8 + h]);
            x[8 + h] = _mm_unpackhi_epi64(y[h], y[8 + h]);
        }
        // x[p] now holds byte column c + COLUMN_OF[p].
        for (p, &v) in x.iter().enumerate() {
            let col = c + COLUMN_OF[p];
            planes(
                v,
                out,
                (col - c0) * 8 * out_row_bytes + r0 / 8,
                out_row_bytes,
            );
        }
    }

    /// Which byte column of the tile ends up in register `p` after the interleaving
    /// rounds above (computed once, by hand, and checked by the tests).
    const COLUMN_OF: [usize; 16] = column_of();

    const fn column_of() -> [usize; 16] {
        // Track where byte (row k, column j) goes: after round r the register index and
        // byte position follow the interleave pattern. We only need, for each output
        // register, which column it carries; simulate on column labels.
        let mut reg_col = [[0usize; 16]; 16]; // reg_col[reg][byte] = column label
        let mut reg_row = [[0usize; 16]; 16];
        let mut k = 0;
        while k < 16 {
            let mut j = 0;
            while j < 16 {
                reg_col[k][j] = j;
                reg_row[k][j] = k;
                j += 1;
            }
            k += 1;
        }
        // Round 1: epi8 interleave of (2i, 2i+1) -> (2i lo, 2i+1 hi).
        let (c1, r1) = round(&reg_col, &reg_row, 1);
        let (c2, r2) = round(&c1, &r1, 2);
        let (c3, r3) = round(&c2, &r2, 4);
        let (c4, _r4) = round(&c3, &r3, 8);
        let mut res = [0usize; 16];
        let mut p = 0;
        while p < 16 {
            res[p] = c4[p][0];
            p += 1;
        }
        res
    }

    /// One interleave round with element size `w` bytes, mirroring the loops above.
    #[allow(clippy::type_complexity)]
    const fn round(
        col: &[[usize; 16]; 16],
        row: &[[usize; 16]; 16],
        w: usize,
    ) -> ([[usize; 16]; 16], [[usize; 16]; 16]) {
        let mut oc = [[0usize; 16]; 16];
        let mut or = [[0usize; 16]; 16];
        // Pairs (a, b) and the output registers (lo, hi) for each round.
        let mut idx = 0;
        while idx < 8 {
            let (a, b, lo, hi) = match w {
                1 => (2 * idx, 2 * idx + 1, 2 * idx, 2 * idx + 1),
                2 => {
                    let i = idx / 2;
                    let h = idx % 2;
                    (4 * i + h, 4 * i + 2 + h, 4 * i + h, 4 * i + 2 + h)
                }
                4 => {
                    let i = idx / 4;
                    let h = idx % 4;
                    (8 * i + h, 8 * i + 4 + h, 8 * i + h, 8 * i + 4 + h)
                }
                _ => (idx, 8 + idx, idx, 8 + idx),
            };
            // unpacklo: elements 0..8/w of a and b interleaved; unpackhi: the upper half.
            let n = 8 / w; // elements per half
            let mut e = 0;
            while e < n {
                let mut t = 0;
                while t < w {
                    // lo register
                    oc[lo][(2 * e) * w + t] = col[a][e * w + t];
                    or[lo][(2 * e) * w + t] = row[a][e * w + t];
                    oc[lo][(2 * e + 1) * w + t] = col[b][e * w + t];
                    or[lo][(2 * e + 1) * w + t] = row[b][e * w + t];
                    // hi register
                    oc[hi][(2 * e) * w + t] = col[a][(n + e) * w + t];
                    or[hi][(2 * e) * w + t] = row[a][(n + e) * w + t];
                    oc[hi][(2 * e + 1) * w + t] = col[b][(n + e) * w + t];
                    or[hi][(2 * e + 1) * w + t] = row[b][(n + e) * w + t];
                    t += 1;
                }
                e += 1;
            }
            idx += 1;
        }
        (oc, or)
    }

    #[cfg(test)]
    #[test]
    fn interleave_keeps_rows_in_order() {
        // After the four rounds every register must hold a single column, rows 0..16 in order.
        let mut col = [[0usize; 16]; 16];
        let mut row = [[0usize; 16]; 16];
        for k in 0..16 {
            for j in 0..16 {
                col[k][j] = j;
                row[k][j] = k;
            }
        }
        let (c, r) = round(&col, &row, 1);
        let (c, r) = round(&c, &r, 2);
        let (c, r) = round(&c, &r, 4);
        let (c, r) = round(&c, &r, 8);
        let mut seen = [false; 16];
        for p in 0..16 {
            for b in 0..16 {
                assert_eq!(c[p][b], c[p][0]);
                assert_eq!(r[p][b], b);
            }
            seen[c[p][0]] = true;
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(COLUMN_OF.iter().sum::<usize>(), 120);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(input: &[u8], rows: usize, row_bytes: usize) -> Vec<u8> {
        let out_row_bytes = rows / 8;
        let mut out = vec![0u8; input.len()];
        for i in 0..rows {
            for j in 0..row_bytes * 8 {
                let bit = (input[i * row_bytes + j / 8] >> (j % 8)) & 1;
                out[j * out_row_bytes + i / 8] |= bit << (i % 8);
            }
        }
        out
    }

    fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    #[test]
    fn transpose8_moves_bits() {
        for k in 0..8 {
            for b in 0..8 {
                let x = 1u64 << (8 * k + b);
                assert_eq!(transpose8(x), 1u64 << (8 * b + k));
            }
        }
    }

    #[test]
    fn kernels_match_reference() {
        for &(rows, row_bytes) in &[
            (8, 1),
            (16, 1),
            (16, 16),
            (16, 17),
            (128, 64),
            (512, 16),
            (512, 48),
            (32, 33),
            (24, 5),
        ] {
            let input = pseudo_random(rows * row_bytes, (rows * 1000 + row_bytes) as u64);
            let want = reference(&input, rows, row_bytes);
            let mut got = vec![0u8; input.len()];
            transpose(&input, rows, row_bytes, &mut got);
            assert_eq!(got, want, "dispatch {rows}x{row_bytes}");
            let mut got = vec![0u8; input.len()];
            portable_cols(&input, rows, row_bytes, 0, row_bytes, &mut got);
            assert_eq!(got, want, "portable {rows}x{row_bytes}");
            // Column sub-ranges, as the parallel callers use them.
            if row_bytes > 3 {
                let (c0, c1) = (1, row_bytes - 1);
                let mut part = vec![0u8; (c1 - c0) * rows];
                transpose_cols(&input, rows, row_bytes, c0, c1, &mut part);
                assert_eq!(part, want[8 * c0 * (rows / 8)..8 * c1 * (rows / 8)]);
            }
        }
    }

    #[test]
    fn transpose_is_an_involution() {
        let (rows, row_bytes) = (128, 16);
        let input = pseudo_random(rows * row_bytes, 7);
        let mut once = vec![0u8; input.len()];
        transpose(&input, rows, row_bytes, &mut once);
        let mut twice = vec![0u8; input.len()];
        transpose(&once, row_bytes * 8, rows / 8, &mut twice);
        assert_eq!(twice, input);
    }
}
