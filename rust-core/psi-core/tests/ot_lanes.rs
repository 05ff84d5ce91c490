//! OT-PSI with label lanes (suite 0x02, ADR 0053, `docs/protocol/ot-psi.md` §4.7): each
//! match's label comes with the run itself; a client learns only its matches' labels; the
//! bytes depend on the sizes and the lane width only; each side falls back to the plain
//! suite when the other has no lanes.

use psi_core::ot::{self, ClientStep, LaneLabels, OtClient, OtConfig, OtServer};
use psi_core::{DecodeError, Error, ItemSet, MatchOutput, Threads};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use std::sync::Arc;

mod common;

use common::lanes::{Registry, check_labels, client_items, registry};

/// A run; returns the output and (client → server, server → client) bytes.
fn run(
    client: ItemSet,
    registry: &Registry,
    ask: bool,
    serve: bool,
    seed: u64,
) -> Result<(MatchOutput, u64, u64), Error> {
    let mut client_config = OtConfig::new(Threads::new(2)).with_chunk_rows(512);
    if ask {
        client_config = client_config.with_label_lanes();
    }
    let mut server_config = OtConfig::new(Threads::new(2));
    if serve {
        server_config = server_config.with_lane_labels(registry.labels.clone());
    }
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let (mut c, mut request) = OtClient::start(client, client_config, &mut rng)?;
    let mut s = OtServer::new(registry.set.clone(), server_config, &mut rng)?;
    let (mut up, mut down) = (0u64, 0u64);
    loop {
        up += request.len() as u64;
        let response = s.handle(&request)?;
        down += response.len() as u64;
        match c.handle(&response)? {
            ClientStep::Send(next) => request = next,
            ClientStep::Done(out) => return Ok((out, up, down)),
        }
    }
}

#[test]
fn every_match_gets_its_label_from_the_run() {
    let reg = registry(0..3000);
    // Balanced, unbalanced both ways, no overlap, an empty client.
    for (seed, range) in [
        (1, 2000..5000),
        (2, 2990..3010),
        (3, 0..3000),
        (4, 5000..6000),
    ] {
        let (out, _, _) = run(client_items(range.clone()), &reg, true, true, seed).unwrap();
        let want = range.filter(|&i| i < 3000).count();
        assert_eq!(out.matches.len(), want, "{seed}");
        check_labels(&out, &reg);
    }
    let (out, _, _) = run(client_items(0..0), &reg, true, true, 5).unwrap();
    assert!(out.matches.is_empty());
    assert_eq!(out.labels.as_ref().map(|l| l.0.len()), Some(0));
}

/// The same matches with and without lanes, and the outputs message grows by exactly
/// `3 n_s (1 + Λ)` bytes plus the width byte: the lane costs what the spec says.
#[test]
fn lanes_change_only_the_outputs_size() {
    let reg = registry(0..4096);
    let width = reg.labels.width() as u64;
    assert_eq!(width, 11);
    let (plain, up0, down0) = run(client_items(1000..5096), &reg, false, true, 9).unwrap();
    let (lanes, up1, down1) = run(client_items(1000..5096), &reg, true, true, 9).unwrap();
    assert!(plain.labels.is_none());
    assert_eq!(plain.matches, lanes.matches);
    check_labels(&lanes, &reg);
    assert_eq!(up1, up0, "the client's messages are the same size");
    // Setup: + the width byte; outputs: + the width byte + a lane per row.
    assert_eq!(down1 - down0, 1 + 1 + 3 * 4096 * (1 + width));
    let n_s = 4096u64;
    let l = ot::output_len(4096, 4096) as u64;
    assert_eq!(
        down1,
        ot::sizes::setup()
            + ot::sizes::acks(ot::table_size(4096) as u64, 512)
            + 1
            + ot::sizes::outputs_with_lanes(n_s, l, width)
    );
}

/// ADR 0018's rule for the new bytes: what the server sends, and what the client sends,
/// depend on the sizes and the lane width, not on which or how many items match.
#[test]
fn traffic_does_not_depend_on_the_matches() {
    let reg = registry(0..2048);
    let mut sizes = Vec::new();
    for (seed, range) in [
        (11, 5000..7048),
        (12, 0..2048),
        (13, 1024..3072),
        (14, 2047..4095),
    ] {
        let (out, up, down) = run(client_items(range), &reg, true, true, seed).unwrap();
        check_labels(&out, &reg);
        sizes.push((up, down));
    }
    assert!(sizes.windows(2).all(|w| w[0] == w[1]), "{sizes:?}");
}

/// Each side falls back to suite 0x01: a server without lanes answers a client that asks
/// (no labels in the output: the label step fetches them), and a server with lanes
/// answers a client that does not ask without them.
#[test]
fn either_side_without_lanes_runs_the_plain_suite() {
    let reg = registry(0..500);
    for (ask, serve) in [(true, false), (false, true), (false, false)] {
        let (out, _, down) = run(client_items(400..900), &reg, ask, serve, 21).unwrap();
        assert_eq!(out.matches.len(), 100);
        assert!(out.labels.is_none(), "{ask} {serve}");
        let l = ot::output_len(500, 500) as u64;
        let acks = ot::sizes::acks(ot::table_size(500) as u64, 512);
        assert_eq!(down, ot::sizes::setup() + acks + ot::sizes::outputs(500, l));
    }
}

/// The labels are not in the clear on the wire, and the lane is a one-time pad: a byte
/// flipped in transit in the matched row's zero padding is a typed error for the client,
/// one flipped in its label or length byte changes the label (lanes carry no MAC: the
/// model is semi-honest and the channel is TLS; a server can send any label anyway), and
/// one flipped in any other row changes nothing.
#[test]
fn lanes_are_padded_and_checked() {
    // "alice" has an 11-byte label, so the width is 11; "bob", the client's one item, has
    // a 3-byte label, so its lane has 8 bytes of zero padding to check.
    let set = Arc::new(ItemSet::new([b"alice".to_vec(), b"bob".to_vec()]));
    let wanted: Vec<Option<Vec<u8>>> = set
        .items()
        .iter()
        .map(|it| {
            Some(if it == b"alice" {
                b"abcdefghijk".to_vec()
            } else {
                b"xyz".to_vec()
            })
        })
        .collect();
    let labels = Arc::new(LaneLabels::new(wanted).unwrap());
    let server_config = OtConfig::new(Threads::ONE).with_lane_labels(labels);
    let start = || {
        OtClient::start(
            ItemSet::new([b"bob".to_vec()]),
            OtConfig::new(Threads::ONE).with_label_lanes(),
            &mut ChaCha20Rng::seed_from_u64(31),
        )
        .unwrap()
    };
    let (mut c, hello) = start();
    let mut s = OtServer::new(set, server_config, &mut ChaCha20Rng::seed_from_u64(32)).unwrap();
    let setup = s.handle(&hello).unwrap();
    let ClientStep::Send(chunk) = c.handle(&setup).unwrap() else {
        panic!("one chunk")
    };
    let outputs = s.handle(&chunk).unwrap();
    assert_eq!(outputs[4], ot::messages::LABELLED_OUTPUTS);
    for label in [&b"abcdefghijk"[..], b"xyz"] {
        assert!(!outputs.windows(label.len()).any(|w| w == label));
    }
    let (body, fields) = (9, 6);
    let l = outputs[body] as usize;
    assert_eq!(outputs[body + 1], 11);
    let row = l + 1 + 11;
    let (mut refused, mut changed, mut same) = (0, 0, 0);
    for at in (body + fields..outputs.len()).filter(|a| (a - body - fields) % row >= l) {
        let mut bad = outputs.clone();
        bad[at] ^= 0x01;
        // The same client again (same seed: the same hello and chunk).
        let (mut c2, _) = start();
        let ClientStep::Send(_) = c2.handle(&setup).unwrap() else {
            panic!("one chunk")
        };
        match c2.handle(&bad) {
            Ok(ClientStep::Done(out)) => {
                assert_eq!(out.matches.len(), 1);
                let got = out.labels.unwrap().into_vec();
                if got == vec![Some(b"xyz".to_vec())] {
                    same += 1;
                } else {
                    changed += 1;
                }
            }
            Err(Error::Decode(DecodeError::InvalidParameter { what: "label lane" })) => {
                refused += 1
            }
            Err(other) => panic!("unexpected {other}"),
            Ok(other) => panic!("unexpected {other:?}"),
        }
    }
    // "bob"'s lane is one row of one list: its 8 padding bytes are checked; its 3 label
    // bytes and its length byte (4 -> 5 reads "xyz\0", still zero-padded) are not; the
    // other 5 rows' lanes are not read.
    assert_eq!((refused, changed, same), (8, 4, 5 * 12));
}

/// A server whose labels do not line up with its set is a typed error, not a wrong label.
#[test]
fn labels_must_match_the_set() {
    let set = Arc::new(ItemSet::new([b"a".to_vec(), b"b".to_vec()]));
    let labels = Arc::new(LaneLabels::new([Some(b"x".to_vec())]).unwrap());
    let err = OtServer::new(
        set,
        OtConfig::new(Threads::ONE).with_lane_labels(labels),
        &mut ChaCha20Rng::seed_from_u64(1),
    )
    .unwrap_err();
    assert!(matches!(
        err,
        Error::CountMismatch {
            expected: 2,
            found: 1
        }
    ));
}

// ---- the transcript vector (docs/protocol/ot-psi.md §9.7) --------------------------------

/// The suite-0x02 vector: the sets, seeds and chunk size of `ot-psi-transcript.json`, the
/// server's items labelled: `+1555...` number `i` gets `u<i>`, the empty string the empty
/// label, the `+4420...` numbers none; so `Λ = 4`.
fn lanes_transcript_json(threads: Threads) -> serde_json::Value {
    let (client, server) = common::vector_sets();
    let (c, s) = common::vector_items();
    let config = OtConfig::new(threads)
        .with_chunk_rows(128)
        .with_label_lanes()
        .with_lane_labels(common::lanes::vector_lane_labels(&s));
    let (out, transcript) = common::chunked::run(&c, &s, &config, (0x0071_c11e, 0x0071_5e7e));
    let got = common::lanes::vector_match_labels(&out);
    serde_json::json!({
        "description": "OT-PSI (protocol id 0x02, suite 0x02: label lanes) transcript with fixed RNG seeds; the sets, seeds and draw order of ot-psi-transcript.json; see docs/protocol/ot-psi.md sections 4.7 and 9.7",
        "produced_by": "rust-core/psi-core/tests/ot_lanes.rs, test lanes_transcript_vector; regenerate with OT_PSI_WRITE_VECTORS=1 cargo test -p psi-core --test ot_lanes lanes_transcript_vector",
        "rng": "as in ot-psi-transcript.json",
        "client_seed": 0x0071_c11e_u64,
        "server_seed": 0x0071_5e7e_u64,
        "chunk_rows": 128,
        "client_items": client,
        "server_items": server,
        "server_labels": server.iter().map(|s| common::lanes::vector_label(s)).collect::<Vec<_>>(),
        "lane_width": 4,
        "messages": common::vector_messages(&transcript),
        "match_indices": out.matches.iter().map(|m| m.index).collect::<Vec<_>>(),
        "match_labels": got,
    })
}

/// Regenerates the suite-0x02 transcript (one and two threads must agree) and compares it
/// with the checked-in vector.
#[test]
fn lanes_transcript_vector() {
    let one = lanes_transcript_json(Threads::ONE);
    let two = lanes_transcript_json(Threads::new(2));
    common::check_vector(
        "ot-psi-lanes-transcript.json",
        "OT_PSI_WRITE_VECTORS",
        &one,
        &two,
    );
}
