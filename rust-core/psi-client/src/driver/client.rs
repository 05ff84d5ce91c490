//! The client value: which server, over which transport, with which encoded-registry
//! cache, measurement store and clock; its builders and accessors. What it runs is in
//! the rooms beside it (the facade, `choice`).

use crate::cache::{MemoryCache, SetCache};
use crate::config::ClientConfig;
use crate::measure::{Clock, MeasurementStore, SystemClock};
use crate::transport::Transport;
use psi_http::Feature;
use std::sync::Arc;

/// The client driver: runs psi-core's client state machines against a `psi-server`.
/// Cheap to share between threads; runs may go on in parallel.
pub struct Client {
    pub(crate) base: String,
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) cache: Arc<dyn SetCache>,
    pub(crate) config: ClientConfig,
    pub(crate) measurements: Arc<MeasurementStore>,
    pub(crate) clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client for the server at `base_url` (e.g. `http://127.0.0.1:8080`) over the
    /// default [`crate::HttpTransport`] (feature `http`), with an in-memory [`MemoryCache`].
    #[cfg(feature = "http")]
    pub fn new(base_url: &str, config: ClientConfig) -> Client {
        Client::with_transport(
            base_url,
            Arc::new(crate::transport::HttpTransport::new()),
            config,
        )
    }

    /// A client over any transport (e.g. the platform HTTP stack).
    pub fn with_transport(
        base_url: &str,
        transport: Arc<dyn Transport>,
        config: ClientConfig,
    ) -> Client {
        Client {
            base: base_url.trim_end_matches('/').to_string(),
            transport,
            cache: Arc::new(MemoryCache::new()),
            config,
            measurements: Arc::new(MeasurementStore::default()),
            clock: Arc::new(SystemClock::default()),
        }
    }

    /// Uses `store` for the inputs of the automatic protocol choice (device costs, link
    /// estimates per network, the servers' health): keep one per device, persisted in a
    /// [`crate::MeasurementsFile`], so a choice needs no calibration or extra
    /// request. Every run (automatic or not) updates it with its timings.
    pub fn with_measurements(mut self, store: Arc<MeasurementStore>) -> Client {
        self.measurements = store;
        self
    }

    /// The measurement store.
    pub fn measurements(&self) -> &Arc<MeasurementStore> {
        &self.measurements
    }

    /// Times requests with `clock` (a simulated link's clock in tests).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Client {
        self.clock = clock;
        self
    }

    /// Uses `cache` for the encoded registry (e.g. a [`crate::FileCache`] in the app's
    /// cache directory, shared by every client of the app).
    pub fn with_cache(mut self, cache: Arc<dyn SetCache>) -> Client {
        self.cache = cache;
        self
    }

    /// The encoded-registry cache.
    pub fn cache(&self) -> &Arc<dyn SetCache> {
        &self.cache
    }

    /// The server's base URL.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// The settings.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// Whether this server's stored health lists `feature` (false when no health is
    /// stored: an unknown server is treated as an older one).
    pub(super) fn stored_feature(&self, feature: Feature) -> bool {
        self.measurements.read(|m| {
            m.servers
                .get(&self.base)
                .is_some_and(|h| h.supports(feature))
        })
    }

    /// Whether the stored health of this server says it serves sync mode.
    pub(super) fn stored_sync(&self) -> bool {
        self.measurements
            .read(|m| m.servers.get(&self.base).is_some_and(|h| h.sync.is_some()))
    }
}
