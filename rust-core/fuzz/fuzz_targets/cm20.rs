//! CM20-PSI, both state machines (`Cm20Server::handle`, `Cm20Client::handle`), driven by
//! `psi_fuzz::round_steps`: fuzzed steps sent to the server, its answers to an honest
//! client and a bystander. With no steps the run must finish with the transcript vector's
//! matches.
#![no_main]
use libfuzzer_sys::fuzz_target;
use psi_core::cm20::{Cm20Client, Cm20Server};
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
    let server = Cm20Server::new(
        f.server_items.clone(),
        f.server_config(),
        &mut psi_fuzz::rng(f.server_seed),
    )
    .expect("server");
    psi_fuzz::round_steps(&steps, Protocol::Cm20, start, server, &f.matches);
});
