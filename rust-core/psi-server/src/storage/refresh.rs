//! The one refresh algorithm over [`SetWork`](super::SetWork): an epoch's missing
//! outputs computed, its encoded set rebuilt when the entries changed, and the ETag that
//! names a set.

use super::contract::{RegistryStore, StoredSet};
use super::error::StoreError;
use psi_core::dh::DhServer;
use psi_core::oprf::OUTPUT_LEN;
use psi_core::{ItemSet, Threads};
use sha2::{Digest, Sha256};

/// Entries whose outputs are computed per batch (bounds memory during a refresh).
const OUTPUT_BATCH: usize = 50_000;

/// Brings the store up to date for `max_client_items`: computes the OPRF output of every
/// entry that has none under the current key (only those), then rebuilds the encoded set
/// if the entries changed since it was built, holding the store's build lease throughout.
/// `progress(done, total)` is called after each batch of outputs. A process that dies
/// mid-way leaves the outputs it stored; the next refresh (here or elsewhere) goes on
/// from there, and a half-built set is never stored.
pub fn refresh(
    store: &mut dyn RegistryStore,
    max_client_items: usize,
    threads: Threads,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<RefreshStats, StoreError> {
    let _lease = store.lease_builds()?;
    let key = store.current_key()?;
    let epoch = key.epoch();
    let dh = DhServer::new(key, max_client_items, threads);
    let mut stats = RefreshStats::default();
    let total = store.pending_outputs(epoch)?;
    loop {
        let batch = store.pending_batch(epoch, OUTPUT_BATCH)?;
        if batch.is_empty() {
            break;
        }
        let items = ItemSet::new(batch.iter().map(|(_, s)| s.as_bytes()));
        let outputs = dh.outputs(&items)?;
        let rows: Vec<(i64, [u8; OUTPUT_LEN])> = batch
            .iter()
            .zip(outputs.iter())
            .map(|((id, _), o)| (*id, *o))
            .collect();
        store.put_outputs(epoch, &rows)?;
        stats.outputs_computed += batch.len() as u64;
        progress(stats.outputs_computed, total);
    }
    let version = store.version()?;
    let stored = store.set_built_at(epoch, dh.max_client_items())?;
    if stored != Some(version) || stats.outputs_computed > 0 {
        let set = encode_set(&dh, threads, &store.all_outputs()?)?;
        store.put_set(dh.max_client_items(), version, &set)?;
        stats.set_rebuilt = true;
    }
    if stats.outputs_computed > 0 {
        store.outputs_overwritten()?;
    }
    Ok(stats)
}

/// What [`Store::refresh`](super::Store::refresh) did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RefreshStats {
    /// Entries whose OPRF output was computed now.
    pub outputs_computed: u64,
    /// True if the encoded set was rebuilt (false: the stored one is current).
    pub set_rebuilt: bool,
}

/// Strong ETag of an encoded set: 128 bits of its SHA-256, quoted.
pub fn etag(bytes: &[u8]) -> String {
    format!("\"{}\"", hex::encode(&Sha256::digest(bytes)[..16]))
}

/// The encoded set of `outputs` as `dh` serves it (its key epoch, its
/// `max_client_items`), with its ETag: what [`Store::refresh`](super::Store::refresh)
/// stores, and what a server encodes for itself when the store holds the set at another
/// size only. Deterministic: the same outputs give the same bytes and ETag wherever they
/// are encoded.
pub(crate) fn encode_set(
    dh: &DhServer,
    threads: Threads,
    outputs: &[[u8; OUTPUT_LEN]],
) -> Result<StoredSet, StoreError> {
    let bytes = threads.install(|| dh.encode_outputs(outputs))??.to_bytes();
    Ok(StoredSet {
        epoch: dh.epoch(),
        etag: etag(&bytes),
        bytes,
    })
}
