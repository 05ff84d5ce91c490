//! The group relay's end-to-end layer (docs/protocol/group-psi.md §9): the code's secret,
//! the parties' key announcements (a ristretto255 point authenticated by a MAC keyed from
//! the secret), the pairwise keys and the ChaCha20-Poly1305 envelopes bound to the group,
//! the sender, the recipient and a sequence number.
//!
//! The relay sees the group id, the announcements and the envelopes; without the secret
//! it can neither forge an announcement (so it cannot stand in the middle of a key
//! agreement) nor open or alter an envelope.

use super::GroupError;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use curve25519_dalek::ristretto::CompressedRistretto;
use curve25519_dalek::{RistrettoPoint, Scalar};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use zeroize::{Zeroize, Zeroizing};

/// Bytes of the code's secret: 128 bits.
pub const SECRET_BYTES: usize = 16;
/// The envelope's version byte.
pub const VERSION: u8 = 0x01;
/// Bytes an envelope adds to its plaintext: version, sequence number, Poly1305 tag.
pub const OVERHEAD: usize = 1 + 8 + 16;

const DS_MAC: &[u8] = b"PSI-GROUP-v1 mac";
const DS_KEY: &[u8] = b"PSI-GROUP-v1 key";
const DS_PAIR: &[u8] = b"PSI-GROUP-v1 pair";
const DS_AAD: &[u8] = b"PSI-GROUP-v1 aad";

/// HMAC-SHA-256 (RFC 2104) of the concatenation of `parts` under `key` (at most 64 bytes).
fn hmac(key: &[u8], parts: &[&[u8]]) -> Zeroizing<[u8; 32]> {
    debug_assert!(key.len() <= 64);
    let mut k = Zeroizing::new([0u8; 64]);
    k[..key.len()].copy_from_slice(key);
    let mut pad = Zeroizing::new([0u8; 64]);
    for (p, b) in pad.iter_mut().zip(k.iter()) {
        *p = b ^ 0x36;
    }
    let mut inner = Sha256::new();
    inner.update(pad.as_ref());
    for p in parts {
        inner.update(p);
    }
    let inner: Zeroizing<[u8; 32]> = Zeroizing::new(inner.finalize().into());
    for (p, b) in pad.iter_mut().zip(k.iter()) {
        *p = b ^ 0x5c;
    }
    let mut outer = Sha256::new();
    outer.update(pad.as_ref());
    outer.update(inner.as_ref());
    Zeroizing::new(outer.finalize().into())
}

/// A length-prefixed byte string (`u8 len || bytes`), for the group id in derivations.
fn prefixed(bytes: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(bytes.len() + 1);
    v.push(bytes.len().min(255) as u8);
    v.extend_from_slice(&bytes[..bytes.len().min(255)]);
    v
}

/// The group's shared secret and id: derives the MAC key of the announcements.
pub struct GroupSecret {
    gid: Vec<u8>,
    secret: Zeroizing<[u8; SECRET_BYTES]>,
    mac_key: Zeroizing<[u8; 32]>,
}

impl std::fmt::Debug for GroupSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupSecret").finish_non_exhaustive()
    }
}

impl GroupSecret {
    /// The secret of group `gid` (the id's ASCII bytes).
    pub fn new(gid: &str, secret: [u8; SECRET_BYTES]) -> GroupSecret {
        let secret = Zeroizing::new(secret);
        // The MAC key depends on the secret alone: the leader announces its key before the
        // server has named the group, and the index is bound later, by the pair keys.
        let mac_key = hmac(secret.as_ref(), &[DS_MAC]);
        GroupSecret {
            gid: gid.as_bytes().to_vec(),
            secret,
            mac_key,
        }
    }

    fn tag(&self, point: &[u8; 32]) -> Zeroizing<[u8; 32]> {
        hmac(self.mac_key.as_ref(), &[DS_KEY, point])
    }
}

/// A party's key pair for the group: a ristretto255 scalar (zeroized on drop) and point.
pub struct PartyKey {
    scalar: Zeroizing<Scalar>,
    point: [u8; 32],
}

impl PartyKey {
    /// A fresh key from 64 bytes of `rng`.
    pub fn new<R: rand_core::CryptoRng + ?Sized>(rng: &mut R) -> PartyKey {
        let mut wide = Zeroizing::new([0u8; 64]);
        rng.fill_bytes(wide.as_mut());
        let scalar = Zeroizing::new(Scalar::from_bytes_mod_order_wide(&wide));
        let point = RistrettoPoint::mul_base(&scalar).compress().to_bytes();
        PartyKey { scalar, point }
    }

    /// The announcement of this key: `point || HMAC(mac key, ds_key, point)`,
    /// [`psi_http::GROUP_KEY_BYTES`] bytes.
    pub fn announce(&self, secret: &GroupSecret) -> [u8; psi_http::GROUP_KEY_BYTES] {
        let mut out = [0u8; psi_http::GROUP_KEY_BYTES];
        out[..32].copy_from_slice(&self.point);
        out[32..].copy_from_slice(secret.tag(&self.point).as_ref());
        out
    }

    /// The channel between this party (`me`) and `peer`, whose announcement is checked:
    /// a tag that is not the secret's, or a point that is not a canonical non-identity
    /// encoding, is [`GroupError::BadAnnouncement`].
    pub fn channel(
        &self,
        secret: &GroupSecret,
        me: u8,
        peer: u8,
        announcement: &[u8],
    ) -> Result<Channel, GroupError> {
        let bad = GroupError::BadAnnouncement { party: peer };
        if announcement.len() != psi_http::GROUP_KEY_BYTES {
            return Err(bad);
        }
        let point: [u8; 32] = announcement[..32].try_into().expect("32 bytes");
        let tag = secret.tag(&point);
        if !bool::from(tag.as_slice().ct_eq(&announcement[32..])) {
            return Err(bad);
        }
        let p = CompressedRistretto(point).decompress().ok_or(bad.clone())?;
        if p == RistrettoPoint::default() {
            return Err(bad);
        }
        let shared = Zeroizing::new((*self.scalar * p).compress().to_bytes());
        let g = prefixed(&secret.gid);
        let key = |from: u8, to: u8, pf: &[u8; 32], pt: &[u8; 32]| {
            hmac(
                secret.secret.as_ref(),
                &[DS_PAIR, &g, &[from], &[to], pf, pt, shared.as_ref()],
            )
        };
        Ok(Channel {
            gid: g.clone(),
            me,
            peer,
            send: key(me, peer, &self.point, &point),
            recv: key(peer, me, &point, &self.point),
            sent: 0,
            received: 0,
        })
    }
}

/// Both directions between this party and one peer: keys and sequence numbers.
pub struct Channel {
    gid: Vec<u8>,
    me: u8,
    peer: u8,
    send: Zeroizing<[u8; 32]>,
    recv: Zeroizing<[u8; 32]>,
    sent: u64,
    received: u64,
}

fn nonce(seq: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&seq.to_be_bytes());
    n
}

fn aad(gid: &[u8], from: u8, to: u8, seq: u64) -> Vec<u8> {
    let mut a = Vec::with_capacity(DS_AAD.len() + gid.len() + 10);
    a.extend_from_slice(DS_AAD);
    a.extend_from_slice(gid);
    a.push(from);
    a.push(to);
    a.extend_from_slice(&seq.to_be_bytes());
    a
}

impl Channel {
    /// Seals `plaintext` as the next envelope to the peer.
    pub fn seal(&mut self, plaintext: &[u8]) -> Vec<u8> {
        let seq = self.sent;
        self.sent += 1;
        let cipher = ChaCha20Poly1305::new(Key::from_slice(self.send.as_ref()));
        let a = aad(&self.gid, self.me, self.peer, seq);
        let ct = cipher
            .encrypt(
                Nonce::from_slice(&nonce(seq)),
                Payload {
                    msg: plaintext,
                    aad: &a,
                },
            )
            .expect("ChaCha20-Poly1305 seals any length the relay carries");
        let mut out = Vec::with_capacity(OVERHEAD + plaintext.len());
        out.push(VERSION);
        out.extend_from_slice(&seq.to_be_bytes());
        out.extend_from_slice(&ct);
        out
    }

    /// Opens the next envelope from the peer: another version, a sequence number that is
    /// not the next one (a replay, a reordering, a drop) or a failed tag is an error, and
    /// leaves the channel as it was.
    pub fn open(&mut self, envelope: &[u8]) -> Result<Zeroizing<Vec<u8>>, GroupError> {
        let from = self.peer;
        if envelope.len() < OVERHEAD || envelope[0] != VERSION {
            return Err(GroupError::Tampered { from });
        }
        let seq = u64::from_be_bytes(envelope[1..9].try_into().expect("8 bytes"));
        if seq != self.received {
            return Err(GroupError::OutOfOrder {
                from,
                expected: self.received,
                got: seq,
            });
        }
        let cipher = ChaCha20Poly1305::new(Key::from_slice(self.recv.as_ref()));
        let a = aad(&self.gid, self.peer, self.me, seq);
        let mut pt = cipher
            .decrypt(
                Nonce::from_slice(&nonce(seq)),
                Payload {
                    msg: &envelope[9..],
                    aad: &a,
                },
            )
            .map_err(|_| GroupError::Tampered { from })?;
        self.received += 1;
        let out = Zeroizing::new(std::mem::take(&mut pt));
        pt.zeroize();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rng() -> rand_chacha::ChaCha20Rng {
        rand_core::SeedableRng::seed_from_u64(7)
    }

    /// HMAC-SHA-256 against RFC 4231 test case 2.
    #[test]
    fn hmac_is_rfc_4231() {
        let tag = hmac(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        assert_eq!(
            hex::encode(tag.as_ref()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    fn pair() -> (Channel, Channel) {
        let mut r = rng();
        let s = GroupSecret::new("a-00", [9; 16]);
        let (a, b) = (PartyKey::new(&mut r), PartyKey::new(&mut r));
        let ab = a.channel(&s, 0, 1, &b.announce(&s)).unwrap();
        let ba = b.channel(&s, 1, 0, &a.announce(&s)).unwrap();
        (ab, ba)
    }

    #[test]
    fn envelopes_open_in_order_only_and_detect_any_flipped_bit() {
        let (mut ab, mut ba) = pair();
        let e0 = ab.seal(b"hello");
        let e1 = ab.seal(b"world");
        assert_ne!(&e0[9..], &e1[9..]);
        assert!(!e0.windows(5).any(|w| w == b"hello"), "not in the clear");
        assert!(matches!(
            ba.open(&e1),
            Err(GroupError::OutOfOrder {
                expected: 0,
                got: 1,
                ..
            })
        ));
        for i in 0..e0.len() {
            let mut bad = e0.clone();
            bad[i] ^= 1;
            assert!(ba.open(&bad).is_err(), "byte {i}");
        }
        assert_eq!(ba.open(&e0).unwrap().as_slice(), b"hello");
        assert!(ba.open(&e0).is_err(), "a replay");
        assert_eq!(ba.open(&e1).unwrap().as_slice(), b"world");
        // The other direction has its own key and numbers.
        let back = ba.seal(b"x");
        assert_eq!(ab.open(&back).unwrap().as_slice(), b"x");
        assert!(ba.open(&back).is_err(), "a reflected envelope");
    }

    #[test]
    fn announcements_need_the_secret_and_channels_the_indices() {
        let mut r = rng();
        let s = GroupSecret::new("a-00", [9; 16]);
        let other = GroupSecret::new("a-00", [8; 16]);
        let (a, b) = (PartyKey::new(&mut r), PartyKey::new(&mut r));
        let ann = b.announce(&s);
        assert!(a.channel(&s, 0, 1, &ann).is_ok());
        assert!(matches!(
            a.channel(&other, 0, 1, &ann),
            Err(GroupError::BadAnnouncement { party: 1 })
        ));
        // A relay that renumbers the parties gets envelopes that do not open.
        let mut ab = a.channel(&s, 0, 1, &ann).unwrap();
        let mut ba_as_2 = b.channel(&s, 2, 0, &a.announce(&s)).unwrap();
        assert!(ba_as_2.open(&ab.seal(b"x")).is_err());
        // And one that moves the group (another id, the same secret) likewise.
        let mut fresh = a.channel(&s, 0, 1, &ann).unwrap();
        let mut elsewhere = b
            .channel(&GroupSecret::new("a-01", [9; 16]), 1, 0, &a.announce(&s))
            .unwrap();
        assert!(matches!(
            elsewhere.open(&fresh.seal(b"y")),
            Err(GroupError::Tampered { from: 0 })
        ));
        // A relay swapping in its own point cannot make a tag for it.
        let mut swapped = ann;
        swapped[..32].copy_from_slice(&PartyKey::new(&mut r).point);
        assert!(a.channel(&s, 0, 1, &swapped).is_err());
        assert!(a.channel(&s, 0, 1, &ann[..63]).is_err());
    }
}
