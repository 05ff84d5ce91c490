//! `psi bench`: per-phase times, bytes on the wire and the analytic bounds.

use crate::format::{mb, ms, thousands};
use crate::measure::{peak_heap_bytes, reset_peak_heap};
use crate::rng::os_rng;
use crate::runner::run_dh as dh_once;
use psi_core::Protocol;
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

/// A unit cost of psi-core's record (ns per operation) as a duration.
fn ns(x: f64) -> Duration {
    Duration::from_secs_f64(x.max(0.0) / 1e9)
}

pub fn run(quick: bool, thread_counts: &[usize], protocols: &[Protocol]) -> Result<(), String> {
    let mut first = true;
    for &p in protocols {
        if !first {
            println!();
        }
        first = false;
        match p {
            Protocol::Dh => run_dh(quick, thread_counts)?,
            Protocol::Ot => run_ot(quick, thread_counts)?,
            Protocol::Cm20 => run_cm20(quick, thread_counts)?,
            Protocol::Gbf => run_gbf(quick, thread_counts)?,
        }
    }
    Ok(())
}

/// CM20-PSI rows, each beside a KKRT16 (OT-PSI) run of the same sets made just before it
/// in the same process, so the ratios compare like with like on a noisy machine.
fn run_cm20(quick: bool, thread_counts: &[usize]) -> Result<(), String> {
    use psi_core::cm20::{self, Cm20Config};
    use psi_core::ot::OtConfig;
    use psi_core::{ItemSet, Threads};
    use std::sync::Arc;
    let mut cases: Vec<(usize, usize, usize)> = if quick {
        vec![
            (1 << 8, 1 << 8, 1 << 7),
            (1 << 12, 1 << 12, 1 << 11),
            (1000, 10_000, 100),
        ]
    } else {
        vec![
            (1 << 12, 1 << 12, 1 << 11),
            (1 << 16, 1 << 16, 1 << 15),
            (1 << 20, 1 << 20, 1 << 19),
            (1000, 100_000, 100),
            (1000, 1_000_000, 100),
        ]
    };
    if let Some(n) = cm20_only() {
        cases.retain(|c| c.0.max(c.1) == n);
    }
    println!("# psi bench: CM20-PSI (Chase-Miao multi-point OPRF) beside OT-PSI (KKRT16)");
    println!();
    println!(
        "In one process through the real message encoding; 16 MiB requests. Each CM20 row is run right after a KKRT run of the same sets (same process, same threads): the last columns are the ratios."
    );
    println!();
    println!(
        "| n_c | n_s | threads | m | w | client ms | server ms | total ms | CPU s | round trips | bytes c->s | bytes s->c | spec bytes | bytes / spec | peak heap MB | KKRT total ms | KKRT CPU s | KKRT bytes | KKRT peak MB | time / KKRT | CPU / KKRT | bytes / KKRT |"
    );
    println!(
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for &(n_c, n_s, overlap) in &cases {
        let (client, server) = sets(n_c, n_s, overlap);
        let (client, server) = (ItemSet::new(&client), Arc::new(ItemSet::new(&server)));
        for &t in thread_counts {
            reset_peak_heap();
            let kkrt = crate::runner::run_ot(&client, &server, &OtConfig::new(Threads::new(t)))?;
            let kkrt_peak = peak_heap_bytes();
            reset_peak_heap();
            let r = crate::runner::run_cm20(&client, &server, &Cm20Config::new(Threads::new(t)))?;
            let peak = peak_heap_bytes();
            if r.matches != overlap || kkrt.matches != overlap {
                return Err(format!(
                    "wrong result: {} (CM20) and {} (KKRT) matches, expected {overlap}",
                    r.matches, kkrt.matches
                ));
            }
            let p = r.stats.params.ok_or("no parameters")?;
            let spec = cm20::sizes::traffic(n_c as u64, n_s as u64);
            let spec_total = spec.client_to_server + spec.server_to_client;
            let total = r.stats.client_to_server_bytes + r.stats.server_to_client_bytes;
            let kkrt_total = kkrt.stats.client_to_server_bytes + kkrt.stats.server_to_client_bytes;
            println!(
                "| {} | {} | {t} | {} | {} | {} | {} | {} | {:.2} | {} | {} | {} | {} | {:.4} | {} | {} | {:.2} | {} | {} | {:.2} | {:.2} | {:.3} |",
                thousands(n_c as u64),
                thousands(n_s as u64),
                thousands(p.height as u64),
                p.width,
                ms(r.side(true)),
                ms(r.side(false)),
                ms(r.wall),
                r.cpu.as_secs_f64(),
                r.stats.round_trips,
                thousands(r.stats.client_to_server_bytes),
                thousands(r.stats.server_to_client_bytes),
                thousands(spec_total),
                total as f64 / spec_total as f64,
                mb(peak),
                ms(kkrt.wall),
                kkrt.cpu.as_secs_f64(),
                thousands(kkrt_total),
                mb(kkrt_peak),
                r.wall.as_secs_f64() / kkrt.wall.as_secs_f64(),
                r.cpu.as_secs_f64() / kkrt.cpu.as_secs_f64(),
                total as f64 / kkrt_total as f64,
            );
        }
    }
    println!();
    println!(
        "spec bytes is docs/protocol/cm20-psi.md's formula (psi_core::cm20::sizes::traffic: exact client to server, expected Golomb-Rice payload server to client); peak heap includes both input sets."
    );
    println!();
    cm20_tcp(quick)
}

/// GBF-PSI rows, each beside a KKRT16 (OT-PSI) and a CM20-PSI run of the same sets made
/// just before it in the same process, so the ratios compare like with like on a noisy
/// machine. `PSI_BENCH_GBF_ONLY=n` keeps the cases whose larger set has `n` items.
fn run_gbf(quick: bool, thread_counts: &[usize]) -> Result<(), String> {
    use psi_core::cm20::Cm20Config;
    use psi_core::gbf::{self, GbfConfig};
    use psi_core::ot::OtConfig;
    use psi_core::{ItemSet, Threads};
    use std::sync::Arc;
    let mut cases: Vec<(usize, usize, usize)> = if quick {
        vec![
            (1 << 8, 1 << 8, 1 << 7),
            (1 << 12, 1 << 12, 1 << 11),
            (1000, 10_000, 100),
        ]
    } else {
        vec![
            (1 << 12, 1 << 12, 1 << 11),
            (1 << 16, 1 << 16, 1 << 15),
            (1 << 20, 1 << 20, 1 << 19),
            (1000, 100_000, 100),
        ]
    };
    if let Some(n) = std::env::var("PSI_BENCH_GBF_ONLY")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        cases.retain(|c| c.0.max(c.1) == n);
    }
    println!(
        "# psi bench: GBF-PSI (PSZ14 random garbled Bloom filter) beside OT-PSI (KKRT16) and CM20-PSI"
    );
    println!();
    println!(
        "In one process through the real message encoding; 16 MiB requests, no labels. Each GBF row is run right after a KKRT and a CM20 run of the same sets (same process, same threads)."
    );
    println!();
    println!(
        "| n_c | n_s | threads | k | m | GBF client ms | GBF server ms | GBF total ms | GBF CPU s | round trips | bytes c->s | bytes s->c | bytes / spec | peak heap MB | KKRT total ms | KKRT bytes | CM20 total ms | CM20 bytes | time / KKRT | bytes / KKRT | time / CM20 | bytes / CM20 |"
    );
    println!(
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for &(n_c, n_s, overlap) in &cases {
        let (client, server) = sets(n_c, n_s, overlap);
        let (client, server) = (ItemSet::new(&client), Arc::new(ItemSet::new(&server)));
        for &t in thread_counts {
            let kkrt = crate::runner::run_ot(&client, &server, &OtConfig::new(Threads::new(t)))?;
            let cm20 =
                crate::runner::run_cm20(&client, &server, &Cm20Config::new(Threads::new(t)))?;
            reset_peak_heap();
            let r = crate::runner::run_gbf(&client, &server, &GbfConfig::new(Threads::new(t)))?;
            let peak = peak_heap_bytes();
            if [r.matches, kkrt.matches, cm20.matches] != [overlap; 3] {
                return Err(format!(
                    "wrong result: {} (GBF), {} (KKRT) and {} (CM20) matches, expected {overlap}",
                    r.matches, kkrt.matches, cm20.matches
                ));
            }
            let p = r.stats.params.ok_or("no parameters")?;
            let spec = gbf::sizes::traffic(n_c as u64, n_s as u64);
            let spec_total = spec.client_to_server + spec.server_to_client;
            let total = r.stats.client_to_server_bytes + r.stats.server_to_client_bytes;
            let kkrt_total = kkrt.stats.client_to_server_bytes + kkrt.stats.server_to_client_bytes;
            let cm20_total = cm20.stats.client_to_server_bytes + cm20.stats.server_to_client_bytes;
            let secs = |d: Duration| d.as_secs_f64();
            println!(
                "| {} | {} | {t} | {} | {} | {} | {} | {} | {:.2} | {} | {} | {} | {:.4} | {} | {} | {} | {} | {} | {:.2} | {:.1} | {:.2} | {:.1} |",
                thousands(n_c as u64),
                thousands(n_s as u64),
                p.hashes,
                thousands(p.filter_bits as u64),
                ms(r.side(true)),
                ms(r.side(false)),
                ms(r.wall),
                r.cpu.as_secs_f64(),
                r.stats.round_trips,
                thousands(r.stats.client_to_server_bytes),
                thousands(r.stats.server_to_client_bytes),
                total as f64 / spec_total as f64,
                mb(peak),
                ms(kkrt.wall),
                thousands(kkrt_total),
                ms(cm20.wall),
                thousands(cm20_total),
                secs(r.wall) / secs(kkrt.wall),
                total as f64 / kkrt_total as f64,
                secs(r.wall) / secs(cm20.wall),
                total as f64 / cm20_total as f64,
            );
        }
    }
    println!();
    println!(
        "bytes / spec compares with docs/protocol/gbf-psi.md's formula (psi_core::gbf::sizes::traffic: exact client to server, expected Golomb-Rice payload server to client); peak heap includes both input sets and both sides' state."
    );
    Ok(())
}

/// `PSI_BENCH_CM20_ONLY=n`: the CM20 tables keep only the cases whose larger set has `n`
/// items.
fn cm20_only() -> Option<usize> {
    std::env::var("PSI_BENCH_CM20_ONLY")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
}

/// CM20-PSI and KKRT end to end over loopback TCP, 1 thread per side, alternating runs.
fn cm20_tcp(quick: bool) -> Result<(), String> {
    use psi_core::cm20::Cm20Config;
    use psi_core::ot::OtConfig;
    use psi_core::{ItemSet, Threads};
    use std::sync::Arc;
    let mut cases: Vec<(usize, usize, usize, usize)> = if quick {
        vec![(1 << 12, 1 << 12, 1 << 11, 2)]
    } else {
        vec![
            (1 << 16, 1 << 16, 1 << 15, 5),
            (1 << 20, 1 << 20, 1 << 19, 3),
            (1000, 1_000_000, 100, 3),
        ]
    };
    if let Some(n) = cm20_only() {
        cases.retain(|c| c.0.max(c.1) == n);
    }
    println!(
        "End to end over loopback TCP (127.0.0.1, one connection, 4-byte length prefix per message), 1 thread per side. The client works ahead while the server answers (ADR 0026); the `no ahead` columns are the same runs without it, to show what it gains. The four kinds of run alternate; medians:"
    );
    println!();
    println!(
        "| n_c | n_s | runs | KKRT ms | KKRT no ahead ms | CM20 ms | CM20 no ahead ms | CM20 / KKRT | CM20 ahead / no ahead | KKRT ahead / no ahead |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &(n_c, n_s, overlap, runs) in &cases {
        let (client, server) = sets(n_c, n_s, overlap);
        let (client, server) = (ItemSet::new(&client), Arc::new(ItemSet::new(&server)));
        // KKRT, KKRT without working ahead, CM20, CM20 without.
        let mut walls: [Vec<std::time::Duration>; 4] = Default::default();
        for _ in 0..runs {
            for (k, wall) in walls.iter_mut().enumerate() {
                let opts = crate::tcp::TcpOptions {
                    work_ahead: k % 2 == 0,
                    ..Default::default()
                };
                let r = if k < 2 {
                    let config = OtConfig::new(Threads::ONE);
                    crate::tcp::run_ot_tcp(client.clone(), server.clone(), &config, opts)?
                } else {
                    let config = Cm20Config::new(Threads::ONE);
                    crate::tcp::run_cm20_tcp(client.clone(), server.clone(), &config, opts)?
                };
                if r.matches != overlap {
                    return Err(format!(
                        "wrong result over TCP: {} matches, expected {overlap}",
                        r.matches
                    ));
                }
                wall.push(r.wall);
            }
        }
        let [k, kn, c, cn] = walls.map(median);
        let ratio =
            |a: std::time::Duration, b: std::time::Duration| a.as_secs_f64() / b.as_secs_f64();
        println!(
            "| {} | {} | {runs} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} |",
            thousands(n_c as u64),
            thousands(n_s as u64),
            ms(k),
            ms(kn),
            ms(c),
            ms(cn),
            ratio(c, k),
            ratio(c, cn),
            ratio(k, kn),
        );
    }
    Ok(())
}

fn run_dh(quick: bool, thread_counts: &[usize]) -> Result<(), String> {
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
    // Costs of the group operations the protocol cannot avoid, one thread: psi-core's
    // calibration (the one the automatic choice and the server use).
    let costs = psi_core::calibrate::unit_costs(psi_core::Threads::ONE);
    let mult = ns(costs.scalar_mult);
    let hash_to_group = ns(costs.hash_to_group);
    let decode = ns(costs.element_decode);
    println!("# psi bench: DH-PSI (RFC 9497 OPRF, ristretto255-SHA512)");
    println!();
    println!(
        "Unit costs, 1 thread (psi_core::calibrate, fastest of 5): scalar multiplication {:.1} us, HashToGroup {:.1} us, element decoding {:.1} us",
        mult.as_secs_f64() * 1e6,
        hash_to_group.as_secs_f64() * 1e6,
        decode.as_secs_f64() * 1e6,
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
        "| n_c | n_s | threads | server encode set ms | client blind ms | server evaluate ms | client finalize ms | client match ms | total CPU s | mults x cost s | CPU / bound | full floor s | CPU / floor | bytes c->s | bytes s->c | spec bytes | bytes / spec | peak heap MB |"
    );
    println!(
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let mut cases: Vec<(usize, usize, usize)> = balanced.iter().map(|&n| (n, n, n / 2)).collect();
    cases.extend(unbalanced.iter().map(|&n| (1000, n, 100)));
    for &(n_c, n_s, overlap) in &cases {
        let (client, server) = sets(n_c, n_s, overlap);
        for &t in thread_counts {
            reset_peak_heap();
            let r = dh_once(&client, &server, t)?;
            if r.output.matches.len() != overlap {
                return Err(format!(
                    "wrong result: {} matches, expected {overlap}",
                    r.output.matches.len()
                ));
            }
            let cpu = r.encode.cpu + r.blind.cpu + r.evaluate.cpu + r.finalize.cpu + r.matching.cpu;
            let mults = 3 * n_c as u64 + n_s as u64;
            let bound = mult * mults as u32;
            let floor = bound + hash_to_group * (n_c + n_s) as u32 + decode * (2 * n_c) as u32;
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
                mb(peak_heap_bytes()),
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
    println!("peak heap is the most live heap during the run, both input sets included.");
    Ok(())
}

fn run_ot(quick: bool, thread_counts: &[usize]) -> Result<(), String> {
    use psi_core::Phase;
    use psi_core::ot::{self, OtConfig};
    use psi_core::{ItemSet, Threads};
    use std::sync::Arc;
    let balanced: &[usize] = if quick {
        &[1 << 8, 1 << 12]
    } else {
        &[1 << 12, 1 << 16, 1 << 20]
    };
    let unbalanced: &[usize] = if quick {
        &[10_000]
    } else {
        &[10_000, 100_000, 1_000_000]
    };
    println!("# psi bench: OT-PSI (KKRT16 batched OPRF, 3-way Cuckoo hashing)");
    println!();
    println!(
        "In one process through the real message encoding; default chunk of 2^18 matrix rows per request."
    );
    println!("Step times are wall-clock ms (chunk steps summed over chunks).");
    println!();
    println!(
        "| n_c | n_s | threads | client start | server hello | client setup | server chunks | client chunks | server outputs | client finish | client ms | server ms | total ms | CPU s | round trips | bytes c->s | bytes s->c | spec bytes | bytes / spec | bits / element | peak heap MB |"
    );
    println!(
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let mut cases: Vec<(usize, usize, usize)> = balanced.iter().map(|&n| (n, n, n / 2)).collect();
    cases.extend(unbalanced.iter().map(|&n| (1000, n, 100)));
    for &(n_c, n_s, overlap) in &cases {
        let (client, server) = sets(n_c, n_s, overlap);
        let (client, server) = (ItemSet::new(&client), Arc::new(ItemSet::new(&server)));
        for &t in thread_counts {
            let config = OtConfig::new(Threads::new(t));
            reset_peak_heap();
            let r = crate::runner::run_ot(&client, &server, &config)?;
            if r.matches != overlap {
                return Err(format!(
                    "wrong result: {} matches, expected {overlap}",
                    r.matches
                ));
            }
            let bins = r.stats.bins as u64;
            let rows = config.chunk_rows as u64;
            let spec = ot::sizes::hello()
                + ot::sizes::setup()
                + ot::sizes::matrix(bins, rows)
                + ot::sizes::acks(bins, rows)
                + ot::sizes::outputs(n_s as u64, ot::output_len(n_c, n_s) as u64);
            let total = r.stats.client_to_server_bytes + r.stats.server_to_client_bytes;
            let steps = [
                Phase::ClientStart,
                Phase::ServerHello,
                Phase::ClientSetup,
                Phase::ServerChunk,
                Phase::ClientChunk,
                Phase::ServerOutputs,
                Phase::ClientFinish,
            ]
            .map(|s| ms(r.step(s)))
            .join(" | ");
            println!(
                "| {} | {} | {t} | {steps} | {} | {} | {} | {:.2} | {} | {} | {} | {} | {:.4} | {:.0} | {} |",
                thousands(n_c as u64),
                thousands(n_s as u64),
                ms(r.side(true)),
                ms(r.side(false)),
                ms(r.wall),
                r.cpu.as_secs_f64(),
                r.stats.round_trips,
                thousands(r.stats.client_to_server_bytes),
                thousands(r.stats.server_to_client_bytes),
                thousands(spec),
                total as f64 / spec as f64,
                total as f64 * 8.0 / n_c.max(n_s) as f64,
                mb(peak_heap_bytes()),
            );
        }
    }
    println!();
    println!(
        "bits / element = all bytes both ways x 8 / max(n_c, n_s); spec bytes is docs/protocol/ot-psi.md's formula."
    );
    println!();
    println!(
        "Over loopback TCP (127.0.0.1, one connection, 4-byte length prefix per message), 1 thread per side:"
    );
    println!();
    println!("| n_c = n_s | wall ms | round trips | bytes sent | bytes received | matches |");
    println!("|---:|---:|---:|---:|---:|---:|");
    let tcp_sizes: &[usize] = if quick {
        &[1 << 10]
    } else {
        &[1 << 10, 1 << 16, 1 << 20]
    };
    for &n in tcp_sizes {
        let (client, server) = sets(n, n, n / 2);
        let r = crate::tcp::run_ot_tcp(
            ItemSet::new(&client),
            Arc::new(ItemSet::new(&server)),
            &OtConfig::new(Threads::ONE),
            Default::default(),
        )?;
        if r.matches != n / 2 {
            return Err(format!("wrong result over TCP: {} matches", r.matches));
        }
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            thousands(n as u64),
            ms(r.wall),
            r.round_trips,
            thousands(r.bytes_sent),
            thousands(r.bytes_received),
            thousands(r.matches as u64)
        );
    }
    Ok(())
}

/// Median of some durations (the upper one of the middle two for an even count).
fn median(mut v: Vec<std::time::Duration>) -> std::time::Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// `psi bench --ot-fixed-cost`: the fixed cost of a small OT-PSI run (issue 12). Each of
/// `runs` rounds does, one after the other: a balanced 2^10 run over loopback TCP (1 thread
/// per side, a new server thread each round), the 128 base OTs alone (each step timed), and the same run in one process
/// (each step timed). Prints every TCP wall time (for interleaving binaries) and medians.
/// With `pin`, this thread (the client, and the pool it starts) runs on the first CPU this
/// process may use and the server's on the second, so the two sides never share a core, as
/// on two machines.
pub fn run_ot_fixed_cost(runs: usize, pin: bool) -> Result<(), String> {
    use psi_core::ot::{self, BaseOtStep, OtConfig};
    use psi_core::{ItemSet, Phase, Threads};
    use std::sync::Arc;
    use std::time::Instant;
    // With `pin`: the first two CPUs this process may use, client then server.
    let cpus = if pin {
        let cpus = crate::tcp::allowed_cpus()?;
        if cpus.len() < 2 {
            return Err("--pin needs two CPUs (one per side)".into());
        }
        crate::tcp::pin_current_thread(cpus[0])?;
        Some((cpus[0], cpus[1]))
    } else {
        None
    };
    let opts = crate::tcp::TcpOptions {
        server_cpu: cpus.map(|(_, server)| server),
        ..Default::default()
    };
    let n = 1 << 10;
    let (client, server) = sets(n, n, n / 2);
    let (client, server) = (ItemSet::new(&client), Arc::new(ItemSet::new(&server)));
    let config = OtConfig::new(Threads::ONE);
    let mut rng = os_rng()?;
    let mut tcp = Vec::new();
    let mut base: [Vec<Duration>; 3] = Default::default();
    let mut in_memory = Vec::new();
    let phases = [
        Phase::ClientStart,
        Phase::ServerHello,
        Phase::ClientSetup,
        Phase::ServerOutputs,
        Phase::ClientFinish,
    ];
    let mut steps: Vec<Vec<Duration>> = vec![Vec::new(); phases.len()];
    // One unrecorded round first (page faults, lazy statics, the first thread spawns).
    for round in 0..=runs {
        let r = crate::tcp::run_ot_tcp(client.clone(), server.clone(), &config, opts)?;
        if r.matches != n / 2 {
            return Err(format!("wrong result over TCP: {} matches", r.matches));
        }
        let mut times = [Duration::ZERO; 3];
        let mut last = Instant::now();
        let agree = ot::base_ots_alone(Threads::ONE, &mut rng, |step| {
            let now = Instant::now();
            let k = match step {
                BaseOtStep::ReceiverMessages => 0,
                BaseOtStep::SenderKeys => 1,
                BaseOtStep::ReceiverKeys => 2,
            };
            times[k] = now - last;
            last = now;
        })
        .map_err(|e| e.to_string())?;
        if !agree {
            return Err("base OT keys disagree".into());
        }
        let m = crate::runner::run_ot(&client, &server, &config)?;
        if m.matches != n / 2 {
            return Err(format!("wrong result in process: {} matches", m.matches));
        }
        if round == 0 {
            continue;
        }
        tcp.push(r.wall);
        for (v, t) in base.iter_mut().zip(times) {
            v.push(t);
        }
        in_memory.push(m.wall);
        for (v, p) in steps.iter_mut().zip(phases) {
            v.push(m.step(p));
        }
    }
    let pinned = match cpus {
        Some((c, s)) => format!(", client pinned to CPU {c} and server to CPU {s}"),
        None => String::new(),
    };
    println!(
        "# psi bench --ot-fixed-cost: balanced 2^10 OT-PSI, 1 thread per side{pinned}, {runs} rounds"
    );
    println!();
    println!(
        "tcp wall ms per round: {}",
        tcp.iter().map(|d| ms(*d)).collect::<Vec<_>>().join(" ")
    );
    let [rm, sk, rk] = base.map(median);
    let tcp_med = median(tcp);
    println!("median over loopback TCP: {} ms", ms(tcp_med));
    println!("median in one process: {} ms", ms(median(in_memory)));
    println!(
        "in-process steps (median ms): {}",
        phases
            .iter()
            .zip(steps)
            .map(|(p, v)| format!("{} {}", p.name(), ms(median(v))))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let base_total = rm + sk + rk;
    println!(
        "fixed-cost split (medians): base OTs client {} ms (messages {} + keys {}), server {} ms; the rest of the TCP run {} ms",
        ms(rm + rk),
        ms(rm),
        ms(rk),
        ms(sk),
        ms(tcp_med.saturating_sub(base_total)),
    );
    Ok(())
}
