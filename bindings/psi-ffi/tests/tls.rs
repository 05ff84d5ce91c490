//! A platform transport's TLS failure (issue 34: an `https://` URL to a plain HTTP server
//! was a retryable network error) reaches the app as its own reason, `PsiError::Tls`, and
//! the run does not retry it.

use psi_ffi::{
    DiscoveryClient, HttpRequest, HttpResponse, HttpTransport, PsiError, TransportError,
    default_discovery_config,
};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake};
use std::time::Duration;

/// Fails every request as a platform does when the handshake fails; counts them.
#[derive(Default)]
struct HandshakeFails(AtomicUsize);

#[async_trait::async_trait]
impl HttpTransport for HandshakeFails {
    async fn send(&self, _request: HttpRequest) -> Result<HttpResponse, TransportError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Err(TransportError::Tls {
            reason: "the server's certificate is not trusted (SSLHandshakeException)".into(),
        })
    }
}

/// The foreign side's part: poll the native future, parking between wake-ups.
fn block_on<F: Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Arc::new(Unpark(std::thread::current())).into();
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park_timeout(Duration::from_millis(50));
    }
}

fn assert_tls(e: PsiError) {
    match &e {
        PsiError::Tls { reason } => assert!(reason.contains("not trusted"), "{reason}"),
        other => panic!("not a TLS error: {other:?}"),
    }
    assert!(e.to_string().starts_with("TLS failed: "), "{e}");
}

#[test]
fn a_platform_tls_failure_is_its_own_error_and_is_not_retried() {
    let transport = Arc::new(HandshakeFails::default());
    let client = DiscoveryClient::new(
        "https://discovery.example.com".into(),
        default_discovery_config(),
        transport.clone(),
    )
    .expect("a client");
    assert_tls(block_on(client.clone().health()).unwrap_err());
    assert_eq!(transport.0.load(Ordering::SeqCst), 1, "health was retried");
    // An automatic run asks for the server's health first, and would retry a network
    // error there; a TLS failure ends it on that first request.
    let e = block_on(
        client
            .clone()
            .match_contacts(vec!["+12025550123".into()], None, None, None),
    )
    .unwrap_err();
    assert_tls(e);
    assert_eq!(transport.0.load(Ordering::SeqCst), 2, "the run was retried");
}
