//! Per-client rate limit on queried items: a token bucket per client key (see
//! [`crate::caller`]: an issued token's id, a static token's digest, or the client's IP
//! address or prefix) holding its hourly budget, refilled continuously at that rate.
//!
//! Budgets live in memory and are saved to the database (`budgets` table) by
//! [`RateLimiter::take_dirty`] every few seconds and at shutdown, and restored by
//! [`RateLimiter::restore`] at start: a restart does not refill them (ADR 0016). Limiters
//! that are never saved ([`RateLimiter::in_memory`]: the probe's bytes, the OT-PSI session
//! budget) keep no such mark, so their sweep forgets every bucket that is full again.
//!
//! Several instances on one PostgreSQL database charge the budgets in the store instead
//! ([`Budgets::Shared`], a [`BudgetStore`] of the store contract, storage/budgets.rs): the
//! same buckets and level sizes, charged atomically in the database, so a caller has one
//! budget whichever instance it reaches. The health-request limit stays in memory (it
//! protects one instance).

use crate::storage::SavedBudget;
use crate::storage::{Book, BudgetError, BudgetStore, LevelCap};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// What one of a payer's budgets stands for: it decides the message of a refusal and
/// whether the budget may go untracked when a limiter holds [`RateLimiter`]'s most buckets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LevelKind {
    /// A token's own budget (static or issued). Always tracked: tokens are few.
    Token,
    /// An address caller's own budget (its address, or its IPv6 prefix).
    Address,
    /// An address block many callers share (an IPv4 /24, an IPv6 /48 or /32).
    Network,
    /// Every caller without a token together: the server-wide ceiling. One bucket,
    /// always tracked.
    Ceiling,
    /// An address caller's floor: the small part of its own budget that a drained
    /// network or ceiling does not refuse ([`Payer::floor`]).
    Floor,
}

impl LevelKind {
    /// Address and network budgets are as many as callers: above the bucket cap a new one
    /// is not tracked (the ceiling still bounds them all).
    fn optional(self) -> bool {
        matches!(
            self,
            LevelKind::Address | LevelKind::Network | LevelKind::Floor
        )
    }
}

/// One budget of a payer: a bucket key and its size in the limiter's per-caller budgets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Level {
    key: String,
    /// The bucket holds `scale` per-caller budgets (0: this level is not limited)...
    scale: u64,
    /// ...divided by this (1 but for a floor).
    divisor: u64,
    kind: LevelKind,
}

impl Level {
    /// A level of `scale` per-caller budgets under `key`.
    pub(crate) fn new(key: String, scale: u64, kind: LevelKind) -> Level {
        Level {
            key,
            scale,
            divisor: 1,
            kind,
        }
    }

    /// A level of one per-caller budget divided by `divisor` (at least 1) under `key`.
    pub(crate) fn fraction(key: String, divisor: u64, kind: LevelKind) -> Level {
        Level {
            divisor: divisor.max(1),
            ..Level::new(key, 1, kind)
        }
    }

    /// This level's own key.
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// This level's kind.
    pub(crate) fn kind(&self) -> LevelKind {
        self.kind
    }

    /// This level's size in per-caller budgets.
    pub(crate) fn scale(&self) -> u64 {
        self.scale
    }
}

/// The budgets one caller's charges draw from, narrowest first: a token caller has its
/// own only; a caller without a token has its address's, its networks' and the
/// server-wide ceiling ([`crate::caller::address_payer`], ADR 0038). A charge takes from
/// every level or from none ([`RateLimiter::charge_all`]).
///
/// A caller without a token may also have a floor (ADR 0044): the levels a charge refused
/// by a drained network or the ceiling takes from instead ([`Budgets::charge_all`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Payer {
    levels: Vec<Level>,
    floor: Vec<Level>,
}

impl Payer {
    /// A payer with the given levels, narrowest first (the first is the caller's own).
    pub(crate) fn new(levels: Vec<Level>) -> Payer {
        Payer {
            levels,
            floor: Vec::new(),
        }
    }

    /// This payer with a floor: `floor` are the levels a charge refused by a shared level
    /// (network or ceiling) is taken from instead, all or none: the caller's own, its
    /// floor (a fraction of its own budget) and each shared level's reserve.
    pub(crate) fn with_floor(mut self, floor: Vec<Level>) -> Payer {
        self.floor = floor;
        self
    }

    /// The levels of the floor (empty: none), as a payer of its own.
    fn floor(&self) -> Option<Payer> {
        (!self.floor.is_empty()).then(|| Payer::new(self.floor.clone()))
    }

    /// A token caller: its own budget only.
    pub(crate) fn token(key: &str) -> Payer {
        Payer::new(vec![Level::new(key.to_string(), 1, LevelKind::Token)])
    }

    /// The caller's own key (the first level's).
    #[cfg(test)]
    pub(crate) fn key(&self) -> &str {
        self.levels.first().map_or("", |l| l.key.as_str())
    }

    /// Every level's key, narrowest first.
    #[cfg(test)]
    pub(crate) fn keys(&self) -> Vec<&str> {
        self.levels.iter().map(|l| l.key.as_str()).collect()
    }
}

/// A charge that went through: the buckets it took from, for [`RateLimiter::refund_all`].
#[derive(Debug, Default)]
#[must_use = "a receipt is what a refund gives back to"]
pub(crate) struct Receipt {
    keys: Vec<String>,
    amount: u64,
}

/// A charge that did not go through: no level was charged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Refused {
    /// Seconds until every level could pay (at most an hour; an hour when a level can
    /// never hold the charge).
    pub(crate) wait: u64,
    /// The level that needs the longest wait.
    pub(crate) kind: LevelKind,
}

/// One of the server's hourly budgets (items, probe bytes, download bytes, OT sessions):
/// in this process's memory ([`RateLimiter`], one instance, SQLite), or in the store that
/// every instance charges ([`BudgetStore`]: PostgreSQL's shared table, issue 22), so that a
/// caller spreading requests over N instances still has one budget. Sizes (the default,
/// a token's own, a level's scale) are decided by the same [`RateLimiter`] either way.
pub(crate) enum Budgets {
    Local(RateLimiter),
    Shared {
        /// Sizes only (`set_limit`, `per_hour`): never charged.
        sizes: RateLimiter,
        book: Book,
        store: Arc<dyn BudgetStore>,
    },
}

/// A charge neither granted nor refused by the budgets.
#[derive(Debug)]
pub(crate) enum ChargeError {
    /// A level cannot pay: nothing was charged.
    Refused(Refused),
    /// The shared table could not be asked: nothing was charged, and the request is
    /// refused (fail closed: never a free pass), retryably.
    Store(BudgetError),
}

impl Budgets {
    /// Budgets in this process's memory.
    pub(crate) fn local(limiter: RateLimiter) -> Budgets {
        Budgets::Local(limiter)
    }

    /// Budgets of `book` in the shared table, sized by `sizes`.
    pub(crate) fn shared(sizes: RateLimiter, book: Book, store: Arc<dyn BudgetStore>) -> Budgets {
        Budgets::Shared { sizes, book, store }
    }

    /// The limiter deciding sizes (and, when local, holding the buckets): what the
    /// periodic sweep and budget saves work on (nothing to do for shared budgets: their
    /// limiter is never charged).
    pub(crate) fn limiter(&self) -> &RateLimiter {
        match self {
            Budgets::Local(l) => l,
            Budgets::Shared { sizes, .. } => sizes,
        }
    }

    /// The shared table, if the budgets are there.
    pub(crate) fn shared_store(&self) -> Option<&dyn BudgetStore> {
        match self {
            Budgets::Local(_) => None,
            Budgets::Shared { store, .. } => Some(store.as_ref()),
        }
    }

    /// The per-caller budget (before a token's own).
    pub(crate) fn per_hour(&self) -> u64 {
        self.limiter().per_hour()
    }

    /// Gives `client` its own hourly budget ([`RateLimiter::set_limit`]).
    pub(crate) fn set_limit(&self, client: &str, per_hour: Option<u64>) {
        self.limiter().set_limit(client, per_hour)
    }

    /// Takes `amount` from every level of `payer`, or from none ([`RateLimiter::charge_all`];
    /// shared: one statement over the levels' rows, [`BudgetStore::charge`]). A charge
    /// that a drained network or ceiling refuses is taken from the payer's floor instead,
    /// if it has one and the floor can pay (ADR 0044): a caller that has spent little of
    /// its own budget this hour is not refused for what others spent.
    pub(crate) async fn charge_all(
        &self,
        payer: &Payer,
        amount: u64,
    ) -> Result<Receipt, ChargeError> {
        match self.charge_levels(payer, amount).await {
            Err(ChargeError::Refused(refused))
                if matches!(refused.kind, LevelKind::Network | LevelKind::Ceiling) =>
            {
                if let Some(floor) = payer.floor()
                    && let Ok(receipt) = self.charge_levels(&floor, amount).await
                {
                    return Ok(receipt);
                }
                // The shared level's refusal is the one the caller hears.
                Err(ChargeError::Refused(refused))
            }
            other => other,
        }
    }

    /// [`Budgets::charge_all`] without the floor.
    async fn charge_levels(&self, payer: &Payer, amount: u64) -> Result<Receipt, ChargeError> {
        let (sizes, book, store) = match self {
            Budgets::Local(l) => return l.charge_all(payer, amount).map_err(ChargeError::Refused),
            Budgets::Shared { sizes, book, store } => (sizes, *book, store),
        };
        let levels = sizes.sizes(payer);
        let caps: Vec<LevelCap> = levels
            .iter()
            .map(|(l, cap)| LevelCap {
                key: l.key.clone(),
                per_hour: *cap,
            })
            .collect();
        match store.charge(book, &caps, amount).await {
            Ok(Ok(())) => Ok(Receipt {
                keys: caps.into_iter().map(|c| c.key).collect(),
                amount,
            }),
            Ok(Err(short)) => Err(ChargeError::Refused(Refused {
                wait: short.wait,
                kind: levels
                    .get(short.level)
                    .map_or(LevelKind::Token, |(l, _)| l.kind),
            })),
            Err(e) => Err(ChargeError::Store(e)),
        }
    }

    /// Takes `amount` from `client`'s own budget alone (probe bytes, OT sessions).
    pub(crate) async fn charge(&self, client: &str, amount: u64) -> Result<Receipt, ChargeError> {
        let payer = Payer::new(vec![Level::new(client.to_string(), 1, LevelKind::Token)]);
        self.charge_all(&payer, amount).await
    }

    /// Gives a charge back to every level it was taken from, none above its size. A
    /// refund the shared table cannot take is logged and lost: the caller keeps the
    /// charge (never more than the budget).
    pub(crate) async fn refund_all(&self, receipt: &Receipt) {
        match self {
            Budgets::Local(l) => l.refund_all(receipt),
            Budgets::Shared { book, store, .. } => {
                if let Err(e) = store.refund(*book, &receipt.keys, receipt.amount).await {
                    tracing::warn!(error = %e, "refunding a shared budget failed; the charge stands");
                }
            }
        }
    }
}

/// Most buckets a limiter tracks before new address and network budgets go untracked
/// (about 100 bytes each: a few MB). Buckets are forgotten once full again, so reaching it
/// takes this many callers charged within about their refill time; above it the callers
/// not yet tracked are held by the levels that are (at worst the server-wide ceiling).
pub(crate) const MAX_BUCKETS: usize = 65_536;

pub(crate) struct RateLimiter {
    per_hour: u64,
    /// Saved to the database ([`RateLimiter::take_dirty`]): a charged bucket is kept until
    /// saved. `false`: nothing is ever saved, so nothing is ever marked.
    persisted: bool,
    /// Buckets tracked before optional levels go untracked ([`MAX_BUCKETS`]).
    max_buckets: usize,
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
    /// The bucket's size and hourly refill, as of its last charge.
    cap: u64,
    last: Instant,
    /// Charged since the last save (always `false` in a limiter that is not persisted).
    dirty: bool,
}

impl Bucket {
    /// Tokens at `now` for a bucket of `cap`.
    fn refilled(&self, cap: u64, now: Instant) -> f64 {
        let cap = cap as f64;
        (self.tokens + now.saturating_duration_since(self.last).as_secs_f64() * cap / REFILL_SECS)
            .min(cap)
    }
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
            max_buckets: MAX_BUCKETS,
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

    /// The per-caller budget (before a token's own).
    pub(crate) fn per_hour(&self) -> u64 {
        self.per_hour
    }

    #[cfg(test)]
    fn with_max_buckets(mut self, max: usize) -> Self {
        self.max_buckets = max;
        self
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

    /// A level's budget now: its own for a token with one, else this limiter's per-caller
    /// budget times the level's scale (0: unlimited). The one rule for a level's size,
    /// charged here or in the shared table ([`Budgets`]).
    fn size(&self, g: &Inner, level: &Level) -> u64 {
        let base = if level.kind == LevelKind::Token {
            g.per_hour(self.per_hour, &level.key)
        } else {
            self.per_hour
        };
        let size = base.saturating_mul(level.scale);
        if level.divisor > 1 && size > 0 {
            // A fraction of a limited budget is limited (never 0, which means unlimited).
            (size / level.divisor).max(1)
        } else {
            size
        }
    }

    /// The limited levels of `payer` with their sizes now, narrowest first.
    fn sizes<'p>(&self, payer: &'p Payer) -> Vec<(&'p Level, u64)> {
        let g = self.lock();
        payer
            .levels
            .iter()
            .map(|l| (l, self.size(&g, l)))
            .filter(|(_, cap)| *cap > 0)
            .collect()
    }

    /// Takes `items` from `client`'s budget alone, or returns the seconds until it could.
    pub(crate) fn charge(&self, client: &str, items: u64) -> Result<(), u64> {
        let payer = Payer::new(vec![Level::new(client.to_string(), 1, LevelKind::Token)]);
        self.charge_all(&payer, items).map(drop).map_err(|r| r.wait)
    }

    /// Takes `items` from every level of `payer`, or from none: the one place a charge is
    /// decided. Under one lock, each level's bucket (its own budget for a token with one,
    /// else this limiter's per-caller budget times the level's scale; 0 is unlimited and
    /// skipped) is refilled and checked first, nothing is created or changed, and only
    /// when all can pay are all charged. Above [`MAX_BUCKETS`] buckets, address and
    /// network levels not yet tracked are left out (token and ceiling levels never are).
    pub(crate) fn charge_all(&self, payer: &Payer, items: u64) -> Result<Receipt, Refused> {
        let mut g = self.lock();
        let now = Instant::now();
        let need = items as f64;
        // Above the bucket cap, the narrowest untracked optional levels stay untracked.
        let untracked = |kind_optional: bool| {
            payer
                .levels
                .iter()
                .filter(|l| l.kind.optional() == kind_optional && !g.buckets.contains_key(&l.key))
                .count()
        };
        let room = self
            .max_buckets
            .saturating_sub(g.buckets.len())
            .saturating_sub(untracked(false));
        let mut skip = untracked(true).saturating_sub(room);
        let mut charged: Vec<(&Level, u64)> = Vec::with_capacity(payer.levels.len());
        let mut refused: Option<Refused> = None;
        for level in &payer.levels {
            let cap = self.size(&g, level);
            if cap == 0 {
                continue;
            }
            let tokens = match g.buckets.get(&level.key) {
                Some(b) => b.refilled(cap, now),
                None if level.kind.optional() && skip > 0 => {
                    skip -= 1;
                    continue;
                }
                None => cap as f64,
            };
            let capf = cap as f64;
            let wait = if need <= tokens {
                0
            } else if need > capf {
                REFILL_SECS as u64
            } else {
                ((need - tokens) * REFILL_SECS / capf).ceil().max(1.0) as u64
            };
            if wait > 0 && refused.is_none_or(|r| wait > r.wait) {
                refused = Some(Refused {
                    wait,
                    kind: level.kind,
                });
            }
            charged.push((level, cap));
        }
        if let Some(r) = refused {
            return Err(r);
        }
        let mut receipt = Receipt {
            keys: Vec::with_capacity(charged.len()),
            amount: items,
        };
        for (level, cap) in charged {
            let b = g.buckets.entry(level.key.clone()).or_insert(Bucket {
                tokens: cap as f64,
                cap,
                last: now,
                dirty: false,
            });
            b.tokens = b.refilled(cap, now) - need;
            b.cap = cap;
            b.last = now;
            b.dirty = self.persisted;
            receipt.keys.push(level.key.clone());
        }
        Ok(receipt)
    }

    /// Gives `items` back to `client`'s budget (a charge for something then refused).
    pub(crate) fn refund(&self, client: &str, items: u64) {
        self.refund_all(&Receipt {
            keys: vec![client.to_string()],
            amount: items,
        });
    }

    /// Gives a charge back to every bucket it was taken from, none above its size.
    pub(crate) fn refund_all(&self, receipt: &Receipt) {
        let mut g = self.lock();
        for key in &receipt.keys {
            if let Some(b) = g.buckets.get_mut(key) {
                b.tokens = (b.tokens + receipt.amount as f64).min(b.cap as f64);
                b.dirty = self.persisted;
            }
        }
    }

    /// Forgets clients whose bucket is full again (they start full when seen next), once
    /// saved if the limiter is persisted.
    pub(crate) fn sweep(&self) {
        self.sweep_at(Instant::now());
    }

    fn sweep_at(&self, now: Instant) {
        let mut g = self.lock();
        g.buckets
            .retain(|_, b| b.dirty || b.refilled(b.cap, now) < b.cap as f64);
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
        g.buckets
            .iter_mut()
            .filter(|(_, b)| b.dirty)
            .map(|(client, b)| {
                b.dirty = false;
                let age = i64::try_from(now.duration_since(b.last).as_millis()).unwrap_or(0);
                SavedBudget {
                    client: client.clone(),
                    remaining: b.tokens,
                    per_hour: b.cap,
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
            if tokens >= cap || g.buckets.len() >= self.max_buckets {
                continue;
            }
            g.buckets.entry(row.client).or_insert(Bucket {
                tokens,
                cap: row.per_hour,
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

    fn address(own: &str) -> Payer {
        Payer::new(vec![
            Level::new(own.into(), 1, LevelKind::Address),
            Level::new("net:n".into(), 2, LevelKind::Network),
            Level::new("ceiling".into(), 3, LevelKind::Ceiling),
        ])
    }

    fn left(r: &RateLimiter, key: &str) -> Option<f64> {
        r.lock().buckets.get(key).map(|b| b.tokens.round())
    }

    /// A charge takes from every level or from none; the longest wait and its level are
    /// reported; a refund gives back to every level charged.
    #[test]
    fn charges_are_all_or_nothing_across_levels() {
        let r = RateLimiter::new(100);
        let a = address("a");
        let b = address("b");
        let _ = r.charge_all(&a, 100).unwrap();
        let _ = r.charge_all(&b, 100).unwrap();
        // The network (200) is spent: a third caller of it is refused, and nothing of
        // its own or the ceiling's is taken.
        let c = address("c");
        let refused = r.charge_all(&c, 10).unwrap_err();
        assert_eq!(refused.kind, LevelKind::Network);
        assert!((170..=190).contains(&refused.wait), "{refused:?}");
        assert_eq!(left(&r, "c"), None, "no bucket for a refused charge");
        assert_eq!(left(&r, "ceiling"), Some(100.0));
        // The caller's own level refuses: the network and ceiling keep theirs.
        let d = Payer::new(vec![
            Level::new("d".into(), 1, LevelKind::Address),
            Level::new("net:m".into(), 2, LevelKind::Network),
            Level::new("ceiling".into(), 3, LevelKind::Ceiling),
        ]);
        let _ = r.charge_all(&d, 60).unwrap();
        assert_eq!(r.charge_all(&d, 60).unwrap_err().kind, LevelKind::Address);
        assert_eq!(left(&r, "net:m"), Some(140.0));
        assert_eq!(left(&r, "ceiling"), Some(40.0));
        // The ceiling refuses: a charge larger than a level can ever hold waits an hour.
        let e = Payer::new(vec![
            Level::new("e".into(), 1, LevelKind::Address),
            Level::new("ceiling".into(), 3, LevelKind::Ceiling),
        ]);
        let refused = r.charge_all(&e, 50).unwrap_err();
        assert_eq!(refused.kind, LevelKind::Ceiling);
        assert_eq!(left(&r, "e"), None);
        assert_eq!(r.charge_all(&e, 101).unwrap_err().wait, 3600);
        // Refunds go to every level charged, none above its size.
        let receipt = r.charge_all(&e, 40).unwrap();
        assert_eq!(left(&r, "ceiling"), Some(0.0));
        r.refund_all(&receipt);
        assert_eq!(left(&r, "e"), Some(100.0));
        assert_eq!(left(&r, "ceiling"), Some(40.0));
        // A level of scale 0, or a limiter of 0, is unlimited.
        let free = RateLimiter::new(0);
        assert!(free.charge_all(&a, u64::MAX).is_ok());
        assert_eq!(free.tracked(), 0);
    }

    /// Token budgets stay their own: a token's own limit, no other level.
    #[test]
    fn token_payers_keep_their_own_budget() {
        let r = RateLimiter::new(100);
        r.set_limit("token-id:1", Some(10));
        let t = Payer::token("token-id:1");
        assert_eq!(t.key(), "token-id:1");
        let _ = r.charge_all(&t, 10).unwrap();
        assert_eq!(r.charge_all(&t, 1).unwrap_err().kind, LevelKind::Token);
        let _ = r.charge_all(&Payer::token("token:ab"), 100).unwrap();
        assert_eq!(r.tracked(), 2);
    }

    /// Above the bucket cap, new address and network levels go untracked (narrowest
    /// first) while the ceiling still counts every charge.
    #[test]
    fn buckets_are_bounded() {
        let r = RateLimiter::new(100).with_max_buckets(10);
        for i in 0..50 {
            let _ = r.charge_all(&address(&format!("a{i}")), 1).unwrap();
        }
        assert_eq!(r.tracked(), 10);
        assert_eq!(left(&r, "ceiling"), Some(250.0));
        // A token level is always tracked.
        let _ = r.charge_all(&Payer::token("token:x"), 1).unwrap();
        assert_eq!(r.tracked(), 11);
        // Restored rows respect the cap too.
        let rows = r.take_dirty();
        let restored = RateLimiter::new(100).with_max_buckets(5);
        restored.restore(rows);
        assert_eq!(restored.tracked(), 5);
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
