//! Per-client rate limit on queried items: a token bucket per client key (see
//! [`crate::caller`]: an issued token's id, a static token's digest, or the client's IP
//! address or prefix) holding its hourly budget, refilled continuously at that rate.
//!
//! Budgets live in memory and are saved to the database (`budgets` table) by
//! [`RateLimiter::take_dirty`] every few seconds and at shutdown, and restored by
//! [`RateLimiter::restore`] at start: a restart does not refill them (ADR 0016). Limiters
//! that are never saved ([`RateLimiter::in_memory`]: the probe's bytes, the OT-PSI session
//! budget) keep no such mark, so their sweep forgets every bucket that is full again.

use crate::store::SavedBudget;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

pub(crate) struct RateLimiter {
    per_hour: u64,
    /// Saved to the database ([`RateLimiter::take_dirty`]): a charged bucket is kept until
    /// saved. `false`: nothing is ever saved, so nothing is ever marked.
    persisted: bool,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    buckets: HashMap<String, Bucket>,
    /// Clients with their own budget (issued tokens with `items_per_hour`).
    limits: HashMap<String, u64>,
}

struct Bucket {
    tokens: f64,
    last: Instant,
    /// Charged since the last save (always `false` in a limiter that is not persisted).
    dirty: bool,
}

/// Seconds for a budget to refill completely, whatever its size.
const REFILL_SECS: f64 = 3600.0;

/// Unix time in milliseconds.
pub(crate) fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Inner {
    fn per_hour(&self, default: u64, client: &str) -> u64 {
        self.limits.get(client).copied().unwrap_or(default)
    }
}

impl RateLimiter {
    /// A limiter whose budgets are saved ([`RateLimiter::take_dirty`]) and restored.
    pub(crate) fn new(per_hour: u64) -> Self {
        RateLimiter {
            per_hour,
            persisted: true,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// A limiter kept in memory only (a restart resets it): its sweep forgets every
    /// bucket that is full again, charged or not.
    pub(crate) fn in_memory(per_hour: u64) -> Self {
        RateLimiter {
            persisted: false,
            ..Self::new(per_hour)
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives `client` its own hourly budget (`None`: the server's default; 0: unlimited).
    /// Called on every request of an issued token, so a change takes effect at once.
    pub(crate) fn set_limit(&self, client: &str, per_hour: Option<u64>) {
        let mut g = self.lock();
        match per_hour {
            Some(p) if p != self.per_hour => {
                if g.limits.get(client) != Some(&p) {
                    g.limits.insert(client.to_string(), p);
                }
            }
            _ => {
                g.limits.remove(client);
            }
        }
    }

    /// Takes `items` from `client`'s budget, or returns the seconds until it could.
    pub(crate) fn charge(&self, client: &str, items: u64) -> Result<(), u64> {
        let mut g = self.lock();
        let per_hour = g.per_hour(self.per_hour, client);
        if per_hour == 0 {
            return Ok(());
        }
        let now = Instant::now();
        let cap = per_hour as f64;
        let rate = cap / REFILL_SECS;
        let b = g.buckets.entry(client.to_string()).or_insert(Bucket {
            tokens: cap,
            last: now,
            dirty: false,
        });
        b.tokens = (b.tokens + now.duration_since(b.last).as_secs_f64() * rate).min(cap);
        b.last = now;
        let need = items as f64;
        if need <= b.tokens {
            b.tokens -= need;
            b.dirty = self.persisted;
            Ok(())
        } else if need > cap {
            Err(REFILL_SECS as u64)
        } else {
            Err(((need - b.tokens) / rate).ceil().max(1.0) as u64)
        }
    }

    /// Gives `items` back to `client`'s budget (a charge for something then refused).
    pub(crate) fn refund(&self, client: &str, items: u64) {
        let mut g = self.lock();
        let cap = g.per_hour(self.per_hour, client) as f64;
        if let Some(b) = g.buckets.get_mut(client) {
            b.tokens = (b.tokens + items as f64).min(cap);
            b.dirty = self.persisted;
        }
    }

    /// Forgets clients whose bucket is full again (they start full when seen next), once
    /// saved if the limiter is persisted.
    pub(crate) fn sweep(&self) {
        self.sweep_at(Instant::now());
    }

    fn sweep_at(&self, now: Instant) {
        let mut g = self.lock();
        let Inner { buckets, limits } = &mut *g;
        buckets.retain(|client, b| {
            let cap = limits.get(client).copied().unwrap_or(self.per_hour) as f64;
            b.dirty
                || b.tokens
                    + now.saturating_duration_since(b.last).as_secs_f64() * cap / REFILL_SECS
                    < cap
        });
    }

    /// Clients with a bucket in memory.
    #[cfg(test)]
    pub(crate) fn tracked(&self) -> usize {
        self.lock().buckets.len()
    }

    /// The budgets charged since the last call, as rows to save (marked clean: give them
    /// back to [`RateLimiter::mark_dirty`] if saving fails).
    pub(crate) fn take_dirty(&self) -> Vec<SavedBudget> {
        let now = Instant::now();
        let wall = unix_ms(SystemTime::now());
        let mut g = self.lock();
        let Inner { buckets, limits } = &mut *g;
        buckets
            .iter_mut()
            .filter(|(_, b)| b.dirty)
            .map(|(client, b)| {
                b.dirty = false;
                let age = i64::try_from(now.duration_since(b.last).as_millis()).unwrap_or(0);
                SavedBudget {
                    client: client.clone(),
                    remaining: b.tokens,
                    per_hour: limits.get(client).copied().unwrap_or(self.per_hour),
                    updated_ms: wall.saturating_sub(age),
                }
            })
            .collect()
    }

    /// Marks `clients` as not saved yet.
    pub(crate) fn mark_dirty(&self, clients: impl IntoIterator<Item = String>) {
        let mut g = self.lock();
        for c in clients {
            if let Some(b) = g.buckets.get_mut(&c) {
                b.dirty = true;
            }
        }
    }

    /// Loads saved budgets (at start), refilled for the time since they were saved at the
    /// rate they had; budgets that are full again are skipped. A client already charged
    /// in this process keeps its in-memory bucket.
    pub(crate) fn restore(&self, rows: Vec<SavedBudget>) {
        let now = Instant::now();
        let wall = unix_ms(SystemTime::now());
        let mut g = self.lock();
        for row in rows {
            if row.per_hour == 0 || !row.remaining.is_finite() {
                continue;
            }
            let cap = row.per_hour as f64;
            // A clock that went backwards counts as no time passed.
            let elapsed = (wall.saturating_sub(row.updated_ms)).max(0) as f64 / 1000.0;
            let tokens = (row.remaining.max(0.0) + elapsed * cap / REFILL_SECS).min(cap);
            if tokens >= cap {
                continue;
            }
            g.buckets.entry(row.client).or_insert(Bucket {
                tokens,
                last: now,
                dirty: false,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_per_client() {
        let r = RateLimiter::new(3600);
        assert!(r.charge("a", 3000).is_ok());
        let wait = r.charge("a", 1000).unwrap_err();
        assert!((399..=401).contains(&wait), "{wait}");
        assert!(r.charge("b", 3600).is_ok());
        assert_eq!(r.charge("c", 3601), Err(3600));
        assert!(RateLimiter::new(0).charge("a", u64::MAX).is_ok());
    }

    #[test]
    fn own_limits_override_the_default() {
        let r = RateLimiter::new(100);
        r.set_limit("t", Some(10));
        assert!(r.charge("t", 10).is_ok());
        assert!(r.charge("t", 1).is_err());
        assert!(r.charge("u", 100).is_ok());
        r.set_limit("z", Some(0));
        assert!(r.charge("z", 1_000_000).is_ok());
        r.set_limit("z", None);
        assert!(r.charge("z", 101).is_err());
    }

    /// Many callers charged once each: once their buckets are full again the sweep
    /// forgets them all. A persisted limiter keeps the ones not saved yet.
    #[test]
    fn sweeps_forget_refilled_buckets() {
        let later = Instant::now() + std::time::Duration::from_secs(3601);
        let probe = RateLimiter::in_memory(1000);
        for i in 0..500 {
            probe.charge(&format!("c{i}"), 10).unwrap();
        }
        probe.refund("c0", 5);
        probe.sweep();
        assert_eq!(probe.tracked(), 500, "partly spent buckets stay");
        assert!(probe.take_dirty().is_empty(), "nothing to save");
        probe.sweep_at(later);
        assert_eq!(probe.tracked(), 0, "every refilled bucket is forgotten");

        let items = RateLimiter::new(1000);
        for i in 0..500 {
            items.charge(&format!("c{i}"), 10).unwrap();
        }
        items.sweep_at(later);
        assert_eq!(
            items.tracked(),
            500,
            "unsaved charges are kept for the save"
        );
        assert_eq!(items.take_dirty().len(), 500);
        items.sweep_at(later);
        assert_eq!(items.tracked(), 0);
    }

    #[test]
    fn saved_budgets_restore_and_refill() {
        let r = RateLimiter::new(3600);
        r.charge("a", 3000).unwrap();
        let rows = r.take_dirty();
        assert_eq!(rows.len(), 1);
        assert!(r.take_dirty().is_empty(), "saved rows are clean");
        let restored = RateLimiter::new(3600);
        restored.restore(rows.clone());
        assert!(
            restored.charge("a", 1000).is_err(),
            "a restart keeps the spent budget"
        );
        // Saved 10 minutes ago at 3600/h: 600 items came back.
        let mut old = rows[0].clone();
        old.updated_ms -= 600_000;
        let refilled = RateLimiter::new(3600);
        refilled.restore(vec![old.clone()]);
        assert!(refilled.charge("a", 1150).is_ok());
        assert!(refilled.charge("a", 100).is_err());
        // Saved over an hour ago: full again, nothing restored.
        old.updated_ms -= 3_600_000;
        let full = RateLimiter::new(3600);
        full.restore(vec![old]);
        assert!(full.lock().buckets.is_empty());
    }
}
