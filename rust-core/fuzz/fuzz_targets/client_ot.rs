//! psi-client's handling of server responses in an OT-PSI run (`Client::match_items`,
//! labels on): every answer (session, OT rounds, label query, label fetch, delete) is the
//! honest server's (transcript items and seeds), changed by the fuzzer in status, headers
//! and body. The run ends with a result or a typed error, never a panic; with no changes
//! it gives the transcript's matches.
#![no_main]
use libfuzzer_sys::fuzz_target;
use psi_client::{CancelToken, Client, ClientConfig, Protocol};
use psi_fuzz::fake::{FakeServer, Reply};
use std::sync::Arc;

fuzz_target!(|replies: Vec<Reply>| {
    let f = psi_fuzz::ot();
    let replies: Vec<Reply> = replies.into_iter().take(12).collect();
    let honest = replies.is_empty();
    let server = Arc::new(FakeServer::new(Protocol::Ot, replies));
    let config = ClientConfig::default().with_threads(psi_core::Threads::ONE);
    let client = Client::with_transport("http://127.0.0.1:1", server.clone(), config);
    let result = client.match_items(
        f.client_items.clone(),
        Protocol::Ot,
        &mut |_| {},
        &CancelToken::new(),
    );
    if honest {
        let report = result.expect("honest run");
        let got: Vec<usize> = report.matches.iter().map(|m| m.index).collect();
        assert_eq!(got, f.matches, "transcript matches");
        assert!(report.label_error.is_none(), "{:?}", report.label_error);
    }
});
