//! Sync mode at scale (issue 37, ADR 0047 §3, docs/protocol/sync.md): for registries of
//! 10^6 and 10^7 entries (or the sizes given), the first sync (a snapshot), a day's delta
//! at 0.1% churn (half additions, half removals), and runs of 1, 100 and 1,000 contacts
//! with labels (every entry labelled with 11 bytes), each measured through the real
//! messages and printed beside the formula of `psi_core::sync::sizes`, with the formula's
//! value at 10^8.
//!
//! The registry's OPRF outputs are uniformly random 64-byte strings standing in for
//! `Finalize` outputs under the server's key (which are pseudorandom): computing 10^7
//! real evaluations would take minutes and change no byte count. The real DH-PSI path
//! is tested end to end in `tests/sync.rs`. Query and evaluation sizes are the DH-PSI
//! messages' (`17 + 32 n` each). Release mode:
//!
//! ```text
//! cargo run --release -p psi-core --example sync_scale [-- [registry sizes ...]]
//! ```

use psi_core::labels::{self, fetch_buckets};
use psi_core::sync::{
    self, ConfirmClient, ConfirmStore, Delta, Snapshot, SyncedSet, sizes, sync_width,
};
use rand_chacha::ChaCha20Rng;
use rand_core::{Rng, SeedableRng};
use std::time::Instant;

const LABEL: &str = "user:123456"; // 11 bytes
const BUCKET_SIZE: usize = 8; // the server's default label bucket size

fn random_outputs(rng: &mut ChaCha20Rng, n: usize) -> Vec<[u8; 64]> {
    let mut out = vec![[0u8; 64]; n];
    for o in &mut out {
        rng.fill_bytes(o);
    }
    out
}

fn mb(bytes: f64) -> String {
    if bytes >= 1e5 {
        format!("{:.2} MB", bytes / 1e6)
    } else {
        format!("{:.1} KB", bytes / 1e3)
    }
}

fn row(what: &str, r: u64, measured: f64, predicted: f64, at_1e8: f64, note: &str) {
    println!(
        "| {what} | 10^{:.0} | {} | {} | {:.3} | {} | {note} |",
        (r as f64).log10(),
        mb(measured),
        mb(predicted),
        measured / predicted,
        mb(at_1e8)
    );
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("registry sizes are integers"))
        .collect();
    let sizes_to_run = if args.is_empty() {
        vec![1_000_000, 10_000_000]
    } else {
        args
    };
    let big = 100_000_000u64;
    let w_big = sync_width(big, sync::DEFAULT_EXTRA_BITS);
    let b_big = labels::bucket_bits(big as usize, BUCKET_SIZE);
    println!("| what | R | measured | formula | measured / formula | formula at 10^8 | notes |");
    println!("|---|---:|---:|---:|---:|---:|---|");
    for r in sizes_to_run {
        let mut rng = ChaCha20Rng::seed_from_u64(r);
        let w = sync_width(r, sync::DEFAULT_EXTRA_BITS);
        let t = Instant::now();
        let outputs = random_outputs(&mut rng, r as usize);
        let gen_s = t.elapsed().as_secs_f64();

        // First sync.
        let t = Instant::now();
        let snap = Snapshot::build(1, 1, w, &outputs);
        let snap_bytes = snap.to_bytes();
        let build_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let mut synced =
            SyncedSet::from_snapshot(Snapshot::from_bytes(&snap_bytes).unwrap()).unwrap();
        let load_s = t.elapsed().as_secs_f64();
        row(
            "first sync (snapshot)",
            r,
            snap_bytes.len() as f64,
            sizes::snapshot_bytes(r, w),
            sizes::snapshot_bytes(big, w_big),
            &format!(
                "w = {w}, {:.2} bits per entry; built in {build_s:.2} s, read and checked by the client in {load_s:.2} s",
                snap_bytes.len() as f64 * 8.0 / r as f64
            ),
        );

        // A day's delta: 0.1% of the entries changed, half removed, half added.
        let churn = (r / 2_000) as usize;
        let removed: Vec<[u8; 64]> = outputs[..churn].to_vec();
        let added = random_outputs(&mut rng, churn);
        let delta = Delta::build(1, 1, 2, w, &added, &removed);
        let delta_bytes = delta.to_bytes();
        let t = Instant::now();
        synced
            .offer(Delta::from_bytes(&delta_bytes).unwrap())
            .unwrap();
        let apply_s = t.elapsed().as_secs_f64();
        assert_eq!(synced.version(), 2);
        row(
            "a day later: delta at 0.1% churn",
            r,
            delta_bytes.len() as f64,
            sizes::delta_bytes(churn as u64, churn as u64, w),
            sizes::delta_bytes(big / 2_000, big / 2_000, w_big),
            &format!("{churn} added, {churn} removed; applied in {apply_s:.2} s"),
        );

        // The registry at version 2, every entry labelled.
        let mut current: Vec<[u8; 64]> = outputs[churn..].to_vec();
        current.extend_from_slice(&added);
        drop(outputs);
        let t = Instant::now();
        let store = ConfirmStore::build(
            1,
            2,
            current.iter().map(|o| (o, Some(LABEL))),
            BUCKET_SIZE,
            &mut rng,
        );
        let store_s = t.elapsed().as_secs_f64();
        let b = store.bucket_bits();
        for n in [1usize, 100, 1_000] {
            // Half of the contacts registered (at least one), the rest not.
            let members = n.div_ceil(2);
            let mut contacts: Vec<[u8; 64]> = current[..members].to_vec();
            contacts.extend(random_outputs(&mut rng, n - members));
            let t = Instant::now();
            let (client, request) =
                ConfirmClient::start(&contacts, &synced, b, current.len() as u64, &mut rng)
                    .unwrap();
            let lookup_s = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let response = store.answer(&request, n).unwrap();
            let answer_s = t.elapsed().as_secs_f64();
            let conf = client.finish(&response).unwrap();
            assert_eq!(conf.matches.len(), members);
            assert!(
                conf.matches
                    .iter()
                    .all(|m| m.label.as_deref() == Some(LABEL))
            );
            let elements = 2 * (17 + 32 * n);
            let measured = (elements + request.len() + response.len()) as f64;
            row(
                &format!("one run, {n} contacts, labels"),
                r,
                measured,
                sizes::run_bytes(
                    n as u64,
                    current.len() as u64,
                    b,
                    1.0,
                    LABEL.len() as f64,
                    sizes::candidate_buckets(
                        n as u64,
                        members as u64,
                        sync::candidate_rate(r, w),
                        b,
                    ),
                ),
                sizes::run_bytes(
                    n as u64,
                    big,
                    b_big,
                    1.0,
                    LABEL.len() as f64,
                    sizes::candidate_buckets(
                        n as u64,
                        members as u64,
                        sync::candidate_rate(big, w_big),
                        b_big,
                    ),
                ),
                &format!(
                    "b = {b}, K = {}, {} candidates, {} matches; candidates found in {lookup_s:.2} s, server answer {:.1} ms",
                    fetch_buckets(n, b),
                    conf.candidates,
                    conf.matches.len(),
                    answer_s * 1e3
                ),
            );
        }
        eprintln!(
            "R = {r}: outputs generated in {gen_s:.1} s; confirmation store {:.0} MB built in {store_s:.1} s; the client holds {} of coded tags",
            store.record_bytes() as f64 / 1e6,
            mb(synced.coded_bytes() as f64)
        );
    }
    println!();
    println!(
        "At 10^8 the formula uses w = {w_big} and b = {b_big} ({:.1} entries per bucket).",
        big as f64 / f64::from(1u32 << b_big)
    );
}
