//! Golomb-Rice coding of a sorted list of truncated OPRF outputs.
//!
//! `n` sorted values `v_0 <= v_1 <= ...` below `2^L` are coded as their gaps
//! `d_0 = v_0`, `d_i = v_i - v_(i-1)`. Each gap is written as the quotient
//! `q = d >> k` in unary (`q` one bits, then a zero bit) followed by the low `k` bits of
//! `d`, most significant first. Bits fill bytes from the most significant bit down; the
//! last byte is padded with zero bits. For uniformly random values the gaps are close to
//! geometric and the cost is about `L - log2(n) + δ` bits per value, `1.47 <= δ <= 1.56`, against `L` bits
//! raw (see docs/protocol/dh-psi.md for measured numbers).
//!
//! The decoder is strict: exactly `n` values, each below `2^L`, then fewer than eight
//! zero padding bits. Anything else is a typed error, never a panic or an
//! unbounded loop.

use crate::error::DecodeError;
use std::ops::RangeInclusive;

/// Largest Rice parameter the coding allows.
pub const MAX_RICE_BITS: u8 = 127;

/// Writes bits most significant first.
struct BitWriter {
    out: Vec<u8>,
    acc: u64,
    nbits: u32,
}

impl BitWriter {
    fn with_capacity(bytes: usize) -> Self {
        BitWriter {
            out: Vec::with_capacity(bytes),
            acc: 0,
            nbits: 0,
        }
    }

    /// Appends the low `n <= 32` bits of `value`.
    fn put32(&mut self, value: u64, n: u32) {
        debug_assert!(n <= 32);
        if n == 0 {
            return;
        }
        self.acc = (self.acc << n) | (value & ((1u64 << n) - 1));
        self.nbits += n;
        while self.nbits >= 8 {
            self.out.push((self.acc >> (self.nbits - 8)) as u8);
            self.nbits -= 8;
        }
    }

    /// Appends the low `n <= 128` bits of `value`.
    fn put(&mut self, value: u128, mut n: u32) {
        while n > 32 {
            n -= 32;
            self.put32((value >> n) as u64, 32);
        }
        self.put32(value as u64, n);
    }

    fn put_unary(&mut self, mut q: u128) {
        while q >= 32 {
            self.put32(u64::from(u32::MAX), 32);
            q -= 32;
        }
        // q ones followed by a zero.
        let q = q as u32;
        self.put32(((1u64 << q) - 1) << 1, q + 1);
    }

    fn finish(mut self) -> Vec<u8> {
        if self.nbits > 0 {
            let pad = 8 - self.nbits;
            self.put32(0, pad);
        }
        self.out
    }
}

/// Reads bits most significant first, never past the end.
struct BitReader<'a> {
    data: &'a [u8],
    pos: usize,
    total: usize,
}

impl<'a> BitReader<'a> {
    fn new(data: &'a [u8]) -> Self {
        BitReader {
            data,
            pos: 0,
            total: data.len() * 8,
        }
    }

    /// The next 64 bits, zero-padded past the end.
    #[inline]
    fn peek64(&self) -> u64 {
        let i = self.pos >> 3;
        let s = (self.pos & 7) as u32;
        let mut buf = [0u8; 9];
        let avail = self.data.len().saturating_sub(i).min(9);
        buf[..avail].copy_from_slice(&self.data[i..i + avail]);
        let hi = u64::from_be_bytes([
            buf[0], buf[1], buf[2], buf[3], buf[4], buf[5], buf[6], buf[7],
        ]);
        if s == 0 {
            hi
        } else {
            (hi << s) | (u64::from(buf[8]) >> (8 - s))
        }
    }

    fn remaining(&self) -> usize {
        self.total - self.pos
    }

    /// Reads `n <= 64` bits.
    #[inline]
    fn bits64(&mut self, n: u32) -> Result<u64, DecodeError> {
        if n == 0 {
            return Ok(0);
        }
        if (n as usize) > self.remaining() {
            return Err(DecodeError::MalformedSet("data ends inside a value"));
        }
        let v = self.peek64() >> (64 - n);
        self.pos += n as usize;
        Ok(v)
    }

    /// Reads `n <= 128` bits.
    fn bits(&mut self, n: u32) -> Result<u128, DecodeError> {
        if n <= 64 {
            return self.bits64(n).map(u128::from);
        }
        let hi = self.bits64(n - 64)?;
        let lo = self.bits64(64)?;
        Ok((u128::from(hi) << 64) | u128::from(lo))
    }

    /// Reads a unary quotient: ones up to a terminating zero.
    #[inline]
    fn unary(&mut self) -> Result<u128, DecodeError> {
        let mut q: u128 = 0;
        loop {
            let ones = self.peek64().leading_ones() as usize;
            let take = ones.min(64);
            if take < 64 {
                // `take` ones then the terminating zero, all inside the data?
                if take + 1 > self.remaining() {
                    return Err(DecodeError::MalformedSet("unterminated unary code"));
                }
                self.pos += take + 1;
                return Ok(q + take as u128);
            }
            if 64 > self.remaining() {
                return Err(DecodeError::MalformedSet("unterminated unary code"));
            }
            self.pos += 64;
            q += 64;
        }
    }
}

/// Exact size in bits of the coding of `sorted` with Rice parameter `k`, before the
/// padding of the last byte: the sum over the gaps `d` of `(d >> k) + 1 + k`
/// (docs/protocol/dh-psi.md §4). Saturates at `u128::MAX` instead of overflowing (only
/// possible for `k == 0` with values near `2^128`, a `k` no encoder would pick).
pub fn coded_bits(sorted: &[u128], k: u8) -> u128 {
    let k = u32::from(k);
    let mut prev = 0u128;
    let mut bits = 0u128;
    for &v in sorted {
        let gap_bits = (v - prev)
            .checked_shr(k)
            .unwrap_or(0)
            .saturating_add(1 + u128::from(k));
        bits = bits.saturating_add(gap_bits);
        prev = v;
    }
    bits
}

/// The Rice parameters [`best_rice_bits`] tries for `n` values below `2^l`
/// (`l <= 128`), as in docs/protocol/dh-psi.md §4: with
/// `c = l - bit_length(n)` (`bit_length(n) = floor(log2 n) + 1`, so
/// `2^c < 2^l / n <= 2^(c + 1)`), every `k` from `max(c - 3, 0)` to
/// `min(max(c + 2, 0), l, MAX_RICE_BITS)`; only `0` when `n == 0`.
pub fn rice_candidates(n: usize, l: u8) -> RangeInclusive<u8> {
    if n == 0 {
        return 0..=0;
    }
    let c = i32::from(l) - (usize::BITS - n.leading_zeros()) as i32;
    let hi = (c + 2).clamp(0, i32::from(l.min(MAX_RICE_BITS)));
    // `c - 3 <= hi` whenever `l <= 128`; clamping to `hi` only keeps the range non-empty.
    let lo = (c - 3).clamp(0, hi);
    lo as u8..=hi as u8
}

/// The Rice parameter that gives the smallest coding of `sorted` (ascending, values
/// below `2^l`): the smallest `k` among [`rice_candidates`] with the least
/// [`coded_bits`]. Depends only on the values, `n` and `l`, and uses integer
/// arithmetic only, so independent encoders can reproduce it bit for bit.
pub fn best_rice_bits(sorted: &[u128], l: u8) -> u8 {
    // `min_by_key` keeps the first of equal minima: ties go to the smallest k.
    rice_candidates(sorted.len(), l)
        .min_by_key(|&k| coded_bits(sorted, k))
        .unwrap_or(0)
}

/// Codes `sorted` (ascending, each below `2^l`) with Rice parameter
/// `k <= min(l, MAX_RICE_BITS)`.
pub fn encode(sorted: &[u128], l: u8, k: u8) -> Vec<u8> {
    assert!(k <= l.min(MAX_RICE_BITS), "Rice parameter out of range");
    debug_assert!(sorted.windows(2).all(|w| w[0] <= w[1]));
    debug_assert!(l == 128 || sorted.last().is_none_or(|&v| v >> l == 0));
    let bytes = coded_bits(sorted, k).div_ceil(8) as usize;
    let k = u32::from(k);
    let mut w = BitWriter::with_capacity(bytes);
    let mut prev = 0u128;
    let mask = if k == 0 { 0 } else { u128::MAX >> (128 - k) };
    for &v in sorted {
        let d = v - prev;
        w.put_unary(d >> k);
        w.put(d & mask, k);
        prev = v;
    }
    w.finish()
}

/// Codes an ascending stream of values one at a time: the same bytes as [`encode`] of the
/// whole list, without holding the list (a synced set of 10^8 tags would be 1.6 GB as
/// `u128`s; its coding is about 39 MB).
pub struct Encoder {
    writer: BitWriter,
    prev: u128,
    k: u32,
    mask: u128,
}

impl Encoder {
    /// An encoder for values below `2^l` with Rice parameter `k <= min(l, MAX_RICE_BITS)`,
    /// its buffer sized for `capacity` bytes.
    pub fn new(l: u8, k: u8, capacity: usize) -> Encoder {
        assert!(k <= l.min(MAX_RICE_BITS), "Rice parameter out of range");
        let k = u32::from(k);
        Encoder {
            writer: BitWriter::with_capacity(capacity),
            prev: 0,
            k,
            mask: if k == 0 { 0 } else { u128::MAX >> (128 - k) },
        }
    }

    /// Appends the next value (not below the previous one).
    pub fn push(&mut self, v: u128) {
        debug_assert!(v >= self.prev, "values must be ascending");
        let d = v - self.prev;
        self.writer.put_unary(d >> self.k);
        self.writer.put(d & self.mask, self.k);
        self.prev = v;
    }

    /// The coded bytes, the last one zero-padded.
    pub fn finish(self) -> Vec<u8> {
        self.writer.finish()
    }
}

/// [`coded_bits`] for every Rice parameter of a range at once, accumulated value by
/// value over an ascending stream, and the parameter [`best_rice_bits`] would pick.
pub struct SizeCounter {
    first: u8,
    bits: Vec<u128>,
    prev: u128,
}

impl SizeCounter {
    /// A counter for the parameters `candidates` (use [`rice_candidates`] of the list's
    /// length and `l`, as [`best_rice_bits`] does).
    pub fn new(candidates: RangeInclusive<u8>) -> SizeCounter {
        SizeCounter {
            first: *candidates.start(),
            bits: candidates.map(|_| 0).collect(),
            prev: 0,
        }
    }

    /// Counts the next value (not below the previous one).
    pub fn push(&mut self, v: u128) {
        let d = v - self.prev;
        for (i, b) in self.bits.iter_mut().enumerate() {
            let k = u32::from(self.first) + i as u32;
            let gap = d
                .checked_shr(k)
                .unwrap_or(0)
                .saturating_add(1 + u128::from(k));
            *b = b.saturating_add(gap);
        }
        self.prev = v;
    }

    /// The smallest parameter with the fewest bits, and those bits.
    pub fn best(&self) -> (u8, u128) {
        let mut best = (self.first, u128::MAX);
        for (i, &b) in self.bits.iter().enumerate() {
            if b < best.1 {
                best = (self.first + i as u8, b);
            }
        }
        if self.bits.is_empty() {
            best.1 = 0;
        }
        best
    }
}

/// Streams the values of a Golomb-Rice coded set, checking it as it goes.
pub struct Decoder<'a> {
    reader: BitReader<'a>,
    left: u64,
    prev: u128,
    l: u8,
    k: u32,
}

impl<'a> Decoder<'a> {
    /// A decoder for `count` values below `2^l` coded with parameter `k`
    /// (`k` above [`MAX_RICE_BITS`] is read as `MAX_RICE_BITS`; message decoders reject it
    /// before getting here).
    pub fn new(data: &'a [u8], count: u64, l: u8, k: u8) -> Self {
        let k = u32::from(k.min(MAX_RICE_BITS));
        Decoder {
            reader: BitReader::new(data),
            left: count,
            prev: 0,
            l,
            k,
        }
    }

    /// The next value, `Ok(None)` after the last one (once the padding checked out).
    pub fn next_value(&mut self) -> Result<Option<u128>, DecodeError> {
        if self.left == 0 {
            let r = self.reader.remaining();
            if r >= 8 || (r > 0 && self.reader.bits64(r as u32)? != 0) {
                return Err(DecodeError::MalformedSet("bytes left after the last value"));
            }
            return Ok(None);
        }
        let q = self.reader.unary()?;
        let r = self.reader.bits(self.k)?;
        let d = q
            .checked_mul(1u128 << self.k)
            .and_then(|x| x.checked_add(r))
            .ok_or(DecodeError::MalformedSet("value out of range"))?;
        let v = self
            .prev
            .checked_add(d)
            .ok_or(DecodeError::MalformedSet("value out of range"))?;
        if self.l < 128 && v >> self.l != 0 {
            return Err(DecodeError::MalformedSet("value out of range"));
        }
        self.prev = v;
        self.left -= 1;
        Ok(Some(v))
    }

    /// Decodes everything into a vector (for tests and small sets).
    pub fn collect_all(mut self) -> Result<Vec<u128>, DecodeError> {
        let mut out = Vec::new();
        while let Some(v) = self.next_value()? {
            out.push(v);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn streaming_encoder_and_counter_equal_the_whole_list_coding() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for (n, l) in [
            (0usize, 10u8),
            (1, 1),
            (7, 3),
            (1000, 12),
            (5000, 21),
            (300, 64),
        ] {
            let mut values: Vec<u128> = (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    u128::from(x) >> (128 - u32::from(l))
                })
                .collect();
            values.sort_unstable();
            let k = best_rice_bits(&values, l);
            let mut counter = SizeCounter::new(rice_candidates(values.len(), l));
            let mut enc = Encoder::new(l, k, 0);
            for &v in &values {
                counter.push(v);
                enc.push(v);
            }
            assert_eq!(counter.best(), (k, coded_bits(&values, k)), "n {n} l {l}");
            assert_eq!(enc.finish(), encode(&values, l, k), "n {n} l {l}");
        }
    }

    fn round_trip(mut values: Vec<u128>, l: u8) {
        values.sort_unstable();
        let k = best_rice_bits(&values, l);
        let data = encode(&values, l, k);
        let got = Decoder::new(&data, values.len() as u64, l, k)
            .collect_all()
            .unwrap();
        assert_eq!(got, values);
        // Every other k decodes too.
        for k in [0u8, l / 2, l.min(MAX_RICE_BITS)] {
            if coded_bits(&values, k) > 1 << 20 {
                continue; // a hopeless k for these values: unary parts would be huge
            }
            let data = encode(&values, l, k);
            assert_eq!(
                Decoder::new(&data, values.len() as u64, l, k)
                    .collect_all()
                    .unwrap(),
                values
            );
        }
    }

    proptest! {
        #[test]
        fn round_trips(values in prop::collection::vec(any::<u64>(), 0..300), l in 20u8..=64) {
            let mask = if l == 64 { u64::MAX } else { (1u64 << l) - 1 };
            round_trip(values.into_iter().map(|v| u128::from(v & mask)).collect(), l);
        }

        #[test]
        fn round_trips_wide(values in prop::collection::vec(any::<u128>(), 0..100), l in 65u8..=128) {
            let mask = if l == 128 { u128::MAX } else { (1u128 << l) - 1 };
            round_trip(values.into_iter().map(|v| v & mask).collect(), l);
        }

        #[test]
        fn garbage_never_panics(data in prop::collection::vec(any::<u8>(), 0..64), count in 0u64..50, l in 1u8..=128, k in 0u8..=255) {
            let mut d = Decoder::new(&data, count, l, k);
            for _ in 0..=count {
                match d.next_value() {
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => break,
                }
            }
        }
    }

    #[test]
    fn near_entropy_for_random_values() {
        // 2^14 uniformly random 54-bit values: about L - log2 n + 1.5 bits each.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut values: Vec<u128> = (0..1 << 14)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                u128::from(x >> 10)
            })
            .collect();
        values.sort_unstable();
        let k = best_rice_bits(&values, 54);
        let bits = encode(&values, 54, k).len() as f64 * 8.0 / values.len() as f64;
        assert!(bits < 54.0 - 14.0 + 2.0, "{bits} bits per value");
        assert!(bits > 54.0 - 14.0 + 1.0, "{bits} bits per value");
    }

    #[test]
    fn candidates_are_the_spec_range() {
        // The search range as first written (i64, u128 bit length); kept here to show
        // that `rice_candidates` picks the same k for every n and L.
        fn original(n: u128, l: u8) -> (u32, u32) {
            let mean_log = i64::from(l) - (128 - i64::from(n.leading_zeros()));
            let lo = (mean_log - 3).clamp(0, i64::from(l)) as u32;
            let hi = (mean_log + 2).clamp(0, i64::from(l.min(MAX_RICE_BITS))) as u32;
            (lo, hi)
        }
        let mut ns: Vec<usize> = (1..=70).collect();
        for b in 6..usize::BITS {
            let p = 1usize << b;
            ns.extend([p - 1, p, p + 1]);
        }
        ns.push(usize::MAX);
        for l in 0..=128u8 {
            assert_eq!(rice_candidates(0, l), 0..=0);
            for &n in &ns {
                let r = rice_candidates(n, l);
                assert!(r.start() <= r.end());
                assert!(*r.end() <= l.min(MAX_RICE_BITS));
                let (lo, hi) = original(n as u128, l);
                assert_eq!(
                    (u32::from(*r.start()), u32::from(*r.end())),
                    (lo, hi),
                    "n={n} L={l}"
                );
            }
        }
    }

    #[test]
    fn ties_go_to_the_smallest_k() {
        // Gaps 64 and 64 with L = 8: k = 5, 6 and 7 all take 16 bits.
        let values = [64u128, 128];
        assert_eq!(rice_candidates(2, 8), 3..=8);
        let sizes: Vec<u128> = (3..=8).map(|k| coded_bits(&values, k)).collect();
        assert_eq!(sizes, [24, 18, 16, 16, 16, 18]);
        assert_eq!(best_rice_bits(&values, 8), 5);
    }

    #[test]
    fn strict_decoding() {
        let values = vec![3u128, 9, 9, 200];
        let data = encode(&values, 8, 2);
        // Too few values declared: leftover bits.
        assert!(Decoder::new(&data, 3, 8, 2).collect_all().is_err());
        // Too many: the count is authoritative, so the padding may read as a value, but
        // never as the original list.
        assert_ne!(
            Decoder::new(&data, 5, 8, 2).collect_all().ok(),
            Some(values.clone())
        );
        assert!(Decoder::new(&data, 50, 8, 2).collect_all().is_err());
        // Non-zero padding.
        let mut bad = data.clone();
        *bad.last_mut().unwrap() |= 1;
        let r = Decoder::new(&bad, 4, 8, 2).collect_all();
        assert!(r.is_err() || r.unwrap() != values);
        // An extra zero byte.
        let mut bad = data.clone();
        bad.push(0);
        assert!(Decoder::new(&bad, 4, 8, 2).collect_all().is_err());
        // Out of range for L = 7.
        assert!(Decoder::new(&data, 4, 7, 2).collect_all().is_err());
        // Unary run of all ones.
        assert!(Decoder::new(&[0xff; 20], 1, 8, 2).collect_all().is_err());
    }
}
