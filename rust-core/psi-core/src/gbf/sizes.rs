//! Analytic message sizes in bytes (frame header included), as in the spec §5.

use super::config::GbfConfig;
use super::messages::{CHUNK_FIELDS_LEN, HELLO_BODY_LEN, INSTANCE_LEN, SETUP_BODY_LEN};
use super::params::Params;
use crate::wire::HEADER_LEN;

/// Bytes each way of a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Traffic {
    /// Client to server, exact: hello and every chunk.
    pub client_to_server: u64,
    /// Server to client: setup and acks exactly, plus the expected size of the
    /// Golomb-Rice coded outputs ([`crate::chunked::sorted_outputs_expected`]).
    pub server_to_client: u64,
    /// HTTP round trips of the protocol (hello, then one per chunk).
    pub round_trips: u64,
}

/// The bytes of a run of `n_c` client and `n_s` server items with chunks of at most
/// 16 MiB.
pub fn traffic(client_items: u64, server_items: u64) -> Traffic {
    traffic_with(client_items, server_items, &GbfConfig::default())
}

/// [`traffic`] for a client configuration (request size).
pub fn traffic_with(client_items: u64, server_items: u64, config: &GbfConfig) -> Traffic {
    let instances = Params::new(client_items as u32, server_items as u32)
        .map_or(u32::MAX as u64 / 512, |p| p.instances() as u64);
    let chunks = instances.div_ceil(config.chunk_instances() as u64).max(1);
    let l = super::params::output_bits(client_items, server_items);
    Traffic {
        client_to_server: hello() + matrices(instances, chunks),
        server_to_client: setup()
            + acks(chunks)
            + crate::chunked::sorted_outputs_expected(server_items, l),
        round_trips: 1 + chunks,
    }
}

/// The hello message: 78 bytes.
pub fn hello() -> u64 {
    (HEADER_LEN + HELLO_BODY_LEN) as u64
}
/// The setup message: 8,246 bytes.
pub fn setup() -> u64 {
    (HEADER_LEN + SETUP_BODY_LEN) as u64
}
/// All matrix chunks: `chunks · (9 + 6) + 8192 · m / 512`.
pub fn matrices(instances: u64, chunks: u64) -> u64 {
    chunks * (HEADER_LEN + CHUNK_FIELDS_LEN) as u64 + instances * INSTANCE_LEN as u64
}
/// All chunk acks: one per chunk but the last, 13 bytes each.
pub fn acks(chunks: u64) -> u64 {
    chunks.saturating_sub(1) * (HEADER_LEN as u64 + 4)
}
