//! Times CM20-PSI in memory, each party's own steps separately (no I/O, no HTTP):
//! `cargo run --release -p psi-core --example cm20time -- [log2 n] [threads] [runs]`
//! (defaults: 20, 1, 1). Both sets have `n` items, half of them shared. Prints one line
//! per run: client ms (start and every `handle`), server ms (`new` and every `handle`),
//! their total, and the number of matches (checked against the expected overlap).
//!
//! Used to compare two builds interleaved (docs/benchmarks.md, "CM20-PSI beside OT-PSI").

use psi_core::cm20::{Cm20Client, Cm20Config, Cm20Server};
use psi_core::{ItemSet, Threads};
use psi_core::chunked::ClientStep;
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use std::time::{Duration, Instant};

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
        let (mut client_t, mut server_t) = (Duration::ZERO, Duration::ZERO);
        let t = Instant::now();
        let (mut client, mut request) =
            Cm20Client::start(client_set, config.clone(), &mut rng).expect("start");
        client_t += t.elapsed();
        let t = Instant::now();
        let mut server = Cm20Server::new(server_set, config.clone(), &mut rng).expect("server");
        server_t += t.elapsed();
        let output = loop {
            let t = Instant::now();
            let response = server.handle(&request).expect("server step");
            server_t += t.elapsed();
            let t = Instant::now();
            let step = client.handle(&response).expect("client step");
            client_t += t.elapsed();
            match step {
                ClientStep::Send(next) => request = next,
                ClientStep::Done(out) => break out,
            }
        };
        assert_eq!(output.matches.len(), n / 2, "matches");
        let (c, s) = (client_t.as_secs_f64() * 1e3, server_t.as_secs_f64() * 1e3);
        println!(
            "n=2^{log_n} threads={threads} client_ms={c:.1} server_ms={s:.1} total_ms={:.1} matches={}",
            c + s,
            output.matches.len()
        );
    }
}
