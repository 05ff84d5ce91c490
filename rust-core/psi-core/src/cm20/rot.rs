//! The `w` random OTs of CM20 (the paper's Fig. 4): the server (PSI sender `P1`) is the OT
//! receiver with choice bits `s`, the client (PSI receiver `P2`) the OT sender with two
//! seeds per OT. Obtained as in the paper's implementation (section 4.2): 128 Masny-Rindal
//! base OTs ([`crate::ote::base_ot`]) extended with IKNP ([`crate::ote::iknp`]).
//!
//! `iknp` extends to exactly 512 OTs per call. For `w` OTs we run `ceil(w / 512)`
//! independent instances `r = 0, 1, ...`, each on base keys and a session id derived for
//! that instance (docs/protocol/cm20-psi.md §3.2):
//! `K^r_{i,b} = SHA-256(ds::ROT_KEY, sid, BE16(r), BE16(i), K_{i,b})[0..16]` and
//! `sid_r = SHA-256(ds::ROT_SID, sid, BE16(r))`. Instance `r` yields OTs `512 r .. 512 r + 511`;
//! the ones at and above `w` are unused.

use super::prf::ds;
use crate::ote::iknp;
use crate::ote::prc::{Block, CODE_BITS, CODE_BYTES, Row, hash};
use zeroize::Zeroizing;

/// IKNP instances for `width` OTs.
pub(crate) fn instances(width: usize) -> usize {
    width.div_ceil(CODE_BITS).max(1)
}

/// Bytes of the server's IKNP matrices for `width` OTs.
pub(crate) fn u_len(width: usize) -> usize {
    instances(width) * iknp::U_LEN
}

fn instance_sid(sid: &[u8; 32], r: usize) -> [u8; 32] {
    hash(ds::ROT_SID, &[sid, &(r as u16).to_be_bytes()])
}

fn instance_key(sid: &[u8; 32], r: usize, i: usize, key: &Block) -> Block {
    let h = hash(
        ds::ROT_KEY,
        &[
            sid,
            &(r as u16).to_be_bytes(),
            &(i as u16).to_be_bytes(),
            key,
        ],
    );
    h[..16].try_into().expect("16 bytes")
}

/// Server side: from both keys of the 128 base OTs (the server is the base-OT sender) and
/// the choice bits `s` (one [`Row`] per instance), the IKNP matrices to send and the
/// server's seed `seed_{s_j}` of each of the `width` OTs.
pub(crate) fn receiver(
    sid: &[u8; 32],
    keys: &[[Block; 2]],
    s: &[Row],
    width: usize,
) -> (Vec<u8>, Zeroizing<Vec<Block>>) {
    assert_eq!(s.len(), instances(width));
    let mut u = Vec::with_capacity(u_len(width));
    let mut seeds = Zeroizing::new(Vec::with_capacity(s.len() * CODE_BITS));
    for (r, s_r) in s.iter().enumerate() {
        let keys_r: Zeroizing<Vec<[Block; 2]>> = Zeroizing::new(
            keys.iter()
                .enumerate()
                .map(|(i, k)| {
                    [
                        instance_key(sid, r, i, &k[0]),
                        instance_key(sid, r, i, &k[1]),
                    ]
                })
                .collect(),
        );
        let (u_r, seeds_r) = iknp::receiver(&instance_sid(sid, r), &keys_r, s_r);
        u.extend_from_slice(&u_r);
        seeds.extend_from_slice(&seeds_r);
    }
    seeds.truncate(width);
    (u, seeds)
}

/// Client side: from `K_{i,Δ_i}` (the client is the base-OT receiver with choice bits
/// `Δ`, one per byte) and the server's matrices, both seeds of each of the `width` OTs.
/// `u` must be [`u_len`]`(width)` bytes (the message decoder checks it).
pub(crate) fn sender(
    sid: &[u8; 32],
    keys: &[Block],
    delta: &[u8],
    u: &[u8],
    width: usize,
) -> Zeroizing<Vec<[Block; 2]>> {
    assert_eq!(u.len(), u_len(width));
    let mut seeds = Zeroizing::new(Vec::with_capacity(instances(width) * CODE_BITS));
    for (r, u_r) in u.chunks_exact(iknp::U_LEN).enumerate() {
        let keys_r: Zeroizing<Vec<Block>> = Zeroizing::new(
            keys.iter()
                .enumerate()
                .map(|(i, k)| instance_key(sid, r, i, k))
                .collect(),
        );
        seeds.extend_from_slice(&iknp::sender(&instance_sid(sid, r), &keys_r, delta, u_r));
    }
    seeds.truncate(width);
    seeds
}

/// The bit `s_j` of the server's choice rows.
pub(crate) fn choice_bit(s: &[Row], j: usize) -> u8 {
    (s[j / CODE_BITS][(j % CODE_BITS) / 8] >> (j % 8)) & 1
}

const _: () = assert!(CODE_BYTES * 8 == CODE_BITS);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_ot_relation_across_instances() {
        let sid = [9u8; 32];
        let width = 700;
        let keys: Vec<[Block; 2]> = (0..128)
            .map(|i| [[i as u8; 16], [(i as u8) ^ 0x55; 16]])
            .collect();
        let delta: Vec<u8> = (0..128).map(|i| (i % 3 == 1) as u8).collect();
        let chosen: Vec<Block> = keys
            .iter()
            .zip(&delta)
            .map(|(k, &d)| k[d as usize])
            .collect();
        let s: Vec<Row> = (0..instances(width))
            .map(|r| core::array::from_fn(|i| (i as u8).wrapping_mul(29) ^ (r as u8 * 101)))
            .collect();
        let (u, server) = receiver(&sid, &keys, &s, width);
        let client = sender(&sid, &chosen, &delta, &u, width);
        assert_eq!(server.len(), width);
        assert_eq!(client.len(), width);
        for j in 0..width {
            let b = choice_bit(&s, j) as usize;
            assert_eq!(server[j], client[j][b], "OT {j}");
            assert_ne!(server[j], client[j][1 - b], "OT {j}");
        }
        // The two instances do not share seeds.
        assert_ne!(client[0], client[512]);
    }
}
