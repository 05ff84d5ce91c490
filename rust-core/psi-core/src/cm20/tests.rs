//! Unit tests of the CM20 state machines (property tests against a plain intersection are
//! in `psi-core/tests/cm20_psi.rs`).

use super::chunks::{chunk_count, chunk_len};
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

fn run(c: ItemSet, s: ItemSet, config: &Cm20Config, seed: u64) -> (MatchOutput, InMemoryTraffic) {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    run_in_memory(c, s, config, &mut rng, |_| {}).unwrap()
}

#[test]
fn finds_the_intersection() {
    let (out, stats) = run(
        set(0..300),
        set(200..5000),
        &Cm20Config::new(Threads::ONE),
        1,
    );
    let idx: Vec<usize> = out.matches.iter().map(|m| m.index).collect();
    assert_eq!(idx, (200..300).collect::<Vec<_>>());
    assert_eq!(out.server_items, 4800);
    assert_eq!(stats.round_trips, 2);
}

#[test]
fn many_chunks_give_the_same_result() {
    // 1,000 client items: m = 1024, 128-byte columns; 16 columns (2 KiB) per chunk.
    let config = Cm20Config::new(Threads::new(2)).with_max_request_bytes(2048 + 29);
    let (out, stats) = run(set(0..1000), set(500..1500), &config, 2);
    assert_eq!(out.matches.len(), 500);
    let w = stats.params.unwrap().width as usize;
    assert_eq!(stats.round_trips, 1 + w.div_ceil(16));
    let t = sizes::traffic_with(1000, 1000, &config);
    assert_eq!(t.round_trips as usize, stats.round_trips);
    assert_eq!(t.client_to_server, stats.client_to_server_bytes);
}

/// The chunk rule of spec §4.3: one chunk if the matrix fits; otherwise full chunks, the rest,
/// and the last partial group of 16 columns alone.
#[test]
fn chunk_rule() {
    let split = |w: usize, c: usize| {
        let (mut c0, mut out) = (0, Vec::new());
        while c0 < w {
            let k = chunk_len(c0, w, c);
            out.push(k);
            c0 += k;
        }
        assert_eq!(out.len(), chunk_count(w, c));
        out
    };
    assert_eq!(split(621, 112), [112, 112, 112, 112, 112, 48, 13]);
    assert_eq!(split(621, 2048), [621]);
    assert_eq!(split(621, 608), [608, 13]);
    assert_eq!(split(621, 16), [[16; 38].as_slice(), &[13]].concat());
    assert_eq!(split(640, 112), [112, 112, 112, 112, 112, 64, 16]);
    assert_eq!(split(640, 640), [640]);
    assert_eq!(split(130, 16), [[16; 8].as_slice(), &[2]].concat());
    assert_eq!(split(129, 128), [128, 1]);
    // Every chunk but the last is a multiple of 16 columns, as the server requires.
    for w in 128..700 {
        for c in [16, 32, 48, 112, 512] {
            let s = split(w, c);
            assert_eq!(s.iter().sum::<usize>(), w);
            assert!(
                s[..s.len() - 1].iter().all(|k| k % 16 == 0 && *k <= c),
                "{w} {c}"
            );
        }
    }
}

/// A run whose chunks are not all 16 columns: the requests carry the columns spec §4.3 says,
/// the result and the bytes are right.
#[test]
fn the_last_partial_group_goes_alone() {
    // 1,000 client items: m = 1024, 128-byte columns; 48 columns per chunk.
    let config = Cm20Config::new(Threads::ONE).with_max_request_bytes(48 * 128 + 29);
    let mut rng = ChaCha20Rng::seed_from_u64(22);
    let (client, hello) = Cm20Client::start(set(0..1000), config.clone(), &mut rng).unwrap();
    let mut server = Cm20Server::new(set(900..1900), config.clone(), &mut rng).unwrap();
    let (reqs, matched) =
        crate::chunked::requests_of_run(client, hello, |r| server.handle(r).unwrap(), true);
    assert_eq!(matched, (900..1000).collect::<Vec<_>>());
    let w = params::width(1000, 1000, params::height(1000)).unwrap() as usize;
    let counts: Vec<usize> = reqs[1..]
        .iter()
        .map(|r| u16::from_be_bytes([r[HEADER_LEN + 18], r[HEADER_LEN + 19]]) as usize)
        .collect();
    assert_eq!(counts.iter().sum::<usize>(), w);
    assert!(
        !w.is_multiple_of(16) && w > 48,
        "the case needs a partial group: w = {w}"
    );
    assert_eq!(*counts.last().unwrap(), w % 16);
    assert_eq!(counts[counts.len() - 2], (w - w % 16) % 48);
    assert!(counts[..counts.len() - 2].iter().all(|&k| k == 48));
    let t = sizes::traffic_with(1000, 1000, &config);
    assert_eq!(t.round_trips as usize, reqs.len());
}

/// A session over a prepared set (`Cm20Server::with_set`) answers byte for byte as one over
/// the plain items, in one chunk and in many.
#[test]
fn a_prepared_set_gives_the_same_responses() {
    for max_request in [DEFAULT_MAX_REQUEST_BYTES, 48 * 128 + 29] {
        let config = Cm20Config::new(Threads::ONE).with_max_request_bytes(max_request);
        let transcript = |prepared: bool| {
            let mut rng = ChaCha20Rng::seed_from_u64(23);
            let (client, hello) =
                Cm20Client::start(set(0..1000), config.clone(), &mut rng).unwrap();
            let mut server = if prepared {
                let s = Arc::new(Cm20Set::new(set(900..1900), Threads::ONE).unwrap());
                assert_eq!(s.items().len(), 1000);
                Cm20Server::with_set(s, config.clone(), &mut rng).unwrap()
            } else {
                Cm20Server::new(set(900..1900), config.clone(), &mut rng).unwrap()
            };
            let mut responses = Vec::new();
            let (requests, matched) = crate::chunked::requests_of_run(
                client,
                hello,
                |r| {
                    let resp = server.handle(r).unwrap();
                    responses.push(resp.clone());
                    resp
                },
                false,
            );
            assert_eq!(matched, (900..1000).collect::<Vec<_>>());
            (requests, responses)
        };
        let (plain, prepared) = (transcript(false), transcript(true));
        assert!(plain.0.len() >= 2);
        assert_eq!(plain, prepared, "{max_request}");
    }
}

#[test]
fn larger_height_works() {
    let config = Cm20Config::new(Threads::ONE).with_height(1024);
    let (out, stats) = run(set(0..200), set(100..400), &config, 3);
    assert_eq!(out.matches.len(), 100);
    assert_eq!(stats.params.unwrap().height, 1024);
}

#[test]
fn empty_sets() {
    let config = Cm20Config::new(Threads::ONE);
    assert!(run(set(0..0), set(0..10), &config, 4).0.matches.is_empty());
    assert!(run(set(0..10), set(0..0), &config, 5).0.matches.is_empty());
    assert!(run(set(0..0), set(0..0), &config, 6).0.matches.is_empty());
}

/// The measured bytes equal the analytic function: exactly client to server, and within the
/// spread of the Golomb-Rice payload server to client.
#[test]
fn bytes_match_the_analytic_formula() {
    for (n_c, n_s) in [(1000u32, 20_000u32), (3000, 3000), (100, 50_000)] {
        let (_, stats) = run(
            set(0..n_c),
            set(0..n_s),
            &Cm20Config::new(Threads::new(2)),
            7,
        );
        let t = sizes::traffic(n_c as u64, n_s as u64);
        assert_eq!(
            t.client_to_server, stats.client_to_server_bytes,
            "{n_c} x {n_s}"
        );
        assert_eq!(t.round_trips as usize, stats.round_trips);
        let measured = stats.server_to_client_bytes as f64;
        let rel = (measured - t.server_to_client as f64).abs() / measured;
        assert!(
            rel < 0.003,
            "{n_c} x {n_s}: {measured} vs {}",
            t.server_to_client
        );
    }
}

/// The OPRF relation on the columns the server rebuilds: `C_c = A_c` where `s_c = 0` and
/// `A_c ⊕ D_c` where `s_c = 1`, with the client's items at zeros of `D`.
#[test]
fn server_columns_satisfy_the_relation() {
    let mut rng = ChaCha20Rng::seed_from_u64(8);
    let config = Cm20Config::new(Threads::ONE);
    let (mut client, hello) = Cm20Client::start(set(0..50), config.clone(), &mut rng).unwrap();
    let mut server = Cm20Server::new(set(0..10), config, &mut rng).unwrap();
    let setup = server.handle(&hello).unwrap();
    let ClientStep::Send(chunk) = client.handle(&setup).unwrap() else {
        panic!()
    };
    let p = client.params().unwrap();
    let cb = p.column_bytes();
    let cols = &chunk[HEADER_LEN + messages::CHUNK_FIELDS_LEN..];
    assert_eq!(cols.len(), p.width as usize * cb);
    let (s, seeds) = server.test_choices();
    let mut ones_where_s = 0;
    for c in 0..p.width as usize {
        let sc = rot::choice_bit(&s, c);
        let seeds_c = client.test_seeds(c);
        assert_eq!(seeds[c], seeds_c[sc as usize]);
        let mut a = vec![0u8; cb];
        crate::ote::prc::Prg::new(&seeds_c[0]).fill(0, &mut a);
        let mut b = vec![0u8; cb];
        crate::ote::prc::Prg::new(&seeds_c[1]).fill(0, &mut b);
        // D_c = Δ_c ⊕ A_c ⊕ PRG(seed1): 50 items clear at most 50 of 128 bits.
        let zeros: u32 = (0..cb)
            .map(|i| (!(cols[c * cb + i] ^ a[i] ^ b[i])).count_ones())
            .sum();
        assert!((1..=50).contains(&zeros), "column {c}: {zeros} zeros");
        ones_where_s += sc as usize;
    }
    assert!(ones_where_s > 0 && ones_where_s < p.width as usize);
}

#[test]
fn wrong_phase_and_malformed_messages() {
    let mut rng = ChaCha20Rng::seed_from_u64(9);
    let config = Cm20Config::new(Threads::ONE).with_max_request_bytes(2048 + 29);
    let (mut client, hello) = Cm20Client::start(set(0..1000), config.clone(), &mut rng).unwrap();
    let mut server = Cm20Server::new(set(0..100), config.clone(), &mut rng).unwrap();
    // Every truncation of the hello is an error, and the server still takes the hello.
    for n in [0, 5, 9, 100, hello.len() - 1] {
        assert!(server.handle(&hello[..n]).is_err());
    }
    let mut long = hello.clone();
    long.push(0);
    assert!(matches!(
        server.handle(&long),
        Err(Error::Decode(DecodeError::TrailingBytes { .. }))
    ));
    // A message of another protocol.
    let mut other = hello.clone();
    other[3] = 0x02;
    assert!(matches!(
        server.handle(&other),
        Err(Error::Decode(DecodeError::WrongProtocol { .. }))
    ));
    let setup = server.handle(&hello).unwrap();
    // The hello again: wrong phase.
    assert!(matches!(
        server.handle(&hello),
        Err(Error::WrongPhase { message: 0x01, .. })
    ));
    // The client gets its own hello back: wrong phase.
    assert!(matches!(
        client.handle(&hello),
        Err(Error::WrongPhase { message: 0x01, .. })
    ));
    let ClientStep::Send(chunk1) = client.handle(&setup).unwrap() else {
        panic!()
    };
    // The setup again: wrong phase, and the client goes on.
    assert!(matches!(
        client.handle(&setup),
        Err(Error::WrongPhase { message: 0x02, .. })
    ));
    // A chunk with a different column count (length mismatch for the server's m).
    let mut bad = chunk1.clone();
    bad.truncate(bad.len() - 128);
    let len = (bad.len() - HEADER_LEN) as u32;
    bad[5..9].copy_from_slice(&len.to_be_bytes());
    bad[HEADER_LEN + 18..HEADER_LEN + 20].copy_from_slice(&15u16.to_be_bytes());
    assert!(server.handle(&bad).is_err());
    // A chunk that starts at the wrong column.
    let mut bad = chunk1.clone();
    bad[HEADER_LEN + 16..HEADER_LEN + 18].copy_from_slice(&16u16.to_be_bytes());
    assert!(matches!(
        server.handle(&bad),
        Err(Error::Decode(DecodeError::InvalidParameter {
            what: "first column"
        }))
    ));
    let ack = server.handle(&chunk1).unwrap();
    assert!(matches!(messages::decode(&ack).unwrap(), Message::Ack(_)));
    let ClientStep::Send(chunk2) = client.handle(&ack).unwrap() else {
        panic!()
    };
    // The same ack again: next column no longer matches.
    assert!(client.handle(&ack).is_err());
    // A later chunk with another PRF key.
    let mut bad = chunk2.clone();
    bad[HEADER_LEN] ^= 1;
    assert!(matches!(
        server.handle(&bad),
        Err(Error::Decode(DecodeError::InvalidParameter {
            what: "PRF key"
        }))
    ));
    // The first chunk again.
    assert!(server.handle(&chunk1).is_err());
    let mut resp = server.handle(&chunk2).unwrap();
    let mut step = client.handle(&resp).unwrap();
    while let ClientStep::Send(req) = step {
        resp = server.handle(&req).unwrap();
        step = client.handle(&resp).unwrap();
    }
    let ClientStep::Done(out) = step else {
        panic!()
    };
    assert_eq!(out.matches.len(), 100);
    assert!(server.is_done() && server.is_finished() && client.is_done());
    // After the end, everything is the wrong phase.
    assert!(matches!(
        server.handle(&chunk2),
        Err(Error::WrongPhase { .. })
    ));
    assert!(matches!(
        client.handle(&resp),
        Err(Error::WrongPhase { .. })
    ));
}

#[test]
fn client_rejects_bad_setup_and_outputs() {
    let mut rng = ChaCha20Rng::seed_from_u64(10);
    let config = Cm20Config::new(Threads::ONE);
    let (mut client, hello) = Cm20Client::start(set(0..20), config.clone(), &mut rng).unwrap();
    let mut server = Cm20Server::new(set(0..30), config.clone(), &mut rng).unwrap();
    let setup = server.handle(&hello).unwrap();
    // A narrower matrix than the parameters require.
    let mut bad = setup.clone();
    let w = u16::from_be_bytes([bad[HEADER_LEN + 37], bad[HEADER_LEN + 38]]);
    bad[HEADER_LEN + 37..HEADER_LEN + 39].copy_from_slice(&(w - 1).to_be_bytes());
    assert!(client.handle(&bad).is_err());
    // Wrong output length.
    let mut bad = setup.clone();
    bad[HEADER_LEN + 39] += 1;
    assert!(client.handle(&bad).is_err());
    // Every truncation.
    for n in (0..setup.len()).step_by(97) {
        assert!(client.handle(&setup[..n]).is_err());
    }
    let ClientStep::Send(chunk) = client.handle(&setup).unwrap() else {
        panic!()
    };
    let out = server.handle(&chunk).unwrap();
    // Corrupted coded values: a set with trailing garbage is a typed error.
    let mut bad = out.clone();
    bad.push(0xff);
    let len = (bad.len() - HEADER_LEN) as u32;
    bad[5..9].copy_from_slice(&len.to_be_bytes());
    let dl = u32::from_be_bytes(bad[HEADER_LEN + 6..HEADER_LEN + 10].try_into().unwrap()) + 1;
    bad[HEADER_LEN + 6..HEADER_LEN + 10].copy_from_slice(&dl.to_be_bytes());
    assert!(matches!(
        client.handle(&bad),
        Err(Error::Decode(DecodeError::MalformedSet(_)))
    ));
    // Another server count.
    let mut bad = out.clone();
    bad[HEADER_LEN + 4] ^= 1;
    assert!(client.handle(&bad).is_err());
    let ClientStep::Done(o) = client.handle(&out).unwrap() else {
        panic!()
    };
    assert_eq!(o.matches.len(), 20);
}

#[test]
fn server_checks_the_admitted_count_and_height() {
    let mut rng = ChaCha20Rng::seed_from_u64(11);
    let (_, hello) =
        Cm20Client::start(set(0..20), Cm20Config::new(Threads::ONE), &mut rng).unwrap();
    let config = Cm20Config::new(Threads::ONE).with_expected_client_items(19);
    let mut server = Cm20Server::new(set(0..30), config, &mut rng).unwrap();
    assert!(matches!(
        server.handle(&hello),
        Err(Error::CountMismatch {
            expected: 19,
            found: 20
        })
    ));
    // A height that is not allowed (not a power of two, or too large).
    for m in [129u32, 1024, 1 << 20] {
        let mut bad = hello.clone();
        bad[HEADER_LEN + 37..HEADER_LEN + 41].copy_from_slice(&m.to_be_bytes());
        assert!(
            matches!(
                messages::check(&bad),
                Err(DecodeError::InvalidParameter {
                    what: "matrix height"
                })
            ),
            "m = {m}"
        );
    }
    // 512 = 4 x 128 is the largest allowed for 20 items.
    let mut ok = hello.clone();
    ok[HEADER_LEN + 37..HEADER_LEN + 41].copy_from_slice(&512u32.to_be_bytes());
    assert!(messages::check(&ok).is_ok());
    // Too many items declared.
    let mut bad = hello.clone();
    bad[HEADER_LEN + 33..HEADER_LEN + 37].copy_from_slice(&(messages::MAX_ITEMS + 1).to_be_bytes());
    assert!(matches!(
        messages::check(&bad),
        Err(DecodeError::LimitExceeded { .. })
    ));
}

#[test]
fn a_body_limit_sets_the_chunk_size_up_to_the_default() {
    for (limit, expect) in [
        (1u64 << 20, 1u64 << 20),
        (DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_REQUEST_BYTES),
        (64 << 20, DEFAULT_MAX_REQUEST_BYTES),
        (u64::MAX, DEFAULT_MAX_REQUEST_BYTES),
    ] {
        let c = Cm20Config::for_body_limit(Threads::ONE, limit);
        assert_eq!(c.max_request_bytes, expect, "{limit}");
        assert_eq!(c.height, None);
    }
}

fn requests(ahead: bool) -> (Vec<Vec<u8>>, Vec<usize>) {
    // 16 columns per chunk: w / 16 + 1 chunks.
    let config = Cm20Config::new(Threads::ONE).with_max_request_bytes(2048 + 29);
    let mut rng = ChaCha20Rng::seed_from_u64(21);
    let (client, hello) = Cm20Client::start(set(0..1000), config.clone(), &mut rng).unwrap();
    let mut server = Cm20Server::new(set(900..1900), config, &mut rng).unwrap();
    crate::chunked::requests_of_run(client, hello, |r| server.handle(r).unwrap(), ahead)
}

#[test]
fn work_ahead_changes_no_byte_of_any_request() {
    let (plain, matched) = requests(false);
    assert!(plain.len() > 30, "{} requests", plain.len());
    assert_eq!(matched, (900..1000).collect::<Vec<_>>());
    assert_eq!(requests(true), (plain, matched));
}

#[test]
fn an_ack_for_a_chunk_built_ahead_but_not_sent_is_refused() {
    let config = Cm20Config::new(Threads::ONE).with_max_request_bytes(2048 + 29);
    let mut rng = ChaCha20Rng::seed_from_u64(22);
    let (mut client, hello) = Cm20Client::start(set(0..1000), config.clone(), &mut rng).unwrap();
    let mut server = Cm20Server::new(set(0..10), config, &mut rng).unwrap();
    let setup = server.handle(&hello).unwrap();
    let ClientStep::Send(chunk1) = client.handle(&setup).unwrap() else {
        panic!()
    };
    client.work_ahead().unwrap(); // builds columns 16..32
    // The server may only acknowledge what it was sent: column 16, not 32.
    let early = messages::Ack { next_column: 32 }.encode();
    assert!(matches!(
        client.handle(&early),
        Err(Error::Decode(DecodeError::InvalidParameter {
            what: "next column"
        }))
    ));
    let ack = server.handle(&chunk1).unwrap();
    let ClientStep::Send(chunk2) = client.handle(&ack).unwrap() else {
        panic!()
    };
    // The chunk built ahead is the one handed out, and the server takes it.
    assert_eq!(
        u16::from_be_bytes([chunk2[HEADER_LEN + 16], chunk2[HEADER_LEN + 17]]),
        16
    );
    assert!(server.handle(&chunk2).is_ok());
}

/// Label lanes (spec §4.7): a client opens the lanes of its matches only. Every lane of an
/// entry it did not match, opened with the pad of every one of its items, gives anything
/// but that entry's label (or any registry label): the pads are digest bytes of inputs it
/// does not hold, never sent. Its matches' lanes open to their labels.
#[test]
fn a_client_opens_only_its_matches_lanes() {
    use crate::lanes::{self, LaneLabels};
    let server = set(200..800);
    let label = |i: usize| format!("L{:010}", i * 104_729).into_bytes();
    let labels = LaneLabels::new((0..server.len()).map(|i| Some(label(i)))).unwrap();
    let all: std::collections::HashSet<Vec<u8>> = (0..server.len()).map(label).collect();
    assert_eq!(labels.width(), 11);
    let mut rng = ChaCha20Rng::seed_from_u64(41);
    let client_set = set(0..300);
    let (mut c, hello) = Cm20Client::start(
        client_set.clone(),
        Cm20Config::new(Threads::ONE).with_label_lanes(),
        &mut rng,
    )
    .unwrap();
    let server_items = std::sync::Arc::new(server);
    let config = Cm20Config::new(Threads::ONE).with_lane_labels(std::sync::Arc::new(labels));
    let mut s = Cm20Server::new(server_items.clone(), config, &mut rng).unwrap();
    let mut request = hello;
    let outputs = loop {
        let response = s.handle(&request).unwrap();
        if s.is_done() {
            break response;
        }
        match c.handle(&response).unwrap() {
            ClientStep::Send(next) => request = next,
            ClientStep::Done(_) => panic!("outputs not yet sent"),
        }
    };
    let (mine, pads) = c.test_mine();
    let Message::Outputs(o) = messages::decode(&outputs).unwrap() else {
        panic!("outputs")
    };
    assert_eq!(o.lane, Some(11));
    let hits = o.hits(&mine).unwrap();
    assert_eq!(hits.len(), 100);
    let matched: std::collections::HashSet<usize> = hits.iter().map(|h| h.position).collect();
    for h in hits.iter() {
        let pad = &pads[h.item * 12..(h.item + 1) * 12];
        let got = lanes::open(o.lane_at(h.position), pad).unwrap().unwrap();
        let i = server_items
            .items()
            .iter()
            .position(|x| *x == client_set.items()[h.item])
            .unwrap();
        assert_eq!(got, label(i));
    }
    let (mut tried, mut opened) = (0, 0);
    for p in (0..server_items.len()).filter(|p| !matched.contains(p)) {
        for pad in pads.chunks_exact(12) {
            tried += 1;
            if let Ok(Some(l)) = lanes::open(o.lane_at(p), pad) {
                opened += 1;
                assert!(!all.contains(&l), "an unmatched lane opened to a label");
            }
        }
    }
    assert_eq!(tried, 500 * 300);
    // What "opens" is noise: a length byte of 12 and nothing to check (about 1 in 256).
    assert!(opened < tried / 100, "{opened} of {tried}");
    // The labels are nowhere in the clear.
    for l in &all {
        assert!(!outputs.windows(l.len()).any(|w| w == &l[..]));
    }
}
