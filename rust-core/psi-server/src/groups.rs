//! The group relay's table ([`Groups`]): groups of 2 to 16 parties, each with a bounded
//! mailbox of opaque envelopes (docs/protocol/group-psi.md §9, docs/adr/0051-group-relay.md).
//!
//! The relay never looks inside what it carries: the envelopes are end-to-end encrypted
//! by the parties, and the key announcements are opaque bytes it hands back in the
//! roster. A group lives in the memory of the instance that created it (its id names the
//! instance, as a session id does) and ends when a party ends it, or when its lifetime
//! passes; the periodic sweep removes it with its mailboxes.

use crate::config::instant_after;
use psi_http::{ErrorCode, GROUP_KEY_BYTES};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;
use tokio::sync::Notify;

/// The relay's limits (`Config::groups`).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GroupLimits {
    /// Most live groups on this instance (default 256).
    pub max_groups: usize,
    /// Most live groups one caller (its budget key) has created (default 4).
    pub max_groups_per_client: usize,
    /// A group's lifetime from its creation (default 10 minutes): then it is removed with
    /// its mailboxes, finished or not.
    pub ttl: Duration,
    /// Largest envelope one post carries (default 4 MiB; the leader sizes its chunks to
    /// fit). At most the server's `max_body_bytes`.
    pub max_message_bytes: usize,
    /// Most bytes one party's mailbox holds at once (default 32 MiB).
    pub mailbox_bytes: usize,
    /// Most envelopes one party's mailbox holds at once (default 64).
    pub mailbox_messages: usize,
    /// Bytes one caller may post per hour, over all its groups (default 512 MiB; 0 = no
    /// limit): each post is charged its body, at least 1 KiB.
    pub bytes_per_hour: u64,
}

impl Default for GroupLimits {
    fn default() -> Self {
        GroupLimits {
            max_groups: 256,
            max_groups_per_client: 4,
            ttl: Duration::from_secs(600),
            max_message_bytes: 4 << 20,
            mailbox_bytes: 32 << 20,
            mailbox_messages: 64,
            bytes_per_hour: 512 << 20,
        }
    }
}

/// A refusal of the table: a code and a log-safe message (the API turns it into an error).
#[derive(Debug)]
pub(crate) struct Refusal {
    pub(crate) code: ErrorCode,
    pub(crate) message: String,
}

fn refuse(code: ErrorCode, message: impl Into<String>) -> Refusal {
    Refusal {
        code,
        message: message.into(),
    }
}

type Res<T> = Result<T, Refusal>;

struct Party {
    /// SHA-256 of the credential: compared in constant time, the credential never kept.
    credential: [u8; 32],
    key: [u8; GROUP_KEY_BYTES],
    /// `(sender, envelope)`, oldest first.
    mailbox: VecDeque<(u8, axum::body::Bytes)>,
    bytes: usize,
    /// This party ended the group (its mailbox is dropped).
    left: bool,
    notify: Arc<Notify>,
}

struct Group {
    size: u8,
    creator: String,
    expires: Instant,
    parties: Vec<Party>,
    ended: bool,
}

impl Group {
    /// The index of the party holding `credential`: every party's digest compared in
    /// constant time.
    fn party(&self, credential: &str) -> Res<u8> {
        let d: [u8; 32] = Sha256::digest(credential.as_bytes()).into();
        let mut found = None;
        for (i, p) in self.parties.iter().enumerate() {
            if bool::from(p.credential.ct_eq(&d)) {
                found = Some(i as u8);
            }
        }
        found.ok_or_else(|| {
            refuse(
                ErrorCode::InvalidParty,
                "the party credential is not one of this group's",
            )
        })
    }
}

/// What a create or join tells the caller.
pub(crate) struct Joined {
    pub(crate) party: u8,
    pub(crate) credential: String,
    pub(crate) size: u8,
    pub(crate) expires_in: Duration,
}

/// A snapshot of a group for its roster.
pub(crate) struct Snapshot {
    pub(crate) size: u8,
    pub(crate) keys: Vec<Option<[u8; GROUP_KEY_BYTES]>>,
    pub(crate) ended: bool,
    pub(crate) expires_in: Duration,
}

/// What a fetch found.
pub(crate) enum Fetched {
    Message(u8, axum::body::Bytes),
    /// Nothing yet: wait on this, then look again.
    Wait(Arc<Notify>),
}

/// Counts for tests and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupCounts {
    /// Live groups.
    pub groups: usize,
    /// Envelopes in all mailboxes.
    pub messages: usize,
    /// Bytes in all mailboxes.
    pub bytes: usize,
}

/// The table of live groups.
pub(crate) struct Groups {
    limits: GroupLimits,
    table: Mutex<HashMap<String, Group>>,
}

fn random_bytes<const N: usize>() -> Res<[u8; N]> {
    let mut out = [0u8; N];
    let mut rng = psi_core::rng::os_rng()
        .map_err(|_| refuse(ErrorCode::Internal, "no randomness for a group id"))?;
    rand_core::Rng::fill_bytes(&mut rng, &mut out);
    Ok(out)
}

impl Groups {
    pub(crate) fn new(limits: GroupLimits) -> Groups {
        Groups {
            limits,
            table: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn limits(&self) -> &GroupLimits {
        &self.limits
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Group>> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn new_party(key: [u8; GROUP_KEY_BYTES]) -> Res<(Party, String)> {
        let credential = hex::encode(random_bytes::<32>()?);
        let party = Party {
            credential: Sha256::digest(credential.as_bytes()).into(),
            key,
            mailbox: VecDeque::new(),
            bytes: 0,
            left: false,
            notify: Arc::new(Notify::new()),
        };
        Ok((party, credential))
    }

    /// Creates a group of `size` parties for `creator`, its leader announcing `key`; the
    /// id is `id_for(16 random bytes)`.
    pub(crate) fn create(
        &self,
        creator: &str,
        size: u8,
        key: [u8; GROUP_KEY_BYTES],
        id_for: impl Fn(&[u8; 16]) -> String,
    ) -> Res<(String, Joined)> {
        if !(2..=16).contains(&size) {
            return Err(refuse(
                ErrorCode::BadRequest,
                format!("size {size}: a group has 2 to 16 parties"),
            ));
        }
        let id = id_for(&random_bytes::<16>()?);
        let (leader, credential) = Self::new_party(key)?;
        let mut t = self.lock();
        let now = Instant::now();
        t.retain(|_, g| g.expires > now);
        if t.len() >= self.limits.max_groups {
            return Err(refuse(
                ErrorCode::TooManyGroups,
                "this server holds its limit of groups",
            ));
        }
        if t.values().filter(|g| g.creator == creator).count() >= self.limits.max_groups_per_client
        {
            return Err(refuse(
                ErrorCode::TooManyGroups,
                format!(
                    "this caller holds its limit of {} live groups",
                    self.limits.max_groups_per_client
                ),
            ));
        }
        t.insert(
            id.clone(),
            Group {
                size,
                creator: creator.to_string(),
                expires: instant_after(self.limits.ttl),
                parties: vec![leader],
                ended: false,
            },
        );
        Ok((
            id,
            Joined {
                party: 0,
                credential,
                size,
                expires_in: self.limits.ttl,
            },
        ))
    }

    /// Runs `f` on the live group `id`; an expired group is removed and refused.
    fn with<T>(&self, id: &str, f: impl FnOnce(&mut Group) -> Res<T>) -> Res<T> {
        let mut t = self.lock();
        let Some(g) = t.get_mut(id) else {
            return Err(refuse(ErrorCode::UnknownGroup, "no such group"));
        };
        if g.expires <= Instant::now() {
            for p in &g.parties {
                p.notify.notify_waiters();
            }
            t.remove(id);
            return Err(refuse(
                ErrorCode::GroupExpired,
                "the group's lifetime passed",
            ));
        }
        f(g)
    }

    /// A member joins with `key`: the next index, while the group is not full or ended.
    pub(crate) fn join(&self, id: &str, key: [u8; GROUP_KEY_BYTES]) -> Res<Joined> {
        let (party, credential) = Self::new_party(key)?;
        self.with(id, |g| {
            if g.ended {
                return Err(refuse(ErrorCode::GroupClosed, "the group has ended"));
            }
            if g.parties.len() >= g.size as usize {
                return Err(refuse(
                    ErrorCode::GroupFull,
                    format!("the group has all its {} parties", g.size),
                ));
            }
            g.parties.push(party);
            let index = (g.parties.len() - 1) as u8;
            // The roster changed: wake the parties waiting on it.
            for p in &g.parties {
                p.notify.notify_waiters();
            }
            Ok(Joined {
                party: index,
                credential,
                size: g.size,
                expires_in: g.expires.saturating_duration_since(Instant::now()),
            })
        })
    }

    /// The roster, for a party of the group.
    pub(crate) fn snapshot(&self, id: &str, credential: &str) -> Res<Snapshot> {
        self.with(id, |g| {
            g.party(credential)?;
            Ok(Snapshot {
                size: g.size,
                keys: (0..g.size as usize)
                    .map(|i| g.parties.get(i).map(|p| p.key))
                    .collect(),
                ended: g.ended,
                expires_in: g.expires.saturating_duration_since(Instant::now()),
            })
        })
    }

    /// Checks that the caller may post `len` bytes to `to` before its budget is charged
    /// (so a refused post costs nothing): the sender's index.
    pub(crate) fn check_post(&self, id: &str, credential: &str, to: u8, len: usize) -> Res<u8> {
        self.with(id, |g| Self::admit(&self.limits, g, credential, to, len))
    }

    fn admit(limits: &GroupLimits, g: &Group, credential: &str, to: u8, len: usize) -> Res<u8> {
        let from = g.party(credential)?;
        if g.ended || g.parties[from as usize].left {
            return Err(refuse(ErrorCode::GroupClosed, "the group has ended"));
        }
        if to as usize >= g.size as usize || to == from {
            return Err(refuse(
                ErrorCode::BadRequest,
                format!("to={to}: not another party of this group of {}", g.size),
            ));
        }
        let Some(r) = g.parties.get(to as usize) else {
            return Err(refuse(
                ErrorCode::WrongPhase,
                format!("party {to} has not joined yet"),
            ));
        };
        if r.left {
            return Err(refuse(
                ErrorCode::GroupClosed,
                format!("party {to} has left the group"),
            ));
        }
        if len == 0 {
            return Err(refuse(ErrorCode::BadRequest, "an empty envelope"));
        }
        if len > limits.max_message_bytes {
            return Err(refuse(
                ErrorCode::BodyTooLarge,
                format!("an envelope is at most {} bytes", limits.max_message_bytes),
            ));
        }
        if r.mailbox.len() >= limits.mailbox_messages
            || r.bytes.saturating_add(len) > limits.mailbox_bytes
        {
            return Err(refuse(
                ErrorCode::MailboxFull,
                format!("party {to}'s mailbox is full"),
            ));
        }
        Ok(from)
    }

    /// Puts an envelope in `to`'s mailbox (checked again: the table may have moved since
    /// [`Groups::check_post`]).
    pub(crate) fn post(
        &self,
        id: &str,
        credential: &str,
        to: u8,
        body: axum::body::Bytes,
    ) -> Res<u8> {
        self.with(id, |g| {
            let from = Self::admit(&self.limits, g, credential, to, body.len())?;
            let r = &mut g.parties[to as usize];
            r.bytes += body.len();
            r.mailbox.push_back((from, body));
            r.notify.notify_waiters();
            Ok(from)
        })
    }

    /// The caller's oldest envelope, or a notifier to wait on. With an empty mailbox, an
    /// ended group is `group_closed` (nothing more will come), and so it is for the leader
    /// once a member has left (that member's messages will not come).
    pub(crate) fn fetch(&self, id: &str, credential: &str) -> Res<Fetched> {
        self.with(id, |g| {
            let me = g.party(credential)? as usize;
            let ended =
                g.ended || g.parties[me].left || (me == 0 && g.parties[1..].iter().any(|p| p.left));
            let p = &mut g.parties[me];
            if let Some((from, body)) = p.mailbox.pop_front() {
                p.bytes -= body.len();
                return Ok(Fetched::Message(from, body));
            }
            if ended {
                return Err(refuse(
                    ErrorCode::GroupClosed,
                    "the group has ended and the mailbox is empty",
                ));
            }
            Ok(Fetched::Wait(p.notify.clone()))
        })
    }

    /// A party leaves the group; its own mailbox is dropped and nothing more is posted to
    /// it. The leader leaving ends the group (no more posts or joins; the members may drain
    /// their mailboxes); a member leaving ends it for the leader, whose fetch then answers
    /// `group_closed` once its mailbox is empty. The group is removed once every joined
    /// party has left.
    pub(crate) fn end(&self, id: &str, credential: &str) -> Res<()> {
        let mut t = self.lock();
        let Some(g) = t.get_mut(id) else {
            return Err(refuse(ErrorCode::UnknownGroup, "no such group"));
        };
        let me = g.party(credential)? as usize;
        if me == 0 {
            g.ended = true;
        }
        let p = &mut g.parties[me];
        p.left = true;
        p.mailbox.clear();
        p.bytes = 0;
        for p in &g.parties {
            p.notify.notify_waiters();
        }
        if g.parties.iter().all(|p| p.left) {
            t.remove(id);
        }
        Ok(())
    }

    /// Removes expired groups; returns how many.
    pub(crate) fn sweep(&self) -> usize {
        let mut t = self.lock();
        let now = Instant::now();
        let before = t.len();
        t.retain(|_, g| {
            let live = g.expires > now;
            if !live {
                for p in &g.parties {
                    p.notify.notify_waiters();
                }
            }
            live
        });
        before - t.len()
    }

    pub(crate) fn counts(&self) -> GroupCounts {
        let t = self.lock();
        let mut c = GroupCounts {
            groups: t.len(),
            ..GroupCounts::default()
        };
        for g in t.values() {
            for p in &g.parties {
                c.messages += p.mailbox.len();
                c.bytes += p.bytes;
            }
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups(limits: GroupLimits) -> Groups {
        Groups::new(limits)
    }

    fn id(r: &[u8; 16]) -> String {
        format!("a-{}", hex::encode(r))
    }

    #[test]
    fn a_group_fills_relays_in_order_and_is_removed_when_all_end() {
        let g = groups(GroupLimits::default());
        let (gid, leader) = g.create("c", 3, [1; 64], id).unwrap();
        let m1 = g.join(&gid, [2; 64]).unwrap();
        let m2 = g.join(&gid, [3; 64]).unwrap();
        assert_eq!((leader.party, m1.party, m2.party), (0, 1, 2));
        assert_eq!(
            g.join(&gid, [4; 64]).err().unwrap().code,
            ErrorCode::GroupFull
        );
        let s = g.snapshot(&gid, &m2.credential).unwrap();
        assert_eq!(s.keys, vec![Some([1; 64]), Some([2; 64]), Some([3; 64])]);
        assert_eq!(
            g.snapshot(&gid, "nope").err().unwrap().code,
            ErrorCode::InvalidParty
        );
        for n in 0..3u8 {
            g.post(&gid, &m1.credential, 0, vec![n; 10].into()).unwrap();
        }
        assert_eq!(g.counts().bytes, 30);
        for n in 0..3u8 {
            match g.fetch(&gid, &leader.credential).unwrap() {
                Fetched::Message(from, b) => assert_eq!((from, b[0]), (1, n)),
                Fetched::Wait(_) => panic!("a message was waiting"),
            }
        }
        assert!(matches!(
            g.fetch(&gid, &leader.credential).unwrap(),
            Fetched::Wait(_)
        ));
        g.post(&gid, &leader.credential, 2, vec![9; 5].into())
            .unwrap();
        g.post(&gid, &leader.credential, 1, vec![9; 5].into())
            .unwrap();
        // Member 1 leaves: nothing more for it; the leader's empty mailbox now says closed.
        g.end(&gid, &m1.credential).unwrap();
        assert_eq!(
            g.post(&gid, &leader.credential, 1, vec![1].into())
                .unwrap_err()
                .code,
            ErrorCode::GroupClosed
        );
        assert_eq!(
            g.fetch(&gid, &leader.credential).err().unwrap().code,
            ErrorCode::GroupClosed
        );
        g.post(&gid, &m2.credential, 0, vec![1].into()).unwrap();
        g.end(&gid, &leader.credential).unwrap();
        assert_eq!(
            g.post(&gid, &m1.credential, 0, vec![1].into())
                .unwrap_err()
                .code,
            ErrorCode::GroupClosed
        );
        // Member 2 drains what was posted before the end, then hears the end.
        assert!(matches!(
            g.fetch(&gid, &m2.credential).unwrap(),
            Fetched::Message(0, _)
        ));
        assert_eq!(
            g.fetch(&gid, &m2.credential).err().unwrap().code,
            ErrorCode::GroupClosed
        );
        assert_eq!(g.counts().groups, 1);
        g.end(&gid, &m2.credential).unwrap();
        assert_eq!(g.counts(), GroupCounts::default());
    }

    #[test]
    fn mailboxes_are_bounded_in_count_and_bytes_and_posts_checked() {
        let limits = GroupLimits {
            mailbox_messages: 2,
            mailbox_bytes: 100,
            max_message_bytes: 60,
            ..GroupLimits::default()
        };
        let g = groups(limits);
        let (gid, leader) = g.create("c", 2, [1; 64], id).unwrap();
        let code = |r: Res<u8>| r.unwrap_err().code;
        assert_eq!(
            code(g.post(&gid, &leader.credential, 1, vec![1].into())),
            ErrorCode::WrongPhase,
            "the member has not joined"
        );
        let m = g.join(&gid, [2; 64]).unwrap();
        assert_eq!(
            code(g.post(&gid, &m.credential, 1, vec![1].into())),
            ErrorCode::BadRequest
        );
        assert_eq!(
            code(g.post(&gid, &m.credential, 5, vec![1].into())),
            ErrorCode::BadRequest
        );
        assert_eq!(
            code(g.post(&gid, &m.credential, 0, Vec::new().into())),
            ErrorCode::BadRequest
        );
        assert_eq!(
            code(g.post(&gid, &m.credential, 0, vec![0; 61].into())),
            ErrorCode::BodyTooLarge
        );
        g.post(&gid, &m.credential, 0, vec![0; 60].into()).unwrap();
        assert_eq!(
            code(g.post(&gid, &m.credential, 0, vec![0; 41].into())),
            ErrorCode::MailboxFull,
            "bytes"
        );
        g.post(&gid, &m.credential, 0, vec![0; 40].into()).unwrap();
        assert_eq!(
            code(g.post(&gid, &m.credential, 0, vec![0; 0].into())),
            ErrorCode::BadRequest
        );
        assert_eq!(
            code(g.post(&gid, &m.credential, 0, vec![0; 1].into())),
            ErrorCode::MailboxFull,
            "count"
        );
        assert_eq!(
            g.join("a-00", [0; 64]).err().unwrap().code,
            ErrorCode::UnknownGroup
        );
    }

    #[test]
    fn groups_expire_and_are_capped_per_caller() {
        let g = groups(GroupLimits {
            ttl: Duration::from_millis(30),
            max_groups_per_client: 1,
            ..GroupLimits::default()
        });
        let (gid, leader) = g.create("c", 2, [1; 64], id).unwrap();
        assert_eq!(
            g.create("c", 2, [1; 64], id).err().unwrap().code,
            ErrorCode::TooManyGroups
        );
        g.create("d", 2, [1; 64], id).unwrap();
        assert_eq!(
            g.create("c", 17, [1; 64], id).err().unwrap().code,
            ErrorCode::BadRequest
        );
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(
            g.snapshot(&gid, &leader.credential).err().unwrap().code,
            ErrorCode::GroupExpired
        );
        assert_eq!(g.sweep(), 1, "the other group");
        assert_eq!(g.counts(), GroupCounts::default());
    }
}
