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
//!   taken from their forwarding header, and then also per IPv4 /24, IPv6 /48 and /32 and
//!   under a server-wide ceiling), budgets saved in the database, encoded-set download
//!   bytes per client per hour; optional bearer-token authentication (static tokens, and
//!   tokens issued into the database).
//! - Logs carry counts, sizes, session ids and status codes only: never contact data,
//!   labels or keys.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod accounts;
mod api;
mod caller;
mod instance;
mod limits;
mod listen;
mod registry;
pub mod sealing;
mod sessions;
pub mod storage;
mod store_health;
mod tls;

pub use api::{PROBE_REQUEST_FLOOR, router};
pub use caller::{ClientIpHeader, InvalidIpNet, IpNet};
pub use instance::{InstanceName, InvalidInstanceName, MAX_INSTANCE_NAME_LEN};
pub use registry::{Registry, RegistryStats};
pub use storage::{Database, ImportCounts, Readiness, Store, StoreError};
pub use tls::{ServerTls, TlsError};

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

/// Server settings. [`Config::default`] gives the documented defaults.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// The store (`psi serve --db`): a SQLite file (secret material: holds the OPRF key;
    /// `:memory:` for a throwaway store), or the shared store of several instances.
    pub db: storage::Database,
    /// This instance's name, the prefix of its session ids (`psi serve --instance`): a
    /// load balancer in front of several instances routes a session's requests by it, and
    /// a session step that reaches another instance is answered `421 wrong_instance`
    /// (docs/deploy/nginx.conf). `None` (the default): 8 random hex digits chosen at
    /// start ([`AppState::instance`]).
    pub instance: Option<InstanceName>,
    /// Largest request body in bytes (default 8 MiB).
    pub max_body_bytes: usize,
    /// Largest client set per session (default 10,000; also sizes the encoded set's `L`).
    pub max_client_items: usize,
    /// Most live sessions at once (default 16,384: a session waiting for its query holds a
    /// few hundred bytes, so the default table is a few MB; OT-PSI runs have their own
    /// cap, `max_ot_sessions`). At the cap the oldest idle session of the address block
    /// holding the most sessions is ended to make room for the new one
    /// (docs/adr/0034-session-table-limits.md).
    pub max_sessions: usize,
    /// Most live sessions of one caller, token or IP (default 16).
    pub max_sessions_per_client: usize,
    /// Most live sessions of one address block, `ipv4_block_prefix` or
    /// `ipv6_block_prefix` (default 256): many addresses of one network count together.
    /// A token caller is its own block.
    pub max_sessions_per_block: usize,
    /// Prefix length of the IPv4 address block for `max_sessions_per_block` (default 24;
    /// never narrower than `ipv4_prefix`).
    pub ipv4_block_prefix: u8,
    /// Prefix length of the IPv6 address block for `max_sessions_per_block` (default 48;
    /// never narrower than `ipv6_prefix`).
    pub ipv6_block_prefix: u8,
    /// A session with no successful step for this long, and no request under way, is
    /// ended whatever its phase (default 30 s): refused requests do not count, so a
    /// session that makes no progress cannot hold its place in the table.
    pub session_idle_timeout: Duration,
    /// An OT-PSI or CM20-PSI session whose hello has not been answered this long after
    /// its creation is ended and its OT slot freed (default 10 s; a request under way
    /// does not extend it).
    pub ot_hello_timeout: Duration,
    /// Most OT-PSI runs in progress (default 8): each holds state of about 90 bytes per
    /// registry entry until its run ends (outputs sent or failed), it is deleted or it
    /// expires.
    pub max_ot_sessions: usize,
    /// Most OT-PSI runs in progress of one caller, token or IP (default 2).
    pub max_ot_sessions_per_client: usize,
    /// OT-PSI sessions one caller may start per hour (default 30; 0 = no limit): each costs
    /// the server O(registry size) work and memory whatever its `n`
    /// (`docs/adr/0015-ot-psi-admission-and-charging.md`).
    pub ot_sessions_per_hour: u64,
    /// Session lifetime (default 300 s).
    pub session_ttl: Duration,
    /// Longest a request may take, body upload included (default 120 s): slow or stalled
    /// uploads cannot pin memory and connections for long.
    pub request_timeout: Duration,
    /// Items one client (token or IP) may query per hour (default 20,000; 0 = no limit).
    /// Tokens issued with their own budget (`psi token add --items-per-hour`) use theirs.
    pub items_per_hour: u64,
    /// Per-caller budgets an IPv4 address block (`ipv4_block_prefix`, a /24) shares per
    /// hour beside each caller's own (default 4; 0 = no block budget): many addresses of
    /// one network get a few budgets, not one each (docs/adr/0038-budgets-per-address-block.md).
    /// Applies to the items and the encoded-set download budgets of callers without a
    /// token.
    pub ipv4_block_budgets: u64,
    /// Per-caller budgets an IPv6 site (`ipv6_block_prefix`, a /48) shares per hour beside
    /// each caller's own /56 (default 4; 0 = none).
    pub ipv6_block_budgets: u64,
    /// Prefix length of the IPv6 allocation whose callers share
    /// `ipv6_allocation_budgets` (default 32, an operator's usual allocation).
    pub ipv6_allocation_prefix: u8,
    /// Per-caller budgets an IPv6 allocation (`ipv6_allocation_prefix`, a /32) shares per
    /// hour (default 16; 0 = none).
    pub ipv6_allocation_budgets: u64,
    /// Per-caller budgets all callers without a token share per hour, server-wide
    /// (default 50: 10^6 items an hour at the default `items_per_hour`; 0 = no ceiling).
    /// Token callers are never charged to it. An internet-facing server should run with
    /// tokens: without them, whoever holds enough networks can spend this ceiling and
    /// leave other callers without a budget until it refills.
    pub address_ceiling_budgets: u64,
    /// Bytes of full encoded-set downloads (`GET /v1/dh/encoded-set` answered 200) one
    /// caller may take per hour (default 64 MiB, about 10 downloads of a set of 10^6
    /// entries; 0 = no limit); 304 answers are free. A set larger than this is charged
    /// this (one download an hour). Callers without a token share it also per network and
    /// under the ceiling, as the items budget. In memory only.
    pub encoded_set_bytes_per_hour: u64,
    /// Probe bytes (`/v1/probe`, both ways) one client may move per hour (default 16 MiB,
    /// 64 probes of the largest size; 0 = no limit).
    pub probe_bytes_per_hour: u64,
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
    /// Concurrent CPU-heavy jobs other than OT rounds (DH queries, label steps); default:
    /// cores.
    pub workers: usize,
    /// Concurrent OT-PSI rounds, a pool of their own so DH-PSI stays served while OT
    /// sessions are busy (default: half the cores, at least 1).
    pub ot_workers: usize,
    /// An OT-PSI run with no successful round for this long, and no request of its
    /// session in progress, is ended and its OT slot freed (default 30 s): a caller that
    /// opens OT sessions and stalls cannot hold the OT slots until the sessions expire.
    pub ot_idle_timeout: Duration,
    /// Threads for building the encoded set at start (default: cores).
    pub build_threads: usize,
    /// Serve OT-PSI sessions (default true).
    pub enable_ot: bool,
    /// Serve CM20-PSI sessions (default false: CM20 is secure against semi-honest clients
    /// only; a malicious client can evaluate the OPRF on any inputs it likes and test them
    /// against the registry offline; docs/adr/0021-cm20-psi.md). Needs `enable_ot` too
    /// (CM20 runs share the OT slots, budget and workers).
    pub enable_cm20: bool,
    /// Target average label records per bucket (default 8: buckets hold 8 to 16 on
    /// average, so a client of 1,000 contacts fetches under 1 MB of labels from 10^6
    /// labelled entries; docs/adr/0033-a-label-for-every-match.md). More hides each
    /// fetched bucket among more entries, at proportionally more bytes per run; below 4
    /// clients refuse the layout (`psi_core::labels::MIN_BUCKET_OCCUPANCY`).
    pub label_bucket_size: usize,
    /// Longest a request head may take from its first byte to its end, and a TLS
    /// handshake from accept to its end (default 20 s, Apache's `RequestReadTimeout`
    /// header default): a client trickling a request head is cut off.
    pub header_read_timeout: Duration,
    /// A connection with no request in progress is closed after this long without a byte
    /// from the client (default 30 s): above the pause between the requests of one run,
    /// above ureq's 15 s pool age, so the client never reuses a connection being closed.
    pub idle_timeout: Duration,
    /// Most open connections (default 512, below the usual 1,024 open-file limit so
    /// the SQLite file and the listener always get descriptors). At the cap the
    /// connection with no request in progress that has been quiet longest is closed to
    /// make room; when every connection has a request in progress, further connections
    /// queue in the listen backlog until one closes
    /// (docs/adr/0037-connection-exposure.md).
    pub max_connections: usize,
    /// Most open connections of one address (default 32; IPv4 addresses and IPv6
    /// prefixes as `ipv4_prefix` and `ipv6_prefix` make a caller; trusted proxies are
    /// exempt). A newcomer beyond it closes that address's longest-quiet idle
    /// connection, or is closed at once when all of them are busy.
    pub max_connections_per_address: usize,
    /// Bytes per second a client must at least read a response at (default 8 KiB/s,
    /// 64 kbit/s; 0: no limit): a response must be written within `send_grace` plus
    /// its size at this rate, or the connection is closed. A slow reader cannot pin a
    /// large response.
    pub min_send_rate: u64,
    /// Time every response gets before `min_send_rate` counts (default 10 s).
    pub send_grace: Duration,
    /// Most response bytes handed over and not yet written to the sockets, in total
    /// (default 512 MiB). At the cap the connection whose response has been sending
    /// longest (at least `send_grace`) is closed to admit a new request; only when there
    /// is none is the request refused (503 `too_many_sessions`).
    pub max_response_bytes_in_flight: u64,
    /// Most unwritten response bytes of one address (default 64 MiB; trusted proxies
    /// exempt): a request from an address at the cap is refused (429 `rate_limited`)
    /// until its readers catch up. An address with nothing in flight is always admitted,
    /// so one response of any size is always possible.
    pub max_response_bytes_per_address: u64,
    /// `GET /v1/health` requests one address may make per hour (default 3,600, a
    /// bucket refilled continuously; 0 = no limit). Beyond it: 429 `rate_limited`, and
    /// the connection is closed.
    pub health_per_hour: u64,
    /// TLS certificate and key; `None` serves plain HTTP (loopback, or behind a TLS
    /// proxy).
    pub tls: Option<ServerTls>,
    /// Start a new key epoch this long after the current key was created (default 24 h;
    /// `None`: only `psi rotate-key`). The new epoch's outputs and encoded set are built in
    /// the background and swapped in whole (ADR 0017). Needs a database file.
    pub rotate_every: Option<Duration>,
    /// How often the server looks at its database file for a change made by another
    /// process (`psi import`, `psi rotate-key`) and, once the change is complete, serves
    /// it (default 2 s; `None`: only on [`AppState::reload`], i.e. SIGHUP). A cheap
    /// read-only query; the server never writes to pick a change up
    /// ([`AppState::reload_if_changed`]).
    pub watch_store: Option<Duration>,
    /// How long the previous epoch keeps being served after a new one is swapped in
    /// (default 300 s, the default session lifetime): sessions created before the swap
    /// finish with the key they started with. One previous epoch is kept.
    pub epoch_overlap: Duration,
}

impl Default for Config {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Config {
            db: storage::Database::Sqlite(PathBuf::from("psi-registry.sqlite")),
            instance: None,
            max_body_bytes: 8 << 20,
            max_client_items: 10_000,
            max_sessions: 16_384,
            max_sessions_per_client: 16,
            max_sessions_per_block: 256,
            ipv4_block_prefix: 24,
            ipv6_block_prefix: 48,
            session_idle_timeout: Duration::from_secs(30),
            ot_hello_timeout: Duration::from_secs(10),
            max_ot_sessions: 8,
            max_ot_sessions_per_client: 2,
            ot_sessions_per_hour: 30,
            session_ttl: Duration::from_secs(300),
            request_timeout: Duration::from_secs(120),
            items_per_hour: 20_000,
            probe_bytes_per_hour: 16 << 20,
            ipv4_block_budgets: 4,
            ipv6_block_budgets: 4,
            ipv6_allocation_prefix: 32,
            ipv6_allocation_budgets: 16,
            address_ceiling_budgets: 50,
            encoded_set_bytes_per_hour: 64 << 20,
            tokens: Vec::new(),
            trusted_proxies: Vec::new(),
            client_ip_header: ClientIpHeader::XForwardedFor,
            ipv4_prefix: 32,
            ipv6_prefix: 56,
            workers: cores,
            ot_workers: (cores / 2).max(1),
            ot_idle_timeout: Duration::from_secs(30),
            build_threads: cores,
            enable_ot: true,
            enable_cm20: false,
            label_bucket_size: 8,
            header_read_timeout: Duration::from_secs(20),
            idle_timeout: Duration::from_secs(30),
            max_connections: 512,
            max_connections_per_address: 32,
            min_send_rate: 8 << 10,
            send_grace: Duration::from_secs(10),
            max_response_bytes_in_flight: 512 << 20,
            max_response_bytes_per_address: 64 << 20,
            health_per_hour: 3_600,
            tls: None,
            rotate_every: Some(Duration::from_secs(24 * 3600)),
            watch_store: Some(Duration::from_secs(2)),
            epoch_overlap: Duration::from_secs(300),
        }
    }
}

/// Times the cost model's kernels on this machine (one thread: each session step runs
/// on one worker) and adds the worker counts.
fn measure_costs(config: &Config) -> psi_http::ServerCosts {
    let u = psi_core::calibrate::unit_costs(psi_core::Threads::ONE);
    psi_http::ServerCosts {
        scalar_mult_ns: u.scalar_mult,
        hash_to_group_ns: u.hash_to_group,
        element_decode_ns: u.element_decode,
        aes_block_ns: u.aes_block,
        hash_block_ns: u.hash_block,
        entry_ns: u.entry,
        cm20_lookup_ns: Some(u.cm20_lookup),
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
    epoch_retired: tokio::sync::Notify,
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
    /// Issued tokens and saved budgets (its own database connection).
    pub(crate) accounts: accounts::Accounts,
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
    /// database for issued tokens and budgets (blocking) and restores the saved budgets.
    pub fn with_registry(config: Config, registry: Registry) -> Arc<AppState> {
        let limiter = limits::RateLimiter::new(config.items_per_hour);
        let accounts = accounts::Accounts::open(&config.db, &limiter, config.session_ttl);
        let instance = config.instance.clone().unwrap_or_else(InstanceName::random);
        // Several instances on one PostgreSQL charge every budget in its shared table (one
        // pool for all four): a caller spreading requests over them has one budget.
        let shared = match &config.db {
            storage::Database::Postgres(pg) => {
                Some(storage::postgres::budgets::SharedBudgets::open(pg))
            }
            _ => None,
        };
        use storage::postgres::budgets::Book;
        let book = |limiter: limits::RateLimiter, book: Book| match &shared {
            Some(store) => limits::Budgets::shared(limiter, book, store.clone()),
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
        if let Some(store) = &shared {
            sessions.share_ot_budget(store.clone());
        }
        Arc::new(AppState {
            instance,
            sessions,
            limiter: book(limiter, Book::Items),
            probe_limiter: book(
                limits::RateLimiter::in_memory(config.probe_bytes_per_hour),
                Book::ProbeBytes,
            ),
            health_limiter: limits::RateLimiter::in_memory(config.health_per_hour),
            download_limiter: book(
                limits::RateLimiter::in_memory(config.encoded_set_bytes_per_hour),
                Book::DownloadBytes,
            ),
            accounts,
            store_health: store_health::StoreHealth::default(),
            workers: Arc::new(tokio::sync::Semaphore::new(config.workers.max(1))),
            ot_workers: Arc::new(tokio::sync::Semaphore::new(config.ot_workers.max(1))),
            costs: measure_costs(&config),
            epochs: RwLock::new(Epochs {
                current: Arc::new(registry),
                retired: None,
            }),
            rebuilding: Mutex::new(()),
            epoch_retired: tokio::sync::Notify::new(),
            config,
        })
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

    /// Swaps `registry` in. A registry of another epoch than the current one retires the
    /// current one, which stays served for `epoch_overlap`; one of the same epoch (after
    /// an import) replaces it and keeps the previous epoch's overlap as it was.
    fn install(&self, registry: Registry) -> RegistryStats {
        let stats = registry.stats();
        let registry = Arc::new(registry);
        let mut epochs = self.epochs.write().unwrap_or_else(|e| e.into_inner());
        let old = std::mem::replace(&mut epochs.current, registry);
        if old.dh.epoch() != stats.epoch {
            epochs.retired = Some((old, instant_after(self.config.epoch_overlap)));
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
    fn scheduled_rotation(&self) -> Result<Option<Duration>, StoreError> {
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
                _ => true,
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

/// Serves `state` on `listener` until `shutdown` resolves, then finishes the requests in
/// flight (graceful shutdown). HTTPS when [`Config::tls`] is set. Connections are limited
/// by [`Config::header_read_timeout`], [`Config::idle_timeout`],
/// [`Config::max_connections`], [`Config::max_connections_per_address`], the write
/// deadline of [`Config::min_send_rate`] and the response bytes in flight
/// (docs/adr/0019-tls-and-connection-limits.md, docs/adr/0037-connection-exposure.md).
/// Background tasks run beside the accept loop and stop with it.
pub async fn serve(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // Background tasks: aborted when the server stops.
    let mut background = Vec::new();
    // Expired sessions and idle rate-limit entries.
    background.push({
        let state = state.clone();
        tokio::spawn(async move {
            // Sessions are swept often enough to keep their idle and hello periods;
            // budgets are saved every `SAVE_EVERY`.
            let mut tick = tokio::time::interval(state.sessions.sweep_every(accounts::SAVE_EVERY));
            let mut saved: Option<Instant> = None;
            loop {
                tick.tick().await;
                let removed = state.sessions.sweep();
                if removed > 0 {
                    tracing::debug!(removed, "expired sessions removed");
                }
                if saved.is_some_and(|t| t.elapsed() < accounts::SAVE_EVERY) {
                    continue;
                }
                saved = Some(Instant::now());
                let st = state.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    st.accounts.save_budgets(st.limiter.limiter())
                })
                .await;
                state.limiter.limiter().sweep();
                state.probe_limiter.limiter().sweep();
                state.health_limiter.sweep();
                state.download_limiter.limiter().sweep();
                // Shared budgets: rows full again are deleted (one statement for all).
                if let Some(store) = state.limiter.shared_store()
                    && let Err(e) = store.sweep().await
                {
                    tracing::warn!(error = %e, "sweeping the shared budgets failed");
                }
            }
        })
    });
    // Scheduled key rotation and the end of a previous epoch's overlap.
    background.push(tokio::spawn(maintain_epochs(state.clone())));
    if let Some(every) = state.config.watch_store
        && !state.config.db.is_memory()
    {
        background.push(tokio::spawn(watch_store(state.clone(), every)));
    }
    let limits = listen::Limits {
        header_read_timeout: state.config.header_read_timeout,
        idle_timeout: state.config.idle_timeout,
        max_connections: state.config.max_connections,
        max_connections_per_address: state.config.max_connections_per_address,
        min_send_rate: state.config.min_send_rate,
        send_grace: state.config.send_grace,
        max_response_bytes_in_flight: state.config.max_response_bytes_in_flight,
        max_response_bytes_per_address: state.config.max_response_bytes_per_address,
        trusted_proxies: state.config.trusted_proxies.clone(),
        ipv4_prefix: state.config.ipv4_prefix,
        ipv6_prefix: state.config.ipv6_prefix,
    };
    let tls = state.config.tls.as_ref().map(ServerTls::acceptor);
    let result = listen::run(listener, router(state.clone()), tls, limits, shutdown).await;
    for task in background {
        task.abort();
    }
    // The budgets charged since the last save survive a shutdown.
    let _ =
        tokio::task::spawn_blocking(move || state.accounts.save_budgets(state.limiter.limiter()))
            .await;
    result
}

/// Every `every`, picks up a change another process made to the database file
/// ([`AppState::reload_if_changed`]). Keeps one read-only connection open between looks
/// ([`storage::Database::open_registry_read_only`]: the watcher never creates or writes anything); after an
/// error (logged once per failure streak) it opens a new one. It is also the probe of
/// [`AppState::store_health`]: a look that fails for the connection marks the store
/// unavailable, the next one that succeeds marks it available again.
async fn watch_store(state: Arc<AppState>, every: Duration) {
    let mut store = HeldStore(None);
    let mut failing = false;
    loop {
        tokio::time::sleep(every).await;
        let st = state.clone();
        // Moved in and out as a HeldStore, so that however the connection ends (this
        // look failing, the task dropped before it ran when the runtime shuts down) it is
        // dropped off the async workers.
        let held = HeldStore(store.0.take());
        let looked = tokio::task::spawn_blocking(move || {
            let mut held = held;
            let s = match held.0.as_mut() {
                Some(s) => s,
                None => held.0.insert(st.config.db.open_registry_read_only()?),
            };
            st.reload_if_changed(s.as_mut())?;
            Ok::<_, StoreError>(held)
        })
        .await;
        match looked {
            Ok(Ok(mut s)) => {
                store.0 = s.0.take();
                failing = false;
                state.store_health.answered();
            }
            Ok(Err(e)) if state.store_health.failed(&e) => failing = true,
            Ok(Err(e)) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "looking for a database change failed");
            }
            Ok(Err(_)) => {}
            Err(_) => tracing::error!("database watch task failed"),
        }
    }
}

/// The watcher's connection between looks. A blocking PostgreSQL client must not be
/// dropped on an async worker (its drop blocks on a runtime of its own, which panics
/// there); when the server stops and the watcher is aborted, it is dropped on a thread of
/// its own.
struct HeldStore(Option<Box<dyn storage::RegistryStore>>);

impl Drop for HeldStore {
    fn drop(&mut self) {
        if let Some(store) = self.0.take() {
            let _ = std::thread::Builder::new()
                .name("psi-store-drop".into())
                .spawn(move || drop(store));
        }
    }
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
    let scheduled = state.config.rotate_every.is_some() && !state.config.db.is_memory();
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

    /// `http://ADDR`, or `https://ADDR` with [`Config::tls`].
    pub fn url(&self) -> String {
        let scheme = if self.state.config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.addr)
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

/// `now + d`, saturating at about a century (durations from configuration can be huge).
pub(crate) fn instant_after(d: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 86_400);
    let now = Instant::now();
    now.checked_add(d.min(CENTURY)).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use psi_client::{CancelToken, Client, ClientConfig, Protocol};

    /// OT-PSI rounds take workers from their own pool: with every OT worker busy (held
    /// here, as a long OT round would hold it), a DH-PSI run still completes, while an
    /// OT-PSI run waits for the OT pool. (With one shared pool, as before, the DH run
    /// would wait too.)
    #[test]
    fn dh_is_served_while_every_ot_worker_is_busy() {
        let dir = std::env::temp_dir().join(format!(
            "psi-server-pools-{}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let config = Config {
            db: dir.join("registry.sqlite").into(),
            workers: 1,
            ot_workers: 1,
            build_threads: 1,
            items_per_hour: 0,
            ..Config::default()
        };
        let entry = "+12025550100";
        Store::open(config.db.sqlite_path().unwrap())
            .unwrap()
            .add_entries([(entry, None)])
            .unwrap();
        let registry = Registry::load(&config, &mut |_, _| {}).unwrap();
        let server = RunningServer::start(
            AppState::with_registry(config, registry),
            ([127, 0, 0, 1], 0).into(),
        )
        .unwrap();
        let items = || vec![entry.as_bytes().to_vec(), b"+13035550199".to_vec()];
        let held = server.state.ot_workers.try_acquire().unwrap();
        let quick = ClientConfig::default().with_timeout(Duration::from_secs(2));
        let dh = Client::new(&server.url(), quick.clone())
            .match_items(items(), Protocol::Dh, &mut |_| {}, &CancelToken::new())
            .expect("DH-PSI is served while the OT pool is saturated");
        assert_eq!(dh.matches.len(), 1);
        // The OT pool really is saturated: an OT run cannot get its round answered.
        assert!(
            Client::new(&server.url(), quick)
                .match_items(items(), Protocol::Ot, &mut |_| {}, &CancelToken::new())
                .is_err()
        );
        drop(held);
        let ot = Client::new(&server.url(), ClientConfig::default())
            .match_items(items(), Protocol::Ot, &mut |_| {}, &CancelToken::new())
            .unwrap();
        assert_eq!(ot.matches.len(), 1);
        server.shutdown().unwrap();
        let _ = std::fs::remove_dir_all(dir);
    }
}
