//! Group PSI end to end, in process: the leader's output against the plain intersection of
//! every party's set (t = 2, 3, 5, 8; overlapping, disjoint, empty and unequal sets; one run
//! at 2^16 items each), malformed, truncated, oversized and out-of-phase messages (typed
//! errors that leave the party as it was), and a seeded run that gives the same bytes twice.

use proptest::prelude::*;
use psi_core::mpsi::{self, Leader, LeaderStep, Member, MpsiConfig, Outgoing};
use psi_core::{DecodeError, Error, ItemSet, Threads};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use sha2::{Digest, Sha256};
use std::collections::HashSet;

mod common;

fn items(prefix: &str, r: std::ops::Range<usize>) -> Vec<Vec<u8>> {
    r.map(|i| format!("{prefix}{i}").into_bytes()).collect()
}

/// Indices (first occurrences) of the leader's items that every member holds.
fn expected(leader: &[Vec<u8>], members: &[Vec<Vec<u8>>]) -> Vec<usize> {
    let sets: Vec<HashSet<&[u8]>> = members
        .iter()
        .map(|m| m.iter().map(|v| v.as_slice()).collect())
        .collect();
    let mut seen = HashSet::new();
    leader
        .iter()
        .enumerate()
        .filter(|(_, x)| seen.insert(x.as_slice()) && sets.iter().all(|s| s.contains(x.as_slice())))
        .map(|(i, _)| i)
        .collect()
}

/// Runs the group in memory and checks the leader's output; returns the transcript hash.
fn check(leader: &[Vec<u8>], members: &[Vec<Vec<u8>>], config: &MpsiConfig, seed: u64) -> [u8; 32] {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let mut h = Sha256::new();
    let (out, traffic) = mpsi::run_in_memory(
        ItemSet::new(leader),
        members.iter().map(ItemSet::new).collect(),
        config,
        &mut rng,
        |j, up, bytes| {
            h.update([j as u8, up as u8]);
            h.update((bytes.len() as u64).to_be_bytes());
            h.update(bytes);
        },
    )
    .unwrap();
    let got: Vec<usize> = out.matches.iter().map(|m| m.index).collect();
    assert_eq!(got, expected(leader, members), "t = {}", members.len() + 1);
    for m in &out.matches {
        assert_eq!(m.item, leader[m.index]);
    }
    let sizes: Vec<u32> = members
        .iter()
        .map(|m| ItemSet::new(m).len() as u32)
        .collect();
    assert_eq!(out.member_items, sizes);
    assert_eq!(out.params.parties as usize, members.len() + 1);
    // The traffic is what the spec's sizes say (docs/protocol/group-psi.md §6).
    let p = out.params;
    let (m, chunks) = (
        p.instances() as usize,
        p.instances().div_ceil(config.chunk_instances() as u32) as usize,
    );
    let members = members.len();
    let hello = psi_core::wire::HEADER_LEN + mpsi::messages::HELLO_BODY_LEN;
    let chunk_fields = psi_core::wire::HEADER_LEN + mpsi::messages::CHUNK_FIELDS_LEN;
    let down = mpsi::messages::setup_len(p.parties) + chunks * chunk_fields + m * 8192;
    let up = hello + chunks * chunk_fields + m * 512 * p.cell_bytes as usize;
    assert_eq!(traffic.leader_to_members_bytes, (members * down) as u64);
    assert_eq!(traffic.members_to_leader_bytes, (members * up) as u64);
    assert_eq!(traffic.messages, members * (2 + 2 * chunks));
    h.finalize().into()
}

fn config() -> MpsiConfig {
    // 64 KiB matrix chunks: several chunks per member even for small sets.
    MpsiConfig::new(Threads::new(2)).with_max_chunk_bytes(64 << 10)
}

#[test]
fn overlapping_sets_for_2_3_5_8_parties() {
    for (seed, t) in (1..).zip([2usize, 3, 5, 8]) {
        let members: Vec<Vec<Vec<u8>>> = (1..t)
            .map(|j| items("+4930", 20 * j..1200 + 37 * j))
            .collect();
        check(&items("+4930", 0..1000), &members, &config(), seed);
    }
}

#[test]
fn sets_of_different_sizes_and_duplicates() {
    let mut leader = items("a", 0..50);
    leader.extend(items("a", 10..20)); // duplicates
    leader.push(Vec::new()); // the empty string is an item
    let mut big = items("a", 0..5000);
    big.push(Vec::new());
    let members = vec![
        big,
        items("a", 5..40).into_iter().chain([Vec::new()]).collect(),
        items("a", 0..3000),
    ];
    check(&leader, &members, &config(), 11);
    // A leader much larger than its members.
    check(
        &items("b", 0..4000),
        &[items("b", 3990..4005), items("b", 3995..4100)],
        &config(),
        12,
    );
}

#[test]
fn disjoint_members_and_empty_sets_give_no_matches() {
    // Each member overlaps the leader, but no item is in every set.
    let leader = items("c", 0..200);
    check(
        &leader,
        &[items("c", 0..100), items("c", 100..200)],
        &config(),
        21,
    );
    // A member with an empty set.
    check(
        &leader,
        &[items("c", 0..200), Vec::new(), items("c", 0..50)],
        &config(),
        22,
    );
    // An empty leader; everyone empty.
    check(&[], &[items("c", 0..10), items("c", 0..10)], &config(), 23);
    check(&[], &[Vec::new()], &config(), 24);
    // Identical sets: everything matches.
    check(
        &leader,
        &[leader.clone(), leader.clone(), leader.clone()],
        &config(),
        25,
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, failure_persistence: None, ..ProptestConfig::default() })]

    /// Against the plain intersection: 2 to 6 parties, each set a random slice of a common
    /// universe (so any overlap, empty sets included), one or two threads, chunks of one
    /// instance to everything at once.
    #[test]
    fn matches_plain_intersection(
        slices in proptest::collection::vec((0usize..400, 0usize..400), 2..=6),
        threads in 1usize..=2,
        chunk_log in 13u32..=24,
        seed in any::<u64>(),
    ) {
        let sets: Vec<Vec<Vec<u8>>> = slices
            .iter()
            .map(|&(a, len)| items("p", a..a + len))
            .collect();
        let config = MpsiConfig::new(Threads::new(threads)).with_max_chunk_bytes(1 << chunk_log);
        check(&sets[0], &sets[1..], &config, seed);
    }
}

/// A seeded run is byte for byte the same twice (the basis of a transcript vector); another
/// seed gives other bytes and the same output.
#[test]
fn seeded_runs_are_deterministic() {
    let leader = items("d", 0..300);
    let members = vec![
        items("d", 100..400),
        items("d", 0..250),
        items("d", 50..500),
    ];
    let config = MpsiConfig::new(Threads::ONE).with_max_chunk_bytes(100_000);
    let a = check(&leader, &members, &config, 7);
    let b = check(&leader, &members, &config, 7);
    assert_eq!(a, b);
    // Threads do not change the bytes.
    let two = MpsiConfig::new(Threads::new(2)).with_max_chunk_bytes(100_000);
    let c = check(&leader, &members, &two, 7);
    assert_eq!(a, c);
    let d = check(&leader, &members, &config, 8);
    assert_ne!(a, d);
}

/// 2^16 items for each of two parties (half in common): the one large run of the suite.
#[test]
fn two_parties_at_2_16() {
    let n = 1 << 16;
    let config = MpsiConfig::new(Threads::new(2));
    check(
        &items("+1555", 0..n),
        &[items("+1555", n / 2..n + n / 2)],
        &config,
        31,
    );
}

/// A group driven by hand, so tests can tamper with what moves.
struct Group {
    leader: Leader,
    members: Vec<Member>,
    /// Hellos, member `j`'s at `j - 1`.
    hellos: Vec<Vec<u8>>,
}

fn group(t: usize, seed: u64) -> Group {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let config = MpsiConfig::new(Threads::ONE).with_max_chunk_bytes(40_000);
    let leader = Leader::start(
        ItemSet::new(items("g", 0..100)),
        t as u8,
        config.clone(),
        &mut rng,
    )
    .unwrap();
    let (members, hellos) = (1..t)
        .map(|j| Member::start(ItemSet::new(items("g", j..150)), config.clone(), &mut rng).unwrap())
        .unzip();
    Group {
        leader,
        members,
        hellos,
    }
}

fn sends(step: LeaderStep) -> Vec<Outgoing> {
    match step {
        LeaderStep::Send(v) => v,
        other => panic!("expected messages, got {other:?}"),
    }
}

/// Every message cut short or one byte too long is a typed decode error at its receiver,
/// and the receiver carries on as if it never arrived.
#[test]
fn truncated_and_oversized_messages_are_typed_errors() {
    let mut g = group(3, 41);
    let hello = g.hellos[0].clone();
    for bad in mangled(&hello) {
        assert!(matches!(g.leader.handle(1, &bad), Err(Error::Decode(_))));
    }
    assert!(sends(g.leader.handle(1, &hello).unwrap()).is_empty());
    let out = sends(g.leader.handle(2, &g.hellos[1].clone()).unwrap());
    // Setup and first matrix chunk for each member.
    assert_eq!(
        out.iter().map(|o| o.member).collect::<Vec<_>>(),
        [1, 1, 2, 2]
    );
    let mut queue: std::collections::VecDeque<Outgoing> = out.into();
    let mut done = None;
    let mut checked_cells = false;
    while let Some(o) = queue.pop_front() {
        let m = &mut g.members[o.member - 1];
        for bad in mangled(&o.bytes) {
            assert!(matches!(m.handle(&bad), Err(Error::Decode(_))));
        }
        let Some(reply) = m.handle(&o.bytes).unwrap() else {
            continue;
        };
        if !checked_cells {
            for bad in mangled(&reply) {
                assert!(matches!(
                    g.leader.handle(o.member, &bad),
                    Err(Error::Decode(_))
                ));
            }
            checked_cells = true;
        }
        match g.leader.handle(o.member, &reply).unwrap() {
            LeaderStep::Send(more) => queue.extend(more),
            LeaderStep::Done(out) => done = Some(out),
            _ => unreachable!(),
        }
    }
    let out = done.expect("the run finished");
    let got: Vec<usize> = out.matches.iter().map(|m| m.index).collect();
    assert_eq!(got, (2..100).collect::<Vec<_>>());
    assert!(g.members.iter().all(Member::is_done) && g.leader.is_done());
    // After the end, nothing is accepted.
    let hello = g.hellos[0].clone();
    assert!(matches!(
        g.leader.handle(1, &hello),
        Err(Error::WrongPhase {
            phase: "leader done",
            ..
        })
    ));
}

/// Prefixes at a few cut points (header, fields, body), one byte more, a wrong length
/// field, a wrong wire id.
fn mangled(msg: &[u8]) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = [0, 4, 8, 9, 10, 20, msg.len() / 2, msg.len() - 1]
        .iter()
        .filter(|&&c| c < msg.len())
        .map(|&c| msg[..c].to_vec())
        .collect();
    let mut long = msg.to_vec();
    long.push(0);
    v.push(long);
    let mut shorter = msg.to_vec();
    shorter[5..9].copy_from_slice(&((msg.len() - 10) as u32).to_be_bytes());
    v.push(shorter);
    let mut other = msg.to_vec();
    other[3] = 0x04;
    v.push(other);
    v
}

#[test]
fn messages_in_the_wrong_phase_are_typed_errors() {
    let mut g = group(3, 51);
    let hello = g.hellos[0].clone();
    // A hello to a member; a second hello from the same member; an unknown member.
    assert!(matches!(
        g.members[0].handle(&hello),
        Err(Error::WrongPhase { message: 0x01, .. })
    ));
    g.leader.handle(1, &hello).unwrap();
    assert!(matches!(
        g.leader.handle(1, &hello),
        Err(Error::WrongPhase { message: 0x01, .. })
    ));
    assert!(matches!(
        g.leader.handle(3, &hello),
        Err(Error::UnknownMember {
            index: 3,
            members: 2
        })
    ));
    assert!(matches!(
        g.leader.handle(0, &hello),
        Err(Error::UnknownMember { .. })
    ));
    let out = sends(g.leader.handle(2, &g.hellos[1].clone()).unwrap());
    let (setup, matrix) = (&out[0].bytes, &out[1].bytes);
    // A matrix chunk before the setup; a setup to the leader; a hello after the start.
    assert!(matches!(
        g.members[0].handle(matrix),
        Err(Error::WrongPhase { message: 0x03, .. })
    ));
    assert!(matches!(
        g.leader.handle(1, setup),
        Err(Error::WrongPhase { message: 0x02, .. })
    ));
    assert!(matches!(
        g.leader.handle(1, &hello),
        Err(Error::WrongPhase { message: 0x01, .. })
    ));
    // Member 2's setup fed to member 1: not its roster entry.
    assert_eq!(
        g.members[0].handle(&out[2].bytes).unwrap_err(),
        Error::Decode(DecodeError::InvalidParameter { what: "roster" })
    );
    assert_eq!(g.members[0].handle(setup).unwrap(), None);
    assert!(matches!(
        g.members[0].handle(setup),
        Err(Error::WrongPhase { message: 0x02, .. })
    ));
    let cells = g.members[0].handle(matrix).unwrap().unwrap();
    // The same matrix chunk again is refused (it expects the next instance).
    assert_eq!(
        g.members[0].handle(matrix).unwrap_err(),
        Error::Decode(DecodeError::InvalidParameter {
            what: "first instance"
        })
    );
    // The same cells twice: the leader has sent member 1 its next chunk and wants that.
    sends(g.leader.handle(1, &cells).unwrap());
    assert!(matches!(
        g.leader.handle(1, &cells),
        Err(Error::Decode(DecodeError::InvalidParameter {
            what: "chunk instances"
        }))
    ));
}

/// A setup whose parameters are not the derivation's is refused before anything changes.
#[test]
fn setups_with_other_parameters_are_refused() {
    let mut g = group(2, 61);
    let out = sends(g.leader.handle(1, &g.hellos[0].clone()).unwrap());
    let setup = &out[0].bytes;
    // Body offsets: hashes 43, filter bits 44..48, cell bytes 48, max items 39..43.
    let mut bad = setup.clone();
    bad[9 + 43] += 1;
    let mut bads = vec![(bad, "hashes")];
    let mut bad = setup.clone();
    let m = u32::from_be_bytes(bad[9 + 44..9 + 48].try_into().unwrap()) + 512;
    bad[9 + 44..9 + 48].copy_from_slice(&m.to_be_bytes());
    bads.push((bad, "filter bits"));
    let mut bad = setup.clone();
    bad[9 + 48] = 8;
    bads.push((bad, "cell bytes"));
    for (bad, what) in bads {
        assert_eq!(
            g.members[0].handle(&bad).unwrap_err(),
            Error::Decode(DecodeError::InvalidParameter { what }),
            "{what}"
        );
    }
    let mut bad = setup.clone();
    bad[9 + 39..9 + 43].copy_from_slice(&1u32.to_be_bytes());
    assert_eq!(
        g.members[0].handle(&bad).unwrap_err(),
        Error::Decode(DecodeError::InvalidParameter { what: "max items" })
    );
    // The real setup still works.
    assert_eq!(g.members[0].handle(setup).unwrap(), None);
}

#[test]
fn bad_starts_are_typed_errors() {
    let mut rng = ChaCha20Rng::seed_from_u64(71);
    let c = MpsiConfig::new(Threads::ONE);
    for t in [0u8, 1, 17] {
        assert!(matches!(
            Leader::start(ItemSet::new(items("s", 0..3)), t, c.clone(), &mut rng),
            Err(Error::InputTooLarge { .. })
        ));
    }
    // A leader that admits at most 10 items per member.
    let mut leader = Leader::start(
        ItemSet::new(items("s", 0..3)),
        2,
        c.clone().with_max_member_items(10),
        &mut rng,
    )
    .unwrap();
    let (_, hello) = Member::start(ItemSet::new(items("s", 0..11)), c, &mut rng).unwrap();
    assert!(matches!(
        leader.handle(1, &hello),
        Err(Error::Decode(DecodeError::LimitExceeded {
            what: "member items",
            ..
        }))
    ));
}

/// `msg` (a whole message) with its body replaced by `body` and the header's length fixed.
fn reframed(msg: &[u8], message_type: u8, body: &[u8]) -> Vec<u8> {
    let mut m = msg[..psi_core::wire::HEADER_LEN].to_vec();
    m[4] = message_type;
    m[5..9].copy_from_slice(&(body.len() as u32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

/// Fields a decoder cannot check alone, and messages of an unknown or misdirected type:
/// a hello's bad suite, key-agreement point and base-OT message; a cell chunk with other
/// cells than the run's; a matrix chunk past the last instance; a cell chunk to a member
/// and a matrix chunk to the leader; type 0x09. Each is a typed error that leaves the
/// receiver as it was (the honest run then finishes with the right output).
#[test]
fn bad_fields_and_misdirected_messages_are_typed_errors() {
    let mut g = group(2, 81);
    let hello = g.hellos[0].clone();
    let body = &hello[psi_core::wire::HEADER_LEN..];
    // Suite (body offset 0).
    let mut bad = body.to_vec();
    bad[0] = 0x02;
    assert_eq!(
        g.leader
            .handle(1, &reframed(&hello, 0x01, &bad))
            .unwrap_err(),
        Error::Decode(DecodeError::InvalidParameter { what: "suite" })
    );
    // E_j (body offset 37): the identity, then a non-canonical encoding.
    for point in [[0u8; 32], [0xff; 32]] {
        let mut bad = body.to_vec();
        bad[37..69].copy_from_slice(&point);
        assert!(matches!(
            g.leader.handle(1, &reframed(&hello, 0x01, &bad)),
            Err(Error::Decode(DecodeError::InvalidElement { .. }))
        ));
    }
    // Base OT 5's first point (body offset 71 + 5 * 64).
    let mut bad = body.to_vec();
    bad[71 + 5 * 64..71 + 6 * 64].fill(0xff);
    assert!(matches!(
        g.leader.handle(1, &reframed(&hello, 0x01, &bad)),
        Err(Error::Decode(DecodeError::InvalidElement { .. }))
    ));
    // Unknown type at both ends.
    let unknown = reframed(&hello, 0x09, &[]);
    assert_eq!(
        g.leader.handle(1, &unknown).unwrap_err(),
        Error::Decode(DecodeError::UnknownMessageType(9))
    );
    assert_eq!(
        g.members[0].handle(&unknown).unwrap_err(),
        Error::Decode(DecodeError::UnknownMessageType(9))
    );
    // The real hello is still welcome.
    let out = sends(g.leader.handle(1, &hello).unwrap());
    let (setup, matrix) = (out[0].bytes.clone(), out[1].bytes.clone());
    assert_eq!(g.members[0].handle(&setup).unwrap(), None);
    // A matrix chunk to the leader.
    assert!(matches!(
        g.leader.handle(1, &matrix),
        Err(Error::WrongPhase { message: 0x03, .. })
    ));
    // A matrix chunk that runs one instance past the last.
    let p = g.members[0].params().unwrap();
    let mut bad = matrix.clone();
    let past = p.instances() as u16 + 1;
    bad[13..15].copy_from_slice(&past.to_be_bytes());
    let data = vec![0u8; past as usize * 8192];
    let bad = reframed(&bad, 0x03, &[&bad[9..15], &data[..]].concat());
    assert_eq!(
        g.members[0].handle(&bad).unwrap_err(),
        Error::Decode(DecodeError::InvalidParameter {
            what: "chunk instances"
        })
    );
    let cells = g.members[0].handle(&matrix).unwrap().unwrap();
    // A cell chunk to a member.
    assert!(matches!(
        g.members[0].handle(&cells),
        Err(Error::WrongPhase { message: 0x04, .. })
    ));
    // The same chunk with 8-byte cells instead of the run's w.
    let w = p.cell_bytes as usize;
    assert!(w < 8);
    let n = (cells.len() - 15) / w;
    let wide = [&cells[9..15], &vec![0u8; n * 8][..]].concat();
    assert_eq!(
        g.leader
            .handle(1, &reframed(&cells, 0x04, &wide))
            .unwrap_err(),
        Error::Decode(DecodeError::InvalidParameter { what: "cell bytes" })
    );
    // The honest run goes on and gives the plain intersection.
    let mut queue: std::collections::VecDeque<Vec<u8>> = Default::default();
    let mut step = g.leader.handle(1, &cells).unwrap();
    let out = loop {
        match step {
            LeaderStep::Send(out) => queue.extend(out.into_iter().map(|o| o.bytes)),
            LeaderStep::Done(out) => break out,
            _ => unreachable!(),
        }
        let m = queue.pop_front().expect("a message");
        let reply = g.members[0].handle(&m).unwrap().unwrap();
        step = g.leader.handle(1, &reply).unwrap();
    };
    let got: Vec<usize> = out.matches.iter().map(|m| m.index).collect();
    assert_eq!(got, (1..100).collect::<Vec<_>>());
    // After the end a member takes nothing more.
    assert!(matches!(
        g.members[0].handle(&matrix),
        Err(Error::WrongPhase {
            phase: "member done",
            ..
        })
    ));
}

// ---- the transcript vector (docs/protocol/group-psi.md §8) -------------------------------

const VECTOR: &str = "group-psi-transcript.json";
const VECTOR_WRITE: &str = "GROUP_PSI_WRITE_VECTORS";
const LEADER_SEED: u64 = 0x6d70_0000;
const MEMBER_SEEDS: [u64; 2] = [0x6d70_0001, 0x6d70_0002];
/// One IKNP instance per matrix chunk: each member gets two chunks.
const VECTOR_CHUNK_BYTES: u64 = 8192 + 15;

fn phone(i: usize) -> Vec<u8> {
    format!("+4930{i:08}").into_bytes()
}

/// The vector's sets: the leader 12 numbers and one of them again, member 1 15, member 2 14;
/// 5 numbers are in all three.
fn vector_sets() -> (Vec<Vec<u8>>, Vec<Vec<Vec<u8>>>) {
    let mut leader: Vec<Vec<u8>> = (0..12).map(phone).collect();
    leader.push(phone(4));
    let m1 = (3..18).map(phone).collect();
    let m2 = (0..8).chain(20..26).map(phone).collect();
    (leader, vec![m1, m2])
}

fn utf8(items: &[Vec<u8>]) -> Vec<String> {
    items
        .iter()
        .map(|i| String::from_utf8(i.clone()).unwrap())
        .collect()
}

/// `SHA-256(u8 len(ds) || ds || parts...)` (spec §3).
fn spec_hash(ds: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([ds.len() as u8]);
    h.update(ds);
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

/// A t = 3 run with one generator per party, driven as `run_in_memory` drives it, every
/// message recorded; the group id recomputed from the setup by the spec's §3.1.
fn transcript_json(threads: Threads) -> serde_json::Value {
    let (leader_items, member_items) = vector_sets();
    let config = MpsiConfig::new(threads).with_max_chunk_bytes(VECTOR_CHUNK_BYTES);
    let mut leader = Leader::start(
        ItemSet::new(&leader_items),
        3,
        config.clone(),
        &mut ChaCha20Rng::seed_from_u64(LEADER_SEED),
    )
    .unwrap();
    let mut members = Vec::new();
    let mut to_leader = std::collections::VecDeque::new();
    for (j, (items, seed)) in member_items.iter().zip(MEMBER_SEEDS).enumerate() {
        let (m, hello) = Member::start(
            ItemSet::new(items),
            config.clone(),
            &mut ChaCha20Rng::seed_from_u64(seed),
        )
        .unwrap();
        members.push(m);
        to_leader.push_back((j + 1, hello));
    }
    let mut messages = Vec::new();
    let mut record = |member: usize, up: bool, bytes: &[u8]| {
        messages.push(serde_json::json!({
            "member": member,
            "direction": if up { "member_to_leader" } else { "leader_to_member" },
            "type": bytes[4],
            "len": bytes.len(),
            "sha256": hex::encode(Sha256::digest(bytes)),
            "hex": hex::encode(bytes),
        }));
    };
    let mut to_members: std::collections::VecDeque<Outgoing> = Default::default();
    let mut setup = None;
    let out = loop {
        while let Some(o) = to_members.pop_front() {
            record(o.member, false, &o.bytes);
            if o.bytes[4] == 0x02 && setup.is_none() {
                setup = Some(o.bytes.clone());
            }
            if let Some(reply) = members[o.member - 1].handle(&o.bytes).unwrap() {
                to_leader.push_back((o.member, reply));
            }
        }
        let (j, bytes) = to_leader.pop_front().expect("a message");
        record(j, true, &bytes);
        match leader.handle(j, &bytes).unwrap() {
            LeaderStep::Send(o) => to_members.extend(o),
            LeaderStep::Done(out) => break out,
            _ => unreachable!(),
        }
    };
    assert!(members.iter().all(Member::is_done));
    // gid = Hash(DS_GROUP, nonce_0, t, n_0, N, k, m, w, roster): the setup's body bytes
    // 1..34, 35..49 and 81.. (the member index 34 and A_j 49..81 left out).
    let body = &setup.expect("a setup")[9..];
    let gid = spec_hash(
        b"PSI-MPSI-v1 group",
        &[&body[1..34], &body[35..49], &body[81..]],
    );
    let p = out.params;
    serde_json::json!({
        "description": "Group PSI (wire id 0x05, suite 0x01), t = 3, one ChaCha20 generator per party; see docs/protocol/group-psi.md §8",
        "produced_by": "rust-core/psi-core/tests/mpsi.rs, test transcript_vector; regenerate with GROUP_PSI_WRITE_VECTORS=1 cargo test -p psi-core --test mpsi transcript_vector",
        "rng": "rand_chacha 0.10 ChaCha20Rng::seed_from_u64(seed), one per party. Leader, in order: nonce_0 32 B, then for members 1, 2 the base-OT sender scalar c_j 64 B (reduced mod l). Member: nonce_j 32 B, key-agreement scalar e_j 64 B (reduced mod l), Delta 16 B (bit i = base-OT choice i), for each base OT i = 0..127 a_i 64 B and R_i 64 B (OT-PSI §9.2), then rho_j 16 B",
        "leader_seed": LEADER_SEED,
        "member_seeds": MEMBER_SEEDS,
        "max_chunk_bytes": VECTOR_CHUNK_BYTES,
        "leader_items": utf8(&leader_items),
        "member_items": member_items.iter().map(|m| utf8(m)).collect::<Vec<_>>(),
        "params": {
            "t": p.parties, "n_0": p.leader_items, "N": p.max_items,
            "k": p.hashes, "m": p.filter_bits, "w": p.cell_bytes,
        },
        "gid_hex": hex::encode(gid),
        "messages": messages,
        "match_indices": out.matches.iter().map(|m| m.index).collect::<Vec<_>>(),
        "member_sizes": out.member_items,
    })
}

/// Regenerates the t = 3 transcript with one and two threads (they must agree) and compares
/// it message by message, then whole, with the checked-in vector; its matches are the
/// plain intersection.
#[test]
fn transcript_vector() {
    let one = transcript_json(Threads::ONE);
    let two = transcript_json(Threads::new(2));
    let stored = common::compare_vector(VECTOR, VECTOR_WRITE, &one, &two);
    let (leader, members) = vector_sets();
    assert_eq!(
        serde_json::json!(expected(&leader, &members)),
        stored["match_indices"]
    );
    // Two chunks per member: hello, setup, 2 x (matrix, cells).
    assert_eq!(stored["messages"].as_array().unwrap().len(), 2 * 6);
}
