//! The retry policy of a run: which failures start it again and after what wait
//! (exponential backoff with jitter, or the server's `Retry-After`), a wait that a
//! cancellation ends. [`crate::Client::match_items`] applies it.

use crate::cancel::CancelToken;
use crate::error::{ClientError, Result};
use std::time::{Duration, Instant};

/// First wait before a retry; it doubles with each attempt.
const RETRY_BASE: Duration = Duration::from_millis(250);
/// Longest wait of the backoff.
const RETRY_CAP: Duration = Duration::from_secs(4);
/// Longest `Retry-After` honoured by waiting; a server asking for more gets its error
/// returned to the caller.
const RETRY_AFTER_CAP: Duration = Duration::from_secs(30);

/// How long to wait before retrying after `e` on attempt `attempt` (0-based), or `None`
/// when `e` is not worth retrying. Backoff: `RETRY_BASE * 2^attempt` capped at
/// `RETRY_CAP`, "equal jitter" (half fixed, half drawn from `jitter()` in [0, 1]) so
/// clients failed by the same outage do not return in step. A `Retry-After` of at most
/// `RETRY_AFTER_CAP` is waited out in full (and at least the backoff).
pub(super) fn retry_wait(
    e: &ClientError,
    attempt: u32,
    jitter: &mut dyn FnMut() -> f64,
) -> Option<Duration> {
    if !e.is_retryable() {
        return None;
    }
    let backoff = RETRY_BASE
        .saturating_mul(1u32.checked_shl(attempt).unwrap_or(u32::MAX))
        .min(RETRY_CAP);
    let backoff = backoff / 2 + (backoff / 2).mul_f64(jitter().clamp(0.0, 1.0));
    match e {
        ClientError::Http {
            retry_after: Some(s),
            ..
        } => {
            let asked = Duration::from_secs(*s);
            (asked <= RETRY_AFTER_CAP).then(|| asked.max(backoff))
        }
        _ => Some(backoff),
    }
}

/// Sleeps `wait`, ending early with [`ClientError::Cancelled`] if `cancel` fires.
pub(super) fn wait_unless_cancelled(wait: Duration, cancel: &CancelToken) -> Result<()> {
    let until = Instant::now() + wait;
    loop {
        if cancel.is_cancelled() {
            return Err(ClientError::Cancelled);
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

/// Draws the backoff's jitter in [0, 1] (0.5 where the OS gives no randomness).
pub(super) fn jitter() -> impl FnMut() -> f64 {
    let mut rng = psi_core::rng::os_rng().ok();
    move || {
        use rand_chacha::rand_core::Rng;
        rng.as_mut()
            .map_or(0.5, |r| f64::from(r.next_u32()) / f64::from(u32::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClientConfig;
    use crate::driver::client::Client;
    use crate::report::{MatchReport, Retry, RetryCause};
    use crate::transport::{HttpTransport, Request, Response, Transport, TransportError};
    use psi_core::{Phase, Protocol};
    use psi_http::ErrorCode;
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    fn http(status: u16, retry_after: Option<u64>) -> ClientError {
        ClientError::Http {
            status,
            code: if status == 429 {
                ErrorCode::RateLimited
            } else {
                ErrorCode::Unknown
            },
            message: String::new(),
            retry_after,
        }
    }

    fn network() -> ClientError {
        TransportError::failed("reset").into()
    }

    #[test]
    fn retry_waits_back_off_exponentially_with_jitter_and_a_cap() {
        let mid = |e: &ClientError, a| retry_wait(e, a, &mut || 0.5);
        let ms = |m| Some(Duration::from_millis(m));
        // Half fixed, half jitter: 0.75 of the backoff at jitter 0.5.
        assert_eq!(mid(&network(), 0), Some(Duration::from_micros(187_500)));
        assert_eq!(mid(&network(), 1), ms(375));
        assert_eq!(mid(&network(), 2), ms(750));
        assert_eq!(mid(&network(), 4), ms(3000)); // 4 s cap
        assert_eq!(mid(&network(), 40), ms(3000)); // no overflow
        assert_eq!(retry_wait(&network(), 1, &mut || 0.0), ms(250));
        assert_eq!(retry_wait(&network(), 1, &mut || 1.0), ms(500));
        // Retry-After up to 30 s is waited out; longer ends the run.
        assert_eq!(mid(&http(503, Some(2)), 0), ms(2000));
        assert_eq!(mid(&http(503, Some(0)), 2), ms(750));
        assert_eq!(mid(&http(429, Some(30)), 0), ms(30_000));
        assert_eq!(mid(&http(429, Some(31)), 0), None);
        assert_eq!(
            mid(&http(503, None), 0),
            Some(Duration::from_micros(187_500))
        );
        // Not retryable: bad requests, protocol errors, cancellation.
        assert_eq!(mid(&http(400, None), 0), None);
        assert_eq!(mid(&ClientError::Cancelled, 0), None);
        assert_eq!(mid(&ClientError::BadResponse("x".into()), 0), None);
    }

    /// One injected failure, replacing the server's answer to a request.
    #[derive(Clone, Copy, Debug)]
    enum Fault {
        /// 503 with `Retry-After: 0` (a server shedding load).
        Busy,
        /// The connection closed before the body was complete (as `HttpTransport`
        /// reports a body cut short).
        CutShort,
        /// No answer until the request's timeout.
        Stall,
        /// 400: not retryable.
        BadRequest,
        /// 421 `wrong_instance`: a balancer sent the step to an instance without the
        /// session.
        WrongInstance,
    }

    /// Forwards to a real server, replacing the answer to the `at`-th request (0-based)
    /// of the listed kinds with the fault. Counts session creations.
    struct Flaky {
        inner: HttpTransport,
        faults: Mutex<Vec<(usize, Fault)>>,
        seen: Mutex<usize>,
        sessions: Mutex<usize>,
    }

    impl Transport for Flaky {
        fn send(&self, request: Request) -> Result<Response, TransportError> {
            let n = {
                let mut s = self.seen.lock().unwrap();
                *s += 1;
                *s - 1
            };
            // A session's creation, with or without the first run's `?health=1`.
            if request
                .url
                .split('?')
                .next()
                .unwrap_or("")
                .ends_with("/v1/sessions")
            {
                *self.sessions.lock().unwrap() += 1;
            }
            let fault = self
                .faults
                .lock()
                .unwrap()
                .iter()
                .find(|(at, _)| *at == n)
                .map(|(_, f)| *f);
            let json = |status: u16, code: &str, extra: &[(&str, &str)]| Response {
                status,
                headers: extra
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                body: format!(r#"{{"error":"{code}","message":"injected"}}"#).into_bytes(),
            };
            match fault {
                None => self.inner.send(request),
                Some(Fault::Busy) => Ok(json(503, "server_busy", &[("retry-after", "0")])),
                Some(Fault::BadRequest) => Ok(json(400, "bad_request", &[])),
                Some(Fault::WrongInstance) => Ok(json(421, "wrong_instance", &[])),
                Some(Fault::CutShort) => {
                    // The server did the work; the client never sees the end of it.
                    let _ = self.inner.send(request);
                    Err(TransportError::failed(
                        "connection closed before the response body was complete",
                    ))
                }
                Some(Fault::Stall) => {
                    std::thread::sleep(request.timeout);
                    Err(TransportError::timed_out("timeout"))
                }
            }
        }
    }

    fn server() -> psi_server::RunningServer {
        let mut config = psi_server::Config::default();
        config.db = psi_server::Database::memory();
        config.build_threads = 1;
        config.workers = 1;
        let mut store = psi_server::Store::open(std::path::Path::new(":memory:")).unwrap();
        store
            .add_entries([("+14155550123", Some("alice")), ("bob@example.com", None)])
            .unwrap();
        let registry =
            psi_server::Registry::from_store(&mut store, &config, &mut |_, _| {}).unwrap();
        psi_server::RunningServer::start(
            psi_server::AppState::with_registry(config, registry),
            ([127, 0, 0, 1], 0).into(),
        )
        .unwrap()
    }

    fn flaky(
        srv: &psi_server::RunningServer,
        faults: &[(usize, Fault)],
        retries: u32,
    ) -> (Client, Arc<Flaky>) {
        flaky_with(srv, faults, retries, |c| c)
    }

    /// [`flaky`] with the client's settings changed by `tune`.
    fn flaky_with(
        srv: &psi_server::RunningServer,
        faults: &[(usize, Fault)],
        retries: u32,
        tune: impl FnOnce(ClientConfig) -> ClientConfig,
    ) -> (Client, Arc<Flaky>) {
        let t = Arc::new(Flaky {
            inner: HttpTransport::new(),
            faults: Mutex::new(faults.to_vec()),
            seen: Mutex::new(0),
            sessions: Mutex::new(0),
        });
        let config = ClientConfig::default()
            .with_threads(psi_core::Threads::ONE)
            .with_timeout(Duration::from_millis(400))
            .with_retries(retries);
        (
            Client::with_transport(&srv.url(), t.clone(), tune(config)),
            t,
        )
    }

    fn items() -> Vec<Vec<u8>> {
        vec![b"+14155550123".to_vec(), b"carol@example.com".to_vec()]
    }

    fn run(c: &Client, protocol: Protocol) -> Result<MatchReport> {
        c.match_items(items(), protocol, &mut |_| {}, &CancelToken::new())
    }

    #[test]
    fn a_503_a_cut_short_body_and_a_stall_are_retried_with_a_new_session() {
        let srv = server();
        for (protocol, faults) in [
            // DH: request 1 is the query; 0 the session.
            (Protocol::Dh, vec![(0, Fault::Busy), (2, Fault::CutShort)]),
            (Protocol::Dh, vec![(1, Fault::Stall)]),
            // OT: the second round of the first attempt.
            (Protocol::Ot, vec![(2, Fault::CutShort), (5, Fault::Busy)]),
        ] {
            let (c, t) = flaky(&srv, &faults, 2);
            let started = Instant::now();
            let r = run(&c, protocol).unwrap_or_else(|e| panic!("{protocol} {faults:?}: {e}"));
            assert_eq!(r.matches.len(), 1, "{protocol} {faults:?}");
            assert_eq!(r.matches[0].item, b"+14155550123");
            assert_eq!(r.matches[0].label.as_deref(), Some("alice"));
            assert_eq!(*t.sessions.lock().unwrap(), faults.len() + 1, "{faults:?}");
            assert!(started.elapsed() < Duration::from_secs(10));
        }
    }

    #[test]
    fn a_421_on_the_label_step_is_retried_with_a_new_session_and_the_labels_arrive() {
        let srv = server();
        // DH: request 0 creates the session, 1 is the query, 2 the encoded set, 3 the
        // label fetch.
        let (c, t) = flaky(&srv, &[(3, Fault::WrongInstance)], 2);
        let r = run(&c, Protocol::Dh).unwrap();
        assert_eq!(r.matches.len(), 1);
        assert_eq!(
            r.matches[0].label.as_deref(),
            Some("alice"),
            "{:?}",
            r.label_error
        );
        assert_eq!(r.label_error, None);
        assert_eq!(*t.sessions.lock().unwrap(), 2);
    }

    #[test]
    fn retries_run_out_with_the_last_typed_error_within_the_bound() {
        let srv = server();
        // Every first request stalls: three attempts of one 400 ms timeout, two waits.
        let (c, t) = flaky(
            &srv,
            &[(0, Fault::Stall), (1, Fault::Stall), (2, Fault::Stall)],
            2,
        );
        let started = Instant::now();
        let e = run(&c, Protocol::Dh).unwrap_err();
        let took = started.elapsed();
        assert!(
            matches!(e, ClientError::Network { timeout: true, .. }),
            "{e:?}"
        );
        assert!(e.is_retryable());
        assert_eq!(*t.sessions.lock().unwrap(), 3);
        // 3 x 400 ms + at most 250 + 500 ms of backoff, with slack for a loaded machine.
        assert!(took >= Duration::from_millis(1200), "{took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
        // With retries off, the first failure is returned.
        let (c, t) = flaky(&srv, &[(0, Fault::Busy)], 0);
        let e = run(&c, Protocol::Dh).unwrap_err();
        assert!(matches!(e, ClientError::Http { status: 503, .. }), "{e:?}");
        assert_eq!(*t.sessions.lock().unwrap(), 1);
    }

    #[test]
    fn each_retry_is_reported_with_its_cause_and_wait_before_the_new_attempt() {
        let srv = server();
        // DH: a 503 on the first session, the query's answer cut short on the second.
        let (c, _) = flaky(&srv, &[(0, Fault::Busy), (2, Fault::CutShort)], 2);
        let mut events = Vec::new();
        let r = c
            .match_items(
                items(),
                Protocol::Dh,
                &mut |p| events.push(p),
                &CancelToken::new(),
            )
            .unwrap();
        assert_eq!(r.matches.len(), 1);
        let retries: Vec<(usize, Retry)> = events
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.retry.map(|r| (i, r)))
            .collect();
        assert_eq!(retries.len(), 2, "{events:?}");
        let (i, first) = retries[0];
        assert_eq!((first.attempt, first.retries), (1, 2));
        assert_eq!(
            first.cause,
            RetryCause::Http {
                status: 503,
                code: ErrorCode::Unknown, // "server_busy" is not an API code
                retry_after: Some(0),
            }
        );
        // Where the attempt failed, then the new attempt from its first phase.
        assert_eq!(events[i].phase, Phase::CreateSession);
        assert_eq!(events[i + 1].phase, Phase::CreateSession);
        assert_eq!(events[i + 1].retry, None);
        // No Retry-After: the backoff with jitter of the first retry, 125..=250 ms.
        assert!(first.wait <= Duration::from_millis(250), "{first:?}");
        let (j, second) = retries[1];
        assert_eq!((second.attempt, second.retries), (2, 2));
        assert_eq!(second.cause, RetryCause::Network { timeout: false });
        assert_eq!(events[j].phase, Phase::RoundTrip);
        assert_eq!(events[j].round, 1);
        assert!(
            (Duration::from_millis(250)..=Duration::from_millis(500)).contains(&second.wait),
            "{second:?}"
        );
        // The text names the attempt, the code and the wait; nothing of the items.
        let text = second.to_string();
        assert!(
            text.starts_with("retry 2 of 2 after network error, waiting "),
            "{text}"
        );
        assert_eq!(first.cause.to_string(), "HTTP 503 (unknown)");
        assert_eq!(RetryCause::Network { timeout: true }.to_string(), "timeout");
        // Every other event enters a phase.
        assert!(events.iter().filter(|p| p.retry.is_none()).count() > 2 * 5);
    }

    /// A deadline for the whole run bounds it across retries (issue 34): every first
    /// request stalls; with three attempts of a 400 ms timeout the run would take 1.2 s and
    /// more, with a 500 ms deadline it ends by then, with a timeout.
    #[test]
    fn the_runs_deadline_bounds_every_attempt_and_wait() {
        let srv = server();
        let stalls = [(0, Fault::Stall), (1, Fault::Stall), (2, Fault::Stall)];
        let (c, t) = flaky_with(&srv, &stalls, 2, |c| {
            c.with_deadline(Some(Duration::from_millis(500)))
        });
        let started = Instant::now();
        let e = run(&c, Protocol::Dh).unwrap_err();
        let took = started.elapsed();
        assert!(
            matches!(e, ClientError::Network { timeout: true, .. }),
            "{e:?}"
        );
        assert!(took < Duration::from_millis(1100), "{took:?}");
        // The first attempt used its 400 ms; the second got what was left, no more.
        assert!(*t.sessions.lock().unwrap() <= 2);
        // A deadline of 0 is refused before any request.
        let zero = ClientConfig::default().with_deadline(Some(Duration::ZERO));
        assert!(matches!(zero.validate(), Err(ClientError::BadInput(_))));
    }

    /// The automatic choice's first request (the session that brings the server's health,
    /// ADR 0054) fails: the run is retried as a fixed protocol's is, with a retry event,
    /// not failed at once (issue 34).
    #[test]
    fn the_automatic_choices_first_request_is_retried_too() {
        let srv = server();
        // Request 0 is the choice's first (the client has no stored health): the session
        // that brings the health (ADR 0054).
        let (c, t) = flaky(&srv, &[(0, Fault::Busy)], 2);
        let mut events = Vec::new();
        let r = c
            .match_items(
                items(),
                crate::measure::ProtocolChoice::default(),
                &mut |p| events.push(p),
                &CancelToken::new(),
            )
            .unwrap();
        assert_eq!(r.matches.len(), 1);
        assert!(r.choice.is_some(), "the choice is reported once it is made");
        let retries: Vec<Retry> = events.iter().filter_map(|p| p.retry).collect();
        assert_eq!(retries.len(), 1, "{events:?}");
        assert_eq!((retries[0].attempt, retries[0].retries), (1, 2));
        // The refused opening session, the second attempt's, and the chosen protocol's
        // if the choice was not the plan's (ADR 0054).
        assert!((2..=3).contains(&*t.sessions.lock().unwrap()));
        // With retries off, the first request's failure is the run's.
        let (c, _) = flaky(&srv, &[(0, Fault::Busy)], 0);
        let e = c
            .match_items(
                items(),
                crate::measure::ProtocolChoice::default(),
                &mut |_| {},
                &CancelToken::new(),
            )
            .unwrap_err();
        assert!(matches!(e, ClientError::Http { status: 503, .. }), "{e:?}");
    }

    #[test]
    fn the_last_errors_cause_is_chained() {
        use std::error::Error as _;
        let srv = server();
        let (c, _) = flaky(
            &srv,
            &[
                (0, Fault::Stall),
                (1, Fault::CutShort),
                (2, Fault::CutShort),
            ],
            2,
        );
        let mut causes = Vec::new();
        let e = c
            .match_items(
                items(),
                Protocol::Dh,
                &mut |p| causes.extend(p.retry.map(|r| r.cause)),
                &CancelToken::new(),
            )
            .unwrap_err();
        assert_eq!(
            causes,
            [
                RetryCause::Network { timeout: true },
                RetryCause::Network { timeout: false }
            ]
        );
        assert!(
            matches!(e, ClientError::Network { timeout: false, .. }),
            "{e:?}"
        );
        let source = e
            .source()
            .expect("a network error has its transport error as source");
        let t = source
            .downcast_ref::<TransportError>()
            .expect("the source is the transport's error");
        assert_eq!(
            t.message,
            "connection closed before the response body was complete"
        );
        assert!(!t.timeout);
        assert_eq!(
            e.to_string(),
            "network error: connection closed before the response body was complete"
        );
        // A protocol error chains psi-core's; a server's answer has no cause below it.
        let p = ClientError::from(psi_core::Error::EpochMismatch {
            expected: 1,
            found: 2,
        });
        assert!(p.source().is_some());
        assert!(http(503, None).source().is_none());
    }

    #[test]
    fn errors_that_are_not_retryable_are_not_retried() {
        let srv = server();
        let (c, t) = flaky(&srv, &[(1, Fault::BadRequest)], 2);
        let e = run(&c, Protocol::Dh).unwrap_err();
        assert!(matches!(e, ClientError::Http { status: 400, .. }), "{e:?}");
        assert_eq!(*t.sessions.lock().unwrap(), 1);
    }

    #[test]
    fn cancelling_during_a_retry_wait_ends_the_run_promptly() {
        let srv = server();
        let t = Arc::new(Flaky {
            inner: HttpTransport::new(),
            faults: Mutex::new(vec![]),
            seen: Mutex::new(0),
            sessions: Mutex::new(0),
        });
        // The server asks for 20 s; the caller cancels after 200 ms.
        struct Slow(Arc<Flaky>);
        impl Transport for Slow {
            fn send(&self, r: Request) -> Result<Response, TransportError> {
                if r.url.ends_with("/v1/sessions") {
                    *self.0.sessions.lock().unwrap() += 1;
                    return Ok(Response {
                        status: 503,
                        headers: vec![("retry-after".into(), "20".into())],
                        body: br#"{"error":"server_busy","message":"x"}"#.to_vec(),
                    });
                }
                self.0.send(r)
            }
        }
        let c = Client::with_transport(
            &srv.url(),
            Arc::new(Slow(t.clone())),
            ClientConfig::default().with_retries(2),
        );
        let cancel = CancelToken::new();
        let c2 = cancel.clone();
        let canceller = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            c2.cancel();
        });
        let started = Instant::now();
        let e = c
            .match_items(items(), Protocol::Dh, &mut |_| {}, &cancel)
            .unwrap_err();
        canceller.join().unwrap();
        assert!(matches!(e, ClientError::Cancelled), "{e:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(*t.sessions.lock().unwrap(), 1);
    }
}
