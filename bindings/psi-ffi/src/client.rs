//! The client object the platforms hold.

use crate::cancel::CancelHandle;
use crate::choice::{LinkHints, ProtocolChoice};
use crate::config::DiscoveryConfig;
use crate::error::PsiError;
use crate::job::{guarded, spawn};
use crate::report::{ContactReport, ProgressEvent, ServerHealth};
use crate::transport::{ForeignTransport, HttpTransport};
use psi_client::{
    CancelToken, Client, ClientConfig, FileCache, MeasurementsFile, MemoryCache, SetCache,
};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Native clients alive now (created and not yet dropped).
static LIVE_CLIENTS: AtomicU64 = AtomicU64::new(0);

/// How many [`DiscoveryClient`]s are alive in the native library: a diagnostic that lets the
/// platform tests check that closed or forgotten clients are released.
#[uniffi::export]
pub fn live_clients() -> u64 {
    LIVE_CLIENTS.load(Ordering::SeqCst)
}

/// Hears a run's progress, on the run's thread: return quickly (hand the event to the UI
/// thread) and do not throw.
#[uniffi::export(with_foreign)]
pub trait ProgressListener: Send + Sync {
    /// The run entered a new phase.
    fn on_progress(&self, event: ProgressEvent);
}

/// A contact-discovery client for one server. Cheap to share; runs may go on in parallel.
/// Each run executes on its own thread; the platform's HTTP stack moves the bytes.
#[derive(uniffi::Object)]
pub struct DiscoveryClient {
    base: String,
    transport: Arc<dyn HttpTransport>,
    cache: Arc<dyn SetCache>,
    measurements: MeasurementsFile,
    config: ClientConfig,
    /// The configured choice, as the platform gave it: the choice of runs that pass none
    /// (and reported back in them). psi-client's runs take the choice as an argument.
    protocol: ProtocolChoice,
}

impl std::fmt::Debug for DiscoveryClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscoveryClient")
            .field("base", &self.base)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Drop for DiscoveryClient {
    fn drop(&mut self) {
        LIVE_CLIENTS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Cancels its token when dropped before the run finished: a run whose future is dropped
/// (the coroutine or task awaiting it was cancelled) stops at its next check and deletes its
/// session. Disarmed once the run returned, so a caller's [`CancelHandle`] stays usable.
pub(crate) struct CancelOnDrop {
    token: CancelToken,
    armed: bool,
}

impl CancelOnDrop {
    pub(crate) fn new(token: CancelToken) -> Self {
        CancelOnDrop { token, armed: true }
    }

    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.armed {
            self.token.cancel();
        }
    }
}

#[uniffi::export]
impl DiscoveryClient {
    /// A client for the server at `server_url` (`http://` or `https://`, no query), with
    /// `config`, sending requests through `transport`.
    #[uniffi::constructor]
    pub fn new(
        server_url: String,
        config: DiscoveryConfig,
        transport: Arc<dyn HttpTransport>,
    ) -> Result<Arc<Self>, PsiError> {
        guarded("creating the client", || {
            let client_config = config.client_config();
            client_config.validate()?;
            let base = Client::check_base_url(&server_url, &client_config)?;
            let cache: Arc<dyn SetCache> = match &config.cache_dir {
                Some(dir) => Arc::new(FileCache::new(dir).with_max_bytes(config.cache_max_bytes)),
                None => Arc::new(MemoryCache::new()),
            };
            let measurements = config
                .measurements_dir()
                .map_or_else(MeasurementsFile::in_memory, |d| {
                    MeasurementsFile::open(Path::new(d))
                });
            // The phone-number metadata loads once per process on its first use (about
            // 100 ms on a phone): load it now on a thread of its own, so that the first run
            // does not stall before its first event.
            static PRELOAD: std::sync::Once = std::sync::Once::new();
            PRELOAD.call_once(|| {
                let _ = std::thread::Builder::new()
                    .name("psi-preload".into())
                    .spawn(psi_client::preload_metadata);
            });
            LIVE_CLIENTS.fetch_add(1, Ordering::SeqCst);
            Ok(Arc::new(DiscoveryClient {
                base,
                transport,
                cache,
                measurements,
                config: client_config,
                protocol: config.protocol,
            }))
        })
    }

    /// Normalizes `contacts` (phone numbers, emails), matches the valid ones against the
    /// server's registry with the protocol `protocol` picks (`None`: the configured
    /// choice), fetches their labels, and maps the results back to the rows. `hints` say
    /// what the platform knows of the network now (`None`: the configured hints); the
    /// run's timings go into the link estimate of `hints.network`, kept in the
    /// measurements store. `listener` hears each phase. Dropping the returned future
    /// cancels the run and deletes its server session.
    pub async fn match_contacts(
        self: Arc<Self>,
        contacts: Vec<String>,
        protocol: Option<ProtocolChoice>,
        hints: Option<LinkHints>,
        listener: Option<Arc<dyn ProgressListener>>,
    ) -> Result<ContactReport, PsiError> {
        self.run_match(contacts, protocol, hints, listener, CancelToken::new())
            .await
    }

    /// [`DiscoveryClient::match_contacts`] with an explicit cancel path, for platforms
    /// whose task cancellation does not drop the native future (Swift): `cancel`
    /// cancels the run as dropping the future does (the request in flight is abandoned,
    /// the server session deleted, the call fails with [`PsiError::Cancelled`]). A handle
    /// cancelled before the call makes the run stop before its first request.
    pub async fn match_contacts_cancellable(
        self: Arc<Self>,
        contacts: Vec<String>,
        protocol: Option<ProtocolChoice>,
        hints: Option<LinkHints>,
        listener: Option<Arc<dyn ProgressListener>>,
        cancel: Arc<CancelHandle>,
    ) -> Result<ContactReport, PsiError> {
        self.run_match(contacts, protocol, hints, listener, cancel.token())
            .await
    }

    /// The server's epoch, registry size, protocols and limits (`GET /v1/health`).
    pub async fn health(self: Arc<Self>) -> Result<ServerHealth, PsiError> {
        self.run_health(CancelToken::new()).await
    }

    /// [`DiscoveryClient::health`] with an explicit cancel path (see
    /// [`DiscoveryClient::match_contacts_cancellable`]).
    pub async fn health_cancellable(
        self: Arc<Self>,
        cancel: Arc<CancelHandle>,
    ) -> Result<ServerHealth, PsiError> {
        self.run_health(cancel.token()).await
    }

    /// The server's base URL.
    pub fn server_url(&self) -> String {
        self.base.clone()
    }
}

impl DiscoveryClient {
    /// One run on its own thread, cancelled by `cancel` or by dropping the future.
    async fn run_match(
        self: Arc<Self>,
        contacts: Vec<String>,
        protocol: Option<ProtocolChoice>,
        hints: Option<LinkHints>,
        listener: Option<Arc<dyn ProgressListener>>,
        cancel: CancelToken,
    ) -> Result<ContactReport, PsiError> {
        let guard = CancelOnDrop::new(cancel.clone());
        let this = self.clone();
        let run = spawn("psi-run", move || {
            let started = Instant::now();
            let requested = protocol.unwrap_or(this.protocol);
            let mut config = this.config.clone();
            if let Some(h) = &hints {
                config = config.with_link_hints(h.into());
            }
            let client = this.run_client(config, &cancel);
            let mut progress = |p: psi_client::Progress| {
                if let Some(l) = &listener {
                    l.on_progress(p.into());
                }
            };
            let result = client.match_contacts(&contacts, requested, &mut progress, &cancel);
            // Whatever happened, the run may have measured the link or the server. A
            // failed save costs the next app start a calibration and the link priors.
            let _ = this.measurements.save();
            let report = result?;
            ContactReport::from_client(
                report,
                requested,
                &client.config().link_hints,
                started.elapsed(),
            )
        })?;
        let result = run.await;
        guard.disarm();
        result
    }

    /// `GET /v1/health` on its own thread, cancelled by `cancel` or by dropping the future.
    async fn run_health(self: Arc<Self>, cancel: CancelToken) -> Result<ServerHealth, PsiError> {
        let guard = CancelOnDrop::new(cancel.clone());
        let this = self.clone();
        let call = spawn("psi-health", move || {
            Ok(this
                .run_client(this.config.clone(), &cancel)
                .health()?
                .into())
        })?;
        let result = call.await;
        guard.disarm();
        result
    }

    /// psi-client's client for a group party (the create or join, and its run): the
    /// configured settings, a transport aware of `cancel`.
    pub(crate) fn group_client(&self, cancel: &CancelToken) -> Client {
        self.run_client(self.config.clone(), cancel)
    }

    /// psi-client's client for one run with `config`: the foreign transport, aware of the
    /// run's token, the registry cache and the measurements.
    fn run_client(&self, config: ClientConfig, cancel: &CancelToken) -> Client {
        let transport = ForeignTransport {
            inner: self.transport.clone(),
            cancel: cancel.clone(),
        };
        Client::with_transport(&self.base, Arc::new(transport), config)
            .with_cache(self.cache.clone())
            .with_measurements(self.measurements.store())
    }
}
