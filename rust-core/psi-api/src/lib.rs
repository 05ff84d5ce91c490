//! # psi-api
//!
//! What `psi-server` and `psi-client` must agree on besides psi-core's wire messages:
//! the JSON bodies and error codes of the HTTP API (`docs/api.md`), and the label
//! records (encrypted under a key only a holder of the item can derive).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod labels;

use serde::{Deserialize, Serialize};

/// Paths of the API, relative to the server's base URL.
pub mod paths {
    /// `GET`: liveness and registry summary.
    pub const HEALTH: &str = "/v1/health";
    /// `POST`: create a session.
    pub const SESSIONS: &str = "/v1/sessions";
    /// `GET`: the DH-PSI encoded registry (ETag, `If-None-Match`).
    pub const DH_ENCODED_SET: &str = "/v1/dh/encoded-set";

    /// `POST`: the DH-PSI query of session `id`.
    pub fn dh_query(id: &str) -> String {
        format!("/v1/sessions/{id}/dh/query")
    }
    /// `POST`: one OT-PSI round of session `id`.
    pub fn ot_round(id: &str) -> String {
        format!("/v1/sessions/{id}/ot/round")
    }
    /// `POST`: the label OPRF query (a DH-PSI QUERY of the matched items).
    pub fn label_query(id: &str) -> String {
        format!("/v1/sessions/{id}/labels/query")
    }
    /// `POST`: fetch the label buckets.
    pub fn label_fetch(id: &str) -> String {
        format!("/v1/sessions/{id}/labels/fetch")
    }
    /// `DELETE`: end a session early.
    pub fn session(id: &str) -> String {
        format!("/v1/sessions/{id}")
    }
}

/// Protocol names used in session creation.
pub mod protocol {
    /// DH-PSI (protocol id 0x01).
    pub const DH: &str = "dh-psi";
    /// OT-PSI (protocol id 0x02).
    pub const OT: &str = "ot-psi";
}

/// Header carrying the registry's key epoch on the encoded-set download.
pub const EPOCH_HEADER: &str = "x-psi-epoch";

/// `POST /v1/sessions` request body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSession {
    /// `"dh-psi"` or `"ot-psi"`.
    pub protocol: String,
    /// Number of distinct items the client will query.
    pub client_items: u32,
}

/// `POST /v1/sessions` response body (201).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionCreated {
    /// Opaque session id (32 hex digits).
    pub session_id: String,
    /// The protocol of the session.
    pub protocol: String,
    /// Current key epoch (DH-PSI queries must name it).
    pub epoch: u32,
    /// Entries in the registry.
    pub registry_items: u64,
    /// Largest client set accepted.
    pub max_client_items: u32,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: u64,
    /// ETag of the current DH-PSI encoded registry (quoted, as in the HTTP header).
    pub encoded_set_etag: String,
    /// Bits of the label tag used as the bucket id (0: one bucket).
    pub label_bucket_bits: u8,
    /// Seconds until the session expires.
    pub expires_in_secs: u64,
}

/// `GET /v1/health` response body.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Health {
    /// Always `"ok"`.
    pub status: String,
    /// Current key epoch.
    pub epoch: u32,
    /// Entries in the registry.
    pub registry_items: u64,
    /// Protocols this server runs.
    pub protocols: Vec<String>,
}

/// Body of every 4xx/5xx response.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Stable machine-readable code (see [`codes`]).
    pub error: String,
    /// Human-readable explanation; never contains contact data or keys.
    pub message: String,
}

/// Error codes of [`ErrorBody::error`], with their HTTP status in `docs/api.md`.
pub mod codes {
    #![allow(missing_docs)]
    pub const BAD_REQUEST: &str = "bad_request";
    pub const INVALID_MESSAGE: &str = "invalid_message";
    pub const COUNT_MISMATCH: &str = "count_mismatch";
    pub const TOO_MANY_ITEMS: &str = "too_many_items";
    pub const UNSUPPORTED_PROTOCOL: &str = "unsupported_protocol";
    pub const MISSING_TOKEN: &str = "missing_token";
    pub const INVALID_TOKEN: &str = "invalid_token";
    pub const NOT_FOUND: &str = "not_found";
    pub const UNKNOWN_SESSION: &str = "unknown_session";
    pub const METHOD_NOT_ALLOWED: &str = "method_not_allowed";
    pub const WRONG_PHASE: &str = "wrong_phase";
    pub const EPOCH_MISMATCH: &str = "epoch_mismatch";
    pub const SESSION_EXPIRED: &str = "session_expired";
    pub const BODY_TOO_LARGE: &str = "body_too_large";
    pub const UNSUPPORTED_MEDIA_TYPE: &str = "unsupported_media_type";
    pub const RATE_LIMITED: &str = "rate_limited";
    pub const TOO_MANY_SESSIONS: &str = "too_many_sessions";
    /// The request (body upload and handling) took longer than the server allows.
    pub const REQUEST_TIMEOUT: &str = "request_timeout";
    pub const INTERNAL: &str = "internal";
}
