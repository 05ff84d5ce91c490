//! Times group PSI in process: t = 2, 4, 8 parties at 2^10, 2^12 and 2^16 items each (half
//! of every set common to all, the rest each party's own). Every party runs in this
//! process, one after the other (the driver moves each message through its bytes, in
//! `run_in_memory`'s order), so the wall time is the sum of all parties' computation; no
//! network. Each party's CPU time is the process's CPU time (all threads) spent in that
//! party's calls. Run in release mode:
//!
//! ```text
//! cargo run --release -p psi-core --example mpsi_time -- [--threads N] [--runs R] [t n_log2 ...]
//! ```
//!
//! `--threads` is each party's worker threads (`MpsiConfig::threads`, default 1), `--runs`
//! the runs per row (the table shows the median wall time and the CPU times of that run).
//! IOP18 Table 3 anchor: 2 parties at 2^16, 12.99 s with the star topology (their Java,
//! one machine per party, 0.1 ms LAN).

use psi_core::mpsi::{Leader, LeaderStep, Member, MpsiConfig, Outgoing};
use psi_core::{ItemSet, Threads};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

fn set(common: usize, own: usize, party: usize) -> ItemSet {
    ItemSet::new(
        (0..common)
            .map(|i| format!("+4930{i:08}"))
            .chain((0..own).map(|i| format!("+4940{party:02}{i:08}"))),
    )
}

/// CPU time of the whole process (every thread).
fn cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid pointer to a timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Runs `f`, adding its CPU time to `acc`.
fn timed<T>(acc: &mut Duration, f: impl FnOnce() -> T) -> T {
    let c = cpu();
    let out = f();
    *acc += cpu() - c;
    out
}

struct Run {
    wall: Duration,
    leader_cpu: Duration,
    member_cpu: Vec<Duration>,
    /// Bytes member 1 sent and received.
    member1_up: u64,
    member1_down: u64,
    leader_up: u64,
    leader_down: u64,
    matches: usize,
    m: u32,
}

fn run(t: usize, l: u32, config: &MpsiConfig) -> Run {
    let n = 1usize << l;
    let mut rng = ChaCha20Rng::seed_from_u64(l as u64 * 100 + t as u64);
    let start = Instant::now();
    let mut leader_cpu = Duration::ZERO;
    let mut member_cpu = vec![Duration::ZERO; t - 1];
    let mut leader = timed(&mut leader_cpu, || {
        Leader::start(set(n / 2, n - n / 2, 0), t as u8, config.clone(), &mut rng).unwrap()
    });
    let mut members = Vec::new();
    let mut to_leader = VecDeque::new();
    for j in 1..t {
        let (m, hello) = timed(&mut member_cpu[j - 1], || {
            Member::start(set(n / 2, n - n / 2, j), config.clone(), &mut rng).unwrap()
        });
        members.push(m);
        to_leader.push_back((j, hello));
    }
    let (mut up, mut down) = (vec![0u64; t], vec![0u64; t]);
    let mut to_members: VecDeque<Outgoing> = VecDeque::new();
    let out = loop {
        while let Some(o) = to_members.pop_front() {
            down[o.member] += o.bytes.len() as u64;
            let reply = timed(&mut member_cpu[o.member - 1], || {
                members[o.member - 1].handle(&o.bytes).unwrap()
            });
            if let Some(r) = reply {
                to_leader.push_back((o.member, r));
            }
        }
        let (j, bytes) = to_leader.pop_front().expect("a message");
        up[j] += bytes.len() as u64;
        match timed(&mut leader_cpu, || leader.handle(j, &bytes).unwrap()) {
            LeaderStep::Send(o) => to_members.extend(o),
            LeaderStep::Done(out) => break out,
            _ => unreachable!(),
        }
    };
    let wall = start.elapsed();
    Run {
        wall,
        leader_cpu,
        member_cpu,
        member1_up: up[1],
        member1_down: down[1],
        leader_up: down.iter().sum(),
        leader_down: up.iter().sum(),
        matches: out.matches.len(),
        m: out.params.filter_bits,
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut threads, mut runs, mut rest) = (1usize, 1usize, Vec::new());
    while let Some(a) = args.next() {
        match a.as_str() {
            "--threads" => threads = args.next().and_then(|v| v.parse().ok()).expect("N"),
            "--runs" => runs = args.next().and_then(|v| v.parse().ok()).expect("R"),
            v => rest.push(v.parse::<usize>().expect("t n_log2 pairs")),
        }
    }
    let rows: Vec<(usize, u32)> = if rest.len() >= 2 {
        rest.chunks_exact(2).map(|c| (c[0], c[1] as u32)).collect()
    } else {
        [2, 4, 8]
            .iter()
            .flat_map(|&t| [10, 12, 16].map(|l| (t, l)))
            .collect()
    };
    let config = MpsiConfig::new(Threads::new(threads));
    println!("threads per party: {threads}, runs per row: {runs} (median wall time shown)");
    println!(
        "| t | n per party | wall s (min-max) | leader CPU s | member 1 CPU s | all members CPU s | leader MB sent / received | member MB sent / received | m |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (t, l) in rows {
        let mut all: Vec<Run> = (0..runs).map(|_| run(t, l, &config)).collect();
        all.sort_by_key(|r| r.wall);
        let (lo, hi) = (all[0].wall, all[all.len() - 1].wall);
        let r = &all[all.len() / 2];
        assert_eq!(r.matches, (1 << l) / 2);
        let s = |d: Duration| d.as_secs_f64();
        let members: Duration = r.member_cpu.iter().sum();
        println!(
            "| {t} | 2^{l} | {:.3} ({:.3}-{:.3}) | {:.3} | {:.3} | {:.3} | {:.1} / {:.1} | {:.1} / {:.1} | {} |",
            s(r.wall),
            s(lo),
            s(hi),
            s(r.leader_cpu),
            s(r.member_cpu[0]),
            s(members),
            r.leader_up as f64 / 1e6,
            r.leader_down as f64 / 1e6,
            r.member1_up as f64 / 1e6,
            r.member1_down as f64 / 1e6,
            r.m
        );
    }
}
