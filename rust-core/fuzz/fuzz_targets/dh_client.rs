//! The DH-PSI client after a valid start: `DhClient::handle` fed a sequence of server
//! messages, each the honest EVALUATION or ENCODED_SET (from the transcript's key and
//! set), an edited one, any message, or a repeat; then the rest of the honest messages
//! and `finish_with_outputs`. With no steps the run must give the transcript's matches.
#![no_main]
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use psi_core::dh::DhClient;
use psi_core::{ItemSet, Protocol, Threads};
use psi_fuzz::Send;

#[derive(Arbitrary, Debug)]
struct Step {
    /// false: the evaluation's slot; true: the encoded set's.
    set: bool,
    send: Send,
}

fuzz_target!(|steps: Vec<Step>| {
    let f = psi_fuzz::dh();
    let items = ItemSet::new(f.client_items.clone());
    let (mut client, query) =
        DhClient::start(items, f.epoch, Threads::ONE, &mut psi_fuzz::rng(1)).expect("start");
    let evaluation = f.server.handle_query(&query).expect("evaluation");
    let set = f.set.to_bytes();
    let mut previous = Vec::new();
    for s in steps.iter().take(8) {
        let valid = if s.set { &set } else { &evaluation };
        let msg = s.send.bytes(valid, &previous, Protocol::Dh);
        let _ = client.handle(&msg);
        previous = msg;
    }
    // The honest messages, whatever happened before (each may now be out of phase).
    let _ = client.handle(&evaluation);
    let _ = client.handle(&set);
    if client.is_ready() {
        let result = client.finish_with_outputs();
        if steps.is_empty() {
            let (out, outputs) = result.expect("honest run");
            let got: Vec<usize> = out.matches.iter().map(|m| m.index).collect();
            assert_eq!(got, f.matches, "transcript matches");
            assert_eq!(outputs.len(), got.len());
        }
    } else {
        assert!(!steps.is_empty(), "an honest run is ready");
    }
});
