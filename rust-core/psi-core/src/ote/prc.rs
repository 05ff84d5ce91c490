//! AES-128 and SHA-256 building blocks of OT-PSI: the column PRG, the pseudorandom code,
//! the domain-separated hashes and a seeded shuffle. Byte layouts are in
//! `docs/protocol/ot-psi.md`, section "Constructions".
//!
//! AES comes from the `aes` crate, which picks AES-NI (or VAES) at run time on x86-64 and
//! the ARMv8 crypto extensions on aarch64, with a constant-time fixsliced software
//! fallback elsewhere.

use aes::Aes128;
use aes::cipher::consts::U16;
use aes::cipher::{Array, BlockCipherEncrypt, KeyInit};
use sha2::{Digest as _, Sha256};

/// A 128-bit block.
pub(crate) type Block = [u8; 16];

/// Codeword width k in bits (KKRT16's pseudorandom code length), and in bytes.
pub(crate) const CODE_BITS: usize = 512;
pub(crate) const CODE_BYTES: usize = CODE_BITS / 8;
/// A codeword, a row of the OT-extension matrices, or the server's secret `s`.
pub(crate) type Row = [u8; CODE_BYTES];

/// Domain separators (the byte strings after the length byte in every hash input).
pub(crate) mod ds {
    pub(crate) const SESSION: &[u8] = b"PSI-OT-v1 session";
    pub(crate) const ITEM: &[u8] = b"PSI-OT-v1 item";
    pub(crate) const PRC: &[u8] = b"PSI-OT-v1 prc";
    pub(crate) const MR_H2G: &[u8] = b"PSI-OT-v1 mr19 h2g";
    pub(crate) const MR_KEY: &[u8] = b"PSI-OT-v1 mr19 key";
    pub(crate) const IKNP: &[u8] = b"PSI-OT-v1 iknp";
    pub(crate) const OUT: &[u8] = b"PSI-OT-v1 out";
}

/// Starts a domain-separated hash: `SHA-256(len(ds) as u8 || ds || ...)`.
pub(crate) fn hasher(ds: &[u8]) -> Sha256 {
    let mut h = Sha256::new();
    h.update([ds.len() as u8]);
    h.update(ds);
    h
}

/// `SHA-256(len(ds) || ds || parts[0] || parts[1] || ...)`.
pub(crate) fn hash(ds: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut h = hasher(ds);
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

fn cipher(key: &Block) -> Aes128 {
    Aes128::new(&Array::from(*key))
}

/// Encrypts whole blocks in place.
fn encrypt_in_place(aes: &Aes128, bytes: &mut [u8]) {
    let (blocks, rest) = Array::<u8, U16>::slice_as_chunks_mut(bytes);
    debug_assert!(rest.is_empty());
    aes.encrypt_blocks(blocks);
}

/// AES-128 in counter mode: block `k` of the stream is `AES_seed(LE128(k))`.
/// Used for the OT-extension matrix columns, the IKNP columns and other expansions.
pub(crate) struct Prg(Aes128);

impl Prg {
    pub(crate) fn new(seed: &Block) -> Self {
        Prg(cipher(seed))
    }

    /// Fills `out` (a multiple of 16 bytes) with stream blocks `first_block, first_block + 1, ...`.
    pub(crate) fn fill(&self, first_block: u64, out: &mut [u8]) {
        assert!(
            out.len().is_multiple_of(16),
            "PRG output must be whole blocks"
        );
        for (k, chunk) in out.chunks_exact_mut(16).enumerate() {
            chunk.copy_from_slice(&((first_block as u128) + k as u128).to_le_bytes());
        }
        encrypt_in_place(&self.0, out);
    }

    /// A stream of uniform u64 values (little-endian halves of the stream blocks).
    pub(crate) fn words(&self) -> PrgWords<'_> {
        PrgWords {
            prg: self,
            block: 0,
            buf: [0; 64],
            pos: 64,
        }
    }
}

/// Iterator state for [`Prg::words`].
pub(crate) struct PrgWords<'a> {
    prg: &'a Prg,
    block: u64,
    buf: [u8; 64],
    pos: usize,
}

impl PrgWords<'_> {
    pub(crate) fn next_u64(&mut self) -> u64 {
        if self.pos == 64 {
            self.prg.fill(self.block, &mut self.buf);
            self.block += 4;
            self.pos = 0;
        }
        let v = u64::from_le_bytes(
            self.buf[self.pos..self.pos + 8]
                .try_into()
                .expect("8 bytes"),
        );
        self.pos += 8;
        v
    }

    /// Uniform in `0..bound` (`bound >= 1`), by Lemire's multiply-and-reject method.
    pub(crate) fn below(&mut self, bound: u64) -> u64 {
        let threshold = bound.wrapping_neg() % bound;
        loop {
            let r = (self.next_u64() as u128) * (bound as u128);
            if (r as u64) >= threshold {
                return (r >> 64) as u64;
            }
        }
    }
}

/// A uniformly random permutation of `0..n`: Fisher-Yates driven by AES-CTR under `key`
/// (for `i` from `n − 1` down to 1, swap positions `i` and `below(i + 1)`).
pub(crate) fn permutation(n: usize, key: &Block) -> Vec<u32> {
    let mut p: Vec<u32> = (0..n as u32).collect();
    let prg = Prg::new(key);
    let mut words = prg.words();
    for i in (1..n).rev() {
        let j = words.below(i as u64 + 1) as usize;
        p.swap(i, j);
    }
    p
}

/// The pseudorandom code `C(x) = AES_{k0}(x) || AES_{k1}(x) || AES_{k2}(x) || AES_{k3}(x)`
/// (512 bits) with session keys `k_t = SHA-256(ds::PRC, sid, t)[0..16]`.
pub(crate) struct Prc([Aes128; 4]);

/// Inputs are encoded in batches of this many blocks, so AES-NI can pipeline.
pub(crate) const PRC_BATCH: usize = 64;

impl Prc {
    pub(crate) fn new(sid: &[u8; 32]) -> Self {
        let key = |t: u8| -> Aes128 {
            let h = hash(ds::PRC, &[sid, &[t]]);
            cipher(h[..16].try_into().expect("16 bytes"))
        };
        Prc([key(0), key(1), key(2), key(3)])
    }

    /// Encodes up to [`PRC_BATCH`] inputs: `out[r] = C(inputs[r])`.
    pub(crate) fn encode(&self, inputs: &[Block], out: &mut [Row]) {
        assert!(inputs.len() <= PRC_BATCH && out.len() == inputs.len());
        let mut buf = [[0u8; 16]; PRC_BATCH];
        let n = inputs.len();
        for (t, aes) in self.0.iter().enumerate() {
            buf[..n].copy_from_slice(inputs);
            aes.encrypt_blocks(Array::cast_slice_from_core_mut(&mut buf[..n]));
            for (o, b) in out.iter_mut().zip(&buf[..n]) {
                o[16 * t..16 * t + 16].copy_from_slice(b);
            }
        }
    }
}

/// A hash state that has absorbed exactly one 64-byte block,
/// `len(ds) || ds || sid || zeros`, so hashing a short suffix costs one or two more
/// compressions and none for the prefix.
pub(crate) fn session_prefix(ds: &[u8], sid: &[u8; 32]) -> Sha256 {
    let mut h = Sha256::new();
    h.update(session_block(ds, sid));
    h
}

/// The block `len(ds) || ds || sid || zeros` of [`session_prefix`].
fn session_block(ds: &[u8], sid: &[u8; 32]) -> [u8; 64] {
    let mut block = [0u8; 64];
    block[0] = ds.len() as u8;
    block[1..1 + ds.len()].copy_from_slice(ds);
    block[1 + ds.len()..1 + ds.len() + 32].copy_from_slice(sid);
    block
}

/// SHA-256 of `prefix || msg` for many short `msg` after one fixed `prefix`: the prefix's
/// whole 64-byte blocks are compressed once, and a message that fits with the rest of the
/// prefix and the padding in two blocks is hashed by calling the compression function
/// directly on a padded buffer on the stack (zeroized after), without the streaming
/// hasher's buffering; longer messages take the streaming path. The digest is SHA-256's
/// either way (tests compare the two).
#[derive(Clone)]
pub(crate) struct Midstate {
    state: [u32; 8],
    /// Bytes of the prefix compressed into `state` (a multiple of 64).
    done: usize,
    /// The whole prefix: its bytes from `done` on (fewer than 64) start every message's
    /// blocks, and all of it is hashed again for messages too long for two blocks.
    prefix: Vec<u8>,
}

/// SHA-256's initial hash value (FIPS 180-4, section 5.3.3).
const SHA256_IV: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

impl Midstate {
    /// The state after `prefix` (public bytes: domain separators, session ids).
    pub(crate) fn new(prefix: &[u8]) -> Midstate {
        let (blocks, _) = prefix.as_chunks::<64>();
        let mut state = SHA256_IV;
        sha2::block_api::compress256(&mut state, blocks);
        Midstate {
            state,
            done: blocks.len() * 64,
            prefix: prefix.to_vec(),
        }
    }

    /// `SHA-256(prefix || msg)`.
    #[inline]
    pub(crate) fn hash(&self, msg: &[u8]) -> [u8; 32] {
        let head = &self.prefix[self.done..];
        let len = head.len() + msg.len();
        if len + 9 > 128 {
            let mut h = Sha256::new();
            h.update(&self.prefix);
            h.update(msg);
            return h.finalize().into();
        }
        let mut buf = zeroize::Zeroizing::new([[0u8; 64]; 2]);
        let blocks = if len + 9 <= 64 { 1 } else { 2 };
        let flat = buf.as_flattened_mut();
        flat[..head.len()].copy_from_slice(head);
        flat[head.len()..len].copy_from_slice(msg);
        flat[len] = 0x80;
        let bits = ((self.done + len) as u64) * 8;
        flat[blocks * 64 - 8..blocks * 64].copy_from_slice(&bits.to_be_bytes());
        let mut state = zeroize::Zeroizing::new(self.state);
        sha2::block_api::compress256(&mut state, &buf[..blocks]);
        let mut out = [0u8; 32];
        for (o, w) in out.chunks_exact_mut(4).zip(state.iter()) {
            o.copy_from_slice(&w.to_be_bytes());
        }
        out
    }
}

impl Midstate {
    /// The first 8 bytes of `SHA-256(prefix || head || msg)` for a prefix of whole blocks and
    /// `head || msg` that fits one block with its padding (at most 55 bytes): one
    /// compression on a stack block into which `head` (public, a counter) and `msg` (secret)
    /// are written; the message bytes and the state are wiped after (the prefix and the
    /// padding are public). Panics otherwise (callers fix the lengths).
    #[inline]
    pub(crate) fn hash8_parts(&self, head: &[u8], msg: &[u8]) -> [u8; 8] {
        let len = head.len() + msg.len();
        assert!(self.done == self.prefix.len() && len <= 55, "one block");
        let mut block = [[0u8; 64]];
        block[0][..head.len()].copy_from_slice(head);
        block[0][head.len()..len].copy_from_slice(msg);
        block[0][len] = 0x80;
        let bits = ((self.done + len) as u64) * 8;
        block[0][56..].copy_from_slice(&bits.to_be_bytes());
        let mut state = self.state;
        sha2::block_api::compress256(&mut state, &block);
        let mut out = [0u8; 8];
        out[..4].copy_from_slice(&state[0].to_be_bytes());
        out[4..].copy_from_slice(&state[1].to_be_bytes());
        zeroize::Zeroize::zeroize(&mut block[0][head.len()..len]);
        zeroize::Zeroize::zeroize(&mut state);
        out
    }
}

/// [`session_prefix`] as a [`Midstate`].
pub(crate) fn session_midstate(ds: &[u8], sid: &[u8; 32]) -> Midstate {
    Midstate::new(&session_block(ds, sid))
}

/// The OPRF output hash for bin `j`:
/// `SHA-256(len(ds::OUT) || ds::OUT || sid || zeros to 64 bytes || BE32(j) || v)`;
/// callers keep the first `L` bytes. `prefix` is [`out_prefix`] for the session.
#[inline]
pub(crate) fn out_hash(prefix: &Sha256, j: u32, v: &Row) -> [u8; 32] {
    let mut h = prefix.clone();
    h.update(j.to_be_bytes());
    h.update(v);
    h.finalize().into()
}

/// The prefix state of [`out_hash`].
pub(crate) fn out_prefix(sid: &[u8; 32]) -> Sha256 {
    session_prefix(ds::OUT, sid)
}

/// Copies `src` (at most 16 bytes) into `dst` of the same length with a fixed-size copy
/// per length, avoiding a `memmove` call for these short values.
#[inline]
pub(crate) fn copy_short(dst: &mut [u8], src: &[u8]) {
    macro_rules! arms {
        ($($n:literal)*) => {
            match dst.len() {
                $($n => dst[..$n].copy_from_slice(&src[..$n]),)*
                _ => dst.copy_from_slice(src),
            }
        };
    }
    arms!(5 6 7 8 9 10 11 12 13 14 15 16)
}

/// Packs the first `len` bytes of `bytes` into a big-endian integer (for hash maps).
#[inline]
pub(crate) fn pack(bytes: &[u8], len: usize) -> u128 {
    let mut v = 0u128;
    for &b in &bytes[..len] {
        v = (v << 8) | b as u128;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn midstate_is_sha256_of_prefix_and_message() {
        let data: Vec<u8> = (0..400u32).map(|i| (i * 7 + 3) as u8).collect();
        for prefix_len in [0, 1, 15, 55, 63, 64, 65, 100, 128, 130] {
            let prefix = &data[..prefix_len];
            let m = Midstate::new(prefix);
            for msg_len in 0..=200 {
                let msg = &data[200..200 + msg_len];
                let mut h = Sha256::new();
                h.update(prefix);
                h.update(msg);
                let want: [u8; 32] = h.finalize().into();
                assert_eq!(m.hash(msg), want, "prefix {prefix_len}, message {msg_len}");
            }
        }
        let (ds, sid) = (b"test ds", [5u8; 32]);
        let mut h = session_prefix(ds, &sid);
        h.update(b"suffix");
        let want: [u8; 32] = h.finalize().into();
        assert_eq!(session_midstate(ds, &sid).hash(b"suffix"), want);
        for len in [0usize, 20, 51, 55] {
            let msg: Vec<u8> = (0..len as u8).collect();
            let m = session_midstate(ds, &sid);
            assert_eq!(m.hash8_parts(&[], &msg)[..], m.hash(&msg)[..8], "{len}");
            let cut = len.min(4);
            assert_eq!(
                m.hash8_parts(&msg[..cut], &msg[cut..])[..],
                m.hash(&msg)[..8],
                "{len}"
            );
        }
    }

    #[test]
    fn aes_known_answer() {
        // FIPS-197 appendix C.1.
        let key: Block = core::array::from_fn(|i| i as u8);
        let aes = cipher(&key);
        let mut b: Block = core::array::from_fn(|i| (i as u8) * 0x11);
        encrypt_in_place(&aes, &mut b);
        assert_eq!(
            b,
            [
                0x69, 0xc4, 0xe0, 0xd8, 0x6a, 0x7b, 0x04, 0x30, 0xd8, 0xcd, 0xb7, 0x80, 0x70, 0xb4,
                0xc5, 0x5a
            ]
        );
    }

    #[test]
    fn prg_offsets_agree() {
        let prg = Prg::new(&[7; 16]);
        let mut all = [0u8; 128];
        prg.fill(0, &mut all);
        let mut tail = [0u8; 64];
        prg.fill(4, &mut tail);
        assert_eq!(&all[64..], &tail);
        assert_ne!(&all[..16], &all[16..32]);
    }

    #[test]
    fn prc_batches_agree() {
        let prc = Prc::new(&[1; 32]);
        let inputs: Vec<Block> = (0..10u8).map(|i| [i; 16]).collect();
        let mut a = vec![[0u8; 64]; 10];
        prc.encode(&inputs, &mut a);
        let mut b = vec![[0u8; 64]; 1];
        prc.encode(&inputs[3..4], &mut b);
        assert_eq!(a[3], b[0]);
        assert_ne!(a[3], a[4]);
    }

    #[test]
    fn permutation_is_a_permutation() {
        let mut p = permutation(1000, &[3; 16]);
        assert_ne!(p[..10], (0..10).collect::<Vec<u32>>()[..]);
        p.sort();
        assert_eq!(p, (0..1000).collect::<Vec<u32>>());
        assert!(permutation(0, &[0; 16]).is_empty());
    }

    #[test]
    fn below_is_in_range() {
        let prg = Prg::new(&[0; 16]);
        let mut w = prg.words();
        for bound in [1u64, 2, 3, 7, 1000, u64::MAX] {
            for _ in 0..50 {
                assert!(w.below(bound) < bound);
            }
        }
    }
}
