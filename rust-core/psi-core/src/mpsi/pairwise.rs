//! The pairwise seeds of IOP18's offline phase, agreed through the star.
//!
//! IOP18 (Fig. 2, "Obtaining intermediate shares", and §4 "Sending short seeds instead of
//! full payload") has every member send every other member a random share, or a short seed
//! that expands to it. Here no member sends another anything: each member `j` draws a
//! ristretto255 key `e_j` and sends `E_j = e_j·G` to the leader in its hello; the leader
//! hands every member the roster of all `E_i`; members `i` and `j` both compute
//! `s_{ij} = SHA-256(ds_pair, gid, u8 min(i, j), u8 max(i, j), e_j·E_i)[0..16]`.
//!
//! Why this stays inside IOP18's model: the parties are (augmented) semi-honest, so the
//! leader relays the roster as it was sent; its view of the seeds is the public points, and
//! under the decisional Diffie-Hellman assumption in ristretto255 (with SHA-256 as a random
//! oracle) a seed of two members it does not control is pseudorandom to it, as a seed sent
//! over a private channel would be. A leader that colludes with member `i` learns `s_{ij}`
//! for every `j`, as IOP18's coalition would. What the model does not cover, an active relay
//! that swaps points, is the future relay's job: it must authenticate the members' points
//! end to end (docs/protocol/group-psi.md §7).

use super::messages::RosterEntry;
use crate::error::Result;
use crate::ote::base_ot::{decode_point, random_scalar};
use crate::ote::prc::{Block, hash};
use curve25519_dalek::{RistrettoPoint, Scalar};
use rand_core::CryptoRng;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

/// Domain separator of the pairwise seeds.
const DS_PAIR: &[u8] = b"PSI-MPSI-v1 pair";

/// A member's key-agreement secret `e_j`, zeroized on drop, and its point `E_j`.
pub(crate) struct KeyAgreement {
    secret: Zeroizing<Scalar>,
    point: [u8; 32],
}

impl KeyAgreement {
    pub(crate) fn new<R: CryptoRng + ?Sized>(rng: &mut R) -> Self {
        let secret = Zeroizing::new(random_scalar(rng));
        let point = RistrettoPoint::mul_base(&secret).compress().to_bytes();
        KeyAgreement { secret, point }
    }

    pub(crate) fn point(&self) -> [u8; 32] {
        self.point
    }

    /// The seeds `s_{ij}` with every other member `i` of `roster` (member `index`, 1-based,
    /// is this one), in roster order. A point that is not a canonical non-identity
    /// ristretto255 encoding is `InvalidElement` with its roster index.
    pub(crate) fn seeds(
        &self,
        gid: &[u8; 32],
        index: u8,
        roster: &[RosterEntry],
    ) -> Result<Zeroizing<Vec<Block>>> {
        let mut out = Zeroizing::new(Vec::with_capacity(roster.len().saturating_sub(1)));
        for (k, e) in roster.iter().enumerate() {
            let i = k as u8 + 1;
            if i == index {
                continue;
            }
            let peer = decode_point(&e.point, k)?;
            let shared = Zeroizing::new((*self.secret * peer).compress().to_bytes());
            let (lo, hi) = (i.min(index), i.max(index));
            let h = Zeroizing::new(hash(DS_PAIR, &[gid, &[lo], &[hi], shared.as_ref()]));
            out.push(h[..16].try_into().expect("16 bytes"));
        }
        Ok(out)
    }

    /// Whether `point` is this member's (constant time; the point is public, the habit is
    /// cheap).
    pub(crate) fn is_mine(&self, point: &[u8; 32]) -> bool {
        self.point.ct_eq(point).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;

    #[test]
    fn both_ends_agree_and_pairs_differ() {
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let keys: Vec<KeyAgreement> = (0..3).map(|_| KeyAgreement::new(&mut rng)).collect();
        let roster: Vec<RosterEntry> = keys
            .iter()
            .map(|k| RosterEntry {
                nonce: [0; 32],
                point: k.point(),
            })
            .collect();
        let gid = [5u8; 32];
        let s: Vec<_> = (0..3)
            .map(|j| keys[j].seeds(&gid, j as u8 + 1, &roster).unwrap())
            .collect();
        // Member 1 holds (s12, s13), member 2 (s12, s23), member 3 (s13, s23).
        assert_eq!(s[0][0], s[1][0]);
        assert_eq!(s[0][1], s[2][0]);
        assert_eq!(s[1][1], s[2][1]);
        assert_ne!(s[0][0], s[0][1]);
        let mut bad = roster.clone();
        bad[2].point = [0; 32];
        assert!(keys[0].seeds(&gid, 1, &bad).is_err());
        assert!(keys[1].is_mine(&roster[1].point) && !keys[1].is_mine(&roster[0].point));
    }
}
