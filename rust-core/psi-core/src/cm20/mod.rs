//! CM20-PSI: the lightweight multi-point OPRF of Chase and Miao ("Private Set Intersection
//! in the Internet Setting from Lightweight Oblivious PRF", CRYPTO 2020) as a third
//! protocol. The byte-level specification is `docs/protocol/cm20-psi.md`; the design
//! decisions are `docs/adr/0021-cm20-psi.md`.
//!
//! The client (PSI receiver, `P2` in the paper) holds an `m x w` random bit matrix `A` and
//! the matrix `D` that is one everywhere except at `D_c[v_c(y)]` for each of its items `y`,
//! `v(y) = F_k(H1(y))`. Through `w` random OTs the server (PSI sender, `P1`) with choice bits
//! `s` learns `C_c = A_c` (`s_c = 0`) or `A_c ⊕ D_c` (`s_c = 1`), so `C[v(y)] = A[v(y)]` for
//! the client's items and differs in at least `d = 128` random positions for anything
//! else. The server sends `H2(C[v(x)])` once per item (KKRT16 sends three per item).
//!
//! Security model: semi-honest client and server, as in the paper's section 3.2 (which
//! also proves security against a malicious *server*). A malicious *client* can choose `D`
//! with more zeros and so learn the OPRF of more inputs than it declared: the server's
//! charge per session (`n_c` evaluations) holds for clients that follow the protocol only
//! (docs/adr/0021-cm20-psi.md, docs/security.md).
//!
//! Message flow (each arrow pair is one request/response; the client drives):
//!
//! ```text
//! client                                         server
//! Hello: nonce, n_c, m, 128 MR19 msgs     ──▶
//!                                          ◀──   Setup: nonce, n_s, w, l2, A, IKNP u
//! MatrixChunk k, columns [0, c)            ──▶
//!                                          ◀──   ChunkAck (next column)     (repeated)
//! MatrixChunk k, columns [.., w) (last)    ──▶
//!                                          ◀──   Outputs: n_s values, sorted, Golomb-Rice
//! ```

mod client;
pub(crate) mod cost;
pub mod messages;
pub mod params;
mod prf;
mod rot;
mod server;

pub use crate::chunked::ClientStep;
pub use client::Cm20Client;
pub use params::Params;
pub use server::{Cm20Server, Cm20Set};

pub use crate::output::{Match, MatchOutput};

use crate::error::Result;
use crate::items::ItemSet;
use crate::parallel::Threads;
use crate::phase::Phase;
use rand_core::CryptoRng;
use std::sync::Arc;

/// Default request size the client aims its chunks at: 16 MiB, as OT-PSI's.
pub const DEFAULT_MAX_REQUEST_BYTES: u64 = 16 << 20;

/// Settings for either side of a run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Cm20Config {
    /// Worker threads for the heavy steps.
    pub threads: Threads,
    /// Client: the largest chunk request in bytes (columns per chunk follow from it, a
    /// multiple of 16 columns, at least 16).
    pub max_request_bytes: u64,
    /// Client: the matrix height, if not the default [`params::height`]`(n_c)`.
    pub height: Option<u32>,
    /// Server: largest client set it accepts.
    pub max_client_items: usize,
    /// Server: the exact client set size the hello must declare, if set (a server that
    /// admitted and charged a session for `n` items sets `n`).
    pub expected_client_items: Option<usize>,
}

impl Default for Cm20Config {
    fn default() -> Self {
        Cm20Config::new(Threads::default())
    }
}

impl Cm20Config {
    /// Defaults with the given worker threads.
    pub fn new(threads: Threads) -> Self {
        Cm20Config {
            threads,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            height: None,
            max_client_items: messages::MAX_ITEMS as usize,
            expected_client_items: None,
        }
    }

    /// Client: the configuration a driver uses against a server whose request bodies
    /// are limited to `max_body_bytes`: chunks of at most that many bytes and at most
    /// [`DEFAULT_MAX_REQUEST_BYTES`], the default height. The one rule for the chunk
    /// size, shared by the client driver and the cost model (`crate::cost`).
    pub fn for_body_limit(threads: Threads, max_body_bytes: u64) -> Self {
        Cm20Config::new(threads)
            .with_max_request_bytes(max_body_bytes.min(DEFAULT_MAX_REQUEST_BYTES))
    }

    /// Client: chunks of at most `bytes` per request (a server's body limit).
    pub fn with_max_request_bytes(mut self, bytes: u64) -> Self {
        self.max_request_bytes = bytes;
        self
    }

    /// Client: a matrix height other than the default (a power of two from the default
    /// to four times it).
    pub fn with_height(mut self, height: u32) -> Self {
        self.height = Some(height);
        self
    }

    /// Sets the largest client set a server accepts.
    pub fn with_max_client_items(mut self, n: usize) -> Self {
        self.max_client_items = n.min(messages::MAX_ITEMS as usize);
        self
    }

    /// Server: the hello must declare exactly `n` client items; also caps the client set.
    pub fn with_expected_client_items(mut self, n: usize) -> Self {
        let n = n.min(messages::MAX_ITEMS as usize);
        self.expected_client_items = Some(n);
        self.max_client_items = n;
        self
    }

    /// Columns per chunk for columns of `column_bytes` bytes.
    fn chunk_columns(&self, column_bytes: usize) -> usize {
        let overhead = (crate::wire::HEADER_LEN + messages::CHUNK_FIELDS_LEN) as u64;
        let cols = self.max_request_bytes.saturating_sub(overhead) / column_bytes as u64;
        let g = prf_group() as u64;
        ((cols / g) * g).clamp(g, params::MAX_WIDTH as u64) as usize
    }
}

fn prf_group() -> usize {
    prf::GROUP
}

/// Columns of the chunk that starts at column `c0` of `w`, with at most `per_chunk`
/// columns (a multiple of 16) per chunk. A matrix that fits goes in one chunk. Otherwise
/// the chunks are full except that the last partial group of 16 columns (1 to 16 of them)
/// goes alone in a final chunk: the server's outputs wait for that chunk, so the less of it
/// there is to process, the sooner they leave, while the client builds that small chunk
/// during the round trip before it (spec §4.3).
fn chunk_len(c0: usize, width: usize, per_chunk: usize) -> usize {
    let rest = width - c0;
    if c0 == 0 && rest <= per_chunk {
        return rest;
    }
    let last = width - (width - 1) / prf::GROUP * prf::GROUP;
    if rest <= last {
        return rest;
    }
    per_chunk.min(rest - last)
}

/// Chunks of a matrix of `w` columns ([`chunk_len`]).
fn chunk_count(width: usize, per_chunk: usize) -> usize {
    let mut c0 = 0;
    let mut k = 0;
    while c0 < width {
        c0 += chunk_len(c0, width, per_chunk);
        k += 1;
    }
    k
}

/// `sid = SHA-256(ds::SESSION, client_nonce, server_nonce, BE32 n_c, BE32 n_s, BE32 m,
/// BE16 w, l2)`.
fn session_id(client_nonce: &[u8; 32], server_nonce: &[u8; 32], p: &Params) -> [u8; 32] {
    crate::ote::prc::hash(
        prf::ds::SESSION,
        &[
            client_nonce,
            server_nonce,
            &p.client_items.to_be_bytes(),
            &p.server_items.to_be_bytes(),
            &p.height.to_be_bytes(),
            &(p.width as u16).to_be_bytes(),
            &[p.output_bits as u8],
        ],
    )
}

/// Analytic message sizes in bytes (frame header included), as in the spec §5.
pub mod sizes {
    use super::messages::{CHUNK_FIELDS_LEN, HELLO_BODY_LEN, OUTPUTS_FIELDS_LEN, setup_body_len};
    use super::{Cm20Config, params};
    use crate::wire::HEADER_LEN;

    /// Bytes each way of a run, for `n_c` client and `n_s` server items with the default
    /// height and 16 MiB chunks.
    #[derive(Debug, Clone, Copy, PartialEq)]
    pub struct Traffic {
        /// Client to server, exact: hello and every chunk.
        pub client_to_server: u64,
        /// Server to client: setup and acks exactly, plus the expected size of the
        /// Golomb-Rice coded outputs ([`outputs_expected`]).
        pub server_to_client: u64,
        /// HTTP round trips of the protocol (hello, then one per chunk).
        pub round_trips: u64,
    }

    /// The bytes of a run as a function of `(n_c, n_s)` (defaults: `m = height(n_c)`,
    /// chunks of at most 16 MiB).
    pub fn traffic(client_items: u64, server_items: u64) -> Traffic {
        traffic_with(client_items, server_items, &Cm20Config::default())
    }

    /// [`traffic`] for a client configuration (height, request size).
    pub fn traffic_with(client_items: u64, server_items: u64, config: &Cm20Config) -> Traffic {
        let m = config
            .height
            .unwrap_or_else(|| params::height(client_items));
        let w = params::width(client_items, server_items, m).unwrap_or(params::MAX_WIDTH) as u64;
        let cb = m as u64 / 8;
        let per_chunk = config.chunk_columns(cb as usize);
        let chunks = super::chunk_count(w as usize, per_chunk) as u64;
        let l2 = params::output_bits(client_items, server_items);
        Traffic {
            client_to_server: hello() + matrix(w, cb, chunks),
            server_to_client: setup(w) + acks(chunks) + outputs_expected(server_items, l2),
            round_trips: 1 + chunks,
        }
    }

    /// The hello message.
    pub fn hello() -> u64 {
        (HEADER_LEN + HELLO_BODY_LEN) as u64
    }
    /// The setup message for width `w`: `9 + 72 + 8192 · ceil(w / 512)`.
    pub fn setup(width: u64) -> u64 {
        (HEADER_LEN + setup_body_len(width as usize)) as u64
    }
    /// All matrix chunks: `chunks · (9 + 20) + w · m / 8`.
    pub fn matrix(width: u64, column_bytes: u64, chunks: u64) -> u64 {
        chunks * (HEADER_LEN + CHUNK_FIELDS_LEN) as u64 + width * column_bytes
    }
    /// All chunk acks: one per chunk but the last, 11 bytes each.
    pub fn acks(chunks: u64) -> u64 {
        chunks.saturating_sub(1) * (HEADER_LEN as u64 + 2)
    }
    /// The outputs message for `n` values of `l2` bits and coded size `data_len` bytes.
    pub fn outputs(data_len: u64) -> u64 {
        (HEADER_LEN + OUTPUTS_FIELDS_LEN) as u64 + data_len
    }

    /// The expected outputs message for `n` uniformly random values of `l2` bits: the
    /// Golomb-Rice payload with the parameter `k = max(0, l2 - bit_length(n))` (the centre of
    /// [`crate::golomb::rice_candidates`]), whose gaps are close to exponential with mean
    /// `μ = 2^l2 / n`, so a value costs `k + 1 + 1 / (e^(2^k / μ) - 1)` bits on average.
    /// The encoder picks the best `k` for the actual values, so the real payload is at most
    /// this plus the spread of a random variable (about `0.01 %` at `n = 10^5`).
    pub fn outputs_expected(n: u64, l2: u32) -> u64 {
        if n == 0 {
            return outputs(0);
        }
        let bit_length = 64 - n.leading_zeros();
        let k = l2.saturating_sub(bit_length);
        let mu = 2f64.powi(l2 as i32) / n as f64;
        let per = k as f64 + 1.0 + 1.0 / ((2f64.powi(k as i32) / mu).exp() - 1.0);
        outputs((n as f64 * per / 8.0).ceil() as u64)
    }
}

/// Traffic of an in-memory run.
#[derive(Debug, Clone, Default)]
pub struct InMemoryTraffic {
    /// Request/response round trips.
    pub round_trips: usize,
    /// Bytes the client sent (frame headers included).
    pub client_to_server_bytes: u64,
    /// Bytes the server sent.
    pub server_to_client_bytes: u64,
    /// The run's parameters.
    pub params: Option<Params>,
}

/// Runs client and server against each other in memory, every message through its byte
/// encoding. `observe` is called after each step with its [`Phase`].
pub fn run_in_memory<R: CryptoRng + ?Sized>(
    client_items: ItemSet,
    server_items: impl Into<Arc<ItemSet>>,
    config: &Cm20Config,
    rng: &mut R,
    mut observe: impl FnMut(Phase),
) -> Result<(MatchOutput, InMemoryTraffic)> {
    let mut stats = InMemoryTraffic::default();
    let (mut client, request) = Cm20Client::start(client_items, config.clone(), rng)?;
    observe(Phase::ClientStart);
    let mut server = Cm20Server::new(server_items, config.clone(), rng)?;
    let mut params = None;
    let (output, traffic) = crate::chunked::run_loop(
        request,
        |req| {
            let response = server.handle(req)?;
            // Known from the hello's answer on; the first answer's are the run's.
            params = params.or(server.params());
            Ok((response, server.is_done()))
        },
        |resp| client.handle(resp),
        observe,
    )?;
    stats.round_trips = traffic.round_trips;
    stats.client_to_server_bytes = traffic.client_to_server_bytes;
    stats.server_to_client_bytes = traffic.server_to_client_bytes;
    stats.params = params;
    Ok((output, stats))
}

#[cfg(test)]
mod tests;
