//! Group PSI (wire id 0x05): the decoders and both state machines (`Leader::handle`,
//! `Member::handle`) of the t = 3 transcript vector's group.
//!
//! The input's first byte picks the mode. Even: the rest is one message, checked by
//! `mpsi::messages::check` and handed to a fresh leader (as from member 1 and from an
//! unknown index) and, if it is typed a setup, to a fresh member. Odd: the rest is a list of steps; the honest run's
//! messages move in `run_in_memory`'s order and each of the first 16 deliveries is replaced
//! by a step (the honest message, an edited one, any message, the previous one again, or the
//! honest message to another party than its receiver). A message its receiver refuses stays
//! undelivered; one it accepts replaces the honest one. With no steps the run must finish
//! with the vector's matches. Nothing may panic.
#![no_main]
use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use psi_core::ItemSet;
use psi_core::mpsi::messages::{WIRE_ID, check};
use psi_core::mpsi::{Leader, LeaderStep, Member};
use psi_fuzz::{Mutation, frame_id, repair_header_id};
use std::collections::VecDeque;

#[derive(Arbitrary, Debug)]
enum Step {
    Valid,
    Mutated(Mutation),
    /// Any bytes: `mode % 3` 0 as they are, 1 header repaired, 2 `bytes[0]` the type.
    Raw {
        mode: u8,
        bytes: Vec<u8>,
    },
    Repeat,
    /// The honest message to another party: `to % 3` 0 the leader (as from member
    /// `from % 4`), 1 or 2 that member.
    Misdirect {
        to: u8,
        from: u8,
    },
}

/// Where a message goes: `None` the leader (from member `from`), `Some(j)` member `j`.
struct Pending {
    to: Option<usize>,
    from: usize,
    bytes: Vec<u8>,
}

fn start() -> (Leader, Vec<Member>, Vec<Vec<u8>>) {
    let f = psi_fuzz::mpsi();
    let t = f.member_items.len() as u8 + 1;
    let leader = Leader::start(
        ItemSet::new(&f.leader_items),
        t,
        f.config(),
        &mut psi_fuzz::rng(f.leader_seed),
    )
    .expect("leader");
    let (members, hellos) = f
        .member_items
        .iter()
        .zip(&f.member_seeds)
        .map(|(items, &seed)| {
            Member::start(ItemSet::new(items), f.config(), &mut psi_fuzz::rng(seed))
                .expect("member")
        })
        .unzip();
    (leader, members, hellos)
}

fn one_message(bytes: &[u8]) {
    let _ = check(bytes);
    let f = psi_fuzz::mpsi();
    let mut leader = Leader::start(
        ItemSet::new(&f.leader_items),
        f.member_items.len() as u8 + 1,
        f.config(),
        &mut psi_fuzz::rng(f.leader_seed),
    )
    .expect("leader");
    let _ = leader.handle(1, bytes);
    let _ = leader.handle(7, bytes);
    // A member awaiting its setup refuses every other type before any work; starting one
    // (128 base OTs) only for setups keeps this mode fast.
    if bytes.get(4) == Some(&0x02) {
        let (_, mut members, _) = start();
        let _ = members[0].handle(bytes);
    }
}

fn steps(steps: &[Step]) {
    let f = psi_fuzz::mpsi();
    let (mut leader, mut members, hellos) = start();
    let mut queue: VecDeque<Pending> = hellos
        .into_iter()
        .enumerate()
        .map(|(j, bytes)| Pending {
            to: None,
            from: j + 1,
            bytes,
        })
        .collect();
    let mut previous = Vec::new();
    let mut output = None;
    let mut fuzzed = steps.iter().take(16);
    // Honest runs of the vector take 12 deliveries; refused ones are retried.
    for _ in 0..96 {
        let Some(p) = queue.pop_front() else { break };
        let step = fuzzed.next().unwrap_or(&Step::Valid);
        let (to, from, bytes) = match step {
            Step::Valid => (p.to, p.from, p.bytes.clone()),
            Step::Mutated(m) => {
                let mut b = m.apply(&p.bytes, None);
                if m.fix_header {
                    repair_header_id(&mut b, WIRE_ID);
                }
                (p.to, p.from, b)
            }
            Step::Raw { mode, bytes } => {
                let b = match mode % 3 {
                    1 => {
                        let mut b = bytes.clone();
                        repair_header_id(&mut b, WIRE_ID);
                        b
                    }
                    2 if !bytes.is_empty() => frame_id(WIRE_ID, bytes[0], &bytes[1..]),
                    _ => bytes.clone(),
                };
                (p.to, p.from, b)
            }
            Step::Repeat => (p.to, p.from, previous.clone()),
            Step::Misdirect { to, from } => match to % 3 {
                0 => (None, *from as usize % 4, p.bytes.clone()),
                j => (Some(j as usize), p.from, p.bytes.clone()),
            },
        };
        let honest = matches!(step, Step::Valid);
        let mut replies = Vec::new();
        let accepted = match to {
            None => match leader.handle(from, &bytes) {
                Ok(LeaderStep::Send(out)) => {
                    replies.extend(out.into_iter().map(|o| Pending {
                        to: Some(o.member),
                        from: 0,
                        bytes: o.bytes,
                    }));
                    true
                }
                Ok(LeaderStep::Done(out)) => {
                    output = Some(out);
                    true
                }
                Ok(_) => true,
                Err(_) => false,
            },
            Some(j) => match members[j - 1].handle(&bytes) {
                Ok(Some(reply)) => {
                    replies.push(Pending {
                        to: None,
                        from: j,
                        bytes: reply,
                    });
                    true
                }
                Ok(None) => true,
                Err(_) => false,
            },
        };
        // The honest message is consumed if it (or what replaced it, at its receiver) was
        // taken, or if it was refused (the run has diverged and it will never fit).
        let same_receiver = to == p.to;
        if !(honest || (accepted && same_receiver)) {
            queue.push_front(p);
        }
        queue.extend(replies);
        previous = bytes;
        if output.is_some() {
            break;
        }
    }
    if steps.is_empty() {
        let out = output.expect("the honest run finishes");
        let got: Vec<usize> = out.matches.iter().map(|m| m.index).collect();
        assert_eq!(got, f.matches, "the vector's matches");
        assert!(members.iter().all(Member::is_done) && leader.is_done());
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        steps(&[]);
        return;
    };
    if mode % 2 == 0 {
        one_message(rest);
    } else if let Ok(s) = Vec::<Step>::arbitrary_take_rest(Unstructured::new(rest)) {
        steps(&s);
    }
});
