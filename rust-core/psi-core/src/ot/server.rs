//! The server (OPRF sender): answers the base OTs, evaluates the KKRT16 OPRF on each of
//! its items under each of the three hash functions, and sends the values at the end,
//! three lists each in a fresh random order.

use super::config::OtConfig;
use super::cuckoo::{self, HASHES, SimpleTable};
use super::matrix::{BLOCK_ROWS, matrix_rows};
use super::messages::{self, Ack, Chunk, Hello, MAX_ITEMS, Message, Outputs, Setup, row_len};
use super::session::{output_len, session_id};
use crate::chunked::{self, ServerPhase, admit_client_items, wrong_phase};
use crate::error::{DecodeError, Result};
use crate::items::ItemSet;
use crate::lanes::{LaneLabels, PAD_AT};
use crate::ote::base_ot::{self, RECEIVER_MSG_LEN};
use crate::ote::iknp;
use crate::ote::prc::{
    Block, CODE_BYTES, PRC_BATCH, Prc, Prg, Row, copy_short, out_hash, out_prefix, permutation,
};
use crate::wire;
use rand_core::CryptoRng;
use rayon::prelude::*;
use std::sync::Arc;
use zeroize::{Zeroize, Zeroizing};

/// Server side of OT-PSI, a sans-IO state machine for one client session.
///
/// ```text
/// let mut server = OtServer::new(items.clone(), config, &mut rng)?;   // items: Arc<ItemSet>
/// for each request of the session: respond with server.handle(&request)?
/// ```
pub struct OtServer {
    items: Arc<ItemSet>,
    config: OtConfig,
    phase: Phase,
    /// The outputs went out with label lanes.
    sent_lanes: bool,
}

type Phase = ServerPhase<Fresh, Evaluating>;

/// Randomness drawn up front, and what a hello received in parts has given so far.
struct Fresh {
    nonce: [u8; 32],
    sender: base_ot::Sender,
    s: Zeroizing<Row>,
    shuffle_keys: Zeroizing<[Block; HASHES]>,
    /// Bytes of a hello received in parts ([`OtServer::handle_hello_part`]).
    partial: Vec<u8>,
    /// Base-OT keys computed from those bytes, OTs `0 .. early_keys.len()`.
    early_keys: Zeroizing<Vec<[Block; 2]>>,
}

struct Evaluating {
    sid: [u8; 32],
    out_len: usize,
    bins: usize,
    next_row: usize,
    s: Zeroizing<Row>,
    /// PRGs of the server's seed (index `s_i`) for each of the 512 OTs.
    prgs: Vec<Prg>,
    prc: Prc,
    simple: SimpleTable,
    lists: [Vec<u8>; HASHES],
    shuffle_keys: Zeroizing<[Block; HASHES]>,
    /// The labels, when this session sends lanes (the client asked, the server has them).
    lanes: Option<Arc<LaneLabels>>,
}

impl std::fmt::Debug for OtServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        chunked::fmt_party(f, "OtServer", &self.items, self.phase.name())
    }
}

impl OtServer {
    /// A fresh session over the server's set; draws all of the session's randomness now.
    pub fn new<R: CryptoRng + ?Sized>(
        items: impl Into<Arc<ItemSet>>,
        config: OtConfig,
        rng: &mut R,
    ) -> Result<OtServer> {
        let items = items.into();
        chunked::check_set_size("server items", items.len(), MAX_ITEMS)?;
        crate::lanes::check_count(config.lane_labels.as_deref(), items.len())?;
        let nonce = chunked::draw_nonce(rng);
        let sender = base_ot::Sender::new(rng);
        let mut s = Zeroizing::new([0u8; CODE_BYTES]);
        rng.fill_bytes(s.as_mut());
        let mut shuffle_keys = Zeroizing::new([[0u8; 16]; HASHES]);
        for k in shuffle_keys.iter_mut() {
            rng.fill_bytes(k);
        }
        Ok(OtServer {
            items,
            config,
            sent_lanes: false,
            phase: Phase::AwaitHello(Box::new(Fresh {
                nonce,
                sender,
                s,
                shuffle_keys,
                partial: Vec::new(),
                early_keys: Zeroizing::new(Vec::new()),
            })),
        })
    }

    /// Receives the hello in parts, as a transport delivers its bytes (any split): the
    /// base-OT keys of each complete base-OT message are computed as soon as it arrives, so
    /// this work overlaps the client's (see [`super::OtClient::start_in_parts`]). Returns
    /// `Ok(None)` until the bytes given add up to a whole hello ([`super::sizes::hello`]),
    /// then exactly what [`OtServer::handle`] returns for that hello. More bytes than a
    /// hello, or a hello that [`OtServer::handle`] would refuse, is the same error as there;
    /// after an error the parts received so far are dropped and the session is as it was.
    pub fn handle_hello_part(&mut self, part: &[u8]) -> Result<Option<Vec<u8>>> {
        let Phase::AwaitHello(fresh) = &mut self.phase else {
            // Not expecting a hello: `handle` reports the phase error.
            return self.handle(part).map(Some);
        };
        let total = super::sizes::hello() as usize;
        fresh.partial.extend_from_slice(part);
        if fresh.partial.len() > total {
            let bytes = std::mem::take(&mut fresh.partial);
            return self.handle(&bytes).map(Some);
        }
        let have = fresh.partial.len().saturating_sub(messages::HELLO_OTS_AT) / RECEIVER_MSG_LEN;
        let done = fresh.early_keys.len();
        if have > done && fresh.partial.len() >= messages::HELLO_OTS_AT {
            let nonce: [u8; 32] = fresh.partial
                [messages::HELLO_NONCE_AT..messages::HELLO_NONCE_AT + 32]
                .try_into()
                .expect("32 bytes");
            let msgs: Vec<[u8; RECEIVER_MSG_LEN]> = fresh.partial[messages::HELLO_OTS_AT
                + done * RECEIVER_MSG_LEN
                ..messages::HELLO_OTS_AT + have * RECEIVER_MSG_LEN]
                .chunks_exact(RECEIVER_MSG_LEN)
                .map(|m| m.try_into().expect("64 bytes"))
                .collect();
            let sender = &fresh.sender;
            // A bad point is reported by `handle` once the hello is complete (after the
            // checks it makes first); until then the early keys simply stop growing.
            if let Ok(keys) = self
                .config
                .threads
                .install(|| sender.keys_from(&nonce, done, &msgs))?
            {
                fresh.early_keys.extend_from_slice(&keys);
            }
        }
        if fresh.partial.len() < total {
            return Ok(None);
        }
        let bytes = std::mem::take(&mut fresh.partial);
        let early = std::mem::take(&mut fresh.early_keys);
        self.handle_with(&bytes, early).map(Some)
    }

    /// For a transport that streams: once [`OtServer::handle_hello_part`] has been given the
    /// hello's fixed fields, the first [`messages::SETUP_HEAD_LEN`] bytes of the setup (frame
    /// header, server nonce, set size, output length and the base-OT point `A`), which can
    /// be sent before the base OTs are done so that the client computes its keys meanwhile
    /// ([`super::OtClient::handle_setup_head`]). The setup that `handle_hello_part` returns
    /// later begins with exactly these bytes.
    ///
    /// `Ok(None)` until the fixed fields have arrived (and outside the hello phase). The
    /// fixed fields get every check [`OtServer::handle`] makes of them: a refused one is the
    /// same error as there and drops the parts received. Once the head is sent, the only
    /// error left at the end of the hello is a bad base-OT point (or extra bytes); the
    /// transport must then abort the response it began.
    pub fn setup_head(&mut self) -> Result<Option<Vec<u8>>> {
        let probe = match &self.phase {
            Phase::AwaitHello(fresh) if fresh.partial.len() >= messages::HELLO_OTS_AT => {
                let mut probe = fresh.partial[..messages::HELLO_OTS_AT].to_vec();
                // Placeholder base-OT messages: the decoder does not look at points.
                probe.resize(super::sizes::hello() as usize, 0);
                probe
            }
            _ => return Ok(None),
        };
        let checked = match messages::decode(&probe) {
            Ok(Message::Hello(hello)) => self
                .check_hello(&hello)
                .map(|()| (hello.client_items, hello.lanes)),
            Ok(other) => Err(wrong_phase(self.phase.name(), other.message_type())),
            Err(e) => Err(e.into()),
        };
        let Phase::AwaitHello(fresh) = &mut self.phase else {
            unreachable!("checked above")
        };
        let (n_c, lanes_asked) = match checked {
            Ok(fields) => fields,
            Err(e) => {
                fresh.partial = Vec::new();
                fresh.early_keys = Zeroizing::new(Vec::new());
                return Err(e);
            }
        };
        let n_s = self.items.len();
        let head = Setup {
            server_nonce: fresh.nonce,
            server_items: n_s as u32,
            out_len: output_len(n_c as usize, n_s) as u8,
            sender_point: fresh.sender.point(),
            iknp_u: vec![0; iknp::U_LEN],
            lane: self.lanes_for(lanes_asked).map(|l| l.width()),
        }
        .encode();
        Ok(Some(head[..messages::SETUP_HEAD_LEN].to_vec()))
    }

    /// Handles one client request and returns the response to send back.
    ///
    /// A malformed request or one that does not fit the current phase is an error and
    /// leaves the session as it was.
    pub fn handle(&mut self, request: &[u8]) -> Result<Vec<u8>> {
        // A whole message ends any hello that was arriving in parts.
        if let Phase::AwaitHello(fresh) = &mut self.phase {
            fresh.partial = Vec::new();
            fresh.early_keys = Zeroizing::new(Vec::new());
        }
        self.handle_with(request, Zeroizing::new(Vec::new()))
    }

    /// [`OtServer::handle`], with the keys of the first base OTs already computed from
    /// this very `request` (by [`OtServer::handle_hello_part`]).
    fn handle_with(
        &mut self,
        request: &[u8],
        early_keys: Zeroizing<Vec<[Block; 2]>>,
    ) -> Result<Vec<u8>> {
        let msg = messages::decode(request)?;
        match (&self.phase, msg) {
            (Phase::AwaitHello(_), Message::Hello(hello)) => self.on_hello(hello, early_keys),
            (Phase::AwaitChunk(_), Message::Chunk(chunk)) => self.on_chunk(chunk),
            (phase, msg) => Err(wrong_phase(phase.name(), msg.message_type())),
        }
    }

    /// True once the outputs have been sent.
    pub fn is_done(&self) -> bool {
        self.phase.is_done()
    }

    /// True when this session sends label lanes (the client asked, the server has them;
    /// known once the hello is answered).
    pub fn labels_carried(&self) -> bool {
        match &self.phase {
            Phase::AwaitChunk(ev) => ev.lanes.is_some(),
            Phase::AwaitHello(_) | Phase::Failed => false,
            Phase::Done => self.sent_lanes,
        }
    }

    /// True once the run is over, successfully ([`OtServer::is_done`]) or not (an internal
    /// failure while answering the hello): the state machine accepts no further message, so
    /// a driver can free the session's state and slot.
    pub fn is_finished(&self) -> bool {
        self.phase.is_finished()
    }

    /// The most bytes the next request can have: a hello ([`super::sizes::hello`]), then
    /// one chunk of every row not yet received ([`super::sizes::matrix`]), 0 once the run
    /// is over.
    pub fn next_request_max(&self) -> u64 {
        match &self.phase {
            Phase::AwaitHello(_) => super::sizes::hello(),
            Phase::AwaitChunk(ev) => {
                let rest = ev.bins.saturating_sub(ev.next_row).max(1) as u64;
                super::sizes::matrix(rest, rest)
            }
            Phase::Done | Phase::Failed => 0,
        }
    }

    /// The labels this session sends in lanes: when the client asks and the server has them.
    fn lanes_for(&self, asked: bool) -> Option<&Arc<LaneLabels>> {
        self.config.lane_labels.as_ref().filter(|_| asked)
    }

    /// The checks of a hello's fixed fields that the decoder cannot make (they depend on
    /// the session's configuration).
    fn check_hello(&self, hello: &Hello) -> Result<()> {
        // The table size was checked against the hello's own count by the decoder
        // (`bins <= max_bins_for(client_items)`); pinning the count to the one the session
        // was admitted for bounds the OPRF evaluations by `max_bins_for(expected)`.
        admit_client_items(
            hello.client_items,
            self.config.expected_client_items,
            self.config.max_client_items,
        )
    }

    fn on_hello(
        &mut self,
        hello: Hello,
        early_keys: Zeroizing<Vec<[Block; 2]>>,
    ) -> Result<Vec<u8>> {
        self.check_hello(&hello)?;
        let Phase::AwaitHello(fresh) = &self.phase else {
            unreachable!("checked by caller")
        };
        // Keys computed while the hello arrived in parts come from these very bytes
        // (`handle_hello_part` passes the whole hello here); the rest are computed now.
        let done = early_keys.len().min(base_ot::BASE_OTS);
        let rest = self.config.threads.install(|| {
            fresh
                .sender
                .keys_from(&hello.client_nonce, done, &hello.base_ot[done..])
        })??;
        let mut keys = Zeroizing::new(Vec::with_capacity(base_ot::BASE_OTS));
        keys.extend_from_slice(&early_keys[..done]);
        keys.extend_from_slice(&rest);
        let Phase::AwaitHello(fresh) = std::mem::replace(&mut self.phase, Phase::Failed) else {
            unreachable!("checked above")
        };
        let n_s = self.items.len();
        let out_len = output_len(hello.client_items as usize, n_s);
        let sid = session_id(
            &hello.client_nonce,
            &fresh.nonce,
            hello.client_items,
            n_s as u32,
            hello.bins,
            out_len as u8,
        );
        let (u, seeds) = iknp::receiver(&sid, &keys, &fresh.s);
        let bins = hello.bins as usize;
        let items = &self.items;
        let simple = self.config.threads.install(|| {
            let digests = cuckoo::digest_all(&items.items(), &sid, hello.bins);
            SimpleTable::new(&digests, bins)
        })?;
        let lanes = self.lanes_for(hello.lanes).cloned();
        let setup = Setup {
            server_nonce: fresh.nonce,
            server_items: n_s as u32,
            out_len: out_len as u8,
            sender_point: fresh.sender.point(),
            iknp_u: u,
            lane: lanes.as_ref().map(|l| l.width()),
        };
        let row = row_len(out_len, setup.lane);
        self.phase = Phase::AwaitChunk(Box::new(Evaluating {
            sid,
            out_len,
            bins,
            next_row: 0,
            s: fresh.s,
            prgs: seeds.iter().map(Prg::new).collect(),
            prc: Prc::new(&sid),
            lists: core::array::from_fn(|_| Vec::with_capacity(n_s * row)),
            simple,
            shuffle_keys: fresh.shuffle_keys,
            lanes,
        }));
        Ok(setup.encode())
    }

    fn on_chunk(&mut self, chunk: Chunk<'_>) -> Result<Vec<u8>> {
        let Phase::AwaitChunk(ev) = &mut self.phase else {
            unreachable!("checked by caller")
        };
        let a = chunk.row_offset as usize;
        let r = chunk.row_count as usize;
        if a != ev.next_row {
            return Err(DecodeError::InvalidParameter { what: "row offset" }.into());
        }
        if a + r > ev.bins || (a + r < ev.bins && !r.is_multiple_of(128)) {
            return Err(DecodeError::InvalidParameter { what: "chunk rows" }.into());
        }
        self.config.threads.install(|| ev.evaluate(&chunk))?;
        ev.next_row = a + r;
        if ev.next_row < ev.bins {
            return Ok(Ack {
                next_row: ev.next_row as u32,
            }
            .encode());
        }
        let Phase::AwaitChunk(ev) = std::mem::replace(&mut self.phase, Phase::Done) else {
            unreachable!("checked above")
        };
        let lane = ev.lanes.as_ref().map(|l| l.width());
        self.sent_lanes = lane.is_some();
        let len = row_len(ev.out_len, lane);
        let n_s = self.items.len();
        let mut msg = Outputs::begin(ev.out_len as u8, lane, n_s as u32);
        let body = msg.len();
        msg.resize(body + HASHES * n_s * len, 0);
        self.config.threads.install(|| {
            // Each list goes out in a fresh uniformly random order.
            msg[body..]
                .par_chunks_mut((n_s * len).max(1))
                .zip(ev.lists.par_iter().zip(ev.shuffle_keys.par_iter()))
                .for_each(|(dst, (list, key))| {
                    let perm = permutation(n_s, key);
                    for (d, &p) in dst.chunks_exact_mut(len).zip(&perm) {
                        copy_short(d, &list[p as usize * len..(p as usize + 1) * len]);
                    }
                });
        })?;
        Ok(wire::finish(msg))
    }
}

impl chunked::ChunkedServer for OtServer {
    fn protocol(&self) -> crate::Protocol {
        crate::Protocol::Ot
    }

    fn handle(&mut self, request: &[u8]) -> Result<Vec<u8>> {
        OtServer::handle(self, request)
    }

    fn is_done(&self) -> bool {
        OtServer::is_done(self)
    }

    fn is_finished(&self) -> bool {
        OtServer::is_finished(self)
    }

    fn labels_carried(&self) -> bool {
        OtServer::labels_carried(self)
    }

    fn next_request_max(&self) -> u64 {
        OtServer::next_request_max(self)
    }
}

#[cfg(test)]
impl OtServer {
    /// Test hook: the server's secret `s` and its rows `q_j = t_j ⊕ (u_j ∧ s)` for the
    /// given client rows `u` (all bins, starting at bin 0).
    pub(crate) fn test_q_rows(&self, u: &[u8]) -> (Row, Vec<Row>) {
        let Phase::AwaitChunk(ev) = &self.phase else {
            panic!("no session yet")
        };
        let n = u.len() / CODE_BYTES;
        let mut q = matrix_rows(&ev.prgs, 0, n);
        let s = *ev.s;
        let rows = (0..n)
            .map(|j| {
                let mut r: Row = q[j * CODE_BYTES..(j + 1) * CODE_BYTES].try_into().unwrap();
                for i in 0..CODE_BYTES {
                    r[i] ^= u[j * CODE_BYTES + i] & s[i];
                }
                r
            })
            .collect();
        q.zeroize();
        (s, rows)
    }
}

impl Evaluating {
    /// For the chunk's rows `Q = T_s ⊕ (U ∧ s)`, then the OPRF values of every
    /// (item, hash function) whose bin lies in the chunk, appended to the lists.
    /// Works in blocks of [`BLOCK_ROWS`] rows that run in parallel.
    fn evaluate(&mut self, chunk: &Chunk<'_>) {
        let a = chunk.row_offset as usize;
        let prefix = out_prefix(&self.sid);
        let this = &*self;
        let parts: Vec<[Vec<u8>; HASHES]> = chunk
            .rows
            .par_chunks(BLOCK_ROWS * CODE_BYTES)
            .enumerate()
            .map(|(bi, u)| this.block(a + bi * BLOCK_ROWS, u, &prefix))
            .collect();
        for part in parts {
            for (list, p) in self.lists.iter_mut().zip(part) {
                list.extend_from_slice(&p);
            }
        }
    }

    /// One block of rows starting at `j0` (a multiple of 128) with client rows `u`.
    fn block(&self, j0: usize, u: &[u8], prefix: &sha2::Sha256) -> [Vec<u8>; HASHES] {
        let n = u.len() / CODE_BYTES;
        let mut q = matrix_rows(&self.prgs, j0, n);
        let s = &*self.s;
        for (q, u) in q
            .chunks_exact_mut(CODE_BYTES)
            .zip(u.chunks_exact(CODE_BYTES))
        {
            let q: &mut Row = q.try_into().expect("row");
            let u: &Row = u.try_into().expect("row");
            for i in 0..CODE_BYTES {
                q[i] ^= u[i] & s[i];
            }
        }
        let entries = self.simple.entries_for(j0, j0 + n);
        let row = row_len(self.out_len, self.lanes.as_ref().map(|l| l.width()));
        let mut out: [Vec<u8>; HASHES] = Default::default();
        for o in out.iter_mut() {
            o.reserve(entries.len() * row / 2);
        }
        let mut inputs = [[0u8; 16]; PRC_BATCH];
        let mut codes = [[0u8; CODE_BYTES]; PRC_BATCH];
        let mut v: Row = [0; CODE_BYTES];
        for batch in entries.chunks(PRC_BATCH) {
            for (input, e) in inputs.iter_mut().zip(batch) {
                *input = e.input;
            }
            let m = batch.len();
            self.prc.encode(&inputs[..m], &mut codes[..m]);
            for (e, code) in batch.iter().zip(&codes[..m]) {
                let row = e.bin as usize - j0;
                let qj: &Row = q[row * CODE_BYTES..(row + 1) * CODE_BYTES]
                    .try_into()
                    .expect("row");
                for i in 0..CODE_BYTES {
                    v[i] = qj[i] ^ (code[i] & s[i]);
                }
                let mut f = out_hash(prefix, e.bin, &v);
                // A fixed 16-byte copy, then drop the bytes past L (cheaper than a short
                // variable-length copy).
                let o = &mut out[e.hash_index()];
                let at = o.len();
                o.extend_from_slice(&f[..16]);
                o.truncate(at + self.out_len);
                if let Some(lanes) = &self.lanes {
                    lanes.seal_into(e.item as usize, &f[PAD_AT..], o);
                }
                f.zeroize();
            }
        }
        v.zeroize();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::ot::OtClient;
    use crate::parallel::Threads;
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;

    /// Frame offsets of the hello's `n_c` and `m` fields (9-byte header, then suite and
    /// the 32-byte nonce; `docs/protocol/ot-psi.md` §4.1).
    const N_C: core::ops::Range<usize> = 42..46;
    const BINS: core::ops::Range<usize> = 46..50;

    fn hello(n: u32, seed: u64) -> Vec<u8> {
        let items = ItemSet::new((0..n).map(|i| i.to_be_bytes()));
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        OtClient::start(items, OtConfig::new(Threads::ONE), &mut rng)
            .unwrap()
            .1
    }

    /// The hello produced in parts is byte for byte the hello of `start`; a server fed it
    /// in any split answers exactly as `handle` does; and the run completes from it.
    #[test]
    fn hello_in_parts_matches_the_whole_hello() {
        use crate::ot::ClientStep;
        let items = || ItemSet::new((0..300u32).map(|i| i.to_be_bytes()));
        let config = OtConfig::new(Threads::ONE);
        let seed = || ChaCha20Rng::seed_from_u64(7);
        let (_, whole) = OtClient::start(items(), config.clone(), &mut seed()).unwrap();
        let (mut client, first) =
            OtClient::start_in_parts(items(), config.clone(), &mut seed()).unwrap();
        assert_eq!(first.len(), messages::HELLO_OTS_AT);
        // No response is taken before the hello is complete.
        assert!(matches!(
            client.handle(&whole),
            Err(Error::WrongPhase { .. })
        ));
        let mut parts = vec![first];
        while let Some(p) = client.next_hello_part().unwrap() {
            parts.push(p);
        }
        assert_eq!(parts.len(), 1 + base_ot::BASE_OTS / 16);
        assert_eq!(parts.concat(), whole);
        assert_eq!(whole.len() as u64, crate::ot::sizes::hello());
        let set = Arc::new(ItemSet::new((200..500u32).map(|i| i.to_be_bytes())));
        let fresh = || {
            OtServer::new(
                set.clone(),
                config.clone(),
                &mut ChaCha20Rng::seed_from_u64(8),
            )
            .unwrap()
        };
        let reference = fresh().handle(&whole).unwrap();
        for split in [1usize, 63, 64, 1000, whole.len()] {
            let mut s = fresh();
            let pieces: Vec<&[u8]> = whole.chunks(split).collect();
            for piece in &pieces[..pieces.len() - 1] {
                assert!(s.handle_hello_part(piece).unwrap().is_none());
            }
            let setup = s.handle_hello_part(pieces[pieces.len() - 1]).unwrap();
            assert_eq!(setup.unwrap(), reference, "split {split}");
        }
        // The run, with the setup's head sent ahead: it is there as soon as the hello's
        // fixed fields are, and the setup begins with it.
        let mut s = fresh();
        assert_eq!(s.setup_head().unwrap(), None);
        let mut response = None;
        let mut head = None;
        for p in &parts {
            response = s.handle_hello_part(p).unwrap();
            if head.is_none() {
                head = s.setup_head().unwrap();
                assert!(head.is_some(), "head after the fixed fields");
            }
        }
        let head = head.unwrap();
        let response = response.unwrap();
        assert_eq!(head.len(), messages::SETUP_HEAD_LEN);
        assert_eq!(&response[..head.len()], &head[..]);
        assert_eq!(s.setup_head().unwrap(), None, "no head after the hello");
        // A head whose point is not this setup's is ignored (the keys are recomputed).
        let mut other = fresh();
        other
            .handle_hello_part(&whole[..messages::HELLO_OTS_AT])
            .unwrap();
        let mut wrong = other.setup_head().unwrap().unwrap();
        let n = wrong.len();
        wrong[n - 32..]
            .copy_from_slice(&base_ot::Sender::new(&mut ChaCha20Rng::seed_from_u64(1)).point());
        let finish = |client: &mut OtClient, s: &mut OtServer, mut response: Vec<u8>| loop {
            match client.handle(&response).unwrap() {
                ClientStep::Send(request) => response = s.handle(&request).unwrap(),
                ClientStep::Done(out) => break out,
            }
        };
        let mut second = OtClient::start(items(), config.clone(), &mut seed())
            .unwrap()
            .0;
        second.handle_setup_head(&wrong).unwrap();
        let mut s2 = fresh();
        let r2 = s2.handle(&whole).unwrap();
        assert_eq!(finish(&mut second, &mut s2, r2).matches.len(), 100);
        // The head with the right point: the keys computed from it are the ones used.
        client.handle_setup_head(&head).unwrap();
        let out = finish(&mut client, &mut s, response.clone());
        assert_eq!(out.matches.len(), 100);
        // After the hello, a part is a message in the wrong phase.
        assert!(matches!(
            s.handle_hello_part(&whole),
            Err(Error::WrongPhase { .. })
        ));
    }

    /// A hello in parts that `handle` would refuse is refused with the same error, once
    /// complete; the session then takes a good hello.
    #[test]
    fn hello_in_parts_errors_like_handle() {
        let good = hello(50, 9);
        let at = messages::HELLO_OTS_AT;
        // A bad point in the first base-OT message.
        let mut bad = good.clone();
        bad[at..at + 32].copy_from_slice(&[0xff; 32]);
        // A count the session was not admitted for (the fixed fields are checked by `handle`
        // even though the base-OT keys were computed early).
        let mut count = good.clone();
        count[N_C].copy_from_slice(&49u32.to_be_bytes());
        // One byte more than a hello.
        let mut long = good.clone();
        long.push(0);
        for (name, msg) in [("bad point", &bad), ("count", &count), ("long", &long)] {
            let want = server(50).handle(msg).unwrap_err();
            let mut s = server(50);
            assert!(
                s.handle_hello_part(&msg[..4000]).unwrap().is_none(),
                "{name}"
            );
            assert_eq!(
                s.handle_hello_part(&msg[4000..]).unwrap_err(),
                want,
                "{name}"
            );
            assert!(!s.is_finished(), "{name}");
            // Parts of a refused hello are dropped: a good one is answered as `handle` does.
            assert_eq!(
                s.handle_hello_part(&good).unwrap().unwrap(),
                server(50).handle(&good).unwrap(),
                "{name}"
            );
        }
        // The head is refused, with `handle`'s error, as soon as the fixed fields are.
        let mut s = server(50);
        s.handle_hello_part(&count[..at]).unwrap();
        assert_eq!(
            s.setup_head().unwrap_err(),
            server(50).handle(&count).unwrap_err()
        );
        assert_eq!(
            s.handle_hello_part(&good).unwrap().unwrap(),
            server(50).handle(&good).unwrap()
        );
        // A whole message given to `handle` ends a hello that was arriving in parts.
        let mut s = server(50);
        assert!(s.handle_hello_part(&bad[..5000]).unwrap().is_none());
        assert!(s.handle(&good).is_ok());
    }

    fn server(expected: usize) -> OtServer {
        let config = OtConfig::new(Threads::ONE).with_expected_client_items(expected);
        let mut rng = ChaCha20Rng::seed_from_u64(99);
        OtServer::new(ItemSet::new(["a", "b"]), config, &mut rng).unwrap()
    }

    #[test]
    fn hello_count_must_equal_the_expected_count() {
        let mut s = server(5);
        // Fewer items than admitted (a client that declared 5 to get a bigger table, or
        // one that shrinks its count after being charged): refused, session unchanged.
        assert_eq!(
            s.handle(&hello(4, 1)).unwrap_err(),
            Error::CountMismatch {
                expected: 5,
                found: 4
            }
        );
        assert!(!s.is_finished());
        // The exact count is accepted afterwards.
        s.handle(&hello(5, 2)).unwrap();
        // A hand-built hello with 0 items for a 1-item session: with 64 bins (accepted
        // before: 64 ≤ 16·0 + 64) the table cap refuses it; with 3 bins the count does.
        let mut h = hello(1, 3);
        h[N_C].copy_from_slice(&0u32.to_be_bytes());
        h[BINS].copy_from_slice(&64u32.to_be_bytes());
        let mut s = server(1);
        assert!(matches!(
            s.handle(&h),
            Err(Error::Decode(DecodeError::LimitExceeded {
                what: "bins",
                ..
            }))
        ));
        h[BINS].copy_from_slice(&3u32.to_be_bytes());
        assert_eq!(
            s.handle(&h).unwrap_err(),
            Error::CountMismatch {
                expected: 1,
                found: 0
            }
        );
        assert!(!s.is_finished());
    }

    #[test]
    fn bins_are_capped_at_the_default_table_size() {
        // The reported bypass: 1 item declared, 80 bins (16·1 + 64) asked for.
        let mut h = hello(1, 4);
        assert_eq!(u32::from_be_bytes(h[BINS].try_into().unwrap()), 3);
        h[BINS].copy_from_slice(&80u32.to_be_bytes());
        let mut s = server(1);
        assert_eq!(
            s.handle(&h).unwrap_err(),
            Error::Decode(DecodeError::LimitExceeded {
                what: "bins",
                value: 80,
                limit: 3
            })
        );
        // One bin more than the default table, at a size where the table is not tiny.
        let n = 300u32;
        let mut h = hello(n, 5);
        let m = cuckoo::table_size(n as usize) as u32;
        assert_eq!(u32::from_be_bytes(h[BINS].try_into().unwrap()), m);
        h[BINS].copy_from_slice(&(m + 1).to_be_bytes());
        let mut s = server(n as usize);
        assert!(matches!(
            s.handle(&h),
            Err(Error::Decode(DecodeError::LimitExceeded {
                what: "bins",
                ..
            }))
        ));
        // A smaller table than the default is the client's own risk, and accepted.
        h[BINS].copy_from_slice(&(m - 1).to_be_bytes());
        assert!(server(n as usize).handle(&h).is_ok());
    }
}
