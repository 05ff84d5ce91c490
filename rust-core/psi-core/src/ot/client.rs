//! The client (OPRF receiver): Cuckoo-hashes its items, runs the receiver side of the
//! KKRT16 OT extension, and learns which of its items the server holds.

use super::config::OtConfig;
use super::cuckoo::{self, EMPTY, ItemDigest};
use super::matrix::{BLOCK_ROWS, matrix_rows};
use super::messages::{
    self, Chunk, Hello, MAX_BINS, MAX_ITEMS, Message, Outputs, Setup, max_bins_for,
};
use super::session::{output_len, session_id};
use crate::chunked::{self, ClientPhase, ClientStep, wrong_phase};
use crate::error::{DecodeError, Error, Result};
use crate::items::ItemSet;
use crate::lanes::{self, PAD_AT};
use crate::ote::base_ot::{self, BASE_OTS};
use crate::ote::iknp;
use crate::ote::prc::{Block, CODE_BYTES, PRC_BATCH, Prc, Prg, Row, out_hash, out_prefix, pack};
use crate::output::{MatchOutput as OtOutput, RunLabels};
use crate::wire;
use rand_core::CryptoRng;
use rayon::prelude::*;
use std::hash::Hasher;
use zeroize::{Zeroize, Zeroizing};

/// Client side of OT-PSI, a sans-IO state machine.
///
/// ```text
/// let (mut client, mut request) = OtClient::start(items, config, &mut rng)?;
/// loop {
///     let response = transport(request);          // one HTTP round trip
///     match client.handle(&response)? {
///         ClientStep::Send(next) => request = next,
///         ClientStep::Done(output) => break output,
///     }
/// }
/// ```
pub struct OtClient {
    items: ItemSet,
    config: OtConfig,
    bins: usize,
    phase: Phase,
}

/// `Starting` while the hello is produced in parts ([`OtClient::start_in_parts`]).
type Phase = ClientPhase<Starting, AwaitSetup, Extending>;

/// Base-OT messages per part of a hello produced in parts: 16 (1 KiB), so the server's
/// work on one part overlaps the client's on the next.
const HELLO_PART_OTS: usize = 16;

struct Starting {
    nonce: [u8; 32],
    bins: u32,
    pending: base_ot::PendingReceiver,
    delta: Zeroizing<Vec<u8>>,
    dummy_key: Zeroizing<Block>,
}

struct AwaitSetup {
    nonce: [u8; 32],
    bins: u32,
    receiver: base_ot::Receiver,
    /// Base-OT keys computed from a setup's head ([`OtClient::handle_setup_head`]), with
    /// the sender point they were computed for.
    early: Option<([u8; 32], Zeroizing<Vec<Block>>)>,
    delta: Zeroizing<Vec<u8>>,
    dummy_key: Zeroizing<Block>,
}

/// State while the OT-extension matrix is being sent. Everything derived from the
/// client's items (digests, placement, OPRF values) is zeroized on drop.
struct Extending {
    sid: [u8; 32],
    out_len: usize,
    server_items: u32,
    bins: usize,
    chunk_rows: usize,
    /// Rows built so far.
    next_row: usize,
    /// Rows handed to the driver so far: the row the pending ack must name.
    sent_row: usize,
    /// A chunk built ahead ([`OtClient::work_ahead`]), not yet handed out: rows
    /// `sent_row .. next_row`.
    ahead: Option<Vec<u8>>,
    /// The lookup structures over the client's values, once built (ahead of the outputs,
    /// or when they arrive).
    lookup: Option<Lookup>,
    prc: Prc,
    /// PRGs of the client's two seeds for each of the 512 OTs.
    prg0: Vec<Prg>,
    prg1: Vec<Prg>,
    /// Codewords for empty bins.
    dummy: Prg,
    table: Zeroizing<Vec<u32>>,
    /// Zeroized by `Drop` (`ItemDigest` is `Copy`, so it cannot be `ZeroizeOnDrop`).
    digests: Vec<ItemDigest>,
    /// The client's OPRF value (first `out_len` bytes, packed) per item.
    values: Zeroizing<Vec<u128>>,
    /// The hash function that placed each item.
    hash_index: Zeroizing<Vec<u8>>,
    /// `Λ` when the server grants label lanes.
    lane: Option<u8>,
    /// With lanes: bytes `16..32` of each item's OPRF digest, the pad of its lane.
    pads: Zeroizing<Vec<[u8; 16]>>,
}

/// What one block of rows gives the client: `(table entry, value, lane pad)` for each
/// item placed in it (the pad is unused without lanes).
type BlockValues = Zeroizing<Vec<(u32, u128, [u8; 16])>>;

impl Drop for Extending {
    fn drop(&mut self) {
        for d in &mut self.digests {
            d.block.zeroize();
            d.bins.zeroize();
        }
    }
}

impl std::fmt::Debug for OtClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        chunked::fmt_party(f, "OtClient", &self.items, self.phase.name())
    }
}

impl OtClient {
    /// Starts a run: draws the client's randomness and returns the first request (hello).
    pub fn start<R: CryptoRng + ?Sized>(
        items: ItemSet,
        config: OtConfig,
        rng: &mut R,
    ) -> Result<(OtClient, Vec<u8>)> {
        let (mut client, mut hello) = Self::start_parts(items, config, rng)?;
        while let Some(part) = client.next_hello_part()? {
            hello.extend_from_slice(&part);
        }
        Ok((client, hello))
    }

    /// Draws the randomness and returns the client (phase `Starting`) and the hello's
    /// fixed part.
    fn start_parts<R: CryptoRng + ?Sized>(
        items: ItemSet,
        config: OtConfig,
        rng: &mut R,
    ) -> Result<(OtClient, Vec<u8>)> {
        let n = items.len();
        chunked::check_set_size("client items", n, MAX_ITEMS)?;
        let bins = config
            .table_size_override
            .unwrap_or_else(|| cuckoo::table_size(n));
        let max = max_bins_for(n as u32) as usize;
        if bins > max {
            return Err(Error::InputTooLarge {
                what: "table size",
                value: bins as u64,
                limit: max as u64,
            });
        }
        if bins < n.max(3) {
            return Err(Error::CuckooFailed {
                items: n as u64,
                bins: bins as u64,
            });
        }
        debug_assert!(bins <= MAX_BINS as usize);
        let nonce = chunked::draw_nonce(rng);
        let delta = base_ot::draw_choices(rng);
        let mut dummy_key = Zeroizing::new([0u8; 16]);
        rng.fill_bytes(dummy_key.as_mut());
        let pending = base_ot::Receiver::draw(&delta, &nonce, rng);
        // The hello's fixed fields; its tail, the base-OT messages, comes in later parts.
        let hello = Hello {
            client_nonce: nonce,
            client_items: n as u32,
            bins: bins as u32,
            base_ot: vec![[0; base_ot::RECEIVER_MSG_LEN]; BASE_OTS],
            lanes: config.ask_label_lanes,
        }
        .encode();
        let first = hello[..messages::HELLO_OTS_AT].to_vec();
        let client = OtClient {
            items,
            config,
            bins,
            phase: Phase::Starting(Box::new(Starting {
                nonce,
                bins: bins as u32,
                pending,
                delta,
                dummy_key,
            })),
        };
        Ok((client, first))
    }

    /// Starts a run whose hello is produced in parts, for a transport that can send a
    /// request body while it is being computed (the server can then work on the first base
    /// OTs while the client computes the next; see [`super::OtServer::handle_hello_part`]).
    ///
    /// Returns the first part (the frame header and the fixed fields); call
    /// [`OtClient::next_hello_part`] until it returns `None`. The parts, concatenated, are
    /// exactly the hello [`OtClient::start`] returns for the same randomness, and their
    /// total length is [`super::sizes::hello`]. The run then continues with
    /// [`OtClient::handle`] on the server's setup.
    pub fn start_in_parts<R: CryptoRng + ?Sized>(
        items: ItemSet,
        config: OtConfig,
        rng: &mut R,
    ) -> Result<(OtClient, Vec<u8>)> {
        Self::start_parts(items, config, rng)
    }

    /// The next part of a hello started with [`OtClient::start_in_parts`] (the next base-OT
    /// messages), or `None` once the hello is complete.
    pub fn next_hello_part(&mut self) -> Result<Option<Vec<u8>>> {
        let Phase::Starting(st) = &mut self.phase else {
            return Ok(None);
        };
        if st.pending.computed() < BASE_OTS {
            let part = st.pending.compute(HELLO_PART_OTS, self.config.threads)?;
            return Ok(Some(part.concat()));
        }
        let Phase::Starting(st) = std::mem::replace(&mut self.phase, Phase::Failed) else {
            unreachable!("checked above")
        };
        let Starting {
            nonce,
            bins,
            pending,
            delta,
            dummy_key,
        } = *st;
        let (receiver, _) = pending.finish();
        self.phase = Phase::AwaitSetup(Box::new(AwaitSetup {
            nonce,
            bins,
            receiver,
            early: None,
            delta,
            dummy_key,
        }));
        Ok(None)
    }

    /// Handles a server response; returns the next request or the result.
    ///
    /// A malformed response or one that does not fit the current phase is an error and
    /// leaves the client as it was; an error after that (a failed Cuckoo placement)
    /// ends the run.
    pub fn handle(&mut self, response: &[u8]) -> Result<ClientStep> {
        let msg = messages::decode(response)?;
        match (&mut self.phase, msg) {
            (Phase::AwaitSetup(_), Message::Setup(setup)) => self.on_setup(setup),
            (Phase::AwaitAck(ext), Message::Ack(ack)) => {
                if ack.next_row as usize != ext.sent_row {
                    return Err(DecodeError::InvalidParameter { what: "next row" }.into());
                }
                self.next_chunk()
            }
            (Phase::AwaitOutputs(ext), Message::Outputs(out)) => {
                if out.lane != ext.lane {
                    return Err(DecodeError::InvalidParameter {
                        what: "label lane width",
                    }
                    .into());
                }
                if out.out_len as usize != ext.out_len {
                    return Err(DecodeError::InvalidParameter {
                        what: "output length",
                    }
                    .into());
                }
                if out.server_items != ext.server_items {
                    return Err(Error::CountMismatch {
                        expected: ext.server_items as u64,
                        found: out.server_items as u64,
                    });
                }
                self.finish(out)
            }
            (phase, msg) => Err(wrong_phase(phase.name(), msg.message_type())),
        }
    }

    /// For a transport that streams: the first [`messages::SETUP_HEAD_LEN`] bytes of the
    /// server's setup (see [`super::OtServer::setup_head`]), which end with the server's
    /// base-OT point. The client computes its base-OT keys from it now, while the rest of
    /// the setup is in flight; [`OtClient::handle`] on the whole setup then uses them if
    /// the setup carries the same point (and computes them itself otherwise). Every check
    /// of the setup is made by `handle`; a point that is not valid here is left for `handle`
    /// to refuse. Does nothing outside the phase that awaits the setup.
    pub fn handle_setup_head(&mut self, head: &[u8]) -> Result<()> {
        let threads = self.config.threads;
        let Phase::AwaitSetup(st) = &mut self.phase else {
            return Ok(());
        };
        let Some(point) = head.get(messages::SETUP_HEAD_LEN - 32..messages::SETUP_HEAD_LEN) else {
            return Ok(());
        };
        let point: [u8; 32] = point.try_into().expect("32 bytes");
        if let Ok(keys) = threads.install(|| st.receiver.finish(&st.nonce, &point))? {
            st.early = Some((point, keys));
        }
        Ok(())
    }

    /// The Cuckoo table size this run uses (the hello's `bins`).
    pub fn bins(&self) -> usize {
        self.bins
    }

    /// True once [`ClientStep::Done`] has been returned.
    pub fn is_done(&self) -> bool {
        self.phase.is_done()
    }

    fn on_setup(&mut self, setup: Setup) -> Result<ClientStep> {
        let Phase::AwaitSetup(st) = &self.phase else {
            unreachable!("checked by caller")
        };
        let n_c = self.items.len();
        // Lanes granted that were not asked for are refused.
        lanes::check_granted(self.config.ask_label_lanes, setup.lane)?;
        let out_len = output_len(n_c, setup.server_items as usize);
        if setup.out_len as usize != out_len {
            return Err(DecodeError::InvalidParameter {
                what: "output length",
            }
            .into());
        }
        let base_keys = match &st.early {
            Some((point, keys)) if *point == setup.sender_point => keys.clone(),
            _ => self
                .config
                .threads
                .install(|| st.receiver.finish(&st.nonce, &setup.sender_point))??,
        };
        // From here on the run either proceeds or fails for good.
        let Phase::AwaitSetup(st) = std::mem::replace(&mut self.phase, Phase::Failed) else {
            unreachable!("checked above")
        };
        let sid = session_id(
            &st.nonce,
            &setup.server_nonce,
            n_c as u32,
            setup.server_items,
            st.bins,
            setup.out_len,
        );
        let seeds = iknp::sender(&sid, &base_keys, &st.delta, &setup.iknp_u);
        let bins = st.bins as usize;
        let items = &self.items;
        let (digests, table) = self.config.threads.install(|| {
            let digests = cuckoo::digest_all(&items.items(), &sid, st.bins);
            let seed = u64::from_le_bytes(sid[..8].try_into().expect("8 bytes"));
            cuckoo::place(&digests, bins, seed).map(|t| (digests, t))
        })??;
        let ext = Extending {
            sid,
            out_len,
            server_items: setup.server_items,
            bins,
            chunk_rows: self.config.effective_chunk_rows(),
            next_row: 0,
            sent_row: 0,
            ahead: None,
            lookup: None,
            prc: Prc::new(&sid),
            prg0: seeds.iter().map(|s| Prg::new(&s[0])).collect(),
            prg1: seeds.iter().map(|s| Prg::new(&s[1])).collect(),
            dummy: Prg::new(&st.dummy_key),
            table: Zeroizing::new(table),
            values: Zeroizing::new(vec![0; digests.len()]),
            hash_index: Zeroizing::new(vec![0; digests.len()]),
            lane: setup.lane,
            pads: Zeroizing::new(if setup.lane.is_some() {
                vec![[0; 16]; digests.len()]
            } else {
                Vec::new()
            }),
            digests,
        };
        self.phase = Phase::AwaitAck(Box::new(ext));
        self.next_chunk()
    }

    /// Hands out the next matrix chunk, built now or ahead (the phase is `AwaitAck` on
    /// entry).
    fn next_chunk(&mut self) -> Result<ClientStep> {
        let Phase::AwaitAck(ext) = &mut self.phase else {
            unreachable!("checked by caller")
        };
        let msg = match ext.ahead.take() {
            Some(msg) => msg,
            None => self.config.threads.install(|| ext.chunk())?,
        };
        ext.sent_row = ext.next_row;
        if ext.sent_row == ext.bins {
            let Phase::AwaitAck(ext) = std::mem::replace(&mut self.phase, Phase::Failed) else {
                unreachable!()
            };
            self.phase = Phase::AwaitOutputs(ext);
        }
        Ok(ClientStep::Send(msg))
    }

    /// Does now the work of the next [`OtClient::handle`] that does not depend on the
    /// response in flight: while a chunk's ack is awaited, builds the next chunk; while
    /// the outputs are awaited, builds the lookup structures over the client's own
    /// values. A driver calls it after sending a request and before reading the
    /// response, so that this work overlaps the network and the server's work; `handle`
    /// then uses what was prepared. The requests are byte for byte the same either way.
    /// Optional; a second call before `handle` does nothing.
    pub fn work_ahead(&mut self) -> Result<()> {
        let threads = self.config.threads;
        if !self.has_work_ahead() {
            return Ok(());
        }
        match &mut self.phase {
            Phase::AwaitAck(ext) => {
                ext.ahead = Some(threads.install(|| ext.chunk())?);
            }
            Phase::AwaitOutputs(ext) => {
                ext.lookup = Some(threads.install(|| ext.lookup())?);
            }
            _ => {}
        }
        Ok(())
    }

    /// Whether [`OtClient::work_ahead`] would do anything now: a chunk is left to build, or
    /// the matching side to prepare, and it is not done yet.
    pub fn has_work_ahead(&self) -> bool {
        match &self.phase {
            Phase::AwaitAck(ext) => ext.ahead.is_none() && ext.next_row < ext.bins,
            Phase::AwaitOutputs(ext) => ext.lookup.is_none(),
            _ => false,
        }
    }

    fn finish(&mut self, out: Outputs<'_>) -> Result<ClientStep> {
        let threads = self.config.threads;
        let Phase::AwaitOutputs(ext) = &mut self.phase else {
            unreachable!("checked by caller")
        };
        let lookup = match ext.lookup.take() {
            Some(lookup) => lookup,
            None => threads.install(|| ext.lookup())?,
        };
        let hits = threads.install(|| ext.matches(&lookup, &out))?;
        let matched: Zeroizing<Vec<usize>> = Zeroizing::new(hits.iter().map(|h| h.0).collect());
        let labels = match out.lane {
            None => None,
            Some(width) => {
                let (len, row) = (ext.out_len, out.row_len());
                let mut labels = Vec::with_capacity(hits.len());
                for &(x, at) in hits.iter() {
                    let lane = &out.lists[at + len..at + row];
                    labels.push(lanes::open(lane, &ext.pads[x][..1 + width as usize])?);
                }
                Some(RunLabels(labels))
            }
        };
        let mut output = OtOutput::new(&self.items, &matched, ext.server_items);
        output.labels = labels;
        self.phase = Phase::Done;
        Ok(ClientStep::Done(output))
    }
}

impl chunked::ChunkedClient for OtClient {
    fn handle(&mut self, response: &[u8]) -> Result<ClientStep> {
        OtClient::handle(self, response)
    }

    fn work_ahead(&mut self) -> Result<()> {
        OtClient::work_ahead(self)
    }

    fn has_work_ahead(&self) -> bool {
        OtClient::has_work_ahead(self)
    }

    fn awaits_outputs(&self) -> bool {
        matches!(self.phase, Phase::AwaitOutputs(_))
    }
}

#[cfg(test)]
impl OtClient {
    /// Test hook: `(t0_j, C_j)` for every bin, where `C_j` is the codeword the client
    /// encodes in row `j` (of its item, or the random one of an empty bin).
    pub(crate) fn test_rows(&self) -> Vec<(Row, Row)> {
        let ext = match &self.phase {
            Phase::AwaitAck(e) | Phase::AwaitOutputs(e) => e,
            _ => panic!("no matrix yet"),
        };
        let rows0 = matrix_rows(&ext.prg0, 0, ext.bins);
        (0..ext.bins)
            .map(|j| {
                let t0: Row = rows0[j * CODE_BYTES..(j + 1) * CODE_BYTES]
                    .try_into()
                    .unwrap();
                let mut code = [[0u8; CODE_BYTES]];
                let e = ext.table[j];
                if e == EMPTY {
                    ext.dummy.fill(4 * j as u64, &mut code[0]);
                } else {
                    let x = ext.digests[(e >> 2) as usize].input((e & 3) as usize);
                    ext.prc.encode(&[x], &mut code);
                }
                (t0, code[0])
            })
            .collect()
    }

    /// Test hook: the PRC input of the client's `x`-th distinct item under hash `h`.
    pub(crate) fn test_input(&self, x: usize, h: usize) -> (Block, usize) {
        let ext = match &self.phase {
            Phase::AwaitAck(e) | Phase::AwaitOutputs(e) => e,
            _ => panic!("no matrix yet"),
        };
        let d = &ext.digests[x];
        (d.input(h), d.bins[h] as usize)
    }

    /// Test hook: the session's pseudorandom code.
    pub(crate) fn test_code(&self, x: &Block) -> Row {
        let ext = match &self.phase {
            Phase::AwaitAck(e) | Phase::AwaitOutputs(e) => e,
            _ => panic!("no matrix yet"),
        };
        let mut code = [[0u8; CODE_BYTES]];
        ext.prc.encode(&[*x], &mut code);
        code[0]
    }
}

impl Extending {
    /// Rows `next_row .. next_row + chunk_rows` of `U = T0 ⊕ T1 ⊕ C` as a chunk message;
    /// records the client's own OPRF values for the items in those bins.
    ///
    /// Works in blocks of [`BLOCK_ROWS`] rows (PRG, transpose, codewords, hashing) so each
    /// block's buffers stay in the core's cache; blocks run in parallel.
    fn chunk(&mut self) -> Vec<u8> {
        let a = self.next_row;
        let b = (a + self.chunk_rows).min(self.bins);
        let r = b - a;
        let mut msg = Chunk::begin(a as u32, r as u32);
        let body_start = msg.len();
        msg.resize(body_start + r * CODE_BYTES, 0);
        let prefix = out_prefix(&self.sid);
        let this = &*self;
        // One zeroized list per block (an indexed collect: no intermediate copies).
        let blocks: Vec<BlockValues> = msg[body_start..]
            .par_chunks_mut(BLOCK_ROWS * CODE_BYTES)
            .enumerate()
            .map(|(bi, out)| this.block(a + bi * BLOCK_ROWS, out, &prefix))
            .collect();
        let lanes = self.lane.is_some();
        for &(e, v, pad) in blocks.iter().flat_map(|b| b.iter()) {
            self.values[(e >> 2) as usize] = v;
            self.hash_index[(e >> 2) as usize] = (e & 3) as u8;
            if lanes {
                self.pads[(e >> 2) as usize] = pad;
            }
        }
        self.next_row = b;
        wire::finish(msg)
    }

    /// One block of rows starting at `j0` (a multiple of 128): writes the rows of `U`
    /// into `out` and returns `(item, value)` for the items in these bins.
    fn block(&self, j0: usize, out: &mut [u8], prefix: &sha2::Sha256) -> BlockValues {
        let n = out.len() / CODE_BYTES;
        let rows0 = matrix_rows(&self.prg0, j0, n);
        let rows1 = matrix_rows(&self.prg1, j0, n);
        // At most one value per row: reserved up front so the list never reallocates.
        let mut vals = Zeroizing::new(Vec::with_capacity(n));
        let mut inputs = [[0u8; 16]; PRC_BATCH];
        let mut codes = [[0u8; CODE_BYTES]; PRC_BATCH];
        for start in (0..n).step_by(PRC_BATCH) {
            let m = PRC_BATCH.min(n - start);
            for (input, &e) in inputs
                .iter_mut()
                .zip(&self.table[j0 + start..j0 + start + m])
            {
                *input = if e != EMPTY {
                    self.digests[(e >> 2) as usize].input((e & 3) as usize)
                } else {
                    [0; 16]
                };
            }
            self.prc.encode(&inputs[..m], &mut codes[..m]);
            for (k, code) in codes[..m].iter_mut().enumerate() {
                let row = start + k;
                let j = j0 + row;
                let e = self.table[j];
                if e == EMPTY {
                    // A random codeword: the bin holds no item.
                    self.dummy.fill(4 * j as u64, code);
                }
                let t0: &Row = rows0[row * CODE_BYTES..(row + 1) * CODE_BYTES]
                    .try_into()
                    .expect("row");
                let t1: &Row = rows1[row * CODE_BYTES..(row + 1) * CODE_BYTES]
                    .try_into()
                    .expect("row");
                let o: &mut Row = (&mut out[row * CODE_BYTES..(row + 1) * CODE_BYTES])
                    .try_into()
                    .expect("row");
                for i in 0..CODE_BYTES {
                    o[i] = t0[i] ^ t1[i] ^ code[i];
                }
                if e != EMPTY {
                    let mut f = out_hash(prefix, j as u32, t0);
                    let pad: [u8; 16] = f[PAD_AT..].try_into().expect("16 bytes");
                    vals.push((e, pack(&f, self.out_len), pad));
                    f.zeroize();
                }
            }
        }
        codes.zeroize();
        inputs.zeroize();
        vals
    }

    /// Indices (into the de-duplicated set) of the items whose value the server sent,
    /// in increasing order.
    ///
    /// Per hash function: an open-addressing table of the client's values, and in front
    /// of it a bit array with about 32 bits per client value that rejects most
    /// non-matching server values with one cache-friendly lookup.
    /// Every buffer that holds client values or match indices is zeroized on drop and
    /// sized before it is filled (no reallocation leaves a copy behind).
    fn lookup(&self) -> Lookup {
        let mut counts = [0usize; 3];
        for &h in self.hash_index.iter() {
            counts[h as usize] += 1;
        }
        let mut per_h: [Zeroizing<Vec<(u128, u32)>>; 3] =
            core::array::from_fn(|h| Zeroizing::new(Vec::with_capacity(counts[h])));
        for (x, &v) in self.values.iter().enumerate() {
            per_h[self.hash_index[x] as usize].push((v, x as u32));
        }
        let per_h: Vec<(Filter, Table)> = per_h
            .into_par_iter()
            .map(|vals| {
                (
                    Filter::new(vals.iter().map(|&(v, _)| v), vals.len()),
                    Table::new(&vals),
                )
            })
            .collect();
        Lookup { per_h }
    }

    /// `(item, offset of its row in the lists)` of every hit, by increasing item.
    fn matches(&self, lookup: &Lookup, out: &Outputs<'_>) -> Zeroizing<Vec<(usize, usize)>> {
        let len = self.out_len;
        let row = out.row_len();
        let per_list = self.server_items as usize * row;
        const PART_ROWS: usize = 4096;
        let parts: Vec<Zeroizing<Vec<(usize, usize)>>> = lookup
            .per_h
            .par_iter()
            .enumerate()
            .flat_map(|(h, (filter, table))| {
                // Hits in one part: at most one per record and (values being distinct with
                // overwhelming probability) one per client value.
                let cap = table.len();
                let list = &out.lists[h * per_list..(h + 1) * per_list];
                list.par_chunks(row * PART_ROWS)
                    .enumerate()
                    .map(|(p, part)| {
                        let base = h * per_list + p * PART_ROWS * row;
                        let mut hits =
                            Zeroizing::new(Vec::with_capacity(cap.min(part.len() / row)));
                        for (r, rec) in part.chunks_exact(row).enumerate() {
                            let v = pack(&rec[..len], len);
                            if filter.contains(v) {
                                table.each(v, |x| hits.push((x as usize, base + r * row)));
                            }
                        }
                        hits
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut found = Zeroizing::new(Vec::with_capacity(parts.iter().map(|p| p.len()).sum()));
        for p in &parts {
            found.extend_from_slice(p);
        }
        found.sort_unstable();
        found.dedup_by_key(|hit| hit.0);
        found
    }
}

/// A hasher for uniformly random keys: folds the key and multiplies by an odd constant
/// so every bit of the 64-bit hash depends on the key (hashbrown reads the top bits).
#[derive(Default)]
struct Fold(u64);

impl Hasher for Fold {
    fn finish(&self) -> u64 {
        self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }

    fn write_u128(&mut self, v: u128) {
        self.0 ^= (v as u64) ^ ((v >> 64) as u64).rotate_left(32);
    }
}

fn mix(v: u128) -> u64 {
    let mut f = Fold::default();
    f.write_u128(v);
    f.finish()
}

/// A one-hash bit array over the client's values (about 32 bits per value, at least
/// 2^10 and at most 2^27 bits): `contains` is false for most values not inserted.
struct Filter {
    bits: Vec<u64>,
    shift: u32,
}

/// For each hash function, a filter and a table over the client's values it placed.
struct Lookup {
    per_h: Vec<(Filter, Table)>,
}

/// Open addressing with linear probing over the client's values of one hash function
/// (load at most 1/2). Unlike a `HashMap`, its memory can be wiped: it is zeroized on drop.
struct Table {
    /// `(value, item + 1)`; item 0 marks an empty slot.
    slots: Zeroizing<Vec<(u128, u32)>>,
    shift: u32,
    /// Values in the table.
    len: usize,
}

impl Table {
    fn new(vals: &[(u128, u32)]) -> Self {
        let log = (2 * vals.len().max(1))
            .next_power_of_two()
            .trailing_zeros()
            .max(1);
        let mut slots = Zeroizing::new(vec![(0u128, 0u32); 1 << log]);
        let mask = slots.len() - 1;
        let shift = 64 - log;
        for &(v, x) in vals {
            let mut i = (mix(v) >> shift) as usize;
            while slots[i].1 != 0 {
                i = (i + 1) & mask;
            }
            slots[i] = (v, x + 1);
        }
        Table {
            slots,
            shift,
            len: vals.len(),
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    /// Calls `f(item)` for every client item whose value is `v`.
    fn each(&self, v: u128, mut f: impl FnMut(u32)) {
        let mask = self.slots.len() - 1;
        let mut i = (mix(v) >> self.shift) as usize;
        loop {
            let (c, x) = self.slots[i];
            if x == 0 {
                return;
            }
            if c == v {
                f(x - 1);
            }
            i = (i + 1) & mask;
        }
    }
}

impl Drop for Filter {
    fn drop(&mut self) {
        // The bits are a function of the client's values.
        self.bits.zeroize();
    }
}

impl Filter {
    fn new(values: impl Iterator<Item = u128>, n: usize) -> Self {
        let log = (n.max(1) * 32)
            .next_power_of_two()
            .trailing_zeros()
            .clamp(10, 27);
        let mut bits = vec![0u64; 1 << (log - 6)];
        let shift = 64 - log;
        for v in values {
            let i = mix(v) >> shift;
            bits[(i >> 6) as usize] |= 1 << (i & 63);
        }
        Filter { bits, shift }
    }

    fn contains(&self, v: u128) -> bool {
        let i = mix(v) >> self.shift;
        self.bits[(i >> 6) as usize] & (1 << (i & 63)) != 0
    }
}
