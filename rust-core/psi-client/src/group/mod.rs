//! Group PSI over the reference server's relay (`/v1/groups`, docs/protocol/group-psi.md
//! §9, docs/adr/0051-group-relay.md): a blocking driver over the client's [`Transport`]
//! for the CLI and, later, the bindings.
//!
//! The leader creates the group ([`Client::group_create`]) and shows its code
//! ([`GroupParty::code`]); each member joins with it ([`Client::group_join`]); every party
//! then calls [`GroupParty::run`] with its items. Every psi-core message travels in an
//! end-to-end envelope ([`envelope`]): the relay sees sizes and timing only, and a relay
//! that alters, drops, replays or reorders an envelope, or swaps a key, makes the run fail
//! with a [`GroupError`], never a wrong answer.
//!
//! [`Transport`]: crate::Transport

mod code;
pub mod envelope;

pub use code::GroupCode;

use crate::cancel::CancelToken;
use crate::contacts::{ContactMatch, Rejected};
use crate::error::{ClientError, Result};
use crate::transport::{Request, Response, TransportError};
use crate::{Client, ClientConfig};
use envelope::{Channel, GroupSecret, PartyKey};
use psi_contacts::Normalizer;
use psi_core::mpsi::{Leader, LeaderStep, Member, MpsiConfig};
use psi_core::{ItemSet, Threads};
use psi_http::{
    ErrorBody, ErrorCode, GROUP_CREDENTIAL_HEADER, GROUP_FROM_HEADER, GroupJoined, GroupState,
    Route,
};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

/// A failure of the group layer (log-safe: party indices and counts only).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GroupError {
    /// The code is not `GROUP_ID.SECRET` (26 base32 characters of secret).
    #[error("not a group code (expected GROUP_ID.SECRET)")]
    BadCode,
    /// A party's key announcement is not authenticated by the group's secret: the relay
    /// (or someone without the code) changed it.
    #[error("party {party}'s key announcement is not the group's: refused")]
    BadAnnouncement {
        /// The party whose announcement failed.
        party: u8,
    },
    /// An envelope failed authentication (altered on the way, or not the group's).
    #[error("an envelope from party {from} failed authentication: refused")]
    Tampered {
        /// Its sender, as the relay named it.
        from: u8,
    },
    /// An envelope out of sequence: replayed, reordered or one before it dropped.
    #[error("an envelope from party {from} is number {got}, expected {expected}")]
    OutOfOrder {
        /// Its sender.
        from: u8,
        /// The next number expected.
        expected: u64,
        /// The number it carries.
        got: u64,
    },
    /// An envelope whose content is not the group layer's (a member sent another member
    /// something, or an unknown kind).
    #[error("unexpected group content from party {from}: {what}")]
    Unexpected {
        /// Its sender.
        from: u8,
        /// What was wrong.
        what: &'static str,
    },
    /// The group did not fill, or the run did not finish, within the run's deadline.
    #[error("the group run timed out ({what})")]
    TimedOut {
        /// What was awaited.
        what: &'static str,
    },
    /// Another party ended the group before this one finished.
    #[error("another party ended the group before the run finished")]
    Ended,
}

/// Settings of a group run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GroupOptions {
    /// Worker threads for psi-core's heavy steps.
    pub threads: Threads,
    /// The longest the whole run may take (waiting for the group to fill included).
    pub deadline: Duration,
    /// How long each mailbox fetch waits on the server (at most
    /// [`psi_http::GROUP_MAX_WAIT_MS`]).
    pub poll: Duration,
    /// Leader: send the intersection to every member at the end (the issue's "may share
    /// it with the group"). Members learn it only then.
    pub share_result: bool,
    /// Stops the run: it is checked before each request to the relay, and a request the
    /// transport abandoned because of it counts as the cancel, not a network error. The
    /// run then fails with [`ClientError::Cancelled`] and ends the group (the end itself
    /// is sent, so the others hear `group_closed` at once).
    pub cancel: CancelToken,
}

/// The fewest and the most parties in a group, the leader included (psi-core's limits,
/// which the relay also enforces).
pub use psi_core::mpsi::params::{MAX_PARTIES, MIN_PARTIES};

impl Default for GroupOptions {
    fn default() -> Self {
        GroupOptions {
            threads: Threads::ONE,
            deadline: Duration::from_secs(300),
            poll: Duration::from_secs(2),
            share_result: true,
            cancel: CancelToken::new(),
        }
    }
}

impl GroupOptions {
    /// The defaults with `config`'s threads: what a platform SDK's run starts from.
    pub fn for_config(config: &ClientConfig) -> GroupOptions {
        GroupOptions {
            threads: config.threads,
            ..GroupOptions::default()
        }
    }
}

/// What [`GroupParty::run_contacts`] tells a party: the group's run, mapped back to this
/// party's contact rows.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GroupContactReport {
    /// This party's rows whose identifier every party holds, in row order (`label` is
    /// always `None`: a group has no registry). Empty on a member the leader did not
    /// share the result with.
    pub matches: Vec<ContactMatch>,
    /// Rows that are not valid identifiers, left out of the run, in row order.
    pub rejected: Vec<Rejected>,
    /// Rows given.
    pub rows: usize,
    /// The run: the common identifiers (normalized, as bytes), traffic and time.
    pub run: GroupReport,
}

/// What a run tells a party.
#[derive(Debug, Clone, Default)]
pub struct GroupReport {
    /// This party's index (0: the leader).
    pub party: u8,
    /// Parties, the leader included.
    pub size: u8,
    /// The items every party holds: the leader's output (in the order of its list), or,
    /// on a member, the leader's shared result (`None` when it did not share).
    pub common: Option<Vec<Vec<u8>>>,
    /// HTTP body bytes sent and received (envelopes, JSON).
    pub bytes_sent: u64,
    /// HTTP body bytes received.
    pub bytes_received: u64,
    /// psi-core message bytes sent (inside envelopes).
    pub protocol_bytes_sent: u64,
    /// psi-core message bytes received.
    pub protocol_bytes_received: u64,
    /// HTTP requests made.
    pub requests: u64,
    /// From the call of `run` to its end, waiting for the group included.
    pub elapsed: Duration,
    /// Time until the group was complete (the leader) or the leader's first message.
    pub waited: Duration,
    /// Time in psi-core (the party's own computation).
    pub compute: Duration,
}

/// The content of an envelope (its first byte).
mod kind {
    /// A psi-core group PSI message.
    pub(super) const CORE: u8 = 0x01;
    /// The leader's shared result: `BE32 count`, then per item `BE32 len || bytes`.
    pub(super) const RESULT: u8 = 0x02;
}

/// A hook seeing every psi-core message in the clear: the peer, `true` if sent, bytes.
pub type Observer = Arc<dyn Fn(u8, bool, &[u8]) + Send + Sync>;

/// The client a [`GroupParty`] sends through: borrowed (the CLI, tests), or shared (a
/// platform binding, whose party outlives the call that created it).
enum ClientRef<'c> {
    Borrowed(&'c Client),
    Shared(Arc<Client>),
}

impl std::ops::Deref for ClientRef<'_> {
    type Target = Client;
    fn deref(&self) -> &Client {
        match self {
            ClientRef::Borrowed(c) => c,
            ClientRef::Shared(c) => c,
        }
    }
}

/// A party of a group on the relay, after its create or join.
pub struct GroupParty<'c> {
    client: ClientRef<'c>,
    code: GroupCode,
    secret: GroupSecret,
    key: PartyKey,
    credential: Zeroizing<String>,
    party: u8,
    size: u8,
    max_message_bytes: u64,
    report: GroupReport,
    observer: Option<Observer>,
    ended: bool,
    /// The run's cancel token (from its options); checked before each request but the end.
    cancel: CancelToken,
}

impl std::fmt::Debug for GroupParty<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupParty")
            .field("group_id", &self.code.group_id)
            .field("party", &self.party)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

fn rng() -> Result<rand_chacha::ChaCha20Rng> {
    psi_core::rng::os_rng().map_err(|e| ClientError::BadInput(e.to_string()))
}

fn bad(what: &str) -> ClientError {
    ClientError::BadResponse(what.to_string())
}

impl Client {
    /// Creates a group of `size` parties (2 ..= 16) with this caller as its leader: draws
    /// the code's secret and the leader's key, and announces it. Show
    /// [`GroupParty::code`] to the members. A size outside 2 ..= 16 is
    /// [`ClientError::BadInput`], refused before any request.
    pub fn group_create(&self, size: u8) -> Result<GroupParty<'_>> {
        create(ClientRef::Borrowed(self), size)
    }

    /// [`Client::group_create`] on a shared client: the party holds it, and lives as long
    /// as the caller keeps it (a platform binding's group object).
    pub fn group_create_shared(self: &Arc<Self>, size: u8) -> Result<GroupParty<'static>> {
        create(ClientRef::Shared(self.clone()), size)
    }

    /// Joins the group of `code` as a member.
    pub fn group_join(&self, code: &str) -> Result<GroupParty<'_>> {
        join(ClientRef::Borrowed(self), code)
    }

    /// [`Client::group_join`] on a shared client (see [`Client::group_create_shared`]).
    pub fn group_join_shared(self: &Arc<Self>, code: &str) -> Result<GroupParty<'static>> {
        join(ClientRef::Shared(self.clone()), code)
    }
}

fn create(client: ClientRef<'_>, size: u8) -> Result<GroupParty<'_>> {
    let (code, key, joined, report) = {
        let this: &Client = &client;
        Client::check_base_url(&this.base, &this.config)?;
        if !(MIN_PARTIES..=MAX_PARTIES).contains(&size) {
            return Err(ClientError::BadInput(format!(
                "a group has {MIN_PARTIES} to {MAX_PARTIES} parties, not {size}"
            )));
        }
        let mut r = rng()?;
        let mut secret = Zeroizing::new([0u8; envelope::SECRET_BYTES]);
        rand_core::Rng::fill_bytes(&mut r, secret.as_mut());
        let key = PartyKey::new(&mut r);
        // The announcement's MAC depends on the secret alone (the id is the server's
        // answer); the id and the indices are bound by the pair keys.
        let ann = key.announce(&GroupSecret::new("", *secret));
        let body = serde_json::to_vec(&psi_http::CreateGroup {
            size,
            key: hex::encode(ann),
        })
        .map_err(|e| ClientError::BadInput(e.to_string()))?;
        let mut report = GroupReport::default();
        let call = Call {
            route: Route::CreateGroup,
            id: "",
            body,
            credential: None,
            query: None,
            step: None,
        };
        let resp = send(this, &mut report, call)?;
        let joined: GroupJoined =
            serde_json::from_slice(&resp.body).map_err(|_| bad("not a group (JSON)"))?;
        if joined.party != 0 || joined.size != size {
            return Err(bad(
                "the server made this caller a member, or changed the size",
            ));
        }
        let code = GroupCode::new(joined.group_id.clone(), *secret);
        (code, key, joined, report)
    };
    GroupParty::new(client, code, key, joined, report)
}

fn join<'c>(client: ClientRef<'c>, code: &str) -> Result<GroupParty<'c>> {
    let (code, key, joined, report) = {
        let this: &Client = &client;
        Client::check_base_url(&this.base, &this.config)?;
        let code: GroupCode = code.parse()?;
        let mut r = rng()?;
        let key = PartyKey::new(&mut r);
        let ann = key.announce(&GroupSecret::new("", *code.secret));
        let body = serde_json::to_vec(&psi_http::JoinGroup {
            key: hex::encode(ann),
        })
        .map_err(|e| ClientError::BadInput(e.to_string()))?;
        let mut report = GroupReport::default();
        let call = Call {
            route: Route::JoinGroup,
            id: &code.group_id,
            body,
            credential: None,
            query: None,
            step: None,
        };
        let resp = send(this, &mut report, call)?;
        let joined: GroupJoined =
            serde_json::from_slice(&resp.body).map_err(|_| bad("not a group (JSON)"))?;
        if joined.group_id != code.group_id || joined.party == 0 {
            return Err(bad("the server answered for another group or party"));
        }
        (code, key, joined, report)
    };
    GroupParty::new(client, code, key, joined, report)
}

/// One request to the relay.
struct Call<'a> {
    route: Route,
    /// The group id (empty for the create).
    id: &'a str,
    body: Vec<u8>,
    /// The party credential, after the create or join.
    credential: Option<&'a str>,
    query: Option<String>,
    /// The relay's `max_message_bytes`, once known: the fetch's response cap.
    step: Option<u64>,
}

/// Sends `call` (JSON or binary body, the party credential if any); error statuses as
/// [`ClientError::Http`].
fn send(client: &Client, report: &mut GroupReport, call: Call<'_>) -> Result<Response> {
    let Call {
        route,
        id,
        body,
        credential,
        query,
        step,
    } = call;
    let config = &client.config;
    let mut headers = Vec::new();
    if let Some(t) = &config.token {
        headers.push(("authorization".into(), format!("Bearer {t}")));
    }
    if let Some(c) = credential {
        headers.push((GROUP_CREDENTIAL_HEADER.into(), c.to_string()));
    }
    let content = match route {
        Route::CreateGroup | Route::JoinGroup => Some(psi_http::JSON),
        Route::PostGroupMessage => Some(psi_http::BINARY),
        _ => None,
    };
    if let Some(c) = content {
        headers.push(("content-type".into(), c.to_string()));
    }
    let mut url = format!("{}{}", client.base, route.path(id));
    if let Some(q) = query {
        url.push('?');
        url.push_str(&q);
    }
    let sent = body.len() as u64;
    let cap = crate::server_input::route_cap(route, step, None, config.max_response_bytes);
    // A fetch waits on the server: its timeout covers the wait.
    let timeout = config.timeout + Duration::from_millis(psi_http::GROUP_MAX_WAIT_MS);
    let resp = client.transport.send(Request {
        method: route.method(),
        url,
        headers,
        body,
        timeout,
        max_response_bytes: cap,
        abandon_on_cancel: route != Route::EndGroup,
    })?;
    if resp.status < 400 && resp.body.len() as u64 > cap {
        return Err(
            TransportError::failed(format!("response body over its cap of {cap} bytes")).into(),
        );
    }
    report.requests += 1;
    report.bytes_sent += sent;
    report.bytes_received += resp.body.len() as u64;
    if (300..400).contains(&resp.status) {
        return Err(bad("a redirect, not followed"));
    }
    if resp.status >= 400 {
        let retry_after = resp
            .header("retry-after")
            .and_then(crate::server_input::retry_after);
        let (code, message) = match serde_json::from_slice::<ErrorBody>(&resp.body) {
            Ok(e) => (e.error, e.message),
            Err(_) => (ErrorCode::Unknown, "non-JSON error response".to_string()),
        };
        return Err(ClientError::Http {
            status: resp.status,
            code,
            message,
            retry_after,
        });
    }
    Ok(resp)
}

fn encode_result(items: &[Vec<u8>]) -> Zeroizing<Vec<u8>> {
    let mut out = Zeroizing::new(vec![kind::RESULT]);
    out.extend_from_slice(&(items.len() as u32).to_be_bytes());
    for i in items {
        out.extend_from_slice(&(i.len() as u32).to_be_bytes());
        out.extend_from_slice(i);
    }
    out
}

fn decode_result(body: &[u8]) -> Option<Vec<Vec<u8>>> {
    fn take<'a>(rest: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        if rest.len() < n {
            return None;
        }
        let (a, b) = rest.split_at(n);
        *rest = b;
        Some(a)
    }
    let mut rest = body;
    let count = u32::from_be_bytes(take(&mut rest, 4)?.try_into().ok()?) as usize;
    let mut items = Vec::with_capacity(count.min(1 << 20));
    for _ in 0..count {
        let len = u32::from_be_bytes(take(&mut rest, 4)?.try_into().ok()?) as usize;
        items.push(take(&mut rest, len)?.to_vec());
    }
    rest.is_empty().then_some(items)
}

impl<'c> GroupParty<'c> {
    fn new(
        client: ClientRef<'c>,
        code: GroupCode,
        key: PartyKey,
        joined: GroupJoined,
        report: GroupReport,
    ) -> Result<GroupParty<'c>> {
        if !(2..=16).contains(&joined.size) || joined.party >= joined.size {
            return Err(bad("a group answer with an impossible size or index"));
        }
        if joined.max_message_bytes < 64 << 10 {
            return Err(bad("the relay's message limit is below 64 KiB"));
        }
        let secret = GroupSecret::new(&code.group_id, *code.secret);
        Ok(GroupParty {
            client,
            secret,
            code,
            key,
            credential: Zeroizing::new(joined.credential),
            party: joined.party,
            size: joined.size,
            max_message_bytes: joined.max_message_bytes,
            report: GroupReport {
                party: joined.party,
                size: joined.size,
                ..report
            },
            observer: None,
            ended: false,
            cancel: CancelToken::new(),
        })
    }

    /// The code to show the members (it holds the secret: show it to the group only).
    pub fn code(&self) -> String {
        self.code.to_string()
    }

    /// This party's index (0: the leader).
    pub fn party(&self) -> u8 {
        self.party
    }

    /// Parties, the leader included.
    pub fn size(&self) -> u8 {
        self.size
    }

    /// The client this party sends through.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Sets a hook that sees every psi-core message in the clear (tests, transcripts).
    pub fn observe(&mut self, observer: Observer) {
        self.observer = Some(observer);
    }

    fn send(&mut self, route: Route, body: Vec<u8>, query: Option<String>) -> Result<Response> {
        let cancellable = route != Route::EndGroup;
        if cancellable && self.cancel.is_cancelled() {
            return Err(ClientError::Cancelled);
        }
        let c = self.credential.clone();
        let call = Call {
            route,
            id: &self.code.group_id,
            body,
            credential: Some(&c),
            query,
            step: Some(self.max_message_bytes),
        };
        match send(&self.client, &mut self.report, call) {
            // A request the transport abandoned because of the cancel.
            Err(_) if cancellable && self.cancel.is_cancelled() => Err(ClientError::Cancelled),
            other => other,
        }
    }

    /// Waits for the roster until `parties` hold announcements, and opens a channel to
    /// each.
    fn channels(&mut self, peers: &[u8], deadline: Instant) -> Result<Vec<Option<Channel>>> {
        loop {
            let resp = self.send(Route::GroupState, Vec::new(), None)?;
            let state: GroupState =
                serde_json::from_slice(&resp.body).map_err(|_| bad("not a group state (JSON)"))?;
            if state.keys.len() != self.size as usize {
                return Err(bad("a roster of another size"));
            }
            if state.ended {
                return Err(GroupError::Ended.into());
            }
            if peers.iter().all(|&p| state.keys[p as usize].is_some()) {
                let mut out: Vec<Option<Channel>> = (0..self.size).map(|_| None).collect();
                for &p in peers {
                    let hex_key = state.keys[p as usize].as_deref().unwrap_or("");
                    let ann = hex::decode(hex_key)
                        .map_err(|_| GroupError::BadAnnouncement { party: p })?;
                    out[p as usize] = Some(self.key.channel(&self.secret, self.party, p, &ann)?);
                }
                return Ok(out);
            }
            if Instant::now() >= deadline {
                return Err(GroupError::TimedOut {
                    what: "the group to fill",
                }
                .into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Channels to the peers, by party index (`None`: not a peer).
type Channels = Vec<Option<Channel>>;

impl GroupParty<'_> {
    /// Runs group PSI with `items`: the leader waits for the group to fill, then every
    /// psi-core message travels in an envelope through the relay. The leader learns the
    /// items every party holds (and shares them if `options.share_result`); a member
    /// learns them only if shared. The group is ended at the end, or on any failure (so
    /// the others hear `group_closed` at once).
    pub fn run(mut self, items: ItemSet, options: &GroupOptions) -> Result<GroupReport> {
        self.cancel = options.cancel.clone();
        let start = Instant::now();
        let deadline = start + options.deadline;
        let result = if self.party == 0 {
            self.run_leader(items, options, start, deadline)
        } else {
            self.run_member(items, options, start, deadline)
        };
        let ended = self.end();
        self.report.elapsed = start.elapsed();
        let common = result?;
        match ended {
            // The group may be gone by now (its lifetime): nothing left to clean.
            Err(ClientError::Http {
                code: ErrorCode::UnknownGroup | ErrorCode::GroupExpired,
                ..
            }) => {}
            other => other?,
        }
        self.report.common = common;
        Ok(self.report)
    }

    /// Normalizes `contacts` (phone numbers with the client's
    /// [`ClientConfig::default_region`], emails), runs group PSI with the valid ones, and
    /// maps the common identifiers back to this party's rows. Invalid rows are left out
    /// and returned with their reason; an address book with no valid row still takes part
    /// (with an empty set, so the group's result is empty).
    pub fn run_contacts<S: AsRef<str>>(
        self,
        contacts: &[S],
        options: &GroupOptions,
    ) -> Result<GroupContactReport> {
        let normalizer = Normalizer::new(&self.client.config.default_region)
            .map_err(|e| ClientError::BadInput(e.to_string()))?;
        let normalized = normalizer.normalize_all(contacts);
        let rejected: Vec<Rejected> = normalized
            .rejected
            .iter()
            .map(|&(row, reason)| Rejected { row, reason })
            .collect();
        let items: Vec<Vec<u8>> = normalized
            .accepted
            .iter()
            .map(|(_, c)| c.value.as_bytes().to_vec())
            .collect();
        let run = self.run(ItemSet::new(items), options)?;
        let common: std::collections::HashSet<&[u8]> =
            run.common.iter().flatten().map(Vec::as_slice).collect();
        let matches = normalized
            .accepted
            .iter()
            .filter(|(_, c)| common.contains(c.value.as_bytes()))
            .map(|(row, c)| ContactMatch {
                row: *row,
                identifier: c.value.clone(),
                label: None,
            })
            .collect();
        Ok(GroupContactReport {
            matches,
            rejected,
            rows: contacts.len(),
            run,
        })
    }

    /// Ends the group for every party (this one leaves it); done by [`GroupParty::run`].
    pub fn end(&mut self) -> Result<()> {
        if self.ended {
            return Ok(());
        }
        self.ended = true;
        self.send(Route::EndGroup, Vec::new(), None).map(drop)
    }

    fn observe_message(&self, peer: u8, sent: bool, bytes: &[u8]) {
        if let Some(o) = &self.observer {
            o(peer, sent, bytes);
        }
    }

    /// Seals `plaintext` for `to` and posts it, waiting while its mailbox is full.
    fn post(
        &mut self,
        channels: &mut Channels,
        to: u8,
        plaintext: &[u8],
        deadline: Instant,
    ) -> Result<()> {
        let ch = channels
            .get_mut(to as usize)
            .and_then(Option::as_mut)
            .ok_or_else(|| bad("a message for a party that is not a peer"))?;
        let envelope = ch.seal(plaintext);
        loop {
            match self.send(
                Route::PostGroupMessage,
                envelope.clone(),
                Some(format!("to={to}")),
            ) {
                Err(ClientError::Http {
                    code: ErrorCode::MailboxFull,
                    ..
                }) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
                Err(ClientError::Http {
                    code: ErrorCode::GroupClosed,
                    ..
                }) => return Err(GroupError::Ended.into()),
                other => return other.map(drop),
            }
        }
    }

    fn post_core(
        &mut self,
        channels: &mut Channels,
        to: u8,
        message: &[u8],
        deadline: Instant,
    ) -> Result<()> {
        self.observe_message(to, true, message);
        let mut pt = Zeroizing::new(Vec::with_capacity(message.len() + 1));
        pt.push(kind::CORE);
        pt.extend_from_slice(message);
        self.report.protocol_bytes_sent += message.len() as u64;
        self.post(channels, to, &pt, deadline)
    }

    /// The next envelope of this party's mailbox, opened: its sender and plaintext.
    fn fetch(
        &mut self,
        channels: &mut Channels,
        options: &GroupOptions,
        deadline: Instant,
    ) -> Result<(u8, Zeroizing<Vec<u8>>)> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(GroupError::TimedOut {
                    what: "a message from the group",
                }
                .into());
            }
            let wait = options
                .poll
                .min(left)
                .min(Duration::from_millis(psi_http::GROUP_MAX_WAIT_MS));
            let resp = match self.send(
                Route::FetchGroupMessage,
                Vec::new(),
                Some(format!("wait_ms={}", wait.as_millis())),
            ) {
                Err(ClientError::Http {
                    code: ErrorCode::GroupClosed,
                    ..
                }) => return Err(GroupError::Ended.into()),
                other => other?,
            };
            if resp.status == 204 {
                continue;
            }
            let from: u8 = resp
                .header(GROUP_FROM_HEADER)
                .and_then(|v| v.trim().parse().ok())
                .ok_or_else(|| bad("a group message without its sender"))?;
            let ch = channels
                .get_mut(from as usize)
                .and_then(Option::as_mut)
                .ok_or(GroupError::Unexpected {
                    from,
                    what: "not a peer of this party",
                })?;
            let plaintext = ch.open(&resp.body)?;
            if plaintext.is_empty() {
                return Err(GroupError::Unexpected {
                    from,
                    what: "an empty envelope",
                }
                .into());
            }
            return Ok((from, plaintext));
        }
    }

    fn run_leader(
        &mut self,
        items: ItemSet,
        options: &GroupOptions,
        start: Instant,
        deadline: Instant,
    ) -> Result<Option<Vec<Vec<u8>>>> {
        let peers: Vec<u8> = (1..self.size).collect();
        let mut channels = self.channels(&peers, deadline)?;
        self.report.waited = start.elapsed();
        // Matrix chunks fit the relay's envelope: the kind byte and the envelope's bytes.
        let limit = self.max_message_bytes - (envelope::OVERHEAD + 1) as u64;
        let config = MpsiConfig::new(options.threads).with_max_chunk_bytes(limit);
        let mut r = rng()?;
        let t = Instant::now();
        let mut leader = Leader::start(items, self.size, config, &mut r)?;
        self.report.compute += t.elapsed();
        let output = loop {
            let (from, pt) = self.fetch(&mut channels, options, deadline)?;
            if pt[0] != kind::CORE {
                return Err(GroupError::Unexpected {
                    from,
                    what: "not a protocol message",
                }
                .into());
            }
            let message = &pt[1..];
            self.observe_message(from, false, message);
            self.report.protocol_bytes_received += message.len() as u64;
            let t = Instant::now();
            let step = leader.handle(from as usize, message);
            self.report.compute += t.elapsed();
            match step? {
                LeaderStep::Send(out) => {
                    for o in out {
                        let to = u8::try_from(o.member).map_err(|_| bad("a member index"))?;
                        self.post_core(&mut channels, to, &o.bytes, deadline)?;
                    }
                }
                LeaderStep::Done(output) => break output,
                _ => return Err(bad("a leader step this driver does not know")),
            }
        };
        let common: Vec<Vec<u8>> = output.matches.iter().map(|m| m.item.clone()).collect();
        if options.share_result {
            let result = encode_result(&common);
            for p in peers {
                self.post(&mut channels, p, &result, deadline)?;
            }
        }
        Ok(Some(common))
    }

    fn run_member(
        &mut self,
        items: ItemSet,
        options: &GroupOptions,
        start: Instant,
        deadline: Instant,
    ) -> Result<Option<Vec<Vec<u8>>>> {
        let mut channels = self.channels(&[0], deadline)?;
        let mut r = rng()?;
        let t = Instant::now();
        let (mut member, hello) = Member::start(items, MpsiConfig::new(options.threads), &mut r)?;
        self.report.compute += t.elapsed();
        self.post_core(&mut channels, 0, &hello, deadline)?;
        let mut first = true;
        loop {
            let (from, pt) = match self.fetch(&mut channels, options, deadline) {
                // The leader ended the group without sharing its result.
                Err(ClientError::Group(GroupError::Ended)) if member.is_done() => return Ok(None),
                other => other?,
            };
            if first {
                self.report.waited = start.elapsed();
                first = false;
            }
            match (pt[0], member.is_done()) {
                (kind::CORE, false) => {
                    let message = &pt[1..];
                    self.observe_message(from, false, message);
                    self.report.protocol_bytes_received += message.len() as u64;
                    let t = Instant::now();
                    let reply = member.handle(message);
                    self.report.compute += t.elapsed();
                    if let Some(reply) = reply? {
                        self.post_core(&mut channels, 0, &reply, deadline)?;
                    }
                }
                (kind::RESULT, true) => {
                    let items = decode_result(&pt[1..]).ok_or(GroupError::Unexpected {
                        from,
                        what: "a malformed result",
                    })?;
                    return Ok(Some(items));
                }
                _ => {
                    return Err(GroupError::Unexpected {
                        from,
                        what: "a message out of order",
                    }
                    .into());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_round_trip_and_refuse_trailing_or_short_bytes() {
        let items = vec![b"a".to_vec(), Vec::new(), b"contact".to_vec()];
        let enc = encode_result(&items);
        assert_eq!(enc[0], kind::RESULT);
        assert_eq!(decode_result(&enc[1..]), Some(items));
        assert_eq!(decode_result(&enc[1..enc.len() - 1]), None);
        let mut long = enc[1..].to_vec();
        long.push(0);
        assert_eq!(decode_result(&long), None);
        assert_eq!(decode_result(&[0, 0, 0, 0]), Some(vec![]));
        assert_eq!(decode_result(&[0xff, 0xff, 0xff, 0xff]), None);
    }
}
