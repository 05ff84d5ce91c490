//! `psi bench --sync`: sync mode at scale through the real path (issue 37, ADR 0047 §3,
//! docs/benchmarks.md "Sync mode over HTTP"). For each registry size it builds a SQLite
//! store of that many synthetic entries (every one labelled, as `psi import --synthetic`),
//! loads it as `psi serve --enable-sync` does, serves it on loopback HTTP and runs the
//! reference client against it with a cache: the first sync, runs of 1, 100 and 1,000
//! contacts in sync, a day's churn (0.1% of the entries, half removed and half added,
//! imported and reloaded as after `psi import` and SIGHUP), and the run that catches up
//! with the delta. Every measured figure is printed beside `psi_core::sync::sizes`'s
//! formula and the formula's value at 10^8; the process's peak RSS (server and client
//! in one process) closes each size.
//!
//! Every run checks its matches (registered contacts match with their labels, the
//! removed entry stops matching, the added one matches), so a wrong answer fails the
//! bench instead of printing a fast row.

use psi_client::{CancelToken, Client, ClientConfig, MatchReport, MemoryCache, Protocol};
use psi_core::sync::{self, sizes};
use psi_server::{AppState, Config, Registry, RunningServer, Store};
use std::sync::Arc;
use std::time::Instant;

use crate::format::kb_or_mb;
use crate::synthetic;

/// The registry size the formula extrapolates to.
const BIG: u64 = 100_000_000;

/// Sizes `psi bench --sync` runs without a list.
pub const DEFAULT_SIZES: [u64; 2] = [1_000_000, 10_000_000];

fn pow10(r: u64) -> String {
    let l = (r as f64).log10();
    if (l - l.round()).abs() < 1e-9 {
        format!("10^{:.0}", l)
    } else {
        crate::format::thousands(r)
    }
}

struct Row<'a> {
    what: &'a str,
    r: u64,
    measured: f64,
    formula: f64,
    at_big: Option<f64>,
    target: &'a str,
    note: String,
}

fn print_row(row: &Row<'_>) {
    println!(
        "| {} | {} | {} | {} | {:.3} | {} | {} | {} |",
        row.what,
        pow10(row.r),
        kb_or_mb(row.measured),
        kb_or_mb(row.formula),
        row.measured / row.formula,
        row.at_big.map_or(String::new(), kb_or_mb),
        row.target,
        row.note
    );
}

/// The contacts of a run of `n`: half registered (synthetic entries spread over the
/// registry, with `last` among them for n > 1: the entry the churn removes), the rest
/// not (`+1999…`, and `+13030000000` among them for n > 1: the entry the churn adds).
fn contacts(n: usize, r: u64, last: u64) -> (Vec<Vec<u8>>, Vec<u64>) {
    let members = n.div_ceil(2);
    let step = (r / members as u64).max(1);
    let mut registered: Vec<u64> = (0..members as u64).map(|i| i * step).collect();
    if n > 1 {
        *registered.last_mut().expect("members > 0") = last;
    }
    let mut items: Vec<Vec<u8>> = registered
        .iter()
        .map(|&k| synthetic::entry(k).into_bytes())
        .collect();
    for i in 0..(n - members) {
        let id = if i == 0 {
            added(0)
        } else {
            format!("+1999{i:07}")
        };
        items.push(id.into_bytes());
    }
    (items, registered)
}

/// The mean length of the synthetic labels `user-0` to `user-(r-1)`.
fn mean_label_len(r: u64) -> f64 {
    let mut digits = 0u64;
    let mut from = 0u64;
    let mut d = 1u64;
    while from < r {
        let upto = (10u64.pow(d as u32)).min(r);
        digits += (upto - from) * d;
        from = upto;
        d += 1;
    }
    synthetic::label(0).len() as f64 - 1.0 + digits as f64 / r as f64
}

/// Entry `i` the day's churn adds (labelled `new-i`).
fn added(i: u64) -> String {
    format!("+1303{i:07}")
}

/// Runs `items` in DH-PSI (sync mode where the client knows the server serves it) and
/// checks that exactly `expected` matched, each with its label.
fn run(
    client: &Client,
    items: &[Vec<u8>],
    expected: &[(String, String)],
) -> Result<(MatchReport, f64), String> {
    let t = Instant::now();
    let report = client
        .match_items(
            items.to_vec(),
            Protocol::Dh,
            &mut |_| {},
            &CancelToken::new(),
        )
        .map_err(|e| format!("run of {} contacts: {e}", items.len()))?;
    let secs = t.elapsed().as_secs_f64();
    let mut got: Vec<(String, String)> = report
        .matches
        .iter()
        .map(|m| {
            (
                String::from_utf8_lossy(&m.item).into_owned(),
                m.label.clone().unwrap_or_default(),
            )
        })
        .collect();
    got.sort();
    let mut want = expected.to_vec();
    want.sort();
    if got != want {
        return Err(format!(
            "run of {} contacts: {} matches, {} expected",
            items.len(),
            got.len(),
            want.len()
        ));
    }
    if report.stats.sync.is_none() {
        return Err("the run did not use sync mode".into());
    }
    Ok((report, secs))
}

/// The run's protocol bytes both ways (query, evaluation, confirmation): what
/// `sizes::run_bytes` predicts.
fn protocol_bytes(r: &MatchReport) -> f64 {
    (r.stats.protocol_bytes_sent + r.stats.protocol_bytes_received + r.stats.label_bytes) as f64
}

/// Request and response bodies both ways, without the sync download.
fn body_bytes(r: &MatchReport) -> u64 {
    let sync = r.stats.sync.map_or(0, |s| s.bytes_downloaded());
    (r.stats.bytes_sent + r.stats.bytes_received).saturating_sub(sync)
}

pub fn run_sizes(sizes_to_run: &[u64], threads: usize) -> Result<(), String> {
    let work = std::env::temp_dir().join(format!("psi-bench-sync-{}", std::process::id()));
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let result = run_all(&work, sizes_to_run, threads);
    let _ = std::fs::remove_dir_all(&work);
    result
}

fn run_all(work: &std::path::Path, sizes_to_run: &[u64], threads: usize) -> Result<(), String> {
    let bucket_size = Config::default().label_bucket_size;
    let w_big = sync::sync_width(BIG, sync::DEFAULT_EXTRA_BITS);
    let b_big = psi_core::labels::bucket_bits(BIG as usize, bucket_size);
    println!(
        "psi bench --sync: {} thread(s) per side, SQLite store, psi serve --enable-sync's load, loopback HTTP, the reference client with a cache",
        threads
    );
    println!();
    println!(
        "| what | R | measured | formula | measured / formula | formula at 10^8 | target at 10^8 (at 10^7) | notes |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---|");
    let mut notes = Vec::new();
    for &r in sizes_to_run {
        if r < 4_000 {
            return Err(format!(
                "registry size {r}: at least 4,000 (a day's churn of 0.1%)"
            ));
        }
        let db = work.join(format!("r{r}.sqlite"));
        let t = Instant::now();
        {
            let mut store = Store::open(&db).map_err(|e| e.to_string())?;
            let mut rows = (0..r).map(|k| (synthetic::entry(k), Some(synthetic::label(k))));
            psi_server::storage::RegistryStore::add_entry_stream(&mut store, &mut rows)
                .map_err(|e| e.to_string())?;
        }
        let import_s = t.elapsed().as_secs_f64();
        let mut config = Config::default();
        config.db = db.clone().into();
        config.enable_sync = true;
        config.build_threads = threads;
        config.workers = threads;
        config.max_client_items = 1_000;
        config.items_per_hour = 0;
        config.rotate_every = None;
        let t = Instant::now();
        let registry = Registry::load(&config, &mut |_, _| {}).map_err(|e| e.to_string())?;
        let load_s = t.elapsed().as_secs_f64();
        let state = AppState::with_registry(config, registry);
        let server = RunningServer::start(state.clone(), ([127, 0, 0, 1], 0).into())
            .map_err(|e| format!("cannot start the loopback server: {e}"))?;
        let outcome = measure(r, &db, &state, &server.url(), (w_big, b_big), threads);
        server.shutdown().map_err(|e| e.to_string())?;
        let (rows, note) = outcome?;
        for row in &rows {
            print_row(row);
        }
        let hwm = crate::proc_status::rss_kib(std::process::id(), "VmHWM").unwrap_or(0);
        notes.push(format!(
            "R = {}: store built in {import_s:.1} s, loaded (outputs, encoded set, snapshot, deltas, records) in {load_s:.1} s; {note}; peak RSS of the process so far {:.0} MB",
            pow10(r),
            hwm as f64 / 1024.0
        ));
        let _ = std::fs::remove_file(&db);
        let _ = std::fs::remove_file(db.with_extension("sqlite-wal"));
        let _ = std::fs::remove_file(db.with_extension("sqlite-shm"));
    }
    println!();
    for n in notes {
        println!("{n}");
    }
    println!(
        "At 10^8 the formula uses w = {w_big} and b = {b_big} ({:.1} entries per bucket).",
        BIG as f64 / f64::from(1u32 << b_big)
    );
    Ok(())
}

fn measure(
    r: u64,
    db: &std::path::Path,
    state: &Arc<AppState>,
    url: &str,
    (w_big, b_big): (u8, u8),
    threads: usize,
) -> Result<(Vec<Row<'static>>, String), String> {
    let client = Client::new(
        url,
        ClientConfig::default().with_threads(psi_core::Threads::new(threads)),
    )
    .with_cache(Arc::new(MemoryCache::new()));
    let health = client.health().map_err(|e| e.to_string())?;
    let info = health
        .sync
        .ok_or("the server's health does not name sync mode")?;
    let (w, b) = (info.width, info.bucket_bits);
    let churn = r / 2_000;
    let last = r - 1;
    let expect = |registered: &[u64]| -> Vec<(String, String)> {
        registered
            .iter()
            .map(|&k| (synthetic::entry(k), synthetic::label(k)))
            .collect()
    };
    let mut rows = Vec::new();

    // First sync, with a run of 1,000 contacts.
    let (items, registered) = contacts(1_000, r, last);
    let (first, first_s) = run(&client, &items, &expect(&registered))?;
    let s = first.stats.sync.expect("checked by run");
    rows.push(Row {
        what: "first sync (snapshot)",
        r,
        measured: s.snapshot_bytes as f64,
        formula: sizes::snapshot_bytes(r, w),
        at_big: Some(sizes::snapshot_bytes(BIG, w_big)),
        target: "<= 50 MB (<= 5 MB)",
        note: format!(
            "w = {w}, {:.2} bits per entry; the first run took {first_s:.2} s",
            s.snapshot_bytes as f64 * 8.0 / r as f64
        ),
    });

    // Runs in sync: nothing downloaded.
    for n in [1usize, 100, 1_000] {
        let (items, registered) = contacts(n, r, last);
        let (rep, secs) = run(&client, &items, &expect(&registered))?;
        let s = rep.stats.sync.expect("checked by run");
        if s.bytes_downloaded() != 0 {
            return Err(format!(
                "a run in sync downloaded {} bytes",
                s.bytes_downloaded()
            ));
        }
        // The fetched buckets' records are the registry's, whatever the contacts.
        let mean_label = mean_label_len(r);
        let members = registered.len() as u64;
        let formula = |reg: u64, b: u8, w: u8| {
            sizes::run_bytes(
                n as u64,
                reg,
                b,
                1.0,
                mean_label,
                sizes::candidate_buckets(n as u64, members, sync::candidate_rate(reg, w), b),
            )
        };
        rows.push(Row {
            what: match n {
                1 => "one run, 1 contact, labels, both ways",
                100 => "one run, 100 contacts",
                _ => "one run, 1,000 contacts",
            },
            r,
            measured: protocol_bytes(&rep),
            formula: formula(r, b, w),
            at_big: Some(formula(BIG, b_big, w_big)),
            target: if n == 1_000 { "<= 1.5 MB" } else { "" },
            note: format!(
                "{} candidates, {} matches; all HTTP bodies {}; {secs:.2} s",
                s.candidates,
                rep.matches.len(),
                kb_or_mb(body_bytes(&rep) as f64)
            ),
        });
    }

    // A day's churn: 0.1% of the entries, half removed (the last ones, `last` among
    // them), half added (`added(0)` among them), then the server reloads.
    let t = Instant::now();
    {
        let mut store = Store::open(db).map_err(|e| e.to_string())?;
        let removed: Vec<String> = (r - churn..r).map(synthetic::entry).collect();
        store
            .remove_entries(removed.iter().map(String::as_str))
            .map_err(|e| e.to_string())?;
        let new: Vec<(String, String)> =
            (0..churn).map(|i| (added(i), format!("new-{i}"))).collect();
        store
            .add_entries(new.iter().map(|(a, l)| (a.as_str(), Some(l.as_str()))))
            .map_err(|e| e.to_string())?;
    }
    let import_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    state.reload().map_err(|e| e.to_string())?;
    let reload_s = t.elapsed().as_secs_f64();
    let (items, registered) = contacts(1_000, r, last);
    let mut want = expect(&registered[..registered.len() - 1]);
    want.push((added(0), "new-0".into()));
    let (after, after_s) = run(&client, &items, &want)?;
    let s = after.stats.sync.expect("checked by run");
    if s.snapshot_bytes != 0 || s.delta_bytes == 0 {
        return Err(format!(
            "after the churn the client downloaded a {}-byte snapshot and a {}-byte delta, not a delta alone",
            s.snapshot_bytes, s.delta_bytes
        ));
    }
    rows.push(Row {
        what: "a day later: delta, 0.1% churn (half added, half removed)",
        r,
        measured: s.delta_bytes as f64,
        formula: sizes::delta_bytes(churn, churn, w),
        at_big: Some(sizes::delta_bytes(BIG / 2_000, BIG / 2_000, w_big)),
        target: "<= 1 MB (<= 100 KB)",
        note: format!(
            "{churn} added, {churn} removed (imported in {import_s:.1} s, reloaded in {reload_s:.1} s); the run that caught up took {after_s:.2} s, the removed entry stopped matching and the added one matched"
        ),
    });
    Ok((rows, format!("sync width w = {w}, b = {b}")))
}
