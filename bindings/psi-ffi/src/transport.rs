//! The transport the platform implements ([`HttpTransport`]: OkHttp on Kotlin, URLSession
//! on Swift), and the adapter that lets psi-client's synchronous driver use it from a
//! run's thread.

use crate::body::Body;
use crate::job::{Wait, block_on};
use psi_client::{CancelToken, Method, Request, Response, Transport};
use std::sync::Arc;
use std::time::Duration;

/// One header.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct HttpHeader {
    /// Name (lower case in requests).
    pub name: String,
    /// Value. The `authorization` header carries the token: never log it.
    pub value: String,
}

/// An HTTP method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Enum)]
pub enum HttpMethod {
    /// GET.
    Get,
    /// POST.
    Post,
    /// DELETE.
    Delete,
}

/// One request, complete: the transport sends exactly this.
#[derive(Clone, uniffi::Record)]
pub struct HttpRequest {
    /// Method.
    pub method: HttpMethod,
    /// Absolute URL.
    pub url: String,
    /// Headers to send.
    pub headers: Vec<HttpHeader>,
    /// Body (empty for GET and DELETE).
    pub body: Body,
    /// The whole exchange must finish within this many milliseconds, or fail with
    /// [`TransportError::Timeout`].
    pub timeout_ms: u64,
    /// A response body longer than this must fail with [`TransportError::TooLarge`],
    /// without reading the rest. Set per route by the driver (a few KB for health and
    /// sessions). Two more rules hold for every transport (psi_client::transport): follow
    /// no redirect (return the 3xx as it is: the driver refuses it; OkHttp:
    /// `followRedirects(false)` and `followSslRedirects(false)`; URLSession: a delegate
    /// that declines the redirection), and read no more than 16 KiB
    /// (`psi_client::transport::MAX_ERROR_BODY_BYTES`) of an error body (status 400 and
    /// above): return the status with an empty body instead. The driver checks both
    /// again, but only the transport can stop the bytes from arriving.
    pub max_response_bytes: u64,
}

/// A response with any status (an error status is not a transport error).
#[derive(Clone, uniffi::Record)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Headers.
    pub headers: Vec<HttpHeader>,
    /// Body.
    pub body: Body,
}

/// Why a request produced no response.
#[derive(Debug, thiserror::Error, uniffi::Error)]
pub enum TransportError {
    /// Connection refused or reset, DNS, I/O.
    #[error("{reason}")]
    Failed {
        /// What went wrong (no bodies, no headers).
        reason: String,
    },
    /// The request's timeout expired.
    #[error("timed out: {reason}")]
    Timeout {
        /// What timed out.
        reason: String,
    },
    /// The response body is longer than the request's `max_response_bytes`.
    #[error("response larger than {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: u64,
    },
    /// The secure connection could not be set up: the server's certificate is not trusted
    /// or does not name the host, or the server does not speak TLS (an `https://` URL to
    /// a plain HTTP port). The run fails with [`crate::PsiError::Tls`], not retried. A
    /// platform maps its TLS errors here (OkHttp's `SSLException`, URLSession's
    /// `secureConnectionFailed` and certificate codes).
    #[error("TLS failed: {reason}")]
    Tls {
        /// What went wrong (no certificate contents, no bodies).
        reason: String,
    },
}

impl From<uniffi::UnexpectedUniFFICallbackError> for TransportError {
    fn from(e: uniffi::UnexpectedUniFFICallbackError) -> Self {
        TransportError::Failed {
            reason: format!("the transport threw: {}", e.reason),
        }
    }
}

/// Sends requests to the server; implemented by the platform with its HTTP stack. It maps
/// types only: every limit comes with the request. A cancelled call (the future dropped)
/// must cancel the underlying request.
#[uniffi::export(with_foreign)]
#[async_trait::async_trait]
pub trait HttpTransport: Send + Sync {
    /// Sends `request` and returns the response, whatever its status.
    async fn send(&self, request: HttpRequest) -> Result<HttpResponse, TransportError>;
}

/// The most a platform transport reads of an error body (status 400 and above), in bytes
/// (`psi_client::transport::MAX_ERROR_BODY_BYTES`, 16 KiB): a longer one is dropped and the
/// status returned with an empty body ([`HttpRequest::max_response_bytes`]).
#[uniffi::export]
pub fn max_error_body_bytes() -> u64 {
    psi_client::transport::MAX_ERROR_BODY_BYTES
}

/// Extra time the foreign transport gets beyond the request's own timeout before the run
/// stops waiting for it (a transport that never answers must not hang the run).
const GRACE: Duration = Duration::from_secs(5);

/// psi-client's [`Transport`] over a foreign [`HttpTransport`], for one run: a request in
/// flight when the run is cancelled is abandoned (its future dropped, which cancels the
/// platform call), unless psi-client marks it as not abandonable (creating and deleting
/// the session: those run to completion within their timeout, so that the session is
/// deleted).
pub(crate) struct ForeignTransport {
    pub(crate) inner: Arc<dyn HttpTransport>,
    pub(crate) cancel: CancelToken,
}

impl Transport for ForeignTransport {
    fn send(&self, request: Request) -> Result<Response, psi_client::TransportError> {
        let abortable = request.abandon_on_cancel;
        let limit = request.max_response_bytes;
        let wait = request.timeout.saturating_add(GRACE);
        let request = HttpRequest {
            method: match request.method {
                Method::Get => HttpMethod::Get,
                Method::Post => HttpMethod::Post,
                Method::Delete => HttpMethod::Delete,
            },
            url: request.url,
            headers: request
                .headers
                .into_iter()
                .map(|(name, value)| HttpHeader { name, value })
                .collect(),
            body: Body(request.body),
            timeout_ms: u64::try_from(request.timeout.as_millis()).unwrap_or(u64::MAX),
            max_response_bytes: limit,
        };
        let failed = |message: String, timeout: bool| {
            if timeout {
                psi_client::TransportError::timed_out(message)
            } else {
                psi_client::TransportError::failed(message)
            }
        };
        match block_on(self.inner.send(request), wait, || {
            abortable && self.cancel.is_cancelled()
        }) {
            Wait::Done(Ok(r)) if r.body.len() as u64 > limit => Err(failed(
                TransportError::TooLarge { limit }.to_string(),
                false,
            )),
            Wait::Done(Ok(r)) => Ok(Response {
                status: r.status,
                headers: r.headers.into_iter().map(|h| (h.name, h.value)).collect(),
                body: r.body.0,
            }),
            Wait::Done(Err(TransportError::Tls { reason })) => {
                Err(psi_client::TransportError::tls_failed(reason))
            }
            Wait::Done(Err(e)) => {
                let timeout = matches!(e, TransportError::Timeout { .. });
                Err(failed(e.to_string(), timeout))
            }
            Wait::Aborted => Err(failed("request abandoned: run cancelled".into(), false)),
            Wait::TimedOut => Err(failed(
                "the platform transport did not answer within the request timeout".into(),
                true,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    /// Answers after `delay` with a body of `body_len` bytes; counts dropped futures.
    struct Slow {
        delay: Duration,
        body_len: usize,
        dropped: Arc<AtomicUsize>,
    }

    struct CountDrop(Arc<AtomicUsize>);
    impl Drop for CountDrop {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[async_trait::async_trait]
    impl HttpTransport for Slow {
        async fn send(&self, _request: HttpRequest) -> Result<HttpResponse, TransportError> {
            let _guard = CountDrop(self.dropped.clone());
            let until = Instant::now() + self.delay;
            // Ready only after `delay`; block_on polls again every 20 ms on its own.
            std::future::poll_fn(|_| {
                if Instant::now() >= until {
                    std::task::Poll::Ready(())
                } else {
                    std::task::Poll::Pending
                }
            })
            .await;
            Ok(HttpResponse {
                status: 200,
                headers: vec![],
                body: vec![0; self.body_len].into(),
            })
        }
    }

    fn request(timeout: Duration, max: u64) -> Request {
        abandonable(timeout, max, true)
    }

    fn abandonable(timeout: Duration, max: u64, abandon_on_cancel: bool) -> Request {
        Request {
            abandon_on_cancel,
            method: Method::Post,
            url: "http://127.0.0.1:1/v1/sessions".into(),
            headers: vec![],
            body: vec![1, 2, 3],
            timeout,
            max_response_bytes: max,
        }
    }

    fn transport(delay: Duration, body_len: usize) -> (ForeignTransport, Arc<AtomicUsize>) {
        let dropped = Arc::new(AtomicUsize::new(0));
        let inner = Arc::new(Slow {
            delay,
            body_len,
            dropped: dropped.clone(),
        });
        let t = ForeignTransport {
            inner,
            cancel: CancelToken::new(),
        };
        (t, dropped)
    }

    #[test]
    fn the_error_body_limit_platforms_read_is_psi_clients() {
        assert_eq!(max_error_body_bytes(), 16 << 10);
        assert_eq!(
            max_error_body_bytes(),
            psi_client::transport::MAX_ERROR_BODY_BYTES
        );
    }

    #[test]
    fn a_request_in_flight_is_abandoned_when_the_run_is_cancelled() {
        let (t, dropped) = transport(Duration::from_secs(30), 0);
        let cancel = t.cancel.clone();
        let canceller = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            cancel.cancel();
        });
        let start = Instant::now();
        let err = t.send(request(Duration::from_secs(60), 100)).unwrap_err();
        assert!(err.message.contains("cancelled"));
        assert!(start.elapsed() < Duration::from_secs(5));
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            1,
            "the foreign future was dropped"
        );
        canceller.join().unwrap();
    }

    #[test]
    fn creating_and_deleting_the_session_are_not_abandoned() {
        let (t, _) = transport(Duration::from_millis(100), 4);
        let cancel = t.cancel.clone();
        let canceller = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            cancel.cancel();
        });
        let r = t
            .send(abandonable(Duration::from_secs(10), 100, false))
            .unwrap();
        assert_eq!((r.status, r.body.len()), (200, 4));
        canceller.join().unwrap();
        // Also when the run was cancelled before the request started.
        let r = t
            .send(abandonable(Duration::from_secs(10), 100, false))
            .unwrap();
        assert_eq!(r.status, 200);
    }

    #[test]
    fn the_size_cap_and_the_timeout_hold_whatever_the_platform_does() {
        let (t, _) = transport(Duration::ZERO, 101);
        let err = t.send(request(Duration::from_secs(10), 100)).unwrap_err();
        assert!(err.message.contains("larger than 100"));
        assert!(!err.timeout);
        // A platform transport that ignores the timeout is abandoned after the grace.
        let (t, _) = transport(Duration::from_secs(600), 0);
        let start = Instant::now();
        let err = t.send(request(Duration::from_millis(10), 100)).unwrap_err();
        assert!(err.timeout);
        assert!(start.elapsed() < GRACE + Duration::from_secs(2));
    }
}
