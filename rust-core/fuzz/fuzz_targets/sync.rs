//! Sync mode (docs/protocol/sync.md): `Snapshot::from_bytes`, `Delta::from_bytes` and
//! `SyncedSet::from_cache` on any bytes (and a decoded delta offered to a synced set, a
//! decoded snapshot's tags streamed to the end); `ConfirmStore::answer` on any request
//! (an accepted answer must parse back: the requested buckets in order, well-formed
//! records); and `ConfirmClient::finish` on the honest response, an edited one or any
//! bytes. An honest confirmation must give exactly the registered items with their labels.
#![no_main]
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use psi_core::labels::{self, messages};
use psi_core::sync::{self, ConfirmClient, ConfirmStore, Delta, Snapshot, SyncedSet};
use psi_fuzz::Mutation;
use std::sync::OnceLock;

#[derive(Arbitrary, Debug)]
enum Input {
    Snapshot(Vec<u8>),
    Delta(Vec<u8>),
    Cache(Vec<u8>),
    Request {
        body: Vec<u8>,
        client_items: u16,
    },
    Response {
        registered: u8,
        strangers: u8,
        response: Response,
    },
}

#[derive(Arbitrary, Debug)]
enum Response {
    Valid,
    Mutated(Mutation),
    Raw(Vec<u8>),
}

struct Fixture {
    synced: SyncedSet,
    store: ConfirmStore,
    /// Outputs of the registry's items (the label store's items).
    outputs: Vec<[u8; 64]>,
    stranger_outputs: Vec<[u8; 64]>,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let f = psi_fuzz::dh();
        // The server's outputs of the items, which are what a client's run gives (the
        // fixture's client side is sized for the transcript's 8 items).
        let outputs = f
            .server
            .outputs(&psi_core::ItemSet::new(f.label_items.clone()))
            .expect("outputs");
        let strangers: Vec<Vec<u8>> = (0..64u32).map(|i| format!("stranger-{i}").into_bytes()).collect();
        let stranger_outputs = f
            .server
            .outputs(&psi_core::ItemSet::new(strangers))
            .expect("outputs");
        let w = sync::sync_width(outputs.len() as u64, sync::DEFAULT_EXTRA_BITS);
        let synced = SyncedSet::from_snapshot(Snapshot::build(f.epoch, 1, w, &outputs)).expect("own snapshot");
        let names: Vec<String> = (0..outputs.len()).map(psi_fuzz::label_of).collect();
        let store = ConfirmStore::build(
            f.epoch,
            1,
            outputs
                .iter()
                .zip(names.iter().map(|n| Some(n.as_str()))),
            16,
            &mut psi_fuzz::rng(3),
        );
        Fixture {
            synced,
            store,
            outputs,
            stranger_outputs,
        }
    })
}

fuzz_target!(|input: Input| {
    let fx = fixture();
    match input {
        Input::Snapshot(bytes) => {
            if let Ok(s) = Snapshot::from_bytes(&bytes) {
                if let Ok(set) = SyncedSet::from_snapshot(s) {
                    let _ = set.candidates(&fx.outputs[..8]);
                    // A checked set's cache reads back to the same set.
                    let back = SyncedSet::from_cache(&set.to_cache()).expect("own cache");
                    assert_eq!(back.to_snapshot_bytes(), set.to_snapshot_bytes());
                }
            }
        }
        Input::Delta(bytes) => {
            if let Ok(d) = Delta::from_bytes(&bytes) {
                let mut set = fx.synced.clone();
                let before = set.to_snapshot_bytes();
                if set.offer(d).is_err() {
                    assert_eq!(set.to_snapshot_bytes(), before, "a refused delta changes nothing");
                }
            }
        }
        Input::Cache(bytes) => {
            let _ = SyncedSet::from_cache(&bytes);
        }
        Input::Request { body, client_items } => {
            let n = usize::from(client_items).max(1);
            if let Ok(answer) = fx.store.answer(&body, n) {
                let bits = fx.store.bucket_bits();
                let req = sync::FetchRequest::from_bytes(&body, labels::fetch_buckets(n, bits), bits)
                    .expect("accepted request");
                let sections = messages::split_response(&answer[sync::RESPONSE_HEADER_LEN..]).expect("own answer");
                assert_eq!(sections.len(), req.buckets.len());
                for ((b, recs), want) in sections.iter().zip(&req.buckets) {
                    assert_eq!(b, want);
                    for r in sync::parse_records(recs).expect("own records") {
                        assert_eq!(labels::bucket(&r.tag, bits), *b);
                    }
                }
            }
        }
        Input::Response {
            registered,
            strangers,
            response,
        } => {
            let r = usize::from(registered) % 17;
            let s = usize::from(strangers) % 17;
            let mut outs: Vec<[u8; 64]> = (0..r).map(|i| fx.outputs[i * 13 % fx.outputs.len()]).collect();
            outs.sort();
            outs.dedup();
            let registered = outs.len();
            outs.extend_from_slice(&fx.stranger_outputs[..s]);
            if outs.is_empty() {
                return;
            }
            let Ok((client, request)) = ConfirmClient::start(
                &outs,
                &fx.synced,
                fx.store.bucket_bits(),
                fx.store.len() as u64,
                &mut psi_fuzz::rng(4),
            ) else {
                return;
            };
            let honest = fx.store.answer(&request, outs.len()).expect("honest request");
            let body = match &response {
                Response::Valid => honest.clone(),
                Response::Mutated(m) => m.apply(&honest, None),
                Response::Raw(b) => b.clone(),
            };
            let result = client.finish(&body);
            if matches!(response, Response::Valid) {
                let conf = result.expect("honest answer");
                let got: Vec<usize> = conf.matches.iter().map(|m| m.index).collect();
                assert_eq!(got, (0..registered).collect::<Vec<_>>());
                for m in &conf.matches {
                    let i = fx.outputs.iter().position(|o| *o == outs[m.index]).expect("registered");
                    assert_eq!(m.label.as_deref(), Some(psi_fuzz::label_of(i).as_str()));
                }
            }
        }
    }
});
