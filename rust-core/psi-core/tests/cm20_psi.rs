//! CM20-PSI end to end: correctness against a plain set intersection (balanced and
//! unbalanced both ways, duplicates, many chunks), the seeded transcript vector, the
//! analytic sizes, and malformed or out-of-phase messages through the public API.

use proptest::prelude::*;
use psi_core::cm20::{self, ClientStep, Cm20Client, Cm20Config, Cm20Server};
use psi_core::{DecodeError, Error, ItemSet, Threads};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;

mod common;

use common::chunked::{check, run};
use common::{decode_err, items};

/// A whole message of this protocol: the 9-byte header, then `body`.
fn frame(message_type: u8, body: &[u8]) -> Vec<u8> {
    common::frame(0x03, message_type, body)
}

#[test]
fn edge_cases() {
    let config = Cm20Config::new(Threads::ONE);
    for (seed, (c, s)) in (1..).zip(common::edge_cases()) {
        check(&c, &s, &config, seed);
    }
}

#[test]
fn unbalanced_both_ways_and_many_chunks() {
    // 16 KiB requests: 16 columns per chunk for n_c = 16,000 (m = 2^14, 2 KiB columns).
    let config = Cm20Config::new(Threads::new(2)).with_max_request_bytes(16 << 10);
    check(&items("u", 0..10), &items("u", 5..16_000), &config, 8);
    check(
        &items("u", 0..16_000),
        &items("u", 15_990..16_010),
        &config,
        9,
    );
}

/// 1,000 contacts against 10^5 registry entries (the contact-discovery shape).
#[test]
fn contacts_against_a_large_registry() {
    let config = Cm20Config::new(Threads::new(2));
    check(
        &items("+1555", 0..1000),
        &items("+1555", 900..100_900),
        &config,
        10,
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, failure_persistence: None, ..ProptestConfig::default() })]

    /// Against a plain intersection: sizes 0..2^14, any overlap, duplicates, empty string,
    /// 1 or 2 threads, chunk sizes from one group of columns to everything in one request.
    #[test]
    fn matches_plain_intersection(
        n_c in prop_oneof![0usize..64, 64usize..2048, 2048usize..=16384],
        n_s in prop_oneof![0usize..64, 64usize..2048, 2048usize..=16384],
        overlap_pct in 0usize..=100,
        dups in 0usize..5,
        with_empty in any::<bool>(),
        threads in 1usize..=2,
        request_log in 10u32..=24,
        seed in any::<u64>(),
    ) {
        let (c, s) = common::overlapping_sets(n_c, n_s, overlap_pct, dups, with_empty);
        let config = Cm20Config::new(Threads::new(threads)).with_max_request_bytes(1 << request_log);
        check(&c, &s, &config, seed);
    }
}

// ---- the transcript vector --------------------------------------------------------------

const CLIENT_SEED: u64 = 0x00c2_0c11;
const SERVER_SEED: u64 = 0x00c2_05e7;
/// 16 columns of 64 bytes (m = 512) per chunk: the vector has several chunks.
const VECTOR_REQUEST_BYTES: u64 = 16 * 64 + 29;

fn transcript_json(threads: Threads) -> serde_json::Value {
    let (client, server) = common::vector_sets();
    let (c, s) = common::vector_items();
    let config = Cm20Config::new(threads).with_max_request_bytes(VECTOR_REQUEST_BYTES);
    let (out, transcript) = run(&c, &s, &config, (CLIENT_SEED, SERVER_SEED));
    let messages = common::vector_messages(&transcript);
    serde_json::json!({
        "description": "CM20-PSI (protocol id 0x03, suite 0x01) transcript with fixed RNG seeds; see docs/protocol/cm20-psi.md",
        "produced_by": "rust-core/psi-core/tests/cm20_psi.rs, test transcript_vector; regenerate with CM20_PSI_WRITE_VECTORS=1 cargo test -p psi-core --test cm20_psi transcript_vector",
        "rng": "rand_chacha 0.10 ChaCha20Rng::seed_from_u64(seed), one per party; the draw order is this implementation's (client: nonce 32 B, delta 16 B, PRF key 16 B, then per base OT 64 B scalar + 64 B point; server: nonce 32 B, MR19 scalar 64 B, s as 4 rows of 64 B)",
        "client_seed": CLIENT_SEED,
        "server_seed": SERVER_SEED,
        "max_request_bytes": VECTOR_REQUEST_BYTES,
        "client_items": client,
        "server_items": server,
        "messages": messages,
        "first_chunk_hex_prefix": hex::encode(&transcript[2][..64]),
        "outputs_hex": hex::encode(transcript.last().unwrap()),
        "match_indices": out.matches.iter().map(|m| m.index).collect::<Vec<_>>(),
    })
}

/// Regenerates the transcript (with one and two threads: they must agree) and compares
/// it with the checked-in vector.
#[test]
fn transcript_vector() {
    let one = transcript_json(Threads::ONE);
    let two = transcript_json(Threads::new(2));
    common::check_vector(
        "cm20-psi-transcript.json",
        "CM20_PSI_WRITE_VECTORS",
        &one,
        &two,
    );
}

/// The analytic sizes of the spec match the real messages: exactly for everything but the
/// Golomb-Rice payload, whose expectation the formula gives.
#[test]
fn message_sizes_match_the_spec() {
    for (n_c, n_s) in [(5000usize, 3000usize), (1000, 100_000), (20_000, 500)] {
        let (c, s) = (items("m", 0..n_c), items("m", 100..100 + n_s));
        let config = Cm20Config::new(Threads::new(2)).with_max_request_bytes(1 << 16);
        let (_, t) = run(&c, &s, &config, (1, 2));
        let client_bytes: u64 = t.iter().step_by(2).map(|m| m.len() as u64).sum();
        let server_bytes: u64 = t.iter().skip(1).step_by(2).map(|m| m.len() as u64).sum();
        let want = cm20::sizes::traffic_with(n_c as u64, n_s as u64, &config);
        assert_eq!(client_bytes, want.client_to_server, "{n_c} x {n_s}");
        assert_eq!(t.len() as u64, 2 * want.round_trips);
        // Exact parts of the server's bytes, then the payload against its expectation.
        let outputs = t.last().unwrap().len() as u64;
        let exact = server_bytes - outputs;
        let m = cm20::params::height(n_c as u64);
        let w = cm20::params::width(n_c as u64, n_s as u64, m).unwrap() as u64;
        let chunks = want.round_trips - 1;
        assert_eq!(exact, cm20::sizes::setup(w) + cm20::sizes::acks(chunks));
        let l2 = cm20::params::output_bits(n_c as u64, n_s as u64);
        let expect = cm20::sizes::outputs_expected(n_s as u64, l2) as f64;
        let rel = (outputs as f64 - expect).abs() / expect;
        assert!(
            rel < 0.01,
            "{n_c} x {n_s}: outputs {outputs} vs expected {expect}"
        );
    }
}

// ---- malformed and out-of-phase messages ------------------------------------------------

#[test]
fn malformed_oversized_and_wrong_phase_messages_are_typed_errors() {
    let config = Cm20Config::new(Threads::ONE);
    let mut crng = ChaCha20Rng::seed_from_u64(5);
    let mut srng = ChaCha20Rng::seed_from_u64(6);
    let (mut client, hello) =
        Cm20Client::start(ItemSet::new(items("w", 0..200)), config.clone(), &mut crng).unwrap();
    let mut server =
        Cm20Server::new(ItemSet::new(items("w", 100..300)), config, &mut srng).unwrap();
    assert!(matches!(
        decode_err(server.handle(&[])),
        DecodeError::Truncated { .. }
    ));
    for cut in [1, 8, 9, 50, hello.len() - 1] {
        assert!(matches!(
            decode_err(server.handle(&hello[..cut])),
            DecodeError::Truncated { .. }
        ));
    }
    let mut bad = hello.clone();
    bad[4] = 0x09;
    assert_eq!(
        decode_err(server.handle(&bad)),
        DecodeError::UnknownMessageType(9)
    );
    // Oversized: a header announcing more than the 1 GiB frame limit.
    let mut bad = hello.clone();
    bad[5..9].copy_from_slice(&u32::MAX.to_be_bytes());
    assert!(matches!(
        decode_err(server.handle(&bad)),
        DecodeError::LimitExceeded { .. }
    ));
    // A chunk, an ack and outputs before the hello: wrong phase.
    for t in [0x03u8, 0x04, 0x05] {
        let body: Vec<u8> = match t {
            0x03 => [vec![0u8; 16], vec![0, 0, 0, 1], vec![0u8; 32]].concat(),
            0x04 => vec![0, 16],
            _ => vec![40, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        };
        assert!(matches!(
            server.handle(&frame(t, &body)),
            Err(Error::WrongPhase { .. })
        ));
        assert!(client.handle(&frame(t, &body)).is_err());
    }
    // A chunk declaring 65535 columns: above the width limit.
    let body = [vec![0u8; 16], vec![0, 0, 0xff, 0xff]].concat();
    assert!(matches!(
        decode_err(server.handle(&frame(0x03, &body))),
        DecodeError::LimitExceeded { .. }
    ));
    // Outputs declaring 2^24 + 1 values.
    let body = [
        vec![80u8],
        (1u32 << 24 | 1).to_be_bytes().to_vec(),
        vec![0, 0, 0, 0, 0],
    ]
    .concat();
    assert!(matches!(
        decode_err(client.handle(&frame(0x05, &body))),
        DecodeError::LimitExceeded { .. }
    ));
    // After all this the run still completes.
    let mut resp = server.handle(&hello).unwrap();
    let out = loop {
        match client.handle(&resp).unwrap() {
            ClientStep::Send(req) => resp = server.handle(&req).unwrap(),
            ClientStep::Done(o) => break o,
        }
    };
    assert_eq!(out.matches.len(), 100);
}
