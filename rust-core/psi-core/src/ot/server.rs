//! The server (OPRF sender): answers the base OTs, evaluates the KKRT16 OPRF on each of
//! its items under each of the three hash functions, and sends the values at the end,
//! three lists each in a fresh random order.

use super::base_ot;
use super::cuckoo::{self, HASHES, SimpleTable};
use super::messages::{self, Ack, Chunk, Hello, MAX_ITEMS, Message, Outputs, SUITE, Setup};
use super::prc::{
    Block, CODE_BYTES, PRC_BATCH, Prc, Prg, Row, copy_short, out_hash, out_prefix, permutation,
};
use super::{BLOCK_ROWS, OtConfig, iknp, matrix_rows, output_len, session_id};
use crate::error::{DecodeError, Error, Result};
use crate::items::ItemSet;
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
}

enum Phase {
    AwaitHello(Box<Fresh>),
    AwaitChunk(Box<Evaluating>),
    Done,
    Failed,
}

impl Phase {
    fn name(&self) -> &'static str {
        match self {
            Phase::AwaitHello(_) => "server awaiting hello",
            Phase::AwaitChunk(_) => "server awaiting matrix chunk",
            Phase::Done => "server done",
            Phase::Failed => "server failed",
        }
    }
}

/// Randomness drawn up front.
struct Fresh {
    nonce: [u8; 32],
    sender: base_ot::Sender,
    s: Zeroizing<Row>,
    shuffle_keys: Zeroizing<[Block; HASHES]>,
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
}

impl std::fmt::Debug for OtServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtServer")
            .field("items", &self.items)
            .field("phase", &self.phase.name())
            .finish_non_exhaustive()
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
        if items.len() > MAX_ITEMS as usize {
            return Err(Error::InputTooLarge {
                what: "server items",
                value: items.len() as u64,
                limit: MAX_ITEMS as u64,
            });
        }
        let mut nonce = [0u8; 32];
        rng.fill_bytes(&mut nonce);
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
            phase: Phase::AwaitHello(Box::new(Fresh {
                nonce,
                sender,
                s,
                shuffle_keys,
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
            (phase, msg) => Err(Error::WrongPhase {
                phase: phase.name(),
                message: msg.message_type(),
            }),
        }
    }

    /// True once the outputs have been sent.
    pub fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Done)
    }

    /// True once the run is over, successfully ([`OtServer::is_done`]) or not (an internal
    /// failure while answering the hello): the state machine accepts no further message, so
    /// a driver can free the session's state and slot.
    pub fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Done | Phase::Failed)
    }

    fn on_hello(&mut self, hello: Hello) -> Result<Vec<u8>> {
        // The table size was checked against the hello's own count by the decoder
        // (`bins <= max_bins_for(client_items)`); pinning the count to the one the session
        // was admitted for bounds the OPRF evaluations by `max_bins_for(expected)`.
        if let Some(expected) = self.config.expected_client_items
            && hello.client_items as usize != expected
        {
            return Err(Error::CountMismatch {
                expected: expected as u64,
                found: hello.client_items as u64,
            });
        }
        if hello.client_items as usize > self.config.max_client_items {
            return Err(DecodeError::LimitExceeded {
                what: "client items",
                value: hello.client_items as u64,
                limit: self.config.max_client_items as u64,
            }
            .into());
        }
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
            let digests = cuckoo::digest_all(items.items(), &sid, hello.bins);
            SimpleTable::new(&digests, bins)
        })?;
        let setup = Setup {
            server_nonce: fresh.nonce,
            server_items: n_s as u32,
            out_len: out_len as u8,
            sender_point: fresh.sender.point(),
            iknp_u: u,
        };
        debug_assert_eq!(SUITE, 1);
        self.phase = Phase::AwaitChunk(Box::new(Evaluating {
            sid,
            out_len,
            bins,
            next_row: 0,
            s: fresh.s,
            prgs: seeds.iter().map(Prg::new).collect(),
            prc: Prc::new(&sid),
            lists: core::array::from_fn(|_| Vec::with_capacity(n_s * out_len)),
            simple,
            shuffle_keys: fresh.shuffle_keys,
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
        let len = ev.out_len;
        let n_s = self.items.len();
        let mut msg = Outputs::begin(len as u8, n_s as u32);
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
        let mut out: [Vec<u8>; HASHES] = Default::default();
        for o in out.iter_mut() {
            o.reserve(entries.len() * self.out_len / 2);
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
                let f = out_hash(prefix, e.bin, &v);
                // A fixed 16-byte copy, then drop the bytes past L (cheaper than a short
                // variable-length copy).
                let o = &mut out[e.hash_index()];
                let at = o.len();
                o.extend_from_slice(&f[..16]);
                o.truncate(at + self.out_len);
            }
        }
        v.zeroize();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
