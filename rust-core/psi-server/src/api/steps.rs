//! The session step handlers: the DH-PSI query, the rounds of OT-PSI and CM20-PSI, and
//! the label query and fetch.

use super::reply::{ApiError, charge_error, internal, rate_limited, wrong_phase};
use super::sessions::session_registry;
use super::transition::{SessionCall, refused, transition, transition_in};
use crate::limits::Payer;
use crate::sessions::{Session, SessionPhase, lock};
use crate::state::AppState;
use axum::Extension;
use axum::extract::State as S;
use axum::response::Response;
use psi_core::Protocol;
use psi_core::dh::{Elements, message_type};
use psi_http::ErrorCode;
use std::sync::Arc;

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

pub(super) async fn dh_query(
    S(state): S<Arc<AppState>>,
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
                "use its round route (/ot/round, /cm20/round, /gbf/round)",
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

/// One round of a round-based protocol (OT-PSI, CM20-PSI: [`psi_http::Route::round_protocol`]) on
/// the OT worker pool; the router serves every round route with it.
pub(super) async fn round(
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
                // Labels carried in the outputs (label lanes): no label step follows.
                after_protocol(labels && !run.server.labels_carried())
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

pub(super) async fn label_query(
    S(state): S<Arc<AppState>>,
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

pub(super) async fn label_fetch(
    S(state): S<Arc<AppState>>,
    Extension(payer): Extension<Payer>,
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
    let (n, sync) = {
        let g = lock(&s);
        (g.client_items as usize, g.sync)
    };
    let max_buckets = psi_core::labels::fetch_buckets(n, registry.labels.bucket_bits());
    let resp = transition(
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
            let bits = match (&reg.sync, g.sync) {
                (Some(served), true) => Some(served.confirm.bucket_bits()),
                (None, true) => None,
                (_, false) => Some(reg.labels.bucket_bits()),
            };
            if g.epoch != reg.dh.epoch() || bits != Some(g.label_bits) {
                return Err(ApiError::new(
                    ErrorCode::EpochMismatch,
                    "the registry changed during this session",
                ));
            }
            Ok(())
        },
        move |phase| {
            // A sync-mode session confirms its candidates (docs/protocol/sync.md §5);
            // the checks above found the registry's records in the session's layout.
            let answer = match (&registry.sync, sync) {
                (Some(served), true) => served.confirm.answer(&body, n),
                _ => registry.labels.answer_fetch(&body, max_buckets),
            };
            match answer {
                Ok(out) => (SessionPhase::Done, Ok(out)),
                Err(e) => (phase, Err(e.into())),
            }
        },
    )
    .await?;
    // The buckets' bytes (about 55 KB for a one-item session at 10^6 labeled entries) are
    // charged to the caller's download budget like a full encoded set (issue 35 item 6):
    // once it is spent the answer is not sent (429; the session is over).
    let bytes = axum::body::HttpBody::size_hint(resp.body())
        .exact()
        .unwrap_or(0);
    super::registry::charge_download(&state, &payer, bytes as usize, true).await?;
    Ok(resp)
}
