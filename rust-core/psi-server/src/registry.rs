//! The registry as served: the key, the encoded set with its ETag, the items for OT-PSI
//! sessions and the encrypted label records by bucket.

use crate::Config;
use crate::store::{Store, StoreError, os_rng};
use axum::body::Bytes;
use psi_api::labels;
use psi_core::dh::DhServer;
use psi_core::{ItemSet, Threads};
use rand_core::Rng;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Numbers describing a loaded registry (safe to log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegistryStats {
    /// Key epoch.
    pub epoch: u32,
    /// Entries.
    pub entries: u64,
    /// Entries with a label.
    pub labeled: u64,
    /// Bytes of the encoded set.
    pub encoded_set_bytes: u64,
    /// OPRF outputs computed while loading (0 when the store was up to date).
    pub outputs_computed: u64,
    /// Time spent computing outputs and encoding the set while loading.
    pub build_time: Duration,
}

/// The registry of one epoch, immutable; swapped whole on reload.
pub struct Registry {
    pub(crate) dh: DhServer,
    pub(crate) encoded: Bytes,
    pub(crate) etag: String,
    pub(crate) items: Arc<ItemSet>,
    pub(crate) label_bits: u8,
    pub(crate) label_buckets: HashMap<u32, Vec<u8>>,
    stats: RegistryStats,
}

impl Registry {
    /// Loads from the store at `config.db_path`, computing missing outputs and the
    /// encoded set first if needed. `progress(done, total)` reports output computation.
    pub fn load(
        config: &Config,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Registry, StoreError> {
        let mut store = Store::open(&config.db_path)?;
        Self::from_store(&mut store, config, progress)
    }

    /// As [`Registry::load`], on an open store (the demo uses an in-memory one).
    pub fn from_store(
        store: &mut Store,
        config: &Config,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Registry, StoreError> {
        let threads = Threads::new(config.build_threads);
        let t = Instant::now();
        let refreshed = store.refresh(config.max_client_items, threads, progress)?;
        let build_time = t.elapsed();
        let key = store.current_key()?;
        let set = store
            .encoded_set(config.max_client_items)?
            .ok_or(StoreError::Psi(psi_core::Error::Incomplete("encoded set")))?;
        let entries = store.entries()?;
        let labeled = entries.iter().filter(|e| e.label.is_some()).count();
        let label_bits = bucket_bits(labeled, config.label_bucket_size);
        let mut rng = os_rng()?;
        let mut label_buckets: HashMap<u32, Vec<u8>> = HashMap::new();
        for e in &entries {
            if let Some(label) = &e.label {
                let mut nonce = [0u8; labels::NONCE_LEN];
                rng.fill_bytes(&mut nonce);
                let rec = labels::seal(&e.output, label, nonce);
                let tag: [u8; labels::TAG_LEN] = rec[..labels::TAG_LEN].try_into().expect("tag");
                label_buckets
                    .entry(labels::bucket(&tag, label_bits))
                    .or_default()
                    .extend_from_slice(&rec);
            }
        }
        let items = Arc::new(ItemSet::new(
            entries.iter().map(|e| e.identifier.as_bytes()),
        ));
        drop(entries);
        let stats = RegistryStats {
            epoch: key.epoch(),
            entries: items.len() as u64,
            labeled: labeled as u64,
            encoded_set_bytes: set.bytes.len() as u64,
            outputs_computed: refreshed.outputs_computed,
            build_time,
        };
        Ok(Registry {
            dh: DhServer::new(key, config.max_client_items, Threads::ONE),
            encoded: Bytes::from(set.bytes),
            etag: set.etag,
            items,
            label_bits,
            label_buckets,
            stats,
        })
    }

    /// Numbers about this registry.
    pub fn stats(&self) -> RegistryStats {
        self.stats
    }

    /// The ETag of the encoded set.
    pub fn etag(&self) -> &str {
        &self.etag
    }
}

/// Bucket bits so that buckets hold about `target` records on average (0..=24).
fn bucket_bits(labeled: usize, target: usize) -> u8 {
    let buckets = labeled / target.max(1);
    if buckets <= 1 {
        0
    } else {
        (usize::BITS - 1 - buckets.leading_zeros()).min(24) as u8
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn bucket_bits_target() {
        assert_eq!(super::bucket_bits(0, 32), 0);
        assert_eq!(super::bucket_bits(63, 32), 0);
        assert_eq!(super::bucket_bits(64, 32), 1);
        assert_eq!(super::bucket_bits(1_000_000, 32), 14);
    }
}
