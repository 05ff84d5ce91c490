//! `psi attack`: each denial-of-service attack of issue 23 beside honest clients, against
//! a real `psi serve` on loopback, with a table of what the honest clients saw.
//!
//! For each attack the command starts a fresh `psi serve` (this binary) on a copy of a
//! synthetic registry (`psi import --synthetic`), runs the honest load once alone (the
//! baseline), then again while the attack runs, and stops the server. The honest load is
//! `psi loadgen`'s client path (psi-client's driver, the synthetic contacts and the check
//! of every result): half the clients run DH-PSI, half the automatic choice (with
//! `--ot-clients`, some run OT-PSI first). Every address of 127.0.0.0/8 reaches the
//! server over loopback, so without a trusted proxy each source address is a caller, and
//! its /24 an address block, of its own: honest client `c` sends from 127.(200 + c).P.1
//! (P = 0 alone, 1 under attack), like separate users with budgets of their own, one
//! connection per request; attackers send from 127.N.0.M with N below 200.
//! The table: honest runs completed/failed and their p50/p99 without and with the
//! attack, the server's peak memory, and what the server answered the attacker.
//!
//! `pg-lookups` (and every attack with `--postgres`) runs its server on a throwaway
//! PostgreSQL cluster reached through a relay that delays each direction by
//! `--db-delay-ms` (`pg.rs`, `relay.rs`); `forwarded-quote` runs its server behind a
//! trusted proxy at 127.0.0.1, its honest clients sending through it (`forwarded.rs`).

mod attacks;
mod credentials;
mod drain;
mod forwarded;
mod label_fetch;
mod pg;
mod pg_lookups;
mod raw;
mod relay;

use crate::proc_status::rss_kib;
use crate::synthetic::{contacts_of_run, matches_expected};
use attacks::{Attack, Ctx, Tally};
use psi_client::{CancelToken, Client, ClientConfig, Policy, ProtocolChoice};
use psi_core::Protocol;
use std::collections::BTreeMap;
use std::io::BufRead;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct AttackArgs {
    /// Attacks to run, comma separated, or `all` (pg-lookups only with --postgres):
    /// session-fill (issue 23 item 1), ot-slot-hold (2), slow-reader (3), connection-hog
    /// (4), failed-steps (7), ot-refused-4095 (8), set-download (10); of issue 35:
    /// upload-hold (item 1), body-hold (item 2), unknown-tokens (item 3), pg-lookups (item
    /// 4: free 304s and made-up tokens against a server on PostgreSQL --db-delay-ms away;
    /// always on PostgreSQL), budget-drain (item 5), label-fetch (item 6), forwarded-quote
    /// (item 6, low: quotes and junk in X-Forwarded-For through a trusted proxy at
    /// 127.0.0.1, beside a balancer probing health from it).
    #[arg(long, value_delimiter = ',', default_value = "all")]
    attack: Vec<String>,
    /// Synthetic registry entries, imported into a temporary database (`psi import
    /// --synthetic`) unless --db is given.
    #[arg(long, default_value_t = 100_000)]
    registry_size: u64,
    /// A registry database filled by `psi import --synthetic REGISTRY_SIZE` (with the
    /// default --max-client-items): each attack's server runs on a copy of it (SQLite
    /// only; not with --postgres or pg-lookups).
    #[arg(long)]
    db: Option<PathBuf>,
    /// Run every attack's server on PostgreSQL (pg-lookups always is): a throwaway
    /// cluster on 127.0.0.1 (initdb and pg_ctl from PSI_PG_BIN or
    /// /usr/lib/postgresql/*/bin; `source ci/setup.sh && psi_setup_postgres` installs
    /// them), a copy of the registry per server, reached through a relay that delays
    /// every byte by --db-delay-ms each way; the servers watch the store (every 2 s).
    #[arg(long)]
    postgres: bool,
    /// PostgreSQL: milliseconds the relay holds each piece of data in each direction
    /// between a server and the database (a round trip takes twice this).
    #[arg(long, default_value_t = 3)]
    db_delay_ms: u64,
    /// Honest clients (threads, at most 50, each from an address of its own): the first
    /// half DH-PSI, the rest the automatic choice.
    #[arg(long, default_value_t = 4)]
    honest_clients: usize,
    /// Of the honest clients, this many run OT-PSI (fixed; counted before the DH-PSI and
    /// automatic halves of the rest), at most 9 runs each per phase (with retries, under
    /// the server's default 30 OT sessions per caller and hour).
    #[arg(long, default_value_t = 0)]
    ot_clients: usize,
    /// Contacts per honest run.
    #[arg(long, default_value_t = 100)]
    contacts: usize,
    /// Honest runs per phase (without, then with the attack), across the clients.
    #[arg(long, default_value_t = 40)]
    runs: u64,
    /// Keep starting honest runs, past --runs, until the phase has lasted this many
    /// seconds (so the attack runs long enough for the server's timers to act).
    #[arg(long, default_value_t = 0)]
    min_secs: u64,
    /// Each honest client waits this many milliseconds between its runs (think time: with
    /// --min-secs, keeps each client within its hourly item budget).
    #[arg(long, default_value_t = 0)]
    pause_ms: u64,
    /// Stop starting honest runs after this many seconds of a phase.
    #[arg(long, default_value_t = 120)]
    max_secs: u64,
    /// Longest wait, in seconds, for an attack to be in place (e.g. the session table
    /// filled) before the honest clients start.
    #[arg(long, default_value_t = 90)]
    setup_secs: u64,
    /// slow-reader: bytes per second each slow reader reads a large response at (the
    /// issue's reader: 13,000).
    #[arg(long, default_value_t = 13_000)]
    slow_read_rate: u64,
    /// Small attacks against a server with smaller caps (`--max-sessions 128`,
    /// `--max-connections 32`, `--health-per-hour 300` for forwarded-quote, two slow
    /// readers, two flooders): for tests, seconds instead of minutes.
    #[arg(long)]
    quick: bool,
    /// An extra argument for every `psi serve` (repeatable, e.g. --serve-arg=--workers=2).
    #[arg(long = "serve-arg", allow_hyphen_values = true)]
    serve_args: Vec<String>,
    /// Print the rows as JSON instead of the table.
    #[arg(long)]
    json: bool,
}

/// Runs per phase of an honest OT-PSI client: with two retries each, at most 27 OT
/// sessions, under `psi serve`'s default 30 per caller and hour.
const OT_RUNS: u64 = 9;

/// What the honest clients of one phase saw.
#[derive(Debug, Default)]
struct Honest {
    ok: u64,
    wrong: u64,
    failed: u64,
    latencies: Vec<Duration>,
    /// Protocols the runs ran ("dh-psi", "ot-psi", "dh-psi (fell back from ot-psi)").
    protocols: BTreeMap<String, u64>,
    /// Retries of the runs by cause ("HTTP 503 (too_many_sessions)", "timeout").
    retries: BTreeMap<String, u64>,
    first_error: Option<String>,
    rss_peak_kib: u64,
}

impl Honest {
    /// Latency percentile in milliseconds (0 without runs).
    fn pct(&self, p: f64) -> f64 {
        let mut l = self.latencies.clone();
        l.sort();
        l.get(((l.len() as f64 * p) as usize).min(l.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1e3)
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "ok": self.ok,
            "wrong": self.wrong,
            "failed": self.failed,
            "p50_ms": self.pct(0.5),
            "p99_ms": self.pct(0.99),
            "protocols": self.protocols,
            "retries": self.retries,
            "first_error": self.first_error,
            "server_rss_peak_mib": self.rss_peak_kib as f64 / 1024.0,
        })
    }
}

/// The runs of one phase: `args.runs` (or more, for `args.min_secs`) across
/// `args.honest_clients` threads, fresh
/// clients (empty caches), each run checked against the synthetic registry.
fn honest_phase(
    url: &str,
    args: &AttackArgs,
    server_pid: u32,
    first_run: u64,
    phase: u8,
    via_proxy: bool,
) -> Honest {
    let started = AtomicU64::new(0);
    let out = Mutex::new(Honest::default());
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(args.max_secs);
    let min_end = t0 + Duration::from_secs(args.min_secs);
    let ot_clients = args.ot_clients.min(args.honest_clients);
    let dh_clients = ot_clients + (args.honest_clients - ot_clients).div_ceil(2);
    std::thread::scope(|s| {
        let (out, stop) = (&out, &stop);
        s.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Some(r) = rss_kib(server_pid, "VmRSS:") {
                    let mut o = out.lock().unwrap_or_else(|e| e.into_inner());
                    o.rss_peak_kib = o.rss_peak_kib.max(r);
                }
                std::thread::sleep(Duration::from_millis(250));
            }
        });
        let workers: Vec<_> = (0..args.honest_clients)
            .map(|c| {
                let started = &started;
                s.spawn(move || {
                    let config = ClientConfig::default()
                        .with_threads(psi_core::Threads::ONE)
                        .with_timeout(Duration::from_secs(20));
                    let from = Ipv4Addr::new(127, 200 + c as u8, phase, 1);
                    let never = Arc::new(AtomicBool::new(false));
                    let transport = Arc::new(if via_proxy {
                        raw::RawTransport::via_proxy(from, forwarded::PROXY, never)
                    } else {
                        raw::RawTransport::new(from, None, never)
                    });
                    let client = Client::with_transport(url, transport, config);
                    let _ = client.health();
                    let choice = if c < ot_clients {
                        ProtocolChoice::Fixed(Protocol::Ot)
                    } else if c < dh_clients {
                        ProtocolChoice::Fixed(Protocol::Dh)
                    } else {
                        ProtocolChoice::Auto(Policy::Fastest)
                    };
                    let own_runs = if c < ot_clients { OT_RUNS } else { u64::MAX };
                    for k in 0..own_runs {
                        if k > 0 {
                            std::thread::sleep(Duration::from_millis(args.pause_ms));
                        }
                        let run = started.fetch_add(1, Ordering::Relaxed);
                        let now = Instant::now();
                        if (run >= args.runs && now >= min_end) || now > deadline {
                            break;
                        }
                        let (items, expected) =
                            contacts_of_run(first_run + run, args.contacts, 10, args.registry_size);
                        let t = Instant::now();
                        let mut retries = Vec::new();
                        let mut progress = |p: psi_client::Progress| {
                            if let Some(r) = p.retry {
                                retries.push(r.cause.to_string());
                            }
                        };
                        let r =
                            client.match_items(items, choice, &mut progress, &CancelToken::new());
                        let took = t.elapsed();
                        let mut o = out.lock().unwrap_or_else(|e| e.into_inner());
                        for cause in retries {
                            *o.retries.entry(cause).or_default() += 1;
                        }
                        match r {
                            Ok(r) => {
                                o.latencies.push(took);
                                let mut name = r.protocol.api_name().to_string();
                                if let Some(from) = r.choice.as_ref().and_then(|c| c.fell_back_from)
                                {
                                    name = format!("{name} (fell back from {})", from.api_name());
                                }
                                *o.protocols.entry(name).or_default() += 1;
                                if matches_expected(&r, &expected, true) {
                                    o.ok += 1;
                                } else {
                                    o.wrong += 1;
                                }
                            }
                            Err(e) => {
                                o.failed += 1;
                                o.first_error.get_or_insert(format!("client {c}: {e}"));
                            }
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            let _ = w.join();
        }
        stop.store(true, Ordering::Relaxed);
    });
    out.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// A `psi serve` child, stopped on drop.
struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The database of one attack's server.
enum ServerDb {
    /// A SQLite file: the store is not watched (`--watch-store off`: nothing else writes
    /// it).
    Sqlite(PathBuf),
    /// `psi serve` arguments naming a PostgreSQL database ([`pg::PgBackend::server_db`]):
    /// the store watched at the default interval, as several instances run.
    Postgres(Vec<String>),
}

fn start_server(db: &ServerDb, extra: &[String], log: &Path) -> Result<Server, String> {
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let log = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let mut cmd = Command::new(exe);
    cmd.arg("serve");
    match db {
        ServerDb::Sqlite(path) => {
            cmd.arg("--db").arg(path).args(["--watch-store", "off"]);
        }
        ServerDb::Postgres(args) => {
            cmd.args(args);
        }
    }
    let mut child = cmd
        .args(["--listen", "127.0.0.1:0", "--rotate-every", "off"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("starting psi serve: {e}"))?;
    let mut line = String::new();
    let read = child
        .stdout
        .take()
        .map(|o| std::io::BufReader::new(o).read_line(&mut line));
    let url = line
        .split_whitespace()
        .last()
        .unwrap_or_default()
        .to_string();
    let server = Server { child, url };
    if !matches!(read, Some(Ok(n)) if n > 0) || !server.url.starts_with("http://") {
        return Err("psi serve did not start (see its log)".into());
    }
    Ok(server)
}

/// Copies the database `from` (and its WAL files) to `to`.
fn copy_db(from: &Path, to: &Path) -> Result<(), String> {
    for suffix in ["", "-wal", "-shm"] {
        let f = PathBuf::from(format!("{}{suffix}", from.display()));
        let t = PathBuf::from(format!("{}{suffix}", to.display()));
        if f.exists() {
            std::fs::copy(&f, &t).map_err(|e| format!("copying {}: {e}", f.display()))?;
        }
    }
    Ok(())
}

/// A temporary directory removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One row of the table.
struct Row {
    attack: Attack,
    /// On PostgreSQL: the relay's delay each way.
    db_delay: Option<Duration>,
    baseline: Honest,
    attacked: Honest,
    tally: BTreeMap<String, u64>,
    bytes: u64,
    setup: Duration,
    in_place: bool,
}

pub fn run(args: AttackArgs) -> Result<(), String> {
    if args.registry_size == 0 || args.contacts == 0 || args.honest_clients == 0 {
        return Err("--registry-size, --contacts and --honest-clients must be positive".into());
    }
    if args.honest_clients > 50 {
        return Err("--honest-clients: at most 50".into());
    }
    let attacks = attacks::parse_list(&args.attack, args.postgres)?;
    let on_postgres = |a: Attack| args.postgres || a.needs_postgres();
    let any_sqlite = attacks.iter().any(|&a| !on_postgres(a));
    let any_postgres = attacks.iter().any(|&a| on_postgres(a));
    if any_postgres && args.db.is_some() {
        return Err(
            "--db is a SQLite registry; on PostgreSQL (--postgres, pg-lookups) psi attack \
             imports its own (--registry-size)"
                .into(),
        );
    }
    let dir = TempDir(std::env::temp_dir().join(format!("psi-attack-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).map_err(|e| format!("{}: {e}", dir.0.display()))?;
    // Before the SQLite import: a missing PostgreSQL fails at once.
    let postgres = if any_postgres {
        Some(pg::PgBackend::start(
            &dir.0,
            args.registry_size,
            Duration::from_millis(args.db_delay_ms),
        )?)
    } else {
        None
    };
    let source = match &args.db {
        _ if !any_sqlite => PathBuf::new(),
        Some(db) => db.clone(),
        None => {
            let db = dir.0.join("registry.sqlite");
            eprintln!("importing {} synthetic entries...", args.registry_size);
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            let status = Command::new(exe)
                .arg("import")
                .arg("--db")
                .arg(&db)
                .arg("--synthetic")
                .arg(args.registry_size.to_string())
                .stdout(Stdio::null())
                .status()
                .map_err(|e| format!("psi import: {e}"))?;
            if !status.success() {
                return Err("psi import --synthetic failed".into());
            }
            db
        }
    };
    let mut rows = Vec::new();
    for (i, attack) in attacks.into_iter().enumerate() {
        let db = match &postgres {
            Some(pg) if on_postgres(attack) => ServerDb::Postgres(pg.server_db(attack.name())?),
            _ => {
                let db = dir.0.join(format!("{}.sqlite", attack.name()));
                copy_db(&source, &db)?;
                ServerDb::Sqlite(db)
            }
        };
        let mut extra = attack.server_args(args.quick);
        extra.extend(args.serve_args.iter().cloned());
        let log = dir.0.join(format!("{}.log", attack.name()));
        let server = start_server(&db, &extra, &log)?;
        let pid = server.child.id();
        let proxied = attack.via_proxy();
        eprintln!("{}: baseline...", attack.name());
        let baseline = honest_phase(
            &server.url,
            &args,
            pid,
            2 * i as u64 * args.runs,
            0,
            proxied,
        );
        eprintln!("{}: attack...", attack.name());
        let ctx = Ctx::new(&server.url, args.quick, args.slow_read_rate.max(1))?;
        let tally = Tally::default();
        let stop = Arc::new(AtomicBool::new(false));
        let ready = AtomicBool::new(false);
        let t0 = Instant::now();
        let (attacked, in_place) = std::thread::scope(|s| {
            let (ctx, tally, ready, stop2) = (&ctx, &tally, &ready, stop.clone());
            let attacker = s.spawn(move || attack.run(ctx, &stop2, ready, tally));
            let setup_deadline = t0 + Duration::from_secs(args.setup_secs);
            while !ready.load(Ordering::Relaxed)
                && Instant::now() < setup_deadline
                && !attacker.is_finished()
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            let in_place = ready.load(Ordering::Relaxed);
            let setup = t0.elapsed();
            eprintln!(
                "{}: attack in place: {in_place} after {:.1} s; honest clients...",
                attack.name(),
                setup.as_secs_f64()
            );
            let first = (2 * i as u64 + 1) * args.runs;
            let h = honest_phase(&server.url, &args, pid, first, 1, proxied);
            stop.store(true, Ordering::Relaxed);
            let _ = attacker.join();
            (h, (in_place, setup))
        });
        drop(server);
        rows.push(Row {
            attack,
            db_delay: postgres
                .as_ref()
                .filter(|_| on_postgres(attack))
                .map(|pg| pg.delay()),
            baseline,
            attacked,
            tally: tally.counts(),
            bytes: tally.bytes(),
            setup: in_place.1,
            in_place: in_place.0,
        });
    }
    print_rows(&rows, &args);
    Ok(())
}

fn print_rows(rows: &[Row], args: &AttackArgs) {
    if args.json {
        let v: Vec<_> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "attack": r.attack.name(),
                    "issue_item": r.attack.item(),
                    "postgres_delay_ms_each_way": r.db_delay.map(|d| d.as_millis() as u64),
                    "attack_in_place": r.in_place,
                    "attack_setup_s": r.setup.as_secs_f64(),
                    "baseline": r.baseline.json(),
                    "under_attack": r.attacked.json(),
                    "attacker_outcomes": r.tally,
                    "attacker_bytes_received": r.bytes,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::Value::Array(v)).unwrap_or_default()
        );
        return;
    }
    let ot = args.ot_clients.min(args.honest_clients);
    println!(
        "# psi attack: {} honest clients ({}{} DH-PSI, the rest auto), {} runs of {} contacts per phase, registry {}{}",
        args.honest_clients,
        if ot > 0 {
            format!("{ot} OT-PSI, ")
        } else {
            String::new()
        },
        (args.honest_clients - ot).div_ceil(2),
        args.runs,
        args.contacts,
        crate::format::thousands(args.registry_size),
        if args.quick { ", --quick" } else { "" }
    );
    println!();
    println!(
        "| attack | item | honest ok / wrong / failed: alone | under attack | p50 / p99 ms alone | under attack | server peak RSS MiB alone / attacked | what the server answered the attacker |"
    );
    println!("|---|---:|---|---|---|---|---|---|");
    for r in rows {
        let (b, a) = (&r.baseline, &r.attacked);
        let mut answered: Vec<_> = r.tally.iter().collect();
        answered.sort_by(|x, y| y.1.cmp(x.1));
        let mut answered: Vec<String> = answered
            .iter()
            .map(|(k, v)| format!("{k}: {}", crate::format::thousands(**v)))
            .collect();
        if r.bytes > 0 {
            answered.push(format!("{:.1} MB received", r.bytes as f64 / 1e6));
        }
        if !r.in_place {
            answered.push(format!("not in place after {:.0} s", r.setup.as_secs_f64()));
        }
        let name = match r.db_delay {
            Some(d) => format!(
                "{} (PostgreSQL, {} ms each way)",
                r.attack.name(),
                d.as_millis()
            ),
            None => r.attack.name().to_string(),
        };
        println!(
            "| {} | {} | {} / {} / {} | {} / {} / {} | {:.0} / {:.0} | {:.0} / {:.0} | {:.0} / {:.0} | {} |",
            name,
            r.attack.item(),
            b.ok,
            b.wrong,
            b.failed,
            a.ok,
            a.wrong,
            a.failed,
            b.pct(0.5),
            b.pct(0.99),
            a.pct(0.5),
            a.pct(0.99),
            b.rss_peak_kib as f64 / 1024.0,
            a.rss_peak_kib as f64 / 1024.0,
            answered.join("; ")
        );
    }
    println!();
    for r in rows {
        let protocols = |h: &Honest| {
            h.protocols
                .iter()
                .map(|(k, v)| format!("{k} x{v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let retries = |h: &Honest| {
            if h.retries.is_empty() {
                return "none".to_string();
            }
            h.retries
                .iter()
                .map(|(k, v)| format!("{k} x{v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!(
            "- {}: honest protocols alone: {}; under attack: {}; honest retries alone: {}; under attack: {}{}",
            r.attack.name(),
            protocols(&r.baseline),
            protocols(&r.attacked),
            retries(&r.baseline),
            retries(&r.attacked),
            r.attacked
                .first_error
                .as_ref()
                .map(|e| format!("; first honest error under attack: {e}"))
                .unwrap_or_default()
        );
    }
}
