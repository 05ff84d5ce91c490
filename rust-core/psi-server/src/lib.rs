//! # psi-server
//!
//! The reference HTTP server of the PSI SDK (`docs/api.md`). It only moves bytes into
//! and out of psi-core: DH-PSI queries go to a shared, stateless [`psi_core::dh::DhServer`],
//! OT-PSI rounds to one [`psi_core::ot::OtServer`] per session.
//!
//! - Registry: SQLite ([`store::Store`]); the DH-PSI encoded set is built once per key
//!   epoch (and after changes, from stored per-entry outputs) and served with an ETag.
//! - Limits: body size, client set size, concurrent sessions, items per client per hour
//!   (per bearer token or per peer IP), optional bearer-token authentication.
//! - Logs carry counts, sizes, session ids and status codes only: never contact data,
//!   labels or keys.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod api;
mod limits;
mod registry;
mod sessions;
pub mod store;

pub use api::router;
pub use registry::{Registry, RegistryStats};
pub use store::{ImportCounts, Store, StoreError};

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

/// Server settings. [`Config::default`] gives the documented defaults.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// SQLite file (secret material: holds the OPRF key). `:memory:` for a throwaway store.
    pub db_path: PathBuf,
    /// Largest request body in bytes (default 8 MiB).
    pub max_body_bytes: usize,
    /// Largest client set per session (default 10,000; also sizes the encoded set's `L`).
    pub max_client_items: usize,
    /// Most live sessions at once (default 1,024).
    pub max_sessions: usize,
    /// Most live sessions of one caller, token or IP (default 16).
    pub max_sessions_per_client: usize,
    /// Most live OT-PSI sessions (default 8): each holds state of about 90 bytes per
    /// registry entry until it ends or expires.
    pub max_ot_sessions: usize,
    /// Session lifetime (default 300 s).
    pub session_ttl: Duration,
    /// Longest a request may take, body upload included (default 120 s): slow or stalled
    /// uploads cannot pin memory and connections for long.
    pub request_timeout: Duration,
    /// Items one client (token or IP) may query per hour (default 20,000; 0 = no limit).
    pub items_per_hour: u64,
    /// Accepted bearer tokens; empty = no authentication.
    pub tokens: Vec<String>,
    /// Concurrent CPU-heavy jobs (query evaluations, OT rounds); default: cores.
    pub workers: usize,
    /// Threads for building the encoded set at start (default: cores).
    pub build_threads: usize,
    /// Serve OT-PSI sessions (default true).
    pub enable_ot: bool,
    /// Average label records per bucket a client fetches (default 32): more hides
    /// better which entries matched, at more bytes.
    pub label_bucket_size: usize,
    /// Start a new key epoch this long after the current key was created (default 24 h;
    /// `None`: only `psi rotate-key`). The new epoch's outputs and encoded set are built in
    /// the background and swapped in whole (ADR 0017). Needs a database file.
    pub rotate_every: Option<Duration>,
    /// How long the previous epoch keeps being served after a new one is swapped in
    /// (default 300 s, the default session lifetime): sessions created before the swap
    /// finish with the key they started with. One previous epoch is kept.
    pub epoch_overlap: Duration,
}

impl Default for Config {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Config {
            db_path: PathBuf::from("psi-registry.sqlite"),
            max_body_bytes: 8 << 20,
            max_client_items: 10_000,
            max_sessions: 1024,
            max_sessions_per_client: 16,
            max_ot_sessions: 8,
            session_ttl: Duration::from_secs(300),
            request_timeout: Duration::from_secs(120),
            items_per_hour: 20_000,
            tokens: Vec::new(),
            workers: cores,
            build_threads: cores,
            enable_ot: true,
            label_bucket_size: 32,
            rotate_every: Some(Duration::from_secs(24 * 3600)),
            epoch_overlap: Duration::from_secs(300),
        }
    }
}

/// The epochs served: the current registry and, for `epoch_overlap` after a swap to a
/// new epoch, the previous one. Swapped under one lock, so a reader sees both or neither.
pub(crate) struct Epochs {
    current: Arc<Registry>,
    /// The previous epoch's registry and when it stops being served.
    retired: Option<(Arc<Registry>, Instant)>,
}

/// Shared state of a running server.
pub struct AppState {
    pub(crate) config: Config,
    pub(crate) epochs: RwLock<Epochs>,
    /// Held while a registry is built from the store (reload, rotation): one at a time.
    rebuilding: Mutex<()>,
    /// Wakes the epoch task when a previous epoch starts its overlap.
    epoch_retired: tokio::sync::Notify,
    pub(crate) sessions: sessions::Sessions,
    pub(crate) limiter: limits::RateLimiter,
    pub(crate) workers: tokio::sync::Semaphore,
}

impl AppState {
    /// Opens the store, brings the encoded set up to date and loads the registry.
    /// Blocking (may compute OPRF outputs): call it before starting the runtime's
    /// server loop or inside `spawn_blocking`.
    pub fn open(config: Config) -> Result<Arc<AppState>, StoreError> {
        let registry = Registry::load(&config, &mut |_, _| {})?;
        Ok(Self::with_registry(config, registry))
    }

    /// State around an already loaded registry.
    pub fn with_registry(config: Config, registry: Registry) -> Arc<AppState> {
        Arc::new(AppState {
            sessions: sessions::Sessions::new(
                sessions::SessionLimits {
                    total: config.max_sessions,
                    per_client: config.max_sessions_per_client,
                    ot: config.max_ot_sessions,
                },
                config.session_ttl,
            ),
            limiter: limits::RateLimiter::new(config.items_per_hour),
            workers: tokio::sync::Semaphore::new(config.workers.max(1)),
            epochs: RwLock::new(Epochs {
                current: Arc::new(registry),
                retired: None,
            }),
            rebuilding: Mutex::new(()),
            epoch_retired: tokio::sync::Notify::new(),
            config,
        })
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

    /// Swaps `registry` in. A registry of another epoch than the current one retires the
    /// current one, which stays served for `epoch_overlap`; one of the same epoch (after
    /// an import) replaces it and keeps the previous epoch's overlap as it was.
    fn install(&self, registry: Registry) -> RegistryStats {
        let stats = registry.stats();
        let registry = Arc::new(registry);
        let mut epochs = self.epochs.write().unwrap_or_else(|e| e.into_inner());
        let old = std::mem::replace(&mut epochs.current, registry);
        if old.dh.epoch() != stats.epoch {
            epochs.retired = Some((old, Instant::now() + self.config.epoch_overlap));
            self.epoch_retired.notify_one();
        }
        stats
    }

    /// Drops the previous epoch once its overlap is over (its sessions are refused from
    /// then on anyway; this frees its memory). Returns how long until that happens.
    fn drop_retired(&self) -> Option<Duration> {
        let mut epochs = self.epochs.write().unwrap_or_else(|e| e.into_inner());
        let until = epochs.retired.as_ref()?.1;
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            epochs.retired = None;
            tracing::info!("previous key epoch no longer served");
            return None;
        }
        Some(left)
    }

    /// Re-reads the store (after an import or a key rotation) and swaps the registry in.
    /// Blocking. After a change of epoch, sessions of the previous epoch keep working for
    /// `epoch_overlap`, then get `epoch_mismatch`.
    pub fn reload(&self) -> Result<RegistryStats, StoreError> {
        let _one = self.rebuilding.lock().unwrap_or_else(|e| e.into_inner());
        let mut store = self.file_store()?;
        self.build_and_install(&mut store, "registry reloaded")
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
        self.build_and_install(&mut store, "new key epoch served")
    }

    /// One step of the `rotate_every` schedule. Blocking. Rotates when the current key is
    /// `rotate_every` old (a key of unknown age is due now), and builds the store's epoch
    /// when it is newer than the one served (a rotation whose build failed, or
    /// `psi rotate-key` without SIGHUP). Returns the time until the next rotation is due
    /// (zero after work: look again), `None` when scheduled rotation is off.
    fn scheduled_rotation(&self) -> Result<Option<Duration>, StoreError> {
        let Some(every) = self.config.rotate_every else {
            return Ok(None);
        };
        let _one = self.rebuilding.lock().unwrap_or_else(|e| e.into_inner());
        let mut store = self.file_store()?;
        if store.current_key()?.epoch() == self.registry().dh.epoch() {
            let due = store.key_created()?.map_or(Duration::ZERO, |created| {
                (created + every)
                    .duration_since(std::time::SystemTime::now())
                    .unwrap_or(Duration::ZERO)
            });
            if !due.is_zero() {
                return Ok(Some(due));
            }
            store.rotate_key()?;
        }
        self.build_and_install(&mut store, "new key epoch served")?;
        Ok(Some(Duration::ZERO))
    }

    /// Brings the store up to date, loads its registry and swaps it in (the caller holds
    /// `rebuilding`).
    fn build_and_install(
        &self,
        store: &mut Store,
        what: &'static str,
    ) -> Result<RegistryStats, StoreError> {
        let registry = Registry::from_store(store, &self.config, &mut |_, _| {})?;
        let stats = self.install(registry);
        tracing::info!(
            epoch = stats.epoch,
            entries = stats.entries,
            outputs_computed = stats.outputs_computed,
            build_ms = stats.build_time.as_millis() as u64,
            "{what}"
        );
        Ok(stats)
    }

    fn file_store(&self) -> Result<Store, StoreError> {
        let store = Store::open(&self.config.db_path)?;
        if store.is_memory() {
            return Err(StoreError::InMemory);
        }
        Ok(store)
    }

    /// The protocols this server runs, in wire-id order.
    pub fn protocols(&self) -> Vec<psi_core::Protocol> {
        psi_core::Protocol::ALL
            .iter()
            .copied()
            .filter(|&p| p != psi_core::Protocol::Ot || self.config.enable_ot)
            .collect()
    }

    /// Live sessions (for tests and metrics).
    pub fn live_sessions(&self) -> usize {
        self.sessions.len()
    }
}

/// Serves `state` on `listener` until `shutdown` resolves, then finishes the requests in
/// flight (graceful shutdown). Expired sessions are swept every few seconds.
pub async fn serve(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let sweeper = {
        let state = state.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(5));
            loop {
                tick.tick().await;
                let removed = state.sessions.sweep();
                state.limiter.sweep();
                if removed > 0 {
                    tracing::debug!(removed, "expired sessions removed");
                }
            }
        })
    };
    let epochs = tokio::spawn(maintain_epochs(state.clone()));
    let app = router(state).into_make_service_with_connect_info::<SocketAddr>();
    // Request/response traffic: no Nagle delay on a response's last segment.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await;
    sweeper.abort();
    epochs.abort();
    result
}

/// Longest the epoch task sleeps before looking again (the store may have been rotated
/// by hand, the clock may have moved).
const EPOCH_CHECK: Duration = Duration::from_secs(3600);
/// Wait after a failed rotation before the next attempt.
const ROTATION_RETRY: Duration = Duration::from_secs(60);

/// The key-epoch task of a running server: rotates the key when `rotate_every` is due
/// (the work on a blocking thread, requests served meanwhile from the current epoch),
/// and drops the previous epoch when its overlap ends.
async fn maintain_epochs(state: Arc<AppState>) {
    let scheduled =
        state.config.rotate_every.is_some() && state.config.db_path.as_os_str() != ":memory:";
    if state.config.rotate_every.is_some() && !scheduled {
        tracing::debug!("scheduled key rotation is off: the registry store is in memory");
    }
    loop {
        let retired_left = state.drop_retired();
        let mut wait = EPOCH_CHECK;
        if scheduled {
            let st = state.clone();
            match tokio::task::spawn_blocking(move || st.scheduled_rotation()).await {
                Ok(Ok(Some(due))) if due.is_zero() => continue,
                Ok(Ok(Some(due))) => wait = due,
                Ok(Ok(None)) => {}
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "scheduled key rotation failed");
                    wait = ROTATION_RETRY;
                }
                Err(_) => {
                    tracing::error!("scheduled key rotation task failed");
                    wait = ROTATION_RETRY;
                }
            }
        }
        if let Some(left) = retired_left {
            wait = wait.min(left);
        }
        // A reload (SIGHUP) that changes the epoch wakes the task to time the overlap.
        tokio::select! {
            () = tokio::time::sleep(wait.min(EPOCH_CHECK)) => {}
            () = state.epoch_retired.notified() => {}
        }
    }
}

/// A server running on a background runtime: for tests, the demo and embedding.
pub struct RunningServer {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// Its state.
    pub state: Arc<AppState>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<std::io::Result<()>>>,
}

impl RunningServer {
    /// Starts `state` on `addr` (use port 0 for any free port) in a new thread with its
    /// own tokio runtime.
    pub fn start(state: Arc<AppState>, addr: SocketAddr) -> std::io::Result<RunningServer> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let listener = rt.block_on(TcpListener::bind(addr))?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let st = state.clone();
        let thread = std::thread::Builder::new()
            .name("psi-server".into())
            .spawn(move || {
                rt.block_on(serve(listener, st, async {
                    let _ = stopped.await;
                }))
            })?;
        Ok(RunningServer {
            addr,
            state,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting, finishes requests in flight and joins the server thread.
    pub fn shutdown(mut self) -> std::io::Result<()> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> std::io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("server thread panicked"))),
            None => Ok(()),
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}
