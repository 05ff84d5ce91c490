//! Load: 50 concurrent clients matching 1,000 contacts each against a 100,000-entry
//! registry all get correct results (and labels).

mod common;

use common::*;
use psi_client::{CancelToken, Client, ClientConfig, Protocol};
use psi_core::Threads;
use std::time::{Duration, Instant};

#[test]
fn fifty_concurrent_clients_against_100k_entries() {
    let mut config = config("load");
    config.max_client_items = 1000;
    config.items_per_hour = 0;
    // All 50 clients come from 127.0.0.1, i.e. one caller.
    config.max_sessions_per_client = 64;
    config.max_connections_per_address = 64;
    const N: u64 = 100_000;
    fill(&config, N, |i| i % 2 == 0);
    let t = Instant::now();
    let server = start(config);
    eprintln!("registry of {N} built in {:?}", t.elapsed());
    let url = server.url();
    let t = Instant::now();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..50u64)
            .map(|c| {
                let url = url.clone();
                s.spawn(move || {
                    let client = Client::new(
                        &url,
                        ClientConfig::default()
                            .with_threads(Threads::ONE)
                            .with_timeout(Duration::from_secs(120)),
                    );
                    // 1,000 contacts: every 10th registered (distinct per client).
                    let items: Vec<Vec<u8>> = (0..1000u64)
                        .map(|j| {
                            if j % 10 == 0 {
                                id((c * 1999 + j * 7) % N).into_bytes()
                            } else {
                                format!("+1303{:07}", c * 1000 + j).into_bytes()
                            }
                        })
                        .collect();
                    let r = client
                        .match_items(items, Protocol::Dh, &mut |_| {}, &CancelToken::new())
                        .unwrap();
                    assert_eq!(r.matches.len(), 100, "client {c}");
                    for m in &r.matches {
                        assert_eq!(m.index % 10, 0);
                        let i = (c * 1999 + m.index as u64 * 7) % N;
                        let want = i.is_multiple_of(2).then(|| format!("user-{i}"));
                        assert_eq!(m.label, want);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("client thread");
        }
    });
    eprintln!("50 clients x 1,000 contacts in {:?}", t.elapsed());
    server.shutdown().unwrap();
}
