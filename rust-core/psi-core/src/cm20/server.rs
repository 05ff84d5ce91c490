//! The server (PSI sender `P1`): answers the base OTs and the IKNP extension with its
//! choice bits `s`, rebuilds `C_c = PRG(seed_c) ⊕ s_c · Δ_c` column by column as chunks
//! arrive, looks each of its items up once, and sends `H2(C[v(x)])` of every item sorted and
//! Golomb-Rice coded.

use super::config::Cm20Config;
use super::messages::{self, Ack, Chunk, Hello, MAX_ITEMS, Message, Outputs, Setup};
use super::params::{self, Params};
use super::prf::{self, Prf};
use super::rot;
use super::session::session_id;
use crate::chunked::{self, ServerPhase, admit_client_items, wrong_phase};
use crate::error::{DecodeError, Result};
use crate::items::ItemSet;
use crate::lanes::LaneLabels;
use crate::ote::base_ot;
use crate::ote::prc::{Block, Prg, Row};
use rand_core::CryptoRng;
use rayon::prelude::*;
use std::sync::Arc;
use zeroize::Zeroizing;

/// Server side of CM20-PSI, a sans-IO state machine for one client session.
pub struct Cm20Server {
    items: Arc<ItemSet>,
    /// The items' `H1` digests, when the set was prepared ahead ([`Cm20Server::with_set`]);
    /// otherwise they are computed at the first chunk.
    prepared: Option<Arc<Cm20Set>>,
    config: Cm20Config,
    phase: Phase,
    /// The outputs carried label lanes (a client that asked, a server that has them).
    sent_lanes: bool,
}

/// A server's set prepared for CM20-PSI sessions: the items and their `H1` digests. `H1`
/// does not depend on the session (the client's PRF key is applied after it), so a server
/// that keeps its registry computes the digests once, when it loads the registry, and every
/// session over it starts from them ([`Cm20Server::with_set`]) instead of hashing every
/// entry again when the first chunk arrives (spec §7). 32 bytes per item, zeroized on drop.
pub struct Cm20Set {
    items: Arc<ItemSet>,
    digests: Zeroizing<Vec<[u8; 32]>>,
}

impl Cm20Set {
    /// Hashes every item of `items` on `threads`.
    pub fn new(items: impl Into<Arc<ItemSet>>, threads: crate::Threads) -> Result<Cm20Set> {
        let items = items.into();
        chunked::check_set_size("server items", items.len(), MAX_ITEMS)?;
        let digests = threads.install(|| prf::h1_digests(&items.items()))?;
        Ok(Cm20Set { items, digests })
    }

    /// Bytes of the prepared digests (the items are the set's, counted there).
    pub fn heap_bytes(&self) -> usize {
        self.digests.capacity() * std::mem::size_of::<[u8; 32]>()
    }

    /// The items.
    pub fn items(&self) -> &Arc<ItemSet> {
        &self.items
    }
}

impl std::fmt::Debug for Cm20Set {
    // Items and digests stay out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cm20Set")
            .field("items", &self.items.len())
            .finish_non_exhaustive()
    }
}

type Phase = ServerPhase<Fresh, Evaluating>;

struct Fresh {
    nonce: [u8; 32],
    sender: base_ot::Sender,
    /// The choice bits `s`, one 512-bit row per IKNP instance (enough for `MAX_WIDTH`).
    s: Zeroizing<Vec<Row>>,
}

struct Evaluating {
    sid: [u8; 32],
    params: Params,
    s: Zeroizing<Vec<Row>>,
    seeds: Zeroizing<Vec<Block>>,
    /// The PRF key and `F`'s inputs, from the first chunk on.
    prf: Option<(Zeroizing<Block>, Prf, Zeroizing<Vec<Block>>)>,
    /// Every chunk's looked-up bits so far, item by item ([`prf::transpose_chunk`]); a
    /// run of one chunk keeps its rows as they are (the hashing transposes them).
    parts: Vec<Zeroizing<Vec<u8>>>,
    next_column: usize,
    /// The labels, when this session sends lanes (the client asked, the server has them).
    lanes: Option<Arc<LaneLabels>>,
}

impl std::fmt::Debug for Cm20Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        chunked::fmt_party(f, "Cm20Server", &self.items, self.phase.name())
    }
}

impl Cm20Server {
    /// A fresh session over the server's set; draws all of the session's randomness now.
    /// The items' `H1` digests are computed when the first chunk arrives; a server that
    /// runs many sessions over one set prepares them once with [`Cm20Server::with_set`].
    pub fn new<R: CryptoRng + ?Sized>(
        items: impl Into<Arc<ItemSet>>,
        config: Cm20Config,
        rng: &mut R,
    ) -> Result<Cm20Server> {
        Self::start(items.into(), None, config, rng)
    }

    /// A fresh session over a prepared set ([`Cm20Set`]): the same messages as
    /// [`Cm20Server::new`], less work at the first chunk.
    pub fn with_set<R: CryptoRng + ?Sized>(
        set: Arc<Cm20Set>,
        config: Cm20Config,
        rng: &mut R,
    ) -> Result<Cm20Server> {
        Self::start(set.items.clone(), Some(set), config, rng)
    }

    fn start<R: CryptoRng + ?Sized>(
        items: Arc<ItemSet>,
        prepared: Option<Arc<Cm20Set>>,
        config: Cm20Config,
        rng: &mut R,
    ) -> Result<Cm20Server> {
        chunked::check_set_size("server items", items.len(), MAX_ITEMS)?;
        crate::lanes::check_count(config.lane_labels.as_deref(), items.len())?;
        let nonce = chunked::draw_nonce(rng);
        let sender = base_ot::Sender::new(rng);
        let mut s = Zeroizing::new(vec![[0u8; 64]; rot::instances(params::MAX_WIDTH as usize)]);
        for row in s.iter_mut() {
            rng.fill_bytes(row);
        }
        Ok(Cm20Server {
            items,
            prepared,
            config,
            phase: Phase::AwaitHello(Box::new(Fresh { nonce, sender, s })),
            sent_lanes: false,
        })
    }

    /// Handles one client request and returns the response to send back.
    ///
    /// A malformed request or one that does not fit the current phase is an error and
    /// leaves the session as it was.
    pub fn handle(&mut self, request: &[u8]) -> Result<Vec<u8>> {
        let msg = messages::decode(request)?;
        match (&self.phase, msg) {
            (Phase::AwaitHello(_), Message::Hello(hello)) => self.on_hello(hello),
            (Phase::AwaitChunk(_), Message::Chunk(chunk)) => self.on_chunk(chunk),
            (phase, msg) => Err(wrong_phase(phase.name(), msg.message_type())),
        }
    }

    /// True once the outputs have been sent.
    pub fn is_done(&self) -> bool {
        self.phase.is_done()
    }

    /// True once the run is over, successfully or not: no further message is accepted.
    pub fn is_finished(&self) -> bool {
        self.phase.is_finished()
    }

    /// True when this run sends (or sent) the matches' labels in label lanes (spec §4.7):
    /// the client asked and the server has them. The session then needs no label step.
    pub fn labels_carried(&self) -> bool {
        match &self.phase {
            Phase::AwaitChunk(ev) => ev.lanes.is_some(),
            Phase::AwaitHello(_) | Phase::Failed => false,
            Phase::Done => self.sent_lanes,
        }
    }

    /// The most bytes the next request can have: a hello ([`super::sizes::hello`]), then
    /// one chunk of every column not yet received ([`super::sizes::matrix`]), 0 once the
    /// run is over.
    pub fn next_request_max(&self) -> u64 {
        match &self.phase {
            Phase::AwaitHello(_) => super::sizes::hello(),
            Phase::AwaitChunk(ev) => {
                let rest = (ev.params.width as usize).saturating_sub(ev.next_column) as u64;
                super::sizes::matrix(rest, ev.params.column_bytes() as u64, 1)
            }
            Phase::Done | Phase::Failed => 0,
        }
    }

    /// The run's parameters, once the hello has been answered.
    pub fn params(&self) -> Option<Params> {
        match &self.phase {
            Phase::AwaitChunk(e) => Some(e.params),
            _ => None,
        }
    }

    fn on_hello(&mut self, hello: Hello) -> Result<Vec<u8>> {
        admit_client_items(
            hello.client_items,
            self.config.expected_client_items,
            self.config.max_client_items,
        )?;
        let n_s = self.items.len() as u32;
        let width = params::width(hello.client_items as u64, n_s as u64, hello.height).ok_or(
            DecodeError::InvalidParameter {
                what: "matrix height",
            },
        )?;
        let p = Params {
            client_items: hello.client_items,
            server_items: n_s,
            height: hello.height,
            width,
            output_bits: params::output_bits(hello.client_items as u64, n_s as u64),
        };
        let Phase::AwaitHello(fresh) = &self.phase else {
            unreachable!("checked by caller")
        };
        let keys = self
            .config
            .threads
            .install(|| fresh.sender.keys(&hello.client_nonce, &hello.base_ot))??;
        let Phase::AwaitHello(fresh) = std::mem::replace(&mut self.phase, Phase::Failed) else {
            unreachable!("checked above")
        };
        let sid = session_id(&hello.client_nonce, &fresh.nonce, &p);
        let w = width as usize;
        let mut s = fresh.s;
        s.truncate(rot::instances(w));
        let (u, seeds) = rot::receiver(&sid, &keys, &s, w);
        let lanes = self.config.lane_labels.clone().filter(|_| hello.lanes);
        let setup = Setup {
            server_nonce: fresh.nonce,
            server_items: n_s,
            width: width as u16,
            output_bits: p.output_bits as u8,
            sender_point: fresh.sender.point(),
            iknp_u: u,
            lane: lanes.as_ref().map(|l| l.width()),
        };
        self.phase = Phase::AwaitChunk(Box::new(Evaluating {
            sid,
            params: p,
            s,
            seeds,
            prf: None,
            parts: Vec::new(),
            next_column: 0,
            lanes,
        }));
        Ok(setup.encode())
    }

    fn on_chunk(&mut self, chunk: Chunk<'_>) -> Result<Vec<u8>> {
        let Phase::AwaitChunk(ev) = &mut self.phase else {
            unreachable!("checked by caller")
        };
        let p = ev.params;
        let w = p.width as usize;
        let cb = p.column_bytes();
        let c0 = chunk.first_column as usize;
        let count = chunk.column_count as usize;
        if c0 != ev.next_column {
            return Err(DecodeError::InvalidParameter {
                what: "first column",
            }
            .into());
        }
        if c0 + count > w || (c0 + count < w && !count.is_multiple_of(prf::GROUP)) {
            return Err(DecodeError::InvalidParameter {
                what: "chunk columns",
            }
            .into());
        }
        if chunk.columns.len() != count * cb {
            return Err(DecodeError::LengthMismatch {
                what: "matrix chunk",
                declared: chunk.columns.len() as u64,
                actual: (count * cb) as u64,
            }
            .into());
        }
        let items = &self.items;
        let threads = self.config.threads;
        match &ev.prf {
            Some((key, _, _)) => {
                if **key != chunk.prf_key {
                    return Err(DecodeError::InvalidParameter { what: "PRF key" }.into());
                }
            }
            None => {
                let prf = Prf::new(&chunk.prf_key, p.prf_blocks(), params::index_bits(p.height));
                let z = match &self.prepared {
                    Some(set) => threads.install(|| prf.inputs_from_digests(&set.digests))?,
                    None => threads.install(|| prf.inputs(&items.items()))?,
                };
                ev.prf = Some((Zeroizing::new(chunk.prf_key), prf, z));
            }
        }
        let Some((_, prf, z)) = &ev.prf else {
            unreachable!("set above")
        };
        let ab = prf::acc_bytes(items.len());
        let only = c0 == 0 && count == w;
        let part = threads.install(|| {
            // C_c = PRG(seed_c) ⊕ s_c · Δ_c, constant time in s_c.
            let mut c = Zeroizing::new(vec![0u8; count * cb]);
            c.par_chunks_mut(cb)
                .zip(chunk.columns.par_chunks(cb))
                .enumerate()
                .for_each(|(k, (col, delta))| {
                    Prg::new(&ev.seeds[c0 + k]).fill(0, col);
                    let mask = 0u8.wrapping_sub(rot::choice_bit(&ev.s, c0 + k));
                    for (x, d) in col.iter_mut().zip(delta) {
                        *x ^= d & mask;
                    }
                });
            let mut cols: Vec<&[u8]> = c.chunks(cb).collect();
            // This chunk's lookups, transposed to one row per item while the client builds
            // its next chunk, so that the last chunk leaves only the hashing. The only
            // chunk of a run is transposed with the hashing, a block of items at a time,
            // so the rows are not held twice.
            let rows = prf::acc_rows(count);
            let mut acc = Zeroizing::new(vec![0u8; rows * ab]);
            prf::lookup(prf, z, c0, &mut cols, &mut acc[..count * ab], ab);
            if only {
                acc
            } else {
                prf::transpose_chunk(&acc, rows, items.len())
            }
        })?;
        ev.parts.push(part);
        ev.next_column = c0 + count;
        if ev.next_column < w {
            return Ok(Ack {
                next_column: ev.next_column as u16,
            }
            .encode());
        }
        let Phase::AwaitChunk(ev) = std::mem::replace(&mut self.phase, Phase::Done) else {
            unreachable!("checked above")
        };
        let n_s = self.items.len();
        self.sent_lanes = ev.lanes.is_some();
        let pad_len = ev.lanes.as_ref().map_or(0, |l| l.lane_len());
        threads.install(|| {
            let mut d = if only {
                prf::outputs(&ev.sid, &ev.parts[0], n_s, w, p.output_bits, pad_len)
            } else {
                prf::hash_parts(&ev.sid, &ev.parts, n_s, w, p.output_bits, pad_len)
            };
            let l2 = p.output_bits as u8;
            match &ev.lanes {
                None => Outputs::encode(crate::Protocol::Cm20, l2, &mut d.values),
                Some(lanes) => {
                    // Each item's lane sealed in item order (a lane is as public as the
                    // value it rides with), then sorted with the values.
                    let mut sealed = Vec::with_capacity(n_s * pad_len);
                    for (i, pad) in d.pads.chunks_exact(pad_len).enumerate() {
                        lanes.seal_into(i, pad, &mut sealed);
                    }
                    let mut rows: Zeroizing<Vec<(u128, u32)>> = Zeroizing::new(
                        d.values
                            .iter()
                            .enumerate()
                            .map(|(i, &v)| (v, i as u32))
                            .collect(),
                    );
                    Outputs::encode_labelled(
                        crate::Protocol::Cm20,
                        l2,
                        &mut rows,
                        lanes.width(),
                        &sealed,
                    )
                }
            }
        })
    }
}

impl chunked::ChunkedServer for Cm20Server {
    fn protocol(&self) -> crate::Protocol {
        crate::Protocol::Cm20
    }

    fn handle(&mut self, request: &[u8]) -> Result<Vec<u8>> {
        Cm20Server::handle(self, request)
    }

    fn is_done(&self) -> bool {
        Cm20Server::is_done(self)
    }

    fn is_finished(&self) -> bool {
        Cm20Server::is_finished(self)
    }

    fn labels_carried(&self) -> bool {
        Cm20Server::labels_carried(self)
    }

    fn next_request_max(&self) -> u64 {
        Cm20Server::next_request_max(self)
    }
}

#[cfg(test)]
impl Cm20Server {
    /// Test hook: the choice rows `s` and the server's seeds.
    pub(crate) fn test_choices(&self) -> (Vec<Row>, Vec<Block>) {
        match &self.phase {
            Phase::AwaitChunk(e) => (e.s.to_vec(), e.seeds.to_vec()),
            _ => panic!("no seeds yet"),
        }
    }
}
