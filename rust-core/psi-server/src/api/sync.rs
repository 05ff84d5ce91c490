//! Sync mode's downloads (docs/protocol/sync.md §3, §7): `GET /v1/sync/snapshot` and
//! `GET /v1/sync/delta?from=V`. Both are the same for every client of a registry version
//! (a CDN may serve them), need a caller like the encoded set, and are charged to the
//! caller's download budget when they carry bytes (a 304 or a 204 is free).

use super::registry::{charge_download, if_none_match, requested_epoch};
use super::reply::{ApiError, epoch_gone, server_timing};
use crate::limits::Payer;
use crate::registry::Registry;
use crate::state::AppState;
use crate::sync::{DeltaAnswer, ServedSync};
use axum::Extension;
use axum::body::Bytes;
use axum::extract::{RawQuery, State as S};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use psi_http::ErrorCode;
use std::sync::Arc;
use std::time::Instant;

/// The registry of the requested epoch (`X-PSI-Epoch`, else the current one) and its
/// sync mode; `404 not_found` when the server does not serve sync mode.
fn served(state: &AppState, headers: &HeaderMap) -> Result<Arc<Registry>, ApiError> {
    let registry = match requested_epoch(headers)? {
        Some(e) => state.registry_for(e).ok_or_else(epoch_gone)?,
        None => state.registry(),
    };
    if registry.sync.is_none() {
        return Err(ApiError::new(
            ErrorCode::NotFound,
            "this server does not serve sync mode (psi serve --enable-sync)",
        ));
    }
    Ok(registry)
}

fn sync_of(registry: &Registry) -> &ServedSync {
    registry.sync.as_ref().expect("checked by served()")
}

/// A binary download with the sync headers: the epoch and the registry version.
fn download(body: Option<Bytes>, status: StatusCode, sync: &ServedSync, epoch: u32) -> Response {
    let mut resp = match body {
        Some(b) => ([(header::CONTENT_TYPE, psi_http::BINARY)], b).into_response(),
        None => status.into_response(),
    };
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(psi_http::EPOCH_HEADER, HeaderValue::from(epoch));
    h.insert(
        psi_http::SYNC_VERSION_HEADER,
        HeaderValue::from(sync.version()),
    );
    resp
}

/// `GET /v1/sync/snapshot`: the SYNC_SNAPSHOT of the loaded version, with its ETag; `304`
/// (free) when `If-None-Match` names it.
pub(super) async fn sync_snapshot(
    S(state): S<Arc<AppState>>,
    Extension(payer): Extension<Payer>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let t = Instant::now();
    let registry = served(&state, &headers)?;
    let sync = sync_of(&registry);
    let mut resp = if if_none_match(&headers, sync.snapshot_etag()) {
        download(None, StatusCode::NOT_MODIFIED, sync, registry.dh.epoch())
    } else {
        charge_download(&state, &payer, sync.snapshot.len(), false).await?;
        download(
            Some(sync.snapshot.clone()),
            StatusCode::OK,
            sync,
            registry.dh.epoch(),
        )
    };
    if let Ok(v) = HeaderValue::from_str(sync.snapshot_etag()) {
        resp.headers_mut().insert(header::ETAG, v);
    }
    server_timing(&mut resp, t.elapsed().as_secs_f64() * 1e3);
    Ok(resp)
}

/// `GET /v1/sync/delta?from=V`: the SYNC_DELTA from `V` to the loaded version; `204` when
/// `V` is the loaded version or later; `404 not_found` when no delta from `V` is kept.
pub(super) async fn sync_delta(
    S(state): S<Arc<AppState>>,
    Extension(payer): Extension<Payer>,
    query: RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let t = Instant::now();
    let from = query
        .0
        .as_deref()
        .unwrap_or_default()
        .split('&')
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| *k == psi_http::SYNC_FROM_PARAM)
        .and_then(|(_, v)| v.parse::<u64>().ok())
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::BadRequest,
                "expected ?from=<the synced set's version, a decimal integer>",
            )
        })?;
    let registry = served(&state, &headers)?;
    let sync = sync_of(&registry);
    let epoch = registry.dh.epoch();
    let mut resp = match sync.delta_from(from) {
        DeltaAnswer::Current => download(None, StatusCode::NO_CONTENT, sync, epoch),
        DeltaAnswer::Delta(d) => {
            charge_download(&state, &payer, d.len(), false).await?;
            download(Some(d.clone()), StatusCode::OK, sync, epoch)
        }
        DeltaAnswer::NotKept => {
            return Err(ApiError::new(
                ErrorCode::NotFound,
                "no delta from this version is kept; download the snapshot",
            ));
        }
    };
    server_timing(&mut resp, t.elapsed().as_secs_f64() * 1e3);
    Ok(resp)
}
