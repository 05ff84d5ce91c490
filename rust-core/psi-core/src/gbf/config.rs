//! The settings of either side of a GBF-PSI run ([`GbfConfig`]).

use super::messages::{self, CHUNK_FIELDS_LEN, INSTANCE_LEN};
use crate::parallel::Threads;

/// Default request size the client aims its chunks at: 16 MiB, as the other round
/// protocols'.
pub const DEFAULT_MAX_REQUEST_BYTES: u64 = 16 << 20;

/// Settings for either side of a run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GbfConfig {
    /// Worker threads for the heavy steps.
    pub threads: Threads,
    /// Client: the largest chunk request in bytes (whole IKNP instances of 8 KiB, at
    /// least one per chunk).
    pub max_request_bytes: u64,
    /// Server: largest client set it accepts.
    pub max_client_items: usize,
    /// Server: the exact client set size the hello must declare, if set (a server that
    /// admitted and charged a session for `n` items sets `n`).
    pub expected_client_items: Option<usize>,
}

impl Default for GbfConfig {
    fn default() -> Self {
        GbfConfig::new(Threads::default())
    }
}

impl GbfConfig {
    /// Defaults with the given worker threads.
    pub fn new(threads: Threads) -> Self {
        GbfConfig {
            threads,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            max_client_items: messages::MAX_ITEMS as usize,
            expected_client_items: None,
        }
    }

    /// Client: the configuration a driver uses against a server whose request bodies
    /// are limited to `max_body_bytes`: chunks of at most that many bytes and at most
    /// [`DEFAULT_MAX_REQUEST_BYTES`].
    pub fn for_body_limit(threads: Threads, max_body_bytes: u64) -> Self {
        GbfConfig::new(threads)
            .with_max_request_bytes(max_body_bytes.min(DEFAULT_MAX_REQUEST_BYTES))
    }

    /// Client: chunks of at most `bytes` per request (a server's body limit).
    pub fn with_max_request_bytes(mut self, bytes: u64) -> Self {
        self.max_request_bytes = bytes;
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

    /// IKNP instances per chunk: as many as fit [`GbfConfig::max_request_bytes`], at
    /// least one, at most `u16::MAX`.
    pub fn chunk_instances(&self) -> usize {
        let overhead = (crate::wire::HEADER_LEN + CHUNK_FIELDS_LEN) as u64;
        let n = self.max_request_bytes.saturating_sub(overhead) / INSTANCE_LEN as u64;
        n.clamp(1, u16::MAX as u64) as usize
    }
}
