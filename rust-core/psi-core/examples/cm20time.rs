//! Times CM20-PSI in memory, each party's own steps separately (no I/O, no HTTP):
//! `cargo run --release -p psi-core --example cm20time -- [log2 n] [threads] [runs]`
//! (defaults: 20, 1, 1). Both sets have `n` items, half of them shared. Prints one line
//! per run: client ms (start and every `handle`), server ms (`new` and every `handle`),
//! their total, and the number of matches (checked against the expected overlap). On Linux
//! it also prints the CPU ms of each party's steps (all of the process's threads, from
//! `/proc/self/task/*/schedstat`), which a busy machine inflates less than wall time.
//!
//! Used to compare two builds interleaved (docs/benchmarks.md, "CM20-PSI beside OT-PSI").

use psi_core::chunked::ClientStep;
use psi_core::cm20::{Cm20Client, Cm20Config, Cm20Server};
use psi_core::{ItemSet, Threads};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use std::time::{Duration, Instant};

/// Nanoseconds on CPU of all of this process's threads so far (0 where unavailable).
fn cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Wall and CPU time of a sequence of steps.
#[derive(Default)]
struct Clock {
    wall: Duration,
    cpu_ns: u64,
}

impl Clock {
    fn time<T>(&mut self, f: impl FnOnce() -> T) -> T {
        let (t, c) = (Instant::now(), cpu_ns());
        let out = f();
        self.wall += t.elapsed();
        self.cpu_ns += cpu_ns().saturating_sub(c);
        out
    }
    fn ms(&self) -> (f64, f64) {
        (self.wall.as_secs_f64() * 1e3, self.cpu_ns as f64 / 1e6)
    }
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numeric arguments: log2 n, threads, runs"))
        .collect();
    let log_n = args.first().copied().unwrap_or(20);
    let threads = args.get(1).copied().unwrap_or(1);
    let runs = args.get(2).copied().unwrap_or(1);
    let n = 1usize << log_n;
    let config = Cm20Config::new(Threads::new(threads));
    for run in 0..runs {
        let client_set = ItemSet::new((0..n as u64).map(|i| format!("c{i}").into_bytes()));
        // The first half of the server's items are the client's.
        let server_set = ItemSet::new((0..n as u64).map(|i| {
            if i < n as u64 / 2 {
                format!("c{i}").into_bytes()
            } else {
                format!("s{i}").into_bytes()
            }
        }));
        let mut rng = ChaCha20Rng::seed_from_u64(run as u64);
        let (mut client_t, mut server_t) = (Clock::default(), Clock::default());
        let (mut client, mut request) = client_t
            .time(|| Cm20Client::start(client_set, config.clone(), &mut rng))
            .expect("start");
        let mut server = server_t
            .time(|| Cm20Server::new(server_set, config.clone(), &mut rng))
            .expect("server");
        let output = loop {
            let response = server_t
                .time(|| server.handle(&request))
                .expect("server step");
            match client_t
                .time(|| client.handle(&response))
                .expect("client step")
            {
                ClientStep::Send(next) => request = next,
                ClientStep::Done(out) => break out,
            }
        };
        let ((c, c_cpu), (s, s_cpu)) = (client_t.ms(), server_t.ms());
        println!(
            "n=2^{log_n} threads={threads} client_ms={c:.1} server_ms={s:.1} total_ms={:.1} \
             client_cpu_ms={c_cpu:.1} server_cpu_ms={s_cpu:.1} total_cpu_ms={:.1} matches={}",
            c + s,
            c_cpu + s_cpu,
            output.matches.len()
        );
        assert_eq!(output.matches.len(), n / 2, "matches");
    }
}
