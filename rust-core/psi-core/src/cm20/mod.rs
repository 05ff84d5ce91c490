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

mod chunks;
mod client;
mod config;
pub(crate) mod cost;
pub mod messages;
pub mod params;
mod prf;
mod rot;
mod server;
mod session;
pub mod sizes;

pub use crate::chunked::ClientStep;
pub use client::Cm20Client;
pub use config::{Cm20Config, DEFAULT_MAX_REQUEST_BYTES};
pub use params::Params;
pub use server::{Cm20Server, Cm20Set};

pub use crate::output::{Match, MatchOutput};

use crate::error::Result;
use crate::items::ItemSet;
use crate::phase::Phase;
use rand_core::CryptoRng;
use std::sync::Arc;

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
