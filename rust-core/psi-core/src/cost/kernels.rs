//! Calibration kernels: each performs `k` operations of one kind on data derived from
//! `seed` and returns a value that depends on all of them (so the work cannot be
//! optimised away). The driver times them (this crate has no clock). These are the shared
//! units' kernels; a protocol's own unit brings its kernel in its `cost.rs`
//! ([`crate::cost::ProtocolUnit`]).

use crate::oprf;
use curve25519_dalek::scalar::Scalar;
use sha2::Digest as _;

fn scalar(seed: u64) -> Scalar {
    let mut b = [0u8; 64];
    b[..8].copy_from_slice(&seed.to_le_bytes());
    b[8] = 1;
    Scalar::from_bytes_mod_order_wide(&b)
}

/// `k` variable-base scalar multiplications.
pub fn scalar_mults(k: u32, seed: u64) -> u8 {
    let mut p = oprf::hash_to_group(&seed.to_le_bytes());
    let s = scalar(seed);
    for _ in 0..k {
        p *= s;
    }
    p.compress().to_bytes()[0]
}

/// `k` hash-to-group calls.
pub fn hash_to_group(k: u32, seed: u64) -> u8 {
    let mut acc = 0u8;
    for i in 0..k {
        let p = oprf::hash_to_group(&(seed ^ u64::from(i)).to_le_bytes());
        acc ^= p.compress().as_bytes()[i as usize % 32];
    }
    acc
}

/// `k` element decodings (with the compression that produces them once, outside).
pub fn element_decodes(k: u32, seed: u64) -> u8 {
    let e = oprf::hash_to_group(&seed.to_le_bytes()).compress();
    let mut acc = 0u8;
    for _ in 0..k {
        let p = curve25519_dalek::ristretto::CompressedRistretto(*e.as_bytes())
            .decompress()
            .map_or(0, |p| p.compress().as_bytes()[1]);
        acc = acc.wrapping_add(p);
    }
    acc
}

/// `k` AES-128 blocks (counter mode over a 4 KiB buffer).
pub fn aes_blocks(k: u32, seed: u64) -> u8 {
    crate::ot::kernel_aes_blocks(k, seed)
}

/// `k` SHA-256 compression blocks (64-byte inputs hashed together).
pub fn hash_blocks(k: u32, seed: u64) -> u8 {
    let mut h = sha2::Sha256::new();
    let mut block = [0u8; 64];
    block[..8].copy_from_slice(&seed.to_le_bytes());
    for _ in 0..k {
        h.update(block);
    }
    h.finalize()[0]
}

/// `k` entries of memory work: hash-table inserts and probes of 64-bit values in a
/// table of `k` entries (the shape of matching and shuffling).
pub fn entries(k: u32, seed: u64) -> u8 {
    let mut x = seed | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let half = (k / 2).max(1) as usize;
    let mut set = std::collections::HashSet::with_capacity(half);
    for _ in 0..half {
        set.insert(next());
    }
    let hits = (0..half).filter(|_| set.contains(&next())).count();
    (hits as u8) ^ (set.len() as u8)
}
