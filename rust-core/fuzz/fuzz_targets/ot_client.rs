//! The OT-PSI client after `start` (`OtClient::handle`): a sequence of server responses,
//! each the honest server's answer to the client's current request (transcript items,
//! seeds and chunk size), an edited one, any message, or a repeat. With no steps the run
//! must finish with the transcript's matches.
#![no_main]
use libfuzzer_sys::fuzz_target;
use psi_core::ot::{ClientStep, OtClient, OtServer};
use psi_core::{ItemSet, Protocol};
use psi_fuzz::Send;

fuzz_target!(|steps: Vec<Send>| {
    let f = psi_fuzz::ot();
    let (mut client, hello) = OtClient::start(
        ItemSet::new(f.client_items.clone()),
        f.client_config(),
        &mut psi_fuzz::rng(f.client_seed),
    )
    .expect("client");
    let mut server = OtServer::new(
        f.server_items.clone(),
        f.server_config(),
        &mut psi_fuzz::rng(f.server_seed),
    )
    .expect("server");
    // The honest server's answer to the client's latest request (empty if it refused it).
    let mut valid = server.handle(&hello).unwrap_or_default();
    let mut previous = Vec::new();
    let mut output = None;
    let honest_tail = std::iter::repeat_n(Send::Valid, 8);
    for s in steps.iter().take(8).cloned().chain(honest_tail) {
        if client.is_done() {
            break;
        }
        let msg = s.bytes(&valid, &previous, Protocol::Ot);
        match client.handle(&msg) {
            Ok(ClientStep::Send(next)) => valid = server.handle(&next).unwrap_or_default(),
            Ok(ClientStep::Done(out)) => output = Some(out),
            Err(_) => {}
        }
        previous = msg;
    }
    if steps.is_empty() {
        let out = output.expect("honest run finishes");
        let got: Vec<usize> = out.matches.iter().map(|m| m.index).collect();
        assert_eq!(got, f.matches, "transcript matches");
    }
});
