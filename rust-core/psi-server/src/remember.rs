//! A bounded memory of answers keyed by a credential digest ([`Expiring`]): what the
//! server remembers about bearer tokens (crate::accounts, docs/adr/0046-remembered-credentials.md).
//!
//! Every operation is O(1) (amortized): entries expire in the order they were put (one
//! lifetime for all), so the oldest is always at the front of a queue; a full memory
//! evicts its oldest entry, never scans.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Digest-keyed answers, each for `ttl` after it was put, at most `cap` of them.
pub(crate) struct Expiring<V> {
    map: HashMap<[u8; 32], Slot<V>>,
    /// Keys in the order they were put, with the put's sequence number. A key put again
    /// has a stale entry here (its sequence number no longer matches the map's), skipped
    /// when it reaches the front and dropped by [`Expiring::compact`].
    order: VecDeque<([u8; 32], u64)>,
    next: u64,
    cap: usize,
    ttl: Duration,
}

struct Slot<V> {
    value: V,
    at: Instant,
    seq: u64,
}

impl<V: Clone> Expiring<V> {
    pub(crate) fn new(cap: usize, ttl: Duration) -> Self {
        Expiring {
            map: HashMap::new(),
            order: VecDeque::new(),
            next: 0,
            cap: cap.max(1),
            ttl,
        }
    }

    /// The value put for `key` and its age, if put less than `ttl` ago.
    pub(crate) fn get(&self, key: &[u8; 32], now: Instant) -> Option<(V, Duration)> {
        let s = self.map.get(key)?;
        let age = now.saturating_duration_since(s.at);
        (age < self.ttl).then(|| (s.value.clone(), age))
    }

    /// Remembers `value` for `key` from `now`: expired entries are dropped, then the
    /// oldest while the memory is over its size.
    pub(crate) fn put(&mut self, key: [u8; 32], value: V, now: Instant) {
        self.expire(now);
        let seq = self.next;
        self.next += 1;
        self.map.insert(
            key,
            Slot {
                value,
                at: now,
                seq,
            },
        );
        self.order.push_back((key, seq));
        while self.map.len() > self.cap {
            self.pop_front();
        }
        if self.order.len() > 2 * self.cap {
            self.compact();
        }
    }

    /// Forgets `key`.
    pub(crate) fn remove(&mut self, key: &[u8; 32]) {
        self.map.remove(key);
    }

    /// Entries held (expired ones not yet dropped included).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Drops the entries put `ttl` or longer before `now` (from the front: the oldest).
    fn expire(&mut self, now: Instant) {
        while let Some(&(key, seq)) = self.order.front() {
            match self.map.get(&key) {
                Some(s) if s.seq == seq => {
                    if now.saturating_duration_since(s.at) < self.ttl {
                        return;
                    }
                    self.map.remove(&key);
                }
                _ => {}
            }
            self.order.pop_front();
        }
    }

    /// Evicts the oldest live entry.
    fn pop_front(&mut self) {
        while let Some((key, seq)) = self.order.pop_front() {
            if self.map.get(&key).is_some_and(|s| s.seq == seq) {
                self.map.remove(&key);
                return;
            }
        }
    }

    /// Drops the queue's stale entries: it runs once per `cap` puts at most, so its cost
    /// is O(1) per put.
    fn compact(&mut self) {
        let map = &self.map;
        self.order
            .retain(|(key, seq)| map.get(key).is_some_and(|s| s.seq == *seq));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(i: u32) -> [u8; 32] {
        let mut k = [0u8; 32];
        k[..4].copy_from_slice(&i.to_le_bytes());
        k
    }

    #[test]
    fn the_oldest_goes_first_and_the_size_holds() {
        let t0 = Instant::now();
        let mut m = Expiring::new(3, Duration::from_secs(10));
        for i in 0..5 {
            m.put(k(i), i, t0);
        }
        assert_eq!(m.len(), 3);
        assert!(m.get(&k(0), t0).is_none() && m.get(&k(1), t0).is_none());
        assert_eq!(m.get(&k(4), t0).map(|v| v.0), Some(4));
        // Put again: newest again, so key 2 goes next.
        m.put(k(2), 20, t0);
        m.put(k(5), 5, t0);
        assert!(m.get(&k(3), t0).is_none());
        assert_eq!(m.get(&k(2), t0).map(|v| v.0), Some(20));
        // Many puts of one key keep the queue bounded.
        for _ in 0..1000 {
            m.put(k(9), 9, t0);
        }
        assert!(m.order.len() <= 6);
    }

    #[test]
    fn entries_expire() {
        let t0 = Instant::now();
        let mut m = Expiring::new(100, Duration::from_secs(1));
        m.put(k(1), (), t0);
        let later = t0 + Duration::from_secs(2);
        assert!(m.get(&k(1), later).is_none());
        m.put(k(2), (), later);
        assert_eq!(m.len(), 1, "the expired entry was dropped by the put");
    }
}
