//! The native transport: psi-client's own [`psi_client::HttpTransport`] (ureq, rustls)
//! behind the [`HttpTransport`] trait, for a platform that would rather not move the bytes
//! itself (the desktop JVM: docs/adr/0049-native-transport-on-the-desktop-jvm.md). Opt-in:
//! the platform transports (OkHttp, URLSession) stay the default, and only a library built
//! with the `native-http` feature carries it; elsewhere [`native_http_transport`] exists
//! (the same FFI on every platform) but fails with [`PsiError::InvalidInput`].

use crate::error::PsiError;
use crate::transport::HttpTransport;
#[cfg(feature = "native-http")]
use crate::transport::{HttpHeader, HttpMethod, HttpRequest, HttpResponse, TransportError};
use std::sync::Arc;

/// A transport on psi-client's ureq stack: the bytes move in Rust, on the run's own thread
/// (no callback into the platform per request), with one connection pool per transport.
/// HTTPS trusts Mozilla's root certificates (not the platform's store, nor an app's
/// pinning or proxy). A request already sent runs to the end of its timeout even if the
/// run is cancelled (as in `psi match`); the run stops right after it.
///
/// Fails with [`PsiError::InvalidInput`] when this library was built without it (the
/// `native-http` feature: on for the desktop JVM's library only).
#[uniffi::export]
pub fn native_http_transport() -> Result<Arc<dyn HttpTransport>, PsiError> {
    #[cfg(feature = "native-http")]
    {
        Ok(Arc::new(NativeTransport(psi_client::HttpTransport::new())))
    }
    #[cfg(not(feature = "native-http"))]
    {
        Err(PsiError::InvalidInput {
            reason: "this build of the native library has no native transport \
                     (feature native-http: the desktop JVM's library only)"
                .into(),
        })
    }
}

/// True when this library carries the native transport ([`native_http_transport`]).
#[uniffi::export]
pub fn has_native_http_transport() -> bool {
    cfg!(feature = "native-http")
}

#[cfg(feature = "native-http")]
struct NativeTransport(psi_client::HttpTransport);

#[cfg(feature = "native-http")]
#[async_trait::async_trait]
impl HttpTransport for NativeTransport {
    /// Runs the request to its end when first polled: the caller (psi-ffi's
    /// `ForeignTransport`) polls on the run's own thread, never on a platform's.
    async fn send(&self, request: HttpRequest) -> Result<HttpResponse, TransportError> {
        use psi_client::Transport;
        let request = psi_client::Request {
            method: match request.method {
                HttpMethod::Get => psi_client::Method::Get,
                HttpMethod::Post => psi_client::Method::Post,
                HttpMethod::Delete => psi_client::Method::Delete,
            },
            url: request.url,
            headers: request
                .headers
                .into_iter()
                .map(|h| (h.name, h.value))
                .collect(),
            body: request.body.0,
            timeout: std::time::Duration::from_millis(request.timeout_ms),
            max_response_bytes: request.max_response_bytes,
            abandon_on_cancel: false,
        };
        match self.0.send(request) {
            Ok(r) => Ok(HttpResponse {
                status: r.status,
                headers: r
                    .headers
                    .into_iter()
                    .map(|(name, value)| HttpHeader { name, value })
                    .collect(),
                body: r.body.into(),
            }),
            Err(e) => Err(transport_error(e)),
        }
    }
}

/// psi-client's transport error as the FFI's (its kind kept: timeout, TLS, other).
#[cfg(feature = "native-http")]
fn transport_error(e: psi_client::TransportError) -> TransportError {
    let reason = e.message;
    if e.timeout {
        TransportError::Timeout { reason }
    } else if e.tls {
        TransportError::Tls { reason }
    } else {
        TransportError::Failed { reason }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_native_transport_is_there_only_with_its_feature() {
        let t = native_http_transport();
        assert_eq!(has_native_http_transport(), cfg!(feature = "native-http"));
        if cfg!(feature = "native-http") {
            assert!(t.is_ok());
        } else {
            assert!(matches!(t, Err(PsiError::InvalidInput { .. })));
        }
    }

    #[cfg(feature = "native-http")]
    #[test]
    fn a_refused_connection_is_a_failed_request_not_a_timeout() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let t = native_http_transport().unwrap();
        let request = HttpRequest {
            method: HttpMethod::Get,
            url: format!("http://127.0.0.1:{port}/v1/health"),
            headers: Vec::new(),
            body: Vec::new().into(),
            timeout_ms: 5_000,
            max_response_bytes: 1 << 16,
        };
        let result =
            crate::job::block_on(t.send(request), std::time::Duration::from_secs(10), || {
                false
            });
        assert!(matches!(
            result,
            crate::job::Wait::Done(Err(TransportError::Failed { .. }))
        ));
    }
}
