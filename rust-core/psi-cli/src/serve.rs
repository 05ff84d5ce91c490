//! `psi serve`: the reference HTTP server.

use crate::db_args::ServerArgs;
use crate::progress::progress_bar;
use crate::token_args::read_token_file;
use psi_server::{AppState, ClientIpHeader, Config, IpNet, Registry};
use std::sync::Arc;
use std::time::Duration;

/// Below this `--rotate-every`, `psi serve --enable-sync` warns that rotations cost every
/// synced client a snapshot (ADR 0047 §3.4 proposes a 30-day sync epoch).
const SYNC_ROTATION_HINT_DAYS: u64 = 7;

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Address to listen on (port 0: any free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: std::net::SocketAddr,
    /// This instance's name, 1 to 16 characters of a-z and 0-9: the prefix of its session
    /// ids, by which a load balancer in front of several instances routes each session's
    /// requests to the instance holding it (docs/deploy/nginx.conf). Default: 8 random
    /// hex digits, chosen at start and logged.
    #[arg(long, value_name = "NAME")]
    instance: Option<psi_server::InstanceName>,
    /// Largest request body in bytes.
    #[arg(long, default_value_t = 8 << 20)]
    max_body_bytes: usize,
    /// Most live sessions (a waiting session holds a few hundred bytes). At the cap the
    /// oldest idle session of the address block with the most sessions makes room.
    #[arg(long, default_value_t = 16_384)]
    max_sessions: usize,
    /// Most live sessions of one caller (token, or client IP address / IPv6 prefix without
    /// tokens).
    #[arg(long, default_value_t = 16)]
    max_sessions_per_client: usize,
    /// Most live sessions of one address block (--ipv4-block-prefix, --ipv6-block-prefix;
    /// a token caller is its own block).
    #[arg(long, default_value_t = 256)]
    max_sessions_per_block: usize,
    /// Prefix length of the IPv4 address blocks for --max-sessions-per-block and
    /// --ipv4-block-budgets.
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u8).range(1..=32))]
    ipv4_block_prefix: u8,
    /// Prefix length of the IPv6 address blocks for --max-sessions-per-block and
    /// --ipv6-block-budgets.
    #[arg(long, default_value_t = 48, value_parser = clap::value_parser!(u8).range(1..=128))]
    ipv6_block_prefix: u8,
    /// Seconds a session may go without a successful step (and no request under way)
    /// before it is ended, whatever its phase; refused requests do not count.
    #[arg(long, default_value_t = 30)]
    session_idle_timeout: u64,
    /// Seconds an OT-PSI or CM20-PSI session has, from its creation, to get its hello
    /// answered; then it is ended and its OT slot freed.
    #[arg(long, default_value_t = 10)]
    ot_hello_timeout: u64,
    /// Most OT-PSI runs in progress (each holds about 90 bytes per registry entry until
    /// its run ends).
    #[arg(long, default_value_t = 8)]
    max_ot_sessions: usize,
    /// Most OT-PSI runs in progress of one caller.
    #[arg(long, default_value_t = 2)]
    max_ot_sessions_per_client: usize,
    /// OT-PSI sessions one caller may start per hour (each costs the server work in
    /// proportion to the registry); 0 = unlimited.
    #[arg(long, default_value_t = 30)]
    ot_sessions_per_hour: u64,
    /// Session lifetime in seconds.
    #[arg(long, default_value_t = 300)]
    session_ttl: u64,
    /// Longest a request may take, body upload included, in seconds.
    #[arg(long, default_value_t = 120)]
    request_timeout: u64,
    /// Target average label records per bucket (at least 4: clients refuse sparser
    /// layouts, `psi_core::labels::MIN_BUCKET_OCCUPANCY`). More hides each fetched bucket
    /// among more entries, at proportionally more bytes per run
    /// (docs/protocol/labels.md, sections 5 and 6).
    #[arg(long, default_value_t = psi_server::Config::default().label_bucket_size,
          value_parser = parse_label_bucket_size)]
    label_bucket_size: usize,
    /// Items one client may query per hour; 0 = unlimited. A client is an issued token
    /// (`psi token add`, which may set its own budget), a static token (shared by all who
    /// hold it), or without authentication a client IP address (IPv6: a prefix). Budgets
    /// are kept in the database across restarts; with --db postgres://... every instance
    /// charges one shared budget per client in the database.
    #[arg(long, default_value_t = 20_000)]
    items_per_hour: u64,
    /// Bytes of the bounded link probe (GET and POST /v1/probe, both ways together) one
    /// client may move per hour; 0 = unlimited. Default 16 MiB (64 probes of the largest
    /// size, about 127 of a client's). With SQLite kept in memory (a restart resets it);
    /// with --db postgres://... charged in the database, shared by every instance.
    #[arg(long, default_value_t = 16 << 20)]
    probe_bytes_per_hour: u64,
    /// Group relay (/v1/groups): most live groups on this instance.
    #[arg(long, default_value_t = psi_server::GroupLimits::default().max_groups)]
    max_groups: usize,
    /// Group relay: most live groups one client may have created.
    #[arg(long, default_value_t = psi_server::GroupLimits::default().max_groups_per_client)]
    max_groups_per_client: usize,
    /// Group relay: a group's lifetime in seconds (then it is removed with its mailboxes).
    #[arg(long, default_value_t = psi_server::GroupLimits::default().ttl.as_secs())]
    group_ttl: u64,
    /// Group relay: bytes one client may post to mailboxes per hour (each post at least
    /// 1 KiB); 0 = unlimited. As the probe's budget, in memory with SQLite and shared by
    /// every instance with --db postgres://...
    #[arg(long, default_value_t = psi_server::GroupLimits::default().bytes_per_hour)]
    group_bytes_per_hour: u64,
    /// Group relay: largest envelope one post carries, in bytes (at most --max-body-bytes).
    #[arg(long, default_value_t = psi_server::GroupLimits::default().max_message_bytes)]
    group_max_message_bytes: usize,
    /// Bytes of full encoded-set downloads (200 answers; 304s are free) one client may
    /// take per hour, label buckets included; 0 = unlimited. Default 64 MiB (about 10
    /// downloads of a set of 10^6 entries). With SQLite kept in memory; with --db
    /// postgres://... shared by every instance. With a CDN serving the set, see docs/api.md
    /// "Encoded set".
    #[arg(long, default_value_t = 64 << 20)]
    encoded_set_bytes_per_hour: u64,
    /// Without tokens, the budgets (of --items-per-hour and --encoded-set-bytes-per-hour)
    /// all clients of one IPv4 --ipv4-block-prefix network share beside their own; 0 = no
    /// such level (docs/adr/0038-budgets-per-address-block.md).
    #[arg(long, default_value_t = 4)]
    ipv4_block_budgets: u64,
    /// Without tokens, the budgets all clients of one IPv6 --ipv6-block-prefix network (a
    /// /48 site) share; 0 = no such level.
    #[arg(long, default_value_t = 4)]
    ipv6_block_budgets: u64,
    /// Prefix length of the wider IPv6 network for --ipv6-allocation-budgets.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u8).range(1..=128))]
    ipv6_allocation_prefix: u8,
    /// Without tokens, the budgets all clients of one IPv6 --ipv6-allocation-prefix
    /// network (an operator's /32) share; 0 = no such level.
    #[arg(long, default_value_t = 16)]
    ipv6_allocation_budgets: u64,
    /// Without tokens, the budgets all clients together may spend per hour, server-wide;
    /// 0 = no ceiling. An internet-facing server should run with tokens instead: clients
    /// with a token are never limited by it.
    #[arg(long, default_value_t = 50)]
    address_ceiling_budgets: u64,
    /// Without tokens, a client that has spent less than 1/N of its own budget this hour
    /// is not refused by a network or the ceiling that others drained (its charges take
    /// from reserves as large as those levels); 0 = no floor.
    #[arg(long, default_value_t = 16, value_name = "N")]
    address_floor_divisor: u64,
    /// Static bearer token, one shared budget (repeat for several; visible in the process
    /// list: prefer --token-file, or per-user tokens from `psi token add`). Also read from
    /// PSI_TOKENS (comma separated). Authentication is on when a static token is given or
    /// the database holds an issued token.
    #[arg(long = "token")]
    tokens: Vec<String>,
    /// File of static bearer tokens, one per line (empty lines and # comments skipped).
    #[arg(long)]
    token_file: Option<std::path::PathBuf>,
    /// A reverse proxy (IP address or network, e.g. 10.0.0.0/8; repeatable) whose
    /// --client-ip-header names the client. From any other peer the header is ignored.
    /// List only proxies that append the address they see to that header.
    #[arg(long = "trusted-proxy", value_name = "IP_OR_CIDR")]
    trusted_proxies: Vec<IpNet>,
    /// The header trusted proxies append the client address to: x-forwarded-for or
    /// forwarded (RFC 7239 for=). Read from the right, skipping trusted proxies; a
    /// malformed value is answered 400.
    #[arg(long, default_value_t = ClientIpHeader::XForwardedFor)]
    client_ip_header: ClientIpHeader,
    /// Without tokens, IPv6 clients share a budget per prefix of this length (RIPE-690
    /// recommends /56 for homes, /48 for businesses).
    #[arg(long, default_value_t = 56, value_parser = clap::value_parser!(u8).range(1..=128))]
    ipv6_prefix: u8,
    /// Without tokens, IPv4 clients share a budget per prefix of this length (32: per
    /// address).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u8).range(1..=32))]
    ipv4_prefix: u8,
    /// Concurrent CPU-heavy jobs other than OT-PSI rounds (default: cores).
    #[arg(long)]
    workers: Option<usize>,
    /// Concurrent OT-PSI rounds, a separate pool so DH-PSI stays served (default: half
    /// the cores, at least 1).
    #[arg(long)]
    ot_workers: Option<usize>,
    /// Seconds an OT-PSI run may go without a successful round (and no request under way)
    /// before it is ended and its OT slot freed.
    #[arg(long, default_value_t = 30)]
    ot_idle_timeout: u64,
    /// Serve DH-PSI only.
    #[arg(long)]
    no_ot: bool,
    /// Also serve CM20-PSI (fewer bytes than OT-PSI, similar computation). Off by default:
    /// CM20 is secure against semi-honest clients only, and a malicious client could test
    /// any numbers it likes against the registry (docs/adr/0021-cm20-psi.md).
    #[arg(long)]
    enable_cm20: bool,
    /// Also serve GBF-PSI (PSZ14's random garbled Bloom filter: no group operations per
    /// item, the most bytes up). Off by default for CM20's reason: semi-honest clients
    /// only (docs/adr/0048-gbf-psi.md).
    #[arg(long)]
    enable_gbf: bool,
    /// Also serve sync mode for DH-PSI (docs/protocol/sync.md): a phone downloads a few
    /// bits per entry once and small deltas afterwards, not the encoded set. Costs memory
    /// at every load (a record per entry: about 570 MB at 10^7 entries). A key rotation
    /// makes every synced client download a new snapshot: pair it with a longer
    /// --rotate-every (30d) unless daily rotation matters more than the bytes.
    #[arg(long)]
    enable_sync: bool,
    /// TLS certificate chain (PEM, leaf first): serve HTTPS. Needs --tls-key.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// TLS private key (PEM: PKCS#8, PKCS#1 or SEC1; keep it secret). Needs --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// Seconds a request head may take from its first byte (and a TLS handshake from
    /// accept): slow-header clients are cut off.
    #[arg(long, default_value_t = 20)]
    header_read_timeout: u64,
    /// Seconds a connection with no request in progress may stay silent (new or
    /// keep-alive) before it is closed.
    #[arg(long, default_value_t = 30)]
    idle_timeout: u64,
    /// Most open connections. At the cap the longest-idle connection is closed to make
    /// room; when every connection has a request in progress, further ones wait in the
    /// listen backlog until one closes.
    #[arg(long, default_value_t = 512)]
    max_connections: usize,
    /// Most open connections of one address (IPv4 address, IPv6 --ipv6-prefix network;
    /// trusted proxies exempt).
    #[arg(long, default_value_t = 32)]
    max_connections_per_address: usize,
    /// Bytes per second a client must at least read a response at, after
    /// --send-grace; a slower reader is cut off (0 = no limit).
    #[arg(long, default_value_t = 8 << 10)]
    min_send_rate: u64,
    /// Seconds every response gets before --min-send-rate counts.
    #[arg(long, default_value_t = 10)]
    send_grace: u64,
    /// Most response bytes not yet written to the sockets, server-wide; at the cap the
    /// longest-sending connection is closed for a new request.
    #[arg(long, default_value_t = 512 << 20)]
    max_response_bytes_in_flight: u64,
    /// Most response bytes not yet written to the sockets of one address; beyond it its
    /// requests are refused (429) until its readers catch up.
    #[arg(long, default_value_t = 64 << 20)]
    max_response_bytes_per_address: u64,
    /// Most open connections of one address block (IPv4 /24, IPv6 /48, as for
    /// sessions; trusted proxies exempt).
    #[arg(long, default_value_t = 128)]
    max_connections_per_block: usize,
    /// Bytes per second a client must at least upload a request body at, after
    /// --upload-grace; a slower upload is cut off (0 = no limit).
    #[arg(long, default_value_t = 8 << 10)]
    min_upload_rate: u64,
    /// Seconds every request body gets before --min-upload-rate counts.
    #[arg(long, default_value_t = 10)]
    upload_grace: u64,
    /// Most request body bytes received for requests in progress, server-wide; at the
    /// cap the longest upload is closed for a new one, or the new one refused (503).
    #[arg(long, default_value_t = 256 << 20)]
    max_request_bytes_in_flight: u64,
    /// Most request body bytes received for requests in progress of one address;
    /// beyond it its uploads are refused (429).
    #[arg(long, default_value_t = 32 << 20)]
    max_request_bytes_per_address: u64,
    /// GET /v1/health requests one address may make per hour (0 = no limit).
    #[arg(long, default_value_t = 3_600)]
    health_per_hour: u64,
    /// Requests with a bearer token not known valid that one address may make per hour
    /// (each may cost a token lookup); beyond it 429 while authentication is on
    /// (0 = no limit).
    #[arg(long, default_value_t = 600)]
    invalid_tokens_per_hour: u64,
    /// Start a new key epoch when the key is this old (e.g. 24h, 90m, 7d; at least 1m;
    /// `off`: only `psi rotate-key`). The new epoch is built in the background; lookups
    /// and removals are bounded by it (docs/adr/0017-scheduled-key-rotation.md).
    #[arg(long, default_value = "24h", value_parser = parse_rotate_every)]
    rotate_every: Period,
    /// How often to look at the database for a change made by `psi import` or
    /// `psi rotate-key` and serve it once complete (e.g. 2s, 1m; `off`: only on SIGHUP).
    /// A read-only query; the server never writes to pick a change up.
    #[arg(long, default_value = "2s", value_parser = parse_watch_store)]
    watch_store: Period,
    /// Seconds the previous key epoch stays served after a rotation, so sessions started
    /// before it can finish (default: the session lifetime). Several instances on one
    /// PostgreSQL: give them all the same value (one started during the overlap serves the
    /// previous epoch's set until the overlap, counted from the rotation, ends).
    #[arg(long)]
    epoch_overlap: Option<u64>,
}

/// A period given on the command line, or off (`None`).
#[derive(Debug, Clone, Copy)]
struct Period(Option<Duration>);

/// Shortest period `--rotate-every` takes: each rotation recomputes every entry's output
/// (about 37 s for 10^6 entries on 2 cores), so shorter periods would rebuild without end.
const MIN_ROTATE_EVERY: Duration = Duration::from_secs(60);

fn parse_rotate_every(s: &str) -> Result<Period, String> {
    parse_period(
        s,
        MIN_ROTATE_EVERY,
        "the rotation period must be at least 1m",
    )
}

fn parse_watch_store(s: &str) -> Result<Period, String> {
    parse_period(
        s,
        Duration::from_secs(1),
        "the watch period must be at least 1s",
    )
}

/// `N` followed by a unit (s, m, h, d), at least `min`, or `off`.
fn parse_period(s: &str, min: Duration, too_short: &str) -> Result<Period, String> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("off") {
        return Ok(Period(None));
    }
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| "expected a number with a unit (s, m, h, d), e.g. 24h, or off".to_string())?;
    let unit_secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err("the unit must be s, m, h or d (e.g. 24h), or use off".into()),
    };
    let d = Duration::from_secs(
        n.checked_mul(unit_secs)
            .ok_or_else(|| "period too long".to_string())?,
    );
    if d < min {
        return Err(too_short.into());
    }
    Ok(Period(Some(d)))
}

/// `--label-bucket-size`: a whole number of at least `MIN_BUCKET_OCCUPANCY` (4).
fn parse_label_bucket_size(s: &str) -> Result<usize, String> {
    let n: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a whole number"))?;
    let min = psi_core::labels::MIN_BUCKET_OCCUPANCY;
    if (n as u64) < min {
        return Err(format!(
            "{n} is below {min}: clients refuse a layout with fewer than {min} entries per bucket"
        ));
    }
    Ok(n)
}

pub fn run(args: ServeArgs) -> Result<(), String> {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let mut config = Config::default();
    config.db = args.server.db.database()?;
    config.instance = args.instance.clone();
    config.max_client_items = args.server.max_client_items;
    config.max_body_bytes = args.max_body_bytes;
    config.groups.max_message_bytes = args.group_max_message_bytes.min(config.max_body_bytes);
    config.max_sessions = args.max_sessions;
    config.max_sessions_per_client = args.max_sessions_per_client;
    config.max_sessions_per_block = args.max_sessions_per_block;
    config.ipv4_block_prefix = args.ipv4_block_prefix;
    config.ipv6_block_prefix = args.ipv6_block_prefix;
    config.session_idle_timeout = Duration::from_secs(args.session_idle_timeout.max(1));
    config.ot_hello_timeout = Duration::from_secs(args.ot_hello_timeout.max(1));
    config.max_ot_sessions = args.max_ot_sessions;
    config.max_ot_sessions_per_client = args.max_ot_sessions_per_client;
    config.ot_sessions_per_hour = args.ot_sessions_per_hour;
    config.session_ttl = Duration::from_secs(args.session_ttl.max(1));
    config.request_timeout = Duration::from_secs(args.request_timeout.max(1));
    config.items_per_hour = args.items_per_hour;
    config.label_bucket_size = args.label_bucket_size;
    config.enable_sync = args.enable_sync;
    config.probe_bytes_per_hour = args.probe_bytes_per_hour;
    config.groups.max_groups = args.max_groups;
    config.groups.max_groups_per_client = args.max_groups_per_client;
    config.groups.ttl = Duration::from_secs(args.group_ttl.max(1));
    config.groups.bytes_per_hour = args.group_bytes_per_hour;
    config.encoded_set_bytes_per_hour = args.encoded_set_bytes_per_hour;
    config.ipv4_block_budgets = args.ipv4_block_budgets;
    config.ipv6_block_budgets = args.ipv6_block_budgets;
    config.ipv6_allocation_prefix = args.ipv6_allocation_prefix;
    config.ipv6_allocation_budgets = args.ipv6_allocation_budgets;
    config.address_ceiling_budgets = args.address_ceiling_budgets;
    config.address_floor_divisor = args.address_floor_divisor;
    config.tokens = args.tokens.clone();
    if let Some(path) = &args.token_file {
        config.tokens.extend(read_token_file(path)?);
    }
    if let Ok(env) = std::env::var("PSI_TOKENS") {
        config.tokens.extend(
            env.split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(String::from),
        );
    }
    config.trusted_proxies = args.trusted_proxies.clone();
    config.client_ip_header = args.client_ip_header;
    config.ipv6_prefix = args.ipv6_prefix;
    config.ipv4_prefix = args.ipv4_prefix;
    if let Some(w) = args.workers {
        config.workers = w.max(1);
    }
    if let Some(w) = args.ot_workers {
        config.ot_workers = w.max(1);
    }
    config.ot_idle_timeout = Duration::from_secs(args.ot_idle_timeout.max(1));
    config.enable_ot = !args.no_ot;
    config.enable_cm20 = args.enable_cm20;
    config.enable_gbf = args.enable_gbf;
    config.header_read_timeout = Duration::from_secs(args.header_read_timeout.max(1));
    config.idle_timeout = Duration::from_secs(args.idle_timeout.max(1));
    config.max_connections = args.max_connections.max(1);
    config.max_connections_per_address = args.max_connections_per_address.max(1);
    config.min_send_rate = args.min_send_rate;
    config.send_grace = Duration::from_secs(args.send_grace);
    config.max_response_bytes_in_flight = args.max_response_bytes_in_flight;
    config.max_response_bytes_per_address = args.max_response_bytes_per_address;
    config.max_connections_per_block = args.max_connections_per_block.max(1);
    config.min_upload_rate = args.min_upload_rate;
    config.upload_grace = Duration::from_secs(args.upload_grace);
    config.max_request_bytes_in_flight = args.max_request_bytes_in_flight;
    config.max_request_bytes_per_address = args.max_request_bytes_per_address;
    config.health_per_hour = args.health_per_hour;
    config.invalid_tokens_per_hour = args.invalid_tokens_per_hour;
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        // Before the registry build, so a bad file fails fast.
        config.tls = Some(
            psi_server::ServerTls::from_pem_files(cert, key).map_err(|e| format!("TLS: {e}"))?,
        );
    }
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    config.rotate_every = args.rotate_every.0;
    if config.enable_sync
        && config
            .rotate_every
            .is_some_and(|d| d < Duration::from_secs(SYNC_ROTATION_HINT_DAYS * 24 * 3600))
    {
        // A rotation changes every short tag: each synced client then downloads a new
        // snapshot, not a delta (docs/protocol/sync.md §7, ADR 0047 §3.4).
        tracing::warn!(
            "sync mode with --rotate-every under {SYNC_ROTATION_HINT_DAYS} days: every rotation makes each synced client download a new snapshot; --rotate-every 30d keeps the daily updates to deltas"
        );
    }
    config.watch_store = args.watch_store.0;
    config.after_registry_change = Some(crate::measure::return_freed_memory);
    config.epoch_overlap = args
        .epoch_overlap
        .map_or(config.session_ttl, Duration::from_secs);
    let pb = progress_bar(0, "computing OPRF outputs", false);
    let registry = Registry::load(&config, &mut |done, total| {
        pb.set_length(total);
        pb.set_position(done);
    })
    .map_err(|e| e.to_string())?;
    pb.finish_and_clear();
    crate::measure::return_freed_memory();
    let stats = registry.stats();
    tracing::info!(
        epoch = stats.epoch,
        entries = stats.entries,
        labeled = stats.labeled,
        encoded_set_bytes = stats.encoded_set_bytes,
        held_mb = stats.held_bytes / 1_000_000,
        outputs_computed = stats.outputs_computed,
        build_ms = stats.build_time.as_millis() as u64,
        "registry loaded"
    );
    // Who the rate limit counts against (ADR 0016); issued tokens are re-read per request.
    let issued = config
        .db
        .open_accounts()
        .and_then(|s| s.tokens())
        .map_err(|e| e.to_string())?;
    tracing::info!(
        authentication = !config.tokens.is_empty() || !issued.is_empty(),
        static_tokens = config.tokens.len(),
        issued_tokens_active = issued.iter().filter(|t| !t.revoked).count(),
        trusted_proxies = config.trusted_proxies.len(),
        "callers"
    );
    if config.tokens.is_empty() && issued.is_empty() && !args.listen.ip().is_loopback() {
        tracing::warn!(
            "no tokens: callers are told apart by address only, and share budgets per network and a server-wide ceiling; an internet-facing server should run with tokens (psi token add)"
        );
    }
    let state = AppState::with_registry(config, registry);
    tracing::info!(
        instance = %state.instance(),
        "instance name (the prefix of this instance's session ids)"
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        // Before the address line: whoever read it may send SIGHUP at once, and without
        // the handler SIGHUP ends the process.
        spawn_reload_on_sighup(state.clone())?;
        println!("psi serve: listening on {scheme}://{addr}");
        psi_server::serve(listener, state, shutdown_signal())
            .await
            .map_err(|e| e.to_string())?;
        tracing::info!("shut down");
        Ok(())
    })
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutdown requested; finishing requests in flight");
}

/// SIGHUP re-reads the store (after `psi import` or `psi rotate-key`); sessions of the
/// previous epoch finish within the overlap. The handler is installed when this returns
/// (SIGHUP no longer ends the process); the reloads run on a task.
fn spawn_reload_on_sighup(state: Arc<AppState>) -> Result<(), String> {
    #[cfg(unix)]
    {
        let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .map_err(|e| format!("cannot handle SIGHUP: {e}"))?;
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                let st = state.clone();
                match tokio::task::spawn_blocking(move || st.reload()).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => tracing::error!(error = %e, "reload failed"),
                    Err(_) => tracing::error!("reload task failed"),
                }
            }
        });
    }
    #[cfg(not(unix))]
    let _ = state;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotate_every_parses_periods_and_off() {
        let p = |s| parse_rotate_every(s).map(|r| r.0);
        assert_eq!(p("24h"), Ok(Some(Duration::from_secs(86_400))));
        assert_eq!(p("90m"), Ok(Some(Duration::from_secs(5400))));
        assert_eq!(p("7d"), Ok(Some(Duration::from_secs(7 * 86_400))));
        assert_eq!(p("60s"), Ok(Some(Duration::from_secs(60))));
        assert_eq!(p("off"), Ok(None));
        for bad in ["", "h", "24", "24x", "-1h", "59s", "99999999999999999999d"] {
            assert!(p(bad).is_err(), "{bad}");
        }
        let w = |s| parse_watch_store(s).map(|r| r.0);
        assert_eq!(w("2s"), Ok(Some(Duration::from_secs(2))));
        assert_eq!(w("off"), Ok(None));
        assert!(w("0s").is_err());
    }
}
