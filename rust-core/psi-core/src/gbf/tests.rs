//! Unit tests of the GBF-PSI state machines (property tests against a plain intersection
//! are in `psi-core/tests/gbf_psi.rs`).

use super::messages::{self, Message};
use super::*;
use crate::error::{DecodeError, Error};
use crate::parallel::Threads;
use crate::wire::HEADER_LEN;
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;

fn set(range: std::ops::Range<u32>) -> ItemSet {
    ItemSet::new(range.map(|i| format!("+1555{i:07}")))
}

fn run(c: ItemSet, s: ItemSet, config: &GbfConfig, seed: u64) -> (MatchOutput, InMemoryTraffic) {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    run_in_memory(c, s, config, &mut rng, |_| {}).unwrap()
}

fn indices(out: &MatchOutput) -> Vec<usize> {
    out.matches.iter().map(|m| m.index).collect()
}

#[test]
fn finds_the_intersection() {
    let (out, stats) = run(
        set(0..300),
        set(200..5000),
        &GbfConfig::new(Threads::ONE),
        1,
    );
    assert_eq!(indices(&out), (200..300).collect::<Vec<_>>());
    assert_eq!(out.server_items, 4800);
    assert_eq!(stats.round_trips, 2);
    let p = stats.params.unwrap();
    assert_eq!(p, params::Params::new(300, 4800).unwrap());
    let t = sizes::traffic(300, 4800);
    assert_eq!(t.client_to_server, stats.client_to_server_bytes);
    assert_eq!(t.round_trips as usize, stats.round_trips);
    // The outputs' size is an estimate; the rest of the way down is exact.
    let down = stats.server_to_client_bytes as f64;
    assert!(
        (down / t.server_to_client as f64 - 1.0).abs() < 0.01,
        "{down}"
    );
}

#[test]
fn many_chunks_give_the_same_result() {
    // 1,000 client items against 1,000: k = 50, m = 72,192 bits = 141 instances; 3 per chunk.
    let config = GbfConfig::new(Threads::new(2)).with_max_request_bytes(3 * 8192 + 15);
    assert_eq!(config.chunk_instances(), 3);
    let (out, stats) = run(set(0..1000), set(500..1500), &config, 2);
    assert_eq!(indices(&out), (500..1000).collect::<Vec<_>>());
    let instances = stats.params.unwrap().instances() as usize;
    assert_eq!(stats.round_trips, 1 + instances.div_ceil(3));
    let t = sizes::traffic_with(1000, 1000, &config);
    assert_eq!(t.round_trips as usize, stats.round_trips);
    assert_eq!(t.client_to_server, stats.client_to_server_bytes);
}

#[test]
fn empty_and_disjoint_sets() {
    let config = GbfConfig::new(Threads::ONE);
    assert!(run(set(0..0), set(0..100), &config, 3).0.matches.is_empty());
    assert!(run(set(0..100), set(0..0), &config, 4).0.matches.is_empty());
    assert!(
        run(set(0..100), set(100..200), &config, 5)
            .0
            .matches
            .is_empty()
    );
    let (out, _) = run(set(0..64), set(0..64), &config, 6);
    assert_eq!(indices(&out), (0..64).collect::<Vec<_>>());
}

/// Working ahead changes no request and no result.
#[test]
fn work_ahead_changes_no_byte() {
    let config = GbfConfig::new(Threads::ONE).with_max_request_bytes(4 * 8192 + 15);
    let transcript = |ahead: bool| {
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        let (client, hello) = GbfClient::start(set(0..500), config.clone(), &mut rng).unwrap();
        let mut server = GbfServer::new(set(400..900), config.clone(), &mut rng).unwrap();
        crate::chunked::requests_of_run(client, hello, |r| server.handle(r).unwrap(), ahead)
    };
    let (a, ma) = transcript(false);
    let (b, mb) = transcript(true);
    assert_eq!(a, b);
    assert_eq!(ma, (400..500).collect::<Vec<_>>());
    assert_eq!(ma, mb);
}

/// What the server sends does not depend on which of its items the client holds: with
/// the same randomness, the setup is byte for byte the same for two client sets of the
/// same size, and the outputs the same length up to the coding of the values.
#[test]
fn the_setup_does_not_depend_on_the_client_set() {
    let config = GbfConfig::new(Threads::ONE);
    let setup = |client: ItemSet| {
        let mut rng = ChaCha20Rng::seed_from_u64(8);
        let (_, hello) = GbfClient::start(client, config.clone(), &mut rng).unwrap();
        let mut server = GbfServer::new(set(0..300), config.clone(), &mut rng).unwrap();
        server.handle(&hello).unwrap()
    };
    assert_eq!(setup(set(0..100)), setup(set(1000..1100)));
}

#[test]
fn the_client_refuses_other_parameters() {
    let config = GbfConfig::new(Threads::ONE);
    let mut rng = ChaCha20Rng::seed_from_u64(9);
    let (_, hello) = GbfClient::start(set(0..100), config.clone(), &mut rng).unwrap();
    let mut server = GbfServer::new(set(0..300), config.clone(), &mut rng).unwrap();
    let setup = server.handle(&hello).unwrap();
    // Body offsets: suite 0, nonce 1, n_s 33, k 37, m 38, ℓ 42.
    for (offset, what) in [(37, "hashes"), (41, "filter bits"), (42, "output bits")] {
        let mut bad = setup.clone();
        bad[HEADER_LEN + offset] = bad[HEADER_LEN + offset].wrapping_add(if offset == 41 {
            2 // m stays a multiple of 512 only if its low byte moves by 0; this one does not
        } else {
            1
        });
        let mut rng = ChaCha20Rng::seed_from_u64(9);
        let (mut client, _) = GbfClient::start(set(0..100), config.clone(), &mut rng).unwrap();
        let err = client.handle(&bad).unwrap_err();
        assert!(
            matches!(err, Error::Decode(DecodeError::InvalidParameter { what: w }) if w == what),
            "{offset}: {err:?}"
        );
        assert!(!client.is_done());
    }
}

#[test]
fn the_server_checks_chunks_and_phases() {
    let config = GbfConfig::new(Threads::ONE).with_max_request_bytes(8192 + 15);
    let mut rng = ChaCha20Rng::seed_from_u64(10);
    let (mut client, hello) = GbfClient::start(set(0..100), config.clone(), &mut rng).unwrap();
    let mut server = GbfServer::new(set(0..300), config.clone(), &mut rng).unwrap();
    // A chunk before the hello.
    let setup = server.handle(&hello).unwrap();
    // A second hello.
    assert!(matches!(
        server.handle(&hello),
        Err(Error::WrongPhase { .. })
    ));
    let ClientStep::Send(chunk) = client.handle(&setup).unwrap() else {
        panic!("a chunk")
    };
    // The wrong first instance.
    let mut bad = chunk.clone();
    bad[HEADER_LEN + 3] = 1;
    assert!(matches!(
        server.handle(&bad),
        Err(Error::Decode(DecodeError::InvalidParameter {
            what: "first instance"
        }))
    ));
    // A truncated chunk.
    let mut short = chunk[..chunk.len() - 1].to_vec();
    let len = (short.len() - HEADER_LEN) as u32;
    short[5..9].copy_from_slice(&len.to_be_bytes());
    assert!(matches!(
        server.handle(&short),
        Err(Error::Decode(DecodeError::LengthMismatch { .. }))
    ));
    // The good chunk is still taken.
    let ack = server.handle(&chunk).unwrap();
    assert!(matches!(messages::decode(&ack).unwrap(), Message::Ack(_)));
}

#[test]
fn a_bad_sender_point_leaves_the_server_awaiting_a_hello() {
    let config = GbfConfig::new(Threads::ONE);
    let mut rng = ChaCha20Rng::seed_from_u64(11);
    let (_, hello) = GbfClient::start(set(0..10), config.clone(), &mut rng).unwrap();
    let mut server = GbfServer::new(set(0..30), config.clone(), &mut rng).unwrap();
    let mut bad = hello.clone();
    let n = bad.len();
    bad[n - 32..].fill(0xff);
    assert!(server.handle(&bad).is_err());
    assert!(server.handle(&hello).is_ok());
}

#[test]
fn the_server_pins_the_admitted_client_set() {
    let config = GbfConfig::new(Threads::ONE);
    let mut rng = ChaCha20Rng::seed_from_u64(12);
    let (_, hello) = GbfClient::start(set(0..10), config.clone(), &mut rng).unwrap();
    let mut server = GbfServer::new(
        set(0..30),
        config.clone().with_expected_client_items(9),
        &mut rng,
    )
    .unwrap();
    assert_eq!(
        server.handle(&hello).unwrap_err(),
        Error::CountMismatch {
            expected: 9,
            found: 10
        }
    );
}

/// No decoder panics on truncations or single-byte changes of real messages.
#[test]
fn decoders_never_panic() {
    let config = GbfConfig::new(Threads::ONE).with_max_request_bytes(8192 + 15);
    let mut rng = ChaCha20Rng::seed_from_u64(13);
    let (client, hello) = GbfClient::start(set(0..20), config.clone(), &mut rng).unwrap();
    let mut server = GbfServer::new(set(10..40), config.clone(), &mut rng).unwrap();
    let mut msgs = Vec::new();
    let (reqs, _) = crate::chunked::requests_of_run(
        client,
        hello,
        |r| {
            let resp = server.handle(r).unwrap();
            msgs.push(resp.clone());
            resp
        },
        false,
    );
    msgs.extend(reqs);
    for m in &msgs {
        assert!(messages::check(m).is_ok());
        for cut in [0, 1, 5, 9, m.len() / 2, m.len() - 1] {
            let _ = messages::check(&m[..cut]);
        }
        for i in (0..m.len()).step_by(97).chain(0..12.min(m.len())) {
            let mut b = m.clone();
            b[i] ^= 0x41;
            let _ = messages::check(&b);
        }
    }
}
