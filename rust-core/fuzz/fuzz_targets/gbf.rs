//! GBF-PSI, both state machines (`GbfServer::handle`, `GbfClient::handle`), driven by
//! `psi_fuzz::round_steps`: fuzzed steps sent to the server, its answers to an honest
//! client and a bystander. With no steps the run must finish with the transcript vector's
//! matches.
#![no_main]
use libfuzzer_sys::fuzz_target;
use psi_core::gbf::{GbfClient, GbfServer};
use psi_core::{ItemSet, Protocol};
use psi_fuzz::Send;

fuzz_target!(|steps: Vec<Send>| {
    let f = psi_fuzz::gbf();
    let start = || {
        GbfClient::start(
            ItemSet::new(f.client_items.clone()),
            f.client_config(),
            &mut psi_fuzz::rng(f.client_seed),
        )
        .expect("client")
    };
    let server = GbfServer::new(
        f.server_items.clone(),
        f.server_config(),
        &mut psi_fuzz::rng(f.server_seed),
    )
    .expect("server");
    psi_fuzz::round_steps(&steps, Protocol::Gbf, start, server, &f.matches);
});
