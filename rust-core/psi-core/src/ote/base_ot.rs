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
//!
//! Speed (the base OTs are most of a small run's fixed cost; see ADR 0003, "Speed"):
//! fixed-base multiplications use curve25519-dalek's precomputed basepoint table; the
//! sender computes `A` once when the session is created; and the shared points are
//! encoded in batches with one field inversion per batch
//! (`RistrettoPoint::double_and_compress_batch`, which encodes `2·P`, applied to
//! `P = (s/2)·Q` so that it yields exactly `enc(s·Q)`). All of it is constant time and
//! leaves every byte on the wire and every key unchanged.

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

/// The receiver's [`BASE_OTS`] uniformly random choice bits, one per byte (0 or 1): bit
/// `i % 8` of byte `i / 8` of [`BASE_OTS`]` / 8` bytes drawn from `rng`. In the IKNP
/// extension these are the sender's secret `Δ`.
pub(crate) fn draw_choices<R: CryptoRng + ?Sized>(rng: &mut R) -> Zeroizing<Vec<u8>> {
    let mut bytes = Zeroizing::new([0u8; BASE_OTS / 8]);
    rng.fill_bytes(bytes.as_mut());
    Zeroizing::new(
        (0..BASE_OTS)
            .map(|i| (bytes[i / 8] >> (i % 8)) & 1)
            .collect(),
    )
}

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

/// `1/2 mod ℓ`, i.e. `(ℓ + 1) / 2`, little-endian: `enc(s·Q)` is the batch encoding of
/// `2·((s·half)·Q)`.
const HALF: [u8; 32] = [
    247, 233, 122, 46, 141, 49, 9, 44, 107, 206, 123, 81, 239, 124, 111, 10, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 8,
];

fn half() -> Scalar {
    Option::from(Scalar::from_canonical_bytes(HALF)).expect("(l + 1) / 2 is canonical")
}

/// OTs per batch encoding (one field inversion each): large enough that the inversion is
/// a small share, small enough that batches spread over the worker threads.
const ENCODE_BATCH: usize = 32;

/// `enc(s_k·Q_k)` for each pair, given `halves[k] = (s_k/2)·Q_k`; the intermediate points
/// are secret (they determine the shared keys) and are zeroized.
fn encode_doubled(halves: Zeroizing<Vec<RistrettoPoint>>) -> Zeroizing<Vec<[u8; 32]>> {
    let compressed = RistrettoPoint::double_and_compress_batch(halves.iter());
    drop(halves);
    let mut compressed = Zeroizing::new(compressed);
    Zeroizing::new(
        compressed
            .iter_mut()
            .map(|c| {
                let b = c.to_bytes();
                c.zeroize();
                b
            })
            .collect(),
    )
}

fn kdf(nonce: &[u8; 32], i: u32, j: u8, msg: &[u8; 64], a: &[u8; 32], shared: &[u8; 32]) -> Block {
    let h = hash(ds::MR_KEY, &[nonce, &i.to_be_bytes(), &[j], msg, a, shared]);
    h[..16].try_into().expect("16 bytes")
}

/// A uniform scalar from 64 bytes of `rng` (also group PSI's pairwise key agreement).
pub(crate) fn random_scalar<R: CryptoRng + ?Sized>(rng: &mut R) -> Scalar {
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
        let mut pending = Self::draw(choices, nonce, rng);
        pending.compute(choices.len(), threads)?;
        Ok(pending.finish())
    }

    /// Draws the secrets for `choices.len()` OTs, in the same order as [`Receiver::start`],
    /// and computes nothing yet: the messages then come out in order, a few at a time
    /// ([`PendingReceiver::compute`]), so a driver can send each part while computing the next.
    pub(crate) fn draw<R: CryptoRng + ?Sized>(
        choices: &[u8],
        nonce: &[u8; 32],
        rng: &mut R,
    ) -> PendingReceiver {
        // Randomness is drawn in order, outside the pool, so runs are reproducible.
        let mut secrets = Zeroizing::new(Vec::with_capacity(choices.len()));
        let mut randoms = Zeroizing::new(Vec::with_capacity(choices.len()));
        for _ in choices {
            secrets.push(random_scalar(rng));
            let mut wide = [0u8; 64];
            rng.fill_bytes(&mut wide);
            randoms.push(wide);
        }
        PendingReceiver {
            secrets,
            randoms,
            choices: Zeroizing::new(choices.to_vec()),
            nonce: *nonce,
            msgs: Vec::with_capacity(choices.len()),
        }
    }

    fn messages(
        first: usize,
        choices: &[u8],
        secrets: &[Scalar],
        randoms: &[[u8; 64]],
        nonce: &[u8; 32],
    ) -> Vec<[u8; 64]> {
        (choices, secrets, randoms)
            .into_par_iter()
            .enumerate()
            .map(|(k, (&b, a, wide))| {
                let i = first + k;
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
        // A table of `A`'s multiples (`RistrettoBasepointTable`) is not worth it here: it
        // costs about 75 variable-base multiplications to build and saves 10% on each of 128.
        let half = Zeroizing::new(half());
        let batches: Vec<Zeroizing<Vec<Block>>> = self
            .secrets
            .par_chunks(ENCODE_BATCH)
            .enumerate()
            .map(|(c, secrets)| {
                let i0 = c * ENCODE_BATCH;
                let halves = Zeroizing::new(
                    secrets
                        .iter()
                        .map(|s| {
                            let h = Zeroizing::new(s * *half);
                            *h * a
                        })
                        .collect::<Vec<_>>(),
                );
                let shared = encode_doubled(halves);
                Zeroizing::new(
                    shared
                        .iter()
                        .enumerate()
                        .map(|(k, sh)| {
                            let i = i0 + k;
                            kdf(nonce, i as u32, self.choices[i], &self.msgs[i], a_bytes, sh)
                        })
                        .collect(),
                )
            })
            .collect();
        Ok(Zeroizing::new(
            batches.iter().flat_map(|b| b.iter().copied()).collect(),
        ))
    }
}

/// A receiver whose secrets are drawn and whose messages are computed in order, on demand.
pub(crate) struct PendingReceiver {
    secrets: Zeroizing<Vec<Scalar>>,
    randoms: Zeroizing<Vec<[u8; 64]>>,
    choices: Zeroizing<Vec<u8>>,
    nonce: [u8; 32],
    msgs: Vec<[u8; 64]>,
}

impl PendingReceiver {
    /// Messages computed so far.
    pub(crate) fn computed(&self) -> usize {
        self.msgs.len()
    }

    /// Computes the next `count` messages (fewer at the end) and returns them.
    pub(crate) fn compute(&mut self, count: usize, threads: Threads) -> Result<&[[u8; 64]]> {
        let a = self.msgs.len();
        let b = (a + count).min(self.choices.len());
        let next = threads.install(|| {
            Receiver::messages(
                a,
                &self.choices[a..b],
                &self.secrets[a..b],
                &self.randoms[a..b],
                &self.nonce,
            )
        })?;
        self.msgs.extend_from_slice(&next);
        Ok(&self.msgs[a..b])
    }

    /// The receiver state and all messages, once every message is computed.
    pub(crate) fn finish(mut self) -> (Receiver, Vec<[u8; 64]>) {
        assert_eq!(self.msgs.len(), self.choices.len(), "messages not computed");
        self.randoms.zeroize();
        let recv = Receiver {
            secrets: std::mem::take(&mut self.secrets),
            choices: std::mem::take(&mut self.choices),
            msgs: self.msgs.clone(),
        };
        (recv, self.msgs)
    }
}

/// Checks a sender point `A` as [`Receiver::finish`] will, so that a receiver can refuse
/// a bad one before it commits its state.
pub(crate) fn check_sender_point(bytes: &[u8; 32]) -> Result<(), DecodeError> {
    decode_point(bytes, 0).map(|_| ())
}

/// Decodes a canonical, non-identity ristretto255 point.
pub(crate) fn decode_point(bytes: &[u8; 32], index: usize) -> Result<RistrettoPoint, DecodeError> {
    let p = CompressedRistretto(*bytes)
        .decompress()
        .ok_or(DecodeError::InvalidElement { index })?;
    if p == RistrettoPoint::default() {
        return Err(DecodeError::InvalidElement { index });
    }
    Ok(p)
}

/// The sender's secret, kept as `c/2` (for the batch encoding, see [`encode_doubled`]) and
/// zeroized on drop, and its public point `A = c·G`, computed once when the session is
/// created.
pub(crate) struct Sender {
    c_half: Zeroizing<Scalar>,
    a: [u8; 32],
}

impl Sender {
    pub(crate) fn new<R: CryptoRng + ?Sized>(rng: &mut R) -> Self {
        let c = Zeroizing::new(random_scalar(rng));
        let a = RistrettoPoint::mul_base(&c).compress().to_bytes();
        let c_half = Zeroizing::new(*c * half());
        Sender { c_half, a }
    }

    /// The sender's message `A = c·G`.
    pub(crate) fn point(&self) -> [u8; 32] {
        self.a
    }

    /// Both keys `(K_{i,0}, K_{i,1})` of every OT, from the receiver's messages.
    /// Fails with `InvalidElement` on a point that is not canonical.
    pub(crate) fn keys(
        &self,
        nonce: &[u8; 32],
        msgs: &[[u8; 64]],
    ) -> Result<Zeroizing<Vec<[Block; 2]>>, DecodeError> {
        self.keys_from(nonce, 0, msgs)
    }

    /// The keys of OTs `first .. first + msgs.len()` (`msgs` are those OTs' messages), for
    /// a driver that receives the hello in parts. Errors as [`Sender::keys`], with indices
    /// counted from OT 0.
    pub(crate) fn keys_from(
        &self,
        nonce: &[u8; 32],
        first: usize,
        msgs: &[[u8; 64]],
    ) -> Result<Zeroizing<Vec<[Block; 2]>>, DecodeError> {
        let batches: Result<Vec<Zeroizing<Vec<[Block; 2]>>>, DecodeError> = msgs
            .par_chunks(ENCODE_BATCH)
            .enumerate()
            .map(|(c, batch)| self.keys_batch(nonce, first + c * ENCODE_BATCH, batch))
            .collect();
        Ok(Zeroizing::new(
            batches?.iter().flat_map(|b| b.iter().copied()).collect(),
        ))
    }

    /// The keys of OTs `i0 .. i0 + msgs.len()`.
    fn keys_batch(
        &self,
        nonce: &[u8; 32],
        i0: usize,
        msgs: &[[u8; 64]],
    ) -> Result<Zeroizing<Vec<[Block; 2]>>, DecodeError> {
        let mut halves = Zeroizing::new(Vec::with_capacity(2 * msgs.len()));
        for (k, msg) in msgs.iter().enumerate() {
            let i = i0 + k;
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
            halves.push(*self.c_half * m0);
            halves.push(*self.c_half * m1);
        }
        let shared = encode_doubled(halves);
        Ok(Zeroizing::new(
            msgs.iter()
                .enumerate()
                .map(|(k, msg)| {
                    let i = (i0 + k) as u32;
                    [
                        kdf(nonce, i, 0, msg, &self.a, &shared[2 * k]),
                        kdf(nonce, i, 1, msg, &self.a, &shared[2 * k + 1]),
                    ]
                })
                .collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha20Rng;
    use rand_core::{Rng, SeedableRng};

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
    fn half_is_the_inverse_of_two() {
        assert_eq!(half() * Scalar::from(2u64), Scalar::ONE);
    }

    /// The batched, table-based and halved computations give exactly the plain
    /// `enc(s·Q)` of the specification, on both sides, for every OT (more than one batch).
    #[test]
    fn keys_match_the_plain_formula() {
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        let n = 2 * ENCODE_BATCH + 5;
        let choices: Vec<u8> = (0..n).map(|i| (i % 3 == 1) as u8).collect();
        let nonce = [4u8; 32];
        let (recv, msgs) = Receiver::start(&choices, &nonce, &mut rng, Threads::new(2)).unwrap();
        let sender = Sender::new(&mut rng);
        let c = *sender.c_half * Scalar::from(2u64);
        let a_bytes = sender.point();
        assert_eq!(a_bytes, RistrettoPoint::mul_base(&c).compress().to_bytes());
        let a = CompressedRistretto(a_bytes).decompress().unwrap();
        let both = sender.keys(&nonce, &msgs).unwrap();
        let got = recv.finish(&nonce, &a_bytes).unwrap();
        for (i, msg) in msgs.iter().enumerate() {
            let e0: [u8; 32] = msg[..32].try_into().unwrap();
            let e1: [u8; 32] = msg[32..].try_into().unwrap();
            let r0 = CompressedRistretto(e0).decompress().unwrap();
            let r1 = CompressedRistretto(e1).decompress().unwrap();
            let m = [
                r0 + hash_to_group(&nonce, i as u32, &e1),
                r1 + hash_to_group(&nonce, i as u32, &e0),
            ];
            for j in 0..2 {
                let shared = (c * m[j]).compress().to_bytes();
                let k = kdf(&nonce, i as u32, j as u8, msg, &a_bytes, &shared);
                assert_eq!(both[i][j], k, "sender OT {i} key {j}");
            }
            let shared = (recv.secrets[i] * a).compress().to_bytes();
            let k = kdf(&nonce, i as u32, choices[i], msg, &a_bytes, &shared);
            assert_eq!(got[i], k, "receiver OT {i}");
        }
    }

    /// A point a malicious receiver can force (`M = identity`) must not disturb the other
    /// encodings of its batch, and encodes as the identity does (32 zero bytes).
    #[test]
    fn batch_encoding_with_the_identity() {
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        let s = random_scalar(&mut rng);
        let mut points: Vec<RistrettoPoint> = (0..7)
            .map(|_| {
                let mut w = [0u8; 64];
                rng.fill_bytes(&mut w);
                RistrettoPoint::from_uniform_bytes(&w)
            })
            .collect();
        points[3] = RistrettoPoint::default();
        let halves = Zeroizing::new(points.iter().map(|p| (s * half()) * p).collect());
        let got = encode_doubled(halves);
        for (p, g) in points.iter().zip(got.iter()) {
            assert_eq!(*g, (s * p).compress().to_bytes());
        }
        assert_eq!(got[3], [0u8; 32]);
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
