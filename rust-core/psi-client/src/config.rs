//! Client settings.

use crate::error::ClientError;
use crate::measure::LinkHints;
use psi_core::Threads;
use std::time::Duration;

/// The response cap of the platform SDKs (psi-ffi's `default_discovery_config`, read by
/// the Swift and Kotlin SDKs): 32 MiB, far below the desktop default of 256 MiB, so a
/// server cannot push a phone towards memory exhaustion. It fits the largest response of
/// every protocol up to about 1.1 M registry entries (OT-PSI's outputs, about 24 MB at
/// 10^6; DH-PSI's encoded set, about 6.5 MB); beyond that an app raises it. Each route has
/// its own smaller cap below it ([`crate::server_input`]).
pub const MOBILE_MAX_RESPONSE_BYTES: u64 = 32 << 20;

/// The whole-run deadline of the platform SDKs (psi-ffi's `default_discovery_config`): 2
/// minutes. With the per-request timeout of 60 s and 2 retries, a hung server would
/// otherwise hold a run for about 3 minutes; an app's run of a few thousand contacts takes
/// seconds.
pub const MOBILE_RUN_DEADLINE: Duration = Duration::from_secs(120);

/// Client settings. [`ClientConfig::default`] gives the documented defaults.
#[derive(Clone)]
#[non_exhaustive]
pub struct ClientConfig {
    /// Bearer token, if the server requires one.
    pub token: Option<String>,
    /// Worker threads for blinding, unblinding and OT work.
    pub threads: Threads,
    /// Per-request timeout: every request the driver makes carries it to the transport.
    pub timeout: Duration,
    /// Largest response body accepted (default 256 MiB: a 10^6-entry encoded set is
    /// about 6.5 MB; OT-PSI outputs are `3 n_s L` bytes; the platform SDKs use
    /// [`MOBILE_MAX_RESPONSE_BYTES`]). The ceiling of every request's own cap: health
    /// and session answers are capped at a few KB, protocol steps at what the protocol
    /// needs for the session, error bodies at
    /// [`crate::transport::MAX_ERROR_BODY_BYTES`] ([`crate::server_input`]).
    pub max_response_bytes: u64,
    /// Fetch the labels of matches (default true).
    pub fetch_labels: bool,
    /// Run DH-PSI in sync mode where the server serves it (default true;
    /// docs/protocol/sync.md): the cache keeps a few bits per registry entry and takes
    /// small deltas, instead of the whole encoded set. Off: the encoded set, as with a
    /// server without sync mode.
    pub sync: bool,
    /// Region for phone numbers without a country code in
    /// [`crate::Client::match_contacts`] (ISO 3166 alpha-2, default `US`).
    pub default_region: String,
    /// Allow `http://` to a host that is not loopback (default false: such URLs are
    /// refused with [`crate::ClientError::InsecureUrl`] before any connection). For
    /// development against a test server on another machine; tokens and protocol
    /// messages then travel in the clear. Loopback (`127.0.0.0/8`, `::1`, `localhost`)
    /// is always allowed. See [`crate::Client::check_base_url`].
    pub allow_insecure_http: bool,
    /// How many times a failed run is started again from a new session (default 2; 0:
    /// never). Only failures [`crate::ClientError::is_retryable`] calls retryable are
    /// retried, after an exponential backoff (or the server's `Retry-After` when it asks
    /// for no more than 30 s; a longer wait is returned to the caller as the error). See
    /// [`crate::Client::match_items`] for why a whole run is restarted rather than the
    /// failed request.
    pub retries: u32,
    /// What the platform knows of the current network (priors for the choice, and the
    /// network's name under which link estimates are kept).
    pub link_hints: LinkHints,
    /// A deadline for the whole run, counted from the call: retries, their waits and every
    /// request of every attempt (each request's timeout is cut to what is left). A run
    /// that reaches it fails with a timeout ([`crate::ClientError::Network`],
    /// `timeout: true`). The computation between requests is not interrupted (it is
    /// bounded by the sizes). Default `None` (the CLI's runs are bounded by their
    /// requests' timeouts); the platform SDKs use [`MOBILE_RUN_DEADLINE`].
    pub deadline: Option<Duration>,
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("has_token", &self.token.is_some())
            .field("threads", &self.threads)
            .field("timeout", &self.timeout)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("fetch_labels", &self.fetch_labels)
            .field("default_region", &self.default_region)
            .field("allow_insecure_http", &self.allow_insecure_http)
            .field("retries", &self.retries)
            .field("link_hints", &self.link_hints)
            .field("deadline", &self.deadline)
            .finish()
    }
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            token: None,
            threads: Threads::available(),
            timeout: Duration::from_secs(60),
            max_response_bytes: 256 << 20,
            fetch_labels: true,
            sync: true,
            default_region: "US".to_string(),
            allow_insecure_http: false,
            retries: 2,
            link_hints: LinkHints::default(),
            deadline: None,
        }
    }
}

impl ClientConfig {
    /// Checks what can be checked before a run: a timeout and a response cap of at least
    /// 1, a token of visible ASCII (it goes into an HTTP header), and a default region
    /// libphonenumber knows ([`crate::Client::match_contacts`] fails the same way later).
    pub fn validate(&self) -> Result<(), ClientError> {
        let bad = |m: &str| Err(ClientError::BadInput(m.to_string()));
        if self.timeout.is_zero() {
            return bad("the timeout must be at least 1 ms");
        }
        if self.max_response_bytes == 0 {
            return bad("max_response_bytes must be at least 1");
        }
        if self.deadline.is_some_and(|d| d.is_zero()) {
            return bad("the run's deadline must be at least 1 ms");
        }
        if let Some(t) = &self.token {
            if t.is_empty() {
                return bad("the token is empty");
            }
            if t.trim() != t {
                return bad(
                    "the token has whitespace around it (a file's final newline?): trim it",
                );
            }
            if !t.bytes().all(|b| b.is_ascii_graphic()) {
                return bad(
                    "the token must be visible ASCII (no spaces or control characters inside)",
                );
            }
        }
        psi_contacts::Normalizer::new(&self.default_region)
            .map(drop)
            .map_err(|e| ClientError::BadInput(e.to_string()))
    }

    /// Sets the bearer token.
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }
    /// Sets the worker threads.
    pub fn with_threads(mut self, threads: Threads) -> Self {
        self.threads = threads;
        self
    }
    /// Sets the per-request timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
    /// Sets the largest response body accepted.
    pub fn with_max_response_bytes(mut self, bytes: u64) -> Self {
        self.max_response_bytes = bytes;
        self
    }
    /// Whether to fetch labels.
    pub fn with_labels(mut self, fetch: bool) -> Self {
        self.fetch_labels = fetch;
        self
    }
    /// Sets the default region for phone numbers.
    pub fn with_default_region(mut self, region: impl Into<String>) -> Self {
        self.default_region = region.into();
        self
    }
    /// Sets how many times a run that failed with a retryable error is restarted.
    pub fn with_retries(mut self, retries: u32) -> Self {
        self.retries = retries;
        self
    }
    /// Sets the whole run's deadline (`None`: only each request's timeout bounds a run).
    pub fn with_deadline(mut self, deadline: Option<Duration>) -> Self {
        self.deadline = deadline;
        self
    }
    /// Sets the platform's link hints.
    pub fn with_link_hints(mut self, hints: LinkHints) -> Self {
        self.link_hints = hints;
        self
    }
    /// Allows `http://` to hosts that are not loopback (development only).
    pub fn with_insecure_http(mut self, allow: bool) -> Self {
        self.allow_insecure_http = allow;
        self
    }
}
