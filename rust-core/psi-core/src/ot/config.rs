//! The settings of either side of an OT-PSI run ([`OtConfig`]) and the default chunk size:
//! what the client, the server and the cost model read their limits from.

use super::messages;
use crate::ote::prc;
use crate::parallel::Threads;

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
    /// Client: ask for label lanes (suite `0x02`, ADR 0053): a server that has them sends
    /// each entry's label with its value, and the output carries the matches' labels
    /// ([`crate::output::MatchOutput::labels`]). A server without them answers with suite
    /// `0x01`, and the output carries none.
    pub ask_label_lanes: bool,
    /// Server: the label of each of its items, in lane form; a client that asks gets them
    /// in lanes. `None`: no lanes (a registry with a label over
    /// [`super::MAX_LANE_LABEL`] bytes answers the label query instead).
    pub lane_labels: Option<std::sync::Arc<super::LaneLabels>>,
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
            ask_label_lanes: false,
            lane_labels: None,
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

    /// Client: ask for label lanes ([`OtConfig::ask_label_lanes`]).
    pub fn with_label_lanes(mut self) -> Self {
        self.ask_label_lanes = true;
        self
    }

    /// Server: the labels it sends in lanes to a client that asks
    /// ([`OtConfig::lane_labels`]); one per item of the set the server is given.
    pub fn with_lane_labels(mut self, labels: std::sync::Arc<super::LaneLabels>) -> Self {
        self.lane_labels = Some(labels);
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

    pub(super) fn effective_chunk_rows(&self) -> usize {
        self.chunk_rows
            .clamp(128, messages::MAX_CHUNK_ROWS as usize)
            .div_ceil(128)
            * 128
    }
}
