//! The client's synced set (docs/protocol/sync.md §4): a snapshot's tags with the deltas
//! applied since, kept in their coded form (a few bits per entry, as downloaded), and
//! the lookup that turns a run's OPRF outputs into candidates.

use super::messages::{Delta, Snapshot, TagList};
use super::tag::sync_tag;
use crate::error::{DecodeError, Error, Result};
use crate::golomb;
use crate::oprf::OUTPUT_LEN;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// The first bytes of a cache file.
const CACHE_MAGIC: [u8; 4] = *b"PSYC";
/// The cache layout this code writes and reads.
const CACHE_FORMAT: u8 = 0x01;
/// Bytes of the cache's closing digest.
const CACHE_DIGEST_LEN: usize = 32;

/// Most deltas held while waiting for an earlier one (arrivals out of order).
pub const MAX_PENDING_DELTAS: usize = 64;

/// What [`SyncedSet::offer`] did with a delta.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Offered {
    /// Applied, with every held delta it made applicable: the set is now at `version`.
    Applied {
        /// The set's version after applying.
        version: u64,
    },
    /// Held until the deltas before it arrive (`from_version` is ahead of the set).
    Held,
    /// Ignored: the set already holds everything in it (`to_version` is not ahead).
    Stale,
}

/// A registry's short tags at one version of a sync epoch, as the client holds them.
#[derive(Clone)]
pub struct SyncedSet {
    snapshot: Snapshot,
    pending: BTreeMap<u64, Delta>,
}

impl std::fmt::Debug for SyncedSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncedSet")
            .field("epoch", &self.snapshot.epoch)
            .field("version", &self.snapshot.version)
            .field("width", &self.snapshot.width)
            .field("tags", &self.snapshot.tags.len())
            .field("pending", &self.pending.len())
            .finish()
    }
}

fn out_of_step(what: &'static str) -> Error {
    Error::Decode(DecodeError::MalformedSet(what))
}

impl SyncedSet {
    /// The set a snapshot gives; its coded tags are checked through once.
    pub fn from_snapshot(snapshot: Snapshot) -> Result<SyncedSet> {
        let mut tags = snapshot.tags.tags(snapshot.width);
        while tags.next_tag()?.is_some() {}
        Ok(SyncedSet {
            snapshot,
            pending: BTreeMap::new(),
        })
    }

    /// The set stored by [`SyncedSet::to_cache`]. Anything else (another format, a
    /// truncated or altered file, a cache of an older design) is an error, never a
    /// misread set: discard it and sync again.
    pub fn from_cache(bytes: &[u8]) -> Result<SyncedSet> {
        let bad = |what| Error::Decode(DecodeError::InvalidParameter { what });
        if bytes.len() < CACHE_MAGIC.len() + 1 + CACHE_DIGEST_LEN {
            return Err(bad("sync cache too short"));
        }
        if bytes[..CACHE_MAGIC.len()] != CACHE_MAGIC {
            return Err(bad("not a sync cache"));
        }
        if bytes[CACHE_MAGIC.len()] != CACHE_FORMAT {
            return Err(bad("sync cache of another format"));
        }
        let (body, digest) = bytes.split_at(bytes.len() - CACHE_DIGEST_LEN);
        let want = Sha256::digest(body);
        // The digest guards against a damaged file, not an attacker (the cache is public
        // data): a plain comparison.
        if want.as_slice() != digest {
            return Err(bad("sync cache altered or truncated"));
        }
        Self::from_snapshot(Snapshot::from_bytes(&body[CACHE_MAGIC.len() + 1..])?)
    }

    /// The bytes to keep between runs: `"PSYC" || format 0x01 || the snapshot message at
    /// the set's version || SHA-256 of everything before`. Deltas still held are not
    /// kept (they are fetched again).
    pub fn to_cache(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(CACHE_MAGIC.len() + 1 + CACHE_DIGEST_LEN + 64);
        out.extend_from_slice(&CACHE_MAGIC);
        out.push(CACHE_FORMAT);
        out.extend_from_slice(&self.snapshot.to_bytes());
        let digest = Sha256::digest(&out);
        out.extend_from_slice(&digest);
        out
    }

    /// The snapshot message of the set at its version (what a snapshot of that version
    /// would be: the coding is a function of the tags alone).
    pub fn to_snapshot_bytes(&self) -> Vec<u8> {
        self.snapshot.to_bytes()
    }

    /// Key epoch of the tags.
    pub fn epoch(&self) -> u32 {
        self.snapshot.epoch
    }

    /// The registry version the set is at (every delta up to it applied).
    pub fn version(&self) -> u64 {
        self.snapshot.version
    }

    /// Tag width.
    pub fn width(&self) -> u8 {
        self.snapshot.width
    }

    /// Tags held (with repeats).
    pub fn len(&self) -> u64 {
        u64::from(self.snapshot.tags.len())
    }

    /// True if the set holds no tag.
    pub fn is_empty(&self) -> bool {
        self.snapshot.tags.is_empty()
    }

    /// Bytes of the coded tags held (what a phone stores).
    pub fn coded_bytes(&self) -> usize {
        self.snapshot.tags.data_len()
    }

    /// Deltas held until earlier ones arrive.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Takes a delta in whatever order deltas arrive. One that starts at the set's version
    /// is applied, then every held delta that now fits; one from later is held (at most
    /// [`MAX_PENDING_DELTAS`]); one the set already covers is ignored. Deltas of another
    /// epoch or width, one that starts before the set's version and ends after it (it
    /// cannot be split), and one that removes a tag the set does not hold are errors:
    /// the set is left as it was (when a *held* delta fails as it comes due, the set
    /// keeps the version it reached and the bad delta is dropped).
    pub fn offer(&mut self, delta: Delta) -> Result<Offered> {
        if delta.epoch != self.epoch() {
            return Err(Error::EpochMismatch {
                expected: self.epoch(),
                found: delta.epoch,
            });
        }
        if delta.width != self.width() {
            return Err(DecodeError::InvalidParameter {
                what: "sync delta width differs from the synced set's",
            }
            .into());
        }
        if delta.to_version <= self.version() {
            return Ok(Offered::Stale);
        }
        if delta.from_version < self.version() {
            return Err(out_of_step(
                "sync delta starts before the synced version and ends after it",
            ));
        }
        if delta.from_version > self.version() {
            if !self.pending.contains_key(&delta.from_version)
                && self.pending.len() >= MAX_PENDING_DELTAS
            {
                return Err(Error::InputTooLarge {
                    what: "sync deltas held out of order",
                    value: self.pending.len() as u64 + 1,
                    limit: MAX_PENDING_DELTAS as u64,
                });
            }
            // Of two held deltas from one version, keep the one that reaches further.
            let keep = self
                .pending
                .get(&delta.from_version)
                .is_none_or(|held| held.to_version < delta.to_version);
            if keep {
                self.pending.insert(delta.from_version, delta);
            }
            return Ok(Offered::Held);
        }
        self.apply(&delta)?;
        // Held deltas that now fit, and those the set has passed.
        loop {
            let v = self.version();
            self.pending.retain(|_, d| d.to_version > v);
            match self.pending.remove(&v) {
                // On an error the set stays at the version it reached; the bad delta
                // is gone.
                Some(next) => self.apply(&next)?,
                None => break,
            }
        }
        // A held delta that starts before the new version and ends after it can never
        // be applied.
        let v = self.version();
        self.pending.retain(|&from, _| from > v);
        Ok(Offered::Applied {
            version: self.version(),
        })
    }

    /// Merges the delta into the coded tags: two streaming passes over the set and the
    /// delta (the first picks the Rice parameter, the second codes), so memory is the
    /// coded result only, never the tags as integers. All or nothing.
    fn apply(&mut self, delta: &Delta) -> Result<()> {
        let w = self.width();
        let count = (self.len() + u64::from(delta.added.len()))
            .checked_sub(u64::from(delta.removed.len()))
            .ok_or_else(|| out_of_step("sync delta removes more tags than the set holds"))?;
        if count > u64::from(super::messages::MAX_SYNC_TAGS) {
            return Err(Error::InputTooLarge {
                what: "synced tags",
                value: count,
                limit: u64::from(super::messages::MAX_SYNC_TAGS),
            });
        }
        let mut sizes = golomb::SizeCounter::new(golomb::rice_candidates(count as usize, w));
        let counted = self.merge(delta, |t| sizes.push(u128::from(t)))?;
        // Every removal found its tag, so the merge kept exactly `count` tags.
        debug_assert_eq!(counted, count);
        let (k, bits) = sizes.best();
        let mut enc = golomb::Encoder::new(w, k, bits.div_ceil(8) as usize);
        self.merge(delta, |t| enc.push(u128::from(t)))?;
        self.snapshot.tags = TagList::from_parts(count as u32, k, enc.finish());
        self.snapshot.version = delta.to_version;
        Ok(())
    }

    /// Streams the set's tags with the delta applied, ascending, into `sink`; returns
    /// how many. A removed tag takes one copy from the set or, failing that, from the
    /// same delta's additions (two entries with one tag, one added and one removed); one
    /// found in neither is an error.
    fn merge(&self, delta: &Delta, mut sink: impl FnMut(u64)) -> Result<u64> {
        let w = self.width();
        let mut kept = 0u64;
        let mut have = self.snapshot.tags.tags(w);
        let mut add = delta.added.tags(w);
        let mut del = delta.removed.tags(w);
        let (mut h, mut a, mut r) = (have.next_tag()?, add.next_tag()?, del.next_tag()?);
        // The smallest of the three heads, until all three are done.
        while let Some(m) = [h, a, r].into_iter().flatten().min() {
            if r == Some(m) {
                if h == Some(m) {
                    h = have.next_tag()?;
                } else if a == Some(m) {
                    a = add.next_tag()?;
                } else {
                    return Err(out_of_step(
                        "sync delta removes a tag the synced set does not hold",
                    ));
                }
                r = del.next_tag()?;
            } else if h == Some(m) {
                sink(m);
                kept += 1;
                h = have.next_tag()?;
            } else {
                sink(m);
                kept += 1;
                a = add.next_tag()?;
            }
        }
        Ok(kept)
    }

    /// The items whose OPRF outputs' tags are in the set (the candidates), as indices
    /// into `outputs`, ascending. One pass over the coded set.
    pub fn candidates(&self, outputs: &[[u8; OUTPUT_LEN]]) -> Result<Vec<usize>> {
        let w = self.width();
        let mut mine: Vec<(u64, usize)> = outputs
            .iter()
            .enumerate()
            .map(|(i, o)| (sync_tag(o, w), i))
            .collect();
        mine.sort_unstable();
        let mut hits = Vec::with_capacity(mine.len());
        let mut tags = self.snapshot.tags.tags(w);
        let mut next = tags.next_tag()?;
        for &(t, i) in &mine {
            while let Some(s) = next {
                if s >= t {
                    break;
                }
                next = tags.next_tag()?;
            }
            if next == Some(t) {
                hits.push(i);
            }
        }
        // The rest of the stream is checked too.
        while next.is_some() {
            next = tags.next_tag()?;
        }
        hits.sort_unstable();
        Ok(hits)
    }
}
