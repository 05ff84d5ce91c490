//! Sync mode as a registry serves it (docs/protocol/sync.md; ADR 0047 §3): the snapshot
//! of every entry's short tag, the deltas from recent versions to the loaded one, and a
//! confirmation record for every entry, built once per registry load from the store's
//! entries and its change log (ADR 0055). The formats are psi-core's (`psi_core::sync`);
//! this room decides which versions are served and the width of the epoch.

use crate::storage::{ChangeCounts, LoadedEntry, RegistryStore, StoreError};
use axum::body::Bytes;
use psi_core::ItemSet;
use psi_core::dh::DhServer;
use psi_core::sync::{ConfirmStore, DEFAULT_EXTRA_BITS, Delta, Snapshot, sizes, sync_width};
use psi_http::{DeltaSize, SyncInfo};
use std::collections::{BTreeMap, HashMap, HashSet};

/// Most deltas a registry serves: one from each of the last versions before the loaded
/// one (a client further behind downloads the snapshot). Matches what a client holds
/// out of order (`psi_core::sync::MAX_PENDING_DELTAS`).
pub(crate) const MAX_SERVED_DELTAS: usize = psi_core::sync::MAX_PENDING_DELTAS;

/// The sync mode of one loaded registry, immutable like it.
pub(crate) struct ServedSync {
    /// What health and sessions say about it (with the deltas' sizes).
    info: SyncInfo,
    /// The SYNC_SNAPSHOT message of the loaded version.
    pub(crate) snapshot: Bytes,
    /// SYNC_DELTA messages to the loaded version, by their start version.
    deltas: BTreeMap<u64, Bytes>,
    /// Every entry's version-2 record, by bucket.
    pub(crate) confirm: ConfirmStore,
}

impl std::fmt::Debug for ServedSync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServedSync")
            .field("info", &self.info)
            .field("deltas", &self.deltas.len())
            .finish_non_exhaustive()
    }
}

/// What a delta request gets ([`ServedSync::delta_from`]).
pub(crate) enum DeltaAnswer<'a> {
    /// The client is at the loaded version or ahead of it: nothing to download.
    Current,
    /// The delta from its version.
    Delta(&'a Bytes),
    /// No delta from its version is kept: it downloads the snapshot.
    NotKept,
}

impl ServedSync {
    /// Builds the sync mode of the registry whose entries (with their outputs under
    /// `dh`'s key; `dh` also evaluates the removed identifiers, on its threads) are `entries`, at the store's version `version`. Reads the store's
    /// change log (the caller holds a read snapshot): the sync epoch starts where the log
    /// does ([`RegistryStore::changes_kept_after`]: a key rotation forgets the log), and
    /// the tag width is fixed by the registry's size then (docs/protocol/sync.md §2; the
    /// loaded size when the log starts from an empty registry, a new store's).
    pub(crate) fn build(
        store: &mut dyn RegistryStore,
        dh: &DhServer,
        entries: &[LoadedEntry],
        version: i64,
        bucket_size: usize,
    ) -> Result<ServedSync, StoreError> {
        let epoch = dh.epoch();
        let start = store.changes_kept_after()?.min(version);
        // Counted, not read: a new store's first import logs every entry as added.
        let base = store.change_counts(start, version)?;
        let now = entries.len() as u64;
        let at_start = (now + base.removed).saturating_sub(base.added);
        let width = sync_width(
            if at_start > 0 { at_start } else { now },
            DEFAULT_EXTRA_BITS,
        );
        let to = version.max(0) as u64;
        let snapshot = Snapshot::build(epoch, to, width, entries.iter().map(|e| &e.output));
        let snapshot = Bytes::from(snapshot.to_bytes());
        // The changes from each recent version to this one whose delta is smaller than
        // the snapshot: predicted from the counts, so that only those ranges' identifiers
        // are read and only their outputs looked up (a range of the whole registry would
        // otherwise hold every identifier a second time, and cost a pass over them).
        let first = start.max(version - MAX_SERVED_DELTAS as i64);
        let worth =
            |c: ChangeCounts| sizes::delta_bytes(c.added, c.removed, width) < snapshot.len() as f64;
        let mut changes = Vec::new();
        for from in first..version {
            let counts = if from == start {
                base
            } else {
                store.change_counts(from, version)?
            };
            if worth(counts) {
                changes.push((from as u64, store.changes(from, version)?));
            }
        }
        // The outputs of every identifier in them: an added one is among the entries (its
        // stored output); a removed one is not, and is evaluated once under this epoch's
        // key.
        let mut wanted: HashSet<&str> = changes
            .iter()
            .flat_map(|(_, c)| c.added.iter())
            .map(String::as_str)
            .collect();
        let mut outputs: HashMap<&str, [u8; psi_core::oprf::OUTPUT_LEN]> = HashMap::new();
        if !wanted.is_empty() {
            for e in entries {
                if let Some(id) = wanted.take(e.identifier.as_str()) {
                    outputs.insert(id, e.output);
                }
            }
        }
        let mut evaluate: Vec<&str> = changes
            .iter()
            .flat_map(|(_, c)| c.removed.iter())
            .map(String::as_str)
            .chain(wanted)
            .collect();
        evaluate.sort_unstable();
        evaluate.dedup();
        if !evaluate.is_empty() {
            let set = ItemSet::new(evaluate.iter().map(|s| s.as_bytes()));
            let outs = dh.outputs(&set)?;
            outputs.extend((0..set.len()).map(|i| (evaluate[set.original_index(i)], outs[i])));
        }
        let mut deltas = BTreeMap::new();
        let mut delta_sizes = Vec::new();
        for (from, c) in &changes {
            let pick = |ids: &[String]| -> Vec<[u8; 64]> {
                ids.iter().map(|id| outputs[id.as_str()]).collect()
            };
            let (added, removed) = (pick(&c.added), pick(&c.removed));
            let delta = Delta::build(epoch, *from, to, width, &added, &removed).to_bytes();
            // A delta as large as the snapshot saves nothing: such a client takes the
            // snapshot (a new store's first import is one).
            if delta.len() >= snapshot.len() {
                continue;
            }
            delta_sizes.push(DeltaSize {
                from: *from,
                bytes: delta.len() as u64,
            });
            deltas.insert(*from, Bytes::from(delta));
        }
        let mut rng = crate::storage::os_rng()?;
        let confirm = ConfirmStore::build(
            epoch,
            to,
            entries.iter().map(|e| (&e.output, e.label.as_deref())),
            bucket_size,
            &mut rng,
        );
        let info = SyncInfo {
            epoch,
            version: to,
            width,
            bucket_bits: confirm.bucket_bits(),
            snapshot_bytes: snapshot.len() as u64,
            snapshot_etag: format!("\"sync-{epoch}-{to}-{width}\""),
            deltas_from: delta_sizes.first().map_or(to, |d| d.from),
            deltas: delta_sizes,
            record_bytes: confirm.record_bytes() as u64,
        };
        Ok(ServedSync {
            info,
            snapshot,
            deltas,
            confirm,
        })
    }

    /// Bytes held: the snapshot, the deltas and the records.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.snapshot.len()
            + self.deltas.values().map(Bytes::len).sum::<usize>()
            + self.confirm.heap_bytes()
    }

    /// The sync info as health reports it (with the deltas' sizes).
    pub(crate) fn health_info(&self) -> SyncInfo {
        self.info.clone()
    }

    /// The sync info as a session's answer carries it (without the deltas' sizes).
    pub(crate) fn session_info(&self) -> SyncInfo {
        SyncInfo {
            deltas: Vec::new(),
            ..self.info.clone()
        }
    }

    /// The snapshot's ETag.
    pub(crate) fn snapshot_etag(&self) -> &str {
        &self.info.snapshot_etag
    }

    /// The loaded registry version.
    pub(crate) fn version(&self) -> u64 {
        self.info.version
    }

    /// The download for a client whose synced set is at `from`.
    pub(crate) fn delta_from(&self, from: u64) -> DeltaAnswer<'_> {
        if from >= self.info.version {
            return DeltaAnswer::Current;
        }
        match self.deltas.get(&from) {
            Some(d) => DeltaAnswer::Delta(d),
            None => DeltaAnswer::NotKept,
        }
    }
}
