//! CM20-PSI, both state machines (`Cm20Server::handle`, `Cm20Client::handle`): a sequence of
//! steps, each sent to the server (the honest client's next request, an edited one, any
//! message, or a repeat); the server's answers go to the honest client, and every fuzzed
//! message is also given to a second client waiting for its setup. With no steps the run
//! must finish with the transcript vector's matches.
#![no_main]
use libfuzzer_sys::fuzz_target;
use psi_core::cm20::{ClientStep, Cm20Client, Cm20Server};
use psi_core::{ItemSet, Protocol};
use psi_fuzz::Send;

fuzz_target!(|steps: Vec<Send>| {
    let f = psi_fuzz::cm20();
    let start = || {
        Cm20Client::start(
            ItemSet::new(f.client_items.clone()),
            f.client_config(),
            &mut psi_fuzz::rng(f.client_seed),
        )
        .expect("client")
    };
    let mut server = Cm20Server::new(
        f.server_items.clone(),
        f.server_config(),
        &mut psi_fuzz::rng(f.server_seed),
    )
    .expect("server");
    let (mut client, mut request) = start();
    let (mut bystander, _) = start();
    let mut previous = Vec::new();
    let mut output = None;
    let honest_tail = std::iter::repeat_n(Send::Valid, 64);
    for s in steps.iter().take(8).cloned().chain(honest_tail) {
        if server.is_finished() || output.is_some() {
            break;
        }
        let msg = s.bytes(&request, &previous, Protocol::Cm20);
        let _ = bystander.handle(&msg);
        if let Ok(response) = server.handle(&msg) {
            let _ = bystander.handle(&response);
            match client.handle(&response) {
                Ok(ClientStep::Send(next)) => request = next,
                Ok(ClientStep::Done(out)) => output = Some(out),
                Err(_) => {}
            }
        }
        previous = msg;
    }
    if steps.is_empty() {
        let out = output.expect("honest run finishes");
        let got: Vec<usize> = out.matches.iter().map(|m| m.index).collect();
        assert_eq!(got, f.matches, "transcript matches");
    }
});
