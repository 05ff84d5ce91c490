//! IKNP (Ishai-Kilian-Nissim-Petrank, CRYPTO 2003) extension of the 128 base OTs into the
//! 512 random OTs that KKRT16 needs as its own base OTs, with the roles the protocol wants:
//! the client ends up as the OT *sender* (two seeds per OT), the server as the *receiver*
//! with choice bits `s` (its 512-bit OPRF secret).
//!
//! Base OT `i < 128`: the server (base sender) holds `K_{i,0}, K_{i,1}`; the client (base
//! receiver, choice `Δ_i`) holds `K_{i,Δ_i}`.
//! - Server: `t^i = G(K_{i,0})`, `u^i = t^i ⊕ G(K_{i,1}) ⊕ s` (512-bit columns; sends `u`).
//! - Client: `q^i = G(K_{i,Δ_i}) ⊕ Δ_i·u^i = t^i ⊕ Δ_i·s`.
//! - Row `j < 512` of the transposed matrices: `q_j = t_j ⊕ s_j·Δ`.
//! - Outputs: client `(H(j, q_j), H(j, q_j ⊕ Δ))`, server `H(j, t_j)`, where
//!   `H(j, x) = SHA-256(ds::IKNP, sid, BE32(j), x)[0..16]`, so the server holds the seed
//!   with index `s_j`.
//!
//! `G` is the AES-CTR [`Prg`] (64 bytes from block 0).
//!
//! GBF-PSI ([`crate::gbf`]) needs `m` OTs, far more than 512: it runs the same extension
//! as instances `r = 0, 1, ...` of 512 OTs each over the *same* base keys, instance `r`
//! taking the columns' stream blocks `4r .. 4r + 3` (`G`'s bytes `64r .. 64r + 63`) and
//! hashing its rows with their global index `512 r + j` ([`receiver_at`], [`sender_at`]).
//! That is plain IKNP with `G` stretched to `m` bits per column, cut into 512-row slices;
//! instance 0 is exactly the extension above.

use super::base_ot::BASE_OTS;
use super::prc::{Block, CODE_BITS, CODE_BYTES, Prg, Row, ds, hash};
use super::transpose::transpose;
use zeroize::Zeroizing;

/// Bytes of the server's `u` matrix: 128 columns of 512 bits.
pub(crate) const U_LEN: usize = BASE_OTS * CODE_BYTES;

fn row_hash(sid: &[u8; 32], j: usize, x: &Block) -> Block {
    let h = hash(ds::IKNP, &[sid, &(j as u32).to_be_bytes(), x]);
    h[..16].try_into().expect("16 bytes")
}

/// Server side: from both keys of each base OT and the choice bits `s`, returns the `u`
/// matrix to send and the server's 512 seeds `H(j, t_j)`.
pub(crate) fn receiver(
    sid: &[u8; 32],
    keys: &[[Block; 2]],
    s: &Row,
) -> (Vec<u8>, Zeroizing<Vec<Block>>) {
    receiver_at(sid, keys, s, 0)
}

/// [`receiver`] for instance `r` of a longer extension (the module's last paragraph):
/// OTs `512 r .. 512 r + 511`, choice bits `s`.
pub(crate) fn receiver_at(
    sid: &[u8; 32],
    keys: &[[Block; 2]],
    s: &Row,
    r: u32,
) -> (Vec<u8>, Zeroizing<Vec<Block>>) {
    assert_eq!(keys.len(), BASE_OTS);
    let block = 4 * r as u64;
    let first_row = r as usize * CODE_BITS;
    let mut t = Zeroizing::new(vec![0u8; U_LEN]);
    let mut u = vec![0u8; U_LEN];
    for (i, k) in keys.iter().enumerate() {
        let ti = &mut t[i * CODE_BYTES..(i + 1) * CODE_BYTES];
        Prg::new(&k[0]).fill(block, ti);
        let ui = &mut u[i * CODE_BYTES..(i + 1) * CODE_BYTES];
        Prg::new(&k[1]).fill(block, ui);
        for ((u, t), s) in ui.iter_mut().zip(ti.iter()).zip(s) {
            *u ^= t ^ s;
        }
    }
    let mut rows = Zeroizing::new(vec![0u8; U_LEN]);
    transpose(&t, BASE_OTS, CODE_BYTES, &mut rows);
    let seeds = (0..CODE_BITS)
        .map(|j| {
            row_hash(
                sid,
                first_row + j,
                rows[16 * j..16 * j + 16].try_into().expect("16 bytes"),
            )
        })
        .collect();
    (u, Zeroizing::new(seeds))
}

/// Client side: from `K_{i,Δ_i}`, the choice bits `Δ` (one per byte, 0 or 1) and the
/// server's `u`, returns both seeds of each of the 512 OTs.
pub(crate) fn sender(
    sid: &[u8; 32],
    keys: &[Block],
    delta: &[u8],
    u: &[u8],
) -> Zeroizing<Vec<[Block; 2]>> {
    sender_at(sid, keys, delta, u, 0)
}

/// [`sender`] for instance `r` of a longer extension (the module's last paragraph).
pub(crate) fn sender_at(
    sid: &[u8; 32],
    keys: &[Block],
    delta: &[u8],
    u: &[u8],
    r: u32,
) -> Zeroizing<Vec<[Block; 2]>> {
    let (rows, delta_block) = sender_rows(keys, delta, u, r);
    let first_row = r as usize * CODE_BITS;
    let seeds = (0..CODE_BITS)
        .map(|j| {
            let mut qj: Block = rows[16 * j..16 * j + 16].try_into().expect("16 bytes");
            let s0 = row_hash(sid, first_row + j, &qj);
            xor_in(&mut qj, &delta_block);
            let s1 = row_hash(sid, first_row + j, &qj);
            [s0, s1]
        })
        .collect();
    Zeroizing::new(seeds)
}

/// The seeds with index 1 only, `H(j, q_j ⊕ Δ)`, of instance `r`: for a sender that never
/// uses the other (GBF-PSI's server), one row hash per OT instead of two.
pub(crate) fn sender_ones_at(
    sid: &[u8; 32],
    keys: &[Block],
    delta: &[u8],
    u: &[u8],
    r: u32,
) -> Zeroizing<Vec<Block>> {
    let (rows, delta_block) = sender_rows(keys, delta, u, r);
    let first_row = r as usize * CODE_BITS;
    let seeds = (0..CODE_BITS)
        .map(|j| {
            let mut qj: Block = rows[16 * j..16 * j + 16].try_into().expect("16 bytes");
            xor_in(&mut qj, &delta_block);
            row_hash(sid, first_row + j, &qj)
        })
        .collect();
    Zeroizing::new(seeds)
}

fn xor_in(a: &mut Block, b: &Block) {
    for (a, b) in a.iter_mut().zip(b) {
        *a ^= b;
    }
}

/// The sender's transposed rows `q_j` of instance `r` and its `Δ` as a block.
fn sender_rows(
    keys: &[Block],
    delta: &[u8],
    u: &[u8],
    r: u32,
) -> (Zeroizing<Vec<u8>>, Zeroizing<Block>) {
    assert_eq!(keys.len(), BASE_OTS);
    assert_eq!(delta.len(), BASE_OTS);
    assert_eq!(u.len(), U_LEN);
    let block = 4 * r as u64;
    let mut q = Zeroizing::new(vec![0u8; U_LEN]);
    let mut delta_block = Zeroizing::new([0u8; 16]);
    for i in 0..BASE_OTS {
        let qi = &mut q[i * CODE_BYTES..(i + 1) * CODE_BYTES];
        Prg::new(&keys[i]).fill(block, qi);
        // Constant time in the secret bit Δ_i.
        let mask = 0u8.wrapping_sub(delta[i] & 1);
        for (q, u) in qi.iter_mut().zip(&u[i * CODE_BYTES..(i + 1) * CODE_BYTES]) {
            *q ^= u & mask;
        }
        delta_block[i / 8] |= (delta[i] & 1) << (i % 8);
    }
    let mut rows = Zeroizing::new(vec![0u8; U_LEN]);
    transpose(&q, BASE_OTS, CODE_BYTES, &mut rows);
    (rows, delta_block)
}

/// A long extension's receiver side (the `u` matrices and the rows `t_j`) with the base
/// keys' AES key schedules done once, not once per instance: group PSI's leader runs
/// thousands of instances over the same 256 keys. Same bytes as [`receiver_at`].
pub(crate) struct ReceiverColumns(Vec<[Prg; 2]>);

impl ReceiverColumns {
    pub(crate) fn new(keys: &[[Block; 2]]) -> Self {
        assert_eq!(keys.len(), BASE_OTS);
        ReceiverColumns(
            keys.iter()
                .map(|k| [Prg::new(&k[0]), Prg::new(&k[1])])
                .collect(),
        )
    }

    /// Instance `r` with choice bits `s`: writes the `u` matrix into `u` and the rows `t_j`
    /// (16 bytes each, `j = 0 .. 511`) into `rows`; `t` is scratch. All three are
    /// [`U_LEN`] bytes.
    pub(crate) fn instance(&self, s: &Row, r: u32, u: &mut [u8], t: &mut [u8], rows: &mut [u8]) {
        let block = 4 * r as u64;
        for (i, [g0, g1]) in self.0.iter().enumerate() {
            let ti = &mut t[i * CODE_BYTES..(i + 1) * CODE_BYTES];
            g0.fill(block, ti);
            let ui = &mut u[i * CODE_BYTES..(i + 1) * CODE_BYTES];
            g1.fill(block, ui);
            for ((u, t), s) in ui.iter_mut().zip(ti.iter()).zip(s) {
                *u ^= t ^ s;
            }
        }
        transpose(t, BASE_OTS, CODE_BYTES, rows);
    }
}

/// A long extension's sender side (the rows `q_j`) with the key schedules done once, and
/// `Δ` as a block. Same rows as [`sender_at`] computes.
pub(crate) struct SenderColumns {
    prgs: Vec<Prg>,
    /// `Δ_i` as a byte mask, 0x00 or 0xff.
    masks: Zeroizing<Vec<u8>>,
    delta_block: Zeroizing<Block>,
}

impl SenderColumns {
    pub(crate) fn new(keys: &[Block], delta: &[u8]) -> Self {
        assert_eq!(keys.len(), BASE_OTS);
        assert_eq!(delta.len(), BASE_OTS);
        let mut delta_block = Zeroizing::new([0u8; 16]);
        let mut masks = Zeroizing::new(vec![0u8; BASE_OTS]);
        for (i, &d) in delta.iter().enumerate() {
            masks[i] = 0u8.wrapping_sub(d & 1);
            delta_block[i / 8] |= (d & 1) << (i % 8);
        }
        SenderColumns {
            prgs: keys.iter().map(Prg::new).collect(),
            masks,
            delta_block,
        }
    }

    /// `Δ` as a block (bit `i` is `Δ_i`).
    pub(crate) fn delta(&self) -> &Block {
        &self.delta_block
    }

    /// Instance `r` for the receiver's matrix `u`: the rows `q_j` into `rows`; `q` is
    /// scratch (both [`U_LEN`] bytes). Constant time in `Δ`.
    pub(crate) fn instance(&self, u: &[u8], r: u32, q: &mut [u8], rows: &mut [u8]) {
        assert_eq!(u.len(), U_LEN);
        let block = 4 * r as u64;
        for (i, (g, &mask)) in self.prgs.iter().zip(self.masks.iter()).enumerate() {
            let qi = &mut q[i * CODE_BYTES..(i + 1) * CODE_BYTES];
            g.fill(block, qi);
            for (q, u) in qi.iter_mut().zip(&u[i * CODE_BYTES..(i + 1) * CODE_BYTES]) {
                *q ^= u & mask;
            }
        }
        transpose(q, BASE_OTS, CODE_BYTES, rows);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_ot_relation() {
        let sid = [5u8; 32];
        let keys: Vec<[Block; 2]> = (0..BASE_OTS)
            .map(|i| [[i as u8; 16], [(i as u8) ^ 0x80; 16]])
            .collect();
        let delta: Vec<u8> = (0..BASE_OTS)
            .map(|i| ((i * 5 + 1) % 3 == 0) as u8)
            .collect();
        let chosen: Vec<Block> = keys
            .iter()
            .zip(&delta)
            .map(|(k, &d)| k[d as usize])
            .collect();
        let mut s: Row = [0; CODE_BYTES];
        for (i, b) in s.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(37) ^ 0x5a;
        }
        let (u, server) = receiver(&sid, &keys, &s);
        let client = sender(&sid, &chosen, &delta, &u);
        for j in 0..CODE_BITS {
            let sj = ((s[j / 8] >> (j % 8)) & 1) as usize;
            assert_eq!(server[j], client[j][sj], "OT {j}");
            assert_ne!(server[j], client[j][1 - sj], "OT {j}");
        }
    }

    /// Instance `r` of a longer extension keeps the OT relation and shares no seed with
    /// instance 0; instance 0 is the plain extension.
    #[test]
    fn instances_of_a_longer_extension() {
        let sid = [7u8; 32];
        let keys: Vec<[Block; 2]> = (0..BASE_OTS)
            .map(|i| [[i as u8; 16], [(i as u8) ^ 0x3c; 16]])
            .collect();
        let delta: Vec<u8> = (0..BASE_OTS).map(|i| (i % 2) as u8).collect();
        let chosen: Vec<Block> = keys
            .iter()
            .zip(&delta)
            .map(|(k, &d)| k[d as usize])
            .collect();
        let s: Row = core::array::from_fn(|i| (i as u8).wrapping_mul(11));
        let (u0, r0) = receiver(&sid, &keys, &s);
        assert_eq!((u0.clone(), r0.to_vec()), {
            let (u, r) = receiver_at(&sid, &keys, &s, 0);
            (u, r.to_vec())
        });
        let (u3, r3) = receiver_at(&sid, &keys, &s, 3);
        assert_ne!(u0, u3);
        let c3 = sender_at(&sid, &chosen, &delta, &u3, 3);
        let ones = sender_ones_at(&sid, &chosen, &delta, &u3, 3);
        for j in 0..CODE_BITS {
            assert_eq!(ones[j], c3[j][1], "OT {j}");
            let sj = ((s[j / 8] >> (j % 8)) & 1) as usize;
            assert_eq!(r3[j], c3[j][sj], "OT {j}");
            assert_ne!(r3[j], r0[j], "OT {j}");
        }
    }

    /// The cached-schedule sides give the rows the per-instance functions hash.
    #[test]
    fn columns_match_the_instance_functions() {
        let keys: Vec<[Block; 2]> = (0..BASE_OTS)
            .map(|i| [[i as u8 ^ 0x11; 16], [(i as u8) ^ 0x5c; 16]])
            .collect();
        let delta: Vec<u8> = (0..BASE_OTS).map(|i| (i % 3 == 0) as u8).collect();
        let chosen: Vec<Block> = keys
            .iter()
            .zip(&delta)
            .map(|(k, &d)| k[d as usize])
            .collect();
        let s: Row = core::array::from_fn(|i| (i as u8).wrapping_mul(29) ^ 3);
        let (rc, sc) = (
            ReceiverColumns::new(&keys),
            SenderColumns::new(&chosen, &delta),
        );
        for r in [0u32, 5] {
            let (u_want, _) = receiver_at(&[0; 32], &keys, &s, r);
            let (mut u, mut t, mut rows) = (vec![0; U_LEN], vec![0; U_LEN], vec![0; U_LEN]);
            rc.instance(&s, r, &mut u, &mut t, &mut rows);
            assert_eq!(u, u_want);
            let (q_want, d_want) = sender_rows(&chosen, &delta, &u, r);
            let (mut q, mut qrows) = (vec![0; U_LEN], vec![0; U_LEN]);
            sc.instance(&u, r, &mut q, &mut qrows);
            assert_eq!(&qrows[..], &q_want[..]);
            assert_eq!(sc.delta(), &*d_want);
            // q_j = t_j xor s_j * delta.
            for j in 0..CODE_BITS {
                let mut x: Block = rows[16 * j..16 * j + 16].try_into().unwrap();
                if (s[j / 8] >> (j % 8)) & 1 == 1 {
                    xor_in(&mut x, sc.delta());
                }
                assert_eq!(&x[..], &qrows[16 * j..16 * j + 16], "row {j}");
            }
        }
    }
}
