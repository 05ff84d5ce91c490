//! GBF-PSI: the random garbled Bloom filter protocol of Pinkas, Schneider and Zohner
//! ("Faster Private Set Intersection based on OT Extension", USENIX Security 2014, §4.3),
//! which improves Dong, Chen and Wen's garbled Bloom filter PSI ("When Private Set
//! Intersection Meets Big Data", CCS 2013) as a fourth protocol. The byte-level
//! specification is `docs/protocol/gbf-psi.md`; the design decisions are
//! `docs/adr/0048-gbf-psi.md`.
//!
//! The client (PSZ14's `P2`) builds a Bloom filter of its `n_c` items with `k` hash
//! functions in `m` bits. Through `m` random OTs with the client as receiver and its
//! filter bits as choices, the server (`P1`) holds `seed¹_p` of every position `p` and the
//! client holds it where its filter has a one. The server sends, for each of its items,
//! the XOR of `seed¹` at the item's positions (sorted, Golomb-Rice coded); the client
//! computes the same XOR for its own items, all of whose positions are ones, and matches.
//!
//! Security model: semi-honest client and server (PSZ14 §4.3 and DCW13 §4 prove it in
//! that model). The client's view depends on a server item outside the intersection only
//! if the item is a false positive of the client's filter, at most `2^-k` each and
//! `n_s 2^-k <= 2^-40` per run with this crate's `k` ([`params`]). A client that sets
//! more ones in its filter than its declared items give learns the values of more items:
//! as with CM20-PSI, the server's charge per session holds for clients that follow the
//! protocol only (docs/security.md).
//!
//! Message flow (each arrow pair is one request/response; the client drives). Unlike
//! OT-PSI and CM20-PSI, the *client* is the base-OT sender and the IKNP receiver here:
//! the OTs' choice bits are its filter.
//!
//! ```text
//! client                                         server
//! Hello: nonce, n_c, MR19 sender point A   ──▶
//!                                          ◀──   Setup: nonce, n_s, k, m, ℓ, 128 MR19 msgs
//! MatrixChunk instances [0, c)             ──▶
//!                                          ◀──   ChunkAck (next instance)   (repeated)
//! MatrixChunk instances [.., m/512) (last) ──▶
//!                                          ◀──   Outputs: n_s values, sorted, Golomb-Rice
//! ```

pub(crate) mod bloom;
mod client;
mod config;
pub(crate) mod cost;
pub mod messages;
pub mod params;
mod server;
pub mod sizes;

pub use crate::chunked::ClientStep;
pub use client::GbfClient;
pub use config::{DEFAULT_MAX_REQUEST_BYTES, GbfConfig};
pub use params::Params;
pub use server::{GbfServer, GbfSet};

pub use crate::output::{Match, MatchOutput};

use crate::error::Result;
use crate::items::ItemSet;
use crate::phase::Phase;
use rand_core::CryptoRng;
use std::sync::Arc;

/// `sid = SHA-256(ds_session, client_nonce, server_nonce, BE32 n_c, BE32 n_s, u8 k,
/// BE32 m, u8 ℓ)` (spec §3).
pub(crate) fn session_id(client_nonce: &[u8; 32], server_nonce: &[u8; 32], p: &Params) -> [u8; 32] {
    crate::ote::prc::hash(
        bloom::ds::SESSION,
        &[
            client_nonce,
            server_nonce,
            &p.client_items.to_be_bytes(),
            &p.server_items.to_be_bytes(),
            &[p.hashes as u8],
            &p.filter_bits.to_be_bytes(),
            &[p.output_bits as u8],
        ],
    )
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
    config: &GbfConfig,
    rng: &mut R,
    observe: impl FnMut(Phase),
) -> Result<(MatchOutput, InMemoryTraffic)> {
    let (mut client, request) = GbfClient::start(client_items, config.clone(), rng)?;
    let mut server = GbfServer::new(server_items, config.clone(), rng)?;
    let mut params = None;
    let (output, traffic) = crate::chunked::run_loop(
        request,
        |req| {
            let response = server.handle(req)?;
            params = params.or(server.params());
            Ok((response, server.is_done()))
        },
        |resp| client.handle(resp),
        observe,
    )?;
    Ok((
        output,
        InMemoryTraffic {
            round_trips: traffic.round_trips,
            client_to_server_bytes: traffic.client_to_server_bytes,
            server_to_client_bytes: traffic.server_to_client_bytes,
            params,
        },
    ))
}

#[cfg(test)]
mod tests;
