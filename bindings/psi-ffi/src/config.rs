//! The client's settings as the platform passes them.

use crate::choice::{LinkHints, ProtocolChoice};
use psi_client::{ClientConfig, FileCache, Threads};
use std::time::Duration;

/// Settings of a [`crate::DiscoveryClient`]. The platform SDKs fill in the defaults
/// documented on their own config types.
#[derive(Clone, uniffi::Record)]
pub struct DiscoveryConfig {
    /// Bearer token, if the server requires one.
    pub token: Option<String>,
    /// Region for phone numbers without a country code (ISO 3166 alpha-2, e.g. `US`).
    pub default_region: String,
    /// Worker threads for the protocol's computation; 0 means one per core.
    pub threads: u32,
    /// Per-request timeout in milliseconds (1 or more).
    pub timeout_ms: u64,
    /// Largest response body accepted, in bytes (1 or more).
    pub max_response_bytes: u64,
    /// Whether to fetch the labels of the matches.
    pub fetch_labels: bool,
    /// Directory for the encoded-registry cache (the app's cache directory). `None` keeps
    /// it in memory, for the life of the client.
    pub cache_dir: Option<String>,
    /// Largest encoded registry kept in the cache directory, in bytes.
    pub cache_max_bytes: u64,
    /// Allow `http://` to a host that is not loopback (development only; see
    /// `psi_client::ClientConfig::allow_insecure_http`).
    pub allow_insecure_http: bool,
    /// How many times a run that failed with a retryable error is started again, from a
    /// new session, after a backoff (`psi_client::ClientConfig::retries`; the platform
    /// default is 2).
    pub retries: u32,
    /// How runs pick their protocol unless a call says otherwise (the platform default
    /// is `Auto { policy: Fastest }`).
    pub protocol: ProtocolChoice,
    /// What the platform knows of the network, for runs that pass no hints of their own.
    pub link_hints: LinkHints,
    /// Directory of `measurements.json`, the automatic choice's measurements (device
    /// costs, link estimates per network, each server's last health), read when the
    /// client is created and written after each run. `None`: `cache_dir` if set, else
    /// in memory for the life of the client.
    pub measurements_dir: Option<String>,
    /// A deadline for the whole run in milliseconds, retries and their waits included
    /// (`psi_client::ClientConfig::deadline`); 0: none. The platform default is 2 minutes
    /// (`psi_client::config::MOBILE_RUN_DEADLINE`).
    #[uniffi(default = 120000)]
    pub deadline_ms: u64,
}

impl std::fmt::Debug for DiscoveryConfig {
    // The token stays out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscoveryConfig")
            .field("has_token", &self.token.is_some())
            .field("default_region", &self.default_region)
            .field("threads", &self.threads)
            .field("timeout_ms", &self.timeout_ms)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("fetch_labels", &self.fetch_labels)
            .field("cache_dir", &self.cache_dir)
            .field("cache_max_bytes", &self.cache_max_bytes)
            .field("allow_insecure_http", &self.allow_insecure_http)
            .field("retries", &self.retries)
            .field("protocol", &self.protocol)
            .field("link_hints", &self.link_hints)
            .field("measurements_dir", &self.measurements_dir)
            .field("deadline_ms", &self.deadline_ms)
            .finish()
    }
}

impl DiscoveryConfig {
    /// The psi-client settings (checked by `ClientConfig::validate`). `protocol` is not
    /// among them: psi-client's runs take the choice as an argument, and the
    /// [`crate::DiscoveryClient`] keeps the configured one as the default of its calls.
    pub(crate) fn client_config(&self) -> ClientConfig {
        let threads = match self.threads {
            0 => Threads::available(),
            n => Threads::new(n as usize),
        };
        let mut config = ClientConfig::default()
            .with_threads(threads)
            .with_timeout(Duration::from_millis(self.timeout_ms))
            .with_max_response_bytes(self.max_response_bytes)
            .with_labels(self.fetch_labels)
            .with_default_region(self.default_region.clone())
            .with_insecure_http(self.allow_insecure_http)
            .with_retries(self.retries)
            .with_deadline((self.deadline_ms > 0).then(|| Duration::from_millis(self.deadline_ms)))
            .with_link_hints((&self.link_hints).into());
        // Whitespace around a token is never part of it (a token file's final newline).
        if let Some(t) = &self.token {
            config = config.with_token(t.trim());
        }
        config
    }

    /// The directory of the measurements file, if they are kept on disk.
    pub(crate) fn measurements_dir(&self) -> Option<&str> {
        self.measurements_dir
            .as_deref()
            .or(self.cache_dir.as_deref())
    }
}

/// The default of every setting, from psi-client's own defaults: the platform SDKs start
/// from this record instead of restating the numbers (per-request timeout 60 s, responses
/// up to 32 MiB (`psi_client::config::MOBILE_MAX_RESPONSE_BYTES`: a phone's, not the
/// desktop client's 256 MiB; each route has a smaller cap of its own), 2 retries, a whole
/// run within 2 minutes, a 64 MiB registry cache, labels fetched, region `US`, the
/// automatic choice for the fastest run, one worker thread per core).
#[uniffi::export]
pub fn default_discovery_config() -> DiscoveryConfig {
    let core = ClientConfig::default();
    DiscoveryConfig {
        token: None,
        default_region: core.default_region,
        threads: 0,
        timeout_ms: u64::try_from(core.timeout.as_millis()).unwrap_or(u64::MAX),
        max_response_bytes: psi_client::config::MOBILE_MAX_RESPONSE_BYTES,
        fetch_labels: core.fetch_labels,
        cache_dir: None,
        cache_max_bytes: FileCache::DEFAULT_MAX_BYTES,
        allow_insecure_http: core.allow_insecure_http,
        retries: core.retries,
        protocol: ProtocolChoice::default(),
        link_hints: LinkHints::default(),
        measurements_dir: None,
        deadline_ms: u64::try_from(psi_client::config::MOBILE_RUN_DEADLINE.as_millis())
            .unwrap_or(u64::MAX),
    }
}

/// Loads what the first run would otherwise load on the caller's time: the phone-number
/// metadata (about 100 ms on a phone, once per process). The platform SDKs call it from a
/// background thread when the app starts (Kotlin: `ContactDiscovery.preload()`); a client
/// also starts it on a thread of its own when it is created. Idempotent.
#[uniffi::export]
pub fn preload() {
    psi_client::preload_metadata();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exported_defaults_are_psi_clients() {
        let d = default_discovery_config();
        let core = ClientConfig::default();
        assert_eq!(d.timeout_ms, 60_000);
        // The mobile cap, far below the desktop client's.
        assert_eq!(d.max_response_bytes, 32 << 20);
        assert!(d.max_response_bytes < core.max_response_bytes / 4);
        assert_eq!(d.retries, core.retries);
        assert_eq!(d.default_region, core.default_region);
        assert_eq!(d.cache_max_bytes, FileCache::DEFAULT_MAX_BYTES);
        // The whole run's deadline: 2 minutes, as the record's own default says.
        assert_eq!(d.deadline_ms, 120_000);
        assert_eq!(d.client_config().deadline, Some(Duration::from_secs(120)));
        let unbounded = DiscoveryConfig {
            deadline_ms: 0,
            ..default_discovery_config()
        };
        assert_eq!(unbounded.client_config().deadline, None);
        assert!(d.fetch_labels && !d.allow_insecure_http && d.token.is_none());
        // A token read from a file with its final newline is the token.
        let padded = DiscoveryConfig {
            token: Some(" abc\n".into()),
            ..default_discovery_config()
        };
        assert_eq!(padded.client_config().token.as_deref(), Some("abc"));
        // What the record gives back is what psi-client runs with.
        let back = d.client_config();
        assert_eq!(back.timeout, core.timeout);
        assert!(back.validate().is_ok());
    }
}
