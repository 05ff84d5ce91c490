//! RFC 9497 OPRF, mode 0x00 (base OPRF), suite OPRF(ristretto255, SHA-512).
//!
//! Implements exactly the RFC's HashToGroup (RFC 9380 `expand_message_xmd` with SHA-512
//! into ristretto255's one-way map), HashToScalar, DeriveKeyPair, Blind, BlindEvaluate
//! and Finalize, plus batched, parallel versions of them used by DH-PSI. The batched
//! versions compute the same values; they only save work:
//!
//! - compression uses ristretto255's batched "double and encode" (one shared field
//!   inversion per chunk instead of an inverse square root per element): to encode
//!   `s*P` we multiply by `s/2` and encode the double;
//! - unblinding inverts all blinds with one batched scalar inversion.
//!
//! Published test vectors (RFC 9497 Appendix A.1.1, RFC 9380 Appendix K.3) are checked
//! in `tests/rfc_vectors.rs`.

use crate::error::{Error, Result};
use crate::items::ItemList;
use curve25519_dalek::ristretto::{CompressedRistretto, RistrettoPoint};
use curve25519_dalek::scalar::Scalar;
use curve25519_dalek::traits::Identity;
use rayon::prelude::*;
use sha2::{Digest, Sha512};
use zeroize::{Zeroize, ZeroizeOnDrop, Zeroizing};

/// `contextString = "OPRFV1-" || I2OSP(0x00, 1) || "-" || "ristretto255-SHA512"`.
pub const CONTEXT_STRING: &[u8] = b"OPRFV1-\x00-ristretto255-SHA512";
/// DST of HashToGroup: `"HashToGroup-" || contextString`.
pub const HASH_TO_GROUP_DST: &[u8] = b"HashToGroup-OPRFV1-\x00-ristretto255-SHA512";
/// DST of DeriveKeyPair's HashToScalar: `"DeriveKeyPair" || contextString`.
pub const DERIVE_KEY_PAIR_DST: &[u8] = b"DeriveKeyPairOPRFV1-\x00-ristretto255-SHA512";
/// Size of an encoded group element (Ne).
pub const ELEMENT_LEN: usize = 32;
/// Size of an encoded scalar (Ns).
pub const SCALAR_LEN: usize = 32;
/// Size of an OPRF output (Nh, SHA-512).
pub const OUTPUT_LEN: usize = 64;

/// Items per parallel work unit; also the batch size for batched compression.
const CHUNK: usize = 256;

/// SHA-512 state after absorbing `Z_pad` (128 zero bytes, one block).
static ZERO_PAD_STATE: std::sync::LazyLock<Sha512> = std::sync::LazyLock::new(|| {
    let mut h = Sha512::new();
    h.update([0u8; 128]);
    h
});

/// RFC 9380 section 5.3.1 `expand_message_xmd` with SHA-512. `msg` is given as parts
/// that are concatenated. `len` must be at most 255 * 64 and `dst` at most 255 bytes.
pub fn expand_message_xmd(msg: &[&[u8]], dst: &[u8], len: usize) -> Vec<u8> {
    assert!(dst.len() <= 255, "DST longer than 255 bytes");
    let ell = len.div_ceil(64);
    assert!(
        ell <= 255 && len <= 65535,
        "expand_message_xmd output too long"
    );
    let dst_len = [dst.len() as u8];
    // b_0 = H(Z_pad || msg || I2OSP(len, 2) || I2OSP(0, 1) || DST_prime). Z_pad is one
    // whole SHA-512 block, so the state after it is computed once and cloned.
    let mut h = ZERO_PAD_STATE.clone();
    for part in msg {
        h.update(part);
    }
    h.update((len as u16).to_be_bytes());
    h.update([0u8]);
    h.update(dst);
    h.update(dst_len);
    let b0 = h.finalize();
    // b_1 = H(b_0 || I2OSP(1, 1) || DST_prime)
    let mut out = Vec::with_capacity(ell * 64);
    let mut h = Sha512::new();
    h.update(b0);
    h.update([1u8]);
    h.update(dst);
    h.update(dst_len);
    let mut prev = h.finalize();
    out.extend_from_slice(&prev);
    for i in 2..=ell {
        // b_i = H(strxor(b_0, b_(i-1)) || I2OSP(i, 1) || DST_prime)
        let mut x = [0u8; 64];
        for (j, byte) in x.iter_mut().enumerate() {
            *byte = b0[j] ^ prev[j];
        }
        let mut h = Sha512::new();
        h.update(x);
        h.update([i as u8]);
        h.update(dst);
        h.update(dst_len);
        prev = h.finalize();
        out.extend_from_slice(&prev);
    }
    out.truncate(len);
    out
}

/// `expand_message_xmd(msg, dst, 64)` without allocating: with 64 output bytes,
/// `ell = 1` and the output is `b_1`.
fn expand_64(msg: &[&[u8]], dst: &[u8]) -> [u8; 64] {
    debug_assert!(dst.len() <= 255);
    let dst_len = [dst.len() as u8];
    let mut h = ZERO_PAD_STATE.clone();
    for part in msg {
        h.update(part);
    }
    h.update([0u8, 64, 0]);
    h.update(dst);
    h.update(dst_len);
    let b0 = h.finalize();
    let mut h = Sha512::new();
    h.update(b0);
    h.update([1u8]);
    h.update(dst);
    h.update(dst_len);
    let mut out = [0u8; 64];
    out.copy_from_slice(&h.finalize());
    out
}

/// HashToGroup: `expand_message_xmd(input, DST, 64)` into ristretto255's one-way map.
pub fn hash_to_group(input: &[u8]) -> RistrettoPoint {
    RistrettoPoint::from_uniform_bytes(&expand_64(&[input], HASH_TO_GROUP_DST))
}

/// HashToScalar with an explicit DST: `expand_message_xmd(input, dst, 64)` read as a
/// little-endian integer and reduced modulo the group order.
pub fn hash_to_scalar(input: &[&[u8]], dst: &[u8]) -> Scalar {
    let bytes = Zeroizing::new(expand_64(input, dst));
    Scalar::from_bytes_mod_order_wide(&bytes)
}

/// Finalize's hash: `SHA-512(I2OSP(len(input), 2) || input || I2OSP(32, 2) ||
/// unblindedElement || "Finalize")`. Inputs longer than 65535 bytes are rejected by
/// the callers (RFC 9497 limits inputs to 2^16 - 1 bytes).
pub fn finalize_hash(input: &[u8], unblinded: &[u8; ELEMENT_LEN]) -> [u8; OUTPUT_LEN] {
    let mut h = Sha512::new();
    h.update((input.len() as u16).to_be_bytes());
    h.update(input);
    h.update((ELEMENT_LEN as u16).to_be_bytes());
    h.update(unblinded);
    h.update(b"Finalize");
    let mut out = [0u8; OUTPUT_LEN];
    out.copy_from_slice(&h.finalize());
    out
}

/// Longest input the RFC allows (its length is encoded in two bytes).
pub const MAX_INPUT_LEN: usize = u16::MAX as usize;

/// The server's OPRF secret key `skS`. Zeroized on drop; never printed.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct OprfKey(Scalar);

impl OprfKey {
    /// A fresh random non-zero key.
    pub fn random<R: rand_core::CryptoRng + ?Sized>(rng: &mut R) -> Self {
        loop {
            let s = Scalar::random(rng);
            if s != Scalar::ZERO {
                return OprfKey(s);
            }
        }
    }

    /// RFC 9497 DeriveKeyPair(seed, info), returning `skS`.
    pub fn derive(seed: &[u8; 32], info: &[u8]) -> Result<Self> {
        let info_len = u16::try_from(info.len()).map_err(|_| Error::DeriveKeyPair)?;
        for counter in 0u8..=255 {
            let s = hash_to_scalar(
                &[seed, &info_len.to_be_bytes(), info, &[counter]],
                DERIVE_KEY_PAIR_DST,
            );
            if s != Scalar::ZERO {
                return Ok(OprfKey(s));
            }
        }
        Err(Error::DeriveKeyPair)
    }

    /// Restores a key from its 32-byte little-endian encoding (canonical, non-zero).
    pub fn from_bytes(bytes: &[u8; SCALAR_LEN]) -> Option<Self> {
        let s: Option<Scalar> = Scalar::from_canonical_bytes(*bytes).into();
        s.filter(|s| *s != Scalar::ZERO).map(OprfKey)
    }

    /// The key's 32-byte encoding, for storage. Handle with care.
    pub fn to_bytes(&self) -> Zeroizing<[u8; SCALAR_LEN]> {
        Zeroizing::new(self.0.to_bytes())
    }

    /// The key divided by two, for batched double-and-compress.
    fn half(&self) -> Zeroizing<Scalar> {
        Zeroizing::new(self.0.div_by_2())
    }
}

impl std::fmt::Debug for OprfKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OprfKey(<secret>)")
    }
}

/// `n` fresh uniformly random non-zero scalars (RFC 9497 RandomScalar), for blinding.
pub fn random_blinds<R: rand_core::CryptoRng + ?Sized>(
    n: usize,
    rng: &mut R,
) -> Zeroizing<Vec<Scalar>> {
    Zeroizing::new(
        (0..n)
            .map(|_| {
                loop {
                    let s = Scalar::random(rng);
                    if s != Scalar::ZERO {
                        break s;
                    }
                }
            })
            .collect(),
    )
}

/// RFC 9497 Blind with a given blind: `blind * HashToGroup(input)`.
pub fn blind(input: &[u8], blind: &Scalar) -> Result<[u8; ELEMENT_LEN]> {
    let p = hash_to_group(input);
    if p == RistrettoPoint::identity() {
        return Err(Error::IdentityElement);
    }
    Ok((blind * p).compress().to_bytes())
}

/// RFC 9497 BlindEvaluate: `skS * blindedElement`. Returns `None` when the element is
/// not a valid encoding or is the identity (DeserializeError).
pub fn blind_evaluate(key: &OprfKey, blinded: &[u8; ELEMENT_LEN]) -> Option<[u8; ELEMENT_LEN]> {
    let p = decode_element(blinded)?;
    Some((key.0 * p).compress().to_bytes())
}

/// RFC 9497 Finalize: unblind with `blind^-1` and hash.
pub fn finalize(
    input: &[u8],
    blind: &Scalar,
    evaluated: &[u8; ELEMENT_LEN],
) -> Option<[u8; OUTPUT_LEN]> {
    let z = decode_element(evaluated)?;
    let n = (blind.invert() * z).compress().to_bytes();
    Some(finalize_hash(input, &n))
}

/// The PRF evaluated directly by the key holder: `Finalize(input, skS * H(input))`.
pub fn evaluate(key: &OprfKey, input: &[u8]) -> [u8; OUTPUT_LEN] {
    let n = (key.0 * hash_to_group(input)).compress().to_bytes();
    finalize_hash(input, &n)
}

/// Deserializes a group element, rejecting non-canonical encodings and the identity.
fn decode_element(bytes: &[u8; ELEMENT_LEN]) -> Option<RistrettoPoint> {
    CompressedRistretto(*bytes)
        .decompress()
        .filter(|p| *p != RistrettoPoint::identity())
}

/// Encodes `scalars[i] * 2 * points[i]`... used as `encode(s * P)` with `halves = s / 2`.
fn double_and_encode(points: &[RistrettoPoint]) -> Vec<[u8; ELEMENT_LEN]> {
    RistrettoPoint::double_and_compress_batch(points)
        .into_iter()
        .map(|c| c.to_bytes())
        .collect()
}

/// Batched Blind for many inputs with the given blinds (parallel in the current rayon
/// pool). Fails with [`Error::IdentityElement`] if any input hashes to the identity.
pub fn blind_batch(
    inputs: &(impl ItemList + ?Sized),
    blinds: &[Scalar],
) -> Result<Vec<[u8; ELEMENT_LEN]>> {
    assert_eq!(inputs.count(), blinds.len());
    let chunks: Vec<Result<Vec<[u8; ELEMENT_LEN]>>> = blinds
        .par_chunks(CHUNK)
        .enumerate()
        .map(|(c, blinds)| {
            let mut pts = Vec::with_capacity(blinds.len());
            for (j, r) in blinds.iter().enumerate() {
                let p = hash_to_group(inputs.item(c * CHUNK + j));
                if p == RistrettoPoint::identity() {
                    return Err(Error::IdentityElement);
                }
                let half = Zeroizing::new(r.div_by_2());
                pts.push(*half * p);
            }
            let out = double_and_encode(&pts);
            pts.zeroize();
            Ok(out)
        })
        .collect();
    flatten(chunks)
}

/// Decodes every element (in parallel), or `Err(index)` of the first invalid one.
fn decode_all(elements: &[[u8; ELEMENT_LEN]]) -> Result<Vec<RistrettoPoint>, usize> {
    let decoded: Vec<Result<Vec<RistrettoPoint>, usize>> = elements
        .par_chunks(CHUNK)
        .enumerate()
        .map(|(c, elems)| {
            elems
                .iter()
                .enumerate()
                .map(|(i, e)| decode_element(e).ok_or(c * CHUNK + i))
                .collect()
        })
        .collect();
    flatten(decoded)
}

/// Batched BlindEvaluate. On an invalid element returns `Err(index)` of the first one.
///
/// Every element is decoded and checked before any multiplication, so a query with a bad
/// element costs the server decoding only, not the multiplications before it.
pub fn blind_evaluate_batch(
    key: &OprfKey,
    blinded: &[[u8; ELEMENT_LEN]],
) -> Result<Vec<[u8; ELEMENT_LEN]>, usize> {
    let points = decode_all(blinded)?;
    let half = key.half();
    Ok(points
        .par_chunks(CHUNK)
        .flat_map_iter(|pts| {
            let scaled: Vec<RistrettoPoint> = pts.iter().map(|p| *half * p).collect();
            double_and_encode(&scaled)
        })
        .collect())
}

/// Batched Finalize. `evaluated[i]` is the server's answer to `blind(inputs[i], blinds[i])`.
/// On an invalid element returns `Err(index)` of the first one.
///
/// The outputs are secret to the client: they are written in place into one buffer of
/// exact size that is zeroized on drop, and every intermediate (inverted blinds,
/// unblinded points and their encodings) is zeroized before it is freed.
pub fn finalize_batch(
    inputs: &(impl ItemList + ?Sized),
    blinds: &[Scalar],
    evaluated: &[[u8; ELEMENT_LEN]],
) -> Result<Zeroizing<Vec<[u8; OUTPUT_LEN]>>, usize> {
    assert!(inputs.count() == blinds.len() && inputs.count() == evaluated.len());
    // Decode everything first (the evaluated elements are public), so a bad element
    // costs no multiplication and leaves no partial output behind.
    let points = decode_all(evaluated)?;
    // One batched inversion for all blinds, then halve for double-and-encode.
    let mut inv_halves: Zeroizing<Vec<Scalar>> = Zeroizing::new(blinds.to_vec());
    if !inv_halves.is_empty() {
        Scalar::invert_batch_alloc(&mut inv_halves);
    }
    inv_halves.par_iter_mut().for_each(|s| *s = s.div_by_2());
    let mut out = Zeroizing::new(vec![[0u8; OUTPUT_LEN]; inputs.count()]);
    out.par_chunks_mut(CHUNK)
        .zip(points.par_chunks(CHUNK))
        .zip(inv_halves.par_chunks(CHUNK))
        .enumerate()
        .for_each(|(c, ((out, points), inv_halves))| {
            let pts: Zeroizing<Vec<RistrettoPoint>> =
                Zeroizing::new(points.iter().zip(inv_halves).map(|(z, s)| s * z).collect());
            let unblinded = Zeroizing::new(double_and_encode(&pts));
            for (j, (o, n)) in out.iter_mut().zip(unblinded.iter()).enumerate() {
                *o = finalize_hash(inputs.item(c * CHUNK + j), n);
            }
        });
    Ok(out)
}

/// The PRF on many inputs, evaluated directly with the key (the server's own set).
///
/// The outputs are written in place into one buffer of exact size (no intermediate
/// copies), and the points and encodings computed on the way are zeroized.
pub fn evaluate_batch(key: &OprfKey, inputs: &(impl ItemList + ?Sized)) -> Vec<[u8; OUTPUT_LEN]> {
    let half = key.half();
    let mut out = vec![[0u8; OUTPUT_LEN]; inputs.count()];
    out.par_chunks_mut(CHUNK).enumerate().for_each(|(c, out)| {
        let at = |j: usize| inputs.item(c * CHUNK + j);
        let pts: Zeroizing<Vec<RistrettoPoint>> = Zeroizing::new(
            (0..out.len())
                .map(|j| *half * hash_to_group(at(j)))
                .collect(),
        );
        let encoded = Zeroizing::new(double_and_encode(&pts));
        for (j, (o, n)) in out.iter_mut().zip(encoded.iter()).enumerate() {
            *o = finalize_hash(at(j), n);
        }
    });
    out
}

fn flatten<T, E>(chunks: Vec<Result<Vec<T>, E>>) -> Result<Vec<T>, E> {
    let mut out = Vec::with_capacity(chunks.iter().map(|c| c.as_ref().map_or(0, Vec::len)).sum());
    for c in chunks {
        out.extend(c?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;

    #[test]
    fn batched_matches_single() {
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        let key = OprfKey::random(&mut rng);
        let inputs: Vec<Vec<u8>> = (0..600u32).map(|i| i.to_be_bytes().to_vec()).collect();
        let blinds: Vec<Scalar> = inputs.iter().map(|_| Scalar::random(&mut rng)).collect();
        let blinded = blind_batch(&inputs, &blinds).unwrap();
        let evaluated = blind_evaluate_batch(&key, &blinded).unwrap();
        let outputs = finalize_batch(&inputs, &blinds, &evaluated).unwrap();
        let direct = evaluate_batch(&key, &inputs);
        for i in 0..inputs.len() {
            assert_eq!(blinded[i], blind(&inputs[i], &blinds[i]).unwrap());
            assert_eq!(evaluated[i], blind_evaluate(&key, &blinded[i]).unwrap());
            assert_eq!(
                outputs[i],
                finalize(&inputs[i], &blinds[i], &evaluated[i]).unwrap()
            );
            assert_eq!(outputs[i], evaluate(&key, &inputs[i]));
            assert_eq!(direct[i], outputs[i]);
        }
    }

    #[test]
    fn expand_64_is_expand_message_xmd() {
        for len in [0usize, 1, 63, 64, 65, 200] {
            let msg = vec![0xa5u8; len];
            let (a, b) = msg.split_at(len / 3);
            assert_eq!(
                expand_64(&[a, b], HASH_TO_GROUP_DST).to_vec(),
                expand_message_xmd(&[&msg], HASH_TO_GROUP_DST, 64)
            );
        }
    }

    #[test]
    fn rejects_identity_and_garbage() {
        let mut rng = ChaCha20Rng::seed_from_u64(8);
        let key = OprfKey::random(&mut rng);
        assert!(blind_evaluate(&key, &[0u8; 32]).is_none());
        assert!(blind_evaluate(&key, &[0xff; 32]).is_none());
        let good = blind(b"x", &Scalar::ONE).unwrap();
        assert_eq!(blind_evaluate_batch(&key, &[good, good, [0u8; 32]]), Err(2));
        assert!(OprfKey::from_bytes(&[0u8; 32]).is_none());
        assert!(OprfKey::from_bytes(&[0xff; 32]).is_none());
        let k2 = OprfKey::from_bytes(&key.to_bytes()).unwrap();
        assert_eq!(evaluate(&k2, b"a"), evaluate(&key, b"a"));
        assert_eq!(format!("{key:?}"), "OprfKey(<secret>)");
    }
}
