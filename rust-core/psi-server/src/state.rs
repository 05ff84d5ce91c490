//! The shared state of a running server ([`AppState`]): the key epochs served, the
//! session table, the budgets and the worker pools, and how a new registry is swapped in.

use crate::accounts;
use crate::config::{Config, instant_after};
use crate::instance::InstanceName;
use crate::limits;
use crate::registry::{Registry, RegistryStats};
use crate::sessions;
use crate::storage::{self, Readiness, StoreError};
use crate::store_health;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Times the cost model's kernels on this machine (one thread: each session step runs
/// on one worker) and adds the worker counts.
fn measure_costs(config: &Config) -> psi_http::ServerCosts {
    let u = psi_core::calibrate::unit_costs(psi_core::Threads::ONE);
    psi_http::ServerCosts {
        units: psi_http::UnitCostsNs::from_units(&u),
        threads_per_step: 1,
        workers: config.workers.max(1) as u32,
        ot_workers: config.ot_workers.max(1) as u32,
    }
}

/// The epochs served: the current registry and, for `epoch_overlap` after a swap to a
/// new epoch, the previous one. Swapped under one lock, so a reader sees both or neither.
pub(crate) struct Epochs {
    current: Arc<Registry>,
    /// The previous epoch's registry and when it stops being served.
    retired: Option<(Arc<Registry>, Instant)>,
    /// An instance started during an overlap: the previous epoch's encoded set as the
    /// shared store keeps it ([`storage::RegistryStore::previous_set`]), served to
    /// `GET /v1/dh/encoded-set` with that epoch until the overlap ends (timed from the
    /// current key's creation). It has no session of that epoch: it needs nothing else.
    kept: Option<(Arc<ServedSet>, Instant)>,
}

/// An encoded set as `GET /v1/dh/encoded-set` serves it.
#[derive(Clone)]
pub(crate) struct ServedSet {
    pub(crate) epoch: u32,
    pub(crate) encoded: axum::body::Bytes,
    pub(crate) etag: String,
}

/// Shared state of a running server.
pub struct AppState {
    pub(crate) config: Config,
    /// `config.instance`, or the random name chosen at start.
    pub(crate) instance: InstanceName,
    pub(crate) epochs: RwLock<Epochs>,
    /// Held while a registry is built from the store (reload, rotation): one at a time.
    rebuilding: Mutex<()>,
    /// Wakes the epoch task when a previous epoch starts its overlap.
    pub(crate) epoch_retired: tokio::sync::Notify,
    pub(crate) sessions: sessions::Sessions,
    /// Each caller's hourly budget of queried items (`Config::items_per_hour`): in
    /// memory and saved to SQLite, or charged in the shared PostgreSQL table that every
    /// instance charges (as the probe, download and OT-session budgets).
    pub(crate) limiter: limits::Budgets,
    /// Each caller's hourly budget of probe bytes (`Config::probe_bytes_per_hour`; in
    /// memory only with SQLite, swept with the other budgets).
    pub(crate) probe_limiter: limits::Budgets,
    /// Each address's hourly budget of `GET /v1/health` requests
    /// (`Config::health_per_hour`; in memory only, swept with the other budgets).
    pub(crate) health_limiter: limits::RateLimiter,
    /// Each caller's hourly budget of full encoded-set download bytes
    /// (`Config::encoded_set_bytes_per_hour`; in memory only with SQLite).
    pub(crate) download_limiter: limits::Budgets,
    /// The group relay's table (groups.rs).
    pub(crate) groups: crate::groups::Groups,
    /// Each caller's hourly budget of bytes posted to group mailboxes
    /// (`GroupLimits::bytes_per_hour`; in memory only with SQLite).
    pub(crate) group_limiter: limits::Budgets,
    /// Issued tokens and saved budgets (its own database connection).
    pub(crate) accounts: Arc<accounts::Accounts>,
    /// Each address's hourly budget of requests whose bearer token is not known valid
    /// (`Config::invalid_tokens_per_hour`; in memory only, swept with the other budgets):
    /// bounds the token lookups a stranger can cause (issue 35 item 3).
    pub(crate) invalid_token_limiter: limits::RateLimiter,
    /// Whether the database answered the last look: while it does not, health says so
    /// and new sessions are refused (store_health.rs).
    pub(crate) store_health: store_health::StoreHealth,
    pub(crate) workers: Arc<tokio::sync::Semaphore>,
    /// Workers for OT-PSI rounds only.
    pub(crate) ot_workers: Arc<tokio::sync::Semaphore>,
    /// This machine's unit costs, measured once at start (about 30 ms), advertised in
    /// `GET /v1/health` for the clients' protocol choice (docs/protocol-choice.md).
    pub(crate) costs: psi_http::ServerCosts,
}

impl AppState {
    /// Opens the store, brings the encoded set up to date and loads the registry.
    /// Blocking (may compute OPRF outputs): call it before starting the runtime's
    /// server loop or inside `spawn_blocking`.
    pub fn open(config: Config) -> Result<Arc<AppState>, StoreError> {
        let registry = Registry::load(&config, &mut |_, _| {})?;
        Ok(Self::with_registry(config, registry))
    }

    /// State around an already loaded registry. Opens its own connection to the
    /// database for issued tokens and budgets (blocking) and restores the saved budgets;
    /// on the shared store, reads the previous epoch's set if its overlap is still on
    /// ([`AppState::load_previous_set`]).
    pub fn with_registry(config: Config, registry: Registry) -> Arc<AppState> {
        let limiter = limits::RateLimiter::new(config.items_per_hour);
        let instance = config.instance.clone().unwrap_or_else(InstanceName::random);
        // Several instances on one PostgreSQL charge every budget in its shared table (one
        // pool for all four, and for the token lookups): a caller spreading requests over
        // them has one budget.
        let shared = config.db.open_budgets();
        let accounts = Arc::new(accounts::Accounts::open(
            &config.db,
            &limiter,
            config.session_ttl,
            shared.as_ref().map(|pool| pool.tokens.clone()),
            config.watch_store.is_some() && !config.db.is_memory(),
        ));
        use storage::Book;
        let book = |limiter: limits::RateLimiter, book: Book| match &shared {
            Some(pool) => limits::Budgets::shared(limiter, book, pool.budgets.clone()),
            None => limits::Budgets::local(limiter),
        };
        let mut sessions = sessions::Sessions::new(
            sessions::SessionLimits {
                total: config.max_sessions,
                per_client: config.max_sessions_per_client,
                per_block: config.max_sessions_per_block,
                idle: config.session_idle_timeout,
                hello: config.ot_hello_timeout,
                ot: config.max_ot_sessions,
                ot_per_client: config.max_ot_sessions_per_client,
                ot_per_hour: config.ot_sessions_per_hour,
                ot_idle: config.ot_idle_timeout,
            },
            config.session_ttl,
        );
        if let Some(pool) = &shared {
            sessions.share_ot_budget(pool.budgets.clone());
        }
        let state = Arc::new(AppState {
            instance,
            sessions,
            limiter: book(limiter, Book::Items),
            probe_limiter: book(
                limits::RateLimiter::in_memory(config.probe_bytes_per_hour),
                Book::ProbeBytes,
            ),
            health_limiter: limits::RateLimiter::in_memory(config.health_per_hour),
            invalid_token_limiter: limits::RateLimiter::in_memory(config.invalid_tokens_per_hour),
            download_limiter: book(
                limits::RateLimiter::in_memory(config.encoded_set_bytes_per_hour),
                Book::DownloadBytes,
            ),
            groups: crate::groups::Groups::new(config.groups.clone()),
            group_limiter: book(
                limits::RateLimiter::in_memory(config.groups.bytes_per_hour),
                Book::GroupBytes,
            ),
            accounts,
            store_health: store_health::StoreHealth::default(),
            workers: Arc::new(tokio::sync::Semaphore::new(config.workers.max(1))),
            ot_workers: Arc::new(tokio::sync::Semaphore::new(config.ot_workers.max(1))),
            costs: measure_costs(&config),
            epochs: RwLock::new(Epochs {
                current: Arc::new(registry),
                retired: None,
                kept: None,
            }),
            rebuilding: Mutex::new(()),
            epoch_retired: tokio::sync::Notify::new(),
            config,
        });
        // Started during an overlap (after a rotation): the previous epoch's set, kept in
        // the shared store, is served from the first request, as the other instances
        // serve it.
        if matches!(state.config.db, storage::Database::Postgres(_))
            && let Err(e) = state.load_previous_set()
        {
            tracing::warn!(error = %e, "reading the previous key epoch's set failed");
        }
        state
    }

    /// The group relay's live groups and the envelopes in their mailboxes.
    pub fn group_counts(&self) -> crate::groups::GroupCounts {
        self.groups.counts()
    }

    /// This instance's name: the prefix of its session ids.
    pub fn instance(&self) -> &InstanceName {
        &self.instance
    }

    /// The registry in use (the current epoch's).
    pub fn registry(&self) -> Arc<Registry> {
        self.epochs
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .current
            .clone()
    }

    /// The registry of key epoch `epoch`, if it is still served: the current epoch, or
    /// the previous one during `epoch_overlap` after the swap.
    pub fn registry_for(&self, epoch: u32) -> Option<Arc<Registry>> {
        let epochs = self.epochs.read().unwrap_or_else(|e| e.into_inner());
        if epochs.current.dh.epoch() == epoch {
            return Some(epochs.current.clone());
        }
        match &epochs.retired {
            Some((r, until)) if r.dh.epoch() == epoch && Instant::now() < *until => Some(r.clone()),
            _ => None,
        }
    }

    /// The encoded set of key epoch `epoch` (`None`: the current one), while it is served:
    /// the current epoch's, the previous one's during the overlap (from its registry, or
    /// the set kept in the shared store when this instance started after the rotation).
    pub(crate) fn encoded_set_for(&self, epoch: Option<u32>) -> Option<ServedSet> {
        let served = |r: &Registry| ServedSet {
            epoch: r.dh.epoch(),
            encoded: r.encoded.clone(),
            etag: r.etag.clone(),
        };
        let Some(epoch) = epoch else {
            return Some(served(&self.registry()));
        };
        if let Some(r) = self.registry_for(epoch) {
            return Some(served(&r));
        }
        let epochs = self.epochs.read().unwrap_or_else(|e| e.into_inner());
        match &epochs.kept {
            Some((set, until)) if set.epoch == epoch && Instant::now() < *until => {
                Some(set.as_ref().clone())
            }
            _ => None,
        }
    }

    /// Serves the previous epoch's encoded set kept in the shared store, when this
    /// instance started during that epoch's overlap (an instance started after a rotation
    /// knows only the current key; the others still serve the previous epoch's set, so a
    /// client holding it must not be refused here). The overlap is timed from the
    /// current key's creation: it ends no later than on the instances that swapped the
    /// epoch in. Blocking. Returns the time left, `None` when there is nothing to serve.
    pub(crate) fn load_previous_set(&self) -> Result<Option<Duration>, StoreError> {
        if self.config.db.is_memory() {
            return Ok(None);
        }
        let mut store = self.config.db.open_registry_read_only()?;
        let Some((set, since)) = store.previous_set(self.config.max_client_items)? else {
            return Ok(None);
        };
        let left = since
            .checked_add(self.config.epoch_overlap)
            .and_then(|end| end.duration_since(std::time::SystemTime::now()).ok())
            .unwrap_or(Duration::ZERO);
        let mut epochs = self.epochs.write().unwrap_or_else(|e| e.into_inner());
        if left.is_zero()
            || epochs.retired.is_some()
            || set.epoch.checked_add(1) != Some(epochs.current.dh.epoch())
        {
            return Ok(None);
        }
        tracing::info!(
            epoch = set.epoch,
            left_s = left.as_secs(),
            "previous key epoch's encoded set served from the store until its overlap ends"
        );
        let served = ServedSet {
            epoch: set.epoch,
            encoded: axum::body::Bytes::from(set.bytes),
            etag: set.etag,
        };
        epochs.kept = Some((Arc::new(served), instant_after(left)));
        self.epoch_retired.notify_one();
        Ok(Some(left))
    }

    /// Swaps `registry` in. A registry of another epoch than the current one retires the
    /// current one, which stays served for `epoch_overlap`; one of the same epoch (after
    /// an import) replaces it and keeps the previous epoch's overlap as it was.
    fn install(&self, registry: Registry) -> RegistryStats {
        let stats = registry.stats();
        let registry = Arc::new(registry);
        let mut epochs = self.epochs.write().unwrap_or_else(|e| e.into_inner());
        let old = std::mem::replace(&mut epochs.current, registry);
        let replaced = if old.dh.epoch() != stats.epoch {
            epochs.kept = None;
            epochs.retired = Some((old, instant_after(self.config.epoch_overlap)));
            self.epoch_retired.notify_one();
            None
        } else {
            Some(old)
        };
        drop(epochs);
        // A registry of the same epoch is freed here, outside the lock, unless a session
        // still holds it; then the load's and its freed memory go back
        // (`Config::after_registry_change`), on every path that installs: a reload, a
        // rotation, a change another process made (`reload_if_changed`).
        drop(replaced);
        if let Some(f) = self.config.after_registry_change {
            f();
        }
        stats
    }

    /// Drops the previous epoch once its overlap is over (its sessions are refused from
    /// then on anyway; this frees its memory). Returns how long until that happens.
    /// The previous epoch's set kept from the store (see [`AppState::load_previous_set`])
    /// is dropped the same way.
    pub(crate) fn drop_retired(&self) -> Option<Duration> {
        let mut epochs = self.epochs.write().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let mut left = None;
        let mut dropped = false;
        if let Some((_, until)) = &epochs.retired {
            let l = until.saturating_duration_since(now);
            if l.is_zero() {
                epochs.retired = None;
                tracing::info!("previous key epoch no longer served");
                dropped = true;
            } else {
                left = Some(l);
            }
        }
        if let Some((_, until)) = &epochs.kept {
            let l = until.saturating_duration_since(now);
            if l.is_zero() {
                epochs.kept = None;
                tracing::info!("previous key epoch's encoded set no longer served");
            } else {
                left = Some(left.map_or(l, |x: Duration| x.min(l)));
            }
        }
        drop(epochs);
        if let (true, Some(f)) = (dropped, self.config.after_registry_change) {
            f();
        }
        left
    }

    /// True while a previous epoch is served (its registry or its kept set).
    pub(crate) fn serves_previous_epoch(&self) -> bool {
        let epochs = self.epochs.read().unwrap_or_else(|e| e.into_inner());
        epochs.retired.is_some() || epochs.kept.is_some()
    }

    /// Deletes from the shared store the sets of epochs whose overlap is over (nothing
    /// for SQLite, which keeps none). Blocking.
    pub(crate) fn forget_previous_sets(&self) -> Result<u64, StoreError> {
        if !matches!(self.config.db, storage::Database::Postgres(_)) {
            return Ok(0);
        }
        self.file_store()?
            .forget_previous_sets(self.config.epoch_overlap)
    }

    /// Re-reads the store (after an import or a key rotation) and swaps the registry in.
    /// Blocking. After a change of epoch, sessions of the previous epoch keep working for
    /// `epoch_overlap`, then get `epoch_mismatch`.
    pub fn reload(&self) -> Result<RegistryStats, StoreError> {
        let _one = self.rebuilding.lock().unwrap_or_else(|e| e.into_inner());
        let mut store = self.file_store()?;
        self.build_and_install(store.as_mut(), "registry reloaded")
    }

    /// Serves the store's registry if it differs from the one served (another process
    /// imported entries, removed some or rotated the key) and is complete
    /// ([`storage::RegistryStore::readiness`]). Reads `store` only: a change still being made is
    /// left alone (no output is computed here, so the server never competes with an
    /// import for the write lock) and picked up by a later call. When the change was
    /// made with another `--max-client-items` than this server's, its encoded set is
    /// encoded here from the stored outputs (not stored), served, and a warning says so
    /// once per change. Blocking. Returns the new registry's numbers, or `None` when
    /// there was nothing new to serve.
    pub fn reload_if_changed(
        &self,
        store: &mut dyn storage::RegistryStore,
    ) -> Result<Option<RegistryStats>, StoreError> {
        let _one = self.rebuilding.lock().unwrap_or_else(|e| e.into_inner());
        let served = self.registry().loaded_version();
        match store.readiness(self.config.max_client_items)?.version() {
            None => return Ok(None),
            Some(v) if v == served => return Ok(None),
            Some(_) => {}
        }
        let Some((registry, ready)) = Registry::read_ready(store, &self.config)? else {
            return Ok(None);
        };
        let loaded = registry.loaded_version();
        if loaded == served {
            return Ok(None);
        }
        let version = loaded.1;
        let stats = self.install(registry);
        if let Readiness::OtherSize { built_for, .. } = ready {
            tracing::warn!(
                epoch = stats.epoch,
                version,
                entries = stats.entries,
                built_for,
                max_client_items = self.config.max_client_items,
                build_ms = stats.build_time.as_millis() as u64,
                "change in the database picked up, but its encoded set was built for another \
                 --max-client-items than this server's: encoded it here (not stored) to serve it; \
                 run psi import and psi rotate-key with the server's --max-client-items"
            );
        } else {
            tracing::info!(
                epoch = stats.epoch,
                version,
                entries = stats.entries,
                "change in the database picked up"
            );
        }
        Ok(Some(stats))
    }

    /// Starts a new key epoch now: a fresh key in the store (the old one deleted and
    /// scrubbed), every entry's output and the encoded set computed under it, then the new
    /// registry swapped in; the old epoch stays served for `epoch_overlap`. Blocking and
    /// long (one OPRF output per entry on `build_threads` threads): requests keep being
    /// served from the old registry meanwhile. The scheduler of `rotate_every` does the
    /// same when the key is due.
    pub fn rotate(&self) -> Result<RegistryStats, StoreError> {
        let _one = self.rebuilding.lock().unwrap_or_else(|e| e.into_inner());
        let mut store = self.file_store()?;
        store.rotate_key()?;
        self.build_and_install(store.as_mut(), "new key epoch served")
    }

    /// One step of the `rotate_every` schedule. Blocking. Rotates when the current key is
    /// `rotate_every` old (a key of unknown age is due now), and builds the store's epoch
    /// when it is newer than the one served (a rotation whose build failed, or
    /// `psi rotate-key` without SIGHUP). Returns the time until the next rotation is due
    /// (zero after work: look again), `None` when scheduled rotation is off.
    pub(crate) fn scheduled_rotation(&self) -> Result<Option<Duration>, StoreError> {
        let Some(every) = self.config.rotate_every else {
            return Ok(None);
        };
        let _one = self.rebuilding.lock().unwrap_or_else(|e| e.into_inner());
        let mut store = self.file_store()?;
        // Of several instances on one store, one decides and rotates at a time; the others
        // find the new epoch and build nothing (the lease is held again by the refresh).
        let _lease = store.lease_builds()?;
        if store.current_key()?.epoch() == self.registry().dh.epoch() {
            let due = store.key_created()?.map_or(Duration::ZERO, |created| {
                // A period too long to add (a configuration mistake) never comes due.
                created.checked_add(every).map_or(Duration::MAX, |at| {
                    at.duration_since(std::time::SystemTime::now())
                        .unwrap_or(Duration::ZERO)
                })
            });
            if !due.is_zero() {
                return Ok(Some(due));
            }
            store.rotate_key()?;
        }
        self.build_and_install(store.as_mut(), "new key epoch served")?;
        Ok(Some(Duration::ZERO))
    }

    /// Brings the store up to date, loads its registry and swaps it in (the caller holds
    /// `rebuilding`).
    fn build_and_install(
        &self,
        store: &mut dyn storage::RegistryStore,
        what: &'static str,
    ) -> Result<RegistryStats, StoreError> {
        let registry = Registry::from_store(store, &self.config, &mut |_, _| {})?;
        let stats = self.install(registry);
        tracing::info!(
            epoch = stats.epoch,
            entries = stats.entries,
            held_mb = stats.held_bytes / 1_000_000,
            outputs_computed = stats.outputs_computed,
            build_ms = stats.build_time.as_millis() as u64,
            "{what}"
        );
        Ok(stats)
    }

    fn file_store(&self) -> Result<Box<dyn storage::RegistryStore>, StoreError> {
        if self.config.db.is_memory() {
            return Err(StoreError::InMemory);
        }
        self.config.db.open_registry()
    }

    /// The protocols this server runs, in wire-id order.
    pub fn protocols(&self) -> Vec<psi_core::Protocol> {
        psi_core::Protocol::ALL
            .iter()
            .copied()
            .filter(|&p| match p {
                psi_core::Protocol::Ot => self.config.enable_ot,
                psi_core::Protocol::Cm20 => self.config.enable_ot && self.config.enable_cm20,
                psi_core::Protocol::Gbf => self.config.enable_ot && self.config.enable_gbf,
                psi_core::Protocol::Dh => true,
            })
            .collect()
    }

    /// Live sessions (for tests and metrics).
    pub fn live_sessions(&self) -> usize {
        self.sessions.len()
    }

    /// OT-PSI runs in progress, i.e. OT slots taken (for tests and metrics).
    pub fn ot_runs_in_progress(&self) -> usize {
        self.sessions.ot_running()
    }
}

/// A state for the crate's unit tests: a fresh SQLite registry in its own temporary
/// directory (`name` keeps the directories of different tests apart) holding the one
/// entry `entry`, on `config`'s other settings; and that directory, for the test to remove.
#[cfg(test)]
pub(crate) fn test_state(
    name: &str,
    entry: &str,
    config: Config,
) -> (Arc<AppState>, std::path::PathBuf) {
    let dir = psi_test_support::fresh_dir(&format!("psi-server-{name}"));
    let config = Config {
        db: dir.join("registry.sqlite").into(),
        ..config
    };
    crate::storage::Store::open(config.db.sqlite_path().unwrap())
        .unwrap()
        .add_entries([(entry, None)])
        .unwrap();
    let registry = Registry::load(&config, &mut |_, _| {}).unwrap();
    (AppState::with_registry(config, registry), dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static CHANGES: AtomicUsize = AtomicUsize::new(0);

    fn count_change() {
        CHANGES.fetch_add(1, Ordering::SeqCst);
    }

    /// `psi serve` trims the allocator from this hook; a reload, a rotation or a
    /// retired epoch that does not call it leaves the load's freed memory resident.
    #[test]
    fn the_registry_change_hook_runs_after_each_install_and_when_an_old_epoch_goes() {
        let config = Config {
            after_registry_change: Some(count_change),
            epoch_overlap: Duration::ZERO,
            build_threads: 1,
            ..Config::default()
        };
        let (state, dir) = test_state("change-hook", "+12025550100", config);
        let calls = || CHANGES.load(Ordering::SeqCst);
        assert_eq!(calls(), 0, "loading before serving is the caller's to trim");
        state.reload().unwrap();
        assert_eq!(calls(), 1);
        state.rotate().unwrap();
        assert_eq!(calls(), 2);
        assert!(state.serves_previous_epoch());
        state.drop_retired();
        assert!(!state.serves_previous_epoch());
        assert_eq!(calls(), 3);
        // Nothing retired: nothing to trim.
        state.drop_retired();
        assert_eq!(calls(), 3);
        // A change another process made (`psi import` beside `psi serve`), picked up by
        // the store watcher: the path a 10^7 reload left 0.65 GB resident on.
        let path = state.config.db.sqlite_path().unwrap().to_path_buf();
        let mut store = crate::storage::Store::open(&path).unwrap();
        assert!(state.reload_if_changed(&mut store).unwrap().is_none());
        assert_eq!(calls(), 3, "nothing new: nothing installed");
        store.add_entries([("+12025550101", None)]).unwrap();
        crate::storage::refresh(
            &mut store,
            state.config.max_client_items,
            psi_core::Threads::ONE,
            &mut |_, _| {},
        )
        .unwrap();
        assert!(state.reload_if_changed(&mut store).unwrap().is_some());
        assert_eq!(calls(), 4);
        std::fs::remove_dir_all(dir).ok();
    }
}
