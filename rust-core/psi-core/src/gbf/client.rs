//! The client (PSZ14's `P2`, the random OTs' receiver): builds its Bloom filter, sends the
//! IKNP matrices for choice bits = its filter in chunks, keeps the seeds where its filter
//! has a one, and matches its own items' values against the server's sorted list.

use super::bloom;
use super::config::GbfConfig;
use super::messages::{self, Chunk, Hello, INSTANCE_LEN, MAX_ITEMS, Message, Outputs, Setup};
use super::params::{INSTANCE_BITS, Params};
use super::session_id;
use crate::chunked::{self, ClientPhase, ClientStep, wrong_phase};
use crate::error::{DecodeError, Error, Result};
use crate::items::ItemSet;
use crate::ote::base_ot;
use crate::ote::iknp;
use crate::ote::prc::{Block, Row};
use crate::output::MatchOutput;
use crate::wire;
use rand_core::CryptoRng;
use rayon::prelude::*;
use std::convert::Infallible;
use zeroize::Zeroizing;

/// Client side of GBF-PSI, a sans-IO state machine (the loop of every round protocol:
/// one request per [`ClientStep::Send`]).
pub struct GbfClient {
    items: ItemSet,
    config: GbfConfig,
    phase: Phase,
}

/// The hello is produced whole, so there is no `Starting` phase.
type Phase = ClientPhase<Infallible, AwaitSetup, Sending>;

struct AwaitSetup {
    nonce: [u8; 32],
    sender: base_ot::Sender,
}

/// State while the matrices are being sent; everything derived from the items is zeroized.
struct Sending {
    sid: [u8; 32],
    params: Params,
    /// Both keys of each base OT (the client is the base-OT sender).
    keys: Zeroizing<Vec<[Block; 2]>>,
    /// The filter, one choice row per instance.
    filter: Zeroizing<Vec<Row>>,
    /// Each item's distinct positions.
    positions: Zeroizing<Vec<Vec<u32>>>,
    /// The client's seed of every OT built so far (`seed¹` where its filter has a one).
    seeds: Zeroizing<Vec<Block>>,
    chunk_instances: usize,
    /// Instances built so far.
    next_instance: usize,
    /// Instances handed to the driver so far: the instance the pending ack must name.
    sent_instance: usize,
    /// A chunk built ahead ([`GbfClient::work_ahead`]), not yet handed out.
    ahead: Option<Vec<u8>>,
    /// The client's own values, sorted with their item indices, once computed.
    mine: Option<Zeroizing<Vec<(u128, u32)>>>,
}

impl Drop for Sending {
    fn drop(&mut self) {
        for ps in self.positions.iter_mut() {
            zeroize::Zeroize::zeroize(ps);
        }
    }
}

impl std::fmt::Debug for GbfClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        chunked::fmt_party(f, "GbfClient", &self.items, self.phase.name())
    }
}

impl GbfClient {
    /// Starts a run: draws the client's randomness and returns the first request (hello).
    pub fn start<R: CryptoRng + ?Sized>(
        items: ItemSet,
        config: GbfConfig,
        rng: &mut R,
    ) -> Result<(GbfClient, Vec<u8>)> {
        let n = items.len();
        chunked::check_set_size("client items", n, MAX_ITEMS)?;
        let nonce = chunked::draw_nonce(rng);
        let sender = base_ot::Sender::new(rng);
        let hello = Hello {
            client_nonce: nonce,
            client_items: n as u32,
            sender_point: sender.point(),
        };
        let client = GbfClient {
            items,
            config,
            phase: Phase::AwaitSetup(Box::new(AwaitSetup { nonce, sender })),
        };
        Ok((client, hello.encode()))
    }

    /// Handles a server response; returns the next request or the result.
    ///
    /// A malformed response or one that does not fit the current phase is an error and
    /// leaves the client as it was.
    pub fn handle(&mut self, response: &[u8]) -> Result<ClientStep> {
        let msg = messages::decode(response)?;
        match (&mut self.phase, msg) {
            (Phase::AwaitSetup(_), Message::Setup(setup)) => self.on_setup(setup),
            (Phase::AwaitAck(st), Message::Ack(ack)) => {
                if ack.next_instance as usize != st.sent_instance {
                    return Err(DecodeError::InvalidParameter {
                        what: "next instance",
                    }
                    .into());
                }
                self.next_chunk()
            }
            (Phase::AwaitOutputs(st), Message::Outputs(out)) => {
                if out.output_bits as u32 != st.params.output_bits {
                    return Err(DecodeError::InvalidParameter {
                        what: "output bits",
                    }
                    .into());
                }
                if out.server_items != st.params.server_items {
                    return Err(Error::CountMismatch {
                        expected: st.params.server_items as u64,
                        found: out.server_items as u64,
                    });
                }
                self.finish(out)
            }
            (phase, msg) => Err(wrong_phase(phase.name(), msg.message_type())),
        }
    }

    /// The run's parameters, once the setup has arrived.
    pub fn params(&self) -> Option<Params> {
        match &self.phase {
            Phase::AwaitAck(s) | Phase::AwaitOutputs(s) => Some(s.params),
            _ => None,
        }
    }

    /// True once [`ClientStep::Done`] has been returned.
    pub fn is_done(&self) -> bool {
        self.phase.is_done()
    }

    fn on_setup(&mut self, setup: Setup) -> Result<ClientStep> {
        let n_c = self.items.len() as u32;
        // The parameters are the derivation's exactly (spec §2): the client's filter is
        // what keeps the server's other items hidden, and `ℓ` what keeps false matches rare.
        let p = Params::new(n_c, setup.server_items).ok_or(DecodeError::InvalidParameter {
            what: "filter bits",
        })?;
        if setup.hashes as u32 != p.hashes {
            return Err(DecodeError::InvalidParameter { what: "hashes" }.into());
        }
        if setup.filter_bits != p.filter_bits {
            return Err(DecodeError::InvalidParameter {
                what: "filter bits",
            }
            .into());
        }
        if setup.output_bits as u32 != p.output_bits {
            return Err(DecodeError::InvalidParameter {
                what: "output bits",
            }
            .into());
        }
        let Phase::AwaitSetup(st) = &self.phase else {
            unreachable!("checked by caller")
        };
        let threads = self.config.threads;
        let keys = threads.install(|| st.sender.keys(&setup.server_nonce, &setup.base_ot))??;
        let Phase::AwaitSetup(st) = std::mem::replace(&mut self.phase, Phase::Failed) else {
            unreachable!("checked above")
        };
        let sid = session_id(&st.nonce, &setup.server_nonce, &p);
        let items = &self.items;
        let (positions, filter) = threads.install(|| {
            let digests = bloom::digests(&items.items());
            let positions: Vec<Vec<u32>> = digests
                .par_iter()
                .map(|d| {
                    let mut ps = Vec::with_capacity(p.hashes as usize);
                    bloom::positions(d, p.hashes, p.filter_bits, &mut ps);
                    ps
                })
                .collect();
            let filter = bloom::filter(&positions, p.filter_bits);
            (Zeroizing::new(positions), filter)
        })?;
        let st = Sending {
            sid,
            params: p,
            keys,
            filter,
            positions,
            seeds: Zeroizing::new(vec![[0u8; 16]; p.filter_bits as usize]),
            chunk_instances: self.config.chunk_instances(),
            next_instance: 0,
            sent_instance: 0,
            ahead: None,
            mine: None,
        };
        self.phase = Phase::AwaitAck(Box::new(st));
        self.next_chunk()
    }

    /// Hands out the next chunk, built now or ahead (the phase is `AwaitAck` on entry).
    fn next_chunk(&mut self) -> Result<ClientStep> {
        let Phase::AwaitAck(st) = &mut self.phase else {
            unreachable!("checked by caller")
        };
        let msg = match st.ahead.take() {
            Some(msg) => msg,
            None => self.config.threads.install(|| st.chunk())?,
        };
        st.sent_instance = st.next_instance;
        if st.sent_instance == st.params.instances() as usize {
            let Phase::AwaitAck(st) = std::mem::replace(&mut self.phase, Phase::Failed) else {
                unreachable!()
            };
            self.phase = Phase::AwaitOutputs(st);
        }
        Ok(ClientStep::Send(msg))
    }

    /// Does now the work of the next [`GbfClient::handle`] that does not depend on the
    /// response in flight: while a chunk's ack is awaited, builds the next chunk; while
    /// the outputs are awaited, computes and sorts the client's own values. The requests
    /// are byte for byte the same either way. Optional; a second call before `handle`
    /// does nothing.
    pub fn work_ahead(&mut self) -> Result<()> {
        let threads = self.config.threads;
        if !self.has_work_ahead() {
            return Ok(());
        }
        match &mut self.phase {
            Phase::AwaitAck(st) => st.ahead = Some(threads.install(|| st.chunk())?),
            Phase::AwaitOutputs(st) => st.mine = Some(threads.install(|| st.own_values())?),
            _ => {}
        }
        Ok(())
    }

    /// Whether [`GbfClient::work_ahead`] would do anything now.
    pub fn has_work_ahead(&self) -> bool {
        match &self.phase {
            Phase::AwaitAck(st) => {
                st.ahead.is_none() && st.next_instance < st.params.instances() as usize
            }
            Phase::AwaitOutputs(st) => st.mine.is_none(),
            _ => false,
        }
    }

    fn finish(&mut self, out: Outputs<'_>) -> Result<ClientStep> {
        let threads = self.config.threads;
        let Phase::AwaitOutputs(st) = &mut self.phase else {
            unreachable!("checked by caller")
        };
        let mine = match st.mine.take() {
            Some(mine) => mine,
            None => threads.install(|| st.own_values())?,
        };
        let matched = out.matches(&mine)?;
        let output = MatchOutput::new(&self.items, &matched, st.params.server_items);
        self.phase = Phase::Done;
        Ok(ClientStep::Done(output))
    }
}

impl Sending {
    /// The client's own values `V(x)` with their item indices, sorted by value.
    fn own_values(&self) -> Zeroizing<Vec<(u128, u32)>> {
        let l = self.params.output_bits;
        let mut mine: Zeroizing<Vec<(u128, u32)>> = Zeroizing::new(
            self.positions
                .par_iter()
                .enumerate()
                .map(|(i, ps)| (bloom::value(&self.seeds, ps, l), i as u32))
                .collect(),
        );
        mine.par_sort_unstable();
        mine
    }

    /// Instances `next_instance ..` as one chunk message; keeps their seeds.
    fn chunk(&mut self) -> Vec<u8> {
        let total = self.params.instances() as usize;
        let r0 = self.next_instance;
        let count = self.chunk_instances.min(total - r0);
        let mut msg = Chunk::begin(r0 as u32, count as u16);
        let body = msg.len();
        msg.resize(body + count * INSTANCE_LEN, 0);
        let per = INSTANCE_BITS as usize;
        let (sid, keys, filter) = (&self.sid, &self.keys, &self.filter);
        msg[body..]
            .par_chunks_mut(INSTANCE_LEN)
            .zip(self.seeds[r0 * per..(r0 + count) * per].par_chunks_mut(per))
            .enumerate()
            .for_each(|(k, (u, seeds))| {
                let r = r0 + k;
                let (u_r, seeds_r) = iknp::receiver_at(sid, keys, &filter[r], r as u32);
                u.copy_from_slice(&u_r);
                seeds.copy_from_slice(&seeds_r);
            });
        self.next_instance = r0 + count;
        wire::finish(msg)
    }
}

impl chunked::ChunkedClient for GbfClient {
    fn handle(&mut self, response: &[u8]) -> Result<ClientStep> {
        GbfClient::handle(self, response)
    }

    fn work_ahead(&mut self) -> Result<()> {
        GbfClient::work_ahead(self)
    }

    fn has_work_ahead(&self) -> bool {
        GbfClient::has_work_ahead(self)
    }

    fn awaits_outputs(&self) -> bool {
        matches!(self.phase, Phase::AwaitOutputs(_))
    }
}
