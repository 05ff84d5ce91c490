//! OT-extension PSI: the batched OPRF of Kolesnikov-Kumaresan-Rosulek-Trieu (KKRT16,
//! "Efficient Batched Oblivious PRF with Applications to Private Set Intersection",
//! CCS 2016) with three-way Cuckoo hashing. The byte-level specification is
//! `docs/protocol/ot-psi.md`; the base-OT choice is `docs/adr/0003-ot-psi-base-ot.md`.
//!
//! Security model: semi-honest (honest-but-curious) client and server. The client learns
//! which of its items the server holds and the size of the server's set; the server learns
//! the size of the client's set (and the table size derived from it), nothing else.
//!
//! Message flow (each arrow pair is one request/response; the client drives):
//!
//! ```text
//! client                                         server
//! Hello: nonce, n_c, bins, 128 MR19 msgs  ──▶
//!                                          ◀──   Setup: nonce, n_s, L, A, IKNP u (8 KiB)
//! MatrixChunk rows [0, R)                  ──▶
//!                                          ◀──   ChunkAck (next row)       (repeated)
//! MatrixChunk rows [.., bins) (the last)   ──▶
//!                                          ◀──   Outputs: 3 shuffled lists of n_s values
//! ```
//!
//! With one chunk the whole run is two round trips, the minimum for KKRT16 with OT
//! extension (the matrix needs the server's base-OT reply).

// The OT extension this protocol stands on (base OTs, IKNP, the PRC, the transpose) is
// `crate::ote`, shared with CM20-PSI.
mod client;
pub(crate) mod cost;
mod cuckoo;
pub mod messages;
mod server;

use crate::ote::{base_ot, prc, transpose};

pub use crate::chunked::ClientStep;
pub use client::OtClient;
pub use cuckoo::{failure_bound_log2, table_size};
pub use server::OtServer;

use crate::error::Result;
use crate::items::ItemSet;
use crate::parallel::Threads;
use crate::phase::Phase;
use rand_core::CryptoRng;
use std::sync::Arc;

/// Default rows per matrix chunk: 2^18 rows, 16 MiB per request.
pub const DEFAULT_CHUNK_ROWS: usize = 1 << 18;

/// Settings for either side of a run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct OtConfig {
    /// Worker threads for the heavy steps.
    pub threads: Threads,
    /// Client: matrix rows per request (rounded up to a multiple of 128, at most
    /// [`messages::MAX_CHUNK_ROWS`]). Smaller chunks mean more round trips and less memory.
    pub chunk_rows: usize,
    /// Server: largest client set it accepts (at most [`messages::MAX_ITEMS`]).
    pub max_client_items: usize,
    /// Server: the exact client set size the hello must declare, if set (a server that
    /// admitted and charged a session for `n` items sets `n`): any other count is
    /// [`crate::Error::CountMismatch`]. With the hello's table size capped at
    /// [`messages::max_bins_for`]`(n)`, the session then evaluates at most that many OPRF
    /// inputs.
    pub expected_client_items: Option<usize>,
    /// Tests only: forces the client's Cuckoo table size.
    #[doc(hidden)]
    pub table_size_override: Option<usize>,
}

impl Default for OtConfig {
    fn default() -> Self {
        OtConfig::new(Threads::default())
    }
}

impl OtConfig {
    /// Defaults with the given worker threads.
    pub fn new(threads: Threads) -> Self {
        OtConfig {
            threads,
            chunk_rows: DEFAULT_CHUNK_ROWS,
            max_client_items: messages::MAX_ITEMS as usize,
            expected_client_items: None,
            table_size_override: None,
        }
    }

    /// Sets the client's rows per matrix chunk.
    pub fn with_chunk_rows(mut self, rows: usize) -> Self {
        self.chunk_rows = rows;
        self
    }

    /// Sets the largest client set a server accepts.
    pub fn with_max_client_items(mut self, n: usize) -> Self {
        self.max_client_items = n.min(messages::MAX_ITEMS as usize);
        self
    }

    /// Server: the hello must declare exactly `n` client items (see
    /// [`OtConfig::expected_client_items`]); also caps the client set at `n`.
    pub fn with_expected_client_items(mut self, n: usize) -> Self {
        let n = n.min(messages::MAX_ITEMS as usize);
        self.expected_client_items = Some(n);
        self.max_client_items = n;
        self
    }

    /// Sets the client's rows per matrix chunk to the most that fit in a request body
    /// of `max_body_bytes` (a server's limit): each row is 64 bytes, plus the chunk's
    /// 17-byte header and fields. At least 128 rows, at most the default.
    pub fn with_max_request_bytes(self, max_body_bytes: u64) -> Self {
        let overhead = (crate::wire::HEADER_LEN + messages::CHUNK_FIELDS_LEN) as u64;
        let rows = (max_body_bytes.saturating_sub(overhead) / prc::CODE_BYTES as u64) as usize;
        self.with_chunk_rows((rows / 128 * 128).clamp(128, DEFAULT_CHUNK_ROWS))
    }

    /// Tests only: a client table of exactly `bins` bins (to force Cuckoo failures).
    #[doc(hidden)]
    pub fn with_table_size_for_tests(mut self, bins: usize) -> Self {
        self.table_size_override = Some(bins);
        self
    }

    fn effective_chunk_rows(&self) -> usize {
        self.chunk_rows
            .clamp(128, messages::MAX_CHUNK_ROWS as usize)
            .div_ceil(128)
            * 128
    }
}

pub use crate::output::{Match, MatchOutput as OtOutput};

/// Bytes of each OPRF value the server sends: the false-match rule
/// ([`crate::protocol::false_match_bits`]) rounded up to whole bytes,
/// `ceil((40 + ceil(log2 n_c) + ceil(log2 n_s)) / 8)`.
pub fn output_len(client_items: usize, server_items: usize) -> usize {
    crate::protocol::false_match_bits(client_items as u64, server_items as u64).div_ceil(8) as usize
}

/// `sid = SHA-256(ds::SESSION, client_nonce, server_nonce, BE32 n_c, BE32 n_s, BE32 bins, L)`.
fn session_id(
    client_nonce: &[u8; 32],
    server_nonce: &[u8; 32],
    n_c: u32,
    n_s: u32,
    bins: u32,
    out_len: u8,
) -> [u8; 32] {
    prc::hash(
        prc::ds::SESSION,
        &[
            client_nonce,
            server_nonce,
            &n_c.to_be_bytes(),
            &n_s.to_be_bytes(),
            &bins.to_be_bytes(),
            &[out_len],
        ],
    )
}

/// Rows of the OT-extension matrix processed together (PRG, transpose, codewords,
/// hashing) by one task: 1024 rows keep a task's buffers (64 KiB each) in the core's cache.
/// A multiple of 128, so blocks start on AES-CTR block boundaries.
const BLOCK_ROWS: usize = 1024;

/// Rows `j0 .. j0 + n` (padded to a multiple of 128) of the matrix whose column `i` is
/// the AES-CTR stream of `prgs[i]`, i.e. the transpose of the 512 PRG columns.
fn matrix_rows(prgs: &[prc::Prg], j0: usize, n: usize) -> zeroize::Zeroizing<Vec<u8>> {
    debug_assert!(j0.is_multiple_of(128) && prgs.len() == prc::CODE_BITS);
    let n_pad = n.div_ceil(128) * 128;
    let col_bytes = n_pad / 8;
    let first_block = (j0 / 128) as u64;
    let mut cols = zeroize::Zeroizing::new(vec![0u8; prc::CODE_BITS * col_bytes]);
    for (c, p) in cols.chunks_exact_mut(col_bytes).zip(prgs) {
        p.fill(first_block, c);
    }
    let mut rows = zeroize::Zeroizing::new(vec![0u8; n_pad * prc::CODE_BYTES]);
    transpose::transpose(&cols, prc::CODE_BITS, col_bytes, &mut rows);
    rows
}

/// Calibration kernel (see [`crate::cost::kernels`]): `k` AES-128 blocks of the column
/// PRG, 256 blocks (4 KiB) at a time, as the matrix code runs it.
pub(crate) fn kernel_aes_blocks(k: u32, seed: u64) -> u8 {
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    let prg = prc::Prg::new(&key);
    let mut buf = [0u8; 4096];
    let mut acc = 0u8;
    let mut done = 0u64;
    while done < u64::from(k) {
        let n = (u64::from(k) - done).min(256) as usize;
        prg.fill(done, &mut buf[..16 * n]);
        acc ^= buf[0];
        done += n as u64;
    }
    acc
}

/// Analytic message sizes in bytes (frame header included), as in the spec.
pub mod sizes {
    use super::messages::{HELLO_BODY_LEN, SETUP_BODY_LEN};
    use crate::wire::HEADER_LEN;

    /// The hello message.
    pub fn hello() -> u64 {
        (HEADER_LEN + HELLO_BODY_LEN) as u64
    }
    /// The setup message.
    pub fn setup() -> u64 {
        (HEADER_LEN + SETUP_BODY_LEN) as u64
    }
    /// All matrix chunks together: `chunks · (9 + 8) + 64 · bins`.
    pub fn matrix(bins: u64, chunk_rows: u64) -> u64 {
        let chunks = bins.div_ceil(chunk_rows);
        chunks * (HEADER_LEN + super::messages::CHUNK_FIELDS_LEN) as u64 + 64 * bins
    }
    /// All chunk acks: one per chunk but the last.
    pub fn acks(bins: u64, chunk_rows: u64) -> u64 {
        (bins.div_ceil(chunk_rows) - 1) * (HEADER_LEN as u64 + 4)
    }
    /// The outputs message.
    pub fn outputs(server_items: u64, out_len: u64) -> u64 {
        HEADER_LEN as u64 + 5 + 3 * server_items * out_len
    }
}

/// Traffic of an in-memory run.
#[derive(Debug, Clone, Default)]
pub struct InMemoryTraffic {
    /// Request/response round trips.
    pub round_trips: usize,
    /// Bytes the client sent (all requests, frame headers included).
    pub client_to_server_bytes: u64,
    /// Bytes the server sent.
    pub server_to_client_bytes: u64,
    /// Cuckoo table size used by the client.
    pub bins: usize,
}

/// Runs client and server against each other in memory, every message through its byte
/// encoding (for benchmarks and tests). `observe` is called after each step with its
/// [`Phase`] (the observer may read a clock; this crate never does).
pub fn run_in_memory<R: CryptoRng + ?Sized>(
    client_items: ItemSet,
    server_items: impl Into<Arc<ItemSet>>,
    config: &OtConfig,
    rng: &mut R,
    mut observe: impl FnMut(Phase),
) -> Result<(OtOutput, InMemoryTraffic)> {
    let mut stats = InMemoryTraffic::default();
    let (mut client, request) = OtClient::start(client_items, config.clone(), rng)?;
    observe(Phase::ClientStart);
    stats.bins = client.bins();
    let mut server = OtServer::new(server_items, config.clone(), rng)?;
    let (output, traffic) = crate::chunked::run_loop(
        request,
        |req| Ok((server.handle(req)?, server.is_done())),
        |resp| client.handle(resp),
        observe,
    )?;
    stats.round_trips = traffic.round_trips;
    stats.client_to_server_bytes = traffic.client_to_server_bytes;
    stats.server_to_client_bytes = traffic.server_to_client_bytes;
    Ok((output, stats))
}

/// A step of [`base_ots_alone`].
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BaseOtStep {
    /// Client: drawing the secrets and computing the 128 receiver messages.
    ReceiverMessages,
    /// Server: both keys of every base OT from the receiver's messages.
    SenderKeys,
    /// Client: its chosen key of every base OT from the server's point `A`.
    ReceiverKeys,
}

/// Benchmarks only: the 128 base OTs of one session on their own (both sides, the same
/// code the protocol runs), calling `observe` after each step so a driver can time it.
/// Returns whether the receiver's keys are the sender's chosen ones (always, barring a bug).
#[doc(hidden)]
pub fn base_ots_alone<R: CryptoRng + ?Sized>(
    threads: Threads,
    rng: &mut R,
    mut observe: impl FnMut(BaseOtStep),
) -> Result<bool> {
    let nonce = crate::chunked::draw_nonce(rng);
    let choices = base_ot::draw_choices(rng);
    let sender = base_ot::Sender::new(rng);
    let (receiver, msgs) = base_ot::Receiver::start(&choices, &nonce, rng, threads)?;
    observe(BaseOtStep::ReceiverMessages);
    let both = threads.install(|| sender.keys(&nonce, &msgs))??;
    observe(BaseOtStep::SenderKeys);
    let chosen = threads.install(|| receiver.finish(&nonce, &sender.point()))??;
    observe(BaseOtStep::ReceiverKeys);
    Ok(chosen
        .iter()
        .zip(both.iter())
        .zip(choices.iter())
        .all(|((k, pair), &b)| *k == pair[b as usize]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;

    /// The KKRT16 relation on the extended OTs: for every bin `j` the server's row is
    /// `q_j = t0_j ⊕ (C_j ∧ s)`, so the client's value `H(j, t0_j)` equals the server's
    /// `H(j, q_j ⊕ (C(x) ∧ s))` exactly when `C(x) = C_j`; for any other input the masks
    /// differ in many positions of `s`.
    #[test]
    fn extension_satisfies_the_oprf_relation() {
        let mut rng = ChaCha20Rng::seed_from_u64(11);
        let items = ItemSet::new((0..40u32).map(|i| i.to_be_bytes()));
        let config = OtConfig::new(Threads::ONE).with_chunk_rows(1 << 20);
        let (mut client, hello) = OtClient::start(items, config.clone(), &mut rng).unwrap();
        let mut server = OtServer::new(ItemSet::new(["x"]), config, &mut rng).unwrap();
        let setup = server.handle(&hello).unwrap();
        let ClientStep::Send(chunk) = client.handle(&setup).unwrap() else {
            panic!()
        };
        let u = &chunk[crate::wire::HEADER_LEN + 8..];
        let rows = client.test_rows();
        let (s, q) = server.test_q_rows(u);
        assert_eq!(rows.len(), q.len());
        for (j, ((t0, code), qj)) in rows.iter().zip(&q).enumerate() {
            for i in 0..prc::CODE_BYTES {
                assert_eq!(qj[i], t0[i] ^ (code[i] & s[i]), "bin {j} byte {i}");
            }
        }
        // Item 0 sits in one of its bins under one hash function; under another hash
        // function its codeword differs from the bin's in at least 128 bits.
        for h in 0..3 {
            let (x, bin) = client.test_input(0, h);
            let c = client.test_code(&x);
            let differing: u32 = c
                .iter()
                .zip(&rows[bin].1)
                .map(|(a, b)| (a ^ b).count_ones())
                .sum();
            assert!(
                differing == 0 || differing >= 128,
                "h {h}: {differing} differing bits"
            );
        }
    }

    fn requests(ahead: bool) -> (Vec<Vec<u8>>, Vec<usize>) {
        let mut rng = ChaCha20Rng::seed_from_u64(13);
        let config = OtConfig::new(Threads::ONE).with_chunk_rows(256);
        let client_items = ItemSet::new((0..1000u32).map(|i| i.to_be_bytes()));
        let server_items = ItemSet::new((900..1900u32).map(|i| i.to_be_bytes()));
        let (client, hello) = OtClient::start(client_items, config.clone(), &mut rng).unwrap();
        let mut server = OtServer::new(server_items, config, &mut rng).unwrap();
        crate::chunked::requests_of_run(client, hello, |r| server.handle(r).unwrap(), ahead)
    }

    #[test]
    fn work_ahead_changes_no_byte_of_any_request() {
        let (plain, matched) = requests(false);
        assert!(plain.len() > 4, "{} requests", plain.len());
        assert_eq!(matched, (900..1000).collect::<Vec<_>>());
        assert_eq!(requests(true), (plain, matched));
    }

    #[test]
    fn base_ots_alone_runs_the_three_steps() {
        let mut rng = ChaCha20Rng::seed_from_u64(12);
        let mut seen = Vec::new();
        let agree = base_ots_alone(Threads::ONE, &mut rng, |s| seen.push(s)).unwrap();
        assert!(agree);
        assert_eq!(
            seen,
            [
                BaseOtStep::ReceiverMessages,
                BaseOtStep::SenderKeys,
                BaseOtStep::ReceiverKeys
            ]
        );
    }

    #[test]
    fn output_lengths() {
        assert_eq!(output_len(0, 0), 5);
        assert_eq!(output_len(1, 1), 5);
        assert_eq!(output_len(2, 1), 6);
        assert_eq!(output_len(1 << 20, 1 << 20), 10);
        assert_eq!(output_len((1 << 20) + 1, 1 << 20), 11);
        assert_eq!(output_len(1 << 24, 1 << 24), 11);
    }
}
