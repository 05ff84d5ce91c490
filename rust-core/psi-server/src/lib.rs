//! # psi-server
//!
//! The reference HTTP server of the PSI SDK (`docs/api.md`). It only moves bytes into
//! and out of psi-core: DH-PSI queries go to a shared, stateless [`psi_core::dh::DhServer`],
//! OT-PSI rounds to one [`psi_core::ot::OtServer`] per session.
//!
//! - Registry: SQLite ([`store::Store`]); the DH-PSI encoded set is built once per key
//!   epoch (and after changes, from stored per-entry outputs) and served with an ETag.
//! - Limits: body size, client set size, concurrent sessions, items per client per hour
//!   (per bearer token, else per client IP address or IPv6 prefix, behind trusted proxies
//!   taken from their forwarding header), budgets saved in the database; optional
//!   bearer-token authentication (static tokens, and tokens issued into the database).
//! - Logs carry counts, sizes, session ids and status codes only: never contact data,
//!   labels or keys.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod accounts;
mod api;
mod caller;
mod limits;
mod registry;
mod sessions;
pub mod store;

pub use api::router;
pub use caller::{ClientIpHeader, InvalidIpNet, IpNet};
pub use registry::{Registry, RegistryStats};
pub use store::{ImportCounts, Store, StoreError};

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;
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
    /// Tokens issued with their own budget (`psi token add --items-per-hour`) use theirs.
    pub items_per_hour: u64,
    /// Static bearer tokens (shared budgets: each token is one client). Authentication is
    /// on when this is not empty or when the database holds an issued token (`psi token`).
    pub tokens: Vec<String>,
    /// Peers whose forwarding header names the client (default: none, the TCP peer is
    /// the client). Only for proxies that append to `client_ip_header`.
    pub trusted_proxies: Vec<IpNet>,
    /// The header trusted proxies append the client address to (default X-Forwarded-For).
    pub client_ip_header: ClientIpHeader,
    /// Prefix length by which IPv4 clients share a budget (default 32: per address).
    pub ipv4_prefix: u8,
    /// Prefix length by which IPv6 clients share a budget (default 56: RIPE-690 §4.2
    /// recommends /56 for residential and /48 for business customers).
    pub ipv6_prefix: u8,
    /// Concurrent CPU-heavy jobs (query evaluations, OT rounds); default: cores.
    pub workers: usize,
    /// Threads for building the encoded set at start (default: cores).
    pub build_threads: usize,
    /// Serve OT-PSI sessions (default true).
    pub enable_ot: bool,
    /// Average label records per bucket a client fetches (default 32): more hides
    /// better which entries matched, at more bytes.
    pub label_bucket_size: usize,
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
            trusted_proxies: Vec::new(),
            client_ip_header: ClientIpHeader::XForwardedFor,
            ipv4_prefix: 32,
            ipv6_prefix: 56,
            workers: cores,
            build_threads: cores,
            enable_ot: true,
            label_bucket_size: 32,
        }
    }
}

/// Shared state of a running server.
pub struct AppState {
    pub(crate) config: Config,
    pub(crate) registry: RwLock<Arc<Registry>>,
    pub(crate) sessions: sessions::Sessions,
    pub(crate) limiter: limits::RateLimiter,
    /// Issued tokens and saved budgets (its own database connection).
    pub(crate) accounts: accounts::Accounts,
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

    /// State around an already loaded registry. Opens its own connection to the
    /// database for issued tokens and budgets (blocking) and restores the saved budgets.
    pub fn with_registry(config: Config, registry: Registry) -> Arc<AppState> {
        let limiter = limits::RateLimiter::new(config.items_per_hour);
        let accounts = accounts::Accounts::open(&config.db_path, &limiter);
        Arc::new(AppState {
            sessions: sessions::Sessions::new(
                sessions::SessionLimits {
                    total: config.max_sessions,
                    per_client: config.max_sessions_per_client,
                    ot: config.max_ot_sessions,
                },
                config.session_ttl,
            ),
            limiter,
            accounts,
            workers: tokio::sync::Semaphore::new(config.workers.max(1)),
            registry: RwLock::new(Arc::new(registry)),
            config,
        })
    }

    /// The registry in use.
    pub fn registry(&self) -> Arc<Registry> {
        self.registry
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Re-reads the store (after an import or a key rotation) and swaps the registry in.
    /// Blocking. Sessions of an older epoch get `epoch_mismatch` on their next query.
    pub fn reload(&self) -> Result<RegistryStats, StoreError> {
        let registry = Registry::load(&self.config, &mut |_, _| {})?;
        let stats = registry.stats();
        *self.registry.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(registry);
        tracing::info!(
            epoch = stats.epoch,
            entries = stats.entries,
            "registry reloaded"
        );
        Ok(stats)
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
            let mut tick = tokio::time::interval(accounts::SAVE_EVERY);
            loop {
                tick.tick().await;
                let removed = state.sessions.sweep();
                let st = state.clone();
                let _ = tokio::task::spawn_blocking(move || st.accounts.save_budgets(&st.limiter))
                    .await;
                state.limiter.sweep();
                if removed > 0 {
                    tracing::debug!(removed, "expired sessions removed");
                }
            }
        })
    };
    let app = router(state.clone()).into_make_service_with_connect_info::<SocketAddr>();
    // Request/response traffic: no Nagle delay on a response's last segment.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await;
    sweeper.abort();
    // The budgets charged since the last save survive a shutdown.
    let _ = tokio::task::spawn_blocking(move || state.accounts.save_budgets(&state.limiter)).await;
    result
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
