//! The OT-PSI server (`OtServer::handle`) on a fresh session and after a valid hello: a
//! sequence of client messages, each the honest next request of a client run with the
//! transcript vector's items, seeds and chunk size, an edited one, any message, or a
//! repeat; every answer goes to the honest client. With no steps the run must finish
//! with the transcript's matches.
#![no_main]
use libfuzzer_sys::fuzz_target;
use psi_core::ot::{ClientStep, OtClient, OtServer};
use psi_core::{ItemSet, Protocol};
use psi_fuzz::Send;

fuzz_target!(|steps: Vec<Send>| {
    let f = psi_fuzz::ot();
    let mut server = OtServer::new(
        f.server_items.clone(),
        f.server_config(),
        &mut psi_fuzz::rng(f.server_seed),
    )
    .expect("server");
    // The client's start costs 128 base OTs: only when a step needs the honest request.
    let mut client: Option<(OtClient, Vec<u8>)> = None;
    let start = || {
        OtClient::start(
            ItemSet::new(f.client_items.clone()),
            f.client_config(),
            &mut psi_fuzz::rng(f.client_seed),
        )
        .expect("client")
    };
    let mut previous = Vec::new();
    let mut output = None;
    let honest_tail = std::iter::repeat_n(Send::Valid, 8);
    for s in steps.iter().take(8).cloned().chain(honest_tail) {
        if server.is_finished() || output.is_some() {
            break;
        }
        let msg = if matches!(s, Send::Valid | Send::Mutated(_)) {
            let (_, request) = client.get_or_insert_with(start);
            s.bytes(request, &previous, Protocol::Ot)
        } else {
            s.bytes(&[], &previous, Protocol::Ot)
        };
        let response = server.handle(&msg);
        previous = msg;
        let (Ok(response), Some((c, request))) = (response, client.as_mut()) else {
            continue;
        };
        match c.handle(&response) {
            Ok(ClientStep::Send(next)) => *request = next,
            Ok(ClientStep::Done(out)) => output = Some(out),
            Err(_) => {}
        }
    }
    if steps.is_empty() {
        let out = output.expect("honest run finishes");
        let got: Vec<usize> = out.matches.iter().map(|m| m.index).collect();
        assert_eq!(got, f.matches, "transcript matches");
        assert!(server.is_done());
    }
});
