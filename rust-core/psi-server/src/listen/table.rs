//! The open connections ([`Table`]): per-address counts, idle eviction and the response
//! bytes in flight, with each connection's [`Clock`] (its time limits) and the
//! [`Refusal`] of a request admitted to no router.

use super::limits::Limits;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// Why a request was refused before reaching the router (response bytes in flight).
pub(super) enum Refusal {
    /// The client's address holds `max_response_bytes_per_address` unwritten bytes.
    Address { retry_after: u64 },
    /// The server holds `max_response_bytes_in_flight` and no response has been sending
    /// for `send_grace`.
    Busy,
}

impl Refusal {
    /// The API's JSON error for this refusal (`Connection: close`: the client's next try
    /// opens a new connection).
    pub(super) fn response(&self) -> axum::response::Response {
        use axum::response::IntoResponse;
        let (code, message, retry_after) = match self {
            Refusal::Address { retry_after } => (
                psi_http::ErrorCode::RateLimited,
                "this address has too many response bytes not yet read",
                *retry_after,
            ),
            Refusal::Busy => (
                psi_http::ErrorCode::TooManySessions,
                "server busy: too many response bytes in flight",
                1,
            ),
        };
        let status = axum::http::StatusCode::from_u16(code.status())
            .unwrap_or(axum::http::StatusCode::SERVICE_UNAVAILABLE);
        let body = psi_http::ErrorBody {
            error: code,
            message: message.into(),
        };
        let mut resp = (status, axum::Json(body)).into_response();
        let h = resp.headers_mut();
        h.insert(axum::http::header::RETRY_AFTER, retry_after.into());
        h.insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
        resp
    }
}

/// The open connections: per-address counts, idle eviction, response bytes in flight.
///
/// Lock order: the table, then a connection's [`Clock`]; a clock never takes the
/// table's lock while holding its own.
pub(super) struct Table {
    limits: Arc<Limits>,
    inner: Mutex<TableInner>,
}

#[derive(Default)]
pub(super) struct TableInner {
    next_id: u64,
    conns: HashMap<u64, Arc<Clock>>,
    /// Unwritten response bytes per address (entries at zero are removed).
    bytes: HashMap<String, u64>,
    /// Unwritten response bytes of every connection.
    total: u64,
}

impl TableInner {
    fn release(&mut self, address: Option<&str>, n: u64) {
        self.total = self.total.saturating_sub(n);
        if let Some(a) = address
            && let Some(b) = self.bytes.get_mut(a)
        {
            *b = b.saturating_sub(n);
            if *b == 0 {
                self.bytes.remove(a);
            }
        }
    }
}

impl Table {
    pub(super) fn new(limits: Arc<Limits>) -> Self {
        Table {
            limits,
            inner: Mutex::new(TableInner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TableInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new connection of `address` (`None`: exempt from the per-address caps).
    pub(super) fn register(self: &Arc<Self>, address: Option<String>) -> Arc<Clock> {
        let mut g = self.lock();
        g.next_id += 1;
        let clock = Arc::new(Clock::new(
            g.next_id,
            address,
            Arc::downgrade(self),
            self.limits.clone(),
        ));
        g.conns.insert(clock.id, clock.clone());
        clock
    }

    /// The connection has closed: forget it and its unwritten bytes.
    pub(super) fn unregister(&self, clock: &Clock) {
        let mut g = self.lock();
        g.conns.remove(&clock.id);
        let left = std::mem::take(&mut clock.lock().pending);
        g.release(clock.address.as_deref(), left);
    }

    /// Room for one more connection of `address`: true when it is below its cap or one
    /// of its idle connections was told to close; false when every one is busy.
    pub(super) fn make_room_for(&self, address: &str) -> bool {
        let cap = self.limits.max_connections_per_address.max(1);
        let open = {
            let g = self.lock();
            g.conns
                .values()
                .filter(|c| c.address.as_deref() == Some(address) && !c.lock().evicted)
                .count()
        };
        open < cap || self.evict_idle(Some(address))
    }

    /// Tells the idle connection (no request in progress, nothing left to write) that has
    /// been quiet longest, of `address` or of any, to close. False if there is none.
    pub(super) fn evict_idle(&self, address: Option<&str>) -> bool {
        let g = self.lock();
        let victim = g
            .conns
            .values()
            .filter(|c| address.is_none() || c.address.as_deref() == address)
            .filter_map(|c| {
                let s = c.lock();
                (!s.evicted && s.in_flight == 0 && s.pending == 0).then_some((s.last_activity, c))
            })
            .min_by_key(|(t, _)| *t)
            .map(|(_, c)| c.clone());
        drop(g);
        match victim {
            Some(c) => {
                c.evict();
                true
            }
            None => false,
        }
    }

    /// May `clock`'s connection start a request? Refused when its address holds its cap
    /// of unwritten response bytes; at the server-wide cap the connection whose response
    /// has been sending longest (at least `send_grace`) is closed instead, and the
    /// request refused only when there is none.
    fn admit(&self, clock: &Clock) -> Result<(), Refusal> {
        let l = &self.limits;
        let mut g = self.lock();
        // An address (or the server) with nothing in flight is always admitted, whatever
        // the cap.
        let held = clock
            .address
            .as_deref()
            .and_then(|a| g.bytes.get(a).copied())
            .unwrap_or(0);
        if held > 0 && held >= l.max_response_bytes_per_address {
            return Err(Refusal::Address {
                retry_after: l.send_grace.as_secs().max(1),
            });
        }
        if g.total == 0 || g.total < l.max_response_bytes_in_flight {
            return Ok(());
        }
        let now = Instant::now();
        let victim = g
            .conns
            .values()
            .filter(|c| c.id != clock.id)
            .filter_map(|c| {
                let s = c.lock();
                let started = s.send_started?;
                (!s.evicted && s.pending > 0 && now.duration_since(started) >= l.send_grace)
                    .then_some((started, c))
            })
            .min_by_key(|(t, _)| *t)
            .map(|(_, c)| c.clone());
        let Some(victim) = victim else {
            return Err(Refusal::Busy);
        };
        // Its bytes stop counting now: it closes as soon as its task sees the flag.
        let left = std::mem::take(&mut victim.lock().pending);
        g.release(victim.address.as_deref(), left);
        drop(g);
        tracing::debug!("response bytes cap reached: the longest-sending connection closed");
        victim.evict();
        Ok(())
    }

    fn charge(&self, address: Option<&str>, n: u64) {
        let mut g = self.lock();
        g.total = g.total.saturating_add(n);
        if let Some(a) = address {
            let b = g.bytes.entry(a.to_string()).or_default();
            *b = b.saturating_add(n);
        }
    }

    fn release(&self, address: Option<&str>, n: u64) {
        self.lock().release(address, n);
    }
}

/// One connection's state: what its time limits watch (bytes moving, requests in
/// progress, the response being written) and whether it was told to close.
pub(super) struct Clock {
    id: u64,
    /// The per-address key (`None`: a trusted proxy, exempt).
    address: Option<String>,
    table: std::sync::Weak<Table>,
    limits: Arc<Limits>,
    state: Mutex<ClockState>,
    /// Woken when the deadline moves earlier (a head starts, a response is handed over,
    /// eviction) or appears (a request ends).
    pub(super) changed: tokio::sync::Notify,
}

pub(super) struct ClockState {
    /// Requests whose response body has not been fully handed to hyper.
    in_flight: usize,
    /// Last byte read or written, or the last request's end.
    last_activity: Instant,
    /// First byte of a request head not yet complete (no request in progress).
    head_started: Option<Instant>,
    /// Response bytes handed to hyper and not yet written to the socket (approximately:
    /// response heads and TLS records count as written body bytes).
    pending: u64,
    /// When `pending` last rose from zero.
    send_started: Option<Instant>,
    /// When `pending` must be zero (`send_grace` plus the bytes at `min_send_rate`).
    send_deadline: Option<Instant>,
    /// Told to close (idle eviction, or the longest sender at the bytes cap).
    evicted: bool,
}

impl Clock {
    fn new(
        id: u64,
        address: Option<String>,
        table: std::sync::Weak<Table>,
        limits: Arc<Limits>,
    ) -> Self {
        Clock {
            id,
            address,
            table,
            limits,
            state: Mutex::new(ClockState {
                in_flight: 0,
                last_activity: Instant::now(),
                head_started: None,
                pending: 0,
                send_started: None,
                send_deadline: None,
                evicted: false,
            }),
            changed: tokio::sync::Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ClockState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The handshake is done: the connection now waits for its first request.
    pub(super) fn reset(&self) {
        let mut s = self.lock();
        s.last_activity = Instant::now();
        s.head_started = None;
    }

    pub(super) fn read(&self) {
        let now = Instant::now();
        let mut s = self.lock();
        s.last_activity = now;
        if s.in_flight == 0 && s.head_started.is_none() {
            s.head_started = Some(now);
            drop(s);
            self.changed.notify_one();
        }
    }

    pub(super) fn wrote(&self, n: usize) {
        let mut s = self.lock();
        s.last_activity = Instant::now();
        let done = s.pending.min(n as u64);
        if done == 0 {
            return;
        }
        s.pending -= done;
        if s.pending == 0 {
            s.send_started = None;
            s.send_deadline = None;
        }
        drop(s);
        if let Some(t) = self.table.upgrade() {
            t.release(self.address.as_deref(), done);
        }
    }

    pub(super) fn begin(self: &Arc<Self>) -> InFlight {
        let mut s = self.lock();
        s.in_flight += 1;
        s.head_started = None;
        InFlight(self.clone())
    }

    pub(super) fn admit(&self) -> Result<(), Refusal> {
        match self.table.upgrade() {
            Some(t) => t.admit(self),
            None => Ok(()),
        }
    }

    /// A response of `bytes` was handed to hyper: its bytes count as in flight until
    /// written, and its write deadline starts (or, behind another response, grows).
    pub(super) fn sending(&self, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let now = Instant::now();
        let more = self.limits.send_time(bytes);
        let mut s = self.lock();
        if s.pending == 0 {
            s.send_started = Some(now);
            s.send_deadline = (self.limits.min_send_rate > 0)
                .then(|| instant_after(now, self.limits.send_grace.saturating_add(more)));
        } else if let Some(d) = s.send_deadline {
            s.send_deadline = Some(instant_after(d, more));
        }
        s.pending = s.pending.saturating_add(bytes);
        drop(s);
        if let Some(t) = self.table.upgrade() {
            t.charge(self.address.as_deref(), bytes);
        }
        self.changed.notify_one();
    }

    /// Tells the connection to close (its watchdog wakes and ends it).
    fn evict(&self) {
        self.lock().evicted = true;
        self.changed.notify_one();
    }

    /// When the connection must close if nothing changes; `None` while a request is in
    /// progress and no response is being written under a deadline.
    pub(super) fn deadline(&self, limits: &Limits) -> Option<Instant> {
        let s = self.lock();
        if s.evicted {
            return Some(Instant::now());
        }
        if s.pending > 0
            && let Some(d) = s.send_deadline
        {
            return Some(d);
        }
        if s.in_flight > 0 {
            return None;
        }
        let idle = s.last_activity + limits.idle_timeout;
        Some(match s.head_started {
            Some(t) => idle.min(t + limits.header_read_timeout),
            None => idle,
        })
    }
}

/// `t + d`, saturating at about a century.
pub(super) fn instant_after(t: Instant, d: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 86_400);
    t.checked_add(d.min(CENTURY)).unwrap_or(t)
}

/// A request in progress; dropped when hyper has taken its whole response body.
pub(super) struct InFlight(Arc<Clock>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.in_flight -= 1;
        s.last_activity = Instant::now();
        s.head_started = None;
        drop(s);
        self.0.changed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::listen::limits::tests::limits;

    #[test]
    fn nothing_in_flight_is_always_admitted_and_a_holder_waits_for_its_readers() {
        let t = Arc::new(Table::new(limits(0, 0, Duration::from_secs(3600))));
        let c = t.register(Some("ip:a".into()));
        assert!(
            c.admit().is_ok(),
            "caps of 0 still admit an address holding nothing"
        );
        c.sending(100);
        assert!(matches!(c.admit(), Err(Refusal::Address { .. })));
        c.wrote(60);
        assert!(matches!(c.admit(), Err(Refusal::Address { .. })));
        c.wrote(1000);
        assert!(c.admit().is_ok());
        assert_eq!(t.lock().total, 0);
        assert!(t.lock().bytes.is_empty());
    }

    #[test]
    fn at_the_total_cap_the_longest_sender_past_the_grace_makes_room() {
        let young = Arc::new(Table::new(limits(u64::MAX, 1, Duration::from_secs(3600))));
        let a = young.register(Some("ip:a".into()));
        let b = young.register(Some("ip:b".into()));
        a.sending(100);
        assert!(
            matches!(b.admit(), Err(Refusal::Busy)),
            "no sender past the grace"
        );

        let t = Arc::new(Table::new(limits(u64::MAX, 1, Duration::ZERO)));
        let a = t.register(Some("ip:a".into()));
        let b = t.register(Some("ip:b".into()));
        a.sending(100);
        assert!(b.admit().is_ok());
        assert!(a.lock().evicted, "the sender was told to close");
        assert_eq!(t.lock().total, 0, "its bytes no longer count");
        t.unregister(&a);
        assert_eq!(t.lock().conns.len(), 1);
    }

    #[test]
    fn the_longest_quiet_idle_connection_of_an_address_makes_room() {
        let t = Arc::new(Table::new(limits(u64::MAX, u64::MAX, Duration::ZERO)));
        let first = t.register(Some("ip:a".into()));
        std::thread::sleep(Duration::from_millis(5));
        let second = t.register(Some("ip:a".into()));
        let _other = t.register(Some("ip:b".into()));
        assert!(t.make_room_for("ip:b"), "b is below its cap of 2");
        let _busy = second.begin();
        assert!(t.make_room_for("ip:a"));
        assert!(first.lock().evicted && !second.lock().evicted);
        // Now a's only live connection is busy: no room.
        let third = t.register(Some("ip:a".into()));
        let _also_busy = third.begin();
        assert!(!t.make_room_for("ip:a"));
    }
}
