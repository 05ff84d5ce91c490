//! OT-PSI end to end: correctness against a plain set intersection, the seeded transcript
//! vector, malformed and out-of-phase messages, and forced Cuckoo failures.

use proptest::prelude::*;
use psi_core::ot::{self, ClientStep, OtClient, OtConfig, OtServer};
use psi_core::{DecodeError, Error, ItemSet, Threads};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;

mod common;

use common::chunked::{check, run};
use common::{decode_err, expected, items};

/// A whole message of this protocol: the 9-byte header, then `body`.
fn frame(message_type: u8, body: &[u8]) -> Vec<u8> {
    common::frame(0x02, message_type, body)
}

#[test]
fn edge_cases() {
    let config = OtConfig::new(Threads::ONE);
    for (seed, (c, s)) in (1..).zip(common::edge_cases()) {
        check(&c, &s, &config, seed);
    }
}

#[test]
fn unbalanced_both_ways_and_many_chunks() {
    let config = OtConfig::new(Threads::new(2)).with_chunk_rows(256);
    check(&items("u", 0..10), &items("u", 5..16_000), &config, 8);
    check(
        &items("u", 0..16_000),
        &items("u", 15_990..16_010),
        &config,
        9,
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, failure_persistence: None, ..ProptestConfig::default() })]

    /// Against a plain intersection: sizes 0..2^14, any overlap, duplicates, empty string.
    #[test]
    fn matches_plain_intersection(
        n_c in prop_oneof![0usize..64, 64usize..2048, 2048usize..=16384],
        n_s in prop_oneof![0usize..64, 64usize..2048, 2048usize..=16384],
        overlap_pct in 0usize..=100,
        dups in 0usize..5,
        with_empty in any::<bool>(),
        threads in 1usize..=2,
        chunk_log in 7u32..=18,
        seed in any::<u64>(),
    ) {
        let common = n_c.min(n_s) * overlap_pct / 100;
        let mut c = items("", 0..n_c);
        let mut s = items("", n_c - common..n_c - common + n_s);
        for d in 0..dups.min(c.len()) {
            let again = c[d * 7 % c.len()].clone();
            c.push(again);
        }
        if with_empty {
            c.push(Vec::new());
            s.insert(0, Vec::new());
        }
        let config = OtConfig::new(Threads::new(threads)).with_chunk_rows(1 << chunk_log);
        check(&c, &s, &config, seed);
    }
}

// ---- the transcript vector --------------------------------------------------------------

const CLIENT_SEED: u64 = 0x0071_c11e;
const SERVER_SEED: u64 = 0x0071_5e7e;
const VECTOR_CHUNK_ROWS: usize = 128;

fn transcript_json(threads: Threads) -> serde_json::Value {
    let (client, server) = common::vector_sets();
    let (c, s) = common::vector_items();
    let config = OtConfig::new(threads).with_chunk_rows(VECTOR_CHUNK_ROWS);
    let (out, transcript) = run(&c, &s, &config, (CLIENT_SEED, SERVER_SEED));
    let messages = common::vector_messages(&transcript);
    serde_json::json!({
        "description": "OT-PSI (protocol id 0x02, suite 0x01) transcript with fixed RNG seeds; see docs/protocol/ot-psi.md",
        "produced_by": "rust-core/psi-core/tests/ot_psi.rs, test transcript_vector; regenerate with OT_PSI_WRITE_VECTORS=1 cargo test -p psi-core --test ot_psi transcript_vector",
        "rng": "rand_chacha 0.10 ChaCha20Rng::seed_from_u64(seed), one per party; the draw order is this implementation's (hello: client nonce 32 B, delta 16 B, dummy-codeword key 16 B, then per base OT 64 B scalar + 64 B point; server: nonce 32 B, MR19 scalar 64 B, s 64 B, three shuffle keys 16 B each)",
        "client_seed": CLIENT_SEED,
        "server_seed": SERVER_SEED,
        "chunk_rows": VECTOR_CHUNK_ROWS,
        "client_items": client,
        "server_items": server,
        "messages": messages,
        "match_indices": out.matches.iter().map(|m| m.index).collect::<Vec<_>>(),
    })
}

/// Regenerates the transcript (with one and two threads: they must agree) and compares
/// it with the checked-in vector.
#[test]
fn transcript_vector() {
    let one = transcript_json(Threads::ONE);
    let two = transcript_json(Threads::new(2));
    common::check_vector("ot-psi-transcript.json", "OT_PSI_WRITE_VECTORS", &one, &two);
}

/// The second transcript vector (docs/protocol/ot-psi.md section 9): 900 client items in
/// a table of 985 bins (a client may use fewer bins than `m(n)`), seeds where the random
/// walk gives up on four items and the breadth-first search places them (found with the
/// replay of tests/ot_psi_replay.rs, which checks the count).
const SEARCH_SEEDS: (u64, u64) = (11, 1011);
const SEARCH_BINS: usize = 985;
const SEARCH_CHUNK_ROWS: usize = 256;
const SEARCH_PLACEMENTS: u64 = 4;

fn search_transcript_json(threads: Threads) -> serde_json::Value {
    let client: Vec<String> = (0..900).map(|i| format!("c{i}")).collect();
    let server: Vec<String> = (850..1150).map(|i| format!("c{i}")).collect();
    let bytes = |v: &[String]| v.iter().map(|x| x.clone().into_bytes()).collect::<Vec<_>>();
    let config = OtConfig::new(threads)
        .with_chunk_rows(SEARCH_CHUNK_ROWS)
        .with_table_size_for_tests(SEARCH_BINS);
    let (out, transcript) = run(&bytes(&client), &bytes(&server), &config, SEARCH_SEEDS);
    serde_json::json!({
        "description": "OT-PSI (protocol id 0x02, suite 0x01) transcript whose Cuckoo placement reaches the breadth-first search (docs/protocol/ot-psi.md section 9.4): 900 client items in a table of `bins` bins instead of m(900), fixed RNG seeds",
        "produced_by": "rust-core/psi-core/tests/ot_psi.rs, test search_transcript_vector; regenerate with OT_PSI_WRITE_VECTORS=1 cargo test -p psi-core --test ot_psi search_transcript_vector",
        "rng": "as in ot-psi-transcript.json",
        "client_seed": SEARCH_SEEDS.0,
        "server_seed": SEARCH_SEEDS.1,
        "bins": SEARCH_BINS,
        "searched_items": SEARCH_PLACEMENTS,
        "chunk_rows": SEARCH_CHUNK_ROWS,
        "client_items": client,
        "server_items": server,
        "messages": common::vector_messages(&transcript),
        "match_indices": out.matches.iter().map(|m| m.index).collect::<Vec<_>>(),
    })
}

/// Regenerates the search transcript (one and two threads) and compares it with the
/// checked-in vector.
#[test]
fn search_transcript_vector() {
    let one = search_transcript_json(Threads::ONE);
    let two = search_transcript_json(Threads::new(2));
    let items = |v: &serde_json::Value| -> Vec<Vec<u8>> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().as_bytes().to_vec())
            .collect()
    };
    common::check_vector_of(
        "ot-psi-transcript-search.json",
        "OT_PSI_WRITE_VECTORS",
        &one,
        &two,
        &(items(&one["client_items"]), items(&one["server_items"])),
    );
}

/// The analytic sizes of the spec match the real messages.
#[test]
fn message_sizes_match_the_spec() {
    let (c, s) = (items("m", 0..5000), items("m", 4000..7000));
    let chunk_rows = 1024u64;
    let config = OtConfig::new(Threads::ONE).with_chunk_rows(chunk_rows as usize);
    let (_, t) = run(&c, &s, &config, (1, 2));
    let bins = ot::table_size(5000) as u64;
    let l = ot::output_len(5000, 3000) as u64;
    let client_bytes: u64 = t.iter().step_by(2).map(|m| m.len() as u64).sum();
    let server_bytes: u64 = t.iter().skip(1).step_by(2).map(|m| m.len() as u64).sum();
    assert_eq!(
        client_bytes,
        ot::sizes::hello() + ot::sizes::matrix(bins, chunk_rows)
    );
    assert_eq!(
        server_bytes,
        ot::sizes::setup() + ot::sizes::acks(bins, chunk_rows) + ot::sizes::outputs(3000, l)
    );
}

// ---- malformed and out-of-phase messages ------------------------------------------------

#[test]
fn malformed_and_wrong_phase_messages_are_typed_errors() {
    let config = OtConfig::new(Threads::ONE).with_chunk_rows(128);
    let c = items("w", 0..200);
    let s = items("w", 100..300);
    let mut crng = ChaCha20Rng::seed_from_u64(5);
    let mut srng = ChaCha20Rng::seed_from_u64(6);
    let (mut client, hello) = OtClient::start(ItemSet::new(&c), config.clone(), &mut crng).unwrap();
    let mut server = OtServer::new(ItemSet::new(&s), config, &mut srng).unwrap();

    // Server, before the hello.
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
    let mut long = hello.clone();
    long.push(0);
    assert_eq!(
        decode_err(server.handle(&long)),
        DecodeError::TrailingBytes { extra: 1 }
    );
    let mut bad = hello.clone();
    bad[2] = 2;
    assert_eq!(
        decode_err(server.handle(&bad)),
        DecodeError::UnsupportedVersion(2)
    );
    let mut bad = hello.clone();
    bad[3] = 0x01;
    assert!(matches!(
        decode_err(server.handle(&bad)),
        DecodeError::WrongProtocol { .. }
    ));
    let mut bad = hello.clone();
    bad[4] = 0x09;
    assert_eq!(
        decode_err(server.handle(&bad)),
        DecodeError::UnknownMessageType(9)
    );
    let mut bad = hello.clone();
    bad[5..9].copy_from_slice(&u32::MAX.to_be_bytes());
    assert!(matches!(
        decode_err(server.handle(&bad)),
        DecodeError::LimitExceeded { .. }
    ));
    let mut bad = hello.clone();
    bad[9] = 0x03; // suite (0x01 plain, 0x02 with label lanes)
    assert_eq!(
        decode_err(server.handle(&bad)),
        DecodeError::InvalidParameter { what: "suite" }
    );
    let mut bad = hello.clone();
    bad[9 + 1 + 32 + 4..9 + 1 + 32 + 8].copy_from_slice(&u32::MAX.to_be_bytes()); // bins
    assert!(matches!(
        decode_err(server.handle(&bad)),
        DecodeError::LimitExceeded { .. }
    ));
    let mut bad = hello.clone();
    bad[9 + 43..9 + 43 + 32].copy_from_slice(&[0xff; 32]); // a non-canonical point
    assert!(matches!(
        decode_err(server.handle(&bad)),
        DecodeError::InvalidElement { .. }
    ));
    let chunk = frame(
        0x03,
        &[&0u32.to_be_bytes()[..], &1u32.to_be_bytes(), &[0; 64]].concat(),
    );
    assert!(matches!(
        server.handle(&chunk),
        Err(Error::WrongPhase { message: 0x03, .. })
    ));
    for t in [0x02, 0x04, 0x05] {
        let msg = match t {
            0x04 => frame(t, &[0, 0, 0, 1]),
            0x05 => frame(t, &[5, 0, 0, 0, 0]),
            _ => frame(
                t,
                &[&[1u8][..], &[0; 36], &[5], &[0; 32], &[0; 8192]].concat(),
            ),
        };
        assert!(
            matches!(server.handle(&msg), Err(Error::WrongPhase { .. })),
            "type {t}"
        );
    }

    // Client, before the setup.
    let ack = frame(0x04, &[0, 0, 0, 128]);
    assert!(matches!(
        client.handle(&ack),
        Err(Error::WrongPhase { message: 0x04, .. })
    ));
    assert!(matches!(
        client.handle(&hello),
        Err(Error::WrongPhase { message: 0x01, .. })
    ));

    // The real hello still works after all that; a second hello does not.
    let setup = server.handle(&hello).unwrap();
    assert!(matches!(
        server.handle(&hello),
        Err(Error::WrongPhase { message: 0x01, .. })
    ));
    for cut in [0, 9, 100, setup.len() - 1] {
        assert!(client.handle(&setup[..cut]).is_err());
    }
    let mut bad = setup.clone();
    bad[9 + 1 + 32 + 4] ^= 1; // output length
    assert!(matches!(
        decode_err(client.handle(&bad)),
        DecodeError::InvalidParameter {
            what: "output length"
        }
    ));
    let mut bad = setup.clone();
    bad[9 + 38..9 + 70].copy_from_slice(&[0; 32]); // the identity as the MR19 sender point
    assert!(matches!(
        decode_err(client.handle(&bad)),
        DecodeError::InvalidElement { .. }
    ));

    // Chunks: wrong offset, bad sizes.
    let ClientStep::Send(first) = client.handle(&setup).unwrap() else {
        panic!("chunk expected")
    };
    let mut bad = first.clone();
    bad[9..13].copy_from_slice(&128u32.to_be_bytes());
    assert!(matches!(
        decode_err(server.handle(&bad)),
        DecodeError::InvalidParameter { what: "row offset" }
    ));
    let mut bad = first.clone();
    bad[13..17].copy_from_slice(&u32::MAX.to_be_bytes());
    assert!(matches!(
        decode_err(server.handle(&bad)),
        DecodeError::LimitExceeded { .. }
    ));
    assert!(matches!(
        decode_err(server.handle(&first[..first.len() - 64])),
        DecodeError::Truncated { .. }
    ));
    let short = frame(0x03, &first[9..first.len() - 64]);
    assert!(matches!(
        decode_err(server.handle(&short)),
        DecodeError::LengthMismatch { .. }
    ));
    let odd = frame(
        0x03,
        &[&0u32.to_be_bytes()[..], &3u32.to_be_bytes(), &[0; 3 * 64]].concat(),
    );
    assert!(matches!(
        decode_err(server.handle(&odd)),
        DecodeError::InvalidParameter { what: "chunk rows" }
    ));

    // Drive the rest, with a wrong ack and forged outputs on the way.
    let mut request = first;
    let output = loop {
        let response = server.handle(&request).unwrap();
        if response[4] == 0x04 {
            let wrong = frame(0x04, &[0, 0, 0, 1]);
            assert!(matches!(
                decode_err(client.handle(&wrong)),
                DecodeError::InvalidParameter { what: "next row" }
            ));
        } else {
            let l = response[9];
            let mut forged = frame(0x05, &[&[l][..], &0u32.to_be_bytes()].concat());
            assert!(matches!(
                client.handle(&forged),
                Err(Error::CountMismatch { .. })
            ));
            forged = response.clone();
            forged[9] = l + 1;
            assert!(client.handle(&forged).is_err());
        }
        match client.handle(&response).unwrap() {
            ClientStep::Send(next) => request = next,
            ClientStep::Done(out) => break out,
        }
    };
    let got: Vec<usize> = output.matches.iter().map(|m| m.index).collect();
    assert_eq!(got, expected(&c, &s));
    // Both sides are done: anything more is out of phase.
    assert!(matches!(
        server.handle(&request),
        Err(Error::WrongPhase { .. })
    ));
    assert!(matches!(
        client.handle(&setup),
        Err(Error::WrongPhase { .. })
    ));
}

// ---- Cuckoo failures are errors, never wrong results -------------------------------------

#[test]
fn forced_cuckoo_failure_is_an_error() {
    let c = items("f", 0..2000);
    let s = items("f", 0..10);
    let mut crng = ChaCha20Rng::seed_from_u64(7);
    let mut srng = ChaCha20Rng::seed_from_u64(8);
    // A table with as many bins as items: three-way Cuckoo hashing cannot fill it.
    let config = OtConfig::new(Threads::ONE).with_table_size_for_tests(2000);
    let (mut client, hello) = OtClient::start(ItemSet::new(&c), config.clone(), &mut crng).unwrap();
    let mut server = OtServer::new(ItemSet::new(&s), config, &mut srng).unwrap();
    let setup = server.handle(&hello).unwrap();
    assert!(matches!(
        client.handle(&setup),
        Err(Error::CuckooFailed {
            items: 2000,
            bins: 2000
        })
    ));
    // The client is finished for good.
    assert!(matches!(
        client.handle(&setup),
        Err(Error::WrongPhase { .. })
    ));
    // Fewer bins than items is refused at once.
    let config = OtConfig::new(Threads::ONE).with_table_size_for_tests(1999);
    assert!(matches!(
        OtClient::start(ItemSet::new(&c), config, &mut crng),
        Err(Error::CuckooFailed { .. })
    ));
}

#[test]
fn in_memory_driver_reports_traffic() {
    let config = OtConfig::new(Threads::ONE).with_chunk_rows(512);
    let mut rng = ChaCha20Rng::seed_from_u64(9);
    let mut steps = Vec::new();
    let (out, stats) = ot::run_in_memory(
        ItemSet::new(items("d", 0..3000)),
        ItemSet::new(items("d", 2000..2500)),
        &config,
        &mut rng,
        |s| steps.push(s),
    )
    .unwrap();
    assert_eq!(out.matches.len(), 500);
    let bins = ot::table_size(3000) as u64;
    assert_eq!(stats.bins as u64, bins);
    assert_eq!(stats.round_trips as u64, 1 + bins.div_ceil(512));
    assert_eq!(
        stats.client_to_server_bytes,
        ot::sizes::hello() + ot::sizes::matrix(bins, 512)
    );
    use psi_core::Phase::*;
    let chunks = bins.div_ceil(512) as usize;
    let mut expected = vec![ClientStart, ServerHello, ClientSetup];
    for _ in 1..chunks {
        expected.extend([ServerChunk, ClientChunk]);
    }
    expected.extend([ServerOutputs, ClientFinish]);
    assert_eq!(steps, expected);
}

// ---- mutated messages -------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Mutation {
    Flip { at: usize, xor: u8 },
    Truncate { to: usize },
    Append { bytes: Vec<u8> },
    SetLength { len: u32 },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(at, xor)| Mutation::Flip { at, xor }),
        any::<usize>().prop_map(|to| Mutation::Truncate { to }),
        proptest::collection::vec(any::<u8>(), 1..70).prop_map(|bytes| Mutation::Append { bytes }),
        any::<u32>().prop_map(|len| Mutation::SetLength { len }),
    ]
}

fn apply(m: &Mutation, msg: &[u8]) -> Vec<u8> {
    let mut out = msg.to_vec();
    match m {
        // Mostly hit the header and the first fields, where the parsing decisions are.
        Mutation::Flip { at, xor } => {
            let at = if at % 2 == 0 {
                at % 80.min(out.len())
            } else {
                at % out.len()
            };
            out[at] ^= xor;
        }
        Mutation::Truncate { to } => out.truncate(to % out.len()),
        Mutation::Append { bytes } => out.extend_from_slice(bytes),
        Mutation::SetLength { len } => out[5..9].copy_from_slice(&len.to_be_bytes()),
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    /// A mutated message never panics either state machine. When it is rejected, the
    /// receiver's state is unchanged: the original message still completes the run
    /// correctly. When it is accepted, the run still ends without a panic.
    #[test]
    fn mutated_messages_never_panic(k in 0usize..6, m in mutation()) {
        let c = items("z", 0..60);
        let s = items("z", 30..90);
        let config = OtConfig::new(Threads::ONE).with_chunk_rows(128);
        let mut crng = ChaCha20Rng::seed_from_u64(21);
        let mut srng = ChaCha20Rng::seed_from_u64(22);
        let (mut client, mut request) =
            OtClient::start(ItemSet::new(&c), config.clone(), &mut crng).unwrap();
        let mut server = OtServer::new(ItemSet::new(&s), config, &mut srng).unwrap();
        let mut index = 0;
        let mut mutated_accepted = false;
        'run: loop {
            // Client → server (even message index).
            let response = if index == k {
                match server.handle(&apply(&m, &request)) {
                    Ok(r) => { mutated_accepted = true; r }
                    Err(_) => server.handle(&request).unwrap(),
                }
            } else {
                match server.handle(&request) {
                    Ok(r) => r,
                    Err(e) => { prop_assert!(mutated_accepted, "{e}"); break 'run; }
                }
            };
            index += 1;
            // Server → client (odd message index).
            let step = if index == k {
                match client.handle(&apply(&m, &response)) {
                    Ok(step) => { mutated_accepted = true; Ok(step) }
                    Err(_) => client.handle(&response),
                }
            } else {
                client.handle(&response)
            };
            index += 1;
            match step {
                Ok(ClientStep::Send(next)) => request = next,
                Ok(ClientStep::Done(out)) => {
                    if !mutated_accepted {
                        let got: Vec<usize> = out.matches.iter().map(|m| m.index).collect();
                        prop_assert_eq!(got, expected(&c, &s));
                    }
                    break 'run;
                }
                Err(e) => { prop_assert!(mutated_accepted, "{e}"); break 'run; }
            }
        }
    }
}
