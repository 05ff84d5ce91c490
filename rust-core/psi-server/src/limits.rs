//! Per-client rate limit on queried items: a token bucket per client key (bearer token
//! or peer IP) holding `items_per_hour`, refilled continuously at that rate.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

pub(crate) struct RateLimiter {
    per_hour: u64,
    buckets: Mutex<HashMap<String, Bucket>>,
}

struct Bucket {
    tokens: f64,
    last: Instant,
}

impl RateLimiter {
    pub(crate) fn new(per_hour: u64) -> Self {
        RateLimiter {
            per_hour,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    fn rate(&self) -> f64 {
        self.per_hour as f64 / 3600.0
    }

    /// Takes `items` from `client`'s budget, or returns the seconds until it could.
    pub(crate) fn charge(&self, client: &str, items: u64) -> Result<(), u64> {
        if self.per_hour == 0 {
            return Ok(());
        }
        let now = Instant::now();
        let mut map = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let cap = self.per_hour as f64;
        let b = map.entry(client.to_string()).or_insert(Bucket {
            tokens: cap,
            last: now,
        });
        b.tokens = (b.tokens + now.duration_since(b.last).as_secs_f64() * self.rate()).min(cap);
        b.last = now;
        let need = items as f64;
        if need <= b.tokens {
            b.tokens -= need;
            Ok(())
        } else if need > cap {
            Err(3600)
        } else {
            Err(((need - b.tokens) / self.rate()).ceil().max(1.0) as u64)
        }
    }

    /// Forgets clients whose bucket is full again.
    pub(crate) fn sweep(&self) {
        let now = Instant::now();
        let cap = self.per_hour as f64;
        let rate = self.rate();
        self.buckets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, b| b.tokens + now.duration_since(b.last).as_secs_f64() * rate < cap);
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
}
