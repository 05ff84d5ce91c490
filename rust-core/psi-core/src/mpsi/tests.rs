//! Unit tests of the whole run in memory (the scenario tests are `tests/mpsi.rs`).

use super::*;
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;

fn set(prefix: &str, r: std::ops::Range<usize>) -> ItemSet {
    ItemSet::new(r.map(|i| format!("{prefix}{i}")))
}

#[test]
fn three_parties_find_the_common_items() {
    let config = MpsiConfig::new(Threads::ONE).with_max_chunk_bytes(20_000);
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let (out, traffic) = run_in_memory(
        set("x", 0..100),
        vec![set("x", 50..300), set("x", 80..120)],
        &config,
        &mut rng,
        |_, _, _| {},
    )
    .unwrap();
    let got: Vec<usize> = out.matches.iter().map(|m| m.index).collect();
    assert_eq!(got, (80..100).collect::<Vec<_>>());
    assert_eq!(out.member_items, vec![250, 40]);
    assert!(traffic.messages > 6);
}
