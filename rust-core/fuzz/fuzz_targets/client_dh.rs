//! psi-client's handling of server responses in a DH-PSI run (`Client::match_items`,
//! labels on): every answer (session, evaluation, encoded set, label fetch, delete) is the
//! honest server's, changed by the fuzzer in status, headers and body; the registry cache
//! may hold the honest set, an edited one, or nothing. The run ends with a result or a
//! typed error, never a panic; with no changes it gives the transcript's matches.
#![no_main]
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use psi_client::{CachedSet, CancelToken, Client, ClientConfig, MemoryCache, Protocol, SetCache};
use psi_fuzz::Mutation;
use psi_fuzz::fake::{ETAG, FakeServer, Reply};
use std::sync::Arc;

#[derive(Arbitrary, Debug)]
struct Input {
    cache: Option<(bool, Mutation)>,
    replies: Vec<Reply>,
}

fuzz_target!(|input: Input| {
    let f = psi_fuzz::dh();
    let replies: Vec<Reply> = input.replies.into_iter().take(8).collect();
    let honest = replies.is_empty() && input.cache.is_none();
    let server = Arc::new(FakeServer::new(Protocol::Dh, replies));
    let config = ClientConfig::default().with_threads(psi_core::Threads::ONE);
    let cache = Arc::new(MemoryCache::new());
    if let Some((same_etag, m)) = &input.cache {
        let etag = if *same_etag {
            ETAG.to_string()
        } else {
            "\"old\"".to_string()
        };
        let bytes = m.apply(&f.set.to_bytes(), Some(Protocol::Dh));
        let _ = cache.store("http://127.0.0.1:1", &CachedSet { etag, bytes });
    }
    let client =
        Client::with_transport("http://127.0.0.1:1", server.clone(), config).with_cache(cache);
    let result = client.match_items(
        f.client_items.clone(),
        Protocol::Dh,
        &mut |_| {},
        &CancelToken::new(),
    );
    assert!(server.requests() <= 16, "a bounded number of requests");
    if honest {
        let report = result.expect("honest run");
        let got: Vec<usize> = report.matches.iter().map(|m| m.index).collect();
        assert_eq!(got, f.matches, "transcript matches");
        assert!(report.label_error.is_none());
    }
});
