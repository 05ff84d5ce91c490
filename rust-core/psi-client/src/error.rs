//! The client's errors: [`ClientError`], one variant per kind of failure, each telling the
//! caller what it can do, and [`TransportError`], a transport's failure to get a response,
//! which a [`ClientError::Network`] carries as its source. Messages never contain contact
//! data, labels or keys.

use psi_http::ErrorCode;
use thiserror::Error;

/// The crate's results: [`ClientError`] unless said otherwise.
pub(crate) type Result<T, E = ClientError> = std::result::Result<T, E>;

/// Why a match run failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ClientError {
    /// No response: connection refused or reset, timeout, response too large.
    /// Retrying later may help. [`std::error::Error::source`] is the transport's error.
    #[error("network error: {message}")]
    Network {
        /// What went wrong (the transport's message).
        message: String,
        /// True when a timeout expired.
        timeout: bool,
        /// The transport's error, as it reported it: the cause in the error's
        /// [`std::error::Error::source`] chain.
        source: TransportError,
    },
    /// The secure connection could not be set up: the server's certificate is not
    /// trusted (expired, another name, an unknown CA, a captive portal intercepting the
    /// connection), or the server does not speak TLS at all (an `https://` URL to a plain
    /// HTTP port). Not retryable: the same call fails the same way until the URL, the
    /// trusted roots or the server's certificate change.
    /// [`std::error::Error::source`] is the transport's error.
    #[error("TLS failed: {message}")]
    Tls {
        /// What went wrong (the transport's message).
        message: String,
        /// The transport's error, as it reported it.
        source: TransportError,
    },
    /// The server answered with an error status and its JSON error (docs/api.md).
    #[error("server answered HTTP {status} ({code}): {message}")]
    Http {
        /// HTTP status.
        status: u16,
        /// The API error code ([`ErrorCode::Unknown`] for a code this client does not
        /// know, or a body that is not the API's JSON error).
        code: ErrorCode,
        /// The server's explanation.
        message: String,
        /// Seconds to wait, from `Retry-After` (rate limits, session limit).
        retry_after: Option<u64>,
    },
    /// A protocol message was rejected by psi-core (malformed, wrong phase, wrong epoch).
    #[error("protocol error: {0}")]
    Protocol(#[from] psi_core::Error),
    /// A response the API does not allow (bad JSON, an unexpected status).
    #[error("unexpected server response: {0}")]
    BadResponse(String),
    /// The caller's input cannot be matched (no valid items, too many items, unknown
    /// region...).
    #[error("bad input: {0}")]
    BadInput(String),
    /// A plain `http://` server URL whose host is not loopback, refused before any
    /// connection: use `https://`, or set
    /// [`crate::ClientConfig::allow_insecure_http`] for development.
    #[error(
        "refusing plain http:// to {host}, which is not a loopback address: use https:// (or allow insecure HTTP for development)"
    )]
    InsecureUrl {
        /// The URL's host.
        host: String,
    },
    /// The run was cancelled through its [`crate::CancelToken`]; the server session was
    /// deleted.
    #[error("cancelled")]
    Cancelled,
    /// A group run failed in its end-to-end layer or its choreography (a key announcement
    /// or an envelope that is not the group's, out of order, a timeout, the group ended).
    #[error("group: {0}")]
    Group(#[from] crate::group::GroupError),
}

impl ClientError {
    /// True if the same call may succeed later (network trouble, rate limit, server busy,
    /// key rotated or registry changed mid-run, session expired).
    pub fn is_retryable(&self) -> bool {
        match self {
            ClientError::Network { .. } => true,
            ClientError::Http { status, code, .. } => *status >= 500 || code.is_retryable(),
            ClientError::Protocol(psi_core::Error::EpochMismatch { .. }) => true,
            _ => false,
        }
    }
}

/// The request did not produce a response (connection, timeout, I/O, size cap, TLS).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TransportError {
    /// What went wrong (no request or response bodies, no headers).
    pub message: String,
    /// True for a timeout.
    pub timeout: bool,
    /// True when the secure connection could not be set up (an untrusted certificate,
    /// a server that does not speak TLS): the run fails with [`ClientError::Tls`], which
    /// is not retried.
    pub tls: bool,
}

impl TransportError {
    /// A failure other than a timeout or TLS: refused, reset, cut short, too large.
    pub fn failed(message: impl Into<String>) -> TransportError {
        TransportError {
            message: message.into(),
            timeout: false,
            tls: false,
        }
    }

    /// A timeout expired.
    pub fn timed_out(message: impl Into<String>) -> TransportError {
        TransportError {
            timeout: true,
            ..TransportError::failed(message)
        }
    }

    /// The TLS handshake failed ([`TransportError::tls`]).
    pub fn tls_failed(message: impl Into<String>) -> TransportError {
        TransportError {
            tls: true,
            ..TransportError::failed(message)
        }
    }
}

impl From<TransportError> for ClientError {
    fn from(e: TransportError) -> Self {
        if e.tls {
            return ClientError::Tls {
                message: e.message.clone(),
                source: e,
            };
        }
        ClientError::Network {
            message: e.message.clone(),
            timeout: e.timeout,
            source: e,
        }
    }
}

impl From<psi_core::DecodeError> for ClientError {
    fn from(e: psi_core::DecodeError) -> Self {
        ClientError::Protocol(e.into())
    }
}
