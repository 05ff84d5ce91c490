//! Analytic message sizes in bytes (frame header included), as in the spec §5.

use super::config::Cm20Config;
use super::messages::{CHUNK_FIELDS_LEN, HELLO_BODY_LEN, OUTPUTS_FIELDS_LEN, setup_body_len};
use super::params;
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
    let chunks = super::chunks::chunk_count(w as usize, per_chunk) as u64;
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

/// The expected outputs message for `n` uniformly random values of `l2` bits
/// ([`crate::chunked::sorted_outputs_expected`], the layout GBF-PSI shares).
pub fn outputs_expected(n: u64, l2: u32) -> u64 {
    crate::chunked::sorted_outputs_expected(n, l2)
}

/// The bytes label lanes (suite `0x02`, spec §4.7) add to a run of `n_s` server items with
/// lane width `Λ`: one byte in the setup, and in the outputs the width byte and one lane
/// of `1 + Λ` bytes per value: `2 + n_s (1 + Λ)`.
pub fn lanes(server_items: u64, lane_width: u64) -> u64 {
    2 + server_items * (1 + lane_width)
}
