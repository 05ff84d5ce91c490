//! The group relay's routes (`/v1/groups`, docs/api.md "Group relay"): create, join,
//! roster, end, post and fetch. The server only relays: it checks credentials, sizes and
//! limits, and never looks inside a key announcement or an envelope.

use super::auth::ClientKey;
use super::reply::{ApiError, body_error, charge_error};
use crate::groups::{Fetched, Refusal};
use crate::instance::Owner;
use crate::limits::Refused;
use crate::state::AppState;
use axum::Extension;
use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State as S};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use psi_http::{
    CreateGroup, ErrorCode, GROUP_CREDENTIAL_HEADER, GROUP_FROM_HEADER, GROUP_KEY_BYTES,
    GROUP_MAX_WAIT_MS, GroupJoined, GroupState, JoinGroup,
};
use std::sync::Arc;
use std::time::Duration;

/// What every post costs at least, in bytes of the caller's group budget (as the probe's
/// floor: headers, the connection and the log line are not free).
const POST_FLOOR: u64 = 1024;

impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> Self {
        let mut e = ApiError::new(r.code, r.message);
        if matches!(r.code, ErrorCode::MailboxFull | ErrorCode::TooManyGroups) {
            e.retry_after = Some(1);
        }
        e
    }
}

/// A JSON body of `T`, refused as `400 bad_request` (log-safe) when it is not one.
fn json<T: serde::de::DeserializeOwned>(headers: &HeaderMap, body: &Bytes) -> Result<T, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !ct.starts_with(psi_http::JSON) {
        return Err(ApiError::new(
            ErrorCode::UnsupportedMediaType,
            "expected Content-Type: application/json",
        ));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::new(ErrorCode::BadRequest, format!("invalid JSON body: {e}")))
}

/// A key announcement: exactly [`GROUP_KEY_BYTES`] bytes in hex.
fn key(hex_key: &str) -> Result<[u8; GROUP_KEY_BYTES], ApiError> {
    let mut out = [0u8; GROUP_KEY_BYTES];
    hex::decode_to_slice(hex_key, &mut out).map_err(|_| {
        ApiError::new(
            ErrorCode::BadRequest,
            format!("key: {} hex digits expected", 2 * GROUP_KEY_BYTES),
        )
    })?;
    Ok(out)
}

/// The group id of this instance, or the typed refusal: another instance's id is
/// `421 wrong_instance`, an id naming none `404 unknown_group`.
fn local(state: &AppState, id: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    // An id that is not UTF-8 (axum's rejection would answer in plain text) names no group.
    let Ok(Path(id)) = id else {
        return Err(ApiError::new(ErrorCode::UnknownGroup, "no such group"));
    };
    match state.instance.owner_of(&id) {
        Owner::This => Ok(id),
        Owner::Other(name) => Err(ApiError::new(
            ErrorCode::WrongInstance,
            format!("the group is held by instance {name}, not this one"),
        )),
        Owner::Nobody => Err(ApiError::new(ErrorCode::UnknownGroup, "no such group")),
    }
}

fn credential(headers: &HeaderMap) -> Result<zeroize::Zeroizing<String>, ApiError> {
    headers
        .get(GROUP_CREDENTIAL_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(|v| zeroize::Zeroizing::new(v.trim().to_string()))
        .filter(|v| !v.is_empty())
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::InvalidParty,
                "the X-PSI-Party header with the party credential is missing",
            )
        })
}

fn joined(state: &AppState, id: String, j: crate::groups::Joined) -> Response {
    let l = state.groups.limits();
    let body = GroupJoined {
        group_id: id,
        party: j.party,
        credential: j.credential,
        size: j.size,
        max_message_bytes: l.max_message_bytes as u64,
        max_mailbox_bytes: l.mailbox_bytes as u64,
        max_mailbox_messages: l.mailbox_messages as u32,
        expires_in_secs: j.expires_in.as_secs(),
    };
    let mut resp = (StatusCode::CREATED, Json(body)).into_response();
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// `POST /v1/groups`.
pub(super) async fn create_group(
    S(state): S<Arc<AppState>>,
    Extension(ClientKey(client)): Extension<ClientKey>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(body_error)?;
    let req: CreateGroup = json(&headers, &body)?;
    let k = key(&req.key)?;
    let instance = state.instance.clone();
    let (id, j) = state
        .groups
        .create(&client, req.size, k, |r| instance.session_id(r))?;
    tracing::info!(size = req.size, "group created");
    Ok(joined(&state, id, j))
}

/// `POST /v1/groups/{id}/join`.
pub(super) async fn join_group(
    S(state): S<Arc<AppState>>,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    let id = local(&state, id)?;
    let body = body.map_err(body_error)?;
    let req: JoinGroup = json(&headers, &body)?;
    let k = key(&req.key)?;
    let j = state.groups.join(&id, k)?;
    Ok(joined(&state, id, j))
}

/// `GET /v1/groups/{id}`.
pub(super) async fn group_state(
    S(state): S<Arc<AppState>>,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let id = local(&state, id)?;
    let c = credential(&headers)?;
    let s = state.groups.snapshot(&id, &c)?;
    let body = GroupState {
        group_id: id,
        size: s.size,
        joined: s.keys.iter().filter(|k| k.is_some()).count() as u8,
        keys: s.keys.iter().map(|k| k.map(hex::encode)).collect(),
        ended: s.ended,
        expires_in_secs: s.expires_in.as_secs(),
    };
    let mut resp = Json(body).into_response();
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(resp)
}

/// `DELETE /v1/groups/{id}`.
pub(super) async fn end_group(
    S(state): S<Arc<AppState>>,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let id = local(&state, id)?;
    let c = credential(&headers)?;
    state.groups.end(&id, &c)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// A query's `name=` value as a number, `None` when absent.
fn query_number(query: Option<&str>, name: &str) -> Result<Option<u64>, ApiError> {
    let Some(v) = query
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
    else {
        return Ok(None);
    };
    v.parse::<u64>().map(Some).map_err(|_| {
        ApiError::new(
            ErrorCode::BadRequest,
            format!("{name}: a decimal number expected"),
        )
    })
}

/// `POST /v1/groups/{id}/messages?to=N`: the body is charged to the caller's group
/// budget only once the post is admitted (a refused post costs nothing).
pub(super) async fn post_group_message(
    S(state): S<Arc<AppState>>,
    Extension(ClientKey(client)): Extension<ClientKey>,
    id: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    let id = local(&state, id)?;
    let c = credential(&headers)?;
    let to = query_number(query.as_deref(), "to")?
        .ok_or_else(|| ApiError::new(ErrorCode::BadRequest, "expected ?to=N, a party index"))?;
    let to = u8::try_from(to)
        .map_err(|_| ApiError::new(ErrorCode::BadRequest, "to: not a party of this group"))?;
    let body = body.map_err(body_error)?;
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if ct != psi_http::BINARY {
        return Err(ApiError::new(
            ErrorCode::UnsupportedMediaType,
            "expected Content-Type: application/octet-stream",
        ));
    }
    state.groups.check_post(&id, &c, to, body.len())?;
    let charge = (body.len() as u64).max(POST_FLOOR);
    let receipt = state
        .group_limiter
        .charge(&client, charge)
        .await
        .map_err(|e| {
            charge_error(&state, e, |Refused { wait, .. }| {
                let mut e = ApiError::new(
                    ErrorCode::RateLimited,
                    format!("group bytes-per-hour limit reached; retry in {wait} s"),
                );
                e.retry_after = Some(wait);
                e
            })
        })?;
    if let Err(r) = state.groups.post(&id, &c, to, body) {
        state.group_limiter.refund_all(&receipt).await;
        return Err(r.into());
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `GET /v1/groups/{id}/messages?wait_ms=N`: the oldest envelope, or `204` once `N` ms
/// (at most [`GROUP_MAX_WAIT_MS`], default 0) pass with none.
pub(super) async fn fetch_group_message(
    S(state): S<Arc<AppState>>,
    id: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let id = local(&state, id)?;
    let c = credential(&headers)?;
    let wait = query_number(query.as_deref(), "wait_ms")?.unwrap_or(0);
    if wait > GROUP_MAX_WAIT_MS {
        return Err(ApiError::new(
            ErrorCode::BadRequest,
            format!("wait_ms is at most {GROUP_MAX_WAIT_MS}"),
        ));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_millis(wait);
    let message = |from: u8, body: Bytes| {
        let mut resp = ([(header::CONTENT_TYPE, psi_http::BINARY)], body).into_response();
        let h = resp.headers_mut();
        h.insert(GROUP_FROM_HEADER, HeaderValue::from(u16::from(from)));
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        resp
    };
    loop {
        let notify = match state.groups.fetch(&id, &c)? {
            Fetched::Message(from, body) => return Ok(message(from, body)),
            Fetched::Wait(notify) => notify,
        };
        let woken = notify.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        // A post between the look and the wait: look once more, now that a post wakes us.
        if let Fetched::Message(from, body) = state.groups.fetch(&id, &c)? {
            return Ok(message(from, body));
        }
        if tokio::time::timeout_at(deadline, woken).await.is_err() {
            return Ok(StatusCode::NO_CONTENT.into_response());
        }
    }
}
