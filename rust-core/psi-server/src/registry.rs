//! The registry as served: the key, the encoded set with its ETag, the items for OT-PSI
//! sessions and the encrypted label records by bucket.

use crate::config::Config;
use crate::storage::{self, Readiness, RegistryStore, StoreError, encode_set, os_rng};
use crate::sync::ServedSync;
use axum::body::Bytes;
use psi_core::dh::DhServer;
use psi_core::labels::LabelStore;
use psi_core::{ItemSet, Protocol, ServerSet, Threads};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zeroize::Zeroize;

/// Numbers describing a loaded registry (safe to log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegistryStats {
    /// Key epoch.
    pub epoch: u32,
    /// Entries.
    pub entries: u64,
    /// Entries with a label.
    pub labeled: u64,
    /// Whether the entries were prepared for CM20-PSI sessions (their `H1` digests, 32
    /// bytes per entry, kept with the registry): when CM20-PSI is on and the registry is
    /// within its limit (`psi_core::cm20::messages::MAX_ITEMS`).
    pub cm20_prepared: bool,
    /// Whether the entries were prepared for GBF-PSI sessions (their digests, 16 bytes per
    /// entry): when GBF-PSI is on and the registry is within its limit.
    pub gbf_prepared: bool,
    /// Bytes of the encoded set.
    pub encoded_set_bytes: u64,
    /// Bytes the loaded registry holds in memory while it is served: the encoded set,
    /// the label records, the round protocols' set (identifiers, prepared digests, label
    /// lanes) and sync mode's snapshot, deltas and records (what `psi serve` logs; the
    /// process's peak while loading is higher, docs/benchmarks.md).
    pub held_bytes: u64,
    /// OPRF outputs computed while loading (0 when the store was up to date).
    pub outputs_computed: u64,
    /// Time spent computing outputs and encoding the set while loading.
    pub build_time: Duration,
}

/// The round protocols whose per-registry work (psi-core's [`ServerSet::prepare`]) a
/// server with `config` does when it loads a registry: those it runs.
fn prepared_protocols(config: &Config) -> Vec<Protocol> {
    let mut protocols = Vec::new();
    if config.enable_ot && config.enable_cm20 {
        protocols.push(Protocol::Cm20);
    }
    if config.enable_ot && config.enable_gbf {
        protocols.push(Protocol::Gbf);
    }
    protocols
}

/// The registry of one epoch, immutable; swapped whole on reload.
pub struct Registry {
    pub(crate) dh: DhServer,
    pub(crate) encoded: Bytes,
    pub(crate) etag: String,
    /// The items as the round protocols' sessions start from them, with each enabled
    /// protocol's per-registry work (CM20-PSI's and GBF-PSI's digests) done once, here.
    pub(crate) rounds: ServerSet,
    pub(crate) labels: LabelStore,
    /// Sync mode's snapshot, deltas and records (`Config::enable_sync`).
    pub(crate) sync: Option<ServedSync>,
    stats: RegistryStats,
    /// The store's registry version it was read at ([`RegistryStore::version`]).
    version: i64,
}

impl Registry {
    /// Loads from the store `config.db` names, computing missing outputs and the
    /// encoded set first if needed. `progress(done, total)` reports output computation.
    pub fn load(
        config: &Config,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Registry, StoreError> {
        let mut store = config.db.open_registry()?;
        Self::from_store(store.as_mut(), config, progress)
    }

    /// As [`Registry::load`], on an open store (the demo uses an in-memory one).
    pub fn from_store(
        store: &mut dyn RegistryStore,
        config: &Config,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Registry, StoreError> {
        let threads = Threads::new(config.build_threads);
        let t = Instant::now();
        let refreshed = storage::refresh(store, config.max_client_items, threads, progress)?;
        let build_time = t.elapsed();
        storage::read_snapshot(store, |s| {
            Self::read(s, config, refreshed.outputs_computed, build_time, false)
        })
    }

    /// Loads the store's current registry without writing anything; `None` while the
    /// store is between the steps of an import or a rotation ([`RegistryStore::readiness`]).
    /// Computes no OPRF output; when the set stored for the current entries was encoded
    /// for another `max_client_items` only ([`Readiness::OtherSize`]), encodes this
    /// server's from the stored outputs (as a reload would, without storing it).
    /// Everything is read from one committed state. Returns the readiness it loaded at.
    pub(crate) fn read_ready(
        store: &mut dyn RegistryStore,
        config: &Config,
    ) -> Result<Option<(Registry, Readiness)>, StoreError> {
        storage::read_snapshot(store, |s| {
            let ready = s.readiness(config.max_client_items)?;
            let encode_here = match ready {
                Readiness::InProgress => return Ok(None),
                Readiness::Ready { .. } => false,
                Readiness::OtherSize { epoch, .. } => {
                    if !s.outputs_complete(epoch)? {
                        return Ok(None);
                    }
                    true
                }
            };
            let t = Instant::now();
            let mut registry = Self::read(s, config, 0, Duration::ZERO, encode_here)?;
            if encode_here {
                registry.stats.build_time = t.elapsed();
            }
            Ok(Some((registry, ready)))
        })
    }

    /// Reads a refreshed store (the caller holds a read snapshot).
    fn read(
        store: &mut dyn RegistryStore,
        config: &Config,
        outputs_computed: u64,
        build_time: Duration,
        encode_here: bool,
    ) -> Result<Registry, StoreError> {
        let version = store.version()?;
        let key = store.current_key()?;
        // A set stored at this size is current unless `encode_here` (then it is from an
        // earlier version, if there is one at all).
        let stored = if encode_here {
            None
        } else {
            let set = store.encoded_set(config.max_client_items)?;
            Some(set.ok_or(StoreError::Psi(psi_core::Error::Incomplete("encoded set")))?)
        };
        let entries = store.entries()?;
        let set = match stored {
            Some(set) => set,
            None => {
                let outputs: Vec<_> = entries.iter().map(|e| e.output).collect();
                let threads = Threads::new(config.build_threads);
                let dh = DhServer::new(key.clone(), config.max_client_items, threads);
                encode_set(&dh, threads, &outputs)?
            }
        };
        let build_labels = || -> Result<LabelStore, StoreError> {
            let mut rng = os_rng()?;
            let labeled: Vec<(&[u8; 64], &str)> = entries
                .iter()
                .filter_map(|e| Some((&e.output, e.label.as_deref()?)))
                .collect();
            Ok(LabelStore::build(
                labeled.into_iter(),
                config.label_bucket_size,
                &mut rng,
            ))
        };
        let build_sync = |store: &mut dyn RegistryStore| -> Result<ServedSync, StoreError> {
            let dh = DhServer::new(
                key.clone(),
                config.max_client_items,
                Threads::new(config.build_threads),
            );
            ServedSync::build(store, &dh, &entries, version, config.label_bucket_size)
        };
        // The label records and sync mode's build are independent passes over the
        // entries (each a hash and a seal per entry): with more than one build thread
        // the label records are sealed on a thread of their own meanwhile.
        let (labels, sync) = if !config.enable_sync {
            (build_labels()?, None)
        } else if Threads::new(config.build_threads).get() > 1 {
            std::thread::scope(|s| {
                let labels = s.spawn(build_labels);
                let sync = build_sync(store);
                let labels = labels
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                Ok::<_, StoreError>((labels?, Some(sync?)))
            })?
        } else {
            (build_labels()?, Some(build_sync(store)?))
        };
        // No output is needed any more: the identifiers and labels move out and the
        // entries are dropped before the round protocols' set is built from them (so the
        // list and the set are not held together at a registry's largest moment).
        // The identifiers are copied into the set's one buffer (sized first) and each is
        // wiped as it is copied (ItemSet).
        let id_bytes = entries.iter().map(|e| e.identifier.len()).sum();
        let mut builder = ItemSet::with_capacity(entries.len(), id_bytes);
        let mut entry_labels = Vec::with_capacity(entries.len());
        for e in entries {
            let mut id = e.identifier.into_bytes();
            builder.push(&id);
            id.zeroize();
            entry_labels.push(e.label);
        }
        let items = Arc::new(builder.build());
        // OT-PSI's and CM20-PSI's label lanes (ADR 0053): each item's label, in the set's
        // order. A label over 15 bytes leaves them out: those protocols' labels then come
        // from the label query.
        let lanes = psi_core::lanes::LaneLabels::new((0..items.len()).map(|i| {
            entry_labels[items.original_index(i)]
                .as_deref()
                .map(str::as_bytes)
        }));
        drop(entry_labels);
        let mut rounds = ServerSet::prepare(
            items,
            &prepared_protocols(config),
            Threads::new(config.build_threads),
        )?;
        match lanes {
            Ok(lanes) => rounds = rounds.with_lane_labels(lanes)?,
            Err(_) => tracing::info!(
                "a label is longer than {} bytes: OT-PSI and CM20-PSI sessions fetch labels by the label query",
                psi_core::lanes::MAX_LANE_LABEL
            ),
        }
        let stats = RegistryStats {
            epoch: key.epoch(),
            entries: rounds.items().len() as u64,
            labeled: labels.len() as u64,
            cm20_prepared: rounds.is_prepared(Protocol::Cm20),
            gbf_prepared: rounds.is_prepared(Protocol::Gbf),
            encoded_set_bytes: set.bytes.len() as u64,
            held_bytes: (set.bytes.len()
                + labels.heap_bytes()
                + rounds.heap_bytes()
                + sync.as_ref().map_or(0, ServedSync::heap_bytes)) as u64,
            outputs_computed,
            build_time,
        };
        Ok(Registry {
            dh: DhServer::new(key, config.max_client_items, Threads::ONE),
            encoded: Bytes::from(set.bytes),
            etag: set.etag,
            rounds,
            labels,
            sync,
            stats,
            version,
        })
    }

    /// The key epoch and the store's registry version this registry was read at.
    pub(crate) fn loaded_version(&self) -> (u32, i64) {
        (self.dh.epoch(), self.version)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_enabled_round_protocols_are_prepared() {
        let on = |cm20, gbf, ot| Config {
            enable_cm20: cm20,
            enable_gbf: gbf,
            enable_ot: ot,
            ..Config::default()
        };
        assert_eq!(
            prepared_protocols(&on(true, true, true)),
            [Protocol::Cm20, Protocol::Gbf]
        );
        assert_eq!(prepared_protocols(&on(false, true, true)), [Protocol::Gbf]);
        assert!(prepared_protocols(&on(true, true, false)).is_empty());
        assert!(prepared_protocols(&Config::default()).is_empty());
    }

    /// What a served registry holds per entry, counted from its parts. Catches: records
    /// kept in lists that grow by doubling, an identifier or label held twice, a part left
    /// out of the count. The sum (12-byte identifiers, 11-byte labels, sync mode on): the
    /// identifier in the set's one buffer with its end (20), the label record (57), the
    /// confirmation record (57), the label lane (12), the encoded set (about 7), the
    /// snapshot's tag (about 3) and the buckets' offsets (2).
    #[test]
    fn a_served_registry_holds_its_parts_once() {
        let n = 4096u64;
        let mut store = crate::storage::Store::open(std::path::Path::new(":memory:")).unwrap();
        let ids: Vec<String> = (0..n)
            .map(|i| format!("+1202{:07}", 5_550_000 + i))
            .collect();
        let labels: Vec<String> = (0..n).map(|i| format!("user:{:06}", i)).collect();
        store
            .add_entries(
                ids.iter()
                    .zip(&labels)
                    .map(|(i, l)| (i.as_str(), Some(l.as_str()))),
            )
            .unwrap();
        let config = Config {
            max_client_items: 1000,
            build_threads: 1,
            enable_cm20: false,
            enable_gbf: false,
            enable_sync: true,
            ..Config::default()
        };
        let r = Registry::from_store(&mut store, &config, &mut |_, _| {}).unwrap();
        let sync = r.sync.as_ref().unwrap();
        let parts = r.encoded.len()
            + r.labels.record_bytes()
            + sync.confirm.record_bytes()
            + sync.snapshot.len()
            + r.rounds.heap_bytes();
        let held = r.stats().held_bytes;
        assert!(held as usize >= parts, "{held} < {parts}");
        let per_entry = held as f64 / n as f64;
        assert!(
            (145.0..=165.0).contains(&per_entry),
            "{per_entry:.1} bytes per entry"
        );
    }

    #[test]
    fn a_registry_complete_at_another_size_is_read_with_its_own_set_and_a_half_done_one_is_not() {
        let mut store = crate::storage::Store::open(std::path::Path::new(":memory:")).unwrap();
        let config = Config {
            max_client_items: 200,
            build_threads: 1,
            enable_cm20: false,
            ..Config::default()
        };
        let refresh = |s: &mut crate::storage::Store, max| {
            s.refresh(max, Threads::ONE, &mut |_, _| {}).unwrap()
        };
        store.add_entries([("+14155550001", Some("a"))]).unwrap();
        assert!(Registry::read_ready(&mut store, &config).unwrap().is_none());
        refresh(&mut store, 200);
        // Imported with another --max-client-items: read, with a set encoded at 200 (not
        // the one stored at 200 for the previous version).
        store.add_entries([("+14155550002", None)]).unwrap();
        assert!(Registry::read_ready(&mut store, &config).unwrap().is_none());
        refresh(&mut store, 100);
        let (r, ready) = Registry::read_ready(&mut store, &config).unwrap().unwrap();
        assert!(matches!(ready, Readiness::OtherSize { built_for: 100, .. }));
        assert_eq!(r.stats().entries, 2);
        assert_eq!(r.loaded_version(), (1, store.version().unwrap()));
        // The same bytes and ETag as the set a refresh at 200 stores.
        refresh(&mut store, 200);
        let stored = store.encoded_set(200).unwrap().unwrap();
        assert_eq!(
            (r.etag(), &r.encoded[..]),
            (stored.etag.as_str(), &stored.bytes[..])
        );
        assert_ne!(stored.etag, store.encoded_set(100).unwrap().unwrap().etag);
        let (_, ready) = Registry::read_ready(&mut store, &config).unwrap().unwrap();
        assert!(matches!(ready, Readiness::Ready { .. }));
        // Half done (entries added, no output yet): nothing to read at any size.
        store.add_entries([("+14155550003", None)]).unwrap();
        assert!(Registry::read_ready(&mut store, &config).unwrap().is_none());
    }
}
