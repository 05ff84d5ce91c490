//! Who a request is: the bearer-token check and the caller it counts against
//! ([`ClientKey`], [`ClientBlock`], and the budgets it pays from).

use super::reply::{ApiError, internal, store_unavailable};
use crate::limits::Payer;
use crate::state::AppState;
use axum::extract::{ConnectInfo, MatchedPath, Request, State as S};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use psi_http::{ErrorCode, Route};
use std::net::SocketAddr;
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
///   own budget; looked up by digest on every request, so issuing and revoking take
///   effect at once;
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
