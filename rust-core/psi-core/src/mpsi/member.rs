//! A member (`P_j`, `j >= 1`): sends its hello, builds its share of the members'
//! intersection GBF when the setup names the group, and answers each of the leader's
//! matrix chunks with the cell corrections of the same OTs (it is the random OTs' sender:
//! the base-OT receiver with choice bits `Δ`, IKNP's `sender_ones_at`).

use super::config::MpsiConfig;
use super::messages::{self, Chunk, Hello, INSTANCE_LEN, Message, Setup, message_type};
use super::pairwise::KeyAgreement;
use super::params::{INSTANCE_BITS, MAX_ITEMS, Params};
use super::{RowHash, group_id, item_positions, link_id, share, share_key};
use crate::chunked::{self, wrong_phase};
use crate::error::{DecodeError, Result};
use crate::items::ItemSet;
use crate::ote::base_ot;
use crate::ote::iknp::{SenderColumns, U_LEN};
use crate::ote::prc::Block;
use crate::wire;
use rand_core::CryptoRng;
use rayon::prelude::*;
use zeroize::Zeroizing;

/// A group PSI member, a sans-IO state machine with one peer, the leader.
pub struct Member {
    items: ItemSet,
    config: MpsiConfig,
    phase: Phase,
}

enum Phase {
    AwaitSetup(Box<Joining>),
    AwaitMatrix(Box<Answering>),
    Done,
    /// A failure after which the run cannot continue.
    Failed,
}

impl Phase {
    fn name(&self) -> &'static str {
        match self {
            Phase::AwaitSetup(_) => "member awaiting setup",
            Phase::AwaitMatrix(_) => "member awaiting matrix chunk",
            Phase::Done => "member done",
            Phase::Failed => "member failed",
        }
    }
}

/// Everything drawn at the start (the state machine takes no RNG later).
struct Joining {
    nonce: [u8; 32],
    key: KeyAgreement,
    delta: Zeroizing<Vec<u8>>,
    receiver: base_ot::Receiver,
    /// Drawn for the random cells of `GBF_j` (keyed to the group at the setup).
    cells_key: Zeroizing<Block>,
}

struct Answering {
    params: Params,
    /// The row hash under the link's session id.
    hash: RowHash,
    /// `K_{i,Δ_i}` of each base OT, key schedules expanded, and `Δ`.
    columns: SenderColumns,
    /// `GBF_j ⊕ Z_j`.
    share: Zeroizing<Vec<u64>>,
    next_instance: usize,
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        chunked::fmt_party(f, "Member", &self.items, self.phase.name())
    }
}

impl Member {
    /// Starts a member: draws all its randomness and returns its first message (hello).
    pub fn start<R: CryptoRng + ?Sized>(
        items: ItemSet,
        config: MpsiConfig,
        rng: &mut R,
    ) -> Result<(Member, Vec<u8>)> {
        chunked::check_set_size("member items", items.len(), MAX_ITEMS)?;
        let nonce = chunked::draw_nonce(rng);
        let key = KeyAgreement::new(rng);
        let delta = base_ot::draw_choices(rng);
        let (receiver, base_ot) = base_ot::Receiver::start(&delta, &nonce, rng, config.threads)?;
        let mut cells_key = Zeroizing::new([0u8; 16]);
        rng.fill_bytes(cells_key.as_mut());
        let hello = Hello {
            nonce,
            items: items.len() as u32,
            point: key.point(),
            base_ot,
        };
        let member = Member {
            items,
            config,
            phase: Phase::AwaitSetup(Box::new(Joining {
                nonce,
                key,
                delta,
                receiver,
                cells_key,
            })),
        };
        Ok((member, hello.encode()))
    }

    /// Handles a message from the leader: `None` after the setup (the first matrix chunk
    /// follows it), the cell chunk to send back after a matrix chunk.
    ///
    /// A malformed message or one that does not fit the phase is an error and leaves the
    /// member as it was.
    pub fn handle(&mut self, bytes: &[u8]) -> Result<Option<Vec<u8>>> {
        let msg = messages::decode(bytes)?;
        match (&self.phase, msg) {
            (Phase::AwaitSetup(_), Message::Setup(setup)) => self.on_setup(setup).map(|()| None),
            (Phase::AwaitMatrix(_), Message::Matrix(chunk)) => self.on_matrix(chunk).map(Some),
            (phase, msg) => Err(wrong_phase(phase.name(), msg.message_type())),
        }
    }

    /// True once the last cell chunk has been returned.
    pub fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Done)
    }

    /// The run's parameters, once the setup has arrived.
    pub fn params(&self) -> Option<Params> {
        match &self.phase {
            Phase::AwaitMatrix(a) => Some(a.params),
            _ => None,
        }
    }

    fn on_setup(&mut self, setup: Setup) -> Result<()> {
        let Phase::AwaitSetup(st) = &self.phase else {
            unreachable!("checked by caller")
        };
        let n = self.items.len() as u32;
        let me = &setup.roster[setup.index as usize - 1];
        if me.nonce != st.nonce || !st.key.is_mine(&me.point) {
            return Err(DecodeError::InvalidParameter { what: "roster" }.into());
        }
        if setup.max_items < n {
            return Err(DecodeError::InvalidParameter { what: "max items" }.into());
        }
        // The parameters are the derivation's exactly (spec §2): they are what bounds the
        // leader's view of the items outside the intersection.
        let p = Params::new(setup.parties, setup.leader_items, setup.max_items)
            .ok_or(DecodeError::InvalidParameter { what: "max items" })?;
        if setup.hashes as u32 != p.hashes {
            return Err(DecodeError::InvalidParameter { what: "hashes" }.into());
        }
        if setup.filter_bits != p.filter_bits {
            return Err(DecodeError::InvalidParameter {
                what: "filter bits",
            }
            .into());
        }
        if setup.cell_bytes as u32 != p.cell_bytes {
            return Err(DecodeError::InvalidParameter { what: "cell bytes" }.into());
        }
        let gid = group_id(&setup.nonce, &p, &setup.roster);
        let seeds = st.key.seeds(&gid, setup.index, &setup.roster)?;
        let threads = self.config.threads;
        let keys = threads.install(|| st.receiver.finish(&st.nonce, &setup.sender_point))??;
        let positions = item_positions(&self.items, &gid, &p, threads)?;
        let share = share::share(&positions, &p, &share_key(&gid, &st.cells_key), &seeds)?;
        let Phase::AwaitSetup(st) = std::mem::replace(&mut self.phase, Phase::Failed) else {
            unreachable!("checked above")
        };
        self.phase = Phase::AwaitMatrix(Box::new(Answering {
            params: p,
            hash: RowHash::new(&link_id(&gid, setup.index)),
            columns: SenderColumns::new(&keys, &st.delta),
            share,
            next_instance: 0,
        }));
        Ok(())
    }

    fn on_matrix(&mut self, chunk: Chunk<'_>) -> Result<Vec<u8>> {
        let Phase::AwaitMatrix(st) = &mut self.phase else {
            unreachable!("checked by caller")
        };
        let p = st.params;
        let total = p.instances() as usize;
        let r0 = chunk.first_instance as usize;
        let count = chunk.instance_count as usize;
        chunked::check_chunk_range(r0, count, st.next_instance, total)?;
        let w = p.cell_bytes as usize;
        let per = INSTANCE_BITS as usize;
        let mask = p.cell_mask();
        let mut msg = Chunk::begin(message_type::CELL_CHUNK, r0 as u32, count as u16, per * w);
        let body = msg.len();
        msg.resize(body + count * per * w, 0);
        let (hash, columns, share) = (&st.hash, &st.columns, &st.share);
        self.config.threads.install(|| {
            msg[body..]
                .par_chunks_mut(per * w)
                .zip(chunk.data.par_chunks(INSTANCE_LEN))
                .enumerate()
                .for_each_init(
                    || Zeroizing::new(vec![0u8; 2 * U_LEN]),
                    |scratch, (k, (out, u))| {
                        let r = r0 + k;
                        let (q, rows) = scratch.split_at_mut(U_LEN);
                        columns.instance(u, r as u32, q, rows);
                        let delta = columns.delta();
                        let cells = &share[r * per..(r + 1) * per];
                        for (j, ((o, x), c)) in out
                            .chunks_exact_mut(w)
                            .zip(rows.chunks_exact(16))
                            .zip(cells)
                            .enumerate()
                        {
                            // S¹ = H(p, q_j ⊕ Δ).
                            let mut x1 = Zeroizing::new([0u8; 16]);
                            for ((a, b), d) in x1.iter_mut().zip(x).zip(delta) {
                                *a = b ^ d;
                            }
                            let seed = hash.cell((r * per + j) as u32, &x1[..], mask);
                            o.copy_from_slice(&(c ^ seed).to_le_bytes()[..w]);
                        }
                    },
                );
        })?;
        st.next_instance = r0 + count;
        if st.next_instance == total {
            self.phase = Phase::Done;
        }
        Ok(wire::finish(msg))
    }
}
