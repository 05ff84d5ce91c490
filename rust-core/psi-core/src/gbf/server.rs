//! The server (PSZ14's `P1`, the random OTs' sender): the base-OT receiver with choice
//! bits `Δ`, it rebuilds `seed¹` of every OT from the client's IKNP matrices as the
//! chunks arrive, then sends the value `V(y)` of each of its items, sorted and Golomb-Rice
//! coded.

use super::bloom;
use super::config::GbfConfig;
use super::messages::{self, Ack, Chunk, Hello, INSTANCE_LEN, MAX_ITEMS, Message, Outputs, Setup};
use super::params::{INSTANCE_BITS, Params};
use super::session_id;
use crate::chunked::{self, ServerPhase, admit_client_items, wrong_phase};
use crate::error::{DecodeError, Result};
use crate::items::ItemSet;
use crate::ote::base_ot::{self, BASE_OTS};
use crate::ote::iknp;
use crate::ote::prc::Block;
use rand_core::CryptoRng;
use rayon::prelude::*;
use std::sync::Arc;
use zeroize::Zeroizing;

/// Server side of GBF-PSI, a sans-IO state machine for one client session.
pub struct GbfServer {
    items: Arc<ItemSet>,
    /// The items' digests, when the set was prepared ahead ([`GbfServer::with_set`]);
    /// otherwise they are computed after the last chunk.
    prepared: Option<Arc<GbfSet>>,
    config: GbfConfig,
    phase: Phase,
}

/// A server's set prepared for GBF-PSI sessions: the items and their digests (spec §3.3).
/// The digest takes no session input, so a server that keeps its registry computes it
/// once, when it loads the registry, and every session starts from it
/// ([`GbfServer::with_set`]) instead of hashing every entry after the client's last
/// chunk. 16 bytes per item, zeroized on drop.
pub struct GbfSet {
    items: Arc<ItemSet>,
    digests: Zeroizing<Vec<Block>>,
}

impl GbfSet {
    /// Hashes every item of `items` on `threads`.
    pub fn new(items: impl Into<Arc<ItemSet>>, threads: crate::Threads) -> Result<GbfSet> {
        let items = items.into();
        chunked::check_set_size("server items", items.len(), MAX_ITEMS)?;
        let digests = threads.install(|| bloom::digests(&items.items()))?;
        Ok(GbfSet { items, digests })
    }

    /// Bytes of the prepared digests (the items are the set's, counted there).
    pub fn heap_bytes(&self) -> usize {
        self.digests.capacity() * std::mem::size_of::<Block>()
    }

    /// The items.
    pub fn items(&self) -> &Arc<ItemSet> {
        &self.items
    }
}

impl std::fmt::Debug for GbfSet {
    // Items and digests stay out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GbfSet")
            .field("items", &self.items.len())
            .finish_non_exhaustive()
    }
}

type Phase = ServerPhase<Fresh, Evaluating>;

/// Drawn when the session is created; the base-OT messages are computed at the hello.
struct Fresh {
    nonce: [u8; 32],
    delta: Zeroizing<Vec<u8>>,
    pending: base_ot::PendingReceiver,
}

struct Evaluating {
    sid: [u8; 32],
    params: Params,
    delta: Zeroizing<Vec<u8>>,
    /// `K_{i,Δ_i}` of each base OT.
    keys: Zeroizing<Vec<Block>>,
    /// `seed¹` of every OT received so far.
    seeds: Zeroizing<Vec<Block>>,
    next_instance: usize,
}

impl std::fmt::Debug for GbfServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        chunked::fmt_party(f, "GbfServer", &self.items, self.phase.name())
    }
}

impl GbfServer {
    /// A fresh session over the server's set; draws all of the session's randomness now.
    /// The items' digests are computed after the last chunk; a server that runs many
    /// sessions over one set prepares them once with [`GbfServer::with_set`].
    pub fn new<R: CryptoRng + ?Sized>(
        items: impl Into<Arc<ItemSet>>,
        config: GbfConfig,
        rng: &mut R,
    ) -> Result<GbfServer> {
        Self::start(items.into(), None, config, rng)
    }

    /// A fresh session over a prepared set ([`GbfSet`]): the same messages as
    /// [`GbfServer::new`], less work after the last chunk.
    pub fn with_set<R: CryptoRng + ?Sized>(
        set: Arc<GbfSet>,
        config: GbfConfig,
        rng: &mut R,
    ) -> Result<GbfServer> {
        Self::start(set.items.clone(), Some(set), config, rng)
    }

    fn start<R: CryptoRng + ?Sized>(
        items: Arc<ItemSet>,
        prepared: Option<Arc<GbfSet>>,
        config: GbfConfig,
        rng: &mut R,
    ) -> Result<GbfServer> {
        chunked::check_set_size("server items", items.len(), MAX_ITEMS)?;
        let nonce = chunked::draw_nonce(rng);
        let delta = base_ot::draw_choices(rng);
        let pending = base_ot::Receiver::draw(&delta, &nonce, rng);
        Ok(GbfServer {
            items,
            prepared,
            config,
            phase: Phase::AwaitHello(Box::new(Fresh {
                nonce,
                delta,
                pending,
            })),
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

    /// The most bytes the next request can have ([`chunked::ChunkedServer::next_request_max`]):
    /// the hello's size before the hello, the rest of the instances in one chunk while
    /// chunks arrive, 0 once the run is over.
    pub fn next_request_max(&self) -> u64 {
        match &self.phase {
            Phase::AwaitHello(_) => super::sizes::hello(),
            Phase::AwaitChunk(ev) => {
                let rest = (ev.params.instances() as usize).saturating_sub(ev.next_instance);
                super::sizes::matrices(rest as u64, 1)
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
        let p = Params::new(hello.client_items, n_s).ok_or(DecodeError::InvalidParameter {
            what: "client items",
        })?;
        let threads = self.config.threads;
        let Phase::AwaitHello(fresh) = &mut self.phase else {
            unreachable!("checked by caller")
        };
        // The sender point is checked before any state changes: a bad point fails the
        // request and leaves the session awaiting a hello.
        base_ot::check_sender_point(&hello.sender_point)?;
        if fresh.pending.computed() < BASE_OTS {
            fresh.pending.compute(BASE_OTS, threads)?;
        }
        let Phase::AwaitHello(fresh) = std::mem::replace(&mut self.phase, Phase::Failed) else {
            unreachable!("checked above")
        };
        let (receiver, base_ot) = fresh.pending.finish();
        let keys = threads.install(|| receiver.finish(&fresh.nonce, &hello.sender_point))??;
        let sid = session_id(&hello.client_nonce, &fresh.nonce, &p);
        let setup = Setup {
            server_nonce: fresh.nonce,
            server_items: n_s,
            hashes: p.hashes as u8,
            filter_bits: p.filter_bits,
            output_bits: p.output_bits as u8,
            base_ot,
        };
        self.phase = Phase::AwaitChunk(Box::new(Evaluating {
            sid,
            params: p,
            delta: fresh.delta,
            keys,
            seeds: Zeroizing::new(vec![[0u8; 16]; p.filter_bits as usize]),
            next_instance: 0,
        }));
        Ok(setup.encode())
    }

    fn on_chunk(&mut self, chunk: Chunk<'_>) -> Result<Vec<u8>> {
        let Phase::AwaitChunk(ev) = &mut self.phase else {
            unreachable!("checked by caller")
        };
        let p = ev.params;
        let total = p.instances() as usize;
        let r0 = chunk.first_instance as usize;
        let count = chunk.instance_count as usize;
        chunked::check_chunk_range(r0, count, ev.next_instance, total)?;
        let threads = self.config.threads;
        let per = INSTANCE_BITS as usize;
        let (sid, keys, delta) = (&ev.sid, &ev.keys, &ev.delta);
        threads.install(|| {
            chunk
                .matrices
                .par_chunks(INSTANCE_LEN)
                .zip(ev.seeds[r0 * per..(r0 + count) * per].par_chunks_mut(per))
                .enumerate()
                .for_each(|(k, (u, seeds))| {
                    let ones = iknp::sender_ones_at(sid, keys, delta, u, (r0 + k) as u32);
                    seeds.copy_from_slice(&ones);
                });
        })?;
        ev.next_instance = r0 + count;
        if ev.next_instance < total {
            return Ok(Ack {
                next_instance: ev.next_instance as u32,
            }
            .encode());
        }
        let Phase::AwaitChunk(ev) = std::mem::replace(&mut self.phase, Phase::Done) else {
            unreachable!("checked above")
        };
        let (items, prepared) = (&self.items, &self.prepared);
        threads.install(|| {
            let computed;
            let digests: &[Block] = match prepared {
                Some(set) => &set.digests,
                None => {
                    computed = bloom::digests(&items.items());
                    &computed
                }
            };
            let mut values: Zeroizing<Vec<u128>> = Zeroizing::new(
                digests
                    .par_iter()
                    .map_init(Vec::new, |ps, d| {
                        bloom::positions(d, p.hashes, p.filter_bits, ps);
                        bloom::value(&ev.seeds, ps, p.output_bits)
                    })
                    .collect(),
            );
            Outputs::encode(crate::Protocol::Gbf, p.output_bits as u8, &mut values)
        })
    }
}

impl chunked::ChunkedServer for GbfServer {
    fn protocol(&self) -> crate::Protocol {
        crate::Protocol::Gbf
    }

    fn handle(&mut self, request: &[u8]) -> Result<Vec<u8>> {
        GbfServer::handle(self, request)
    }

    fn is_done(&self) -> bool {
        GbfServer::is_done(self)
    }

    fn is_finished(&self) -> bool {
        GbfServer::is_finished(self)
    }

    fn labels_carried(&self) -> bool {
        false
    }

    fn next_request_max(&self) -> u64 {
        GbfServer::next_request_max(self)
    }
}
