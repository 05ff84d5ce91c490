//! The settings of a group PSI party ([`MpsiConfig`]).

use super::messages::{CHUNK_FIELDS_LEN, INSTANCE_LEN};
use super::params::MAX_ITEMS;
use crate::parallel::Threads;

/// Default size of the leader's matrix chunks: 16 MiB, as the round protocols' requests.
pub const DEFAULT_MAX_CHUNK_BYTES: u64 = 16 << 20;

/// Settings for the leader or a member.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct MpsiConfig {
    /// Worker threads for the heavy steps.
    pub threads: Threads,
    /// Leader: the largest matrix chunk in bytes (whole IKNP instances of 8 KiB, at least
    /// one per chunk); a member's cell chunk answering it is `w / 16` of that.
    pub max_chunk_bytes: u64,
    /// Leader: the largest set a member may declare.
    pub max_member_items: u32,
}

impl Default for MpsiConfig {
    fn default() -> Self {
        MpsiConfig::new(Threads::default())
    }
}

impl MpsiConfig {
    /// Defaults with the given worker threads.
    pub fn new(threads: Threads) -> Self {
        MpsiConfig {
            threads,
            max_chunk_bytes: DEFAULT_MAX_CHUNK_BYTES,
            max_member_items: MAX_ITEMS,
        }
    }

    /// Leader: matrix chunks of at most `bytes` (a relay's message limit).
    pub fn with_max_chunk_bytes(mut self, bytes: u64) -> Self {
        self.max_chunk_bytes = bytes;
        self
    }

    /// Leader: members may declare at most `n` items.
    pub fn with_max_member_items(mut self, n: u32) -> Self {
        self.max_member_items = n.min(MAX_ITEMS);
        self
    }

    /// IKNP instances per chunk: as many as fit [`MpsiConfig::max_chunk_bytes`], at least
    /// one, at most `u16::MAX`.
    pub fn chunk_instances(&self) -> usize {
        let overhead = (crate::wire::HEADER_LEN + CHUNK_FIELDS_LEN) as u64;
        let n = self.max_chunk_bytes.saturating_sub(overhead) / INSTANCE_LEN as u64;
        n.clamp(1, u16::MAX as u64) as usize
    }
}
