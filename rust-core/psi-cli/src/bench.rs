//! `psi bench`: per-phase times, bytes on the wire and the analytic bounds.

use crate::measure::{ms, peak_rss_bytes, thousands, timed};
use crate::runner::{os_rng, run_dh};
use curve25519_dalek::ristretto::RistrettoPoint;
use curve25519_dalek::scalar::Scalar;
use psi_core::dh::sizes;
use std::time::Duration;

/// Items shaped like normalized phone numbers: `prefix` keeps sets disjoint.
fn items(prefix: &str, range: std::ops::Range<usize>) -> Vec<Vec<u8>> {
    range
        .map(|i| format!("+{prefix}{i:010}").into_bytes())
        .collect()
}

/// Client and server sets of the given sizes sharing `overlap` items.
fn sets(n_c: usize, n_s: usize, overlap: usize) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut client = items("1", 0..overlap);
    client.extend(items("2", 0..n_c - overlap));
    let mut server = items("1", 0..overlap);
    server.extend(items("3", 0..n_s - overlap));
    (client, server)
}

/// Median over 7 batches of the per-call cost of `f` on 2000 inputs, one thread.
fn unit_cost<T, U>(inputs: &[T], f: impl Fn(&T) -> U) -> Duration {
    let mut samples: Vec<Duration> = (0..7)
        .map(|_| {
            let (out, t) = timed(|| inputs.iter().map(&f).collect::<Vec<U>>());
            std::hint::black_box(out);
            t.wall / inputs.len() as u32
        })
        .collect();
    samples.sort();
    samples[samples.len() / 2]
}

/// Costs of the group operations the protocol cannot avoid.
struct UnitCosts {
    /// Variable-base scalar multiplication.
    mult: Duration,
    /// RFC 9497 HashToGroup (expand_message_xmd + two Elligator maps).
    hash_to_group: Duration,
    /// Decoding a received element (an inverse square root).
    decode: Duration,
}

fn unit_costs() -> Result<UnitCosts, String> {
    let mut rng = os_rng()?;
    let points: Vec<RistrettoPoint> = (0..2000)
        .map(|_| RistrettoPoint::random(&mut rng))
        .collect();
    let encoded: Vec<_> = points.iter().map(|p| p.compress()).collect();
    let inputs = items("9", 0..2000);
    let s = Scalar::random(&mut rng);
    Ok(UnitCosts {
        mult: unit_cost(&points, |p| s * p),
        hash_to_group: unit_cost(&inputs, |x| psi_core::oprf::hash_to_group(x)),
        decode: unit_cost(&encoded, |c| c.decompress()),
    })
}

pub fn run(quick: bool, thread_counts: &[usize]) -> Result<(), String> {
    let balanced: &[usize] = if quick {
        &[1 << 8, 1 << 10]
    } else {
        &[1 << 10, 1 << 12, 1 << 16]
    };
    let unbalanced: &[usize] = if quick {
        &[10_000]
    } else {
        &[10_000, 100_000, 1_000_000]
    };
    let costs = unit_costs()?;
    let mult = costs.mult;
    println!("# psi bench: DH-PSI (RFC 9497 OPRF, ristretto255-SHA512)");
    println!();
    println!(
        "Unit costs, 1 thread, median of 7 x 2000: scalar multiplication {:.1} us, HashToGroup {:.1} us, element decoding {:.1} us",
        mult.as_secs_f64() * 1e6,
        costs.hash_to_group.as_secs_f64() * 1e6,
        costs.decode.as_secs_f64() * 1e6,
    );
    println!(
        "Scalar multiplications per run: 2 n_c (client blind + unblind) + n_c (server evaluate) + n_s (server set)."
    );
    println!(
        "Full floor adds what the RFC also mandates: HashToGroup on n_c + n_s items and decoding 2 n_c received elements."
    );
    println!(
        "Balanced runs share half their items; unbalanced runs share 100 of the client's 1,000."
    );
    println!();
    println!(
        "| n_c | n_s | threads | server encode set ms | client blind ms | server evaluate ms | client finalize ms | client match ms | total CPU s | mults x cost s | CPU / bound | full floor s | CPU / floor | bytes c->s | bytes s->c | spec bytes | bytes / spec | peak RSS MB |"
    );
    println!(
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let mut cases: Vec<(usize, usize, usize)> = balanced.iter().map(|&n| (n, n, n / 2)).collect();
    cases.extend(unbalanced.iter().map(|&n| (1000, n, 100)));
    for &(n_c, n_s, overlap) in &cases {
        let (client, server) = sets(n_c, n_s, overlap);
        for &t in thread_counts {
            let r = run_dh(&client, &server, t)?;
            if r.output.matches.len() != overlap {
                return Err(format!(
                    "wrong result: {} matches, expected {overlap}",
                    r.output.matches.len()
                ));
            }
            let cpu = r.encode.cpu + r.blind.cpu + r.evaluate.cpu + r.finalize.cpu + r.matching.cpu;
            let mults = 3 * n_c as u64 + n_s as u64;
            let bound = mult * mults as u32;
            let floor =
                bound + costs.hash_to_group * (n_c + n_s) as u32 + costs.decode * (2 * n_c) as u32;
            let spec = sizes::query(n_c as u64)
                + sizes::evaluation(n_c as u64)
                + sizes::encoded_set(n_s as u64, r.truncation_bits);
            let sent = r.query_bytes as u64;
            let received = (r.evaluation_bytes + r.set_bytes) as u64;
            println!(
                "| {} | {} | {t} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.3} | {:.2} | {:.3} | {} | {} | {} | {:.4} | {} |",
                thousands(n_c as u64),
                thousands(n_s as u64),
                ms(r.encode.wall),
                ms(r.blind.wall),
                ms(r.evaluate.wall),
                ms(r.finalize.wall),
                ms(r.matching.wall),
                cpu.as_secs_f64(),
                bound.as_secs_f64(),
                cpu.as_secs_f64() / bound.as_secs_f64(),
                floor.as_secs_f64(),
                cpu.as_secs_f64() / floor.as_secs_f64(),
                thousands(sent),
                thousands(received),
                thousands(spec),
                (sent + received) as f64 / spec as f64,
                peak_rss_bytes() / (1 << 20),
            );
        }
    }
    println!();
    println!(
        "Columns: times are wall-clock per phase; total CPU is user+system time of all phases on all threads;"
    );
    println!(
        "spec bytes is docs/protocol/dh-psi.md's formula (17 + 32 n_c each way, 27 + expected Golomb-Rice size of the set);"
    );
    println!("peak RSS is the process high-water mark so far (it only grows down the table).");
    Ok(())
}
