//! How every session step runs: the step's request ([`SessionCall`]) with its body read
//! under the step's limit, refused steps counted, and [`transition`], the one place that
//! takes, checks and restores a session's phase.

use super::auth::ClientKey;
use super::reply::{ApiError, binary, internal, wrong_phase};
use super::sessions::{session, unknown_session};
use crate::sessions::{MAX_FAILED_STEPS, Session, SessionPhase, lock};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, MatchedPath, Path, Request};
use axum::http::{HeaderMap, header};
use axum::response::Response;
use psi_http::{ErrorCode, Route};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A protocol or label request on a session: the caller's session (looked up first, so
/// an unknown session is answered before its body is read) and its binary body.
pub(super) struct SessionCall {
    pub(super) session: Arc<Mutex<Session>>,
    pub(super) body: Bytes,
    /// Counts the request as in progress on its session until the handler returns.
    pub(super) _active: Active,
}

/// A request of a session in progress, from when its body has arrived until it is
/// answered or dropped: the sweep never ends an OT run as idle while one is under way.
/// While the body arrives, the session's quiet time counts from its last part instead
/// ([`Uploading`]), so an upload that makes no progress leaves the session idle (issue 35
/// item 1: it held an OT slot for the whole request timeout).
pub(super) struct Active(Arc<Mutex<Session>>);

impl Active {
    fn start(session: &Arc<Mutex<Session>>) -> Active {
        lock(session).in_flight += 1;
        Active(session.clone())
    }
}

/// A body of a session's request being received ([`Session::uploads`]): the session's
/// quiet time counts from its last part until it is read (or the request dropped).
struct Uploading(Arc<Mutex<Session>>);

impl Uploading {
    fn start(session: &Arc<Mutex<Session>>) -> Uploading {
        let mut g = lock(session);
        g.uploads += 1;
        g.upload_progress = Instant::now();
        Uploading(session.clone())
    }
}

impl Drop for Uploading {
    fn drop(&mut self) {
        let mut g = lock(&self.0);
        g.uploads = g.uploads.saturating_sub(1);
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
        let route = parts
            .extensions
            .get::<MatchedPath>()
            .and_then(|p| Route::ALL.iter().find(|r| r.template() == p.as_str()))
            .copied();
        let limit = step_limit(route, &lock(&session), state.config.max_body_bytes);
        let body = {
            let _uploading = Uploading::start(&session);
            let progress = || lock(&session).upload_progress = Instant::now();
            read_step_body(&parts.headers, body, limit, progress).await
        }
        .map_err(|e| refused(state, &session, e))?;
        let active = Active::start(&session);
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
/// fetch at most `fetch_buckets(n, b)` ids (`too_many_items`), a round route of a session
/// of another protocol nothing (`wrong_phase`), an OT-PSI or CM20-PSI hello its fixed size
/// (`invalid_message`), a later round of a run in progress at most the rest of its
/// matrix in one chunk (`body_too_large`); anything else at most `max_body_bytes`.
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
            // A sync-mode session's fetch is version 2 (docs/protocol/sync.md §5.2).
            let bytes = if g.sync {
                psi_core::sync::FetchRequest::len_for(k)
            } else {
                psi_core::labels::messages::request_len(k)
            };
            let e = ApiError::new(
                ErrorCode::TooManyItems,
                format!("label fetch names more than the session's {k} bucket ids"),
            );
            (bytes, e)
        }
        // A round route of a session of another protocol (one without rounds, DH-PSI):
        // refused before its body is read (issue 35 item 2), as `expect_protocol` would.
        Some(route) if route.round_protocol().is_some_and(|p| p != g.protocol) => {
            let e = wrong_phase(format!(
                "this is an {} session; use the round route of the session's protocol (or /dh/query)",
                g.protocol.api_name()
            ));
            (0, e)
        }
        // The first round of a round-based session: its protocol's hello.
        Some(route)
            if route.round_protocol().is_some()
                && !g.stepped
                && g.protocol.hello_len().is_some() =>
        {
            let bytes = g.protocol.hello_len().unwrap_or_default() as usize;
            let e = ApiError::new(
                ErrorCode::InvalidMessage,
                format!("a hello is {bytes} bytes; this one is longer"),
            );
            (bytes, e)
        }
        // A later round of a run in progress: at most the rest of its matrix in one
        // chunk, as the session's state machine knows it (issue 35: these took
        // `max_body_bytes`).
        Some(route) if route.round_protocol() == Some(g.protocol) => match &g.phase {
            SessionPhase::ChunkedRunning(run) => {
                let bytes = usize::try_from(run.server.next_request_max()).unwrap_or(usize::MAX);
                let e = ApiError::new(
                    ErrorCode::BodyTooLarge,
                    format!(
                        "the next request of this session's run is at most {bytes} bytes; this one is longer"
                    ),
                );
                (bytes, e)
            }
            _ => (max_body_bytes, too_large()),
        },
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

pub(super) fn too_large() -> ApiError {
    ApiError::new(
        ErrorCode::BodyTooLarge,
        "request body exceeds the server's limit (see max_body_bytes)",
    )
}

/// Reads a step's binary body: the content type and a declared `Content-Length` are
/// checked before any byte of it is read (a body above `max_body_bytes` is
/// `body_too_large`, one above the step's limit the step's refusal), and reading stops
/// at the limit (a body sent without a length). `progress` is called as parts arrive.
async fn read_step_body(
    headers: &HeaderMap,
    mut body: axum::body::Body,
    limit: StepLimit,
    mut progress: impl FnMut(),
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
    // Grown as bytes arrive: a declared length costs the client nothing until it sends.
    let mut out = Vec::with_capacity(declared.unwrap_or(0).min(PREALLOCATE) as usize);
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
            progress();
        }
    }
    Ok(Bytes::from(out))
}

/// Most bytes of a step's body allocated before they arrive.
const PREALLOCATE: u64 = 64 << 10;

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
pub(super) fn refused(state: &AppState, s: &Arc<Mutex<Session>>, e: ApiError) -> ApiError {
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
pub(super) async fn transition(
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
pub(super) async fn transition_in(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::sessions::Lookup;
    use psi_core::Protocol;
    use std::sync::mpsc;
    use std::time::Duration;

    /// A step whose request is dropped (the server's request deadline, a disconnect)
    /// before its work finishes still ends the session when the work leaves it `Done`:
    /// its slots are freed at once, not at expiry (ADR 0025). The step is held on a
    /// channel, so the order of events is fixed.
    #[test]
    fn a_step_dropped_before_its_work_ends_still_ends_the_session() {
        let config = Config {
            workers: 1,
            build_threads: 1,
            ..Config::default()
        };
        let (state, dir) = crate::state::test_state("dropped-step", "+12025550100", config);
        let id = "0123abcd".to_string();
        state
            .sessions
            .insert(
                id.clone(),
                "caller".into(),
                Session::new(
                    id.clone(),
                    Protocol::Dh,
                    1,
                    "caller".into(),
                    state.registry().dh.epoch(),
                    0,
                    false,
                ),
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
}
