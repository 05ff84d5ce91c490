//! The leader (`P_0`): collects every member's hello, sends each its setup and the IKNP
//! matrices for choice bits `BF_0` (it is the random OTs' receiver: the base-OT sender,
//! IKNP's `receiver_at`), recovers each member's share at its filter's ones from the cell
//! corrections, XORs the shares into `GBF_IS` and outputs its items whose cells XOR to zero.

use super::config::MpsiConfig;
use super::messages::{
    self, Chunk, Hello, INSTANCE_LEN, Message, RosterEntry, Setup, message_type,
};
use super::params::{INSTANCE_BITS, MAX_ITEMS, MAX_PARTIES, MIN_PARTIES, Params};
use super::{RowHash, group_id, item_positions, link_id};
use crate::chunked::{self, wrong_phase};
use crate::error::{DecodeError, Error, Result};
use crate::gbf::bloom;
use crate::items::ItemSet;
use crate::ote::base_ot::{self, decode_point};
use crate::ote::iknp::{ReceiverColumns, U_LEN};
use crate::ote::prc::{Block, Row};
use crate::output::{Match, MatchOutput};
use crate::wire;
use rand_core::CryptoRng;
use rayon::prelude::*;
use zeroize::Zeroizing;

/// A message for member `member` (1-based): the relay's address, not part of the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// The member it goes to, `1 ..= t - 1`.
    pub member: usize,
    /// The message.
    pub bytes: Vec<u8>,
}

/// What [`Leader::handle`] returns.
#[derive(Debug)]
#[non_exhaustive]
pub enum LeaderStep {
    /// Messages to move to members (none while hellos are still awaited).
    Send(Vec<Outgoing>),
    /// The run is over: the intersection.
    Done(GroupOutput),
}

/// What a finished run tells the leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOutput {
    /// The leader's items every member holds, in the order of its original list.
    pub matches: Vec<Match>,
    /// Distinct leader items.
    pub leader_items: usize,
    /// Leader entries dropped as duplicates.
    pub duplicates: usize,
    /// The set size each member declared, members `1 ..` in order.
    pub member_items: Vec<u32>,
    /// The run's parameters.
    pub params: Params,
}

/// The group PSI leader, a sans-IO state machine with `t - 1` peers. Members speak first,
/// so [`Leader::start`] returns no message; [`Leader::handle`] takes each message with the
/// index of the member it came from.
pub struct Leader {
    items: ItemSet,
    config: MpsiConfig,
    /// `t - 1`.
    members: usize,
    phase: Phase,
}

enum Phase {
    AwaitHellos(Box<Collecting>),
    Running(Box<Running>),
    Done,
    /// A failure after which the run cannot continue.
    Failed,
}

impl Phase {
    fn name(&self) -> &'static str {
        match self {
            Phase::AwaitHellos(_) => "leader awaiting hellos",
            Phase::Running(_) => "leader running OTs",
            Phase::Done => "leader done",
            Phase::Failed => "leader failed",
        }
    }
}

/// A member's hello with both keys of each base OT, computed when it arrived.
type Joined = (Hello, Zeroizing<Vec<[Block; 2]>>);

struct Collecting {
    parties: u8,
    nonce: [u8; 32],
    /// One base-OT sender per member (its own secret for each link).
    senders: Vec<base_ot::Sender>,
    /// Per member: its hello and both keys of each base OT, once the hello arrived.
    hellos: Vec<Option<Joined>>,
}

struct Running {
    params: Params,
    member_items: Vec<u32>,
    positions: Zeroizing<Vec<Vec<u32>>>,
    /// `BF_0`, one choice row per instance.
    filter: Zeroizing<Vec<Row>>,
    /// `⊕_j` of what each member's OTs gave (`GBF_IS` at the ones of `BF_0`).
    sum: Zeroizing<Vec<u64>>,
    links: Vec<Link>,
}

/// The leader's side of the OTs with one member.
struct Link {
    /// The row hash under the link's session id.
    hash: RowHash,
    /// Both keys of each base OT, their AES key schedules expanded.
    columns: ReceiverColumns,
    /// Instances sent so far.
    next_instance: usize,
    /// The chunk whose cells are awaited: its first instance and the leader's seed cells.
    in_flight: Option<(usize, Zeroizing<Vec<u64>>)>,
}

impl std::fmt::Debug for Leader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        chunked::fmt_party(f, "Leader", &self.items, self.phase.name())
    }
}

impl Leader {
    /// Starts a leader of `parties` parties (itself included, 2 to 16): draws its nonce and
    /// one base-OT sender per member.
    pub fn start<R: CryptoRng + ?Sized>(
        items: ItemSet,
        parties: u8,
        config: MpsiConfig,
        rng: &mut R,
    ) -> Result<Leader> {
        chunked::check_set_size("leader items", items.len(), MAX_ITEMS)?;
        if !(MIN_PARTIES..=MAX_PARTIES).contains(&parties) {
            return Err(Error::InputTooLarge {
                what: "parties (2 to 16)",
                value: parties as u64,
                limit: MAX_PARTIES as u64,
            });
        }
        let nonce = chunked::draw_nonce(rng);
        let members = parties as usize - 1;
        let senders = (0..members).map(|_| base_ot::Sender::new(rng)).collect();
        Ok(Leader {
            items,
            config,
            members,
            phase: Phase::AwaitHellos(Box::new(Collecting {
                parties,
                nonce,
                senders,
                hellos: (0..members).map(|_| None).collect(),
            })),
        })
    }

    /// Handles a message from member `member` (1-based; the relay's address).
    ///
    /// A malformed message, one from an unknown member or one that does not fit that
    /// member's phase is an error and leaves the leader as it was.
    pub fn handle(&mut self, member: usize, bytes: &[u8]) -> Result<LeaderStep> {
        let members = self.members;
        if member == 0 || member > members {
            return Err(Error::UnknownMember {
                index: member,
                members,
            });
        }
        let msg = messages::decode(bytes)?;
        match (&self.phase, msg) {
            (Phase::AwaitHellos(c), Message::Hello(hello)) => {
                if c.hellos[member - 1].is_some() {
                    return Err(wrong_phase(
                        "leader holding the member's hello",
                        message_type::HELLO,
                    ));
                }
                self.on_hello(member, hello)
            }
            (Phase::Running(r), Message::Cells(chunk)) => {
                if r.links[member - 1].in_flight.is_none() {
                    return Err(wrong_phase(
                        "leader done with the member",
                        message_type::CELL_CHUNK,
                    ));
                }
                self.on_cells(member, chunk)
            }
            (phase, msg) => Err(wrong_phase(phase.name(), msg.message_type())),
        }
    }

    /// True once [`LeaderStep::Done`] has been returned.
    pub fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Done)
    }

    /// The run's parameters, once every hello has arrived.
    pub fn params(&self) -> Option<Params> {
        match &self.phase {
            Phase::Running(r) => Some(r.params),
            _ => None,
        }
    }

    fn on_hello(&mut self, member: usize, hello: Hello) -> Result<LeaderStep> {
        if hello.items > self.config.max_member_items {
            return Err(DecodeError::LimitExceeded {
                what: "member items",
                value: hello.items as u64,
                limit: self.config.max_member_items as u64,
            }
            .into());
        }
        decode_point(&hello.point, 0)?;
        let threads = self.config.threads;
        let Phase::AwaitHellos(c) = &mut self.phase else {
            unreachable!("checked by caller")
        };
        let sender = &c.senders[member - 1];
        let keys = threads.install(|| sender.keys(&hello.nonce, &hello.base_ot))??;
        c.hellos[member - 1] = Some((hello, keys));
        if c.hellos.iter().any(Option::is_none) {
            return Ok(LeaderStep::Send(Vec::new()));
        }
        self.begin()
    }

    /// Every hello is in: the parameters, the roster, the setups and the first chunks.
    fn begin(&mut self) -> Result<LeaderStep> {
        let Phase::AwaitHellos(c) = std::mem::replace(&mut self.phase, Phase::Failed) else {
            unreachable!("checked by caller")
        };
        let n0 = self.items.len() as u32;
        let hellos: Vec<Joined> = c
            .hellos
            .into_iter()
            .map(|h| h.expect("all hellos"))
            .collect();
        let member_items: Vec<u32> = hellos.iter().map(|(h, _)| h.items).collect();
        let max = member_items.iter().copied().fold(n0, u32::max);
        let p = Params::new(c.parties, n0, max)
            .ok_or(DecodeError::InvalidParameter { what: "max items" })?;
        let roster: Vec<RosterEntry> = hellos
            .iter()
            .map(|(h, _)| RosterEntry {
                nonce: h.nonce,
                point: h.point,
            })
            .collect();
        let gid = group_id(&c.nonce, &p, &roster);
        let threads = self.config.threads;
        let positions = item_positions(&self.items, &gid, &p, threads)?;
        let filter = bloom::filter(&positions, p.filter_bits);
        let links = hellos
            .into_iter()
            .enumerate()
            .map(|(j, (_, keys))| Link {
                hash: RowHash::new(&link_id(&gid, j as u8 + 1)),
                columns: ReceiverColumns::new(&keys),
                next_instance: 0,
                in_flight: None,
            })
            .collect();
        let mut run = Box::new(Running {
            params: p,
            member_items,
            positions,
            filter,
            sum: Zeroizing::new(vec![0u64; p.filter_bits as usize]),
            links,
        });
        let chunk_instances = self.config.chunk_instances();
        let mut out = Vec::with_capacity(2 * run.links.len());
        for (j, sender) in c.senders.iter().enumerate() {
            let setup = Setup {
                nonce: c.nonce,
                parties: p.parties,
                index: j as u8 + 1,
                leader_items: n0,
                max_items: max,
                hashes: p.hashes as u8,
                filter_bits: p.filter_bits,
                cell_bytes: p.cell_bytes as u8,
                sender_point: sender.point(),
                roster: roster.clone(),
            };
            out.push(Outgoing {
                member: j + 1,
                bytes: setup.encode(),
            });
            let bytes = threads.install(|| run.next_chunk(j, chunk_instances))?;
            out.push(Outgoing {
                member: j + 1,
                bytes,
            });
        }
        self.phase = Phase::Running(run);
        Ok(LeaderStep::Send(out))
    }

    fn on_cells(&mut self, member: usize, chunk: Chunk<'_>) -> Result<LeaderStep> {
        let Phase::Running(run) = &mut self.phase else {
            unreachable!("checked by caller")
        };
        let p = run.params;
        let link = &run.links[member - 1];
        let (first, seeds) = link.in_flight.as_ref().expect("checked by caller");
        let per = INSTANCE_BITS as usize;
        if chunk.first_instance as usize != *first
            || chunk.instance_count as usize * per != seeds.len()
        {
            return Err(DecodeError::InvalidParameter {
                what: "chunk instances",
            }
            .into());
        }
        let w = p.cell_bytes as usize;
        if chunk.cell_bytes() != w {
            return Err(DecodeError::InvalidParameter { what: "cell bytes" }.into());
        }
        let base = first * per;
        let threads = self.config.threads;
        let sum = &mut run.sum[base..base + seeds.len()];
        threads.install(|| {
            sum.par_chunks_mut(per)
                .zip(seeds.par_chunks(per))
                .zip(chunk.data.par_chunks(per * w))
                .for_each(|((sum, seeds), data)| {
                    for ((s, seed), c) in sum.iter_mut().zip(seeds).zip(data.chunks_exact(w)) {
                        let mut b = [0u8; 8];
                        b[..w].copy_from_slice(c);
                        *s ^= seed ^ u64::from_le_bytes(b);
                    }
                });
        })?;
        let total = p.instances() as usize;
        let link = &mut run.links[member - 1];
        link.in_flight = None;
        if link.next_instance < total {
            let chunk_instances = self.config.chunk_instances();
            let bytes = threads.install(|| run.next_chunk(member - 1, chunk_instances))?;
            return Ok(LeaderStep::Send(vec![Outgoing { member, bytes }]));
        }
        if run
            .links
            .iter()
            .any(|l| l.next_instance < total || l.in_flight.is_some())
        {
            return Ok(LeaderStep::Send(Vec::new()));
        }
        let output = threads.install(|| run.output(&self.items))?;
        self.phase = Phase::Done;
        Ok(LeaderStep::Done(output))
    }
}

impl Running {
    /// Link `j`'s next matrix chunk (at most `chunk_instances` instances); keeps its seeds.
    fn next_chunk(&mut self, j: usize, chunk_instances: usize) -> Vec<u8> {
        let total = self.params.instances() as usize;
        let mask = self.params.cell_mask();
        let filter = &self.filter;
        let link = &mut self.links[j];
        let r0 = link.next_instance;
        let count = chunk_instances.min(total - r0);
        let per = INSTANCE_BITS as usize;
        let mut msg = Chunk::begin(
            message_type::MATRIX_CHUNK,
            r0 as u32,
            count as u16,
            INSTANCE_LEN,
        );
        let body = msg.len();
        msg.resize(body + count * INSTANCE_LEN, 0);
        let mut seeds = Zeroizing::new(vec![0u64; count * per]);
        let (hash, columns) = (&link.hash, &link.columns);
        msg[body..]
            .par_chunks_mut(INSTANCE_LEN)
            .zip(seeds.par_chunks_mut(per))
            .enumerate()
            .for_each_init(
                || Zeroizing::new(vec![0u8; 2 * U_LEN]),
                |scratch, (k, (u, cells))| {
                    let r = r0 + k;
                    let s = &filter[r];
                    let (t, rows) = scratch.split_at_mut(U_LEN);
                    columns.instance(s, r as u32, u, t, rows);
                    // Only the OTs at the ones of BF_0 give the leader a cell it uses
                    // (spec §3.5); the others' seeds stay zero and their sums unread.
                    for (j, (c, x)) in cells.iter_mut().zip(rows.chunks_exact(16)).enumerate() {
                        if (s[j / 8] >> (j % 8)) & 1 == 1 {
                            *c = hash.cell((r * per + j) as u32, x, mask);
                        }
                    }
                },
            );
        link.next_instance = r0 + count;
        link.in_flight = Some((r0, seeds));
        wire::finish(msg)
    }

    /// The leader's items whose cells in `GBF_IS` XOR to zero.
    fn output(&self, items: &ItemSet) -> GroupOutput {
        let hits: Vec<usize> = self
            .positions
            .par_iter()
            .enumerate()
            .filter(|(_, ps)| ps.iter().fold(0u64, |a, &q| a ^ self.sum[q as usize]) == 0)
            .map(|(i, _)| i)
            .collect();
        let out = MatchOutput::new(items, &hits, 0);
        GroupOutput {
            matches: out.matches,
            leader_items: out.client_items,
            duplicates: out.duplicates,
            member_items: self.member_items.clone(),
            params: self.params,
        }
    }
}
