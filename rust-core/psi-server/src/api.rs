//! HTTP handlers (`docs/api.md`). Every failure is a JSON [`ErrorBody`] with a stable
//! code; nothing here panics on input, and nothing logs contact data.

use crate::instance::Owner;
use crate::limits::{ChargeError, LevelKind, Payer, Refused};
use crate::sessions::{
    BuildError, ChunkedRun, Full, Lookup, MAX_FAILED_STEPS, RoundServer, Session, SessionPhase,
    lock,
};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, JsonRejection, PathRejection};
use axum::extract::{
    ConnectInfo, DefaultBodyLimit, FromRequest, FromRequestParts, MatchedPath, Path, RawQuery,
    Request, State as S,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{Next, from_fn, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, MethodRouter, on};
use axum::{Extension, Json, Router};
use psi_core::Protocol;
use psi_core::dh::{Elements, message_type};
use psi_http::{CreateSession, ErrorBody, ErrorCode, Health, Route, SessionCreated};
use rand_core::Rng;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use subtle::ConstantTimeEq;

type AppS = S<Arc<AppState>>;

/// An API error: a stable code (which fixes the status), a log-safe message.
#[derive(Debug)]
pub(crate) struct ApiError {
    code: ErrorCode,
    message: String,
    retry_after: Option<u64>,
}

impl ApiError {
    fn new(code: ErrorCode, message: impl Into<String>) -> Self {
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

fn body_error(e: BytesRejection) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            ErrorCode::BodyTooLarge,
            "request body exceeds the server's limit (see max_body_bytes)",
        )
    } else {
        ApiError::new(ErrorCode::BadRequest, "could not read the request body")
    }
}

fn binary(bytes: Vec<u8>, server_ms: f64) -> Response {
    let mut resp = ([(header::CONTENT_TYPE, psi_http::BINARY)], bytes).into_response();
    server_timing(&mut resp, server_ms);
    resp
}

fn server_timing(resp: &mut Response, server_ms: f64) {
    if let Ok(v) = HeaderValue::from_str(&format!("psi;dur={server_ms:.3}")) {
        resp.headers_mut().insert("server-timing", v);
    }
}

/// Who a request counts against (see [`auth`]): `token:<digest prefix>` (static token),
/// `token-id:<id>` (issued token) or `ip:<address or prefix>`.
#[derive(Clone, Debug)]
pub(crate) struct ClientKey(String);

/// The address block a caller's sessions are counted in beside its own cap
/// (`Config::max_sessions_per_block`): `ip:` and its network by `Config::ipv4_block_prefix`
/// or `Config::ipv6_block_prefix` (never narrower than the caller's own prefix); for a
/// token caller, its [`ClientKey`].
#[derive(Clone, Debug)]
pub(crate) struct ClientBlock(String);

fn method_filter(m: psi_http::Method) -> MethodFilter {
    match m {
        psi_http::Method::Get => MethodFilter::GET,
        psi_http::Method::Post => MethodFilter::POST,
        psi_http::Method::Delete => MethodFilter::DELETE,
    }
}

fn handler(route: Route) -> MethodRouter<Arc<AppState>> {
    let f = method_filter(route.method());
    match route {
        Route::Health => on(f, health),
        Route::CreateSession => on(f, create_session),
        Route::DeleteSession => on(f, delete_session),
        Route::DhQuery => on(f, dh_query),
        Route::DhEncodedSet => on(f, encoded_set),
        Route::OtRound => on(f, ot_round),
        Route::Cm20Round => on(f, cm20_round),
        Route::LabelQuery => on(f, label_query),
        Route::LabelFetch => on(f, label_fetch),
        Route::ProbeDown => on(f, probe_down),
        Route::ProbeUp => on(f, probe_up),
        _ => on(f, || async {
            ApiError::new(ErrorCode::NotFound, "no such endpoint")
        }),
    }
}

/// Builds the router over `state`, from psi-http's route table (only `/v1/health` is
/// open; every other route goes through authentication).
pub fn router(state: Arc<AppState>) -> Router {
    let mut open = Router::new();
    let mut api = Router::new();
    for &route in Route::ALL {
        if route == Route::Health {
            open = open.route(route.template(), handler(route));
        } else if route == Route::ProbeUp {
            // Same path as ProbeDown: one method router with both methods.
        } else if route == Route::ProbeDown {
            api = api.route(
                route.template(),
                handler(route).merge(handler(Route::ProbeUp)),
            );
        } else {
            api = api.route(route.template(), handler(route));
        }
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
async fn deadline(S(state): AppS, req: Request, next: Next) -> Response {
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

/// Authenticates the request and names the client it counts against ([`ClientKey`]):
/// - a static token (`Config::tokens`): `token:` and 8 bytes of its SHA-256, a budget
///   shared by everyone holding it;
/// - a token issued into the database (`psi token add`): `token-id:` and its id, with its
///   own budget; looked up by digest on every request, so issuing and revoking take
///   effect at once;
/// - without authentication: `ip:` and the client's address or prefix ([`crate::caller`]).
///
/// Authentication is on when static tokens are configured or any token was ever issued.
async fn auth(S(state): AppS, mut req: Request, next: Next) -> Result<Response, ApiError> {
    let mut block = None;
    let mut payer = None;
    let presented = req.headers().get(header::AUTHORIZATION).map(|value| {
        value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .unwrap_or("")
            .to_string()
    });
    let presented = presented.map(zeroize::Zeroizing::new);
    let digest = presented
        .as_deref()
        .filter(|t| !t.is_empty())
        .map(|t| crate::storage::token_digest(t));
    // Static tokens: compared as digests in constant time, so neither their contents nor
    // their lengths leak through timing; an empty or malformed credential never matches.
    let mut static_ok = subtle::Choice::from(0u8);
    if let Some(d) = &digest {
        for t in state.config.tokens.iter().filter(|t| !t.is_empty()) {
            static_ok |= crate::storage::token_digest(t)
                .as_slice()
                .ct_eq(d.as_slice());
        }
    }
    let key = if let (true, Some(d)) = (bool::from(static_ok), &digest) {
        format!("token:{}", hex::encode(&d[..8]))
    } else {
        // Issued tokens: looked up by digest (an index lookup; its timing depends on the
        // presented token's digest only, which does not help find a 256-bit token).
        let st = state.clone();
        let looked = tokio::task::spawn_blocking(move || st.accounts.check(digest.as_ref()))
            .await
            .map_err(|_| internal())?;
        let check = match looked {
            Ok(check) => check,
            // The database is away: a step of a running session goes on with the
            // database's last answer for this credential; a new session is refused
            // (store_health.rs).
            Err(e) if state.store_health.failed(&e) => {
                let creating = req
                    .extensions()
                    .get::<MatchedPath>()
                    .is_some_and(|p| p.as_str() == Route::CreateSession.template());
                match state.accounts.remembered(digest.as_ref()) {
                    Some(check) if !creating => check,
                    _ => return Err(store_unavailable()),
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "token lookup failed");
                return Err(internal());
            }
        };
        let auth_on = !state.config.tokens.is_empty() || check.any_issued;
        match check.token {
            Some(t) if !t.revoked => {
                let key = format!("token-id:{}", t.id);
                state.limiter.set_limit(&key, t.items_per_hour);
                key
            }
            _ if auth_on && presented.is_none() => {
                return Err(ApiError::new(
                    ErrorCode::MissingToken,
                    "this server requires Authorization: Bearer <token>",
                ));
            }
            _ if auth_on => {
                return Err(ApiError::new(
                    ErrorCode::InvalidToken,
                    "bearer token not accepted",
                ));
            }
            _ => {
                let peer = req
                    .extensions()
                    .get::<ConnectInfo<SocketAddr>>()
                    .map(|c| c.0.ip());
                match peer {
                    None => "ip:unknown".to_string(),
                    Some(peer) => {
                        let c = &state.config;
                        let ip = crate::caller::client_ip(
                            peer,
                            req.headers(),
                            &c.trusted_proxies,
                            c.client_ip_header,
                        )
                        .map_err(|e| {
                            ApiError::new(
                                ErrorCode::BadRequest,
                                format!(
                                    "the trusted proxy's {} header is not a list of IP addresses",
                                    e.0.name()
                                ),
                            )
                        })?;
                        block = Some(crate::caller::rate_key_ip(
                            ip,
                            c.ipv4_prefix.min(c.ipv4_block_prefix),
                            c.ipv6_prefix.min(c.ipv6_block_prefix),
                        ));
                        payer = Some(crate::caller::address_payer(ip, c));
                        crate::caller::rate_key_ip(ip, c.ipv4_prefix, c.ipv6_prefix)
                    }
                }
            }
        }
    };
    req.extensions_mut()
        .insert(ClientBlock(block.unwrap_or_else(|| key.clone())));
    req.extensions_mut()
        .insert(payer.unwrap_or_else(|| Payer::token(&key)));
    req.extensions_mut().insert(ClientKey(key));
    Ok(next.run(req).await)
}

/// `GET /v1/health`, open to everyone and so limited per address
/// (`Config::health_per_hour`): beyond it a 429 that also closes the connection, so
/// health requests cannot keep connections open for free.
async fn health(
    S(state): AppS,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
) -> Result<Json<Health>, Response> {
    if let Some(Extension(ConnectInfo(peer))) = peer {
        let c = &state.config;
        // A trusted proxy's malformed forwarding header counts against the proxy.
        let ip =
            crate::caller::client_ip(peer.ip(), &headers, &c.trusted_proxies, c.client_ip_header)
                .unwrap_or(peer.ip());
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
    let r = state.registry();
    Ok(Json(Health {
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
        costs: Some(state.costs),
        // This server implements every optional part of the API.
        features: psi_http::Feature::ALL
            .iter()
            .map(|f| f.as_str().to_string())
            .collect(),
        store: Some(state.store_health.state()),
    }))
}

async fn create_session(
    S(state): AppS,
    Extension(ClientKey(client)): Extension<ClientKey>,
    Extension(ClientBlock(block)): Extension<ClientBlock>,
    Extension(payer): Extension<Payer>,
    body: Result<Json<CreateSession>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(req) = body.map_err(|e| match e {
        JsonRejection::BytesRejection(b) => body_error(b),
        JsonRejection::MissingJsonContentType(_) => ApiError::new(
            ErrorCode::UnsupportedMediaType,
            "session requests must be application/json",
        ),
        // serde's text can quote the request's values: never echo it.
        _ => ApiError::new(
            ErrorCode::BadRequest,
            "invalid session request: expected {\"protocol\": \"dh-psi\"|\"ot-psi\"|\"cm20-psi\", \"client_items\": integer}",
        ),
    })?;
    let supported = state.protocols();
    let protocol = Protocol::from_api_name(&req.protocol)
        .filter(|p| supported.contains(p))
        .ok_or_else(|| {
            let names: Vec<&str> = supported.iter().map(|p| p.api_name()).collect();
            ApiError::new(
                ErrorCode::UnsupportedProtocol,
                format!(
                    "unsupported protocol; this server runs: {}",
                    names.join(", ")
                ),
            )
        })?;
    let n = req.client_items;
    if n == 0 {
        return Err(ApiError::new(
            ErrorCode::BadRequest,
            "client_items must be at least 1",
        ));
    }
    if n > state.config.max_client_items as u64 {
        return Err(ApiError::new(
            ErrorCode::TooManyItems,
            format!(
                "client_items {n} exceeds this server's limit {}",
                state.config.max_client_items
            ),
        ));
    }
    let n = n as u32; // max_client_items is at most 2^20
    // No new session while the database is away: its budget could not be charged, nor
    // its token re-checked (store_health.rs). Running sessions go on.
    if state.store_health.is_down() {
        return Err(store_unavailable());
    }
    let registry = state.registry();
    let mut id = [0u8; 16];
    crate::storage::os_rng()
        .map_err(|_| internal())?
        .fill_bytes(&mut id);
    let id = state.instance.session_id(&id);
    // Admit the session (caps checked) before any per-session work; an OT session's
    // server state is built below, once admitted and charged.
    let session = Session {
        protocol,
        client_items: n,
        client: client.clone(),
        epoch: registry.dh.epoch(),
        label_bits: registry.labels.bucket_bits(),
        labels: req.labels.unwrap_or(true),
        id: id.clone(),
        phase: if protocol.runs_in_rounds() {
            SessionPhase::Busy
        } else {
            SessionPhase::DhAwaitingQuery
        },
        in_flight: 0,
        created: Instant::now(),
        last_active: Instant::now(),
        stepped: false,
        failures: 0,
    };
    // The item budget is charged before the session table is touched: a request refused
    // for its budget evicts no idle session at the total cap and takes no OT-session
    // budget unit (ADR 0036). `Protocol::charge` is a lookup (OT-PSI below 4096 items: the
    // precomputed table sizes), so the refusal is as cheap as a trivial request. Charged
    // what the protocol can give: DH-PSI and CM20-PSI `n`, OT-PSI one OPRF evaluation per
    // Cuckoo bin, at most `max_bins_for(n)` (a malicious CM20-PSI client can get more,
    // which is why CM20 is opt-in, docs/adr/0021-cm20-psi.md).
    let receipt = state
        .limiter
        .charge_all(&payer, protocol.charge(n))
        .await
        .map_err(|e| charge_error(&state, e, rate_limited))?;
    // A shared OT-session budget is charged here, not in the session table (an await its
    // lock cannot hold): after the item budget, before the OT caps, refunded below if the
    // session is not admitted.
    let ot_budget = state.sessions.ot_budget();
    let ot_receipt = if protocol.runs_in_rounds() && ot_budget.shared_store().is_some() {
        match ot_budget.charge(&client, 1).await {
            Ok(r) => Some(r),
            Err(e) => {
                state.limiter.refund_all(&receipt).await;
                return Err(charge_error(&state, e, |r| ot_budget_refused(r.wait)));
            }
        }
    } else {
        None
    };
    let inserted = state.sessions.insert(id.clone(), block, session);
    if inserted.is_err() {
        state.limiter.refund_all(&receipt).await;
        if let Some(r) = &ot_receipt {
            ot_budget.refund_all(r).await;
        }
    }
    let slot = match inserted {
        Ok(slot) => slot,
        Err(Full::OtBudget(wait)) => return Err(ot_budget_refused(wait)),
        Err(full) => {
            // The OT capacity refusals have a code of their own (503 ot_capacity): a
            // client may run dh-psi instead, which no OT slot shortage refuses. The caps
            // every protocol shares are 503 too_many_sessions, the hourly OT budget 429.
            let code = match full {
                Full::OtClient | Full::Ot | Full::OtBudget(_) => ErrorCode::OtCapacity,
                Full::Total | Full::Client | Full::Block => ErrorCode::TooManySessions,
            };
            let mut e = ApiError::new(
                code,
                match full {
                    Full::Total => "the server is at its session limit; retry later",
                    Full::Client => "this caller has too many live sessions; finish or delete one",
                    Full::Block => "this caller's network has too many live sessions; retry later",
                    Full::OtClient => {
                        "OT-PSI capacity: this caller has too many OT-PSI runs in progress; finish one or use dh-psi"
                    }
                    Full::Ot | Full::OtBudget(_) => {
                        "OT-PSI capacity: every OT-PSI slot is taken; retry later or use dh-psi"
                    }
                },
            );
            e.retry_after = Some(5);
            return Err(e);
        }
    };
    if let (true, Some(slot)) = (protocol.runs_in_rounds(), slot) {
        // Built here, without an await between admission and storing the state: a request
        // dropped at an await would leave the charged session busy until it expires.
        // `RoundServer::build` only draws the session's randomness (one scalar
        // multiplication); the per-registry work happens at the hello, on a worker. A
        // protocol it cannot build is refused, never run as another protocol.
        let built = crate::storage::os_rng()
            .map_err(|_| internal())
            .and_then(|mut rng| {
                RoundServer::build(
                    protocol,
                    &registry.items,
                    registry.cm20.as_ref(),
                    n,
                    &mut rng,
                )
                .map_err(|e| match e {
                    BuildError::Core(e) => ApiError::from(e),
                    BuildError::NoRounds | BuildError::Unsupported => internal(),
                })
            });
        let server = match built {
            Ok(server) => server,
            Err(e) => {
                state.sessions.remove(&id);
                return Err(e);
            }
        };
        if let Lookup::Live(s) = state.sessions.get(&id) {
            lock(&s).phase = SessionPhase::ChunkedRunning(Box::new(ChunkedRun {
                server,
                _slot: slot,
            }));
        }
    }
    tracing::info!(session = %id, protocol = protocol.api_name(), client_items = n, "session created");
    let body = SessionCreated {
        session_id: id,
        protocol: protocol.api_name().to_string(),
        epoch: registry.dh.epoch(),
        registry_items: registry.stats().entries,
        max_client_items: state.config.max_client_items as u32,
        max_body_bytes: state.config.max_body_bytes as u64,
        encoded_set_etag: registry.etag.clone(),
        label_bucket_bits: registry.labels.bucket_bits(),
        expires_in_secs: state.sessions.ttl().as_secs(),
        ends_on_completion: true,
    };
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// `429 rate_limited` with `Retry-After`: the caller's OT-PSI sessions of the hour are
/// spent.
fn ot_budget_refused(wait: u64) -> ApiError {
    let mut e = ApiError::new(
        ErrorCode::RateLimited,
        format!("OT-PSI sessions-per-hour limit reached; retry in {wait} s or use dh-psi"),
    );
    e.retry_after = Some(wait);
    e
}

/// A budget charge that did not go through, as the API answers it: a refusal as `refuse`
/// says; a shared budget table that cannot be asked as `503 store_unavailable` (nothing
/// was charged and nothing is given: fail closed, retryable).
/// An unreachable table also marks the store unavailable (store_health.rs).
fn charge_error(
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

/// `429 rate_limited` with `Retry-After` for an items charge refused at `refused.kind`.
fn rate_limited(refused: Refused) -> ApiError {
    budget_refused("items-per-hour limit", refused)
}

/// `429 rate_limited` with `Retry-After`: `what` and which of the caller's budgets is
/// spent (its own, its network's, or the server-wide ceiling of callers without a token;
/// ADR 0038), never an address.
fn budget_refused(what: &str, Refused { wait, kind }: Refused) -> ApiError {
    let whose = match kind {
        LevelKind::Token | LevelKind::Address => "",
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

/// The registry of a session's key epoch: the current one, or the previous one during
/// the overlap after a rotation (ADR 0017); after that, `epoch_mismatch`.
fn session_registry(
    state: &AppState,
    s: &Arc<Mutex<Session>>,
) -> Result<Arc<crate::registry::Registry>, ApiError> {
    let epoch = lock(s).epoch;
    state.registry_for(epoch).ok_or_else(epoch_gone)
}

fn epoch_gone() -> ApiError {
    ApiError::new(
        ErrorCode::EpochMismatch,
        "this key epoch is no longer served; start a new session",
    )
}

fn internal() -> ApiError {
    ApiError::new(ErrorCode::Internal, "internal error")
}

/// `503 store_unavailable` with `Retry-After`: the database does not answer
/// (store_health.rs).
pub(crate) fn store_unavailable() -> ApiError {
    let mut e = ApiError::new(
        ErrorCode::StoreUnavailable,
        "the service's database does not answer; try again shortly",
    );
    e.retry_after = Some(crate::store_health::RETRY_AFTER_SECS);
    e
}

fn wrong_phase(msg: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::WrongPhase, msg)
}

fn session(state: &AppState, id: &str, client: &str) -> Result<Arc<Mutex<Session>>, ApiError> {
    on_this_instance(state, id)?;
    match state.sessions.get(id) {
        Lookup::Live(s) if lock(&s).client == client => Ok(s),
        Lookup::Expired => Err(ApiError::new(
            ErrorCode::SessionExpired,
            "session expired; create a new one",
        )),
        Lookup::Ended(owner) if owner == client => Err(ended()),
        _ => Err(unknown_session()),
    }
}

/// A request to a session the server ended: after its final response, a step that failed
/// for good, no successful step for `session_idle_timeout` (an OT-PSI or CM20-PSI run:
/// `ot_idle_timeout`; its hello: `ot_hello_timeout`), or evicted at the session cap.
fn ended() -> ApiError {
    wrong_phase("the session is complete or was ended by the server; create a new one")
}

/// The phase after a protocol's final response: labels may follow, or (a session
/// created with `labels: false`) it is complete.
fn after_protocol(labels: bool) -> SessionPhase {
    if labels {
        SessionPhase::Matched {
            label_queried: false,
        }
    } else {
        SessionPhase::Done
    }
}

fn unknown_session() -> ApiError {
    ApiError::new(ErrorCode::UnknownSession, "no such session")
}

/// A session id names the instance that holds the session (crate::instance): one naming
/// another instance reached this one through a misrouting or a failover of the balancer,
/// and is answered `421 wrong_instance` (retryable: a new session works on any instance)
/// before any lookup, so this instance's table is never touched. The message names the
/// instances, never the id's random part. An id naming no instance is `unknown_session`.
fn on_this_instance(state: &AppState, id: &str) -> Result<(), ApiError> {
    match state.instance.owner_of(id) {
        Owner::Other(name) => Err(ApiError::new(
            ErrorCode::WrongInstance,
            format!(
                "this session is held by instance {name}, and this is instance {}; start a new session",
                state.instance
            ),
        )),
        Owner::This | Owner::Nobody => Ok(()),
    }
}

async fn delete_session(
    S(state): AppS,
    Extension(ClientKey(client)): Extension<ClientKey>,
    id: Result<Path<String>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    // An id axum cannot extract (not UTF-8) is no session: a JSON error like any other,
    // not axum's plain-text 400.
    let Ok(Path(id)) = id else {
        return Err(unknown_session());
    };
    // A session the server already ended (complete) is gone: deleting it again succeeds.
    if let Lookup::Ended(owner) = state.sessions.get(&id)
        && owner == client
    {
        return Ok(StatusCode::NO_CONTENT);
    }
    session(&state, &id, &client)?;
    state.sessions.remove(&id);
    Ok(StatusCode::NO_CONTENT)
}

/// A protocol or label request on a session: the caller's session (looked up first, so
/// an unknown session is answered before its body is read) and its binary body.
struct SessionCall {
    session: Arc<Mutex<Session>>,
    body: Bytes,
    /// Counts the request as in progress on its session until the handler returns.
    _active: Active,
}

/// A request of a session in progress, from before its body is read until it is answered
/// or dropped: the sweep never ends an OT run as idle while one is under way.
struct Active(Arc<Mutex<Session>>);

impl Active {
    fn start(session: &Arc<Mutex<Session>>) -> Active {
        lock(session).in_flight += 1;
        Active(session.clone())
    }
}

/// Only a successful step ([`transition`]) restarts a session's idle period: a refused
/// request does not keep it alive.
impl Drop for Active {
    fn drop(&mut self) {
        let mut g = lock(&self.0);
        g.in_flight = g.in_flight.saturating_sub(1);
    }
}

impl FromRequest<Arc<AppState>> for SessionCall {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, ApiError> {
        let (mut parts, body) = req.into_parts();
        let Path(id) = Path::<String>::from_request_parts(&mut parts, state)
            .await
            .map_err(|_| unknown_session())?;
        let Some(ClientKey(client)) = parts.extensions.get::<ClientKey>().cloned() else {
            return Err(internal());
        };
        let session = session(state, &id, &client)?;
        let active = Active::start(&session);
        let route = parts
            .extensions
            .get::<MatchedPath>()
            .and_then(|p| Route::ALL.iter().find(|r| r.template() == p.as_str()))
            .copied();
        let limit = step_limit(route, &lock(&session), state.config.max_body_bytes);
        let body = read_step_body(&parts.headers, body, limit)
            .await
            .map_err(|e| refused(state, &session, e))?;
        Ok(SessionCall {
            session,
            body,
            _active: active,
        })
    }
}

/// The most bytes a step's request may carry, known from its route and session before the
/// body is read, and the refusal of a longer one (a body above `max_body_bytes` is
/// `body_too_large` whatever the step).
struct StepLimit {
    bytes: usize,
    refuse: ApiError,
    max_body_bytes: usize,
}

/// [`StepLimit`] of a request on `route` for session `g`: a DH query is exactly
/// `dh::sizes::query(n)` bytes (a longer one declares more elements than the session's
/// `n`: `count_mismatch`), a label query at most `label_slots(n)` elements and a label
/// fetch at most `fetch_buckets(n, b)` ids (`too_many_items`), an OT-PSI or CM20-PSI hello
/// its fixed size (`invalid_message`); anything else at most `max_body_bytes`.
fn step_limit(route: Option<Route>, g: &Session, max_body_bytes: usize) -> StepLimit {
    let n = g.client_items as usize;
    let (bytes, refuse) = match route {
        Some(Route::DhQuery) => {
            let bytes = psi_core::dh::sizes::query(n as u64) as usize;
            let e = ApiError::new(
                ErrorCode::CountMismatch,
                format!(
                    "a query of this session is {bytes} bytes (its {n} elements); this one is longer"
                ),
            );
            (bytes, e)
        }
        Some(Route::LabelQuery) => {
            let slots = psi_core::labels::label_slots(n);
            let bytes = psi_core::dh::sizes::query(slots as u64) as usize;
            let e = ApiError::new(
                ErrorCode::TooManyItems,
                format!("label query has more than the session's {slots} label slots"),
            );
            (bytes, e)
        }
        Some(Route::LabelFetch) => {
            let k = psi_core::labels::fetch_buckets(n, g.label_bits);
            let bytes = psi_core::labels::messages::request_len(k);
            let e = ApiError::new(
                ErrorCode::TooManyItems,
                format!("label fetch names more than the session's {k} bucket ids"),
            );
            (bytes, e)
        }
        Some(Route::OtRound | Route::Cm20Round) if !g.stepped => {
            let bytes = match g.protocol {
                Protocol::Cm20 => psi_core::cm20::sizes::hello(),
                _ => psi_core::ot::sizes::hello(),
            } as usize;
            let e = ApiError::new(
                ErrorCode::InvalidMessage,
                format!("a hello is {bytes} bytes; this one is longer"),
            );
            (bytes, e)
        }
        _ => (max_body_bytes, too_large()),
    };
    StepLimit {
        bytes: bytes.min(max_body_bytes),
        refuse,
        max_body_bytes,
    }
}

impl StepLimit {
    /// The refusal of a body of at least `len` bytes, above the limit.
    fn refusal(self, len: u64) -> ApiError {
        if len > self.max_body_bytes as u64 {
            too_large()
        } else {
            self.refuse
        }
    }
}

fn too_large() -> ApiError {
    ApiError::new(
        ErrorCode::BodyTooLarge,
        "request body exceeds the server's limit (see max_body_bytes)",
    )
}

/// Reads a step's binary body: the content type and a declared `Content-Length` are
/// checked before any byte of it is read (a body above `max_body_bytes` is
/// `body_too_large`, one above the step's limit the step's refusal), and reading stops
/// at the limit (a body sent without a length).
async fn read_step_body(
    headers: &HeaderMap,
    mut body: axum::body::Body,
    limit: StepLimit,
) -> Result<Bytes, ApiError> {
    use http_body::Body as _;
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !ct.trim().eq_ignore_ascii_case(psi_http::BINARY) {
        return Err(ApiError::new(
            ErrorCode::UnsupportedMediaType,
            "protocol messages must be sent as application/octet-stream",
        ));
    }
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(len) = declared
        && len > limit.bytes as u64
    {
        return Err(limit.refusal(len));
    }
    let mut out = Vec::with_capacity(declared.unwrap_or(0) as usize);
    while let Some(frame) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
    {
        let frame = frame
            .map_err(|_| ApiError::new(ErrorCode::BadRequest, "could not read the request body"))?;
        if let Ok(data) = frame.into_data() {
            if data.len() > limit.bytes - out.len() {
                return Err(limit.refusal((out.len() + data.len()) as u64));
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(out))
}

/// Whether a refusal counts as a failed step of its session: a 400, a body the server read
/// and refused (`bad_request`, `invalid_message`, `count_mismatch`, `too_many_items`),
/// the refusals that cost it work. The others cost no more than a request to an unknown
/// session (a content type, a length, a phase, checked before any decoding) or are not the
/// request's fault (a spent budget, a rotated key); they do not count.
fn counts_as_failure(e: &ApiError) -> bool {
    e.code.status() == 400
}

/// The refusal of a session's [`MAX_FAILED_STEPS`]th failed step: the session was ended.
fn session_failed(e: ApiError) -> ApiError {
    ApiError::new(
        ErrorCode::SessionFailed,
        format!(
            "{} ({}); after {MAX_FAILED_STEPS} refused steps the session was ended by the server: create a new one",
            e.message, e.code
        ),
    )
}

/// A request of session `s` was refused with `e` before its step ran: counts a failed step
/// and, at the [`MAX_FAILED_STEPS`]th, ends the session (a step in progress ends it when it
/// finishes) and answers `session_failed`.
fn refused(state: &AppState, s: &Arc<Mutex<Session>>, e: ApiError) -> ApiError {
    if !counts_as_failure(&e) {
        return e;
    }
    let id = {
        let mut g = lock(s);
        if !g.failed_step() {
            return e;
        }
        if matches!(g.phase, SessionPhase::Busy) {
            return session_failed(e);
        }
        g.phase = SessionPhase::Done;
        g.id.clone()
    };
    state.sessions.end(&id);
    tracing::info!(session = %id, "session ended after {MAX_FAILED_STEPS} failed steps");
    session_failed(e)
}

/// What a step does with the phase it took: the phase to store and the answer.
type Outcome = (SessionPhase, Result<Vec<u8>, ApiError>);

/// The one transition step of every session handler: waits for a worker (so a request
/// dropped while queueing leaves the session as it was), checks with `accept` that the
/// session may take this step (a rejected step changes nothing), takes the session's
/// phase, runs `work` on it on a blocking thread, and stores the phase `work` returns.
/// The phase goes back, and a session left `Done` is ended, inside the blocking task, not
/// in the handler: a blocking task runs to the end even when the request is dropped
/// (timeout, disconnect).
async fn transition(
    state: &Arc<AppState>,
    s: &Arc<Mutex<Session>>,
    accept: impl FnOnce(&Session) -> Result<(), ApiError>,
    work: impl FnOnce(SessionPhase) -> Outcome + Send + 'static,
) -> Result<Response, ApiError> {
    transition_in(state, &state.workers, s, accept, work).await
}

/// [`transition`] with a worker from `pool`: OT-PSI rounds take theirs from
/// `AppState::ot_workers`, everything else from `AppState::workers`, so DH-PSI queries
/// and label steps keep being served while every OT worker is busy.
async fn transition_in(
    state: &Arc<AppState>,
    pool: &Arc<tokio::sync::Semaphore>,
    s: &Arc<Mutex<Session>>,
    accept: impl FnOnce(&Session) -> Result<(), ApiError>,
    work: impl FnOnce(SessionPhase) -> Outcome + Send + 'static,
) -> Result<Response, ApiError> {
    let permit = pool.clone().acquire_owned().await.map_err(|_| internal())?;
    let taken = {
        let mut g = lock(s);
        if let Err(e) = accept(&g) {
            drop(g);
            return Err(refused(state, s, e));
        }
        // Not counted as a failed step: the session is busy, not the request wrong.
        if matches!(g.phase, SessionPhase::Busy) {
            return Err(wrong_phase(
                "another request of this session is in progress",
            ));
        }
        std::mem::replace(&mut g.phase, SessionPhase::Busy)
    };
    let t = Instant::now();
    let session = s.clone();
    let state = state.clone();
    let result = tokio::task::spawn_blocking(move || {
        // A panic in a step (a bug) ends the session rather than leaving it busy until its
        // lifetime runs out; the server keeps serving.
        let (mut next, mut result) =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(taken)))
                .unwrap_or_else(|_| (SessionPhase::Done, Err(internal())));
        let done = {
            let mut g = lock(&session);
            match result {
                Ok(_) => g.stepped_now(),
                // A refused step (the phase restored by `work`) counts here, with the
                // work, so a request dropped meanwhile counts too; at the limit the
                // session ends.
                Err(e) if counts_as_failure(&e) && g.failed_step() => {
                    result = Err(session_failed(e));
                }
                Err(_) => {}
            }
            // Also when other requests of this session were refused while this step ran.
            if g.failures >= MAX_FAILED_STEPS {
                next = SessionPhase::Done;
            }
            let done = matches!(next, SessionPhase::Done).then(|| g.id.clone());
            g.phase = next;
            done
        };
        // Complete (or failed for good): the server ends the session now (the session's
        // lock released first), so a client that has its result need not send a DELETE
        // (ADR 0025); also when the request was dropped meanwhile.
        if let Some(id) = done {
            state.sessions.end(&id);
        }
        // The worker is free when the work is, not when the request is: a request dropped
        // mid-step (timeout, disconnect) keeps its permit until the blocking work ends.
        drop(permit);
        result
    })
    .await
    .map_err(|_| internal())?;
    Ok(binary(result?, t.elapsed().as_secs_f64() * 1e3))
}

fn expect_protocol(g: &Session, protocol: Protocol, hint: &str) -> Result<(), ApiError> {
    if g.protocol != protocol {
        return Err(wrong_phase(format!(
            "this is an {} session; {hint}",
            g.protocol.api_name()
        )));
    }
    Ok(())
}

/// Decodes a DH-PSI QUERY and checks its element count with `check` before any
/// multiplication.
fn decode_query(
    body: &[u8],
    check: impl FnOnce(usize) -> Result<(), ApiError>,
) -> Result<Elements, ApiError> {
    let query = Elements::from_bytes(body, message_type::QUERY)?;
    check(query.len())?;
    Ok(query)
}

async fn dh_query(
    S(state): AppS,
    SessionCall {
        session: s,
        body,
        _active,
    }: SessionCall,
) -> Result<Response, ApiError> {
    let registry = session_registry(&state, &s)?;
    let (n, labels) = {
        let g = lock(&s);
        (g.client_items as usize, g.labels)
    };
    transition(
        &state,
        &s,
        |g| {
            expect_protocol(
                g,
                Protocol::Dh,
                "use its round route (/ot/round, /cm20/round)",
            )?;
            match g.phase {
                SessionPhase::DhAwaitingQuery | SessionPhase::Busy => Ok(()),
                _ => Err(wrong_phase("the session's query was already answered")),
            }
        },
        move |phase| {
            let answer = decode_query(&body, |count| {
                if count == n {
                    Ok(())
                } else {
                    Err(ApiError::new(
                        ErrorCode::CountMismatch,
                        format!("query has {count} elements, the session declared {n}"),
                    ))
                }
            })
            .and_then(|q| Ok(registry.dh.evaluate(&q)?));
            match answer {
                Ok(out) => (after_protocol(labels), Ok(out)),
                // A rejected query does not consume the session.
                Err(e) => (phase, Err(e)),
            }
        },
    )
    .await
}

async fn ot_round(S(state): AppS, call: SessionCall) -> Result<Response, ApiError> {
    round(state, call, Protocol::Ot).await
}

async fn cm20_round(S(state): AppS, call: SessionCall) -> Result<Response, ApiError> {
    round(state, call, Protocol::Cm20).await
}

/// One round of a round-based protocol (OT-PSI, CM20-PSI) on the OT worker pool.
async fn round(
    state: Arc<AppState>,
    SessionCall {
        session: s,
        body,
        _active,
    }: SessionCall,
    protocol: Protocol,
) -> Result<Response, ApiError> {
    let labels = lock(&s).labels;
    transition_in(
        &state,
        &state.ot_workers,
        &s,
        |g| {
            expect_protocol(
                g,
                protocol,
                "use the round route of the session's protocol (or /dh/query)",
            )?;
            match g.phase {
                SessionPhase::ChunkedRunning(_) | SessionPhase::Busy => Ok(()),
                _ => Err(wrong_phase("the session's protocol run is over")),
            }
        },
        move |phase| {
            let SessionPhase::ChunkedRunning(mut run) = phase else {
                return (phase, Err(internal()));
            };
            debug_assert_eq!(run.server.protocol(), protocol);
            let result = run.server.handle(&body).map_err(ApiError::from);
            // Once the run is over (outputs sent, or failed), its state and OT slot are
            // dropped here: the slot is free for the next OT session at once, not when this
            // session expires.
            let next = if run.server.is_done() {
                after_protocol(labels)
            } else if run.server.is_finished() {
                SessionPhase::Done
            } else {
                SessionPhase::ChunkedRunning(run)
            };
            (next, result)
        },
    )
    .await
}

async fn label_query(
    S(state): AppS,
    Extension(payer): Extension<Payer>,
    SessionCall {
        session: s,
        body,
        _active,
    }: SessionCall,
) -> Result<Response, ApiError> {
    let registry = session_registry(&state, &s)?;
    // At most the session's label slots (a fixed function of its `n`, below `n` for
    // large sessions; docs/protocol/labels.md §1): the reference client always sends
    // exactly that many.
    let slots = psi_core::labels::label_slots(lock(&s).client_items as usize);
    // Decoded and checked before the transition; the transition's check charges the
    // budget by the element count, whether or not the evaluation then succeeds.
    let query = decode_query(&body, |count| {
        if count > slots {
            return Err(ApiError::new(
                ErrorCode::TooManyItems,
                format!(
                    "label query has {count} elements, more than the session's {slots} label slots"
                ),
            ));
        }
        Ok(())
    })
    .map_err(|e| refused(&state, &s, e))?;
    let limiter = &state.limiter;
    let count = query.len() as u64;
    // A shared budget is charged before the transition (an await the session's lock cannot
    // hold) and refunded if the transition does not accept the step; a local one inside
    // the check, after the phase, as before.
    let prepaid = match limiter.shared_store() {
        Some(_) => Some(
            limiter
                .charge_all(&payer, count)
                .await
                .map_err(|e| charge_error(&state, e, rate_limited))?,
        ),
        None => None,
    };
    let accepted = std::sync::atomic::AtomicBool::new(false);
    let answer = transition(
        &state,
        &s,
        |g| {
            match g.phase {
                SessionPhase::Matched {
                    label_queried: false,
                } => {}
                SessionPhase::Matched { .. } | SessionPhase::Done => {
                    return Err(wrong_phase(
                        "the session's label query was already answered",
                    ));
                }
                _ => return Err(wrong_phase("labels come after the protocol run")),
            }
            // The request's payer is the session's: the caller key it was looked up by
            // decides it.
            if let crate::limits::Budgets::Local(limiter) = limiter {
                limiter
                    .charge_all(&payer, count)
                    .map(drop)
                    .map_err(rate_limited)?;
            }
            accepted.store(true, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        },
        move |phase| match registry.dh.evaluate(&query) {
            Ok(out) => (
                SessionPhase::Matched {
                    label_queried: true,
                },
                Ok(out),
            ),
            Err(e) => (phase, Err(e.into())),
        },
    )
    .await;
    if let Some(receipt) = prepaid
        && !accepted.load(std::sync::atomic::Ordering::Relaxed)
    {
        limiter.refund_all(&receipt).await;
    }
    answer
}

async fn label_fetch(
    S(state): AppS,
    SessionCall {
        session: s,
        body,
        _active,
    }: SessionCall,
) -> Result<Response, ApiError> {
    let registry = session_registry(&state, &s)?;
    let reg = registry.clone();
    // At most the buckets the reference client always names: its label slots, or every
    // bucket if there are fewer (docs/protocol/labels.md §4).
    let max_buckets = psi_core::labels::fetch_buckets(
        lock(&s).client_items as usize,
        registry.labels.bucket_bits(),
    );
    transition(
        &state,
        &s,
        |g| {
            // DH-PSI clients hold their matches' full OPRF outputs; OT-PSI clients get
            // them from the label query first.
            let ready = match g.phase {
                SessionPhase::Matched { label_queried } => {
                    label_queried || !g.protocol.labels_need_query()
                }
                _ => false,
            };
            if !ready {
                return Err(wrong_phase(
                    "label buckets are fetched once, after the protocol run (OT-PSI: after the label query)",
                ));
            }
            // A reload within the epoch can change the bucket layout: the client's bucket
            // ids were computed for the session's, so refuse rather than return the wrong
            // buckets.
            if g.epoch != reg.dh.epoch() || g.label_bits != reg.labels.bucket_bits() {
                return Err(ApiError::new(
                    ErrorCode::EpochMismatch,
                    "the registry changed during this session",
                ));
            }
            Ok(())
        },
        move |phase| match registry.labels.answer_fetch(&body, max_buckets) {
            Ok(out) => (SessionPhase::Done, Ok(out)),
            Err(e) => (phase, Err(e.into())),
        },
    )
    .await
}

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
async fn probe_down(
    S(state): AppS,
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
async fn probe_up(
    S(state): AppS,
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

/// Charges a full encoded-set download of `bytes` to the caller's hourly download budget
/// (`Config::encoded_set_bytes_per_hour`, with the network and ceiling levels of a caller
/// without a token, ADR 0038). A set larger than the per-caller budget is charged the
/// budget: one full download an hour, not none.
async fn charge_download(state: &AppState, payer: &Payer, bytes: usize) -> Result<(), ApiError> {
    let limiter = &state.download_limiter;
    let charge = (bytes as u64).min(limiter.per_hour());
    let charged = limiter.charge_all(payer, charge).await;
    charged.map(drop).map_err(|e| {
        charge_error(state, e, |refused| {
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

/// The encoded set of the current epoch, or with `X-PSI-Epoch: <e>` of epoch `e` while it
/// is served (a session of the previous epoch finishing during the overlap). A full
/// download (200) is charged to the caller's download budget ([`charge_download`]); a 304
/// is free.
async fn encoded_set(
    S(state): AppS,
    Extension(payer): Extension<Payer>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let t = Instant::now();
    let r = match headers.get(psi_http::EPOCH_HEADER) {
        None => state.registry(),
        Some(v) => {
            let epoch = v
                .to_str()
                .ok()
                .and_then(|v| v.trim().parse::<u32>().ok())
                .ok_or_else(|| {
                    ApiError::new(
                        ErrorCode::BadRequest,
                        "X-PSI-Epoch must be a decimal key epoch",
                    )
                })?;
            state.registry_for(epoch).ok_or_else(epoch_gone)?
        }
    };
    let matches = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == "*" || weak_eq(t, &r.etag)));
    let mut resp = if matches {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        charge_download(&state, &payer, r.encoded.len()).await?;
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
    h.insert(psi_http::EPOCH_HEADER, HeaderValue::from(r.dh.epoch()));
    server_timing(&mut resp, t.elapsed().as_secs_f64() * 1e3);
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::registry::Registry;
    use crate::storage::Store;
    use std::sync::mpsc;
    use std::time::Duration;

    /// A step whose request is dropped (the server's request deadline, a disconnect)
    /// before its work finishes still ends the session when the work leaves it `Done`:
    /// its slots are freed at once, not at expiry (ADR 0025). The step is held on a
    /// channel, so the order of events is fixed.
    #[test]
    fn a_step_dropped_before_its_work_ends_still_ends_the_session() {
        let dir = std::env::temp_dir().join(format!(
            "psi-server-dropped-step-{}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let config = Config {
            db: dir.join("registry.sqlite").into(),
            workers: 1,
            build_threads: 1,
            ..Config::default()
        };
        Store::open(config.db.sqlite_path().unwrap())
            .unwrap()
            .add_entries([("+12025550100", None)])
            .unwrap();
        let registry = Registry::load(&config, &mut |_, _| {}).unwrap();
        let state = AppState::with_registry(config, registry);
        let id = "0123abcd".to_string();
        state
            .sessions
            .insert(
                id.clone(),
                "caller".into(),
                Session {
                    id: id.clone(),
                    protocol: Protocol::Dh,
                    client_items: 1,
                    client: "caller".into(),
                    epoch: state.registry().dh.epoch(),
                    label_bits: 0,
                    labels: false,
                    phase: SessionPhase::DhAwaitingQuery,
                    in_flight: 0,
                    created: Instant::now(),
                    last_active: Instant::now(),
                    stepped: false,
                    failures: 0,
                },
            )
            .unwrap();
        let Lookup::Live(s) = state.sessions.get(&id) else {
            panic!("the session is live")
        };
        let (started_tx, started_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut step = Box::pin(transition(
                &state,
                &s,
                |_| Ok(()),
                move |_| {
                    started_tx.send(()).unwrap();
                    let _ = go_rx.recv();
                    (SessionPhase::Done, Ok(vec![1]))
                },
            ));
            // Poll the step until its work runs, then drop it, as the deadline would.
            while started_rx.try_recv().is_err() {
                let polled = tokio::time::timeout(Duration::from_millis(5), &mut step).await;
                assert!(
                    polled.is_err(),
                    "the work cannot finish before it is let go"
                );
            }
        });
        assert_eq!(state.live_sessions(), 1, "the work is still running");
        go_tx.send(()).unwrap();
        let t = Instant::now();
        while state.live_sessions() > 0 {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "the session is still live after its work left it Done"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(matches!(state.sessions.get(&id), Lookup::Ended(c) if c == "caller"));
        // The worker is back too.
        while state.workers.available_permits() < 1 {
            assert!(t.elapsed() < Duration::from_secs(10));
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(rt);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn weak_etag_comparison() {
        assert!(super::weak_eq("W/\"a\"", "\"a\""));
        assert!(super::weak_eq(" \"a\"", "W/\"a\""));
        assert!(!super::weak_eq("\"a\"", "\"b\""));
    }
}
