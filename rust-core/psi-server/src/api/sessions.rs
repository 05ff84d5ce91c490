//! A session's life on the API: `POST /v1/sessions` (checked, charged, admitted, its
//! round server built), the lookup every step starts with, and `DELETE`.

use super::auth::{ClientBlock, ClientKey};
use super::reply::{
    ApiError, body_error, charge_error, epoch_gone, internal, rate_limited, store_unavailable,
    wrong_phase,
};
use crate::instance::Owner;
use crate::limits::Payer;
use crate::registry::Registry;
use crate::sessions::{
    BuildError, ChunkedRun, ChunkedSlot, Full, Lookup, RoundServer, Session, SessionPhase, lock,
};
use crate::state::AppState;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, RawQuery, State as S};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use psi_core::Protocol;
use psi_http::{CreateSession, ErrorCode, SessionCreated};
use rand_core::Rng;
use std::sync::{Arc, Mutex};

/// `POST /v1/sessions`: the request checked, the session admitted (charged, within the
/// caps) and, for a round-based protocol, its server state built.
pub(super) async fn create_session(
    S(state): S<Arc<AppState>>,
    Extension(ClientKey(client)): Extension<ClientKey>,
    Extension(ClientBlock(block)): Extension<ClientBlock>,
    Extension(payer): Extension<Payer>,
    query: RawQuery,
    body: Result<Json<CreateSession>, JsonRejection>,
) -> Result<Response, ApiError> {
    let (protocol, n, labels, replaces) = session_request(&state, body)?;
    let query = query.0.unwrap_or_default();
    // The query's parameters, unencoded (`psi_http::SESSION_HEALTH_QUERY`, a plan).
    let params = || {
        query
            .split('&')
            .map(|p| p.split_once('=').unwrap_or((p, "")))
    };
    let with_health = params().any(|(k, v)| k == "health" && v == "1");
    let with_sync = params().any(|(k, v)| k == "sync" && v == "1");
    let plan = match params().find(|(k, _)| *k == psi_http::SESSION_PLAN_PARAM) {
        Some((_, v)) => Some(psi_http::parse_plan(v).ok_or_else(|| {
            ApiError::new(
                ErrorCode::BadRequest,
                "invalid session plan: expected plan=<protocol>:<max registry items>[,...]",
            )
        })?),
        None => None,
    };
    // No new session while the database is away: its budget could not be charged, nor
    // its token re-checked (store_health.rs). Running sessions go on.
    if state.store_health.is_down() {
        return Err(store_unavailable());
    }
    // The session this one replaces (a first run's, ADR 0054) ends first, as its DELETE
    // would, so it holds no slot the new one needs; one of another caller, or not on
    // this instance, is left alone.
    if let Some(old) = replaces
        && !matches!(state.instance.owner_of(&old), Owner::Other(_))
        && let Lookup::Live(s) = state.sessions.get(&old)
        && lock(&s).client == client
    {
        state.sessions.remove(&old);
    }
    let registry = state.registry();
    // A first run's plan (ADR 0054): the protocol for this registry's size, among those
    // this server runs; none applies, the body's.
    let protocol = plan
        .as_deref()
        .and_then(|steps| {
            let runs = state.protocols();
            psi_http::plan_pick(steps, registry.stats().entries, |name| {
                Protocol::from_api_name(name).is_some_and(|p| runs.contains(&p))
            })
        })
        .and_then(Protocol::from_api_name)
        .unwrap_or(protocol);
    let mut id = [0u8; 16];
    crate::storage::os_rng()
        .map_err(|_| internal())?
        .fill_bytes(&mut id);
    let id = state.instance.session_id(&id);
    // Admit the session (caps checked) before any per-session work; an OT session's
    // server state is built below, once admitted and charged.
    let mut session = Session::new(
        id.clone(),
        protocol,
        n,
        client,
        registry.dh.epoch(),
        registry.labels.bucket_bits(),
        labels,
    );
    // Sync mode (docs/protocol/sync.md): a DH-PSI session of a server that serves it, when
    // asked. Its label fetch is the confirmation, with labels on or off, in the records'
    // bucket layout.
    let sync = match &registry.sync {
        Some(served) if with_sync && protocol == Protocol::Dh => {
            session.sync = true;
            session.labels = true;
            session.label_bits = served.confirm.bucket_bits();
            Some(served.session_info())
        }
        _ => None,
    };
    let slot = admit(&state, &payer, block, session).await?;
    if let (true, Some(slot)) = (protocol.runs_in_rounds(), slot) {
        start_rounds(&state, &registry, &id, (protocol, n), slot)?;
    }
    tracing::info!(session = %id, protocol = protocol.api_name(), client_items = n, "session created");
    let health = with_health.then(|| super::registry::health_body(&state));
    Ok(created(
        &state, &registry, id, protocol, labels, health, sync,
    ))
}

/// The answer to a created session.
fn created(
    state: &AppState,
    registry: &Registry,
    id: String,
    protocol: Protocol,
    labels: bool,
    health: Option<psi_http::Health>,
    sync: Option<psi_http::SyncInfo>,
) -> Response {
    let body = SessionCreated {
        session_id: id,
        protocol: protocol.api_name().to_string(),
        epoch: registry.dh.epoch(),
        registry_items: registry.stats().entries,
        max_client_items: state.config.max_client_items as u32,
        max_body_bytes: state.config.max_body_bytes as u64,
        encoded_set_etag: registry.etag.clone(),
        label_bucket_bits: sync
            .as_ref()
            .map_or(registry.labels.bucket_bits(), |s| s.bucket_bits),
        expires_in_secs: state.sessions.ttl().as_secs(),
        ends_on_completion: true,
        label_lane_width: registry
            .rounds
            .lane_width()
            .filter(|_| labels && protocol.has_label_lanes()),
        health,
        sync,
    };
    (StatusCode::CREATED, Json(body)).into_response()
}

/// The request of `POST /v1/sessions`, checked: a protocol this server runs, `client_items`
/// from 1 to `max_client_items`. Returns the protocol, the item count, whether labels
/// follow the run and the session it replaces.
fn session_request(
    state: &AppState,
    body: Result<Json<CreateSession>, JsonRejection>,
) -> Result<(Protocol, u32, bool, Option<String>), ApiError> {
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
    Ok((protocol, n, req.labels.unwrap_or(true), req.replaces))
}

/// Charges and admits `session` (its budgets, then the session table's caps): the item
/// budget first, a shared OT-session budget next, both refunded if the table refuses it.
/// Returns the OT slot a round-based session took.
async fn admit(
    state: &AppState,
    payer: &Payer,
    block: String,
    session: Session,
) -> Result<Option<ChunkedSlot>, ApiError> {
    let (protocol, n, client, id) = (
        session.protocol,
        session.client_items,
        session.client.clone(),
        session.id.clone(),
    );
    // The item budget is charged before the session table is touched: a request refused
    // for its budget evicts no idle session at the total cap and takes no OT-session
    // budget unit (ADR 0036). `Protocol::charge` is a lookup (OT-PSI below 4096 items: the
    // precomputed table sizes), so the refusal is as cheap as a trivial request. Charged
    // what the protocol can give: DH-PSI and CM20-PSI `n`, OT-PSI one OPRF evaluation per
    // Cuckoo bin, at most `max_bins_for(n)` (a malicious CM20-PSI client can get more,
    // which is why CM20 is opt-in, docs/adr/0021-cm20-psi.md).
    let receipt = state
        .limiter
        .charge_all(payer, protocol.charge(n))
        .await
        .map_err(|e| charge_error(state, e, rate_limited))?;
    // A shared OT-session budget is charged here, not in the session table (an await its
    // lock cannot hold): after the item budget, before the OT caps, refunded below if the
    // session is not admitted.
    let ot_budget = state.sessions.ot_budget();
    let ot_receipt = if protocol.runs_in_rounds() && ot_budget.shared_store().is_some() {
        match ot_budget.charge(&client, 1).await {
            Ok(r) => Some(r),
            Err(e) => {
                state.limiter.refund_all(&receipt).await;
                return Err(charge_error(state, e, |r| ot_budget_refused(r.wait)));
            }
        }
    } else {
        None
    };
    let inserted = state.sessions.insert(id, block, session);
    if inserted.is_err() {
        state.limiter.refund_all(&receipt).await;
        if let Some(r) = &ot_receipt {
            ot_budget.refund_all(r).await;
        }
    }
    match inserted {
        Ok(slot) => Ok(slot),
        Err(Full::OtBudget(wait)) => Err(ot_budget_refused(wait)),
        Err(full) => Err(table_full(full)),
    }
}

/// The refusal of a session the table has no room for.
fn table_full(full: Full) -> ApiError {
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
    e
}

/// Builds a round-based session's server state and stores it in the session (its slot
/// held by it); a session whose state cannot be built is removed.
fn start_rounds(
    state: &AppState,
    registry: &Registry,
    id: &str,
    (protocol, n): (Protocol, u32),
    slot: ChunkedSlot,
) -> Result<(), ApiError> {
    // Built here, without an await between admission and storing the state: a request
    // dropped at an await would leave the charged session busy until it expires.
    // `RoundServer::build` only draws the session's randomness (one scalar
    // multiplication); the per-registry work happens at the hello, on a worker. A
    // protocol it cannot build is refused, never run as another protocol.
    let built = crate::storage::os_rng()
        .map_err(|_| internal())
        .and_then(|mut rng| {
            RoundServer::build(protocol, &registry.rounds, n, &mut rng).map_err(|e| match e {
                BuildError::Core(e) => ApiError::from(e),
                BuildError::NoRounds => internal(),
            })
        });
    let server = match built {
        Ok(server) => server,
        Err(e) => {
            state.sessions.remove(id);
            return Err(e);
        }
    };
    if let Lookup::Live(s) = state.sessions.get(id) {
        lock(&s).phase = SessionPhase::ChunkedRunning(Box::new(ChunkedRun {
            server,
            _slot: slot,
        }));
    }
    Ok(())
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

/// The registry of a session's key epoch: the current one, or the previous one during
/// the overlap after a rotation (ADR 0017); after that, `epoch_mismatch`.
pub(super) fn session_registry(
    state: &AppState,
    s: &Arc<Mutex<Session>>,
) -> Result<Arc<crate::registry::Registry>, ApiError> {
    let epoch = lock(s).epoch;
    state.registry_for(epoch).ok_or_else(epoch_gone)
}

pub(super) fn session(
    state: &AppState,
    id: &str,
    client: &str,
) -> Result<Arc<Mutex<Session>>, ApiError> {
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
pub(super) fn ended() -> ApiError {
    wrong_phase("the session is complete or was ended by the server; create a new one")
}

pub(super) fn unknown_session() -> ApiError {
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

pub(super) async fn delete_session(
    S(state): S<Arc<AppState>>,
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
