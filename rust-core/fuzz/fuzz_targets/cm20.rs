//! CM20-PSI, both state machines (`Cm20Server::handle`, `Cm20Client::handle`), driven by
//! `psi_fuzz::round_steps`: fuzzed steps sent to the server, its answers to an honest
//! client and a bystander. The first field picks the suite: plain (`0x01`), or label lanes
//! (`0x02`: the client asks, the server has the lane vector's labels, so the setup's width
//! byte and the labelled outputs, message `0x06`, are fuzzed too). With no steps the run
//! must finish with the transcript vector's matches, and with lanes their labels.
#![no_main]
use libfuzzer_sys::fuzz_target;
use psi_core::cm20::{Cm20Client, Cm20Server};
use psi_core::{ItemSet, Protocol};
use psi_fuzz::Send;

fuzz_target!(|input: (bool, Vec<Send>)| {
    let (lanes, steps) = input;
    let f = psi_fuzz::cm20();
    let start = || {
        let mut config = f.client_config();
        if lanes {
            config = config.with_label_lanes();
        }
        Cm20Client::start(
            ItemSet::new(f.client_items.clone()),
            config,
            &mut psi_fuzz::rng(f.client_seed),
        )
        .expect("client")
    };
    let mut config = f.server_config();
    if lanes {
        config = config.with_lane_labels(f.lane_labels());
    }
    let server = Cm20Server::new(
        f.server_items.clone(),
        config,
        &mut psi_fuzz::rng(f.server_seed),
    )
    .expect("server");
    let out = psi_fuzz::round_steps(&steps, Protocol::Cm20, start, server, &f.matches);
    if let Some(out) = out {
        let labels = out.labels.map(|l| l.into_vec());
        assert_eq!(labels, lanes.then(|| f.match_labels()), "transcript labels");
    }
});
