//! The session table: entries by id, with the live sessions counted in all, per caller and
//! per address block as they come and go, so that admitting a session never scans the
//! table and evicting one at the total cap looks only at the sessions of the blocks it
//! considers, biggest first (issue 35 item 6; `docs/adr/0034-session-table-limits.md`).
//!
//! "Live" is what every cap counts: an entry neither expired nor ended. An entry stops
//! being live in three ways, each of which uncounts it exactly once: it is ended
//! ([`Table::end`], also by eviction), removed ([`Table::remove`]), or its lifetime runs
//! out. The last needs no timer: every session gets the same lifetime, so entries expire
//! in the order they were inserted, and [`Table::expire`] (called first by every
//! operation that reads a count) pops the due ones off the front of a queue. Each
//! operation costs O(1) amortized, O(log blocks) for the order of blocks by size.

use super::{Session, TOMBSTONE};
use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub(super) struct Entry {
    pub expires: Instant,
    /// Copy of the session's caller key, for the per-caller cap.
    pub client: String,
    /// The caller's address block (`ip:203.0.113.0/24`; a token caller: its key), for
    /// the per-block cap and eviction at the total cap.
    pub block: String,
    /// `None` once expired or ended (state freed, id kept as a tombstone).
    pub session: Option<Arc<Mutex<Session>>>,
    /// Ended by the server (complete), not expired.
    pub ended: bool,
    /// Whether the entry is counted as live in [`Counts`] (true from its insertion until
    /// it ends, is removed or expires).
    counted: bool,
    /// Which insertion this entry is, so a queued expiry of an id that was removed and
    /// inserted again does not end the new entry.
    seq: u64,
}

/// The live entries, counted.
#[derive(Default)]
struct Counts {
    live: usize,
    per_client: HashMap<String, usize>,
    /// Each block's live sessions.
    blocks: HashMap<String, HashSet<String>>,
    /// Blocks with live sessions, the most sessions first (equal sizes by name).
    by_size: BTreeSet<(Reverse<usize>, String)>,
}

impl Counts {
    fn add(&mut self, id: &str, e: &Entry) {
        self.live += 1;
        *self.per_client.entry(e.client.clone()).or_default() += 1;
        let ids = self.blocks.entry(e.block.clone()).or_default();
        let before = ids.len();
        ids.insert(id.to_owned());
        if before > 0 {
            self.by_size.remove(&(Reverse(before), e.block.clone()));
        }
        self.by_size.insert((Reverse(ids.len()), e.block.clone()));
    }

    fn sub(&mut self, id: &str, e: &Entry) {
        self.live = self.live.saturating_sub(1);
        if let Some(c) = self.per_client.get_mut(&e.client) {
            *c = c.saturating_sub(1);
            if *c == 0 {
                self.per_client.remove(&e.client);
            }
        }
        if let Some(ids) = self.blocks.get_mut(&e.block) {
            let before = ids.len();
            ids.remove(id);
            self.by_size.remove(&(Reverse(before), e.block.clone()));
            if ids.is_empty() {
                self.blocks.remove(&e.block);
            } else {
                self.by_size.insert((Reverse(ids.len()), e.block.clone()));
            }
        }
    }
}

/// Uncounts `e` if it is counted; true if it was.
fn uncount(counts: &mut Counts, id: &str, e: &mut Entry) -> bool {
    if !e.counted {
        return false;
    }
    e.counted = false;
    counts.sub(id, e);
    true
}

#[derive(Default)]
pub(super) struct Table {
    entries: HashMap<String, Entry>,
    /// Counted entries by expiry, earliest first (insertion order: one lifetime for all),
    /// with the insertion they belong to.
    expiry: VecDeque<(Instant, u64, String)>,
    seq: u64,
    counts: Counts,
    /// Sessions eviction has looked at, in all (a figure for tests and measurements).
    examined: u64,
}

impl Table {
    /// Uncounts and frees the state of the entries whose lifetime ran out by `now`.
    pub fn expire(&mut self, now: Instant) {
        while let Some((at, seq, _)) = self.expiry.front() {
            if *at > now {
                break;
            }
            let seq = *seq;
            let (_, _, id) = self.expiry.pop_front().expect("front exists");
            if let Some(e) = self.entries.get_mut(&id)
                && e.seq == seq
                && uncount(&mut self.counts, &id, e)
            {
                e.session = None;
            }
        }
    }

    /// Live sessions (after [`Table::expire`]).
    pub fn live(&self) -> usize {
        self.counts.live
    }

    /// Live sessions of caller `client`.
    pub fn of_client(&self, client: &str) -> usize {
        self.counts.per_client.get(client).copied().unwrap_or(0)
    }

    /// Live sessions of address block `block`.
    pub fn of_block(&self, block: &str) -> usize {
        self.counts.blocks.get(block).map_or(0, HashSet::len)
    }

    /// Sessions eviction has looked at since the table was made.
    #[cfg(test)]
    pub fn examined(&self) -> u64 {
        self.examined
    }

    /// Inserts a live session expiring at `expires`, which must not be earlier than that of
    /// any session inserted before (every session has the same lifetime).
    pub fn insert(
        &mut self,
        id: String,
        client: String,
        block: String,
        expires: Instant,
        session: Session,
    ) {
        // Ids are 128 random bits; should one come again, the old entry goes first.
        self.remove(&id);
        self.seq += 1;
        let e = Entry {
            expires,
            client,
            block,
            session: Some(Arc::new(Mutex::new(session))),
            ended: false,
            counted: true,
            seq: self.seq,
        };
        debug_assert!(self.expiry.back().is_none_or(|(at, ..)| *at <= expires));
        self.counts.add(&id, &e);
        self.expiry.push_back((expires, self.seq, id.clone()));
        self.entries.insert(id, e);
    }

    pub fn get(&self, id: &str) -> Option<&Entry> {
        self.entries.get(id)
    }

    /// Ends a session: its state goes now, it stops counting, and the id stays as a
    /// tombstone (until the sweep forgets it).
    pub fn end(&mut self, id: &str, now: Instant) {
        if let Some(e) = self.entries.get_mut(id) {
            uncount(&mut self.counts, id, e);
            e.session = None;
            e.ended = true;
            e.expires = now;
        }
    }

    pub fn remove(&mut self, id: &str) -> bool {
        match self.entries.remove(id) {
            Some(mut e) => {
                uncount(&mut self.counts, id, &mut e);
                true
            }
            None => false,
        }
    }

    /// Forgets the tombstones older than [`TOMBSTONE`] (after [`Table::expire`]); the
    /// number forgotten. A scan of the table: the sweep's, every few seconds, not per
    /// request.
    pub fn forget_tombstones(&mut self, now: Instant) -> usize {
        let before = self.entries.len();
        let counts = &mut self.counts;
        self.entries.retain(|id, e| {
            let keep = e.expires + TOMBSTONE > now;
            if !keep {
                uncount(counts, id, e);
            }
            keep
        });
        before - self.entries.len()
    }

    /// The sessions whose state is held (for the sweep to look at outside the lock).
    pub fn held(&self) -> Vec<Arc<Mutex<Session>>> {
        self.entries
            .values()
            .filter_map(|e| e.session.clone())
            .collect()
    }

    /// At the total cap: ends the idle session with the oldest last step in the block that
    /// holds the most live sessions (the next biggest block if none of its sessions is
    /// idle). Idle here: no request under way and no successful step (or creation) for
    /// `grace`, so a session in the middle of its run is not pushed out by a newcomer.
    /// False if no live session is idle. Looks at the sessions of the blocks it passes,
    /// biggest first: with an idle session in the biggest block, at most the block cap.
    pub fn evict(&mut self, now: Instant, grace: Duration) -> bool {
        let mut victim = None;
        for (_, block) in &self.counts.by_size {
            let mut oldest: Option<(Instant, &String)> = None;
            for id in self.counts.blocks.get(block).into_iter().flatten() {
                self.examined += 1;
                let Some(Entry {
                    session: Some(s), ..
                }) = self.entries.get(id)
                else {
                    continue;
                };
                let Ok(g) = s.try_lock() else { continue };
                let quiet = g.quiet_since();
                if g.idle()
                    && now.saturating_duration_since(quiet) >= grace
                    && oldest.is_none_or(|(t, oid)| quiet < t || (quiet == t && id < oid))
                {
                    oldest = Some((quiet, id));
                }
            }
            if let Some((_, id)) = oldest {
                victim = Some(id.clone());
                break;
            }
        }
        let Some(id) = victim else {
            return false;
        };
        let Some(s) = self.entries.get(&id).and_then(|e| e.session.clone()) else {
            return false;
        };
        // The session's state (and OT slot) goes now; a request that already holds the
        // session finds it done. Taken meanwhile: left as it is, and nobody is evicted.
        let Ok(mut g) = s.try_lock() else {
            return false;
        };
        g.phase = super::SessionPhase::Done;
        drop(g);
        self.end(&id, now);
        tracing::info!(session = %id, "session evicted at the session cap");
        true
    }

    /// The counts rebuilt from the entries by a scan, for tests to hold the incremental
    /// ones against: (live, per caller, per block).
    #[cfg(test)]
    pub fn recount(&self, now: Instant) -> (usize, HashMap<String, usize>, HashMap<String, usize>) {
        let (mut live, mut clients, mut blocks) = (0, HashMap::new(), HashMap::new());
        for e in self
            .entries
            .values()
            .filter(|e| e.expires > now && !e.ended)
        {
            live += 1;
            *clients.entry(e.client.clone()).or_default() += 1;
            *blocks.entry(e.block.clone()).or_default() += 1;
        }
        (live, clients, blocks)
    }

    /// The incremental counts, in [`Table::recount`]'s form.
    #[cfg(test)]
    pub fn counted(&self) -> (usize, HashMap<String, usize>, HashMap<String, usize>) {
        let blocks = self
            .counts
            .blocks
            .iter()
            .map(|(b, ids)| (b.clone(), ids.len()))
            .collect();
        assert_eq!(
            self.counts.by_size.len(),
            self.counts.blocks.len(),
            "the order by size holds every block once"
        );
        (self.counts.live, self.counts.per_client.clone(), blocks)
    }
}
