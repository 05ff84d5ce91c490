//! HTTP handlers (`docs/api.md`). Every failure is a JSON [`ErrorBody`] with a stable
//! code; nothing here panics on input, and nothing logs contact data.

use crate::AppState;
use crate::sessions::{Full, Lookup, Protocol, Session, State, lock};
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, JsonRejection};
use axum::extract::{ConnectInfo, DefaultBodyLimit, MatchedPath, Path, Request, State as S};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{Next, from_fn, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Extension, Json, Router};
use psi_api::{CreateSession, ErrorBody, Health, SessionCreated, codes, labels, protocol};
use psi_core::ot::{OtConfig, OtServer};
use psi_core::{Threads, wire};
use rand_core::Rng;
use sha2::{Digest, Sha256};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;
use subtle::ConstantTimeEq;

type AppS = S<Arc<AppState>>;

/// An API error: status, stable code, log-safe message.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: self.code.to_string(),
            message: self.message,
        };
        let mut resp = (self.status, Json(body)).into_response();
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
        let (status, code) = match &e {
            E::WrongPhase { .. } => (StatusCode::CONFLICT, codes::WRONG_PHASE),
            E::EpochMismatch { .. } => (StatusCode::CONFLICT, codes::EPOCH_MISMATCH),
            E::InputTooLarge { .. } => (StatusCode::BAD_REQUEST, codes::TOO_MANY_ITEMS),
            E::CountMismatch { .. } => (StatusCode::BAD_REQUEST, codes::COUNT_MISMATCH),
            E::ThreadPool(_) => (StatusCode::INTERNAL_SERVER_ERROR, codes::INTERNAL),
            _ => (StatusCode::BAD_REQUEST, codes::INVALID_MESSAGE),
        };
        // psi_core errors are log-safe by design (counts, tags, phase names only).
        ApiError::new(status, code, e.to_string())
    }
}

fn body_error(e: BytesRejection) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            codes::BODY_TOO_LARGE,
            "request body exceeds the server's limit (see max_body_bytes)",
        )
    } else {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            codes::BAD_REQUEST,
            "could not read the request body",
        )
    }
}

fn binary_body(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Bytes, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !ct.trim().eq_ignore_ascii_case("application/octet-stream") {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            codes::UNSUPPORTED_MEDIA_TYPE,
            "protocol messages must be sent as application/octet-stream",
        ));
    }
    body.map_err(body_error)
}

fn binary(bytes: Vec<u8>, server_ms: f64) -> Response {
    let mut resp = ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("psi;dur={server_ms:.3}")) {
        resp.headers_mut().insert("server-timing", v);
    }
    resp
}

/// Who a request counts against: its bearer token (hashed) or its peer IP.
#[derive(Clone, Debug)]
pub(crate) struct ClientKey(String);

/// Builds the router over `state`.
pub fn router(state: Arc<AppState>) -> Router {
    let api = Router::new()
        .route("/v1/sessions", post(create_session))
        .route("/v1/sessions/{id}", delete(delete_session))
        .route("/v1/sessions/{id}/dh/query", post(dh_query))
        .route("/v1/sessions/{id}/ot/round", post(ot_round))
        .route("/v1/sessions/{id}/labels/query", post(label_query))
        .route("/v1/sessions/{id}/labels/fetch", post(label_fetch))
        .route("/v1/dh/encoded-set", get(encoded_set))
        .route_layer(from_fn_with_state(state.clone(), auth));
    Router::new()
        .route("/v1/health", get(health))
        .merge(api)
        .fallback(|| async {
            ApiError::new(StatusCode::NOT_FOUND, codes::NOT_FOUND, "no such endpoint")
        })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                codes::METHOD_NOT_ALLOWED,
                "method not allowed on this endpoint",
            )
        })
        .layer(DefaultBodyLimit::max(state.config.max_body_bytes))
        .layer(from_fn_with_state(state.clone(), deadline))
        .layer(from_fn(log_request))
        .with_state(state)
}

/// Bounds each request, body upload included, by `Config::request_timeout`.
async fn deadline(S(state): AppS, req: Request, next: Next) -> Response {
    match tokio::time::timeout(state.config.request_timeout, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            codes::REQUEST_TIMEOUT,
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

/// The caller key for an address: IPv4 as is, IPv6 by its /64 prefix (one subscriber
/// usually holds a whole /64, so per-address keys would multiply its budget).
fn rate_key_ip(ip: std::net::IpAddr) -> String {
    match ip {
        std::net::IpAddr::V4(v4) => v4.to_string(),
        std::net::IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let s = v6.segments();
                format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
            }
        },
    }
}

async fn auth(S(state): AppS, mut req: Request, next: Next) -> Result<Response, ApiError> {
    let key = if state.config.tokens.is_empty() {
        let ip = req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map_or_else(|| "unknown".to_string(), |c| rate_key_ip(c.0.ip()));
        format!("ip:{ip}")
    } else {
        let Some(value) = req.headers().get(header::AUTHORIZATION) else {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                codes::MISSING_TOKEN,
                "this server requires Authorization: Bearer <token>",
            ));
        };
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .unwrap_or("");
        // Compare digests, so neither the tokens' contents nor their lengths leak through
        // timing; an empty or malformed credential never matches, whatever is configured.
        let presented = Sha256::digest(token.as_bytes());
        let mut ok = subtle::Choice::from(u8::from(!token.is_empty()));
        let mut any = subtle::Choice::from(0u8);
        for t in state.config.tokens.iter().filter(|t| !t.is_empty()) {
            any |= Sha256::digest(t.as_bytes())
                .as_slice()
                .ct_eq(presented.as_slice());
        }
        ok &= any;
        if !bool::from(ok) {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                codes::INVALID_TOKEN,
                "bearer token not accepted",
            ));
        }
        format!(
            "token:{}",
            hex::encode(&Sha256::digest(token.as_bytes())[..8])
        )
    };
    req.extensions_mut().insert(ClientKey(key));
    Ok(next.run(req).await)
}

async fn health(S(state): AppS) -> Json<Health> {
    let r = state.registry();
    let mut protocols = vec![protocol::DH.to_string()];
    if state.config.enable_ot {
        protocols.push(protocol::OT.to_string());
    }
    Json(Health {
        status: "ok".into(),
        epoch: r.dh.epoch(),
        registry_items: r.stats().entries,
        protocols,
    })
}

async fn create_session(
    S(state): AppS,
    Extension(ClientKey(client)): Extension<ClientKey>,
    body: Result<Json<CreateSession>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(req) = body.map_err(|e| match e {
        JsonRejection::BytesRejection(b) => body_error(b),
        JsonRejection::MissingJsonContentType(_) => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            codes::UNSUPPORTED_MEDIA_TYPE,
            "session requests must be application/json",
        ),
        // serde's text can quote the request's values: never echo it.
        _ => ApiError::new(
            StatusCode::BAD_REQUEST,
            codes::BAD_REQUEST,
            "invalid session request: expected {\"protocol\": \"dh-psi\"|\"ot-psi\", \"client_items\": integer}",
        ),
    })?;
    let proto = match req.protocol.as_str() {
        protocol::DH => Protocol::Dh,
        protocol::OT if state.config.enable_ot => Protocol::Ot,
        _ => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                codes::UNSUPPORTED_PROTOCOL,
                format!(
                    "unsupported protocol; this server runs: {}",
                    if state.config.enable_ot {
                        "dh-psi, ot-psi"
                    } else {
                        "dh-psi"
                    }
                ),
            ));
        }
    };
    let n = req.client_items;
    if n == 0 {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            codes::BAD_REQUEST,
            "client_items must be at least 1",
        ));
    }
    if n as usize > state.config.max_client_items {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            codes::TOO_MANY_ITEMS,
            format!(
                "client_items {n} exceeds this server's limit {}",
                state.config.max_client_items
            ),
        ));
    }
    let registry = state.registry();
    let mut id = [0u8; 16];
    crate::store::os_rng()
        .map_err(|_| internal())?
        .fill_bytes(&mut id);
    let id = hex::encode(id);
    // Admit the session (caps checked) before any per-session work; an OT session's
    // server state is built below, once admitted and charged.
    let session = Session {
        protocol: proto,
        client_items: n,
        client: client.clone(),
        epoch: registry.dh.epoch(),
        label_bits: registry.label_bits,
        state: match proto {
            Protocol::Dh => State::DhAwaitingQuery,
            Protocol::Ot => State::Ot(None),
        },
        label_queried: false,
        labels_fetched: false,
    };
    if let Err(full) = state.sessions.insert(id.clone(), session) {
        let mut e = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            codes::TOO_MANY_SESSIONS,
            match full {
                Full::Total => "the server is at its session limit; retry later",
                Full::Client => "this caller has too many live sessions; finish or delete one",
                Full::Ot => "the server is at its OT-PSI session limit; retry later or use dh-psi",
            },
        );
        e.retry_after = Some(5);
        return Err(e);
    }
    if let Err(wait) = state.limiter.charge(&client, u64::from(n)) {
        state.sessions.remove(&id);
        return Err(rate_limited(wait));
    }
    if proto == Protocol::Ot {
        let items = registry.items.clone();
        let config = OtConfig::new(Threads::ONE).with_max_client_items(n as usize);
        let built = tokio::task::spawn_blocking(move || {
            OtServer::new(
                items,
                config,
                &mut crate::store::os_rng()
                    .map_err(|_| psi_core::Error::ThreadPool("no OS randomness".into()))?,
            )
        })
        .await;
        let server = match built {
            Ok(Ok(server)) => server,
            other => {
                state.sessions.remove(&id);
                return Err(match other {
                    Ok(Err(e)) => e.into(),
                    _ => internal(),
                });
            }
        };
        if let Lookup::Live(s) = state.sessions.get(&id) {
            lock(&s).state = State::Ot(Some(Box::new(server)));
        }
    }
    tracing::info!(session = %id, protocol = req.protocol.as_str(), client_items = n, "session created");
    let body = SessionCreated {
        session_id: id,
        protocol: req.protocol,
        epoch: registry.dh.epoch(),
        registry_items: registry.stats().entries,
        max_client_items: state.config.max_client_items as u32,
        max_body_bytes: state.config.max_body_bytes as u64,
        encoded_set_etag: registry.etag.clone(),
        label_bucket_bits: registry.label_bits,
        expires_in_secs: state.sessions.ttl().as_secs(),
    };
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

fn rate_limited(wait: u64) -> ApiError {
    let mut e = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        codes::RATE_LIMITED,
        format!("items-per-hour limit reached; retry in {wait} s"),
    );
    e.retry_after = Some(wait);
    e
}

fn internal() -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        codes::INTERNAL,
        "internal error",
    )
}

fn wrong_phase(msg: &str) -> ApiError {
    ApiError::new(StatusCode::CONFLICT, codes::WRONG_PHASE, msg.to_string())
}

fn session(
    state: &AppState,
    id: &str,
    client: &str,
) -> Result<Arc<std::sync::Mutex<Session>>, ApiError> {
    match state.sessions.get(id) {
        Lookup::Live(s) if lock(&s).client == client => Ok(s),
        Lookup::Expired => Err(ApiError::new(
            StatusCode::GONE,
            codes::SESSION_EXPIRED,
            "session expired; create a new one",
        )),
        _ => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            codes::UNKNOWN_SESSION,
            "no such session",
        )),
    }
}

async fn delete_session(
    S(state): AppS,
    Extension(ClientKey(client)): Extension<ClientKey>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    session(&state, &id, &client)?;
    state.sessions.remove(&id);
    Ok(StatusCode::NO_CONTENT)
}

/// The element count of a DH-PSI QUERY frame, if the header is readable.
fn query_count(body: &[u8]) -> Option<u32> {
    if body.len() < wire::HEADER_LEN + 8 || body[4] != psi_core::dh::message_type::QUERY {
        return None;
    }
    Some(u32::from_be_bytes(body[13..17].try_into().ok()?))
}

async fn evaluate(state: &AppState, body: Bytes) -> Result<Response, ApiError> {
    let registry = state.registry();
    let _permit = state.workers.acquire().await.map_err(|_| internal())?;
    let t = Instant::now();
    let out = tokio::task::spawn_blocking(move || registry.dh.handle_query(&body))
        .await
        .map_err(|_| internal())??;
    Ok(binary(out, t.elapsed().as_secs_f64() * 1e3))
}

async fn dh_query(
    S(state): AppS,
    Extension(ClientKey(client)): Extension<ClientKey>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let s = session(&state, &id, &client)?;
    let body = binary_body(&headers, body)?;
    {
        let mut g = lock(&s);
        if g.protocol != Protocol::Dh {
            return Err(wrong_phase("this is an ot-psi session; use /ot/round"));
        }
        if !matches!(g.state, State::DhAwaitingQuery) {
            return Err(wrong_phase("the session's query was already answered"));
        }
        if let Some(n) = query_count(&body) {
            if n != g.client_items {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    codes::COUNT_MISMATCH,
                    format!(
                        "query has {n} elements, the session declared {}",
                        g.client_items
                    ),
                ));
            }
        }
        g.state = State::Matched; // consumed; restored below if the query is rejected
    }
    let result = evaluate(&state, body).await;
    if result.is_err() {
        lock(&s).state = State::DhAwaitingQuery;
    }
    result
}

async fn ot_round(
    S(state): AppS,
    Extension(ClientKey(client)): Extension<ClientKey>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let s = session(&state, &id, &client)?;
    let body = binary_body(&headers, body)?;
    // Wait for a worker before taking the state out, so a request dropped while queueing
    // leaves the session as it was.
    let permit = state.workers.acquire().await.map_err(|_| internal())?;
    let mut server = {
        let mut g = lock(&s);
        if g.protocol != Protocol::Ot {
            return Err(wrong_phase("this is a dh-psi session; use /dh/query"));
        }
        match &mut g.state {
            State::Ot(server) => server
                .take()
                .ok_or_else(|| wrong_phase("another round of this session is in progress"))?,
            _ => return Err(wrong_phase("the session's protocol run is over")),
        }
    };
    let t = Instant::now();
    let session_ref = s.clone();
    let result = tokio::task::spawn_blocking(move || {
        let r = server.handle(&body);
        // The state goes back here, not in the handler: a blocking task runs to the end
        // even when the request is dropped (timeout, disconnect).
        lock(&session_ref).state = if server.is_done() {
            State::Matched
        } else {
            State::Ot(Some(server))
        };
        r
    })
    .await
    .map_err(|_| internal())?;
    drop(permit);
    let ms = t.elapsed().as_secs_f64() * 1e3;
    Ok(binary(result?, ms))
}

async fn label_query(
    S(state): AppS,
    Extension(ClientKey(client)): Extension<ClientKey>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let s = session(&state, &id, &client)?;
    let body = binary_body(&headers, body)?;
    {
        let mut g = lock(&s);
        if !matches!(g.state, State::Matched) {
            return Err(wrong_phase("labels come after the protocol run"));
        }
        if g.label_queried {
            return Err(wrong_phase(
                "the session's label query was already answered",
            ));
        }
        let n = query_count(&body).unwrap_or(0);
        if n > g.client_items {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                codes::TOO_MANY_ITEMS,
                format!(
                    "label query has {n} elements, more than the session's {}",
                    g.client_items
                ),
            ));
        }
        state
            .limiter
            .charge(&client, u64::from(n))
            .map_err(rate_limited)?;
        g.label_queried = true;
    }
    let result = evaluate(&state, body).await;
    if result.is_err() {
        lock(&s).label_queried = false;
    }
    result
}

async fn label_fetch(
    S(state): AppS,
    Extension(ClientKey(client)): Extension<ClientKey>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let s = session(&state, &id, &client)?;
    let body = binary_body(&headers, body)?;
    let registry = state.registry();
    let mut buckets = labels::decode_fetch(&body).ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            codes::INVALID_MESSAGE,
            "label fetch body must be a list of big-endian u32 bucket ids",
        )
    })?;
    buckets.sort_unstable();
    buckets.dedup();
    {
        let mut g = lock(&s);
        if !g.label_queried || g.labels_fetched {
            return Err(wrong_phase(
                "label buckets are fetched once, after the label query",
            ));
        }
        // A reload within the epoch can change the bucket layout: the client's bucket ids
        // were computed for the session's, so refuse rather than return the wrong buckets.
        if g.epoch != registry.dh.epoch() || g.label_bits != registry.label_bits {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                codes::EPOCH_MISMATCH,
                "the registry changed during this session",
            ));
        }
        if buckets.len() > g.client_items as usize {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                codes::TOO_MANY_ITEMS,
                "more buckets than the session's items",
            ));
        }
        let limit = 1u64 << registry.label_bits;
        if buckets.iter().any(|&b| u64::from(b) >= limit) {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                codes::INVALID_MESSAGE,
                format!("bucket ids must be below 2^{}", registry.label_bits),
            ));
        }
        g.labels_fetched = true;
    }
    let mut out = Vec::new();
    for b in buckets {
        let recs = registry
            .label_buckets
            .get(&b)
            .map_or(&[][..], |v| v.as_slice());
        out.extend_from_slice(&b.to_be_bytes());
        out.extend_from_slice(&(recs.len() as u32).to_be_bytes());
        out.extend_from_slice(recs);
    }
    Ok(binary(out, 0.0))
}

async fn encoded_set(S(state): AppS, headers: HeaderMap) -> Response {
    let r = state.registry();
    let matches = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == r.etag || t.trim() == "*"));
    let mut resp = if matches {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            [(header::CONTENT_TYPE, "application/octet-stream")],
            r.encoded.clone(),
        )
            .into_response()
    };
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&r.etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(psi_api::EPOCH_HEADER, HeaderValue::from(r.dh.epoch()));
    resp
}
