//! Times group PSI in process: t = 2, 4, 8 parties at 2^10, 2^12 and 2^16 items each (half
//! of every set common to all), on one worker thread per party's steps, all parties on one
//! thread of this process (the time is the sum of every party's computation; nothing is
//! sent over a network). Run in release mode:
//!
//! ```text
//! cargo run --release -p psi-core --example mpsi_time [-- t n_log2 ...pairs]
//! ```
//!
//! IOP18 Table 3 anchor: 2 parties at 2^16, 12.99 s with the star topology (their Java, one
//! machine per party, 0.1 ms LAN).

use psi_core::mpsi::{self, MpsiConfig};
use psi_core::{ItemSet, Threads};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use std::time::Instant;

fn set(common: usize, own: usize, party: usize) -> ItemSet {
    ItemSet::new(
        (0..common)
            .map(|i| format!("+4930{i:08}"))
            .chain((0..own).map(|i| format!("+4940{party:02}{i:08}"))),
    )
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let runs: Vec<(usize, u32)> = if args.len() >= 2 {
        args.chunks_exact(2).map(|c| (c[0], c[1] as u32)).collect()
    } else {
        [2, 4, 8]
            .iter()
            .flat_map(|&t| [10, 12, 16].map(|l| (t, l)))
            .collect()
    };
    let config = MpsiConfig::new(Threads::ONE);
    println!("parties  n/party   seconds  MB leader->members  MB members->leader  m");
    for (t, l) in runs {
        let n = 1usize << l;
        let mut rng = ChaCha20Rng::seed_from_u64(l as u64 * 100 + t as u64);
        let members: Vec<ItemSet> = (1..t).map(|j| set(n / 2, n - n / 2, j)).collect();
        let leader = set(n / 2, n - n / 2, 0);
        let start = Instant::now();
        let (out, traffic) =
            mpsi::run_in_memory(leader, members, &config, &mut rng, |_, _, _| {}).expect("run");
        let secs = start.elapsed().as_secs_f64();
        assert_eq!(out.matches.len(), n / 2);
        println!(
            "{t:>7}  2^{l:<6} {secs:>9.2}  {:>18.1}  {:>18.1}  {}",
            traffic.leader_to_members_bytes as f64 / 1e6,
            traffic.members_to_leader_bytes as f64 / 1e6,
            out.params.filter_bits
        );
    }
}
