//! Base OTs: Masny-Rindal "Endemic Oblivious Transfer" (CCS 2019), the two-message OT
//! from Diffie-Hellman key agreement with a Feistel-style "programmable-once public
//! function", over ristretto255. See `docs/adr/0003-ot-psi-base-ot.md`.
//!
//! In OT-PSI the *client* is the base-OT receiver (choice bits Δ) and the *server* the
//! base-OT sender; the 128 base OTs seed an IKNP extension ([`super::iknp`]).
//!
//! For OT `i` with choice bit `b` the receiver draws a secret scalar `a_i` and a uniform
//! point `R_i`, and sends `(r_{i,0}, r_{i,1})` with `r_{i,1-b} = R_i` and
//! `r_{i,b} = a_i·G − H_i(R_i)`. The sender, with one secret scalar `c` and `A = c·G`
//! (sent in the clear), sets `M_{i,j} = r_{i,j} + H_i(r_{i,1-j})` and derives
//! `K_{i,j} = KDF(i, j, r_{i,0}, r_{i,1}, A, c·M_{i,j})`; the receiver gets
//! `K_{i,b} = KDF(i, b, r_{i,0}, r_{i,1}, A, a_i·A)` since `M_{i,b} = a_i·G`.
//! `H_i` is a hash to the group (two Elligator maps of SHA-512 output).

use super::prc::{Block, ds, hash};
use crate::error::DecodeError;
use crate::error::Result;
use crate::parallel::Threads;
use curve25519_dalek::ristretto::{CompressedRistretto, RistrettoPoint};
use curve25519_dalek::scalar::Scalar;
use rand_core::CryptoRng;
use rayon::prelude::*;
use sha2::{Digest as _, Sha512};
use subtle::{Choice, ConditionallySelectable};
use zeroize::{Zeroize, Zeroizing};

/// Number of base OTs (the computational security parameter κ).
pub(crate) const BASE_OTS: usize = 128;
/// Bytes of one receiver message `r_{i,0} || r_{i,1}`.
pub(crate) const RECEIVER_MSG_LEN: usize = 64;

/// `H_i(P) = from_uniform_bytes(SHA-512(len || ds::MR_H2G || nonce || BE32(i) || P))`.
fn hash_to_group(nonce: &[u8; 32], i: u32, p: &[u8; 32]) -> RistrettoPoint {
    let mut h = Sha512::new();
    h.update([ds::MR_H2G.len() as u8]);
    h.update(ds::MR_H2G);
    h.update(nonce);
    h.update(i.to_be_bytes());
    h.update(p);
    let wide: [u8; 64] = h.finalize().into();
    RistrettoPoint::from_uniform_bytes(&wide)
}

fn kdf(nonce: &[u8; 32], i: u32, j: u8, msg: &[u8; 64], a: &[u8; 32], shared: &[u8; 32]) -> Block {
    let h = hash(ds::MR_KEY, &[nonce, &i.to_be_bytes(), &[j], msg, a, shared]);
    h[..16].try_into().expect("16 bytes")
}

fn random_scalar<R: CryptoRng + ?Sized>(rng: &mut R) -> Scalar {
    let mut wide = Zeroizing::new([0u8; 64]);
    rng.fill_bytes(wide.as_mut());
    Scalar::from_bytes_mod_order_wide(&wide)
}

/// The receiver's secrets between its message and the sender's reply.
pub(crate) struct Receiver {
    secrets: Zeroizing<Vec<Scalar>>,
    choices: Zeroizing<Vec<u8>>,
    msgs: Vec<[u8; 64]>,
}

impl Receiver {
    /// Draws the secrets for `choices.len()` OTs (`choices[i]` is 0 or 1) and returns the
    /// receiver state and its messages `r_{i,0} || r_{i,1}`.
    pub(crate) fn start<R: CryptoRng + ?Sized>(
        choices: &[u8],
        nonce: &[u8; 32],
        rng: &mut R,
        threads: Threads,
    ) -> Result<(Receiver, Vec<[u8; 64]>)> {
        // Randomness is drawn in order, outside the pool, so runs are reproducible.
        let mut secrets = Zeroizing::new(Vec::with_capacity(choices.len()));
        let mut randoms = Zeroizing::new(Vec::with_capacity(choices.len()));
        for _ in choices {
            secrets.push(random_scalar(rng));
            let mut wide = [0u8; 64];
            rng.fill_bytes(&mut wide);
            randoms.push(wide);
        }
        let msgs = threads.install(|| Self::messages(choices, &secrets, &randoms, nonce))?;
        let recv = Receiver {
            secrets,
            choices: Zeroizing::new(choices.to_vec()),
            msgs: msgs.clone(),
        };
        Ok((recv, msgs))
    }

    fn messages(
        choices: &[u8],
        secrets: &[Scalar],
        randoms: &[[u8; 64]],
        nonce: &[u8; 32],
    ) -> Vec<[u8; 64]> {
        (choices, secrets, randoms)
            .into_par_iter()
            .enumerate()
            .map(|(i, (&b, a, wide))| {
                let r = RistrettoPoint::from_uniform_bytes(wide);
                let r_enc = r.compress().to_bytes();
                let x = RistrettoPoint::mul_base(a) - hash_to_group(nonce, i as u32, &r_enc);
                // Constant time in the secret choice bit b:
                // (r0, r1) = (x, R) if b = 0, (R, x) if b = 1.
                let choice = Choice::from(b & 1);
                let r0 = RistrettoPoint::conditional_select(&x, &r, choice);
                let r1 = RistrettoPoint::conditional_select(&r, &x, choice);
                let mut m = [0u8; 64];
                m[..32].copy_from_slice(r0.compress().as_bytes());
                m[32..].copy_from_slice(r1.compress().as_bytes());
                m
            })
            .collect()
    }

    /// Given the sender's point `A`, returns `K_{i,b_i}` for every OT.
    pub(crate) fn finish(
        &self,
        nonce: &[u8; 32],
        a_bytes: &[u8; 32],
    ) -> Result<Zeroizing<Vec<Block>>, DecodeError> {
        let a = decode_point(a_bytes, 0)?;
        let keys = (&self.secrets[..], &self.choices[..], &self.msgs[..])
            .into_par_iter()
            .enumerate()
            .map(|(i, (s, &b, msg))| {
                let mut shared = (s * a).compress().to_bytes();
                let k = kdf(nonce, i as u32, b, msg, a_bytes, &shared);
                shared.zeroize();
                k
            })
            .collect();
        let keys = Zeroizing::new(keys);
        Ok(keys)
    }
}

/// Decodes a canonical, non-identity ristretto255 point.
fn decode_point(bytes: &[u8; 32], index: usize) -> Result<RistrettoPoint, DecodeError> {
    let p = CompressedRistretto(*bytes)
        .decompress()
        .ok_or(DecodeError::InvalidElement { index })?;
    if p == RistrettoPoint::default() {
        return Err(DecodeError::InvalidElement { index });
    }
    Ok(p)
}

/// The sender's secret scalar `c`, zeroized on drop.
pub(crate) struct Sender {
    c: Zeroizing<Scalar>,
}

impl Sender {
    pub(crate) fn new<R: CryptoRng + ?Sized>(rng: &mut R) -> Self {
        Sender {
            c: Zeroizing::new(random_scalar(rng)),
        }
    }

    /// The sender's message `A = c·G`.
    pub(crate) fn point(&self) -> [u8; 32] {
        RistrettoPoint::mul_base(&self.c).compress().to_bytes()
    }

    /// Both keys `(K_{i,0}, K_{i,1})` of every OT, from the receiver's messages.
    /// Fails with `InvalidElement` on a point that is not canonical.
    pub(crate) fn keys(
        &self,
        nonce: &[u8; 32],
        msgs: &[[u8; 64]],
    ) -> Result<Zeroizing<Vec<[Block; 2]>>, DecodeError> {
        let a = self.point();
        let c: &Scalar = &self.c;
        let keys: Result<Vec<[Block; 2]>, DecodeError> = msgs
            .par_iter()
            .enumerate()
            .map(|(i, msg)| {
                let e0: [u8; 32] = msg[..32].try_into().expect("32 bytes");
                let e1: [u8; 32] = msg[32..].try_into().expect("32 bytes");
                let r0 = CompressedRistretto(e0)
                    .decompress()
                    .ok_or(DecodeError::InvalidElement { index: 2 * i })?;
                let r1 = CompressedRistretto(e1)
                    .decompress()
                    .ok_or(DecodeError::InvalidElement { index: 2 * i + 1 })?;
                let m0 = r0 + hash_to_group(nonce, i as u32, &e1);
                let m1 = r1 + hash_to_group(nonce, i as u32, &e0);
                let mut s0 = (c * m0).compress().to_bytes();
                let mut s1 = (c * m1).compress().to_bytes();
                let k = [
                    kdf(nonce, i as u32, 0, msg, &a, &s0),
                    kdf(nonce, i as u32, 1, msg, &a, &s1),
                ];
                s0.zeroize();
                s1.zeroize();
                Ok(k)
            })
            .collect();
        let keys = Zeroizing::new(keys?);
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;

    #[test]
    fn ot_relation_holds() {
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let choices: Vec<u8> = (0..16).map(|i| (i * 7 % 3 == 0) as u8).collect();
        let nonce = [9u8; 32];
        let (recv, msgs) = Receiver::start(&choices, &nonce, &mut rng, Threads::ONE).unwrap();
        let sender = Sender::new(&mut rng);
        let both = sender.keys(&nonce, &msgs).unwrap();
        let got = recv.finish(&nonce, &sender.point()).unwrap();
        for i in 0..choices.len() {
            let b = choices[i] as usize;
            assert_eq!(got[i], both[i][b], "OT {i}: receiver gets the chosen key");
            assert_ne!(got[i], both[i][1 - b], "OT {i}: and not the other one");
        }
    }

    #[test]
    fn rejects_bad_points() {
        let mut rng = ChaCha20Rng::seed_from_u64(2);
        let sender = Sender::new(&mut rng);
        let mut msg = [0u8; 64];
        msg[..32].copy_from_slice(&[0xff; 32]);
        assert_eq!(
            sender.keys(&[0; 32], &[msg]).unwrap_err(),
            DecodeError::InvalidElement { index: 0 }
        );
        let (recv, _) = Receiver::start(&[1], &[0; 32], &mut rng, Threads::ONE).unwrap();
        // The identity is a canonical encoding but is refused as the sender's point.
        assert!(recv.finish(&[0; 32], &[0; 32]).is_err());
    }
}
