//! Who a request is: the bearer-token check and the caller it counts against
//! ([`ClientKey`], [`ClientBlock`], and the budgets it pays from).

use super::reply::{ApiError, internal, store_unavailable};
use crate::accounts::{LookupError, TokenCheck};
use crate::limits::{Level, LevelKind, Payer};
use crate::state::AppState;
use axum::extract::{ConnectInfo, MatchedPath, Request, State as S};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use psi_http::{ErrorCode, Route};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// Who a request counts against (see [`auth`]): `token:<digest prefix>` (static token),
/// `token-id:<id>` (issued token) or `ip:<address or prefix>`.
#[derive(Clone, Debug)]
pub(super) struct ClientKey(pub(super) String);

/// The address block a caller's sessions are counted in beside its own cap
/// (`Config::max_sessions_per_block`): `ip:` and its network by `Config::ipv4_block_prefix`
/// or `Config::ipv6_block_prefix` (never narrower than the caller's own prefix); for a
/// token caller, its [`ClientKey`].
#[derive(Clone, Debug)]
pub(super) struct ClientBlock(pub(super) String);

/// Authenticates the request and names the client it counts against ([`ClientKey`]):
/// - a static token (`Config::tokens`): `token:` and 8 bytes of its SHA-256, a budget
///   shared by everyone holding it;
/// - a token issued into the database (`psi token add`): `token-id:` and its id, with its
///   own budget; looked up by digest (crate::accounts: at once with SQLite, within a
///   second with PostgreSQL); a credential not known valid is charged to the address's
///   budget of such requests (`Config::invalid_tokens_per_hour`);
/// - without authentication: `ip:` and the client's address or prefix ([`crate::caller`]).
///
/// Authentication is on when static tokens are configured or any token was ever issued.
pub(super) async fn auth(
    S(state): S<Arc<AppState>>,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
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
        let creating = req
            .extensions()
            .get::<MatchedPath>()
            .is_some_and(|p| p.as_str() == Route::CreateSession.template());
        let mut digest = digest;
        // A credential not known valid costs a lookup: charged to the address's budget
        // of such requests (`Config::invalid_tokens_per_hour`), given back if valid.
        let mut receipt = None;
        let fresh = digest.as_ref().and_then(|d| state.accounts.cached(d));
        let known_valid =
            |c: Option<&TokenCheck>| c.and_then(|c| c.token.as_ref()).is_some_and(|t| !t.revoked);
        if let Some(d) = &digest
            && !known_valid(fresh.as_ref())
            && !state.accounts.known_valid(d)
        {
            // A trusted proxy's malformed forwarding header is refused (400).
            let ip = caller_ip(&req, &state)?;
            let c = &state.config;
            let key = ip.map_or_else(
                || "ip:unknown".to_string(),
                |ip| crate::caller::rate_key_ip(ip, c.ipv4_prefix, c.ipv6_prefix),
            );
            let payer = Payer::new(vec![Level::new(key, 1, LevelKind::Address)]);
            match state.invalid_token_limiter.charge_all(&payer, 1) {
                Ok(r) => receipt = Some(r),
                Err(refused) => {
                    // Not looked up. Authentication on: refused; off: a caller without
                    // a token (what the lookup would have found anyway).
                    let auth_on = !state.config.tokens.is_empty()
                        || lookup(&state, creating, None).await?.any_issued;
                    if auth_on {
                        let mut e = ApiError::new(
                            ErrorCode::RateLimited,
                            "too many requests with a bearer token that is not accepted from \
                             this address",
                        );
                        e.retry_after = Some(refused.wait);
                        return Err(e);
                    }
                    digest = None;
                }
            }
        }
        let check = match fresh {
            Some(check) if digest.is_some() => check,
            _ => lookup(&state, creating, digest.as_ref()).await?,
        };
        if let Some(r) = &receipt
            && known_valid(Some(&check))
        {
            state.invalid_token_limiter.refund_all(r);
        }
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
            // The caller's address (a trusted proxy's malformed header: 400).
            _ => match caller_ip(&req, &state)? {
                None => "ip:unknown".to_string(),
                Some(ip) => {
                    let c = &state.config;
                    block = Some(crate::caller::rate_key_ip(
                        ip,
                        c.ipv4_prefix.min(c.ipv4_block_prefix),
                        c.ipv6_prefix.min(c.ipv6_block_prefix),
                    ));
                    payer = Some(crate::caller::address_payer(ip, c));
                    crate::caller::rate_key_ip(ip, c.ipv4_prefix, c.ipv6_prefix)
                }
            },
        }
    };
    req.extensions_mut()
        .insert(ClientBlock(block.unwrap_or_else(|| key.clone())));
    req.extensions_mut()
        .insert(payer.unwrap_or_else(|| Payer::token(&key)));
    req.extensions_mut().insert(ClientKey(key));
    Ok(next.run(req).await)
}

/// The client's address ([`crate::caller::client_ip`]), `None` without a peer address; a
/// trusted proxy's forwarding header that is not a list of addresses is `400 bad_request`.
pub(super) fn caller_ip(req: &Request, state: &AppState) -> Result<Option<IpAddr>, ApiError> {
    let Some(peer) = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
    else {
        return Ok(None);
    };
    let c = &state.config;
    crate::caller::client_ip(peer, req.headers(), &c.trusted_proxies, c.client_ip_header)
        .map(Some)
        .map_err(super::reply::malformed_forwarding)
}

/// The database's answer about `digest` ([`crate::accounts::Accounts::check`]). While
/// the database is away, a step of a running session goes on with its last answer for
/// this credential; a new session (`creating`) is refused (store_health.rs).
async fn lookup(
    state: &Arc<AppState>,
    creating: bool,
    digest: Option<&[u8; 32]>,
) -> Result<TokenCheck, ApiError> {
    match state.accounts.check(digest).await {
        Ok(check) => Ok(check),
        Err(LookupError::Unavailable(e)) => {
            state.store_health.unreachable(&e);
            match state.accounts.remembered(digest) {
                Some(check) if !creating => Ok(check),
                _ => Err(store_unavailable()),
            }
        }
        Err(e) => {
            tracing::error!(error = %e, "token lookup failed");
            Err(internal())
        }
    }
}
