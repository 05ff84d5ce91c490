//! OT-PSI's (or CM20-PSI's, with `cm20` first) label step, with and without label lanes
//! (ADR 0053, issue 33): balanced runs at 2^12, 2^16 and 2^20 (half of the client's items
//! match), every server entry labelled with 11 bytes (`user:123456`), both sides in one
//! process through the real message encoding.
//! For each size, interleaved: the run without labels, the run with lanes, and the label
//! step lanes replace (the OPRF label query of `n` elements answered by the server's key,
//! timed; the bucket fetch that follows it, counted from the cost model: at these sizes it
//! names every bucket). Medians of `runs` (default 3). Release mode:
//!
//! ```text
//! cargo run --release -p psi-core --example ot_lanes_time [-- [cm20] runs [log2 n ...]]
//! ```

use psi_core::cm20::{self, Cm20Config};
use psi_core::dh::{DhServer, Elements, ServerKey, message_type};
use psi_core::labels::LabelClient;
use psi_core::lanes::LaneLabels;
use psi_core::ot::{self, OtConfig};
use psi_core::{ItemSet, MatchOutput, Protocol, Threads};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use std::sync::Arc;
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One in-memory run of `protocol` (OT-PSI or CM20-PSI), with lanes when `labels` is
/// given: the output and the bytes both ways.
fn run(
    protocol: Protocol,
    client: &[Vec<u8>],
    set: &Arc<ItemSet>,
    threads: Threads,
    labels: Option<&Arc<LaneLabels>>,
    rng: &mut ChaCha20Rng,
) -> (MatchOutput, u64) {
    let client = ItemSet::new(client);
    match protocol {
        Protocol::Ot => {
            let mut config = OtConfig::new(threads);
            if let Some(l) = labels {
                config = config.with_label_lanes().with_lane_labels(l.clone());
            }
            let (out, t) =
                ot::run_in_memory(client, set.clone(), &config, rng, |_| {}).expect("OT-PSI run");
            (out, t.client_to_server_bytes + t.server_to_client_bytes)
        }
        Protocol::Cm20 => {
            let mut config = Cm20Config::new(threads);
            if let Some(l) = labels {
                config = config.with_label_lanes().with_lane_labels(l.clone());
            }
            let (out, t) = cm20::run_in_memory(client, set.clone(), &config, rng, |_| {})
                .expect("CM20-PSI run");
            (out, t.client_to_server_bytes + t.server_to_client_bytes)
        }
        other => panic!("{} has no label lanes", other.api_name()),
    }
}

fn main() {
    let protocol = match std::env::args().nth(1).as_deref() {
        Some("cm20") => Protocol::Cm20,
        _ => Protocol::Ot,
    };
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let runs = args.first().copied().unwrap_or(3).max(1);
    let logs: Vec<u32> = if args.len() > 1 {
        args[1..].iter().map(|&l| l as u32).collect()
    } else {
        vec![12, 16, 20]
    };
    let threads = Threads::new(2);
    println!("{}", protocol.api_name());
    println!(
        "n_c = n_s | plain run ms | lanes run ms | lane ms (run diff) | label query ms | \
         plain run MB | lane MB | label step MB (query + fetch) | lane / run time | \
         lane / run bytes | step / run time | step / run bytes"
    );
    println!("---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:");
    for l in logs {
        let n = 1usize << l;
        let server: Vec<Vec<u8>> = (0..n)
            .map(|i| format!("+4930{i:08}").into_bytes())
            .collect();
        let client: Vec<Vec<u8>> = (n / 2..n + n / 2)
            .map(|i| format!("+4930{i:08}").into_bytes())
            .collect();
        let set = Arc::new(ItemSet::new(server.clone()));
        let labels = Arc::new(
            LaneLabels::new((0..n).map(|i| Some(format!("user:{:06}", i % 1_000_000))))
                .expect("11-byte labels"),
        );
        let key = ServerKey::random(1, &mut ChaCha20Rng::seed_from_u64(7));
        let dh = DhServer::new(key, n, threads);
        let (mut plain_ms, mut lanes_ms, mut query_ms) = (Vec::new(), Vec::new(), Vec::new());
        let (mut plain_bytes, mut lane_bytes, mut query_bytes) = (0u64, 0u64, 0u64);
        for r in 0..runs {
            let mut rng = ChaCha20Rng::seed_from_u64(r as u64 + 100 * l as u64);
            let t = Instant::now();
            let (out, bytes) = run(protocol, &client, &set, threads, None, &mut rng);
            plain_ms.push(t.elapsed().as_secs_f64() * 1e3);
            assert_eq!(out.matches.len(), n / 2);
            plain_bytes = bytes;
            let t = Instant::now();
            let (out, bytes) = run(protocol, &client, &set, threads, Some(&labels), &mut rng);
            lanes_ms.push(t.elapsed().as_secs_f64() * 1e3);
            assert_eq!(out.labels.as_ref().map(|l| l.0.len()), Some(n / 2));
            // CM20-PSI's coded outputs vary a few bytes from run to run: the lanes' bytes
            // are the spec's, `2 + n_s (1 + Λ)` (checked by the tests).
            lane_bytes = match protocol {
                Protocol::Cm20 => cm20::sizes::lanes(n as u64, 11),
                _ => bytes - plain_bytes,
            };
            // The label step lanes replace: the query over label_slots(n) = n elements
            // (the matches, then dummies), the server's evaluation, the client's finish
            // (which builds the fetch request).
            let matched: Vec<Vec<u8>> = out.matches.iter().map(|m| m.item.clone()).collect();
            let t = Instant::now();
            let (mut lc, query) = LabelClient::start_query(&matched, n, 1, 0, threads, &mut rng)
                .expect("label query");
            let answer = dh
                .evaluate(&Elements::from_bytes(&query, message_type::QUERY).expect("query"))
                .expect("evaluation");
            let fetch = lc.handle(&answer, &mut rng).expect("evaluation handled");
            query_ms.push(t.elapsed().as_secs_f64() * 1e3);
            drop(fetch);
            query_bytes = (query.len() + answer.len()) as u64;
        }
        // The fetch after the query: at K = 2^b every bucket, all records (the model's).
        let w = psi_core::cost::Workload::new(n as u64, n as u64).with_limits(n as u64, 8 << 20);
        let with_step = psi_core::cost::cost(protocol, &w).expect("cost");
        let no_labels = psi_core::cost::cost(protocol, &w.with_labels(false)).expect("cost");
        let step_bytes = with_step.bytes_up() + with_step.bytes_down()
            - no_labels.bytes_up()
            - no_labels.bytes_down();
        let fetch_bytes = step_bytes - query_bytes;
        let (p, q) = (median(plain_ms), median(query_ms));
        let lanes = median(lanes_ms);
        let mb = |b: u64| b as f64 / 1e6;
        println!(
            "2^{l} | {p:.1} | {lanes:.1} | {:.1} | {q:.1} | {:.2} | {:.2} | {:.2} ({:.2} + {:.2}) | \
             {:.3} | {:.3} | {:.3} | {:.3}",
            lanes - p,
            mb(plain_bytes),
            mb(lane_bytes),
            mb(query_bytes + fetch_bytes),
            mb(query_bytes),
            mb(fetch_bytes),
            (lanes - p) / p,
            lane_bytes as f64 / plain_bytes as f64,
            q / p,
            (query_bytes + fetch_bytes) as f64 / plain_bytes as f64,
        );
    }
    println!(
        "(medians of {runs} runs, interleaved; {} threads; the label query's fetch is counted, not run)",
        threads.get()
    );
}
