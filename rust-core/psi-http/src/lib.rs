//! # psi-http
//!
//! The HTTP contract between `psi-server` and `psi-client` (`docs/api.md`): the route
//! table, the JSON bodies and the typed error codes with their HTTP statuses. Protocol
//! message bodies are psi-core's business; this crate never looks inside them.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod own_units;

pub use own_units::OwnUnitsNs;
use psi_core::cost::UnitCosts;
use serde::{Deserialize, Serialize};

/// HTTP method of a route (the API uses these three only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// GET
    Get,
    /// POST
    Post,
    /// DELETE
    Delete,
}

impl Method {
    /// `GET`, `POST`, `DELETE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Delete => "DELETE",
        }
    }
}

/// Every endpoint of the API: one table for the server's router and the client's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
// Not `#[non_exhaustive]`: the server's router, the client's response caps and the API
// document match every route by name, so a new route (a new protocol's step) fails to
// compile until each has its arm (issue 38).
pub enum Route {
    /// `GET /v1/health`: liveness, registry summary and limits; never needs a token.
    Health,
    /// `POST /v1/sessions`: create a session.
    CreateSession,
    /// `DELETE /v1/sessions/{id}`: end a session early.
    DeleteSession,
    /// `POST /v1/sessions/{id}/dh/query`: the DH-PSI query.
    DhQuery,
    /// `GET /v1/dh/encoded-set`: the DH-PSI encoded registry (ETag, `If-None-Match`).
    DhEncodedSet,
    /// `POST /v1/sessions/{id}/ot/round`: one OT-PSI round.
    OtRound,
    /// `POST /v1/sessions/{id}/cm20/round`: one CM20-PSI round.
    Cm20Round,
    /// `POST /v1/sessions/{id}/gbf/round`: one GBF-PSI round.
    GbfRound,
    /// `POST /v1/sessions/{id}/labels/query`: the label OPRF query (OT-PSI sessions).
    LabelQuery,
    /// `POST /v1/sessions/{id}/labels/fetch`: fetch label buckets.
    LabelFetch,
    /// `GET /v1/probe?bytes=N`: `N` bytes (at most [`PROBE_MAX_BYTES`]) for a bounded
    /// measurement of the downstream link.
    ProbeDown,
    /// `POST /v1/probe`: accepts a body of at most [`PROBE_MAX_BYTES`] and answers its
    /// size ([`ProbeReceived`]): a bounded measurement of the upstream link.
    ProbeUp,
    /// `POST /v1/groups`: a leader creates a group relay ([`CreateGroup`], [`GroupJoined`]).
    CreateGroup,
    /// `POST /v1/groups/{id}/join`: a member joins a group ([`JoinGroup`], [`GroupJoined`]).
    JoinGroup,
    /// `GET /v1/groups/{id}`: the group's roster of announced keys ([`GroupState`]).
    GroupState,
    /// `DELETE /v1/groups/{id}`: a party ends the group (and leaves it).
    EndGroup,
    /// `POST /v1/groups/{id}/messages?to=N`: an envelope for party `N`'s mailbox.
    PostGroupMessage,
    /// `GET /v1/groups/{id}/messages?wait_ms=N`: the oldest envelope of the caller's
    /// mailbox (`200`, sender in [`GROUP_FROM_HEADER`]), or `204` after at most `N` ms.
    FetchGroupMessage,
    /// `GET /v1/sync/snapshot`: sync mode's SYNC_SNAPSHOT of the current registry version
    /// (docs/protocol/sync.md §3.2; ETag, `If-None-Match`), when the server serves sync
    /// mode ([`Health::sync`]).
    SyncSnapshot,
    /// `GET /v1/sync/delta?from=V`: the SYNC_DELTA from version `V` to the current one
    /// (docs/protocol/sync.md §3.3); `204` when `V` is current, `404` when no delta from
    /// `V` is kept (download the snapshot).
    SyncDelta,
}

/// Header naming the party credential on every group call after create or join.
pub const GROUP_CREDENTIAL_HEADER: &str = "x-psi-party";
/// Header naming the sender of a fetched group envelope (its party index).
pub const GROUP_FROM_HEADER: &str = "x-psi-from";
/// Bytes of a party's key announcement (a ristretto255 point and a 32-byte MAC,
/// docs/protocol/group-psi.md §9); sent and returned as 128 lowercase hex digits.
pub const GROUP_KEY_BYTES: usize = 64;
/// The longest server-side wait of a mailbox fetch, in milliseconds.
pub const GROUP_MAX_WAIT_MS: u64 = 5_000;

/// `POST /v1/groups` request body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateGroup {
    /// Parties, the leader included (2 ..= 16).
    pub size: u8,
    /// The leader's key announcement, hex ([`GROUP_KEY_BYTES`] bytes).
    pub key: String,
}

/// `POST /v1/groups/{id}/join` request body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JoinGroup {
    /// The member's key announcement, hex ([`GROUP_KEY_BYTES`] bytes).
    pub key: String,
}

/// `POST /v1/groups` (201) and `POST /v1/groups/{id}/join` (201) response body.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GroupJoined {
    /// Opaque group id: the instance's name, `-`, 32 lowercase hex digits (as session ids).
    pub group_id: String,
    /// The caller's party index: 0 for the leader, `1 ..= size - 1` for members.
    pub party: u8,
    /// The caller's party credential (64 hex digits): sent in [`GROUP_CREDENTIAL_HEADER`]
    /// on every later call of this party. A secret: never log it.
    pub credential: String,
    /// Parties, the leader included.
    pub size: u8,
    /// Largest envelope one post may carry, in bytes.
    pub max_message_bytes: u64,
    /// Most bytes a party's mailbox holds at once.
    pub max_mailbox_bytes: u64,
    /// Most envelopes a party's mailbox holds at once.
    pub max_mailbox_messages: u32,
    /// Seconds until the group expires (and is removed with its mailboxes).
    pub expires_in_secs: u64,
}

/// `GET /v1/groups/{id}` response body.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GroupState {
    /// The group id.
    pub group_id: String,
    /// Parties, the leader included.
    pub size: u8,
    /// Parties joined so far, the leader included.
    pub joined: u8,
    /// Per party index: its key announcement (hex), `null` while that party has not joined.
    pub keys: Vec<Option<String>>,
    /// A party has ended the group: no more posts; mailboxes may still be drained.
    pub ended: bool,
    /// Seconds until the group expires.
    pub expires_in_secs: u64,
}

/// Largest body of a probe either way: 256 KiB.
pub const PROBE_MAX_BYTES: u64 = 256 * 1024;

/// `POST /v1/probe` response body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeReceived {
    /// Bytes of the request body received.
    pub bytes: u64,
}

impl Route {
    /// Every route.
    pub const ALL: &'static [Route] = &[
        Route::Health,
        Route::CreateSession,
        Route::DeleteSession,
        Route::DhQuery,
        Route::DhEncodedSet,
        Route::OtRound,
        Route::Cm20Round,
        Route::GbfRound,
        Route::LabelQuery,
        Route::LabelFetch,
        Route::ProbeDown,
        Route::ProbeUp,
        Route::CreateGroup,
        Route::JoinGroup,
        Route::GroupState,
        Route::EndGroup,
        Route::PostGroupMessage,
        Route::FetchGroupMessage,
        Route::SyncSnapshot,
        Route::SyncDelta,
    ];

    /// The method.
    pub fn method(self) -> Method {
        match self {
            Route::Health
            | Route::DhEncodedSet
            | Route::ProbeDown
            | Route::GroupState
            | Route::FetchGroupMessage
            | Route::SyncSnapshot
            | Route::SyncDelta => Method::Get,
            Route::DeleteSession | Route::EndGroup => Method::Delete,
            Route::CreateSession
            | Route::DhQuery
            | Route::OtRound
            | Route::Cm20Round
            | Route::GbfRound
            | Route::LabelQuery
            | Route::LabelFetch
            | Route::ProbeUp
            | Route::CreateGroup
            | Route::JoinGroup
            | Route::PostGroupMessage => Method::Post,
        }
    }

    /// The path template, `{id}` standing for the session id.
    pub fn template(self) -> &'static str {
        match self {
            Route::Health => "/v1/health",
            Route::CreateSession => "/v1/sessions",
            Route::DeleteSession => "/v1/sessions/{id}",
            Route::DhQuery => "/v1/sessions/{id}/dh/query",
            Route::DhEncodedSet => "/v1/dh/encoded-set",
            Route::OtRound => "/v1/sessions/{id}/ot/round",
            Route::Cm20Round => "/v1/sessions/{id}/cm20/round",
            Route::GbfRound => "/v1/sessions/{id}/gbf/round",
            Route::LabelQuery => "/v1/sessions/{id}/labels/query",
            Route::LabelFetch => "/v1/sessions/{id}/labels/fetch",
            Route::ProbeDown | Route::ProbeUp => "/v1/probe",
            Route::CreateGroup => "/v1/groups",
            Route::JoinGroup => "/v1/groups/{id}/join",
            Route::GroupState | Route::EndGroup => "/v1/groups/{id}",
            Route::PostGroupMessage | Route::FetchGroupMessage => "/v1/groups/{id}/messages",
            Route::SyncSnapshot => "/v1/sync/snapshot",
            Route::SyncDelta => "/v1/sync/delta",
        }
    }

    /// The path with `{id}` replaced by `session` (ignored by routes without one).
    pub fn path(self, session: &str) -> String {
        self.template().replace("{id}", session)
    }

    /// The round-based protocol whose rounds this route carries (OT-PSI's and CM20-PSI's
    /// round routes), from [`Route::for_protocol`]: a server serves every such route with
    /// the one round handler, and a new protocol adds no line for it.
    pub fn round_protocol(self) -> Option<psi_core::Protocol> {
        psi_core::Protocol::ALL
            .iter()
            .copied()
            .find(|p| p.runs_in_rounds() && Route::for_protocol(p.api_name()) == Some(self))
    }

    /// The route that carries a run of the protocol with API name `api_name`
    /// (`psi_core::Protocol::api_name`): DH-PSI's query, OT-PSI's and CM20-PSI's rounds.
    /// `None` for a name no route serves. A new protocol adds one line here.
    pub fn for_protocol(api_name: &str) -> Option<Route> {
        match api_name {
            "dh-psi" => Some(Route::DhQuery),
            "ot-psi" => Some(Route::OtRound),
            "cm20-psi" => Some(Route::Cm20Round),
            "gbf-psi" => Some(Route::GbfRound),
            _ => None,
        }
    }
}

/// Header carrying the registry's key epoch on the encoded-set download.
pub const EPOCH_HEADER: &str = "x-psi-epoch";
/// Header carrying the registry version of sync mode's downloads
/// ([`Route::SyncSnapshot`], [`Route::SyncDelta`]).
pub const SYNC_VERSION_HEADER: &str = "x-psi-sync-version";
/// Content type of protocol messages.
pub const BINARY: &str = "application/octet-stream";
/// Content type of everything else.
pub const JSON: &str = "application/json";

/// `POST /v1/sessions` request body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSession {
    /// The protocol's API name (`psi_core::Protocol::api_name`: `"dh-psi"`, `"ot-psi"`,
    /// `"cm20-psi"`, `"gbf-psi"`).
    pub protocol: String,
    /// Number of distinct items the client will query (a number above the server's
    /// limit gets `too_many_items`, however large).
    pub client_items: u64,
    /// `false`: the client fetches no labels, so the session ends with the protocol's
    /// final response. Absent (the default): labels may follow, and the session ends with
    /// the label fetch (docs/adr/0025-sessions-end-themselves.md). Sent only to a server
    /// that lists [`Feature::SessionLabelsOption`]: older servers refuse unknown fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<bool>,
    /// The id of a session of the same caller that this one replaces: the server ends it
    /// as `DELETE` would, before admitting this one (a first run's session opened for a
    /// protocol the choice then did not pick, docs/adr/0054-first-runs.md). An id that
    /// names no session of this caller on this instance is ignored (that session ends at
    /// its expiry). Sent only to a server that lists [`Feature::SessionReplaces`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
}

/// The query of `POST /v1/sessions?health=1` ([`Feature::SessionHealth`]): the answer
/// carries the server's health ([`SessionCreated::health`]), so a first run learns it
/// without `GET /v1/health`. A server older than the feature ignores the query.
pub const SESSION_HEALTH_QUERY: &str = "health=1";

/// The query of `POST /v1/sessions?sync=1`: a DH-PSI session in sync mode when the server
/// serves it (docs/protocol/sync.md): the answer carries [`SessionCreated::sync`], the run
/// downloads no encoded set, and the label fetch is the confirmation (fetch version 2,
/// mode `0x02`), whether or not labels are on. A server without sync mode, or older than
/// it, ignores the query and creates a plain DH-PSI session (no `sync` in the answer).
/// May be combined with the other queries (`&`).
pub const SESSION_SYNC_QUERY: &str = "sync=1";

/// The name of the query parameter of `GET /v1/sync/delta?from=V`.
pub const SYNC_FROM_PARAM: &str = "from";

/// What a server in sync mode tells about the synced set of its current registry
/// version ([`Health::sync`], [`SessionCreated::sync`]; docs/protocol/sync.md §7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncInfo {
    /// The sync epoch: the key epoch whose outputs the tags are of.
    pub epoch: u32,
    /// The registry version the server's snapshot and records are of.
    pub version: u64,
    /// The tag width `w` of the epoch (sync.md §2).
    pub width: u8,
    /// The confirmation's bucket bits `b` (sync.md §5.1): every entry has a record.
    pub bucket_bits: u8,
    /// Bytes of the current SYNC_SNAPSHOT message (a first sync's download).
    pub snapshot_bytes: u64,
    /// The snapshot's ETag (quoted), as `GET /v1/sync/snapshot` sends it.
    pub snapshot_etag: String,
    /// The oldest version a delta is served from: a client at a version from this one up
    /// to [`SyncInfo::version`] catches up with one delta, an older one downloads the
    /// snapshot.
    pub deltas_from: u64,
    /// Bytes of every delta served, by its start version (ascending, the current version
    /// excluded): what a client at each version would download, for the protocol choice.
    /// In [`Health::sync`] only (a session's answer leaves it out).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deltas: Vec<DeltaSize>,
    /// Bytes of all the confirmation records (sizes the fetch for the protocol choice).
    pub record_bytes: u64,
}

/// One delta a sync-mode server serves ([`SyncInfo::deltas`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeltaSize {
    /// The version it starts from.
    pub from: u64,
    /// Bytes of its SYNC_DELTA message.
    pub bytes: u64,
}

impl SyncInfo {
    /// Bytes a client whose synced set is at `have` (of this epoch and width; `None`: no
    /// usable set) downloads to be at [`SyncInfo::version`]: 0 when current, the delta
    /// when one is served from `have`, otherwise the snapshot.
    pub fn bytes_owed(&self, have: Option<u64>) -> u64 {
        match have {
            Some(v) if v >= self.version => 0,
            Some(v) => self
                .deltas
                .iter()
                .find(|d| d.from == v)
                .map_or(self.snapshot_bytes, |d| d.bytes),
            None => self.snapshot_bytes,
        }
    }
}

/// The name of the query parameter of `POST /v1/sessions?plan=...`
/// ([`Feature::SessionPlan`]): a first run's protocols by registry size, so that the
/// server creates the session for the one its registry calls for (docs/api.md, ADR 0054).
pub const SESSION_PLAN_PARAM: &str = "plan";

/// Most steps in a session plan.
pub const MAX_PLAN_STEPS: usize = 8;

/// One step of a session plan: `protocol` (API name) if the registry holds from
/// `min_registry_items` to `max_registry_items` entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanStep {
    /// The protocol's API name.
    pub protocol: String,
    /// The smallest registry this step is for (0: any up to the largest).
    pub min_registry_items: u64,
    /// The largest registry this step is for.
    pub max_registry_items: u64,
}

/// A plan in its query spelling: steps `name:max` (from 0) or `name:min-max` joined by `,`
/// (e.g. `cm20-psi:2049-70000,ot-psi:65536`).
pub fn format_plan(steps: &[PlanStep]) -> String {
    steps
        .iter()
        .map(|s| match s.min_registry_items {
            0 => format!("{}:{}", s.protocol, s.max_registry_items),
            min => format!("{}:{min}-{}", s.protocol, s.max_registry_items),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// A plan from its query spelling: 1 to [`MAX_PLAN_STEPS`] steps `name:max` or
/// `name:min-max`, each name 1 to 32 characters of `a-z0-9-`, each bound a decimal `u64`
/// (`min` at most `max`). `None` for anything else.
pub fn parse_plan(value: &str) -> Option<Vec<PlanStep>> {
    let steps: Vec<&str> = value.split(',').collect();
    if steps.is_empty() || steps.len() > MAX_PLAN_STEPS {
        return None;
    }
    steps
        .into_iter()
        .map(|step| {
            let (name, range) = step.split_once(':')?;
            let name_ok = (1..=32).contains(&name.len())
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            let (min, max) = range.split_once('-').unwrap_or(("0", range));
            let number = |v: &str| {
                (!v.is_empty() && v.len() <= 20 && v.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| v.parse::<u64>().ok())
                    .flatten()
            };
            let (min, max) = (number(min)?, number(max)?);
            if !name_ok || min > max {
                return None;
            }
            Some(PlanStep {
                protocol: name.to_string(),
                min_registry_items: min,
                max_registry_items: max,
            })
        })
        .collect()
}

/// The protocol a plan gives a registry of `registry_items` entries on a server that runs
/// `runs`: the first step whose protocol it runs and whose range the registry is within;
/// `None` if no step is (the request's own protocol then).
pub fn plan_pick(
    steps: &[PlanStep],
    registry_items: u64,
    runs: impl Fn(&str) -> bool,
) -> Option<&str> {
    steps
        .iter()
        .find(|s| {
            (s.min_registry_items..=s.max_registry_items).contains(&registry_items)
                && runs(&s.protocol)
        })
        .map(|s| s.protocol.as_str())
}

/// `POST /v1/sessions` response body (201).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionCreated {
    /// Opaque session id: the name of the instance that holds the session, `-`, 32
    /// lowercase hex digits (docs/api.md; a proxy may route by the name, a client must not
    /// look inside).
    pub session_id: String,
    /// The protocol of the session (API name).
    pub protocol: String,
    /// Current key epoch (DH-PSI queries must name it).
    pub epoch: u32,
    /// Entries in the registry.
    pub registry_items: u64,
    /// Largest client set accepted.
    pub max_client_items: u32,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: u64,
    /// ETag of the current DH-PSI encoded registry (quoted, as in the HTTP header): the
    /// identity of the encoded set (the epoch alone is not: imports change the set
    /// within an epoch).
    pub encoded_set_etag: String,
    /// Bits of the label tag used as the bucket id (0: one bucket).
    pub label_bucket_bits: u8,
    /// Seconds until the session expires.
    pub expires_in_secs: u64,
    /// The server ends the session itself with its final response (the label fetch, or
    /// the protocol's last answer for a session created with `labels: false`), so the
    /// client need not `DELETE` it after a complete run. `false` from older servers.
    #[serde(default)]
    pub ends_on_completion: bool,
    /// An OT-PSI or CM20-PSI session with labels on: the width `Λ` of the label lanes its run
    /// can carry (ot-psi.md and cm20-psi.md §4.7, ADR 0053). A client that asks (hello suite
    /// `0x02`) gets every match's label in the outputs, needs no label step, and the
    /// session ends with the outputs. Absent: no lanes (another protocol, labels off, a
    /// registry with a label over 15 bytes, or an older server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_lane_width: Option<u8>,
    /// The server's health, as `GET /v1/health` would answer it, when the request asked
    /// for it ([`SESSION_HEALTH_QUERY`]); absent otherwise and from older servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<Health>,
    /// A session in sync mode (asked for with [`SESSION_SYNC_QUERY`] of a server that
    /// serves it): its synced set's epoch, version and layout. The run downloads no
    /// encoded set, and its label fetch is the confirmation (docs/protocol/sync.md §5),
    /// with labels on or off. Absent: a plain session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<SyncInfo>,
}

/// `GET /v1/health` response body.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Health {
    /// Always `"ok"`.
    pub status: String,
    /// Current key epoch.
    pub epoch: u32,
    /// Entries in the registry.
    pub registry_items: u64,
    /// Protocols this server runs (API names).
    pub protocols: Vec<String>,
    /// Largest client set a session accepts (so a client can split its contacts before
    /// opening a session).
    #[serde(default)]
    pub max_client_items: u32,
    /// Largest request body accepted, in bytes.
    #[serde(default)]
    pub max_body_bytes: u64,
    /// ETag of the current DH-PSI encoded registry (as in [`SessionCreated`]): a client
    /// can tell before it picks a protocol whether its cached set is current. Empty
    /// from older servers.
    #[serde(default)]
    pub encoded_set_etag: String,
    /// Bits of the label bucket id (as in [`SessionCreated`]).
    #[serde(default)]
    pub label_bucket_bits: u8,
    /// Bytes of all label records (a fetch of `K` of the `2^label_bucket_bits` buckets
    /// returns about `K / 2^bits` of them): sizes the label step for the protocol choice.
    #[serde(default)]
    pub label_record_bytes: u64,
    /// The width `Λ` of the label lanes this server's OT-PSI and CM20-PSI sessions carry
    /// (one per registry, as in [`SessionCreated::label_lane_width`]), for the protocol
    /// choice; absent when it sends none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_lane_width: Option<u8>,
    /// The server's own unit costs, measured at start, and its workers: an input of the
    /// client's protocol choice (docs/protocol-choice.md). `null` from a server that did
    /// not measure them (older servers omit it).
    #[serde(default)]
    pub costs: Option<ServerCosts>,
    /// What this server supports beyond the base API ([`Feature`] names). Empty from
    /// older servers, which support none of them; names this client does not know are
    /// kept and ignored.
    #[serde(default)]
    pub features: Vec<String>,
    /// Whether the server's store answers ([`StoreState`]): a server whose shared
    /// database is unreachable keeps answering health, with `"unavailable"`, and refuses
    /// new sessions (`503 store_unavailable`) until it is back. `None` from older
    /// servers, which do not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<StoreState>,
    /// The server serves sync mode (docs/protocol/sync.md): its current synced set.
    /// Absent when it does not (the default) and from older servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<SyncInfo>,
}

/// The state of a server's store in [`Health::store`] (docs/api.md, "Health").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StoreState {
    /// The store answers (always so for an embedded SQLite file).
    Ok,
    /// The shared database did not answer the server's last look: running sessions go
    /// on, new ones are refused with `503 store_unavailable` until it answers again.
    Unavailable,
    /// A state this client does not know (a newer server).
    #[serde(other)]
    Unknown,
}

impl Health {
    /// Whether the server lists `feature`.
    pub fn supports(&self, feature: Feature) -> bool {
        self.features.iter().any(|f| f == feature.as_str())
    }
}

/// The optional parts of the API a server lists in [`Health::features`] (docs/api.md,
/// "Health"). A client uses one only with a server that lists it: an older server lists
/// none and would refuse the request or lack the route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Feature {
    /// `"session-labels-option"`: `POST /v1/sessions` accepts [`CreateSession::labels`]
    /// (an older server refuses the unknown field with `bad_request`).
    SessionLabelsOption,
    /// `"ends-sessions"`: the server ends a session itself with its final response
    /// ([`SessionCreated::ends_on_completion`], docs/adr/0025-sessions-end-themselves.md).
    EndsSessions,
    /// `"probe"`: `GET` and `POST /v1/probe` ([`Route::ProbeDown`], [`Route::ProbeUp`]).
    Probe,
    /// `"session-health"`: `POST /v1/sessions?health=1` answers with the health too
    /// ([`SessionCreated::health`], [`SESSION_HEALTH_QUERY`]).
    SessionHealth,
    /// `"session-replaces"`: `POST /v1/sessions` accepts [`CreateSession::replaces`].
    SessionReplaces,
    /// `"session-plan"`: `POST /v1/sessions?plan=...` creates the session for the plan's
    /// protocol for this registry ([`SESSION_PLAN_PARAM`], [`plan_pick`]).
    SessionPlan,
}

impl Feature {
    /// Every feature.
    pub const ALL: &'static [Feature] = &[
        Feature::SessionLabelsOption,
        Feature::EndsSessions,
        Feature::Probe,
        Feature::SessionHealth,
        Feature::SessionReplaces,
        Feature::SessionPlan,
    ];

    /// The name listed in [`Health::features`].
    pub fn as_str(self) -> &'static str {
        match self {
            Feature::SessionLabelsOption => "session-labels-option",
            Feature::EndsSessions => "ends-sessions",
            Feature::Probe => "probe",
            Feature::SessionHealth => "session-health",
            Feature::SessionReplaces => "session-replaces",
            Feature::SessionPlan => "session-plan",
        }
    }
}

/// One machine's measured computation costs, nanoseconds per operation on one thread:
/// `psi_core::cost::UnitCosts` without the threads, in its JSON spelling. The one record
/// of unit costs outside the model: the server's health advertises it (inside
/// [`ServerCosts`]), the client keeps its device's in `measurements.json`, and
/// [`UnitCostsNs::from_units`] / [`UnitCostsNs::units`] are the one conversion to and
/// from the model's record.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct UnitCostsNs {
    /// ns per ristretto255 scalar multiplication.
    pub scalar_mult_ns: f64,
    /// ns per hash-to-group.
    pub hash_to_group_ns: f64,
    /// ns per group element decoding.
    pub element_decode_ns: f64,
    /// ns per AES-128 block.
    pub aes_block_ns: f64,
    /// ns per SHA-256 compression block.
    pub hash_block_ns: f64,
    /// ns per entry of memory work (hash-table insert or probe, shuffle step).
    pub entry_ns: f64,
    /// ns per operation of each protocol's own unit, one field per unit
    /// (`cm20_lookup_ns`: a CM20-PSI column lookup; `gbf_xor_ns`: a GBF-PSI random XOR).
    /// A unit is absent from servers (and stored measurements) older than it: the reader
    /// then uses the unit's reference value.
    #[serde(flatten)]
    pub own: OwnUnitsNs,
}

impl UnitCostsNs {
    /// The model's record in this spelling.
    pub fn from_units(u: &UnitCosts) -> Self {
        UnitCostsNs {
            scalar_mult_ns: u.scalar_mult,
            hash_to_group_ns: u.hash_to_group,
            element_decode_ns: u.element_decode,
            aes_block_ns: u.aes_block,
            hash_block_ns: u.hash_block,
            entry_ns: u.entry,
            own: OwnUnitsNs::from_units(u),
        }
    }

    /// The model's record on `threads` threads, as given (no plausibility check: a
    /// caller that does not trust the source clamps, as psi-client does with a server's).
    /// An absent own unit of a protocol is its reference.
    pub fn units(&self, threads: u32) -> UnitCosts {
        let shared = UnitCosts::new(
            self.scalar_mult_ns,
            self.hash_to_group_ns,
            self.element_decode_ns,
            self.aes_block_ns,
            self.hash_block_ns,
            self.entry_ns,
            threads,
        );
        psi_core::Protocol::ALL
            .iter()
            .fold(shared, |u, &p| match self.own.get(p) {
                Some(ns) => u.with_own(p, ns),
                None => u,
            })
    }
}

/// A server's measured computation costs ([`UnitCostsNs`], flattened into this object)
/// and its parallelism.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ServerCosts {
    /// ns per operation, one thread.
    #[serde(flatten)]
    pub units: UnitCostsNs,
    /// Threads one session step runs on (the reference server: 1).
    pub threads_per_step: u32,
    /// Session steps other than OT rounds run at once (`--workers`).
    pub workers: u32,
    /// OT-PSI rounds run at once (`--ot-workers`).
    pub ot_workers: u32,
}

/// Body of every 4xx/5xx response.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Stable machine-readable code.
    pub error: ErrorCode,
    /// Human-readable explanation; never contains contact data or keys.
    pub message: String,
}

macro_rules! error_codes {
    ($( $(#[$doc:meta])* $variant:ident = ($name:literal, $status:literal) ),* $(,)?) => {
        /// The error codes of the API (`docs/api.md`, "Errors"), each with its one HTTP status.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[non_exhaustive]
        pub enum ErrorCode {
            $( $(#[$doc])* #[serde(rename = $name)] $variant, )*
            /// A code this client does not know (a newer server).
            #[serde(other)]
            Unknown,
        }

        impl ErrorCode {
            /// Every known code.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant),*];

            /// The code as sent (`"rate_limited"`).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $name,)*
                    ErrorCode::Unknown => "unknown",
                }
            }

            /// The HTTP status the server answers with.
            pub fn status(self) -> u16 {
                match self {
                    $(ErrorCode::$variant => $status,)*
                    ErrorCode::Unknown => 500,
                }
            }
        }
    };
}

error_codes! {
    /// Malformed JSON, unknown fields, `client_items` 0.
    BadRequest = ("bad_request", 400),
    /// A protocol body psi-core rejects, a bad label fetch body or bucket id.
    InvalidMessage = ("invalid_message", 400),
    /// A DH query whose element count is not the session's.
    CountMismatch = ("count_mismatch", 400),
    /// More items than the server or the session allows.
    TooManyItems = ("too_many_items", 400),
    /// The protocol is not one this server runs.
    UnsupportedProtocol = ("unsupported_protocol", 400),
    /// Authentication is on and there is no `Authorization` header.
    MissingToken = ("missing_token", 401),
    /// The bearer token is not accepted.
    InvalidToken = ("invalid_token", 401),
    /// No such endpoint.
    NotFound = ("not_found", 404),
    /// No such session (or another caller's).
    UnknownSession = ("unknown_session", 404),
    /// Wrong method for the endpoint.
    MethodNotAllowed = ("method_not_allowed", 405),
    /// No such group (never created, ended by every party, or removed after it expired).
    UnknownGroup = ("unknown_group", 404),
    /// The party credential (`X-PSI-Party`) is missing or is no party's of this group.
    InvalidParty = ("invalid_party", 403),
    /// The group has all its parties: no one else may join.
    GroupFull = ("group_full", 409),
    /// A party ended the group: nothing more is relayed (a mailbox may still be drained).
    GroupClosed = ("group_closed", 409),
    /// The recipient's mailbox holds its limit of envelopes or bytes (`Retry-After`):
    /// retryable once the recipient has fetched.
    MailboxFull = ("mailbox_full", 409),
    /// The group's lifetime passed: it is removed with its mailboxes.
    GroupExpired = ("group_expired", 410),
    /// Group limits reached (`Retry-After`).
    TooManyGroups = ("too_many_groups", 503),
    /// The session id names another instance of a service run by several (a load balancer
    /// sent the step to the wrong one, or the session's instance is gone and the balancer
    /// failed over): this instance never held the session. Retryable: start a new run,
    /// from a new session, which any instance can take.
    WrongInstance = ("wrong_instance", 421),
    /// The request (body upload and handling) took too long.
    RequestTimeout = ("request_timeout", 408),
    /// A step out of order.
    WrongPhase = ("wrong_phase", 409),
    /// The key epoch or the registry changed during the session.
    EpochMismatch = ("epoch_mismatch", 409),
    /// The session's third step refused with a 400 (a body that does not decode or does not
    /// fit the session): the server ended the session; the message also says why this step
    /// was refused. Create a new session (a well-behaved client never gets this).
    SessionFailed = ("session_failed", 409),
    /// The session's lifetime passed.
    SessionExpired = ("session_expired", 410),
    /// Body above the server's limit.
    BodyTooLarge = ("body_too_large", 413),
    /// Wrong content type.
    UnsupportedMediaType = ("unsupported_media_type", 415),
    /// The caller's items-per-hour budget is spent (`Retry-After`).
    RateLimited = ("rate_limited", 429),
    /// A bug on the server.
    Internal = ("internal", 500),
    /// Session limits reached (`Retry-After`).
    TooManySessions = ("too_many_sessions", 503),
    /// No OT-PSI or CM20-PSI capacity left (every OT slot taken, or this caller's share):
    /// a `dh-psi` session may still be admitted (`Retry-After`).
    OtCapacity = ("ot_capacity", 503),
    /// The server's shared database does not answer (a PostgreSQL restart, a network
    /// fault): no new session is admitted and no budget is charged without it
    /// (`Retry-After`). Retryable: the instance reconnects by itself, and another
    /// instance may already reach the database.
    StoreUnavailable = ("store_unavailable", 503),
}

impl ErrorCode {
    /// True if the same call may succeed later: rate limit, busy server, key rotated,
    /// session expired or held by another instance (the next run opens a new session), a
    /// request that timed out.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            ErrorCode::RateLimited
                | ErrorCode::TooManySessions
                | ErrorCode::OtCapacity
                | ErrorCode::EpochMismatch
                | ErrorCode::SessionExpired
                | ErrorCode::RequestTimeout
                | ErrorCode::Internal
                | ErrorCode::WrongInstance
                | ErrorCode::StoreUnavailable
                | ErrorCode::MailboxFull
                | ErrorCode::TooManyGroups
        )
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_plans_round_trip_and_refuse_what_they_are_not() {
        let plan = vec![
            PlanStep {
                protocol: "cm20-psi".into(),
                min_registry_items: 5_000,
                max_registry_items: 60_000,
            },
            PlanStep {
                protocol: "ot-psi".into(),
                min_registry_items: 0,
                max_registry_items: 70_000,
            },
            PlanStep {
                protocol: "dh-psi".into(),
                min_registry_items: 0,
                max_registry_items: u64::MAX,
            },
        ];
        let text = format_plan(&plan);
        assert_eq!(
            text,
            format!("cm20-psi:5000-60000,ot-psi:70000,dh-psi:{}", u64::MAX)
        );
        assert_eq!(parse_plan(&text), Some(plan.clone()));
        for bad in [
            "",
            "ot-psi",
            "ot-psi:",
            ":5",
            "OT:5",
            "ot-psi:-1",
            "ot-psi:1e9",
            "ot-psi:99999999999999999999999",
            "ot psi:5",
            "ot-psi:9-5",
            "ot-psi:-5",
            "ot-psi:5-",
            "ot-psi:1-2-3",
            "a:1,b:2,c:3,d:4,e:5,f:6,g:7,h:8,i:9",
        ] {
            assert_eq!(parse_plan(bad), None, "{bad:?}");
        }
        // The first step the registry is within and the server runs.
        let runs_all = |_: &str| true;
        assert_eq!(plan_pick(&plan, 4096, runs_all), Some("ot-psi"));
        assert_eq!(plan_pick(&plan, 5000, runs_all), Some("cm20-psi"));
        assert_eq!(plan_pick(&plan, 5000, |p| p != "cm20-psi"), Some("ot-psi"));
        assert_eq!(plan_pick(&plan, 70_001, runs_all), Some("dh-psi"));
        assert_eq!(plan_pick(&plan, 4096, |p| p != "ot-psi"), Some("dh-psi"));
        assert_eq!(plan_pick(&plan[..2], 70_001, runs_all), None);
    }

    /// Every round-based protocol has exactly one round route, and no other route names a
    /// protocol's rounds.
    #[test]
    fn round_routes_are_the_round_based_protocols() {
        for &p in psi_core::Protocol::ALL {
            let route = Route::for_protocol(p.api_name()).expect("a route per protocol");
            assert_eq!(
                route.round_protocol(),
                p.runs_in_rounds().then_some(p),
                "{p}"
            );
        }
        assert_eq!(
            Route::OtRound.round_protocol(),
            Some(psi_core::Protocol::Ot)
        );
        assert_eq!(
            Route::Cm20Round.round_protocol(),
            Some(psi_core::Protocol::Cm20)
        );
        let rounds = Route::ALL
            .iter()
            .filter(|r| r.round_protocol().is_some())
            .count();
        let protocols = psi_core::Protocol::ALL
            .iter()
            .filter(|p| p.runs_in_rounds())
            .count();
        assert_eq!(rounds, protocols);
    }

    /// The health's `costs` object is flat (the unit costs beside the thread counts), as
    /// docs/api.md and openapi.json spell it; an older server without `cm20_lookup_ns` or
    /// `gbf_xor_ns` reads as the units' references; the conversion keeps every unit.
    #[test]
    fn server_costs_are_one_flat_object_and_convert_both_ways() {
        use psi_core::Protocol;
        let u = UnitCosts::new(40_000.0, 18_000.0, 8_000.0, 2.0, 60.0, 25.0, 3)
            .with_own(Protocol::Cm20, 1.5)
            .with_own(Protocol::Gbf, 7.25);
        let c = ServerCosts {
            units: UnitCostsNs::from_units(&u),
            threads_per_step: 1,
            workers: 2,
            ot_workers: 1,
        };
        let v = serde_json::to_value(c).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "aes_block_ns",
                "cm20_lookup_ns",
                "element_decode_ns",
                "entry_ns",
                "gbf_xor_ns",
                "hash_block_ns",
                "hash_to_group_ns",
                "ot_workers",
                "scalar_mult_ns",
                "threads_per_step",
                "workers"
            ]
        );
        assert_eq!(serde_json::from_value::<ServerCosts>(v).unwrap(), c);
        assert_eq!(c.units.units(3), u);
        assert_eq!(c.units.own.get(Protocol::Gbf), Some(7.25));
        let reference = UnitCosts::REFERENCE;
        // A server of the CM20 unit but not the GBF one (the health before GBF-PSI's unit).
        let before_gbf = r#"{"scalar_mult_ns":40000.0,"hash_to_group_ns":18000.0,
            "element_decode_ns":8000.0,"aes_block_ns":2.0,"hash_block_ns":60.0,
            "entry_ns":25.0,"cm20_lookup_ns":1.5,"threads_per_step":1,"workers":2,
            "ot_workers":1}"#;
        let old: ServerCosts = serde_json::from_str(before_gbf).unwrap();
        assert_eq!(old.units.own.get(Protocol::Cm20), Some(1.5));
        assert_eq!(old.units.own.get(Protocol::Gbf), None);
        assert!(!old.units.own.is_complete());
        assert_eq!(
            old.units.units(3).own(Protocol::Gbf),
            reference.own(Protocol::Gbf)
        );
        assert_eq!(old.units.units(3).own(Protocol::Cm20), Some(1.5));
        // Older still: no own unit at all; and a field this version does not know (a later
        // unit) is ignored, as is a `null`.
        let mut older = serde_json::to_value(c).unwrap();
        let o = older.as_object_mut().unwrap();
        o.remove("cm20_lookup_ns");
        o.remove("gbf_xor_ns");
        o.insert("later_unit_ns".into(), serde_json::json!({"any": "shape"}));
        let older: ServerCosts = serde_json::from_value(older).unwrap();
        assert_eq!(older.units.own, OwnUnitsNs::default());
        for &p in Protocol::ALL {
            assert_eq!(older.units.units(3).own(p), reference.own(p), "{p}");
        }
        assert_eq!(older.workers, 2);
        let null = before_gbf.replace("1.5", "null");
        let null: ServerCosts = serde_json::from_str(&null).unwrap();
        assert_eq!(null.units.own.get(Protocol::Cm20), None);
    }

    #[test]
    fn codes_round_trip_through_json_and_unknown_codes_are_kept_apart() {
        for &c in ErrorCode::ALL {
            let json = format!("{{\"error\":\"{}\",\"message\":\"m\"}}", c.as_str());
            let body: ErrorBody = serde_json::from_str(&json).unwrap();
            assert_eq!(body.error, c);
            assert_eq!(serde_json::to_string(&body).unwrap(), json);
        }
        let body: ErrorBody =
            serde_json::from_str(r#"{"error":"brand_new","message":"m"}"#).unwrap();
        assert_eq!(body.error, ErrorCode::Unknown);
    }

    #[test]
    fn features_are_listed_by_name_and_absent_from_older_servers() {
        let old = r#"{"status":"ok","epoch":1,"registry_items":2,"protocols":["dh-psi"]}"#;
        let h: Health = serde_json::from_str(old).unwrap();
        assert!(h.features.is_empty());
        assert!(Feature::ALL.iter().all(|&f| !h.supports(f)));
        let new = r#"{"status":"ok","epoch":1,"registry_items":2,"protocols":["dh-psi"],
            "features":["probe","from-the-future"]}"#;
        let h: Health = serde_json::from_str(new).unwrap();
        assert!(h.supports(Feature::Probe));
        assert!(!h.supports(Feature::SessionLabelsOption));
        assert_eq!(h.features.len(), 2, "unknown names are kept");
        let names: std::collections::HashSet<_> = Feature::ALL.iter().map(|f| f.as_str()).collect();
        assert_eq!(names.len(), Feature::ALL.len());
    }

    #[test]
    fn store_state_is_optional_and_unknown_states_are_kept_apart() {
        let old = r#"{"status":"ok","epoch":1,"registry_items":2,"protocols":["dh-psi"]}"#;
        let h: Health = serde_json::from_str(old).unwrap();
        assert_eq!(h.store, None);
        assert!(!serde_json::to_string(&h).unwrap().contains("store"));
        for (text, state) in [
            ("ok", StoreState::Ok),
            ("unavailable", StoreState::Unavailable),
            ("on-fire", StoreState::Unknown),
        ] {
            let json = format!(
                r#"{{"status":"ok","epoch":1,"registry_items":2,"protocols":[],"store":"{text}"}}"#
            );
            let h: Health = serde_json::from_str(&json).unwrap();
            assert_eq!(h.store, Some(state));
        }
        assert!(ErrorCode::StoreUnavailable.is_retryable());
        assert_eq!(ErrorCode::StoreUnavailable.status(), 503);
    }

    #[test]
    fn routes() {
        assert_eq!(Route::DhQuery.path("ab"), "/v1/sessions/ab/dh/query");
        assert_eq!(Route::Health.path("ab"), "/v1/health");
        assert_eq!(Route::DeleteSession.method(), Method::Delete);
        for r in Route::ALL {
            assert!(r.template().starts_with("/v1/"));
        }
    }
}
