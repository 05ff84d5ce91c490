//! Creating a client loads the phone-number metadata on a thread of its own (issue 34: the
//! first run stalled about 100 ms before its first event while the metadata loaded, a time
//! in no phase). Its own test process: nothing else here normalizes a phone number first.

use psi_ffi::{
    DiscoveryClient, HttpRequest, HttpResponse, HttpTransport, TransportError,
    default_discovery_config,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A transport for a client that never sends anything in this test.
struct Unused;

#[async_trait::async_trait]
impl HttpTransport for Unused {
    async fn send(&self, _request: HttpRequest) -> Result<HttpResponse, TransportError> {
        Err(TransportError::Failed {
            reason: "no network in this test".into(),
        })
    }
}

#[test]
fn creating_a_client_loads_the_phone_metadata_off_the_callers_thread() {
    assert!(
        !psi_client::phone_metadata_loaded(),
        "loaded before any client"
    );
    let started = Instant::now();
    let client = DiscoveryClient::new(
        "http://127.0.0.1:9".into(),
        default_discovery_config(),
        Arc::new(Unused),
    )
    .expect("a client");
    // The constructor does not wait for it (it takes about 100 ms on a phone, a few ms here).
    let constructed = started.elapsed();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !psi_client::phone_metadata_loaded() {
        assert!(Instant::now() < deadline, "the metadata was never loaded");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(constructed < Duration::from_secs(5), "{constructed:?}");
    drop(client);
    // preload() (what the platforms call at app start) is idempotent.
    psi_ffi::preload();
    assert!(psi_client::phone_metadata_loaded());
}
