//! The client (PSI receiver `P2`): builds the matrices `A` and `D` column by column,
//! sends `Δ_c = PRG(seed0_c) ⊕ PRG(seed1_c) ⊕ D_c` in chunks, and matches its own OPRF
//! values `H2(A[v(y)])` against the server's sorted list.

use super::config::Cm20Config;
use super::messages::{self, Chunk, Hello, MAX_ITEMS, Message, Outputs, Setup};
use super::params::{self, Params};
use super::prf::{self, Prf};
use super::rot;
use super::session::session_id;
use crate::chunked::{self, ClientPhase, ClientStep, wrong_phase};
use crate::error::{DecodeError, Error, Result};
use crate::items::ItemSet;
use crate::lanes;
use crate::ote::base_ot;
use crate::ote::prc::{Block, Prg};
use crate::output::{MatchOutput, RunLabels};
use crate::wire;
use rand_core::CryptoRng;
use rayon::prelude::*;
use std::convert::Infallible;
use zeroize::Zeroizing;

/// Client side of CM20-PSI, a sans-IO state machine (the same loop as
/// [`crate::ot::OtClient`]: one request per [`ClientStep::Send`]).
pub struct Cm20Client {
    items: ItemSet,
    config: Cm20Config,
    height: u32,
    phase: Phase,
}

/// The hello is produced whole, so there is no `Starting` phase.
type Phase = ClientPhase<Infallible, AwaitSetup, Sending>;

struct AwaitSetup {
    nonce: [u8; 32],
    receiver: base_ot::Receiver,
    delta: Zeroizing<Vec<u8>>,
    prf_key: Zeroizing<Block>,
}

/// State while the matrix is being sent; everything derived from the items is zeroized.
struct Sending {
    sid: [u8; 32],
    params: Params,
    prf_key: Zeroizing<Block>,
    prf: Prf,
    seeds: Zeroizing<Vec<[Block; 2]>>,
    z: Zeroizing<Vec<Block>>,
    /// The client's lookups `A_c[v_c(y)]`, one row per column (see `prf::outputs`).
    acc: Zeroizing<Vec<u8>>,
    chunk_columns: usize,
    /// Columns built so far.
    next_column: usize,
    /// Columns handed to the driver so far: the column the pending ack must name.
    sent_column: usize,
    /// A chunk built ahead ([`Cm20Client::work_ahead`]), not yet handed out: columns
    /// `sent_column .. next_column`.
    ahead: Option<Vec<u8>>,
    /// The client's own values, sorted with their item indices, once computed (ahead of
    /// the outputs, or when they arrive); with lanes, each item's lane pad.
    mine: Option<Mine>,
    /// `Λ` when the server grants label lanes.
    lane: Option<u8>,
}

/// The client's own values sorted with their item indices, and with lanes each item's pad
/// (`1 + Λ` bytes, in item order). Zeroized on drop.
struct Mine {
    sorted: Zeroizing<Vec<(u128, u32)>>,
    pads: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for Cm20Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        chunked::fmt_party(f, "Cm20Client", &self.items, self.phase.name())
    }
}

impl Cm20Client {
    /// Starts a run: draws the client's randomness and returns the first request (hello).
    pub fn start<R: CryptoRng + ?Sized>(
        items: ItemSet,
        config: Cm20Config,
        rng: &mut R,
    ) -> Result<(Cm20Client, Vec<u8>)> {
        let n = items.len();
        chunked::check_set_size("client items", n, MAX_ITEMS)?;
        let height = config.height.unwrap_or_else(|| params::height(n as u64));
        if !messages::height_allowed(n as u32, height) {
            return Err(Error::InputTooLarge {
                what: "matrix height",
                value: height as u64,
                limit: messages::MAX_HEIGHT as u64,
            });
        }
        let nonce = chunked::draw_nonce(rng);
        let delta = base_ot::draw_choices(rng);
        let mut prf_key = Zeroizing::new([0u8; 16]);
        rng.fill_bytes(prf_key.as_mut());
        let (receiver, base_ot) = base_ot::Receiver::start(&delta, &nonce, rng, config.threads)?;
        let hello = Hello {
            client_nonce: nonce,
            client_items: n as u32,
            height,
            base_ot,
            lanes: config.ask_label_lanes,
        };
        let client = Cm20Client {
            items,
            config,
            height,
            phase: Phase::AwaitSetup(Box::new(AwaitSetup {
                nonce,
                receiver,
                delta,
                prf_key,
            })),
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
                if ack.next_column as usize != st.sent_column {
                    return Err(DecodeError::InvalidParameter {
                        what: "next column",
                    }
                    .into());
                }
                self.next_chunk()
            }
            (Phase::AwaitOutputs(st), Message::Outputs(out)) => {
                if out.lane != st.lane {
                    return Err(DecodeError::InvalidParameter {
                        what: "label lane width",
                    }
                    .into());
                }
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

    /// The matrix height `m` of this run.
    pub fn height(&self) -> u32 {
        self.height
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
        // Lanes granted that were not asked for are refused.
        lanes::check_granted(self.config.ask_label_lanes, setup.lane)?;
        let Some(width) = params::width(n_c as u64, setup.server_items as u64, self.height) else {
            return Err(DecodeError::InvalidParameter {
                what: "matrix width",
            }
            .into());
        };
        // A server may ask for a wider matrix (it only costs the client bytes), never a
        // narrower one: the width is what makes non-members' values pseudorandom.
        if (setup.width as u32) < width {
            return Err(DecodeError::InvalidParameter {
                what: "matrix width",
            }
            .into());
        }
        let p = Params {
            client_items: n_c,
            server_items: setup.server_items,
            height: self.height,
            width: setup.width as u32,
            output_bits: params::output_bits(n_c as u64, setup.server_items as u64),
        };
        if setup.output_bits as u32 != p.output_bits {
            return Err(DecodeError::InvalidParameter {
                what: "output bits",
            }
            .into());
        }
        let Phase::AwaitSetup(st) = &self.phase else {
            unreachable!("checked by caller")
        };
        let base_keys = self
            .config
            .threads
            .install(|| st.receiver.finish(&st.nonce, &setup.sender_point))??;
        let Phase::AwaitSetup(st) = std::mem::replace(&mut self.phase, Phase::Failed) else {
            unreachable!("checked above")
        };
        let sid = session_id(&st.nonce, &setup.server_nonce, &p);
        let w = p.width as usize;
        let seeds = rot::sender(&sid, &base_keys, &st.delta, &setup.iknp_u, w);
        let prf = Prf::new(&st.prf_key, p.prf_blocks(), params::index_bits(p.height));
        let items = &self.items;
        let z = self.config.threads.install(|| prf.inputs(&items.items()))?;
        let n = self.items.len();
        let st = Sending {
            sid,
            params: p,
            prf_key: st.prf_key,
            prf,
            seeds,
            z,
            acc: Zeroizing::new(vec![0u8; prf::acc_rows(w) * prf::acc_bytes(n)]),
            chunk_columns: self.config.chunk_columns(p.column_bytes()),
            next_column: 0,
            sent_column: 0,
            ahead: None,
            mine: None,
            lane: setup.lane,
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
        st.sent_column = st.next_column;
        if st.sent_column == st.params.width as usize {
            let Phase::AwaitAck(st) = std::mem::replace(&mut self.phase, Phase::Failed) else {
                unreachable!()
            };
            self.phase = Phase::AwaitOutputs(st);
        }
        Ok(ClientStep::Send(msg))
    }

    /// Does now the work of the next [`Cm20Client::handle`] that does not depend on the
    /// response in flight: while a chunk's ack is awaited, builds the next chunk; while
    /// the outputs are awaited, computes and sorts the client's own values. A driver
    /// calls it after sending a request and before reading the response, so that this
    /// work overlaps the network and the server's work; `handle` then uses what was
    /// prepared. The requests are byte for byte the same either way. Optional; a second
    /// call before `handle` does nothing.
    pub fn work_ahead(&mut self) -> Result<()> {
        let n = self.items.len();
        let threads = self.config.threads;
        if !self.has_work_ahead() {
            return Ok(());
        }
        match &mut self.phase {
            Phase::AwaitAck(st) => {
                st.ahead = Some(threads.install(|| st.chunk())?);
            }
            Phase::AwaitOutputs(st) => {
                st.mine = Some(threads.install(|| st.own_values(n))?);
            }
            _ => {}
        }
        Ok(())
    }

    /// Whether [`Cm20Client::work_ahead`] would do anything now: a chunk is left to build, or
    /// the matching side to prepare, and it is not done yet.
    pub fn has_work_ahead(&self) -> bool {
        match &self.phase {
            Phase::AwaitAck(st) => st.ahead.is_none() && st.next_column < st.params.width as usize,
            Phase::AwaitOutputs(st) => st.mine.is_none(),
            _ => false,
        }
    }

    fn finish(&mut self, out: Outputs<'_>) -> Result<ClientStep> {
        let n = self.items.len();
        let threads = self.config.threads;
        let Phase::AwaitOutputs(st) = &mut self.phase else {
            unreachable!("checked by caller")
        };
        let p = st.params;
        let mine = match st.mine.take() {
            Some(mine) => mine,
            None => threads.install(|| st.own_values(n))?,
        };
        let hits = out.hits(&mine.sorted)?;
        let labels = match st.lane {
            None => None,
            Some(width) => Some(open_lanes(&out, &hits, &mine.pads, width)?),
        };
        let matched: Zeroizing<Vec<usize>> = Zeroizing::new(hits.iter().map(|h| h.item).collect());
        let mut output = MatchOutput::new(&self.items, &matched, p.server_items);
        output.labels = labels;
        self.phase = Phase::Done;
        Ok(ClientStep::Done(output))
    }
}

/// Each hit's label from its lane (spec §4.7): the lane at the matched value's sorted
/// position, opened with the item's pad. When the server's list repeats the value (two
/// entries with one value, about as likely as a false match) the first of its lanes that
/// opens is the item's.
fn open_lanes(
    out: &Outputs<'_>,
    hits: &[chunked::Hit],
    pads: &[u8],
    width: u8,
) -> Result<RunLabels> {
    let len = 1 + width as usize;
    let mut labels = Vec::with_capacity(hits.len());
    for h in hits {
        let pad = &pads[h.item * len..(h.item + 1) * len];
        let mut opened = Err(DecodeError::InvalidParameter { what: "label lane" }.into());
        for at in h.position..h.position + h.count {
            opened = lanes::open(out.lane_at(at), pad);
            if opened.is_ok() {
                break;
            }
        }
        labels.push(opened?);
    }
    Ok(RunLabels(labels))
}

impl Sending {
    /// The client's own values `H2(A[v(y)])` with their item indices, sorted by value, and
    /// with lanes each item's pad.
    fn own_values(&self, n: usize) -> Mine {
        let p = self.params;
        let pad_len = self.lane.map_or(0, |w| 1 + w as usize);
        let d = prf::outputs(
            &self.sid,
            &self.acc,
            n,
            p.width as usize,
            p.output_bits,
            pad_len,
        );
        let mut mine: Zeroizing<Vec<(u128, u32)>> = Zeroizing::new(
            d.values
                .iter()
                .enumerate()
                .map(|(i, &v)| (v, i as u32))
                .collect(),
        );
        mine.par_sort_unstable();
        Mine {
            sorted: mine,
            pads: d.pads,
        }
    }

    /// Columns `next_column ..` as one chunk message; records the client's lookups.
    fn chunk(&mut self) -> Vec<u8> {
        let w = self.params.width as usize;
        let cb = self.params.column_bytes();
        let c0 = self.next_column;
        let count = super::chunks::chunk_len(c0, w, self.chunk_columns);
        let mut msg = Chunk::begin(&self.prf_key, c0 as u16, count as u16, cb);
        let body = msg.len();
        msg.resize(body + count * cb, 0);
        let ab = prf::acc_bytes(self.z.len());
        let (prf, z, seeds) = (&self.prf, &self.z, &self.seeds);
        // A task per group of columns: `A_c` and `D_c` interleaved in a scratch buffer
        // (`prf::ClientColumn`), the lookups, then Δ_c = A_c ⊕ PRG(seed1_c) ⊕ D_c.
        msg[body..]
            .par_chunks_mut(prf::GROUP * cb)
            .zip(self.acc[c0 * ab..(c0 + count) * ab].par_chunks_mut(prf::GROUP * ab))
            .enumerate()
            .for_each_init(
                || Zeroizing::new(Vec::new()),
                |ad, (g, (delta, acc))| {
                    let first = c0 + g * prf::GROUP;
                    let words = cb / 8;
                    ad.clear();
                    ad.resize(delta.len() / 8, prf::Pair::default());
                    for (k, (d, p)) in delta.chunks_mut(cb).zip(ad.chunks_mut(words)).enumerate() {
                        // A_c, in the message only until it is interleaved.
                        Prg::new(&seeds[first + k][0]).fill(0, d);
                        prf::interleave(d, p);
                    }
                    let mut cols: Vec<_> = ad.chunks_mut(words).map(prf::ClientColumn).collect();
                    prf::lookup_group(prf, z, first, &mut cols, acc, ab);
                    for (k, (d, p)) in delta.chunks_mut(cb).zip(ad.chunks(words)).enumerate() {
                        Prg::new(&seeds[first + k][1]).fill(0, d);
                        prf::xor_a_d(p, d);
                    }
                },
            );
        self.next_column = c0 + count;
        wire::finish(msg)
    }
}

impl chunked::ChunkedClient for Cm20Client {
    fn handle(&mut self, response: &[u8]) -> Result<ClientStep> {
        Cm20Client::handle(self, response)
    }

    fn work_ahead(&mut self) -> Result<()> {
        Cm20Client::work_ahead(self)
    }

    fn has_work_ahead(&self) -> bool {
        Cm20Client::has_work_ahead(self)
    }

    fn awaits_outputs(&self) -> bool {
        matches!(self.phase, Phase::AwaitOutputs(_))
    }
}

#[cfg(test)]
impl Cm20Client {
    /// Test hook: the client's `A` column `c` and `D` column `c` are not kept; this returns
    /// the seeds of OT `c`.
    pub(crate) fn test_seeds(&self, c: usize) -> [Block; 2] {
        match &self.phase {
            Phase::AwaitAck(s) | Phase::AwaitOutputs(s) => s.seeds[c],
            _ => panic!("no seeds yet"),
        }
    }

    /// Test hook: the client's own values (sorted, with item indices) and lane pads, while
    /// the outputs are awaited.
    pub(crate) fn test_mine(&self) -> (Vec<(u128, u32)>, Vec<u8>) {
        match &self.phase {
            Phase::AwaitOutputs(s) => {
                let mine = s.own_values(self.items.len());
                (mine.sorted.to_vec(), mine.pads.to_vec())
            }
            _ => panic!("not awaiting the outputs"),
        }
    }
}
