//! `psi loadgen`: concurrent clients matching synthetic contacts against a server whose
//! registry was filled with `psi import --synthetic N` (entries `+1202` + 7 digits,
//! labels `user-N`), checking every result. Bounded by run count and wall time.

use crate::proc_status::{open_fds, rss_kib};
use crate::synthetic::{contacts_of_run, matches_expected};
use crate::token_args::TokenArgs;
use psi_client::{CancelToken, Client, ClientConfig};
use psi_core::Protocol;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct LoadgenArgs {
    /// Server base URL.
    #[arg(long)]
    server: String,
    /// Concurrent clients (threads).
    #[arg(long, default_value_t = 50)]
    clients: usize,
    /// Contacts per client run.
    #[arg(long, default_value_t = 1000)]
    contacts: usize,
    /// Synthetic registry size on the server (matches are drawn below it).
    #[arg(long)]
    registry_size: u64,
    /// One contact in this many is registered.
    #[arg(long, default_value_t = 10)]
    match_every: usize,
    /// Total runs across all clients.
    #[arg(long, default_value_t = 500)]
    runs: u64,
    /// Stop starting runs after this many seconds.
    #[arg(long, default_value_t = 120)]
    max_secs: u64,
    /// Protocol: dh (DH-PSI) or ot (OT-PSI).
    #[arg(long, default_value = "dh", value_parser = crate::choice::parse_protocol)]
    protocol: Protocol,
    /// Skip labels.
    #[arg(long)]
    no_labels: bool,
    #[command(flatten)]
    token: TokenArgs,
    /// Of the clients, this many run OT-PSI instead of `--protocol` (a mixed load).
    #[arg(long, default_value_t = 0)]
    ot_clients: usize,
    /// PID of the server process, to sample its memory and open file descriptors (Linux
    /// /proc).
    #[arg(long)]
    server_pid: Option<u32>,
    /// With --server-pid: also record a sample (seconds, RSS, open descriptors) this often,
    /// in seconds, for soak runs (0: only the peak).
    #[arg(long, default_value_t = 0)]
    sample_every: u64,
}

pub fn run(args: LoadgenArgs) -> Result<(), String> {
    if args.registry_size == 0 || args.contacts == 0 || args.clients == 0 {
        return Err("--registry-size, --contacts and --clients must be positive".into());
    }
    if args.ot_clients > args.clients {
        return Err("--ot-clients cannot exceed --clients".into());
    }
    let started = AtomicU64::new(0);
    let ok = AtomicU64::new(0);
    let wrong = AtomicU64::new(0);
    let failed = AtomicU64::new(0);
    // (protocol of the run, its latency)
    let latencies = Mutex::new(Vec::<(Protocol, Duration)>::new());
    let samples = Mutex::new(Vec::<serde_json::Value>::new());
    let peak_fds = AtomicU64::new(0);
    let first_error = Mutex::new(None::<String>);
    let stop = Arc::new(AtomicBool::new(false));
    let peak_rss = AtomicU64::new(0);
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(args.max_secs);
    let token = args.token.resolve()?;
    std::thread::scope(|s| {
        if let Some(pid) = args.server_pid {
            let stop = stop.clone();
            let (peak, peak_fds, samples) = (&peak_rss, &peak_fds, &samples);
            let every = Duration::from_secs(args.sample_every);
            s.spawn(move || {
                let mut next_sample = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    let rss = rss_kib(pid, "VmRSS:");
                    let fds = open_fds(pid);
                    if let Some(r) = rss {
                        peak.fetch_max(r, Ordering::Relaxed);
                    }
                    if let Some(f) = fds {
                        peak_fds.fetch_max(f, Ordering::Relaxed);
                    }
                    if !every.is_zero() && Instant::now() >= next_sample {
                        next_sample += every;
                        samples
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(serde_json::json!({
                                "t_s": t0.elapsed().as_secs(),
                                "rss_mib": rss.map(|k| k as f64 / 1024.0),
                                "open_fds": fds,
                            }));
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            });
        }
        let mut workers = Vec::new();
        for c in 0..args.clients {
            let args = &args;
            let (started, ok, wrong, failed, latencies, first_error, token) = (
                &started,
                &ok,
                &wrong,
                &failed,
                &latencies,
                &first_error,
                &token,
            );
            workers.push(s.spawn(move || {
                let mut config = ClientConfig::default()
                    .with_threads(psi_core::Threads::ONE)
                    .with_labels(!args.no_labels)
                    .with_timeout(Duration::from_secs(120));
                if let Some(t) = &token {
                    config = config.with_token(t.clone());
                }
                let client = Client::new(&args.server, config);
                // The health, kept by the client, tells it what the server supports (with
                // labels off: whether it may say so and skip the DELETE). A failure here
                // only makes the runs treat the server as an older one.
                let _ = client.health();
                let protocol = if c < args.ot_clients {
                    Protocol::Ot
                } else {
                    args.protocol
                };
                loop {
                    let run = started.fetch_add(1, Ordering::Relaxed);
                    if run >= args.runs || Instant::now() > deadline {
                        break;
                    }
                    let (items, expected) =
                        contacts_of_run(run, args.contacts, args.match_every, args.registry_size);
                    let t = Instant::now();
                    match client.match_items(items, protocol, &mut |_| {}, &CancelToken::new()) {
                        Ok(r) => {
                            latencies
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .push((protocol, t.elapsed()));
                            if matches_expected(&r, &expected, !args.no_labels) {
                                ok.fetch_add(1, Ordering::Relaxed);
                            } else {
                                wrong.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Err(e) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                            first_error
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .get_or_insert(format!("client {c}: {e}"));
                        }
                    }
                }
            }));
        }
        for w in workers {
            let _ = w.join();
        }
        stop.store(true, Ordering::Relaxed);
    });
    let elapsed = t0.elapsed();
    let all = latencies.into_inner().unwrap_or_default();
    // Latency percentiles (ms) of the runs of one protocol, or of all.
    let percentiles = |only: Option<Protocol>| {
        let mut lat: Vec<Duration> = all
            .iter()
            .filter(|(p, _)| only.is_none_or(|o| o == *p))
            .map(|(_, d)| *d)
            .collect();
        lat.sort();
        let pct = |p: f64| {
            lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
                .map_or(0.0, |d| d.as_secs_f64() * 1e3)
        };
        serde_json::json!({
            "runs": lat.len(),
            "p50": pct(0.5),
            "p95": pct(0.95),
            "p99": pct(0.99),
            "max": pct(1.0),
        })
    };
    let overall = percentiles(None);
    let done = ok.load(Ordering::Relaxed) + wrong.load(Ordering::Relaxed);
    let v = serde_json::json!({
        "protocol": args.protocol.api_name(),
        "clients": args.clients,
        "contacts_per_run": args.contacts,
        "registry_size": args.registry_size,
        "runs_ok": ok.load(Ordering::Relaxed),
        "runs_wrong": wrong.load(Ordering::Relaxed),
        "runs_failed": failed.load(Ordering::Relaxed),
        "elapsed_s": elapsed.as_secs_f64(),
        "runs_per_s": done as f64 / elapsed.as_secs_f64(),
        "contacts_per_s": (done * args.contacts as u64) as f64 / elapsed.as_secs_f64(),
        "ot_clients": args.ot_clients,
        "latency_ms_p50": overall["p50"],
        "latency_ms_p95": overall["p95"],
        "latency_ms_p99": overall["p99"],
        "latency_ms_max": overall["max"],
        "latency_ms_dh": percentiles(Some(Protocol::Dh)),
        "latency_ms_ot": percentiles(Some(Protocol::Ot)),
        "server_rss_peak_mib": args.server_pid.map(|_| peak_rss.load(Ordering::Relaxed) as f64 / 1024.0),
        "server_open_fds_peak": args.server_pid.map(|_| peak_fds.load(Ordering::Relaxed)),
        "server_samples": samples.into_inner().unwrap_or_default(),
        "server_vmhwm_mib": args.server_pid.and_then(|p| rss_kib(p, "VmHWM:")).map(|k| k as f64 / 1024.0),
        "first_error": first_error.into_inner().unwrap_or_default(),
    });
    println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    if wrong.load(Ordering::Relaxed) > 0 || failed.load(Ordering::Relaxed) > 0 {
        return Err("some runs failed or returned wrong results".into());
    }
    Ok(())
}
