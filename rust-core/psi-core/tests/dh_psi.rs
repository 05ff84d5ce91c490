//! DH-PSI end to end through the real message encoding, against a plain intersection.

use proptest::prelude::*;
use psi_core::dh::{self, DhClient, DhServer, EncodedSet, ServerKey, message_type};
use psi_core::{DecodeError, Error, ItemSet, Threads};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;

mod common;

use common::{expected, items};

fn server(seed: u64, max_client: usize, threads: usize) -> DhServer {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    DhServer::new(
        ServerKey::random(1, &mut rng),
        max_client,
        Threads::new(threads),
    )
}

/// Runs the protocol and returns the matched original indices.
fn run(client: &[Vec<u8>], server_items: &[Vec<u8>], threads: usize, seed: u64) -> Vec<usize> {
    let srv = server(seed, client.len().max(1), threads);
    let set = srv.encode_set(&ItemSet::new(server_items)).unwrap();
    let set_bytes = set.to_bytes();
    let mut rng = ChaCha20Rng::seed_from_u64(seed ^ 0xc11e);
    let (mut c, query) = DhClient::start(
        ItemSet::new(client),
        srv.epoch(),
        Threads::new(threads),
        &mut rng,
    )
    .unwrap();
    let evaluation = srv.handle_query(&query).unwrap();
    // The encoded set may arrive before or after the evaluation.
    if seed.is_multiple_of(2) {
        c.handle(&set_bytes).unwrap();
        c.handle(&evaluation).unwrap();
    } else {
        c.handle(&evaluation).unwrap();
        c.handle(&set_bytes).unwrap();
    }
    assert!(c.is_ready());
    let out = c.finish().unwrap();
    assert_eq!(out.server_items as usize, ItemSet::new(server_items).len());
    out.matches
        .iter()
        .map(|m| {
            assert_eq!(m.item, client[m.index]);
            m.index
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, ..ProptestConfig::default() })]

    #[test]
    fn matches_plain_intersection(
        n_c in 0usize..4096,
        n_s in 0usize..4096,
        overlap_pct in 0usize..=100,
        dups in 0usize..20,
        threads in 1usize..=2,
        seed in any::<u64>(),
    ) {
        let overlap = n_c.min(n_s) * overlap_pct / 100;
        let mut client = items("shared-", 0..overlap);
        client.extend(items("client-only-", 0..n_c - overlap));
        let mut server_items = items("shared-", 0..overlap);
        server_items.extend(items("server-only-", 0..n_s - overlap));
        // Duplicates on both sides.
        for i in 0..dups.min(client.len()) {
            client.push(client[i * 7 % client.len()].clone());
        }
        for i in 0..dups.min(server_items.len()) {
            server_items.push(server_items[i * 3 % server_items.len()].clone());
        }
        let got = run(&client, &server_items, threads, seed);
        prop_assert_eq!(got.len(), overlap);
        prop_assert_eq!(got, expected(&client, &server_items));
    }
}

#[test]
fn edge_cases() {
    let some = items("x", 0..50);
    assert_eq!(run(&[], &[], 1, 1), Vec::<usize>::new());
    assert_eq!(run(&some, &[], 1, 2), Vec::<usize>::new());
    assert_eq!(run(&[], &some, 1, 3), Vec::<usize>::new());
    // Unbalanced both ways.
    let big = items("x", 0..3000);
    assert_eq!(run(&some[..1], &big, 2, 4), vec![0]);
    assert_eq!(run(&big, &some[..1], 2, 5), vec![0]);
    // Empty string, long, non-ASCII and binary items; duplicates in the client list.
    let client: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        "Zoë Ünïcødé +33 6 12 34 56 78 \u{1F600}"
            .as_bytes()
            .to_vec(),
        vec![0xff; 65535],
        vec![0, 1, 2, 0],
        b"".to_vec(),
        b"not there".to_vec(),
        "Zoë Ünïcødé +33 6 12 34 56 78 \u{1F600}"
            .as_bytes()
            .to_vec(),
    ];
    let server_items: Vec<Vec<u8>> = vec![
        vec![0xff; 65535],
        b"".to_vec(),
        "Zoë Ünïcødé +33 6 12 34 56 78 \u{1F600}"
            .as_bytes()
            .to_vec(),
        vec![0, 1, 2, 0],
        vec![0xff; 65534],
    ];
    assert_eq!(run(&client, &server_items, 1, 6), vec![0, 1, 2, 3]);
    assert_eq!(run(&client, &server_items, 2, 7), vec![0, 1, 2, 3]);
}

#[test]
fn items_too_long_are_rejected() {
    let mut rng = ChaCha20Rng::seed_from_u64(9);
    let err =
        DhClient::start(ItemSet::new([vec![0u8; 65536]]), 1, Threads::ONE, &mut rng).unwrap_err();
    assert!(matches!(err, Error::InputTooLarge { .. }));
    let srv = server(1, 10, 1);
    assert!(matches!(
        srv.encode_set(&ItemSet::new([vec![0u8; 65536]])),
        Err(Error::InputTooLarge { .. })
    ));
}

#[test]
fn cached_set_is_reused_and_epochs_are_checked() {
    let mut rng = ChaCha20Rng::seed_from_u64(10);
    let key = ServerKey::random(7, &mut rng);
    let srv = DhServer::new(key.clone(), 100, Threads::ONE);
    let registry = items("r", 0..500);
    let cached =
        EncodedSet::from_bytes(&srv.encode_set(&ItemSet::new(&registry)).unwrap().to_bytes())
            .unwrap();
    assert_eq!(cached.epoch, 7);
    // Two clients reuse the same encoded set.
    for (k, probe) in [items("r", 10..20), items("r", 495..505)]
        .into_iter()
        .enumerate()
    {
        let (mut c, q) = DhClient::start(ItemSet::new(&probe), 7, Threads::ONE, &mut rng).unwrap();
        c.handle(&srv.handle_query(&q).unwrap()).unwrap();
        c.use_encoded_set(cached.clone()).unwrap();
        let n = c.finish().unwrap().matches.len();
        assert_eq!(n, if k == 0 { 10 } else { 5 });
    }
    // Rotation: new epoch, old cache and old-epoch queries are refused with typed errors.
    let rotated = DhServer::new(key.rotate(&mut rng), 100, Threads::ONE);
    assert_eq!(rotated.epoch(), 8);
    let (_, q_old) = DhClient::start(ItemSet::new(["a"]), 7, Threads::ONE, &mut rng).unwrap();
    assert_eq!(
        rotated.handle_query(&q_old).unwrap_err(),
        Error::EpochMismatch {
            expected: 8,
            found: 7
        }
    );
    let (mut c, _) = DhClient::start(ItemSet::new(["a"]), 8, Threads::ONE, &mut rng).unwrap();
    assert_eq!(
        c.use_encoded_set(cached).unwrap_err(),
        Error::EpochMismatch {
            expected: 8,
            found: 7
        }
    );
    // Outputs under the new key differ: nothing matches across epochs.
    let new_set = rotated.encode_set(&ItemSet::new(&registry)).unwrap();
    assert_ne!(
        new_set.data,
        srv.encode_set(&ItemSet::new(&registry)).unwrap().data
    );
}

#[test]
fn thread_count_does_not_change_bytes() {
    let registry = items("r", 0..1000);
    let a = server(11, 64, 1)
        .encode_set(&ItemSet::new(&registry))
        .unwrap();
    let b = server(11, 64, 2)
        .encode_set(&ItemSet::new(&registry))
        .unwrap();
    assert_eq!(a.to_bytes(), b.to_bytes());
    let probe = ItemSet::new(items("r", 0..64));
    let (_, q1) = DhClient::start(
        probe.clone(),
        1,
        Threads::ONE,
        &mut ChaCha20Rng::seed_from_u64(1),
    )
    .unwrap();
    let (_, q2) = DhClient::start(
        probe,
        1,
        Threads::new(2),
        &mut ChaCha20Rng::seed_from_u64(1),
    )
    .unwrap();
    assert_eq!(q1, q2);
}

#[test]
fn truncation_and_sizes() {
    assert_eq!(dh::truncation_bits(1, 1), 40);
    assert_eq!(dh::truncation_bits(1000, 1_000_000), 40 + 10 + 20);
    assert_eq!(dh::truncation_bits(1 << 16, 1 << 16), 72);
    let srv = server(12, 1 << 10, 1);
    let set = srv
        .encode_set(&ItemSet::new(items("r", 0..1 << 14)))
        .unwrap();
    assert_eq!(set.truncation_bits, 40 + 10 + 14);
    let predicted = dh::sizes::encoded_set(1 << 14, set.truncation_bits) as f64;
    let actual = set.to_bytes().len() as f64;
    assert!(
        (actual / predicted - 1.0).abs() < 0.01,
        "actual {actual} predicted {predicted}"
    );
    let per = (actual * 8.0) / f64::from(set.element_count);
    assert!(
        per < f64::from(set.truncation_bits) - 14.0 + 2.0,
        "{per} bits per element"
    );
    // A client larger than the set was sized for refuses it (2^-40 would not hold).
    let mut rng = ChaCha20Rng::seed_from_u64(13);
    let (mut c, _) =
        DhClient::start(ItemSet::new(items("c", 0..2000)), 1, Threads::ONE, &mut rng).unwrap();
    assert!(matches!(
        c.use_encoded_set(set),
        Err(Error::TruncationTooShort { needed: 65, .. })
    ));
}

/// A valid client/server pair and their messages, for the malformed-input tests.
struct Fixture {
    srv: DhServer,
    client: DhClient,
    query: Vec<u8>,
    evaluation: Vec<u8>,
    set: Vec<u8>,
}

fn fixture() -> Fixture {
    let srv = server(20, 16, 1);
    let set = srv
        .encode_set(&ItemSet::new(items("r", 0..100)))
        .unwrap()
        .to_bytes();
    let mut rng = ChaCha20Rng::seed_from_u64(21);
    let (client, query) =
        DhClient::start(ItemSet::new(items("r", 95..105)), 1, Threads::ONE, &mut rng).unwrap();
    let evaluation = srv.handle_query(&query).unwrap();
    Fixture {
        srv,
        client,
        query,
        evaluation,
        set,
    }
}

fn decode_err(e: Error) -> DecodeError {
    match e {
        Error::Decode(d) => d,
        other => panic!("expected a decode error, got {other:?}"),
    }
}

#[test]
fn server_rejects_bad_queries() {
    let f = fixture();
    let q = &f.query;
    // Every truncation of a valid query is a typed error.
    for len in 0..q.len() {
        let e = decode_err(f.srv.handle_query(&q[..len]).unwrap_err());
        assert!(
            matches!(
                e,
                DecodeError::Truncated { .. } | DecodeError::LengthMismatch { .. }
            ),
            "{len}: {e:?}"
        );
    }
    let mut long = q.clone();
    long.push(0);
    assert!(matches!(
        decode_err(f.srv.handle_query(&long).unwrap_err()),
        DecodeError::TrailingBytes { extra: 1 }
    ));
    let mut bad = q.clone();
    bad[2] = 2;
    assert_eq!(
        decode_err(f.srv.handle_query(&bad).unwrap_err()),
        DecodeError::UnsupportedVersion(2)
    );
    let mut bad = q.clone();
    bad[4] = 0x7f;
    assert_eq!(
        decode_err(f.srv.handle_query(&bad).unwrap_err()),
        DecodeError::UnknownMessageType(0x7f)
    );
    // Wrong phase: the server only takes queries.
    assert!(matches!(
        f.srv.handle_query(&f.evaluation),
        Err(Error::WrongPhase {
            message: message_type::EVALUATION,
            ..
        })
    ));
    assert!(matches!(
        f.srv.handle_query(&f.set),
        Err(Error::WrongPhase {
            message: message_type::ENCODED_SET,
            ..
        })
    ));
    // Oversized count (declared beyond the hard limit).
    let mut bad = q.clone();
    bad[13..17].copy_from_slice(&u32::MAX.to_be_bytes());
    assert!(matches!(
        decode_err(f.srv.handle_query(&bad).unwrap_err()),
        DecodeError::LimitExceeded { .. }
    ));
    // Count disagreeing with the body length.
    let mut bad = q.clone();
    bad[13..17].copy_from_slice(&9u32.to_be_bytes());
    assert!(matches!(
        decode_err(f.srv.handle_query(&bad).unwrap_err()),
        DecodeError::LengthMismatch { .. }
    ));
    // An invalid element (non-canonical) and the identity (all zero).
    let mut bad = q.clone();
    bad[17 + 32 * 3..17 + 32 * 4].fill(0xff);
    assert_eq!(
        decode_err(f.srv.handle_query(&bad).unwrap_err()),
        DecodeError::InvalidElement { index: 3 }
    );
    let mut bad = q.clone();
    bad[17..17 + 32].fill(0);
    assert_eq!(
        decode_err(f.srv.handle_query(&bad).unwrap_err()),
        DecodeError::InvalidElement { index: 0 }
    );
    // More items than this server accepts per query (16).
    let mut rng = ChaCha20Rng::seed_from_u64(22);
    let (_, big) =
        DhClient::start(ItemSet::new(items("c", 0..17)), 1, Threads::ONE, &mut rng).unwrap();
    assert!(matches!(
        f.srv.handle_query(&big),
        Err(Error::InputTooLarge {
            value: 17,
            limit: 16,
            ..
        })
    ));
    // The server still serves after all that.
    assert_eq!(f.srv.handle_query(q).unwrap().len(), f.evaluation.len());
}

#[test]
fn client_rejects_bad_messages() {
    let f = fixture();
    let mut c = f.client;
    // Not ready yet.
    // Wrong phase: a query sent to a client.
    assert!(matches!(
        c.handle(&f.query),
        Err(Error::WrongPhase {
            message: message_type::QUERY,
            ..
        })
    ));
    // Evaluation with a wrong count.
    let mut rng = ChaCha20Rng::seed_from_u64(23);
    let (_, q3) =
        DhClient::start(ItemSet::new(items("z", 0..3)), 1, Threads::ONE, &mut rng).unwrap();
    let e3 = f.srv.handle_query(&q3).unwrap();
    assert_eq!(
        c.handle(&e3).unwrap_err(),
        Error::CountMismatch {
            expected: 10,
            found: 3
        }
    );
    // Invalid element in the evaluation.
    let mut bad = f.evaluation.clone();
    bad[17 + 32..17 + 64].fill(0xee);
    assert_eq!(
        decode_err(c.handle(&bad).unwrap_err()),
        DecodeError::InvalidElement { index: 1 }
    );
    // Truncated evaluation and set.
    for len in [0, 5, 9, 16, f.evaluation.len() - 1] {
        assert!(matches!(
            c.handle(&f.evaluation[..len]),
            Err(Error::Decode(_))
        ));
    }
    for len in [0, 9, 20, 26] {
        assert!(matches!(c.handle(&f.set[..len]), Err(Error::Decode(_))));
    }
    // Bad encoded-set parameters.
    let mut bad = f.set.clone();
    bad[21] = 0; // L = 0
    assert!(matches!(
        decode_err(c.handle(&bad).unwrap_err()),
        DecodeError::InvalidParameter { .. }
    ));
    let mut bad = f.set.clone();
    bad[22] = 200; // k > L
    assert!(matches!(
        decode_err(c.handle(&bad).unwrap_err()),
        DecodeError::InvalidParameter { .. }
    ));
    let mut bad = f.set.clone();
    bad[13..17].copy_from_slice(&u32::MAX.to_be_bytes()); // n_s over the limit
    assert!(matches!(
        decode_err(c.handle(&bad).unwrap_err()),
        DecodeError::LimitExceeded { .. }
    ));
    // Good evaluation, then the same again: wrong phase.
    c.handle(&f.evaluation).unwrap();
    assert!(matches!(
        c.handle(&f.evaluation),
        Err(Error::WrongPhase {
            message: message_type::EVALUATION,
            ..
        })
    ));
    // Finishing without the set.
    let c2 = {
        let g = fixture();
        let mut c = g.client;
        c.handle(&g.evaluation).unwrap();
        c
    };
    assert_eq!(
        c2.finish().unwrap_err(),
        Error::Incomplete("the server's encoded set")
    );
    // A set whose coded data is corrupt: matching reports it, no wrong answer.
    let mut bad = f.set.clone();
    let n = bad.len();
    bad[n - 1] ^= 0x01; // padding bit or last value changes
    bad[40] = 0xff;
    bad[41] = 0xff;
    c.handle(&bad).unwrap();
    match c.finish() {
        Err(Error::Decode(DecodeError::MalformedSet(_))) => {}
        Ok(out) => assert!(out.matches.len() <= 5),
        Err(e) => panic!("unexpected {e:?}"),
    }
    // Finishing before the evaluation.
    let g = fixture();
    assert_eq!(
        g.client.finish().unwrap_err(),
        Error::Incomplete("the server's evaluation")
    );
}

#[test]
fn errors_never_contain_items() {
    let f = fixture();
    let mut bad = f.query.clone();
    bad[20] ^= 0xff;
    let text = format!("{} {:?}", f.srv.handle_query(&bad).unwrap_err(), f.client);
    assert!(!text.contains("r95") && !text.contains("r100"), "{text}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Fuzz-style: random mutations of valid messages (and pure garbage) fed to every
    /// decoder and state machine give typed errors or valid results, never a panic.
    #[test]
    fn mutated_messages_never_panic(
        which in 0usize..3,
        flips in prop::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        cut in any::<usize>(),
        garbage in prop::collection::vec(any::<u8>(), 0..64),
        use_garbage in any::<bool>(),
    ) {
        let f = fixture();
        let mut msg = if use_garbage {
            let mut g = vec![b'P', b'S', 1, 1];
            g.extend_from_slice(&garbage);
            g
        } else {
            [&f.query, &f.evaluation, &f.set][which].clone()
        };
        for (pos, x) in flips {
            let n = msg.len();
            msg[pos % n] ^= x;
        }
        if cut % 4 == 0 {
            msg.truncate(cut % (msg.len() + 1));
        }
        let _ = f.srv.handle_query(&msg);
        let _ = EncodedSet::from_bytes(&msg);
        let mut c = f.client;
        let _ = c.handle(&msg);
        let _ = c.handle(&f.evaluation);
        let _ = c.handle(&msg);
        let _ = c.handle(&f.set);
        let _ = c.finish();
    }
}
