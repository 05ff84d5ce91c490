//! How the API answers: every refusal is an [`ApiError`], a JSON [`ErrorBody`] with a
//! stable code and a log-safe message; a step's answer is a binary body with its timing.

use crate::limits::{ChargeError, LevelKind, Refused};
use crate::state::AppState;
use axum::Json;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use psi_http::{ErrorBody, ErrorCode};

/// An API error: a stable code (which fixes the status), a log-safe message.
#[derive(Debug)]
pub(super) struct ApiError {
    pub(super) code: ErrorCode,
    pub(super) message: String,
    pub(super) retry_after: Option<u64>,
}

impl ApiError {
    pub(super) fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            retry_after: None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = ErrorBody {
            error: self.code,
            message: self.message,
        };
        let mut resp = (status, Json(body)).into_response();
        if let Some(s) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        resp
    }
}

impl From<psi_core::Error> for ApiError {
    fn from(e: psi_core::Error) -> Self {
        use psi_core::Error as E;
        let code = match &e {
            E::WrongPhase { .. } => ErrorCode::WrongPhase,
            E::EpochMismatch { .. } => ErrorCode::EpochMismatch,
            E::InputTooLarge { .. } => ErrorCode::TooManyItems,
            E::CountMismatch { .. } => ErrorCode::CountMismatch,
            E::ThreadPool(_) => ErrorCode::Internal,
            _ => ErrorCode::InvalidMessage,
        };
        // psi_core errors are log-safe by design (counts, tags, phase names only).
        ApiError::new(code, e.to_string())
    }
}

pub(super) fn body_error(e: BytesRejection) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            ErrorCode::BodyTooLarge,
            "request body exceeds the server's limit (see max_body_bytes)",
        )
    } else {
        ApiError::new(ErrorCode::BadRequest, "could not read the request body")
    }
}

pub(super) fn binary(bytes: Vec<u8>, server_ms: f64) -> Response {
    let mut resp = ([(header::CONTENT_TYPE, psi_http::BINARY)], bytes).into_response();
    server_timing(&mut resp, server_ms);
    resp
}

pub(super) fn server_timing(resp: &mut Response, server_ms: f64) {
    if let Ok(v) = HeaderValue::from_str(&format!("psi;dur={server_ms:.3}")) {
        resp.headers_mut().insert("server-timing", v);
    }
}

/// A budget charge that did not go through, as the API answers it: a refusal as `refuse`
/// says; a shared budget table that cannot be asked as `503 store_unavailable` (nothing
/// was charged and nothing is given: fail closed, retryable).
/// An unreachable table also marks the store unavailable (store_health.rs).
pub(super) fn charge_error(
    state: &AppState,
    e: ChargeError,
    refuse: impl FnOnce(Refused) -> ApiError,
) -> ApiError {
    match e {
        ChargeError::Refused(r) => refuse(r),
        ChargeError::Store(e) => {
            state.store_health.charge_failed(&e);
            tracing::error!(error = %e, "charging a shared budget failed; refusing the request");
            store_unavailable()
        }
    }
}

/// `400 bad_request` for a trusted proxy's forwarding header that is not a list of IP
/// addresses: refused, never charged to the proxy's own address.
pub(super) fn malformed_forwarding(e: crate::caller::MalformedForwarding) -> ApiError {
    ApiError::new(
        ErrorCode::BadRequest,
        format!(
            "the trusted proxy's {} header is not a list of IP addresses",
            e.0.name()
        ),
    )
}

/// `429 rate_limited` with `Retry-After` for an items charge refused at `refused.kind`.
pub(super) fn rate_limited(refused: Refused) -> ApiError {
    budget_refused("items-per-hour limit", refused)
}

/// `429 rate_limited` with `Retry-After`: `what` and which of the caller's budgets is
/// spent (its own, its network's, or the server-wide ceiling of callers without a token;
/// ADR 0038), never an address.
pub(super) fn budget_refused(what: &str, Refused { wait, kind }: Refused) -> ApiError {
    let whose = match kind {
        LevelKind::Token | LevelKind::Address | LevelKind::Floor => "",
        LevelKind::Network => " of this caller's network (shared by its addresses)",
        LevelKind::Ceiling => {
            " of all callers without a token (server-wide; callers with a token are not limited by it)"
        }
    };
    let mut e = ApiError::new(
        ErrorCode::RateLimited,
        format!("{what}{whose} reached; retry in {wait} s"),
    );
    e.retry_after = Some(wait);
    e
}

pub(super) fn epoch_gone() -> ApiError {
    ApiError::new(
        ErrorCode::EpochMismatch,
        "this key epoch is no longer served; start a new session",
    )
}

pub(super) fn internal() -> ApiError {
    ApiError::new(ErrorCode::Internal, "internal error")
}

/// `503 store_unavailable` with `Retry-After`: the database does not answer
/// (store_health.rs).
pub(super) fn store_unavailable() -> ApiError {
    let mut e = ApiError::new(
        ErrorCode::StoreUnavailable,
        "the service's database does not answer; try again shortly",
    );
    e.retry_after = Some(crate::store_health::RETRY_AFTER_SECS);
    e
}

pub(super) fn wrong_phase(msg: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::WrongPhase, msg)
}
