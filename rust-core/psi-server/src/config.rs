//! The server's settings ([`Config`]): every limit, timeout and switch of `psi serve`,
//! with the documented defaults.

use crate::instance::InstanceName;
use crate::net::{ClientIpHeader, IpNet};
use crate::storage;
use crate::tls::ServerTls;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Server settings. [`Config::default`] gives the documented defaults.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// The store (`psi serve --db`): a SQLite file (secret material: holds the OPRF key;
    /// `:memory:` for a throwaway store), or the shared store of several instances.
    pub db: storage::Database,
    /// This instance's name, the prefix of its session ids (`psi serve --instance`): a
    /// load balancer in front of several instances routes a session's requests by it, and
    /// a session step that reaches another instance is answered `421 wrong_instance`
    /// (docs/deploy/nginx.conf). `None` (the default): 8 random hex digits chosen at
    /// start ([`AppState::instance`](crate::AppState::instance)).
    pub instance: Option<InstanceName>,
    /// Largest request body in bytes (default 8 MiB).
    pub max_body_bytes: usize,
    /// Largest client set per session (default 10,000; also sizes the encoded set's `L`).
    pub max_client_items: usize,
    /// Most live sessions at once (default 16,384: a session waiting for its query holds a
    /// few hundred bytes, so the default table is a few MB; OT-PSI runs have their own
    /// cap, `max_ot_sessions`). At the cap the oldest idle session of the address block
    /// holding the most sessions is ended to make room for the new one
    /// (docs/adr/0034-session-table-limits.md).
    pub max_sessions: usize,
    /// Most live sessions of one caller, token or IP (default 16).
    pub max_sessions_per_client: usize,
    /// Most live sessions of one address block, `ipv4_block_prefix` or
    /// `ipv6_block_prefix` (default 256): many addresses of one network count together.
    /// A token caller is its own block.
    pub max_sessions_per_block: usize,
    /// Prefix length of the IPv4 address block for `max_sessions_per_block` (default 24;
    /// never narrower than `ipv4_prefix`).
    pub ipv4_block_prefix: u8,
    /// Prefix length of the IPv6 address block for `max_sessions_per_block` (default 48;
    /// never narrower than `ipv6_prefix`).
    pub ipv6_block_prefix: u8,
    /// A session with no successful step for this long, and no request under way, is
    /// ended whatever its phase (default 30 s): refused requests do not count, so a
    /// session that makes no progress cannot hold its place in the table.
    pub session_idle_timeout: Duration,
    /// An OT-PSI or CM20-PSI session whose hello has not been answered this long after
    /// its creation is ended and its OT slot freed (default 10 s; a request under way
    /// does not extend it).
    pub ot_hello_timeout: Duration,
    /// Most OT-PSI runs in progress (default 8): each holds state of about 90 bytes per
    /// registry entry until its run ends (outputs sent or failed), it is deleted or it
    /// expires.
    pub max_ot_sessions: usize,
    /// Most OT-PSI runs in progress of one caller, token or IP (default 2).
    pub max_ot_sessions_per_client: usize,
    /// OT-PSI sessions one caller may start per hour (default 30; 0 = no limit): each costs
    /// the server O(registry size) work and memory whatever its `n`
    /// (`docs/adr/0015-ot-psi-admission-and-charging.md`).
    pub ot_sessions_per_hour: u64,
    /// Session lifetime (default 300 s).
    pub session_ttl: Duration,
    /// Longest a request may take, body upload included (default 120 s): slow or stalled
    /// uploads cannot pin memory and connections for long.
    pub request_timeout: Duration,
    /// Items one client (token or IP) may query per hour (default 20,000; 0 = no limit).
    /// Tokens issued with their own budget (`psi token add --items-per-hour`) use theirs.
    pub items_per_hour: u64,
    /// Per-caller budgets an IPv4 address block (`ipv4_block_prefix`, a /24) shares per
    /// hour beside each caller's own (default 4; 0 = no block budget): many addresses of
    /// one network get a few budgets, not one each (docs/adr/0038-budgets-per-address-block.md).
    /// Applies to the items and the encoded-set download budgets of callers without a
    /// token.
    pub ipv4_block_budgets: u64,
    /// Per-caller budgets an IPv6 site (`ipv6_block_prefix`, a /48) shares per hour beside
    /// each caller's own /56 (default 4; 0 = none).
    pub ipv6_block_budgets: u64,
    /// Prefix length of the IPv6 allocation whose callers share
    /// `ipv6_allocation_budgets` (default 32, an operator's usual allocation).
    pub ipv6_allocation_prefix: u8,
    /// Per-caller budgets an IPv6 allocation (`ipv6_allocation_prefix`, a /32) shares per
    /// hour (default 16; 0 = none).
    pub ipv6_allocation_budgets: u64,
    /// Per-caller budgets all callers without a token share per hour, server-wide
    /// (default 50: 10^6 items an hour at the default `items_per_hour`; 0 = no ceiling).
    /// Token callers are never charged to it. An internet-facing server should run with
    /// tokens: without them, whoever holds enough networks can spend this ceiling and
    /// leave other callers without a budget until it refills.
    pub address_ceiling_budgets: u64,
    /// A caller without a token that has spent less than 1/`address_floor_divisor` of its
    /// own budget this hour is not refused by a drained network or ceiling (default 16:
    /// 1,250 items an hour at the default `items_per_hour`, a 1,000-contact run; 0 = no
    /// floor). Such charges take from the caller's own budget and from each shared
    /// level's reserve, as large as the level: draining a reserve takes one address per
    /// floor (docs/adr/0044-a-floor-under-shared-budgets.md).
    pub address_floor_divisor: u64,
    /// Bytes of full encoded-set downloads (`GET /v1/dh/encoded-set` answered 200) one
    /// caller may take per hour (default 64 MiB, about 10 downloads of a set of 10^6
    /// entries; 0 = no limit); 304 answers are free. A set larger than this is charged
    /// this (one download an hour). Callers without a token share it also per network and
    /// under the ceiling, as the items budget. In memory only.
    pub encoded_set_bytes_per_hour: u64,
    /// The group relay's limits (`/v1/groups`, docs/adr/0051-group-relay.md).
    pub groups: crate::groups::GroupLimits,
    /// Probe bytes (`/v1/probe`, both ways) one client may move per hour (default 16 MiB,
    /// 64 probes of the largest size; 0 = no limit).
    pub probe_bytes_per_hour: u64,
    /// Static bearer tokens (shared budgets: each token is one client). Authentication is
    /// on when this is not empty or when the database holds an issued token (`psi token`).
    pub tokens: Vec<String>,
    /// Peers whose forwarding header names the client (default: none, the TCP peer is
    /// the client). Only for proxies that append to `client_ip_header`.
    pub trusted_proxies: Vec<IpNet>,
    /// The header trusted proxies append the client address to (default X-Forwarded-For).
    pub client_ip_header: ClientIpHeader,
    /// Prefix length by which IPv4 clients share a budget (default 32: per address).
    pub ipv4_prefix: u8,
    /// Prefix length by which IPv6 clients share a budget (default 56: RIPE-690 §4.2
    /// recommends /56 for residential and /48 for business customers).
    pub ipv6_prefix: u8,
    /// Concurrent CPU-heavy jobs other than OT rounds (DH queries, label steps); default:
    /// cores.
    pub workers: usize,
    /// Concurrent OT-PSI rounds, a pool of their own so DH-PSI stays served while OT
    /// sessions are busy (default: half the cores, at least 1).
    pub ot_workers: usize,
    /// An OT-PSI run with no successful round for this long, and no request of its
    /// session in progress, is ended and its OT slot freed (default 30 s): a caller that
    /// opens OT sessions and stalls cannot hold the OT slots until the sessions expire.
    pub ot_idle_timeout: Duration,
    /// Threads for building the encoded set at start (default: cores).
    pub build_threads: usize,
    /// Called after a reload installs a registry and after a previous epoch's is dropped
    /// (default none). `psi serve` hands the allocator's freed pages back to the system
    /// here: a load frees its entry list's many small buffers, which glibc would otherwise
    /// keep resident.
    pub after_registry_change: Option<fn()>,
    /// Serve OT-PSI sessions (default true).
    pub enable_ot: bool,
    /// Serve CM20-PSI sessions (default false: CM20 is secure against semi-honest clients
    /// only; a malicious client can evaluate the OPRF on any inputs it likes and test them
    /// against the registry offline; docs/adr/0021-cm20-psi.md). Needs `enable_ot` too
    /// (CM20 runs share the OT slots, budget and workers).
    pub enable_cm20: bool,
    /// Serve GBF-PSI sessions (default false, for CM20-PSI's reason: a malicious client
    /// can set more bits in its Bloom filter than its items need and learn the values of
    /// more registry entries; docs/adr/0048-gbf-psi.md). Needs `enable_ot` too (GBF runs
    /// share the OT slots, budget and workers).
    pub enable_gbf: bool,
    /// Target average label records per bucket (default 8: buckets hold 8 to 16 on
    /// average, so a client of 1,000 contacts fetches under 1 MB of labels from 10^6
    /// labelled entries; docs/adr/0033-a-label-for-every-match.md). More hides each
    /// fetched bucket among more entries, at proportionally more bytes per run; below 4
    /// clients refuse the layout (`psi_core::labels::MIN_BUCKET_OCCUPANCY`).
    pub label_bucket_size: usize,
    /// Serve sync mode (default false; docs/protocol/sync.md): every registry load also
    /// builds the snapshot of short tags, the deltas from recent versions and a
    /// confirmation record for every entry (about 57 bytes per entry in memory: 570 MB at
    /// 10^7, measured), and DH-PSI sessions asked for with `?sync=1` run in sync mode.
    pub enable_sync: bool,
    /// Longest a request head may take from its first byte to its end, and a TLS
    /// handshake from accept to its end (default 20 s, Apache's `RequestReadTimeout`
    /// header default): a client trickling a request head is cut off.
    pub header_read_timeout: Duration,
    /// A connection with no request in progress is closed after this long without a byte
    /// from the client (default 30 s): above the pause between the requests of one run,
    /// above ureq's 15 s pool age, so the client never reuses a connection being closed.
    pub idle_timeout: Duration,
    /// Most open connections (default 512, below the usual 1,024 open-file limit so
    /// the SQLite file and the listener always get descriptors). At the cap the
    /// connection that has been quiet longest among those with no request in progress
    /// and those whose request body is arriving (since its last byte) is closed to make
    /// room; when every other connection has a request in progress, further connections
    /// queue in the listen backlog until one closes
    /// (docs/adr/0037-connection-exposure.md, docs/adr/0045-upload-deadline-and-request-bytes.md).
    pub max_connections: usize,
    /// Most open connections of one address (default 32; IPv4 addresses and IPv6
    /// prefixes as `ipv4_prefix` and `ipv6_prefix` make a caller; trusted proxies are
    /// exempt). A newcomer beyond it closes that address's longest-quiet idle
    /// connection, or is closed at once when all of them are busy.
    pub max_connections_per_address: usize,
    /// Bytes per second a client must at least read a response at (default 8 KiB/s,
    /// 64 kbit/s; 0: no limit): a response must be written within `send_grace` plus
    /// its size at this rate, or the connection is closed. A slow reader cannot pin a
    /// large response.
    pub min_send_rate: u64,
    /// Time every response gets before `min_send_rate` counts (default 10 s).
    pub send_grace: Duration,
    /// Most response bytes handed over and not yet written to the sockets, in total
    /// (default 512 MiB). At the cap the connection whose response has been sending
    /// longest (at least `send_grace`) is closed to admit a new request; only when there
    /// is none is the request refused (503 `too_many_sessions`).
    pub max_response_bytes_in_flight: u64,
    /// Most unwritten response bytes of one address (default 64 MiB; trusted proxies
    /// exempt): a request from an address at the cap is refused (429 `rate_limited`)
    /// until its readers catch up. An address with nothing in flight is always admitted,
    /// so one response of any size is always possible.
    pub max_response_bytes_per_address: u64,
    /// Most open connections of one address block, `ipv4_block_prefix` or
    /// `ipv6_block_prefix` as for sessions (default 128; trusted proxies exempt): many
    /// addresses of one network cannot take every connection. A newcomer beyond it closes
    /// the block's longest-quiet idle connection, or is closed at once.
    pub max_connections_per_block: usize,
    /// Bytes per second a client must at least upload a request body at (default 8 KiB/s,
    /// 64 kbit/s; 0: no limit): a body must arrive within `upload_grace` plus its declared
    /// length (at most `max_body_bytes`) at this rate, or the connection is closed, as a
    /// slow reader is (docs/adr/0045-upload-deadline-and-request-bytes.md).
    pub min_upload_rate: u64,
    /// Time every request body gets before `min_upload_rate` counts (default 10 s).
    pub upload_grace: Duration,
    /// Most request body bytes received for requests in progress, in total (default
    /// 256 MiB). At the cap the connection whose upload has been going longest (at least
    /// `upload_grace`) is closed for a new upload; only when there is none is the upload
    /// refused (503 `too_many_sessions`). Requests without a body are not refused.
    pub max_request_bytes_in_flight: u64,
    /// Most request body bytes received for requests in progress of one address (default
    /// 32 MiB; trusted proxies exempt): beyond it the address's uploads are refused (429
    /// `rate_limited`). An address holding nothing is always admitted.
    pub max_request_bytes_per_address: u64,
    /// `GET /v1/health` requests one address may make per hour (default 3,600, a
    /// bucket refilled continuously; 0 = no limit). Beyond it: 429 `rate_limited`, and
    /// the connection is closed.
    pub health_per_hour: u64,
    /// Requests whose bearer token is not known valid that one address (by
    /// `ipv4_prefix` / `ipv6_prefix`) may make per hour (default 600, a bucket refilled
    /// continuously; 0 = no limit). Each such request may cost a token lookup; beyond it
    /// the credential is not looked up: 429 `rate_limited` while authentication is on,
    /// else the request is served as one without a credential. A token found valid gives
    /// its charge back. docs/adr/0046-remembered-credentials.md.
    pub invalid_tokens_per_hour: u64,
    /// TLS certificate and key; `None` serves plain HTTP (loopback, or behind a TLS
    /// proxy).
    pub tls: Option<ServerTls>,
    /// Start a new key epoch this long after the current key was created (default 24 h;
    /// `None`: only `psi rotate-key`). The new epoch's outputs and encoded set are built in
    /// the background and swapped in whole (ADR 0017). Needs a database file.
    pub rotate_every: Option<Duration>,
    /// How often the server looks at its database file for a change made by another
    /// process (`psi import`, `psi rotate-key`) and, once the change is complete, serves
    /// it (default 2 s; `None`: only on [`AppState::reload`](crate::AppState::reload), i.e. SIGHUP). A cheap
    /// read-only query; the server never writes to pick a change up
    /// ([`AppState::reload_if_changed`](crate::AppState::reload_if_changed)). The same
    /// looks probe a shared PostgreSQL's health: while it does not answer they come every
    /// 250 ms, so sessions are accepted within one interval of its return.
    pub watch_store: Option<Duration>,
    /// How long the previous epoch keeps being served after a new one is swapped in
    /// (default 300 s, the default session lifetime): sessions created before the swap
    /// finish with the key they started with. One previous epoch is kept.
    pub epoch_overlap: Duration,
}

impl Default for Config {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Config {
            db: storage::Database::Sqlite(PathBuf::from("psi-registry.sqlite")),
            instance: None,
            max_body_bytes: 8 << 20,
            max_client_items: 10_000,
            max_sessions: 16_384,
            max_sessions_per_client: 16,
            max_sessions_per_block: 256,
            ipv4_block_prefix: 24,
            ipv6_block_prefix: 48,
            session_idle_timeout: Duration::from_secs(30),
            ot_hello_timeout: Duration::from_secs(10),
            max_ot_sessions: 8,
            max_ot_sessions_per_client: 2,
            ot_sessions_per_hour: 30,
            session_ttl: Duration::from_secs(300),
            request_timeout: Duration::from_secs(120),
            items_per_hour: 20_000,
            probe_bytes_per_hour: 16 << 20,
            groups: crate::groups::GroupLimits::default(),
            ipv4_block_budgets: 4,
            ipv6_block_budgets: 4,
            ipv6_allocation_prefix: 32,
            ipv6_allocation_budgets: 16,
            address_ceiling_budgets: 50,
            address_floor_divisor: 16,
            encoded_set_bytes_per_hour: 64 << 20,
            tokens: Vec::new(),
            trusted_proxies: Vec::new(),
            client_ip_header: ClientIpHeader::XForwardedFor,
            ipv4_prefix: 32,
            ipv6_prefix: 56,
            workers: cores,
            ot_workers: (cores / 2).max(1),
            ot_idle_timeout: Duration::from_secs(30),
            build_threads: cores,
            after_registry_change: None,
            enable_ot: true,
            enable_cm20: false,
            enable_gbf: false,
            label_bucket_size: 8,
            enable_sync: false,
            header_read_timeout: Duration::from_secs(20),
            idle_timeout: Duration::from_secs(30),
            max_connections: 512,
            max_connections_per_address: 32,
            min_send_rate: 8 << 10,
            send_grace: Duration::from_secs(10),
            max_response_bytes_in_flight: 512 << 20,
            max_response_bytes_per_address: 64 << 20,
            max_connections_per_block: 128,
            min_upload_rate: 8 << 10,
            upload_grace: Duration::from_secs(10),
            max_request_bytes_in_flight: 256 << 20,
            max_request_bytes_per_address: 32 << 20,
            health_per_hour: 3_600,
            invalid_tokens_per_hour: 600,
            tls: None,
            rotate_every: Some(Duration::from_secs(24 * 3600)),
            watch_store: Some(Duration::from_secs(2)),
            epoch_overlap: Duration::from_secs(300),
        }
    }
}

/// `now + d`, saturating at about a century (durations from configuration can be huge).
pub(crate) fn instant_after(d: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 86_400);
    let now = Instant::now();
    now.checked_add(d.min(CENTURY)).unwrap_or(now)
}
