//! `psi bench --lanes`: OT-PSI's and CM20-PSI's labels with and without label lanes
//! (ADR 0053, issue 33): balanced runs at 2^12, 2^16 and 2^20 (half of the client's items
//! match; with `--quick` one run at 2^10), every server entry labelled with 11 bytes
//! (`user:123456`), both sides in one process through the real message encoding.
//!
//! For each protocol and size, interleaved: the run without labels, the run with lanes,
//! and the label step lanes replace (the OPRF label query of `n` elements answered by the
//! server's key, timed; the bucket fetch that follows it, counted from the cost model: at
//! these sizes it names every bucket). Medians of the runs.

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

/// The protocols with label lanes.
pub const PROTOCOLS: [Protocol; 2] = [Protocol::Ot, Protocol::Cm20];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One in-memory run of `protocol` (OT-PSI or CM20-PSI), with lanes when `labels` is
/// given: the output and the bytes both ways.
fn run_once(
    protocol: Protocol,
    client: &[Vec<u8>],
    set: &Arc<ItemSet>,
    threads: Threads,
    labels: Option<&Arc<LaneLabels>>,
    rng: &mut ChaCha20Rng,
) -> Result<(MatchOutput, u64), String> {
    let client = ItemSet::new(client);
    let (out, up, down) = match protocol {
        Protocol::Ot => {
            let mut config = OtConfig::new(threads);
            if let Some(l) = labels {
                config = config.with_label_lanes().with_lane_labels(l.clone());
            }
            let (out, t) = ot::run_in_memory(client, set.clone(), &config, rng, |_| {})
                .map_err(|e| format!("OT-PSI run: {e}"))?;
            (out, t.client_to_server_bytes, t.server_to_client_bytes)
        }
        Protocol::Cm20 => {
            let mut config = Cm20Config::new(threads);
            if let Some(l) = labels {
                config = config.with_label_lanes().with_lane_labels(l.clone());
            }
            let (out, t) = cm20::run_in_memory(client, set.clone(), &config, rng, |_| {})
                .map_err(|e| format!("CM20-PSI run: {e}"))?;
            (out, t.client_to_server_bytes, t.server_to_client_bytes)
        }
        other => return Err(format!("{} has no label lanes", other.api_name())),
    };
    Ok((out, up + down))
}

/// Prints the table for `protocols` (those of [`PROTOCOLS`]); `quick`: one run at 2^10.
pub fn run(quick: bool, protocols: &[Protocol], threads: usize) -> Result<(), String> {
    let (runs, logs): (usize, &[u32]) = if quick {
        (1, &[10])
    } else {
        (3, &[12, 16, 20])
    };
    if let Some(p) = protocols.iter().find(|p| !PROTOCOLS.contains(p)) {
        return Err(format!(
            "{} has no label lanes (--lanes runs ot and cm20)",
            p.api_name()
        ));
    }
    let threads = Threads::new(threads);
    println!(
        "label lanes (ADR 0053): balanced runs, half matched, 11-byte labels, in one process \
         through the message encoding; the label step is the one lanes replace"
    );
    println!(
        "| protocol | n_c = n_s | plain run ms | lanes run ms | lanes add ms | label query ms | \
         plain run MB | lane MB | label step MB (query + fetch) | lanes / run time | \
         lanes / run bytes | step / run time | step / run bytes |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &protocol in protocols {
        for &l in logs {
            row(protocol, l, runs, threads)?;
        }
    }
    println!(
        "(medians of {runs} run(s), interleaved; {} threads; the label query's fetch is counted, not run)",
        threads.get()
    );
    Ok(())
}

fn row(protocol: Protocol, l: u32, runs: usize, threads: Threads) -> Result<(), String> {
    let n = 1usize << l;
    let server: Vec<Vec<u8>> = (0..n)
        .map(|i| format!("+4930{i:08}").into_bytes())
        .collect();
    let client: Vec<Vec<u8>> = (n / 2..n + n / 2)
        .map(|i| format!("+4930{i:08}").into_bytes())
        .collect();
    let set = Arc::new(ItemSet::new(server));
    let labels = Arc::new(
        LaneLabels::new((0..n).map(|i| Some(format!("user:{:06}", i % 1_000_000))))
            .map_err(|e| format!("lane labels: {e}"))?,
    );
    let key = ServerKey::random(1, &mut ChaCha20Rng::seed_from_u64(7));
    let dh = DhServer::new(key, n, threads);
    let (mut plain_ms, mut lanes_ms, mut query_ms) = (Vec::new(), Vec::new(), Vec::new());
    let (mut plain_bytes, mut lane_bytes, mut query_bytes) = (0u64, 0u64, 0u64);
    for r in 0..runs {
        let mut rng = ChaCha20Rng::seed_from_u64(r as u64 + 100 * u64::from(l));
        let t = Instant::now();
        let (out, bytes) = run_once(protocol, &client, &set, threads, None, &mut rng)?;
        plain_ms.push(t.elapsed().as_secs_f64() * 1e3);
        if out.matches.len() != n / 2 {
            return Err(format!("{} matches, expected {}", out.matches.len(), n / 2));
        }
        plain_bytes = bytes;
        let t = Instant::now();
        let (out, bytes) = run_once(protocol, &client, &set, threads, Some(&labels), &mut rng)?;
        lanes_ms.push(t.elapsed().as_secs_f64() * 1e3);
        if out.labels.as_ref().map(|l| l.0.len()) != Some(n / 2) {
            return Err("the lanes run did not give every match its label".into());
        }
        // CM20-PSI's coded outputs vary a few bytes from run to run: its lanes' bytes are
        // the spec's, `2 + n_s (1 + Λ)` (checked by psi-core's tests).
        lane_bytes = match protocol {
            Protocol::Cm20 => cm20::sizes::lanes(n as u64, 11),
            _ => bytes.saturating_sub(plain_bytes),
        };
        // The label step lanes replace: the query over label_slots(n) = n elements (the
        // matches, then dummies), the server's evaluation, the client's finish (which
        // builds the fetch request).
        let matched: Vec<Vec<u8>> = out.matches.iter().map(|m| m.item.clone()).collect();
        let t = Instant::now();
        let (mut lc, query) = LabelClient::start_query(&matched, n, 1, 0, threads, &mut rng)
            .map_err(|e| format!("label query: {e}"))?;
        let answer = dh
            .evaluate(
                &Elements::from_bytes(&query, message_type::QUERY)
                    .map_err(|e| format!("label query: {e}"))?,
            )
            .map_err(|e| format!("evaluation: {e}"))?;
        lc.handle(&answer, &mut rng)
            .map_err(|e| format!("evaluation: {e}"))?;
        query_ms.push(t.elapsed().as_secs_f64() * 1e3);
        query_bytes = (query.len() + answer.len()) as u64;
    }
    // The fetch after the query: at K = 2^b every bucket, all records (the model's).
    let w = psi_core::cost::Workload::new(n as u64, n as u64).with_limits(n as u64, 8 << 20);
    let cost = |w: &psi_core::cost::Workload| {
        psi_core::cost::cost(protocol, w).ok_or_else(|| "no cost for this workload".to_string())
    };
    let (with_step, no_labels) = (cost(&w)?, cost(&w.with_labels(false))?);
    let step_bytes = (with_step.bytes_up() + with_step.bytes_down())
        .saturating_sub(no_labels.bytes_up() + no_labels.bytes_down());
    let fetch_bytes = step_bytes.saturating_sub(query_bytes);
    let (p, q, lanes) = (median(plain_ms), median(query_ms), median(lanes_ms));
    let mb = |b: u64| b as f64 / 1e6;
    println!(
        "| {} | 2^{l} | {p:.1} | {lanes:.1} | {:.1} | {q:.1} | {:.2} | {:.2} | {:.2} ({:.2} + {:.2}) | \
         {:.3} | {:.3} | {:.3} | {:.3} |",
        protocol.api_name(),
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
    Ok(())
}
