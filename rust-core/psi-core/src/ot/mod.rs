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
mod config;
pub(crate) mod cost;
mod cuckoo;
mod matrix;
pub mod messages;
mod server;
mod session;
pub mod sizes;

use crate::ote::base_ot;

pub use crate::chunked::ClientStep;
pub use crate::lanes::{LaneLabels, MAX_LANE_LABEL};
pub use client::OtClient;
pub use config::{DEFAULT_CHUNK_ROWS, OtConfig};
pub use cuckoo::{failure_bound_log2, table_size};
pub(crate) use matrix::kernel_aes_blocks;
pub use server::OtServer;
pub use session::output_len;

use crate::error::Result;
use crate::items::ItemSet;
use crate::parallel::Threads;
use crate::phase::Phase;
use rand_core::CryptoRng;
use std::sync::Arc;

pub use crate::output::{Match, MatchOutput as OtOutput};

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
    use crate::ote::prc;
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
}
