//! The attacks of `psi attack`, one per item of issue 23 (and the upload items of issue
//! 35, in [`uploads`]; its other items in files of their own beside this one) that a
//! caller can run against a server, each from loopback addresses 127.N.0.M with N below
//! 200 (the honest clients send from 127.200.0.1 and up); `forwarded-quote` sends from the
//! trusted proxy's address 127.0.0.1.

mod uploads;

use super::raw::{Conn, RawTransport, server_addr};
use psi_client::{CancelToken, Client, ClientConfig, Method};
use psi_core::Protocol;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One attack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attack {
    /// Item 1: many callers open sessions and never step, to fill the session table.
    SessionFill,
    /// Item 2: OT sessions kept alive by refused requests, without a hello.
    OtSlotHold,
    /// Item 3: OT runs whose large outputs are read at about 13 KB/s.
    SlowReader,
    /// Item 4: one address holds every connection with a health request on each.
    ConnectionHog,
    /// Item 7: a DH query whose last element is invalid, repeated.
    FailedSteps,
    /// Item 8: OT session requests at n = 4095 the server refuses.
    OtRefused4095,
    /// Item 10: full downloads of the encoded set, repeated.
    SetDownload,
    /// Issue 35 item 1: requests whose declared body never comes, on every connection.
    UploadHold,
    /// Issue 35 item 2: 8 MiB bodies held one byte short of their end.
    BodyHold,
    /// Issue 35 item 5: the honest clients' networks and the server-wide ceiling kept
    /// spent by other addresses.
    BudgetDrain,
    /// Issue 35 item 3: a new made-up bearer token on every request, from one address.
    UnknownTokens,
    /// Issue 35 item 6: one-item sessions that fetch the most label buckets they may.
    LabelFetch,
    /// Issue 35 item 4: free 304s and made-up tokens flooded at a server whose
    /// PostgreSQL is a few milliseconds away.
    PgLookups,
    /// Issue 35 item 6 (low): quotes and junk in `X-Forwarded-For` through a trusted
    /// proxy, beside a balancer probing health from the proxy's address.
    ForwardedQuote,
}

const ALL: [Attack; 14] = [
    Attack::SessionFill,
    Attack::OtSlotHold,
    Attack::SlowReader,
    Attack::ConnectionHog,
    Attack::FailedSteps,
    Attack::OtRefused4095,
    Attack::SetDownload,
    Attack::UploadHold,
    Attack::BodyHold,
    Attack::BudgetDrain,
    Attack::UnknownTokens,
    Attack::LabelFetch,
    Attack::PgLookups,
    Attack::ForwardedQuote,
];

/// `--attack`: names, or `all` (every attack; `pg-lookups`, which needs PostgreSQL, only
/// when `postgres`).
pub fn parse_list(names: &[String], postgres: bool) -> Result<Vec<Attack>, String> {
    let mut out = Vec::new();
    for n in names {
        let n = n.trim();
        if n.eq_ignore_ascii_case("all") {
            out.extend(ALL.into_iter().filter(|a| postgres || !a.needs_postgres()));
            continue;
        }
        let a = ALL.into_iter().find(|a| a.name() == n).ok_or_else(|| {
            format!(
                "unknown attack {n:?} (expected all or one of: {})",
                ALL.map(|a| a.name()).join(", ")
            )
        })?;
        out.push(a);
    }
    out.dedup();
    Ok(out)
}

/// What the server answered the attacker: outcome -> count, and body bytes received.
#[derive(Default)]
pub struct Tally {
    counts: Mutex<BTreeMap<String, u64>>,
    bytes: AtomicU64,
}

impl Tally {
    pub(super) fn add(&self, outcome: impl Into<String>) {
        *self
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(outcome.into())
            .or_default() += 1;
    }

    /// Counts an I/O failure by kind (no addresses or data in it).
    pub(super) fn io(&self, what: &str, e: &std::io::Error) {
        let kind = match e.kind() {
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => "timed out",
            std::io::ErrorKind::UnexpectedEof
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::ConnectionAborted => "closed by the server",
            std::io::ErrorKind::ConnectionRefused => "refused",
            _ => "failed",
        };
        self.add(format!("{what} {kind}"));
    }

    /// The counts.
    pub fn counts(&self) -> BTreeMap<String, u64> {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Counts `n` response body bytes received.
    pub(super) fn count_bytes(&self, n: u64) {
        self.bytes.fetch_add(n, Ordering::Relaxed);
    }

    /// Response body bytes the attacker received.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

/// What every attack needs to know about the server.
pub struct Ctx {
    url: String,
    server: SocketAddrV4,
    pub(super) quick: bool,
    max_client_items: u64,
    slow_rate: u64,
    /// The encoded set's current ETag (for `If-None-Match`).
    etag: String,
}

impl Ctx {
    /// Reads the server's health (its `max_client_items`); `slow_rate`: the slow
    /// readers' bytes per second.
    pub fn new(url: &str, quick: bool, slow_rate: u64) -> Result<Ctx, String> {
        let server = server_addr(url)?;
        let mut c = Conn::open(Ipv4Addr::new(127, 0, 0, 2), server, IO, None)
            .map_err(|e| format!("health: {e}"))?;
        let h = c
            .request(Method::Get, "/v1/health", &[], &[])
            .map_err(|e| format!("health: {e}"))?;
        let v: serde_json::Value =
            serde_json::from_slice(&h.body).map_err(|_| "health: not JSON".to_string())?;
        Ok(Ctx {
            url: url.to_string(),
            server,
            quick,
            max_client_items: v["max_client_items"].as_u64().unwrap_or(10_000).max(1),
            slow_rate,
            etag: v["encoded_set_etag"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        })
    }
}

impl Ctx {
    /// The server's largest session (`max_client_items`).
    pub(super) fn max_client_items(&self) -> u64 {
        self.max_client_items
    }

    /// The server's address.
    pub(super) fn server(&self) -> SocketAddrV4 {
        self.server
    }

    /// The encoded set's ETag when the attack started.
    pub(super) fn etag(&self) -> &str {
        &self.etag
    }
}

/// Bound on every attacker read and write.
pub(super) const IO: Duration = Duration::from_secs(10);

/// Address `host` (1..=254) of block `block` (127.`block`.0.0/24; the attacks use blocks
/// 100 to 199, the honest clients 200 and up).
pub(super) fn addr(block: u8, host: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, block.max(1), 0, host.max(1))
}

/// The attacker's open connection from `from`, or a new one; when it cannot connect, the
/// error is tallied and the caller waits a second (or until `stop`) before its next try.
pub(super) fn reuse_or_open<'a>(
    conn: &'a mut Option<Conn>,
    from: Ipv4Addr,
    ctx: &Ctx,
    stop: &AtomicBool,
    tally: &Tally,
) -> Option<&'a mut Conn> {
    if conn.is_none() {
        match Conn::open(from, ctx.server, IO, None) {
            Ok(c) => *conn = Some(c),
            Err(e) => {
                tally.io("connect", &e);
                pause(stop, Duration::from_secs(1));
                return None;
            }
        }
    }
    conn.as_mut()
}

/// Sleeps up to `d`, returning early (false) once `stop` is set.
pub(super) fn pause(stop: &AtomicBool, d: Duration) -> bool {
    let end = Instant::now() + d;
    while Instant::now() < end {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    !stop.load(Ordering::Relaxed)
}

pub(super) const JSON: (&str, &str) = ("content-type", "application/json");
const BIN: (&str, &str) = ("content-type", "application/octet-stream");

pub(super) fn session_body(protocol: Protocol, n: u64, labels: bool) -> String {
    format!(
        r#"{{"protocol":"{}","client_items":{n},"labels":{labels}}}"#,
        protocol.api_name()
    )
}

/// The `session_id` and `epoch` of a 201.
pub(super) fn created(body: &[u8]) -> Option<(String, u32)> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    Some((
        v["session_id"].as_str()?.to_string(),
        u32::try_from(v["epoch"].as_u64()?).ok()?,
    ))
}

impl Attack {
    /// The name `--attack` takes.
    pub fn name(self) -> &'static str {
        match self {
            Attack::SessionFill => "session-fill",
            Attack::OtSlotHold => "ot-slot-hold",
            Attack::SlowReader => "slow-reader",
            Attack::ConnectionHog => "connection-hog",
            Attack::FailedSteps => "failed-steps",
            Attack::OtRefused4095 => "ot-refused-4095",
            Attack::SetDownload => "set-download",
            Attack::UploadHold => "upload-hold",
            Attack::BodyHold => "body-hold",
            Attack::BudgetDrain => "budget-drain",
            Attack::UnknownTokens => "unknown-tokens",
            Attack::LabelFetch => "label-fetch",
            Attack::PgLookups => "pg-lookups",
            Attack::ForwardedQuote => "forwarded-quote",
        }
    }

    /// The item it reproduces: of issue 23 (`4`), or of another issue (`35.1`).
    pub fn item(self) -> &'static str {
        match self {
            Attack::SessionFill => "1",
            Attack::OtSlotHold => "2",
            Attack::SlowReader => "3",
            Attack::ConnectionHog => "4",
            Attack::FailedSteps => "7",
            Attack::OtRefused4095 => "8",
            Attack::SetDownload => "10",
            Attack::UploadHold => "35.1",
            Attack::BodyHold => "35.2",
            Attack::BudgetDrain => "35.5",
            Attack::UnknownTokens => "35.3",
            Attack::LabelFetch => "35.6",
            Attack::PgLookups => "35.4",
            Attack::ForwardedQuote => "35.6",
        }
    }

    /// Whether its server runs on PostgreSQL whatever `--postgres` says.
    pub fn needs_postgres(self) -> bool {
        self == Attack::PgLookups
    }

    /// Whether the honest clients reach its server through a trusted proxy (from
    /// 127.0.0.1, with `X-Forwarded-For` of their own address).
    pub fn via_proxy(self) -> bool {
        self == Attack::ForwardedQuote
    }

    /// `psi serve` arguments for this attack's server: the defaults, scaled down with
    /// `--quick` where the attack's size is the server's cap.
    pub fn server_args(self, quick: bool) -> Vec<String> {
        let args: &[&str] = match (self, quick) {
            (Attack::SessionFill, true) => &["--max-sessions", "128"],
            (Attack::ConnectionHog | Attack::UploadHold, true) => &["--max-connections", "32"],
            (Attack::ForwardedQuote, _) => &["--trusted-proxy", "127.0.0.1"],
            _ => &[],
        };
        let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        if self == Attack::ForwardedQuote && quick {
            args.push("--health-per-hour".into());
            args.push(super::forwarded::QUICK_HEALTH_PER_HOUR.to_string());
        }
        args
    }

    /// Runs the attack until `stop`; sets `ready` once it is in place.
    pub fn run(self, ctx: &Ctx, stop: &AtomicBool, ready: &AtomicBool, tally: &Tally) {
        match self {
            Attack::SessionFill => session_fill(ctx, stop, ready, tally),
            Attack::OtSlotHold => ot_slot_hold(ctx, stop, ready, tally),
            Attack::SlowReader => slow_reader(ctx, stop, ready, tally),
            Attack::ConnectionHog => connection_hog(ctx, stop, ready, tally),
            Attack::FailedSteps => failed_steps(ctx, stop, ready, tally),
            Attack::OtRefused4095 => ot_refused(ctx, stop, ready, tally),
            Attack::SetDownload => set_download(ctx, stop, ready, tally),
            Attack::UploadHold => uploads::upload_hold(ctx, stop, ready, tally),
            Attack::BodyHold => uploads::body_hold(ctx, stop, ready, tally),
            Attack::BudgetDrain => super::drain::budget_drain(ctx, stop, ready, tally),
            Attack::UnknownTokens => super::credentials::unknown_tokens(ctx, stop, ready, tally),
            Attack::LabelFetch => super::label_fetch::label_fetch(ctx, stop, ready, tally),
            Attack::PgLookups => super::pg_lookups::pg_lookups(ctx, stop, ready, tally),
            Attack::ForwardedQuote => super::forwarded::forwarded_quote(ctx, stop, ready, tally),
        }
    }
}

/// Item 1: `sessions / 16` callers, 16 per /24 block, each opening one-item DH-PSI
/// sessions until refused and never stepping; every second each tries again (a session
/// the server ended is replaced). In place after the first pass.
fn session_fill(ctx: &Ctx, stop: &AtomicBool, ready: &AtomicBool, tally: &Tally) {
    let sessions: usize = if ctx.quick { 128 } else { 16_384 };
    let callers = sessions.div_ceil(16);
    let workers = 4;
    let pending = AtomicUsize::new(workers);
    std::thread::scope(|s| {
        for w in 0..workers {
            let pending = &pending;
            s.spawn(move || {
                let mut first = true;
                loop {
                    for i in (w..callers).step_by(workers) {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        let from = addr(100 + (i / 16) as u8, 1 + (i % 16) as u8);
                        let mut c = match Conn::open(from, ctx.server, IO, None) {
                            Ok(c) => c,
                            Err(e) => {
                                tally.io("connect", &e);
                                continue;
                            }
                        };
                        for _ in 0..16 {
                            let body = session_body(Protocol::Dh, 1, true);
                            match c.request(Method::Post, "/v1/sessions", &[JSON], body.as_bytes())
                            {
                                Ok(r) => {
                                    tally.add(r.outcome());
                                    if r.status != 201 {
                                        break;
                                    }
                                }
                                Err(e) => {
                                    tally.io("request", &e);
                                    break;
                                }
                            }
                        }
                    }
                    if first {
                        first = false;
                        if pending.fetch_sub(1, Ordering::Relaxed) == 1 {
                            ready.store(true, Ordering::Relaxed);
                        }
                    }
                    if !pause(stop, Duration::from_secs(1)) {
                        return;
                    }
                }
            });
        }
    });
}

/// Item 2: 4 callers, each holding 2 OT-PSI sessions (the server's 8 OT slots) without
/// a hello, each kept busy with a refused request (415) every 2 s; a session the server
/// ends is opened again. In place once all 8 were opened.
fn ot_slot_hold(ctx: &Ctx, stop: &AtomicBool, ready: &AtomicBool, tally: &Tally) {
    let callers = 4;
    let pending = AtomicUsize::new(callers);
    std::thread::scope(|s| {
        for i in 0..callers {
            let pending = &pending;
            s.spawn(move || {
                let from = addr(110, 1 + i as u8);
                let mut held: Vec<String> = Vec::new();
                let mut counted = false;
                let mut conn: Option<Conn> = None;
                while !stop.load(Ordering::Relaxed) {
                    let Some(c) = reuse_or_open(&mut conn, from, ctx, stop, tally) else {
                        continue;
                    };
                    let mut broken = false;
                    while held.len() < 2 {
                        let body = session_body(Protocol::Ot, 1, true);
                        match c.request(Method::Post, "/v1/sessions", &[JSON], body.as_bytes()) {
                            Ok(r) => {
                                tally.add(format!("create: {}", r.outcome()));
                                match created(&r.body) {
                                    Some((sid, _)) if r.status == 201 => held.push(sid),
                                    _ => break,
                                }
                            }
                            Err(e) => {
                                tally.io("create", &e);
                                broken = true;
                                break;
                            }
                        }
                    }
                    if held.len() == 2 && !counted {
                        counted = true;
                        if pending.fetch_sub(1, Ordering::Relaxed) == 1 {
                            ready.store(true, Ordering::Relaxed);
                        }
                    }
                    let mut keep = Vec::new();
                    for sid in held.drain(..) {
                        if broken {
                            break;
                        }
                        let path = format!("/v1/sessions/{sid}/ot/round");
                        let plain = ("content-type", "text/plain");
                        match c.request(Method::Post, &path, &[plain], b"x") {
                            Ok(r) => {
                                tally.add(format!("keep-alive: {}", r.outcome()));
                                if r.status == 415 {
                                    keep.push(sid);
                                }
                            }
                            Err(e) => {
                                tally.io("keep-alive", &e);
                                broken = true;
                            }
                        }
                    }
                    held = keep;
                    if broken {
                        conn = None;
                    }
                    pause(stop, Duration::from_secs(2));
                }
            });
        }
    });
}

/// Item 3: slow readers (6; 2 with `--quick`), each a caller of its own, running OT-PSI
/// with psi-client's driver over a transport that reads any body above 64 KiB at
/// `--slow-read-rate` (13 KB/s) through a 4 KiB receive buffer: the outputs message
/// (about 24 bytes per registry entry). In place after 15 s (3 s with `--quick`), when
/// every reader has had time to reach its outputs.
fn slow_reader(ctx: &Ctx, stop: &AtomicBool, ready: &AtomicBool, tally: &Tally) {
    let readers = if ctx.quick { 2 } else { 6 };
    let stop_flag = Arc::new(AtomicBool::new(false));
    std::thread::scope(|s| {
        for i in 0..readers {
            let stop_flag = stop_flag.clone();
            s.spawn(move || {
                let transport =
                    RawTransport::new(addr(120, 1 + i as u8), Some(ctx.slow_rate), stop_flag);
                let config = ClientConfig::default()
                    .with_threads(psi_core::Threads::ONE)
                    .with_labels(false)
                    .with_retries(0)
                    .with_timeout(Duration::from_secs(3600));
                let client = Client::with_transport(&ctx.url, Arc::new(transport), config);
                let items: Vec<Vec<u8>> = (0..3)
                    .map(|k| format!("+1999000000{k}").into_bytes())
                    .collect();
                while !stop.load(Ordering::Relaxed) {
                    match client.match_items(
                        items.clone(),
                        Protocol::Ot,
                        &mut |_| {},
                        &CancelToken::new(),
                    ) {
                        Ok(_) => tally.add("OT run read to the end"),
                        Err(_) if stop.load(Ordering::Relaxed) => {
                            tally.add("OT run still held when the attack ended")
                        }
                        Err(e) => {
                            tally.add(format!("OT run failed: {}", error_kind(&e)));
                            pause(stop, Duration::from_secs(1));
                        }
                    }
                }
            });
        }
        // The watcher: in place once every reader had time to reach its outputs; ends
        // the readers' requests when the attack stops.
        let t0 = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            if t0.elapsed() > Duration::from_secs(if ctx.quick { 3 } else { 15 }) {
                ready.store(true, Ordering::Relaxed);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        stop_flag.store(true, Ordering::Relaxed);
    });
}

/// A log-safe kind of a client error: its HTTP code, or "network" / "timeout".
fn error_kind(e: &psi_client::ClientError) -> String {
    match e {
        psi_client::ClientError::Http { code, .. } => code.as_str().to_string(),
        other => {
            let s = other.to_string();
            if s.contains("timed out") || s.contains("timeout") {
                "timeout".into()
            } else {
                "network".into()
            }
        }
    }
}

/// Item 4: one address opens as many keep-alive connections as the server allows by
/// default (512; 32 with `--quick`, whose server has that cap) and sends `GET
/// /v1/health` on each every 10 s (under the 30 s idle timeout); a closed one is opened
/// again. In place after the first pass.
fn connection_hog(ctx: &Ctx, stop: &AtomicBool, ready: &AtomicBool, tally: &Tally) {
    let target = if ctx.quick { 32 } else { 512 };
    let from = addr(130, 1);
    let mut conns: Vec<Conn> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        // Open up to the target; 16 failures in a row end this pass.
        let mut failures = 0;
        while conns.len() < target && failures < 16 && !stop.load(Ordering::Relaxed) {
            match Conn::open(from, ctx.server, Duration::from_secs(3), None) {
                Ok(mut c) => match c.request(Method::Get, "/v1/health", &[], &[]) {
                    Ok(r) => {
                        tally.add(format!("open + health: {}", r.outcome()));
                        failures = 0;
                        conns.push(c);
                    }
                    Err(e) => {
                        tally.io("open + health", &e);
                        failures += 1;
                    }
                },
                Err(e) => {
                    tally.io("connect", &e);
                    failures += 1;
                }
            }
        }
        ready.store(true, Ordering::Relaxed);
        if !pause(stop, Duration::from_secs(10)) {
            break;
        }
        let mut alive = Vec::new();
        for mut c in conns.drain(..) {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            match c.request(Method::Get, "/v1/health", &[], &[]) {
                Ok(r) => {
                    tally.add(format!("health: {}", r.outcome()));
                    if r.headers
                        .iter()
                        .any(|(k, v)| k == "connection" && v == "close")
                    {
                        continue;
                    }
                    alive.push(c);
                }
                Err(e) => tally.io("health", &e),
            }
        }
        conns = alive;
    }
}

/// Item 7: two attackers, each opening a DH-PSI session of the server's largest size
/// and sending it a QUERY whose last element is not a valid encoding, again and again;
/// a new session when the server ends one, the next address (of 200 per attacker) when
/// its session is refused. In place once the first query was sent.
fn failed_steps(ctx: &Ctx, stop: &AtomicBool, ready: &AtomicBool, tally: &Tally) {
    let n = ctx.max_client_items.min(10_000);
    std::thread::scope(|s| {
        for t in 0..2u8 {
            s.spawn(move || {
                let mut host = 1u8;
                let mut conn: Option<Conn> = None;
                let mut session: Option<String> = None;
                let mut query: Option<(u32, Vec<u8>)> = None;
                while !stop.load(Ordering::Relaxed) {
                    let Some(c) = reuse_or_open(&mut conn, addr(140 + t, host), ctx, stop, tally)
                    else {
                        continue;
                    };
                    let Some(sid) = session.clone() else {
                        let body = session_body(Protocol::Dh, n, false);
                        match c.request(Method::Post, "/v1/sessions", &[JSON], body.as_bytes()) {
                            Ok(r) => {
                                tally.add(format!("create: {}", r.outcome()));
                                match created(&r.body) {
                                    Some((sid, epoch)) if r.status == 201 => {
                                        if query.as_ref().is_none_or(|q| q.0 != epoch) {
                                            query = bad_query(n, epoch).map(|q| (epoch, q));
                                        }
                                        session = Some(sid);
                                    }
                                    _ => {
                                        // Refused (budget, caps): the next address.
                                        host = host % 200 + 1;
                                        conn = None;
                                    }
                                }
                            }
                            Err(e) => {
                                tally.io("create", &e);
                                conn = None;
                            }
                        }
                        continue;
                    };
                    let Some((_, q)) = query.as_ref() else {
                        return;
                    };
                    let path = format!("/v1/sessions/{sid}/dh/query");
                    match c.request(Method::Post, &path, &[BIN], q) {
                        Ok(r) => {
                            tally.add(format!("bad query: {}", r.outcome()));
                            ready.store(true, Ordering::Relaxed);
                            if r.status == 409 || r.status == 404 || r.status == 200 {
                                session = None;
                            }
                        }
                        Err(e) => {
                            tally.io("bad query", &e);
                            conn = None;
                        }
                    }
                }
            });
        }
    });
}

/// A DH-PSI QUERY of `n` valid elements for `epoch` whose last element is replaced by
/// 32 bytes of 0xFF (not a canonical encoding): the server decodes the `n - 1` before it.
/// An attack tool forging a malformed message: it edits the bytes (QUERY is `17 + 32 n`
/// bytes, the elements last, docs/protocol/dh-psi.md).
fn bad_query(n: u64, epoch: u32) -> Option<Vec<u8>> {
    let items = psi_core::ItemSet::new((0..n).map(|i| format!("+1888{i:07}").into_bytes()));
    let mut rng = psi_core::rng::os_rng().ok()?;
    let (_, mut q) =
        psi_core::dh::DhClient::start(items, epoch, psi_core::Threads::available(), &mut rng)
            .ok()?;
    let len = q.len();
    q.get_mut(len.checked_sub(32)?..)?.fill(0xFF);
    Some(q)
}

/// Item 8: two callers sending OT-PSI session requests at n = 4095 (or the server's
/// limit), without labels, in a loop; a session that is created is deleted at once
/// (its charge stays): soon every request is refused. In place at once.
fn ot_refused(ctx: &Ctx, stop: &AtomicBool, ready: &AtomicBool, tally: &Tally) {
    let n = ctx.max_client_items.min(4095);
    ready.store(true, Ordering::Relaxed);
    std::thread::scope(|s| {
        for t in 0..2u8 {
            s.spawn(move || {
                let mut conn: Option<Conn> = None;
                while !stop.load(Ordering::Relaxed) {
                    let Some(c) = reuse_or_open(&mut conn, addr(150, 1 + t), ctx, stop, tally)
                    else {
                        continue;
                    };
                    let body = session_body(Protocol::Ot, n, false);
                    match c.request(Method::Post, "/v1/sessions", &[JSON], body.as_bytes()) {
                        Ok(r) => {
                            tally.add(r.outcome());
                            if let Some((sid, _)) = created(&r.body) {
                                let path = format!("/v1/sessions/{sid}");
                                if let Err(e) = c.request(Method::Delete, &path, &[], &[]) {
                                    tally.io("delete", &e);
                                    conn = None;
                                }
                            }
                        }
                        Err(e) => {
                            tally.io("request", &e);
                            conn = None;
                        }
                    }
                }
            });
        }
    });
}

/// Item 10: two callers downloading the whole encoded set again and again (no
/// `If-None-Match`). In place at once.
fn set_download(ctx: &Ctx, stop: &AtomicBool, ready: &AtomicBool, tally: &Tally) {
    ready.store(true, Ordering::Relaxed);
    std::thread::scope(|s| {
        for t in 0..2u8 {
            s.spawn(move || {
                let mut conn: Option<Conn> = None;
                while !stop.load(Ordering::Relaxed) {
                    let Some(c) = reuse_or_open(&mut conn, addr(160, 1 + t), ctx, stop, tally)
                    else {
                        continue;
                    };
                    match c.request(Method::Get, "/v1/dh/encoded-set", &[], &[]) {
                        Ok(r) => {
                            tally.add(r.outcome());
                            tally
                                .bytes
                                .fetch_add(r.body.len() as u64, Ordering::Relaxed);
                            if r.status != 200 {
                                pause(stop, Duration::from_millis(100));
                            }
                        }
                        Err(e) => {
                            tally.io("request", &e);
                            conn = None;
                        }
                    }
                }
            });
        }
    });
}
