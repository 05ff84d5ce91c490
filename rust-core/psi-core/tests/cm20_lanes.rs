//! CM20-PSI with label lanes (suite 0x02, ADR 0053, `docs/protocol/cm20-psi.md` §4.7):
//! each match's label comes with the run itself, one lane per sorted value; the lane bytes
//! depend on the sizes and the lane width only; each side falls back to the plain suite
//! when the other has no lanes; bad lanes and bad labelled outputs are typed errors.

use psi_core::cm20::{self, ClientStep, Cm20Client, Cm20Config, Cm20Server};
use psi_core::lanes::LaneLabels;
use psi_core::{DecodeError, Error, ItemSet, MatchOutput, Threads};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use std::sync::Arc;

mod common;

use common::lanes::{Registry, check_labels, client_items, registry};

/// A run's output, (client → server, server → client) bytes, and the outputs message.
type Run = (MatchOutput, u64, u64, Vec<u8>);

/// A run; `ask`: the client asks for lanes, `serve`: the server has them.
fn run(client: ItemSet, reg: &Registry, ask: bool, serve: bool, seed: u64) -> Result<Run, Error> {
    // 16 KiB requests: several chunks for the larger sets.
    let mut client_config = Cm20Config::new(Threads::new(2)).with_max_request_bytes(16 << 10);
    if ask {
        client_config = client_config.with_label_lanes();
    }
    let mut server_config = Cm20Config::new(Threads::new(2));
    if serve {
        server_config = server_config.with_lane_labels(reg.labels.clone());
    }
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let (mut c, mut request) = Cm20Client::start(client, client_config, &mut rng)?;
    let mut s = Cm20Server::new(reg.set.clone(), server_config, &mut rng)?;
    let (mut up, mut down) = (0u64, 0u64);
    loop {
        up += request.len() as u64;
        let response = s.handle(&request)?;
        down += response.len() as u64;
        match c.handle(&response)? {
            ClientStep::Send(next) => request = next,
            ClientStep::Done(out) => {
                assert_eq!(s.labels_carried(), out.labels.is_some());
                return Ok((out, up, down, response));
            }
        }
    }
}

/// Body offsets of the labelled outputs (spec §4.7): `l2`, `Λ`, `n_s`, `k`, `L`, data,
/// lanes.
const BODY: usize = 9;
fn coded_len(outputs: &[u8]) -> usize {
    u32::from_be_bytes(outputs[BODY + 7..BODY + 11].try_into().unwrap()) as usize
}

#[test]
fn every_match_gets_its_label_from_the_run() {
    let reg = registry(0..3000);
    // Balanced, unbalanced both ways, no overlap, all.
    for (seed, range) in [
        (1, 2000..5000),
        (2, 2990..3010),
        (3, 0..3000),
        (4, 5000..6000),
    ] {
        let (out, ..) = run(client_items(range.clone()), &reg, true, true, seed).unwrap();
        let want = range.filter(|&i| i < 3000).count();
        assert_eq!(out.matches.len(), want, "{seed}");
        check_labels(&out, &reg);
    }
    let (out, ..) = run(client_items(0..0), &reg, true, true, 5).unwrap();
    assert!(out.matches.is_empty());
    assert_eq!(out.labels.as_ref().map(|l| l.0.len()), Some(0));
    // An empty registry: no lanes to send, a run all the same.
    let empty = registry(0..0);
    let (out, ..) = run(client_items(0..10), &empty, true, true, 6).unwrap();
    assert!(out.matches.is_empty());
}

/// The same matches with and without lanes; the client's bytes are the same, and the
/// outputs message grows by exactly the width byte and `n_s (1 + Λ)` (the setup by the
/// width byte): the lanes cost what the spec says.
#[test]
fn lanes_change_only_the_outputs_size() {
    let reg = registry(0..4096);
    let width = reg.labels.width() as u64;
    assert_eq!(width, 11);
    let (plain, up0, down0, out0) = run(client_items(1000..5096), &reg, false, true, 9).unwrap();
    let (lanes, up1, down1, out1) = run(client_items(1000..5096), &reg, true, true, 9).unwrap();
    assert!(plain.labels.is_none());
    assert_eq!(plain.matches, lanes.matches);
    check_labels(&lanes, &reg);
    assert_eq!(up1, up0, "the client's messages are the same size");
    assert_eq!(out1[4], cm20::messages::LABELLED_OUTPUTS);
    assert_eq!(out0[4], 0x05);
    // The values are the same (the same seeds, so the same matrix): the coded part too.
    let l0 = u32::from_be_bytes(out0[BODY + 6..BODY + 10].try_into().unwrap()) as usize;
    assert_eq!(coded_len(&out1), l0);
    assert_eq!(
        out1[BODY + 11..BODY + 11 + l0],
        out0[BODY + 10..BODY + 10 + l0]
    );
    assert_eq!(down1 - down0, cm20::sizes::lanes(4096, width));
    assert_eq!(down1 - down0, 1 + 1 + 4096 * (1 + width));
}

/// ADR 0018's rule for the new bytes: the client's messages, and the lanes the server
/// sends, depend on the sizes and the lane width, not on which or how many items match.
/// (The Golomb-Rice payload before the lanes varies with the random values, as without
/// lanes; it does not depend on the matches either: the values are pseudorandom.)
#[test]
fn lane_traffic_does_not_depend_on_the_matches() {
    let reg = registry(0..2048);
    let mut sizes = Vec::new();
    for (seed, range, matches) in [
        (11, 5000..7048, 0),
        (12, 0..2048, 2048),
        (13, 1024..3072, 1024),
        (14, 2047..4095, 1),
    ] {
        let (out, up, down, outputs) = run(client_items(range), &reg, true, true, seed).unwrap();
        assert_eq!(out.matches.len(), matches);
        check_labels(&out, &reg);
        let lanes = outputs.len() - BODY - 11 - coded_len(&outputs);
        sizes.push((up, down - coded_len(&outputs) as u64, lanes));
    }
    assert!(sizes.windows(2).all(|w| w[0] == w[1]), "{sizes:?}");
    assert_eq!(sizes[0].2, 2048 * 12);
}

/// Each side falls back to suite 0x01: a server without lanes answers a client that asks
/// (no labels in the output: the label step fetches them), and a server with lanes
/// answers a client that does not ask without them.
#[test]
fn either_side_without_lanes_runs_the_plain_suite() {
    let reg = registry(0..500);
    for (ask, serve) in [(true, false), (false, true), (false, false)] {
        let (out, _, _, outputs) = run(client_items(400..900), &reg, ask, serve, 21).unwrap();
        assert_eq!(out.matches.len(), 100);
        assert!(out.labels.is_none(), "{ask} {serve}");
        assert_eq!(outputs[4], 0x05, "{ask} {serve}");
        let l = u32::from_be_bytes(outputs[BODY + 6..BODY + 10].try_into().unwrap());
        assert_eq!(outputs.len(), BODY + 10 + l as usize);
    }
}

/// Two-party run of one chunk with lanes, returning the pieces a tampering test needs.
fn one_chunk_run(client: &[&[u8]], server: &[(&[u8], &[u8])]) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let set = Arc::new(ItemSet::new(server.iter().map(|(i, _)| i.to_vec())));
    let wanted: Vec<Option<Vec<u8>>> = set
        .items()
        .iter()
        .map(|it| Some(server.iter().find(|(i, _)| *i == it).unwrap().1.to_vec()))
        .collect();
    let labels = Arc::new(LaneLabels::new(wanted).unwrap());
    let mut s = Cm20Server::new(
        set,
        Cm20Config::new(Threads::ONE).with_lane_labels(labels),
        &mut ChaCha20Rng::seed_from_u64(32),
    )
    .unwrap();
    let (mut c, hello) = lane_client(client);
    let setup = s.handle(&hello).unwrap();
    let ClientStep::Send(chunk) = c.handle(&setup).unwrap() else {
        panic!("one chunk")
    };
    let outputs = s.handle(&chunk).unwrap();
    (hello, setup, outputs)
}

fn lane_client(items: &[&[u8]]) -> (Cm20Client, Vec<u8>) {
    Cm20Client::start(
        ItemSet::new(items.iter().map(|i| i.to_vec())),
        Cm20Config::new(Threads::ONE).with_label_lanes(),
        &mut ChaCha20Rng::seed_from_u64(31),
    )
    .unwrap()
}

/// The labels are not in the clear on the wire, and the lane is a one-time pad: a byte
/// flipped in transit in the matched lane's zero padding is a typed error for the client,
/// one flipped in its label or length byte changes the label (lanes carry no MAC, ADR 0053
/// §5), and one flipped in any other lane changes nothing.
#[test]
fn lanes_are_padded_and_checked() {
    // "alice" has an 11-byte label, so the width is 11; "bob", the client's one item, has
    // a 3-byte label, so its lane has 8 bytes of zero padding to check.
    let server: [(&[u8], &[u8]); 3] = [
        (b"alice", b"abcdefghijk"),
        (b"bob", b"xyz"),
        (b"carol", b"carol-label"),
    ];
    let (_, setup, outputs) = one_chunk_run(&[b"bob", b"dave"], &server);
    assert_eq!(outputs[4], cm20::messages::LABELLED_OUTPUTS);
    assert_eq!(outputs[BODY + 1], 11);
    for (_, label) in server {
        assert!(!outputs.windows(label.len()).any(|w| w == label));
    }
    let lanes_at = BODY + 11 + coded_len(&outputs);
    assert_eq!(outputs.len() - lanes_at, 3 * 12);
    let (mut refused, mut changed, mut same) = (0, 0, 0);
    for at in lanes_at..outputs.len() {
        let mut bad = outputs.clone();
        bad[at] ^= 0x01;
        // The same client again (same seed: the same hello and chunk).
        let (mut c2, _) = lane_client(&[b"bob", b"dave"]);
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
    // "bob"'s lane: its 8 padding bytes are checked; its 3 label bytes and its length byte
    // (4 -> 5 reads "xyz\0", still zero-padded) are not; the 2 other lanes are not read.
    assert_eq!((refused, changed, same), (8, 4, 2 * 12));
}

/// Malformed labelled outputs are typed errors, never a panic or a wrong label: every
/// truncation, a width the setup did not grant, a width over 15, lanes of the wrong
/// length; and a setup granting lanes the client did not ask for.
#[test]
fn malformed_lane_messages_are_typed_errors() {
    let server: [(&[u8], &[u8]); 2] = [(b"alice", b"abc"), (b"bob", b"xyz")];
    let (hello, setup, outputs) = one_chunk_run(&[b"bob"], &server);
    assert_eq!(hello[BODY], cm20::messages::SUITE_LANES);
    assert_eq!(setup[BODY], cm20::messages::SUITE_LANES);
    assert_eq!(*setup.last().unwrap(), 3);
    let fresh = || {
        let (mut c, _) = lane_client(&[b"bob"]);
        let ClientStep::Send(_) = c.handle(&setup).unwrap() else {
            panic!("one chunk")
        };
        c
    };
    for n in 0..outputs.len() {
        assert!(cm20::messages::check(&outputs[..n]).is_err(), "prefix {n}");
        assert!(matches!(
            fresh().handle(&outputs[..n]),
            Err(Error::Decode(_))
        ));
    }
    let with_len = |bytes: &mut Vec<u8>| {
        let n = (bytes.len() - BODY) as u32;
        bytes[5..9].copy_from_slice(&n.to_be_bytes());
    };
    // A lane too many, a lane byte short.
    let mut long = outputs.clone();
    long.push(0);
    with_len(&mut long);
    let mut short = outputs.clone();
    short.pop();
    with_len(&mut short);
    for bad in [&long, &short] {
        assert!(matches!(
            fresh().handle(bad),
            Err(Error::Decode(DecodeError::LengthMismatch { .. }))
        ));
    }
    // Λ = 16: over the limit.
    let mut wide = outputs.clone();
    wide[BODY + 1] = 16;
    assert_eq!(
        fresh().handle(&wide).unwrap_err(),
        Error::Decode(DecodeError::InvalidParameter {
            what: "label lane width"
        })
    );
    // Λ = 2 with the lanes resized to match: not the granted width.
    let mut narrow = outputs[..outputs.len() - 2].to_vec();
    narrow[BODY + 1] = 2;
    with_len(&mut narrow);
    assert!(cm20::messages::check(&narrow).is_ok());
    assert_eq!(
        fresh().handle(&narrow).unwrap_err(),
        Error::Decode(DecodeError::InvalidParameter {
            what: "label lane width"
        })
    );
    // Plain outputs after a granted setup.
    let mut plain = outputs[..BODY + 1].to_vec();
    plain.extend_from_slice(&outputs[BODY + 2..outputs.len() - 2 * 4]);
    plain[4] = 0x05;
    with_len(&mut plain);
    assert!(cm20::messages::check(&plain).is_ok());
    assert!(fresh().handle(&plain).is_err());
    // A client that did not ask refuses a setup that grants lanes.
    let (mut c, _) = Cm20Client::start(
        ItemSet::new([b"bob".to_vec()]),
        Cm20Config::new(Threads::ONE),
        &mut ChaCha20Rng::seed_from_u64(31),
    )
    .unwrap();
    assert_eq!(
        c.handle(&setup).unwrap_err(),
        Error::Decode(DecodeError::InvalidParameter { what: "suite" })
    );
    // An unknown suite byte in the hello.
    let mut odd = hello.clone();
    odd[BODY] = 0x03;
    assert!(cm20::messages::check(&odd).is_err());
}

/// A server whose labels do not line up with its set is a typed error, not a wrong label.
#[test]
fn labels_must_match_the_set() {
    let set = Arc::new(ItemSet::new([b"a".to_vec(), b"b".to_vec()]));
    let labels = Arc::new(LaneLabels::new([Some(b"x".to_vec())]).unwrap());
    let err = Cm20Server::new(
        set,
        Cm20Config::new(Threads::ONE).with_lane_labels(labels),
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

// ---- the transcript vector (docs/protocol/cm20-psi.md §8.1) -----------------------------

/// The suite-0x02 vector: the sets, seeds and chunk size of `cm20-psi-transcript.json`, the
/// server's items labelled as in `ot-psi-lanes-transcript.json`: `+1555...` number `i`
/// gets `u<i>`, the empty string the empty label, the `+4420...` numbers none; `Λ = 4`.
fn lanes_transcript_json(threads: Threads) -> serde_json::Value {
    const CLIENT_SEED: u64 = 0x00c2_0c11;
    const SERVER_SEED: u64 = 0x00c2_05e7;
    const VECTOR_REQUEST_BYTES: u64 = 16 * 64 + 29;
    let (client, server) = common::vector_sets();
    let (c, s) = common::vector_items();
    let config = Cm20Config::new(threads)
        .with_max_request_bytes(VECTOR_REQUEST_BYTES)
        .with_label_lanes()
        .with_lane_labels(common::lanes::vector_lane_labels(&s));
    let (out, transcript) = common::chunked::run(&c, &s, &config, (CLIENT_SEED, SERVER_SEED));
    let got = common::lanes::vector_match_labels(&out);
    serde_json::json!({
        "description": "CM20-PSI (protocol id 0x03, suite 0x02: label lanes) transcript with fixed RNG seeds; the sets, seeds, draw order and chunk size of cm20-psi-transcript.json; see docs/protocol/cm20-psi.md sections 4.7 and 8.1",
        "produced_by": "rust-core/psi-core/tests/cm20_lanes.rs, test lanes_transcript_vector; regenerate with CM20_PSI_WRITE_VECTORS=1 cargo test -p psi-core --test cm20_lanes lanes_transcript_vector",
        "rng": "as in cm20-psi-transcript.json",
        "client_seed": CLIENT_SEED,
        "server_seed": SERVER_SEED,
        "max_request_bytes": VECTOR_REQUEST_BYTES,
        "client_items": client,
        "server_items": server,
        "server_labels": server.iter().map(|s| common::lanes::vector_label(s)).collect::<Vec<_>>(),
        "lane_width": 4,
        "messages": common::vector_messages(&transcript),
        "outputs_hex": hex::encode(transcript.last().unwrap()),
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
        "cm20-psi-lanes-transcript.json",
        "CM20_PSI_WRITE_VECTORS",
        &one,
        &two,
    );
}
