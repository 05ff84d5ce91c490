//! Analytic message sizes in bytes (frame header included), as in the spec.

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

/// Bytes of the outputs message with label lanes (suite `0x02`): `n_s` rows per list of
/// `out_len` value bytes and `1 + lane_width` lane bytes, and the width byte.
pub fn outputs_with_lanes(server_items: u64, out_len: u64, lane_width: u64) -> u64 {
    HEADER_LEN as u64 + 6 + 3 * server_items * (out_len + 1 + lane_width)
}
