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
