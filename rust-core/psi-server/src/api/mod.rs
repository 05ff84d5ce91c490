//! HTTP handlers (`docs/api.md`). Here: the router over psi-http's route table, with the
//! request deadline and the request log; the handlers live in one file per concept.
//! Every failure is a JSON [`psi_http::ErrorBody`] with a stable code ([`reply`]);
//! nothing here panics on input, and nothing logs contact data.

mod auth;
mod groups;
mod probe;
mod registry;
mod reply;
mod sessions;
mod steps;
mod sync;
mod transition;

pub use probe::PROBE_REQUEST_FLOOR;

use self::auth::auth;
use self::groups::{
    create_group, end_group, fetch_group_message, group_state, join_group, post_group_message,
};
use self::probe::{probe_down, probe_up};
use self::registry::{encoded_set, health};
use self::reply::ApiError;
use self::sessions::{create_session, delete_session};
use self::steps::{dh_query, label_fetch, label_query, round};
use self::sync::{sync_delta, sync_snapshot};
use self::transition::SessionCall;
use crate::state::AppState;
use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State as S};
use axum::http::header;
use axum::middleware::{Next, from_fn, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, MethodRouter, on};
use psi_http::{ErrorCode, Route};
use std::sync::Arc;
use std::time::Instant;

fn method_filter(m: psi_http::Method) -> MethodFilter {
    match m {
        psi_http::Method::Get => MethodFilter::GET,
        psi_http::Method::Post => MethodFilter::POST,
        psi_http::Method::Delete => MethodFilter::DELETE,
    }
}

/// The most request body bytes a JSON route (`POST /v1/sessions`) and a route without a
/// body take (issue 35 item 2: every route took `max_body_bytes`).
const JSON_BODY_LIMIT: usize = 4 << 10;

/// The most body bytes a request of `route` may declare or send, checked before any of
/// it is read: a few KiB for JSON and body-less routes, the probe's size for the upload
/// probe, `max_body_bytes` for session steps (whose own limit, from the session, is
/// checked by `transition::SessionCall`).
fn body_limit(route: Route, max_body_bytes: usize) -> usize {
    if route.round_protocol().is_some() {
        return max_body_bytes;
    }
    match route {
        Route::DhQuery | Route::LabelQuery | Route::LabelFetch => max_body_bytes,
        Route::ProbeDown | Route::ProbeUp => {
            usize::try_from(psi_http::PROBE_MAX_BYTES).unwrap_or(usize::MAX)
        }
        // The group's own limit (`GroupLimits::max_message_bytes`) is checked by the
        // handler, within this one.
        Route::PostGroupMessage => max_body_bytes,
        _ => JSON_BODY_LIMIT.min(max_body_bytes),
    }
}

/// Refuses a request declaring more than `limit` body bytes (`413 body_too_large`)
/// before its body is read; a body sent without a length is cut at `limit` by
/// [`DefaultBodyLimit`].
async fn declared_limit(S(limit): S<usize>, req: Request, next: Next) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return ApiError::new(
            ErrorCode::BodyTooLarge,
            format!("this endpoint takes at most {limit} request body bytes"),
        )
        .into_response();
    }
    next.run(req).await
}

/// [`handler`] under the route's body limit ([`body_limit`]).
fn limited(route: Route, max_body_bytes: usize) -> MethodRouter<Arc<AppState>> {
    let limit = body_limit(route, max_body_bytes);
    handler(route)
        .layer(DefaultBodyLimit::max(limit))
        .layer(from_fn_with_state(limit, declared_limit))
}

fn handler(route: Route) -> MethodRouter<Arc<AppState>> {
    let f = method_filter(route.method());
    match route {
        Route::Health => on(f, health),
        Route::CreateSession => on(f, create_session),
        Route::DeleteSession => on(f, delete_session),
        Route::DhQuery => on(f, dh_query),
        Route::DhEncodedSet => on(f, encoded_set),
        Route::LabelQuery => on(f, label_query),
        Route::LabelFetch => on(f, label_fetch),
        Route::ProbeDown => on(f, probe_down),
        Route::ProbeUp => on(f, probe_up),
        Route::CreateGroup => on(f, create_group),
        Route::JoinGroup => on(f, join_group),
        Route::GroupState => on(f, group_state),
        Route::EndGroup => on(f, end_group),
        Route::PostGroupMessage => on(f, post_group_message),
        Route::FetchGroupMessage => on(f, fetch_group_message),
        Route::SyncSnapshot => on(f, sync_snapshot),
        Route::SyncDelta => on(f, sync_delta),
        // The protocols that run in rounds share one handler (ADR 0039's plug).
        Route::OtRound | Route::Cm20Round | Route::GbfRound => match route.round_protocol() {
            Some(protocol) => on(f, move |S(state): S<Arc<AppState>>, call: SessionCall| {
                round(state, call, protocol)
            }),
            None => on(f, || async {
                ApiError::new(ErrorCode::NotFound, "no such endpoint")
            }),
        },
    }
}

/// Builds the router over `state`, from psi-http's route table (only `/v1/health` is
/// open; every other route goes through authentication).
pub fn router(state: Arc<AppState>) -> Router {
    let mut open = Router::new();
    let mut api = Router::new();
    let max = state.config.max_body_bytes;
    // Routes sharing a path (the probe's two methods, a group's roster and end, its
    // mailbox's post and fetch) are one method router, each method with its own limit.
    let mut by_path: Vec<(&'static str, MethodRouter<Arc<AppState>>)> = Vec::new();
    for &route in Route::ALL {
        if route == Route::Health {
            open = open.route(route.template(), limited(route, max));
            continue;
        }
        let h = limited(route, max);
        match by_path.iter_mut().find(|(p, _)| *p == route.template()) {
            Some((_, m)) => *m = std::mem::take(m).merge(h),
            None => by_path.push((route.template(), h)),
        }
    }
    for (path, h) in by_path {
        api = api.route(path, h);
    }
    let api = api.route_layer(from_fn_with_state(state.clone(), auth));
    open.merge(api)
        .fallback(|| async { ApiError::new(ErrorCode::NotFound, "no such endpoint") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                ErrorCode::MethodNotAllowed,
                "method not allowed on this endpoint",
            )
        })
        .layer(DefaultBodyLimit::max(state.config.max_body_bytes))
        .layer(from_fn_with_state(state.clone(), deadline))
        .layer(from_fn(log_request))
        .with_state(state)
}

/// Bounds each request, body upload included, by `Config::request_timeout`.
async fn deadline(S(state): S<Arc<AppState>>, req: Request, next: Next) -> Response {
    match tokio::time::timeout(state.config.request_timeout, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => ApiError::new(
            ErrorCode::RequestTimeout,
            "the request took too long (body upload and handling)",
        )
        .into_response(),
    }
}

async fn log_request(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("(unmatched)", |p| p.as_str())
        .to_string();
    let t = Instant::now();
    let resp = next.run(req).await;
    tracing::info!(
        %method,
        path,
        status = resp.status().as_u16(),
        ms = t.elapsed().as_millis() as u64,
        "request"
    );
    resp
}
