//! The settings of either side of a CM20-PSI run ([`Cm20Config`]) and the default request
//! size: what the client, the server and the cost model read their limits from.

use super::{messages, params, prf};
use crate::parallel::Threads;

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
    /// Client: ask for label lanes (suite `0x02`, spec §4.7, ADR 0053): a server that has
    /// them sends each entry's label with its value, and the output carries the matches'
    /// labels ([`crate::output::MatchOutput::labels`]). A server without them answers with
    /// suite `0x01`, and the output carries none.
    pub ask_label_lanes: bool,
    /// Server: the label of each of its items, in lane form; a client that asks gets them
    /// in lanes. `None`: no lanes.
    pub lane_labels: Option<std::sync::Arc<crate::lanes::LaneLabels>>,
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
            ask_label_lanes: false,
            lane_labels: None,
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

    /// Client: ask for label lanes ([`Cm20Config::ask_label_lanes`]).
    pub fn with_label_lanes(mut self) -> Self {
        self.ask_label_lanes = true;
        self
    }

    /// Server: the labels it sends in lanes to a client that asks
    /// ([`Cm20Config::lane_labels`]); one per item of the set the server is given.
    pub fn with_lane_labels(mut self, labels: std::sync::Arc<crate::lanes::LaneLabels>) -> Self {
        self.lane_labels = Some(labels);
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
    pub(super) fn chunk_columns(&self, column_bytes: usize) -> usize {
        let overhead = (crate::wire::HEADER_LEN + messages::CHUNK_FIELDS_LEN) as u64;
        let cols = self.max_request_bytes.saturating_sub(overhead) / column_bytes as u64;
        let g = prf_group() as u64;
        ((cols / g) * g).clamp(g, params::MAX_WIDTH as u64) as usize
    }
}

fn prf_group() -> usize {
    prf::GROUP
}
