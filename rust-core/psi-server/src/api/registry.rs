//! What anyone may read about the registry: `GET /v1/health` (epoch, sizes, costs) and
//! the encoded-set download with its ETag and its download budget.

use super::reply::{ApiError, budget_refused, charge_error, epoch_gone, server_timing};
use crate::limits::Payer;
use crate::state::AppState;
use axum::extract::{ConnectInfo, State as S};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use psi_http::{ErrorCode, Health};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

/// `GET /v1/health`, open to everyone and so limited per address
/// (`Config::health_per_hour`): beyond it a 429 that also closes the connection, so
/// health requests cannot keep connections open for free.
pub(super) async fn health(
    S(state): S<Arc<AppState>>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
) -> Result<Json<Health>, Response> {
    if let Some(Extension(ConnectInfo(peer))) = peer {
        let c = &state.config;
        // A trusted proxy's malformed forwarding header is refused (400), never charged
        // to the proxy's own address: a balancer probing from it would be refused.
        let ip =
            crate::caller::client_ip(peer.ip(), &headers, &c.trusted_proxies, c.client_ip_header)
                .map_err(|e| super::reply::malformed_forwarding(e).into_response())?;
        let key = crate::caller::rate_key_ip(ip, c.ipv4_prefix, c.ipv6_prefix);
        if let Err(wait) = state.health_limiter.charge(&key, 1) {
            let mut e = ApiError::new(
                ErrorCode::RateLimited,
                "too many health requests from this address",
            );
            e.retry_after = Some(wait);
            let mut resp = e.into_response();
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return Err(resp);
        }
    }
    Ok(Json(health_body(&state)))
}

/// The health this server reports now: `GET /v1/health`'s body, and a session's when its
/// creation asked for it (`POST /v1/sessions?health=1`, ADR 0054).
pub(super) fn health_body(state: &AppState) -> Health {
    let r = state.registry();
    Health {
        status: "ok".into(),
        epoch: r.dh.epoch(),
        registry_items: r.stats().entries,
        protocols: state
            .protocols()
            .iter()
            .map(|p| p.api_name().to_string())
            .collect(),
        max_client_items: state.config.max_client_items as u32,
        max_body_bytes: state.config.max_body_bytes as u64,
        encoded_set_etag: r.etag.clone(),
        label_bucket_bits: r.labels.bucket_bits(),
        label_record_bytes: r.labels.record_bytes() as u64,
        label_lane_width: r
            .rounds
            .lane_width()
            .filter(|_| state.protocols().iter().any(|p| p.has_label_lanes())),
        costs: Some(state.costs),
        // This server implements every optional part of the API.
        features: psi_http::Feature::ALL
            .iter()
            .map(|f| f.as_str().to_string())
            .collect(),
        store: Some(state.store_health.state()),
        sync: r.sync.as_ref().map(crate::sync::ServedSync::health_info),
    }
}

/// Charges `bytes` of a download to the caller's hourly download budget
/// (`Config::encoded_set_bytes_per_hour`, with the network and ceiling levels of a caller
/// without a token, ADR 0038): a full encoded set, or a label fetch's buckets
/// (`labels: true`). A download larger than the per-caller budget is charged the budget:
/// one an hour, not none.
pub(super) async fn charge_download(
    state: &AppState,
    payer: &Payer,
    bytes: usize,
    labels: bool,
) -> Result<(), ApiError> {
    let limiter = &state.download_limiter;
    let charge = (bytes as u64).min(limiter.per_hour());
    let charged = limiter.charge_all(payer, charge).await;
    charged.map(drop).map_err(|e| {
        charge_error(state, e, |refused| {
            if labels {
                return budget_refused(
                    "download bytes-per-hour limit (label buckets count like encoded-set downloads)",
                    refused,
                );
            }
            let mut e = budget_refused("encoded-set download bytes-per-hour limit", refused);
            e.message.push_str(
                " (a request whose If-None-Match names the current set is answered 304 and not charged)",
            );
            e
        })
    })
}

/// RFC 9110 weak comparison: opaque tags equal once any `W/` prefix is dropped.
fn weak_eq(a: &str, b: &str) -> bool {
    a.trim().trim_start_matches("W/") == b.trim().trim_start_matches("W/")
}

/// The key epoch a download names in `X-PSI-Epoch` (`None`: the current one).
pub(super) fn requested_epoch(headers: &HeaderMap) -> Result<Option<u32>, ApiError> {
    match headers.get(psi_http::EPOCH_HEADER) {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<u32>().ok())
            .map(Some)
            .ok_or_else(|| {
                ApiError::new(
                    ErrorCode::BadRequest,
                    "X-PSI-Epoch must be a decimal key epoch",
                )
            }),
    }
}

/// Whether the request's `If-None-Match` names `etag` (or `*`).
pub(super) fn if_none_match(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == "*" || weak_eq(t, etag)))
}

/// The encoded set of the current epoch, or with `X-PSI-Epoch: <e>` of epoch `e` while it
/// is served (a session of the previous epoch finishing during the overlap). A full
/// download (200) is charged to the caller's download budget ([`charge_download`]); a 304
/// is free.
pub(super) async fn encoded_set(
    S(state): S<Arc<AppState>>,
    Extension(payer): Extension<Payer>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let t = Instant::now();
    let epoch = requested_epoch(&headers)?;
    let r = state.encoded_set_for(epoch).ok_or_else(epoch_gone)?;
    let matches = if_none_match(&headers, &r.etag);
    let mut resp = if matches {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        charge_download(&state, &payer, r.encoded.len(), false).await?;
        (
            [(header::CONTENT_TYPE, psi_http::BINARY)],
            r.encoded.clone(),
        )
            .into_response()
    };
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&r.etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(psi_http::EPOCH_HEADER, HeaderValue::from(r.epoch));
    server_timing(&mut resp, t.elapsed().as_secs_f64() * 1e3);
    Ok(resp)
}

#[cfg(test)]
mod tests {
    #[test]
    fn weak_etag_comparison() {
        assert!(super::weak_eq("W/\"a\"", "\"a\""));
        assert!(super::weak_eq(" \"a\"", "W/\"a\""));
        assert!(!super::weak_eq("\"a\"", "\"b\""));
    }
}
