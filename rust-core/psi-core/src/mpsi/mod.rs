//! Group PSI: Inbar, Omri and Pinkas's multiparty PSI with augmented semi-honest security
//! over the star ("Efficient Scalable Multiparty Private Set-Intersection via Garbled Bloom
//! Filters", SCN 2018, Fig. 2, MPSI-Aug). `t` parties (2 to 16 phones), each with its own
//! set; the leader `P_0` learns the items every party holds, the members `P_1 .. P_{t-1}`
//! learn nothing. The byte-level specification is `docs/protocol/group-psi.md`; the design
//! decisions are `docs/adr/0050-group-psi.md`.
//!
//! 1. Each member hashes its items with the session's hash functions, builds DCW13's garbled
//!    Bloom filter `GBF_j` (target zero) and masks it with pseudorandom streams of seeds it
//!    shares pairwise with the other members, so that the members' shares XOR to
//!    `⊕_j GBF_j` ([`share`]). The seeds come from ristretto255 key agreement through the
//!    leader ([`pairwise`]): IOP18's offline share exchange without member-to-member
//!    messages.
//! 2. The leader builds the Bloom filter `BF_0` of its items. With each member it runs `m`
//!    random OTs (IKNP over 128 MR19 base OTs, [`crate::ote`]) with `BF_0` as its choice
//!    bits; the member sends, per OT, its share's cell XOR the OT's seed with index one (one
//!    correction per cell: the OT's other message is then the correction XOR a seed the
//!    leader cannot tell from random, IOP18's `s_0` drawn at random).
//! 3. The leader XORs what it learned from every member into `GBF_IS` and outputs each of
//!    its items whose cells XOR to zero.
//!
//! Message flow (every arrow is between the leader and one member `j`; a relay moves them):
//!
//! ```text
//! member j                                        leader
//! Hello: nonce_j, n_j, E_j, 128 base-OT msgs  ──▶
//!                    (the leader waits for every member's hello)
//!                                            ◀──  Setup: nonce_0, t, j, n_0, N, k, m, w, A_j, roster
//!                                            ◀──  MatrixChunk instances [0, c)
//! CellChunk instances [0, c)                  ──▶
//!                                            ◀──  MatrixChunk instances [c, ..)   (repeated)
//! CellChunk instances [.., m/512) (last)      ──▶
//!                     (after every member's last chunk: the leader's output)
//! ```
//!
//! Security model: augmented semi-honest parties, any number of them colluding (IOP18
//! Theorem 2); see the spec's §7 for what a coalition learns and what the relay must add.

mod config;
mod leader;
mod member;
pub mod messages;
mod pairwise;
pub mod params;
mod share;

pub use config::{DEFAULT_MAX_CHUNK_BYTES, MpsiConfig};
pub use leader::{GroupOutput, Leader, LeaderStep, Outgoing};
pub use member::Member;
pub use params::Params;

use crate::error::Result;
use crate::gbf::bloom;
use crate::items::ItemSet;
use crate::ote::prc::{Block, Midstate, hash, session_midstate};
use crate::parallel::Threads;
use messages::RosterEntry;
use rand_core::CryptoRng;
use rayon::prelude::*;
use zeroize::Zeroizing;

/// Domain separators (spec §3).
mod ds {
    pub(super) const GROUP: &[u8] = b"PSI-MPSI-v1 group";
    pub(super) const LINK: &[u8] = b"PSI-MPSI-v1 link";
    pub(super) const ITEM: &[u8] = b"PSI-MPSI-v1 item";
    pub(super) const SHARE: &[u8] = b"PSI-MPSI-v1 share";
    pub(super) const OT: &[u8] = b"PSI-MPSI-v1 ot";
}

/// The group id: `SHA-256(ds_group, nonce_0, u8 t, BE32 n_0, BE32 N, u8 k, BE32 m, u8 w,
/// roster)`, the roster as sent (spec §3). Every party derives it from the setup.
pub(crate) fn group_id(leader_nonce: &[u8; 32], p: &Params, roster: &[RosterEntry]) -> [u8; 32] {
    let mut r = Vec::with_capacity(roster.len() * messages::ROSTER_ENTRY_LEN);
    for e in roster {
        r.extend_from_slice(&e.nonce);
        r.extend_from_slice(&e.point);
    }
    hash(
        ds::GROUP,
        &[
            leader_nonce,
            &[p.parties],
            &p.leader_items.to_be_bytes(),
            &p.max_items.to_be_bytes(),
            &[p.hashes as u8],
            &p.filter_bits.to_be_bytes(),
            &[p.cell_bytes as u8],
            &r,
        ],
    )
}

/// The OT extension's session id between the leader and member `j`:
/// `SHA-256(ds_link, gid, u8 j)`.
pub(crate) fn link_id(gid: &[u8; 32], member: u8) -> [u8; 32] {
    hash(ds::LINK, &[gid, &[member]])
}

/// The key of a member's random cells: `SHA-256(ds_share, gid, key drawn at start)[0..16]`.
pub(crate) fn share_key(gid: &[u8; 32], drawn: &Block) -> Zeroizing<Block> {
    let h = Zeroizing::new(hash(ds::SHARE, &[gid, drawn]));
    Zeroizing::new(h[..16].try_into().expect("16 bytes"))
}

/// Each item's distinct positions under the session's hash functions (IOP18's
/// "Initialization": the leader's nonce picks them): the AES-CTR positions of GBF-PSI
/// ([`bloom::positions`]) under the key `SHA-256(ds_item, gid, digest(x))[0..16]`.
pub(crate) fn item_positions(
    items: &ItemSet,
    gid: &[u8; 32],
    p: &Params,
    threads: Threads,
) -> Result<Zeroizing<Vec<Vec<u32>>>> {
    threads.install(|| {
        let digests = bloom::digests(&items.items());
        Zeroizing::new(
            digests
                .par_iter()
                .map(|d| {
                    let h = Zeroizing::new(hash(ds::ITEM, &[gid, d]));
                    let key: Zeroizing<Block> =
                        Zeroizing::new(h[..16].try_into().expect("16 bytes"));
                    let mut ps = Vec::with_capacity(p.hashes as usize);
                    bloom::positions(&key, p.hashes, p.filter_bits, &mut ps);
                    ps
                })
                .collect(),
        )
    })
}

/// The random OTs' row hash on the link with session id `sid` (spec §3.5):
/// `SHA-256(u8 len(ds_ot) || ds_ot || sid || zeros to 64 bytes || BE32 p || x)`, whose first
/// `w` bytes are the seed cell of OT `p` for the row `x`. The first block is the link's and
/// compressed once, so each OT costs one SHA-256 compression.
pub(crate) struct RowHash(Midstate);

impl RowHash {
    pub(crate) fn new(sid: &[u8; 32]) -> Self {
        RowHash(session_midstate(ds::OT, sid))
    }

    /// The cell of OT `p` for row `x`: the hash's first 8 bytes as `LE64`, masked.
    #[inline]
    pub(crate) fn cell(&self, p: u32, x: &[u8], mask: u64) -> u64 {
        let h = Zeroizing::new(self.0.hash8_parts(&p.to_be_bytes(), x));
        u64::from_le_bytes(*h) & mask
    }
}

/// Traffic of an in-memory run.
#[derive(Debug, Clone, Default)]
pub struct InMemoryTraffic {
    /// Messages moved.
    pub messages: usize,
    /// Bytes all members sent the leader (frame headers included).
    pub members_to_leader_bytes: u64,
    /// Bytes the leader sent all members.
    pub leader_to_members_bytes: u64,
}

/// Runs a leader and `members.len()` members in memory, every message through its bytes,
/// in a fixed order (so a seeded `rng` gives the same bytes every time). The parties draw
/// their randomness from `rng` in order: the leader, then members 1, 2, ... `observe` sees
/// every message: the member's index (1-based), `true` if it goes to the leader, its bytes.
pub fn run_in_memory<R: CryptoRng + ?Sized>(
    leader_items: ItemSet,
    members: Vec<ItemSet>,
    config: &MpsiConfig,
    rng: &mut R,
    mut observe: impl FnMut(usize, bool, &[u8]),
) -> Result<(GroupOutput, InMemoryTraffic)> {
    let t = u8::try_from(members.len() + 1).unwrap_or(u8::MAX);
    let mut leader = Leader::start(leader_items, t, config.clone(), rng)?;
    let mut parties = Vec::with_capacity(members.len());
    let mut to_leader = std::collections::VecDeque::new();
    for (j, items) in members.into_iter().enumerate() {
        let (m, hello) = Member::start(items, config.clone(), rng)?;
        parties.push(m);
        to_leader.push_back((j + 1, hello));
    }
    let mut traffic = InMemoryTraffic::default();
    let mut to_members: std::collections::VecDeque<Outgoing> = Default::default();
    loop {
        // Members first, in order: each answers what the leader sent it.
        while let Some(out) = to_members.pop_front() {
            observe(out.member, false, &out.bytes);
            traffic.messages += 1;
            traffic.leader_to_members_bytes += out.bytes.len() as u64;
            if let Some(reply) = parties[out.member - 1].handle(&out.bytes)? {
                to_leader.push_back((out.member, reply));
            }
        }
        let Some((j, bytes)) = to_leader.pop_front() else {
            return Err(crate::Error::Incomplete("a message to move"));
        };
        observe(j, true, &bytes);
        traffic.messages += 1;
        traffic.members_to_leader_bytes += bytes.len() as u64;
        match leader.handle(j, &bytes)? {
            LeaderStep::Send(out) => to_members.extend(out),
            LeaderStep::Done(output) => return Ok((output, traffic)),
        }
    }
}

#[cfg(test)]
mod tests;
