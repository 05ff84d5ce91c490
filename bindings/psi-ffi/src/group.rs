//! Group overlap: which contacts do all of us share (IOP18 multiparty PSI over the
//! server's relay, docs/protocol/group-psi.md, docs/adr/0051-group-relay.md), as
//! psi-client's group driver ([`psi_client::group`]) behind a [`GroupSession`].
//!
//! The leader creates the group from its [`DiscoveryClient`]
//! ([`DiscoveryClient::group_create`]) and shows [`GroupSession::code`] to the others; each
//! member joins with it ([`DiscoveryClient::group_join`]); every party then calls
//! [`GroupSession::run`] with its contacts. As a match, a run executes on its own thread,
//! the platform's transport moves the bytes, and dropping the future (a cancelled
//! coroutine) or [`GroupSession::cancel`] (Swift) stops it and ends the group.

use crate::cancel::CancelHandle;
use crate::client::{CancelOnDrop, DiscoveryClient};
use crate::error::{GroupError, PsiError};
use crate::job::spawn;
use crate::report::RejectedContact;
use psi_client::group::{GroupContactReport, GroupOptions, GroupParty, MAX_PARTIES, MIN_PARTIES};
use psi_client::{CancelToken, Client};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Settings of one group run ([`default_group_run_options`] gives psi-client's).
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct GroupRunOptions {
    /// Leader: send the common contacts to every member at the end (members learn them
    /// only then). Ignored on a member.
    pub share_result: bool,
    /// The longest the whole run may take, waiting for the group to fill included, in
    /// milliseconds (1 ms to 24 h).
    pub deadline_ms: u64,
}

/// The longest deadline a group run takes (a day: the relay's groups live minutes).
const MAX_DEADLINE_MS: u64 = 24 * 3_600_000;

/// psi-client's defaults for a group run: the result shared, a deadline of 300 s.
#[uniffi::export]
pub fn default_group_run_options() -> GroupRunOptions {
    let d = GroupOptions::default();
    GroupRunOptions {
        share_result: d.share_result,
        deadline_ms: millis(d.deadline),
    }
}

/// A row of this party's contacts that every party of the group holds.
#[derive(Clone, PartialEq, Eq, uniffi::Record)]
pub struct GroupMatch {
    /// Index of the row in the caller's list (0-based). Rows that normalize to the same
    /// identifier all appear, each with its own index.
    pub row: u64,
    /// The normalized identifier (E.164 phone number or lower-cased email).
    pub identifier: String,
}

impl std::fmt::Debug for GroupMatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupMatch")
            .field("row", &self.row)
            .finish_non_exhaustive()
    }
}

/// This party's traffic and time in a group run (psi-client's `GroupReport`).
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct GroupStats {
    /// HTTP requests made to the relay (the create or join and the end included).
    pub requests: u64,
    /// HTTP body bytes sent (envelopes, JSON).
    pub bytes_sent: u64,
    /// HTTP body bytes received.
    pub bytes_received: u64,
    /// Group PSI message bytes sent (inside the end-to-end envelopes).
    pub protocol_bytes_sent: u64,
    /// Group PSI message bytes received.
    pub protocol_bytes_received: u64,
    /// From the call of `run` to its end, waiting for the group included, in ms.
    pub elapsed_ms: u64,
    /// Waiting: until the group was complete (the leader) or the leader's first
    /// message (a member), in ms.
    pub waited_ms: u64,
    /// This party's own computation, in ms.
    pub compute_ms: u64,
}

/// What a group run tells a party.
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct GroupResult {
    /// This party's index (0: the leader).
    pub party: u32,
    /// Parties, the leader included.
    pub size: u32,
    /// The identifiers (normalized) every party holds: the leader's output, or on a member
    /// the result the leader shared. `None` on a member the leader did not share it with.
    pub common: Option<Vec<String>>,
    /// This party's rows whose identifier is in `common`, in row order.
    pub matches: Vec<GroupMatch>,
    /// Rows that are not valid identifiers (left out of the run), in row order.
    pub rejected: Vec<RejectedContact>,
    /// Traffic and time.
    pub stats: GroupStats,
}

impl From<GroupContactReport> for GroupResult {
    fn from(r: GroupContactReport) -> Self {
        let run = r.run;
        GroupResult {
            party: run.party.into(),
            size: run.size.into(),
            common: run.common.map(|c| {
                c.into_iter()
                    .map(|i| String::from_utf8_lossy(&i).into_owned())
                    .collect()
            }),
            matches: r
                .matches
                .into_iter()
                .map(|m| GroupMatch {
                    row: m.row as u64,
                    identifier: m.identifier,
                })
                .collect(),
            rejected: r
                .rejected
                .into_iter()
                .map(|x| RejectedContact {
                    row: x.row as u64,
                    reason: x.reason.into(),
                })
                .collect(),
            stats: GroupStats {
                requests: run.requests,
                bytes_sent: run.bytes_sent,
                bytes_received: run.bytes_received,
                protocol_bytes_sent: run.protocol_bytes_sent,
                protocol_bytes_received: run.protocol_bytes_received,
                elapsed_ms: millis(run.elapsed),
                waited_ms: millis(run.waited),
                compute_ms: millis(run.compute),
            },
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// One party of a group on the server's relay, after its create or join: holds the
/// group's code and this party's keys until [`GroupSession::run`]. Run once; a session
/// dropped without running leaves the group (ends it for everyone) on a thread of its own.
#[derive(uniffi::Object)]
pub struct GroupSession {
    code: String,
    party: u8,
    size: u8,
    /// Cancels the run (and the create or join, if it is the caller's handle): the
    /// transport's and the run's token.
    token: CancelToken,
    /// The party, until its run or end takes it.
    state: Mutex<Option<GroupParty<'static>>>,
}

impl std::fmt::Debug for GroupSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the code: it holds the group's secret.
        f.debug_struct("GroupSession")
            .field("party", &self.party)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl Drop for GroupSession {
    fn drop(&mut self) {
        let party = self.state.get_mut().ok().and_then(Option::take);
        if let Some(mut party) = party {
            // Leave the group so the others hear `group_closed` at once; never block the
            // thread that released the object (a platform's finalizer or its UI thread).
            let _ = std::thread::Builder::new()
                .name("psi-group-end".into())
                .spawn(move || {
                    let _ = party.end();
                });
        }
    }
}

/// A failure while the token was cancelled is the cancel (a request abandoned for it
/// fails as a network error).
fn or_cancelled(e: GroupError, token: &CancelToken) -> GroupError {
    if token.is_cancelled() {
        PsiError::Cancelled.into()
    } else {
        e
    }
}

/// `f` on its own thread: a panic is [`PsiError::Internal`], as for a match.
async fn on_thread<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> Result<T, GroupError> + Send + 'static,
) -> Result<T, GroupError> {
    spawn(name, move || Ok(f()))?.await?
}

impl GroupSession {
    fn new(party: GroupParty<'static>, token: CancelToken) -> Arc<GroupSession> {
        Arc::new(GroupSession {
            code: party.code(),
            party: party.party(),
            size: party.size(),
            token,
            state: Mutex::new(Some(party)),
        })
    }

    fn take(&self) -> Result<GroupParty<'static>, GroupError> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| {
                PsiError::InvalidInput {
                    reason: "this group session has already run or ended".into(),
                }
                .into()
            })
    }
}

#[uniffi::export]
impl GroupSession {
    /// The code to show the other parties (`GROUP_ID.SECRET`). It holds the group's
    /// secret: show it to the group only, never log it.
    pub fn code(&self) -> String {
        self.code.clone()
    }

    /// This party's index: 0 for the leader, 1 ..= size-1 for the members.
    pub fn party(&self) -> u32 {
        self.party.into()
    }

    /// Parties, the leader included (2 ..= 16).
    pub fn size(&self) -> u32 {
        self.size.into()
    }

    /// True for the party that created the group.
    pub fn is_leader(&self) -> bool {
        self.party == 0
    }

    /// Normalizes `contacts` (phone numbers with the client's default region, emails) and
    /// runs group PSI with the valid ones through the relay: the leader waits for the group
    /// to fill and learns the identifiers every party holds (and shares them, unless
    /// `options.share_result` is false); a member learns them only if shared. The group is
    /// ended at the end, or on any failure. Runs once per session (a second call fails
    /// with [`PsiError::InvalidInput`]). Dropping the returned future, or
    /// [`GroupSession::cancel`], cancels the run ([`PsiError::Cancelled`]) and ends the
    /// group for everyone.
    pub async fn run(
        self: Arc<Self>,
        contacts: Vec<String>,
        options: Option<GroupRunOptions>,
    ) -> Result<GroupResult, GroupError> {
        let options = options.unwrap_or_else(default_group_run_options);
        if !(1..=MAX_DEADLINE_MS).contains(&options.deadline_ms) {
            return Err(PsiError::InvalidInput {
                reason: format!(
                    "a group run's deadline must be 1 ms to {} h",
                    MAX_DEADLINE_MS / 3_600_000
                ),
            }
            .into());
        }
        let party = self.take()?;
        let guard = CancelOnDrop::new(self.token.clone());
        let token = self.token.clone();
        let run = on_thread("psi-group", move || {
            let mut o = GroupOptions::for_config(party.client().config());
            o.share_result = options.share_result;
            o.deadline = Duration::from_millis(options.deadline_ms);
            o.cancel = token.clone();
            party
                .run_contacts(&contacts, &o)
                .map(GroupResult::from)
                .map_err(|e| or_cancelled(e.into(), &token))
        });
        let result = run.await;
        guard.disarm();
        result
    }

    /// Cancels this session's run, now or before it starts: the request in flight is
    /// abandoned, the group ended, and `run` fails with [`PsiError::Cancelled`]. For
    /// platforms whose task cancellation does not drop the native future (Swift). Cheap;
    /// any thread, any number of times.
    pub fn cancel(&self) {
        self.token.cancel();
    }

    /// True once the session (or the handle it was created with) was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Leaves the group without running: it ends for every party (their runs fail with
    /// a group-ended error). Does nothing after a run, or a second time.
    pub async fn end(self: Arc<Self>) -> Result<(), GroupError> {
        let Ok(mut party) = self.take() else {
            return Ok(());
        };
        on_thread("psi-group-end", move || Ok(party.end()?)).await
    }
}

/// Checks a group size before any request: 2 ..= 16.
fn group_size(size: u32) -> Result<u8, GroupError> {
    u8::try_from(size)
        .ok()
        .filter(|s| (MIN_PARTIES..=MAX_PARTIES).contains(s))
        .ok_or_else(|| {
            PsiError::InvalidInput {
                reason: format!("a group has {MIN_PARTIES} to {MAX_PARTIES} parties, not {size}"),
            }
            .into()
        })
}

/// Whether a session creates or joins.
enum Start {
    Create(u8),
    Join(String),
}

#[uniffi::export]
impl DiscoveryClient {
    /// Creates a group of `size` parties (2 ..= 16, this one included) on the server's
    /// relay, with this caller as its leader. Show the session's `code` to the others,
    /// then call its `run`. A size outside 2 ..= 16 fails with [`PsiError::InvalidInput`]
    /// before any request. Dropping the future cancels the create.
    pub async fn group_create(self: Arc<Self>, size: u32) -> Result<Arc<GroupSession>, GroupError> {
        let size = group_size(size)?;
        self.start_group(Start::Create(size), CancelToken::new())
            .await
    }

    /// Joins the group of `code` (the leader's [`GroupSession::code`]) as a member. A code
    /// that is not one, or names no group, fails with [`GroupError::Failed`]
    /// ([`GroupFailure::BadCode`], [`GroupFailure::UnknownGroup`]); a group whose parties
    /// are all there with [`GroupFailure::GroupFull`].
    pub async fn group_join(
        self: Arc<Self>,
        code: String,
    ) -> Result<Arc<GroupSession>, GroupError> {
        self.start_group(Start::Join(code), CancelToken::new())
            .await
    }

    /// [`DiscoveryClient::group_create`] with an explicit cancel path (Swift): `cancel`
    /// cancels the create and, later, the session's run (as [`GroupSession::cancel`]).
    pub async fn group_create_cancellable(
        self: Arc<Self>,
        size: u32,
        cancel: Arc<CancelHandle>,
    ) -> Result<Arc<GroupSession>, GroupError> {
        let size = group_size(size)?;
        self.start_group(Start::Create(size), cancel.token()).await
    }

    /// [`DiscoveryClient::group_join`] with an explicit cancel path (see
    /// [`DiscoveryClient::group_create_cancellable`]).
    pub async fn group_join_cancellable(
        self: Arc<Self>,
        code: String,
        cancel: Arc<CancelHandle>,
    ) -> Result<Arc<GroupSession>, GroupError> {
        self.start_group(Start::Join(code), cancel.token()).await
    }
}

impl DiscoveryClient {
    /// The create or join on its own thread, with a client whose transport abandons its
    /// request when `token` is cancelled.
    async fn start_group(
        self: Arc<Self>,
        start: Start,
        token: CancelToken,
    ) -> Result<Arc<GroupSession>, GroupError> {
        let guard = CancelOnDrop::new(token.clone());
        let client: Arc<Client> = Arc::new(self.group_client(&token));
        let call = on_thread("psi-group", move || {
            if token.is_cancelled() {
                return Err(PsiError::Cancelled.into());
            }
            let party = match start {
                Start::Create(size) => client.group_create_shared(size),
                Start::Join(code) => client.group_join_shared(&code),
            }
            .map_err(|e| or_cancelled(e.into(), &token))?;
            if token.is_cancelled() {
                // Cancelled while the answer came: leave the group at once.
                let mut party = party;
                let _ = party.end();
                return Err(PsiError::Cancelled.into());
            }
            Ok(GroupSession::new(party, token))
        });
        let result = call.await;
        guard.disarm();
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_outside_the_relays_range_are_invalid_input() {
        for bad in [0, 1, 17, 255, 256, u32::MAX] {
            assert!(
                matches!(
                    group_size(bad),
                    Err(GroupError::Call {
                        error: PsiError::InvalidInput { .. }
                    })
                ),
                "{bad}"
            );
        }
        for good in 2..=16 {
            assert_eq!(group_size(good).ok(), Some(good as u8));
        }
    }

    #[test]
    fn the_default_options_are_psi_clients() {
        let o = default_group_run_options();
        let d = GroupOptions::default();
        assert_eq!(o.share_result, d.share_result);
        assert_eq!(Duration::from_millis(o.deadline_ms), d.deadline);
    }

    #[test]
    fn a_failure_while_cancelled_is_the_cancel() {
        let t = CancelToken::new();
        let e = || -> GroupError {
            PsiError::Network {
                reason: "request abandoned".into(),
                timeout: false,
            }
            .into()
        };
        assert!(matches!(
            or_cancelled(e(), &t),
            GroupError::Call {
                error: PsiError::Network { .. }
            }
        ));
        t.cancel();
        assert!(matches!(
            or_cancelled(e(), &t),
            GroupError::Call {
                error: PsiError::Cancelled
            }
        ));
    }
}
