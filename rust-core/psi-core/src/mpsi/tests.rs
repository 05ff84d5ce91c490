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

/// The OT row hash is the spec's §3.5 formula: one 64-byte block of the link (length byte,
/// domain separator, sid, zeros), then `BE32 p || x`.
#[test]
fn row_hash_is_the_spec_formula() {
    use sha2::{Digest, Sha256};
    let (sid, x) = ([3u8; 32], [9u8; 16]);
    let mut h = Sha256::new();
    h.update([14u8]);
    h.update(b"PSI-MPSI-v1 ot");
    h.update(sid);
    h.update([0u8; 17]);
    h.update(77u32.to_be_bytes());
    h.update(x);
    let d = h.finalize();
    let want = u64::from_le_bytes(d[..8].try_into().unwrap());
    let rh = RowHash::new(&sid);
    assert_eq!(rh.cell(77, &x, u64::MAX), want);
    assert_eq!(
        rh.cell(77, &x, params::cell_mask(7)),
        want & 0xff_ffff_ffff_ffff
    );
    assert_ne!(rh.cell(78, &x, u64::MAX), want);
}
