//! The group API's failures that need no server (issue 38 §2): a bad size, a code that is
//! not one and a cancel before the call are typed errors, and none of them sends a request.
//! The runs themselves are tested against a real `psi serve` by the Kotlin suite
//! (desktop/src/test/kotlin/dev/psisdk/GroupTest.kt).

use psi_ffi::{
    CancelHandle, DiscoveryClient, GroupError, GroupFailure, HttpRequest, HttpResponse,
    HttpTransport, PsiError, TransportError, default_discovery_config, default_group_run_options,
};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake};
use std::time::Duration;

/// Counts requests and fails them all.
#[derive(Default)]
struct Counting(AtomicUsize);

#[async_trait::async_trait]
impl HttpTransport for Counting {
    async fn send(&self, _request: HttpRequest) -> Result<HttpResponse, TransportError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Err(TransportError::Failed {
            reason: "no network in this test".into(),
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

fn client() -> (Arc<DiscoveryClient>, Arc<Counting>) {
    let transport = Arc::new(Counting::default());
    let client = DiscoveryClient::new(
        "http://127.0.0.1:9".into(),
        default_discovery_config(),
        transport.clone(),
    )
    .expect("a client");
    (client, transport)
}

#[test]
fn a_size_outside_2_to_16_is_invalid_input_and_sends_nothing() {
    let (client, transport) = client();
    for size in [0, 1, 17, 1000] {
        match block_on(client.clone().group_create(size)) {
            Err(GroupError::Call {
                error: PsiError::InvalidInput { reason },
            }) => assert!(reason.contains("2 to 16"), "{reason}"),
            other => panic!("{size}: {other:?}"),
        }
    }
    assert_eq!(transport.0.load(Ordering::SeqCst), 0);
    // A size that is one goes to the server (here: no network, a network error).
    assert!(matches!(
        block_on(client.clone().group_create(3)),
        Err(GroupError::Call {
            error: PsiError::Network { .. }
        })
    ));
    assert_eq!(transport.0.load(Ordering::SeqCst), 1);
}

#[test]
fn a_code_that_is_not_one_is_a_bad_code_and_sends_nothing() {
    let (client, transport) = client();
    for code in [
        "",
        "nodot",
        "abc.tooshort",
        "abc.!!!!!!!!!!!!!!!!!!!!!!!!!!",
    ] {
        match block_on(client.clone().group_join(code.into())) {
            Err(GroupError::Failed {
                failure: GroupFailure::BadCode,
                retryable: false,
                reason,
                ..
            }) => assert!(code.is_empty() || !reason.contains(code), "{reason}"),
            other => panic!("{code}: {other:?}"),
        }
    }
    assert_eq!(transport.0.load(Ordering::SeqCst), 0);
}

#[test]
fn a_cancelled_handle_stops_the_create_before_its_request() {
    let (client, transport) = client();
    let cancel = CancelHandle::new();
    cancel.cancel();
    assert!(matches!(
        block_on(client.clone().group_create_cancellable(2, cancel.clone())),
        Err(GroupError::Call {
            error: PsiError::Cancelled
        })
    ));
    assert!(matches!(
        block_on(client.group_join_cancellable("x.y".into(), cancel)),
        Err(GroupError::Call {
            error: PsiError::Cancelled
        })
    ));
    assert_eq!(transport.0.load(Ordering::SeqCst), 0);
}

#[test]
fn the_run_defaults_come_from_psi_client() {
    let o = default_group_run_options();
    assert!(o.share_result);
    assert_eq!(o.deadline_ms, 300_000);
}
