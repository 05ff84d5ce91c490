//! Independent cross-check of the OPRF against libsodium (host-only dev-dependency).
//!
//! libsodium computes the ristretto255 one-way map, scalar multiplication, scalar
//! inversion and SHA-512; expand_message_xmd is written out here again on libsodium's
//! SHA-512, so nothing of psi-core's own code is on the oracle side.

use curve25519_dalek::scalar::Scalar;
use libsodium_sys as ls;
use psi_core::dh::{DhClient, DhServer, ServerKey};
use psi_core::oprf::{self, OprfKey};
use psi_core::{ItemSet, Threads};
use rand_chacha::ChaCha20Rng;
use rand_core::{Rng, SeedableRng};

struct Sha512(ls::crypto_hash_sha512_state);

impl Sha512 {
    fn new() -> Self {
        let mut st = std::mem::MaybeUninit::uninit();
        // SAFETY: init fully initialises the state it is given.
        unsafe {
            assert_eq!(ls::crypto_hash_sha512_init(st.as_mut_ptr()), 0);
            Sha512(st.assume_init())
        }
    }
    fn update(&mut self, data: &[u8]) -> &mut Self {
        // SAFETY: pointer and length describe a live slice.
        unsafe {
            assert_eq!(
                ls::crypto_hash_sha512_update(&mut self.0, data.as_ptr(), data.len() as u64),
                0
            )
        };
        self
    }
    fn finish(&mut self) -> [u8; 64] {
        let mut out = [0u8; 64];
        // SAFETY: out has the 64 bytes SHA-512 writes.
        unsafe {
            assert_eq!(
                ls::crypto_hash_sha512_final(&mut self.0, out.as_mut_ptr()),
                0
            )
        };
        out
    }
}

/// RFC 9380 expand_message_xmd(SHA-512) for a 64-byte output, on libsodium's SHA-512.
fn xmd64(msg: &[u8], dst: &[u8]) -> [u8; 64] {
    let dst_prime: Vec<u8> = [dst, &[dst.len() as u8]].concat();
    let b0 = Sha512::new()
        .update(&[0u8; 128])
        .update(msg)
        .update(&[0, 64, 0])
        .update(&dst_prime)
        .finish();
    Sha512::new()
        .update(&b0)
        .update(&[1])
        .update(&dst_prime)
        .finish()
}

fn sodium_hash_to_group(input: &[u8]) -> [u8; 32] {
    let u = xmd64(input, b"HashToGroup-OPRFV1-\x00-ristretto255-SHA512");
    let mut p = [0u8; 32];
    // SAFETY: 64-byte input, 32-byte output, as the API requires.
    unsafe {
        assert_eq!(
            ls::crypto_core_ristretto255_from_hash(p.as_mut_ptr(), u.as_ptr()),
            0
        )
    };
    p
}

fn sodium_mul(s: &[u8; 32], p: &[u8; 32]) -> [u8; 32] {
    let mut q = [0u8; 32];
    // SAFETY: 32-byte buffers as the API requires.
    unsafe {
        assert_eq!(
            ls::crypto_scalarmult_ristretto255(q.as_mut_ptr(), s.as_ptr(), p.as_ptr()),
            0
        )
    };
    q
}

fn sodium_invert(s: &[u8; 32]) -> [u8; 32] {
    let mut r = [0u8; 32];
    // SAFETY: 32-byte buffers as the API requires.
    unsafe {
        assert_eq!(
            ls::crypto_core_ristretto255_scalar_invert(r.as_mut_ptr(), s.as_ptr()),
            0
        )
    };
    r
}

fn sodium_finalize(input: &[u8], n: &[u8; 32]) -> [u8; 64] {
    Sha512::new()
        .update(&(input.len() as u16).to_be_bytes())
        .update(input)
        .update(&[0, 32])
        .update(n)
        .update(b"Finalize")
        .finish()
}

#[test]
fn oprf_agrees_with_libsodium() {
    // SAFETY: sodium_init is safe to call repeatedly.
    assert!(unsafe { ls::sodium_init() } >= 0);
    let mut rng = ChaCha20Rng::seed_from_u64(0x50d1);
    let key = OprfKey::random(&mut rng);
    let k = *key.to_bytes();
    let mut inputs = Vec::new();
    let mut blinds = Vec::new();
    for i in 0..200 {
        let len = (rng.next_u32() % 100) as usize + usize::from(i % 50 == 0) * 3000;
        let mut input = vec![0u8; len];
        rng.fill_bytes(&mut input);
        let r = Scalar::random(&mut rng);
        let rb = r.to_bytes();

        let h = sodium_hash_to_group(&input);
        assert_eq!(
            oprf::hash_to_group(&input).compress().to_bytes(),
            h,
            "hash-to-group {i}"
        );
        let blinded = sodium_mul(&rb, &h);
        assert_eq!(oprf::blind(&input, &r).unwrap(), blinded, "blind {i}");
        let evaluated = sodium_mul(&k, &blinded);
        assert_eq!(
            oprf::blind_evaluate(&key, &blinded).unwrap(),
            evaluated,
            "evaluate {i}"
        );
        let n = sodium_mul(&sodium_invert(&rb), &evaluated);
        let output = sodium_finalize(&input, &n);
        assert_eq!(
            oprf::finalize(&input, &r, &evaluated).unwrap(),
            output,
            "finalize {i}"
        );
        assert_eq!(
            sodium_finalize(&input, &sodium_mul(&k, &h)),
            output,
            "direct {i}"
        );
        inputs.push(input);
        blinds.push(r);
    }
    // The batched paths DH-PSI runs agree as well.
    let expected: Vec<[u8; 64]> = inputs
        .iter()
        .map(|x| sodium_finalize(x, &sodium_mul(&k, &sodium_hash_to_group(x))))
        .collect();
    assert_eq!(oprf::evaluate_batch(&key, &inputs), expected);
    let blinded = oprf::blind_batch(&inputs, &blinds).unwrap();
    let evaluated = oprf::blind_evaluate_batch(&key, &blinded).unwrap();
    assert_eq!(
        *oprf::finalize_batch(&inputs, &blinds, &evaluated).unwrap(),
        expected
    );

    // And the whole protocol finds exactly the items libsodium says are shared.
    let srv = DhServer::new(ServerKey::new(key, 3), 256, Threads::new(2));
    let set = srv.encode_set(&ItemSet::new(&inputs[..120])).unwrap();
    let (mut c, q) =
        DhClient::start(ItemSet::new(&inputs[100..]), 3, Threads::new(2), &mut rng).unwrap();
    c.handle(&srv.handle_query(&q).unwrap()).unwrap();
    c.handle(&set.to_bytes()).unwrap();
    let idx: Vec<usize> = c
        .finish()
        .unwrap()
        .matches
        .iter()
        .map(|m| m.index)
        .collect();
    assert_eq!(idx, (0..20).collect::<Vec<_>>());
}
