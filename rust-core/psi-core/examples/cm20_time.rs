use psi_core::{ItemSet, Threads};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use std::time::Instant;
fn main() {
    let n: usize = std::env::args().nth(1).unwrap().parse().unwrap();
    let ns: usize = std::env::args()
        .nth(2)
        .map(|s| s.parse().unwrap())
        .unwrap_or(n);
    let c = ItemSet::new((0..n).map(|i| format!("+1555{i:09}")));
    let s = std::sync::Arc::new(ItemSet::new(
        (n / 2..n / 2 + ns).map(|i| format!("+1555{i:09}")),
    ));
    for round in 0..2 {
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let t = Instant::now();
        let mut last = Instant::now();
        let (out, st) = psi_core::cm20::run_in_memory(
            c.clone(),
            s.clone(),
            &psi_core::cm20::Cm20Config::new(Threads::ONE),
            &mut rng,
            |p| {
                eprint!("{p:?} {:.0}ms; ", last.elapsed().as_secs_f64() * 1e3);
                last = Instant::now();
            },
        )
        .unwrap();
        eprintln!();
        println!(
            "cm20 {} matches {:.2}s bytes {} {}",
            out.matches.len(),
            t.elapsed().as_secs_f64(),
            st.client_to_server_bytes,
            st.server_to_client_bytes
        );
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let t = Instant::now();
        let (out, st) = psi_core::ot::run_in_memory(
            c.clone(),
            s.clone(),
            &psi_core::ot::OtConfig::new(Threads::ONE),
            &mut rng,
            |_| {},
        )
        .unwrap();
        println!(
            "kkrt {} matches {:.2}s bytes {} {} (round {round})",
            out.matches.len(),
            t.elapsed().as_secs_f64(),
            st.client_to_server_bytes,
            st.server_to_client_bytes
        );
    }
}
