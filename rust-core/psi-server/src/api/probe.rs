//! The bounded probe (`GET`/`POST /v1/probe`): bytes down and up for the client's
//! protocol choice, charged to the caller's probe budget (docs/protocol-choice.md).

use super::auth::ClientKey;
use super::reply::{ApiError, charge_error, server_timing};
use crate::limits::Refused;
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{RawQuery, Request, State as S};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use psi_http::ErrorCode;
use std::sync::Arc;
use std::time::Instant;

/// What every probe request costs at least, in bytes of the caller's probe budget: its
/// request and response headers (a few hundred bytes on the wire), its connection's work
/// and its log line are not free, so `GET /v1/probe?bytes=0` is charged 1 KiB, not 1
/// byte (16 MiB an hour: 16,384 such requests, not 16.7 million).
pub const PROBE_REQUEST_FLOOR: u64 = 1024;

/// Probe bytes the caller may move per hour, both ways together: the probe is cheap
/// (a static buffer out, a counted body in), but not free. Each request is charged its
/// body bytes, at least [`PROBE_REQUEST_FLOOR`].
async fn charge_probe(state: &AppState, client: &str, bytes: u64) -> Result<(), ApiError> {
    let charge = bytes.max(PROBE_REQUEST_FLOOR);
    let charged = state.probe_limiter.charge(client, charge).await;
    charged.map(drop).map_err(|e| {
        charge_error(state, e, |Refused { wait, .. }| {
            let mut e = ApiError::new(
                ErrorCode::RateLimited,
                format!("probe bytes-per-hour limit reached; retry in {wait} s"),
            );
            e.retry_after = Some(wait);
            e
        })
    })
}

/// The zeros a downstream probe sends (shared, never copied).
static PROBE_ZEROS: [u8; psi_http::PROBE_MAX_BYTES as usize] =
    [0; psi_http::PROBE_MAX_BYTES as usize];

/// `GET /v1/probe?bytes=N`: `N` zero bytes, `N` at most `PROBE_MAX_BYTES`
/// (docs/protocol-choice.md, "Bounded probe").
pub(super) async fn probe_down(
    S(state): S<Arc<AppState>>,
    Extension(ClientKey(client)): Extension<ClientKey>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let t = Instant::now();
    let n = query
        .as_deref()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("bytes=")))
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::BadRequest,
                "expected ?bytes=N with N a decimal byte count",
            )
        })?;
    if n > psi_http::PROBE_MAX_BYTES {
        return Err(ApiError::new(
            ErrorCode::BadRequest,
            format!(
                "bytes {n} exceeds the probe limit {}",
                psi_http::PROBE_MAX_BYTES
            ),
        ));
    }
    charge_probe(&state, &client, n).await?;
    let body = Bytes::from_static(&PROBE_ZEROS[..n as usize]);
    let mut resp = ([(header::CONTENT_TYPE, psi_http::BINARY)], body).into_response();
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    server_timing(&mut resp, t.elapsed().as_secs_f64() * 1e3);
    Ok(resp)
}

/// `POST /v1/probe`: counts a body of at most `PROBE_MAX_BYTES` (a longer one is refused
/// with 413 without being read further) and answers `{"bytes": n}`.
pub(super) async fn probe_up(
    S(state): S<Arc<AppState>>,
    Extension(ClientKey(client)): Extension<ClientKey>,
    req: Request,
) -> Result<Response, ApiError> {
    let t = Instant::now();
    let too_large = || {
        ApiError::new(
            ErrorCode::BodyTooLarge,
            format!(
                "a probe body is at most {} bytes",
                psi_http::PROBE_MAX_BYTES
            ),
        )
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    // The budget is charged before the body is read, so the length must be declared: a
    // chunked body would otherwise move up to the cap for a charge of the floor only.
    let Some(declared) = declared else {
        return Err(ApiError::new(
            ErrorCode::BadRequest,
            "a probe body needs a Content-Length",
        ));
    };
    if declared > psi_http::PROBE_MAX_BYTES {
        return Err(too_large());
    }
    charge_probe(&state, &client, declared).await?;
    let body = axum::body::to_bytes(req.into_body(), psi_http::PROBE_MAX_BYTES as usize)
        .await
        .map_err(|_| too_large())?;
    let mut resp = Json(psi_http::ProbeReceived {
        bytes: body.len() as u64,
    })
    .into_response();
    server_timing(&mut resp, t.elapsed().as_secs_f64() * 1e3);
    Ok(resp)
}
