//! `psi bench --labels`: what the label step costs on the wire and what a fetched bucket
//! hides, for a few session sizes against registries of 10^5 and 10^6 labelled entries,
//! on the server's default layout (docs/protocol/labels.md §5-§7,
//! docs/adr/0033-a-label-for-every-match.md).
//!
//! The records, the fetch request and the fetch response are the real ones
//! ([`LabelStore`], [`LabelClient`]); the outputs are random 64-byte strings instead of
//! OPRF outputs (computing 10^6 of those takes minutes and changes no byte count), and the
//! OT-PSI label query and its evaluation are counted from their fixed sizes
//! (`17 + 32 k` each, `k` = the label slots).

use psi_core::labels::{self, LabelClient, LabelStep, LabelStore};
use psi_core::output::MatchedOutputs;
use rand_chacha::ChaCha20Rng;
use rand_core::{Rng, SeedableRng};
use std::time::Instant;

/// The label of entry `i`: 11 bytes, like a short account id (`user:123456`).
fn label(i: usize) -> String {
    format!("user:{:06}", i % 1_000_000)
}

pub fn run(quick: bool) -> Result<(), String> {
    let registries: &[usize] = if quick {
        &[20_000]
    } else {
        &[100_000, 1_000_000]
    };
    let sessions: &[usize] = if quick {
        &[1, 100, 1_000]
    } else {
        &[1, 100, 1_000, 10_000]
    };
    let bucket_size = psi_server::Config::default().label_bucket_size;
    let mut rng = ChaCha20Rng::seed_from_u64(0x1abe1);
    println!(
        "label step, default layout ({bucket_size} records per bucket targeted), 11-byte labels; \
         bytes are request + response bodies; OT-PSI adds the label query and its evaluation"
    );
    println!(
        "| labelled entries | contacts n | matched | buckets 2^b | fetched K | entries per fetched bucket | entries hiding the matches | labels opened | DH-PSI bytes | OT-PSI bytes | fetch+open ms |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &r in registries {
        let outputs: Vec<[u8; 64]> = (0..r)
            .map(|_| {
                let mut o = [0u8; 64];
                rng.fill_bytes(&mut o);
                o
            })
            .collect();
        let names: Vec<String> = (0..r).map(label).collect();
        let store = LabelStore::build(
            outputs.iter().zip(names.iter().map(String::as_str)),
            bucket_size,
            &mut rng,
        );
        let bits = store.bucket_bits();
        for &n in sessions {
            // Nothing matched, 70% matched (a well-registered address book), all matched.
            let mut counts = vec![0, n * 7 / 10, n];
            counts.dedup();
            for matched in counts.into_iter().filter(|&m| m <= r) {
                let start = Instant::now();
                let mine = MatchedOutputs::from_outputs(outputs[..matched].to_vec());
                let (mut client, request) = LabelClient::from_outputs(mine, n, bits, &mut rng)
                    .map_err(|e| format!("label request: {e}"))?;
                let k = labels::fetch_buckets(n, bits);
                let response = store
                    .answer_fetch(&request, k)
                    .map_err(|e| format!("label fetch: {e}"))?;
                let opened = match client.handle(&response, &mut rng) {
                    Ok(LabelStep::Done(l)) => l,
                    Ok(_) => return Err("the label step wanted another round".into()),
                    Err(e) => return Err(format!("label response: {e}")),
                };
                let ms = start.elapsed().as_secs_f64() * 1e3;
                let got = opened
                    .iter()
                    .enumerate()
                    .filter(|(i, l)| l.as_deref() == Some(names[*i].as_str()))
                    .count();
                if got != matched {
                    return Err(format!("{got} of {matched} labels opened"));
                }
                let dh = (request.len() + response.len()) as u64;
                let slots = labels::label_slots(n) as u64;
                let ot =
                    dh + psi_core::dh::sizes::query(slots) + psi_core::dh::sizes::evaluation(slots);
                let per_bucket = r as f64 / (1u64 << bits) as f64;
                println!(
                    "| {r} | {n} | {matched} | {} | {k} | {per_bucket:.1} | {:.0} | {got} | {dh} | {ot} | {ms:.1} |",
                    1u64 << bits,
                    per_bucket * k as f64,
                );
            }
        }
    }
    Ok(())
}
