//! The open connections ([`Table`]): per-address and per-block counts, idle and stalled
//! upload eviction, the response bytes in flight and the request bytes being received,
//! with each connection's [`Clock`] (its time limits) and the [`Refusal`] of a request
//! admitted to no router.

use super::limits::Limits;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
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
    /// The client's address has `max_request_bytes_per_address` request bytes being
    /// received (a request with a body).
    UploadsOfAddress { retry_after: u64 },
    /// The server has `max_request_bytes_in_flight` request bytes being received and no
    /// upload has been going for `upload_grace` (a request with a body).
    UploadsBusy,
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
            Refusal::UploadsOfAddress { retry_after } => (
                psi_http::ErrorCode::RateLimited,
                "this address has too many request bytes being uploaded",
                *retry_after,
            ),
            Refusal::UploadsBusy => (
                psi_http::ErrorCode::TooManySessions,
                "server busy: too many request bytes being uploaded",
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

/// The open connections: per-address and per-block counts, eviction, response bytes in
/// flight and request bytes being received.
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
    /// Request body bytes received for requests in progress, per address and in total.
    uploads: Bytes,
}

/// Bytes counted per address (entries at zero are removed) and in total.
#[derive(Default)]
struct Bytes {
    of: HashMap<String, u64>,
    total: u64,
}

impl Bytes {
    fn held(&self, address: Option<&str>) -> u64 {
        address.and_then(|a| self.of.get(a).copied()).unwrap_or(0)
    }

    fn charge(&mut self, address: Option<&str>, n: u64) {
        self.total = self.total.saturating_add(n);
        if let Some(a) = address {
            let b = self.of.entry(a.to_string()).or_default();
            *b = b.saturating_add(n);
        }
    }

    fn release(&mut self, address: Option<&str>, n: u64) {
        self.total = self.total.saturating_sub(n);
        if let Some(a) = address
            && let Some(b) = self.of.get_mut(a)
        {
            *b = b.saturating_sub(n);
            if *b == 0 {
                self.of.remove(a);
            }
        }
    }
}

impl TableInner {
    /// The connection not yet told to close, for which `keep` holds, whose `since` is
    /// earliest (`since` gives `None` for one that does not qualify): the one choice of
    /// every eviction here.
    fn earliest(
        &self,
        keep: impl Fn(&Clock) -> bool,
        since: impl Fn(&ClockState) -> Option<Instant>,
    ) -> Option<Arc<Clock>> {
        self.conns
            .values()
            .filter(|c| keep(c))
            .filter_map(|c| {
                let s = c.lock();
                if s.evicted {
                    return None;
                }
                since(&s).map(|t| (t, c))
            })
            .min_by_key(|(t, _)| *t)
            .map(|(_, c)| c.clone())
    }

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

/// Whose connections an eviction may close.
#[derive(Clone, Copy)]
pub(super) enum Whose<'a> {
    Address(&'a str),
    Block(&'a str),
}

impl Whose<'_> {
    fn covers(self, c: &Clock) -> bool {
        match self {
            Whose::Address(a) => c.address.as_deref() == Some(a),
            Whose::Block(b) => c.block.as_deref() == Some(b),
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

    /// A new connection of `address` in `block` (`None`: exempt from the per-address
    /// and per-block caps).
    pub(super) fn register(
        self: &Arc<Self>,
        address: Option<String>,
        block: Option<String>,
    ) -> Arc<Clock> {
        let mut g = self.lock();
        g.next_id += 1;
        let clock = Arc::new(Clock::new(
            g.next_id,
            address,
            block,
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
        let (left, uploaded) = {
            let mut s = clock.lock();
            (
                std::mem::take(&mut s.pending),
                std::mem::take(&mut s.request_bytes),
            )
        };
        g.release(clock.address.as_deref(), left);
        g.uploads.release(clock.address.as_deref(), uploaded);
    }

    /// Room for one more connection of `address` in `block`: true when each is below its
    /// cap or one of its idle connections was told to close; false when every one is
    /// busy.
    pub(super) fn make_room_for(&self, address: &str, block: &str) -> bool {
        let (of_address, of_block) = {
            let g = self.lock();
            let live = || g.conns.values().filter(|c| !c.lock().evicted);
            (
                live().filter(|c| Whose::Address(address).covers(c)).count(),
                live().filter(|c| Whose::Block(block).covers(c)).count(),
            )
        };
        let mut of_block = of_block;
        if of_address >= self.limits.max_connections_per_address.max(1) {
            if !self.evict_idle(Whose::Address(address)) {
                return false;
            }
            // The connection closed for the address was one of its block's too.
            of_block = of_block.saturating_sub(1);
        }
        of_block < self.limits.max_connections_per_block.max(1)
            || self.evict_idle(Whose::Block(block))
    }

    /// Tells the idle connection (no request in progress, nothing left to write) that has
    /// been quiet longest, of `whose`, to close. False if there is none.
    pub(super) fn evict_idle(&self, whose: Whose<'_>) -> bool {
        let g = self.lock();
        let victim = g.earliest(
            |c| whose.covers(c),
            |s| (s.in_flight == 0 && s.pending == 0).then_some(s.last_activity),
        );
        drop(g);
        match victim {
            Some(c) => {
                c.evict();
                true
            }
            None => false,
        }
    }

    /// At the connection cap: tells the connection that has been quiet longest to close,
    /// among the idle ones (no request in progress, nothing left to write; quiet since
    /// their last byte) and those whose request body is arriving (quiet since the body's
    /// last byte, or the head when none came): the upload that made the least progress.
    /// A request whose body does not come must not hold a connection, and a newcomer that
    /// has not yet sent its request head (idle for an instant) is not closed for one.
    /// False if there is none.
    pub(super) fn evict_quietest(&self) -> bool {
        let g = self.lock();
        let victim = g.earliest(
            |_| true,
            |s| match &s.upload {
                Some(u) => Some(u.last_progress),
                None if s.in_flight == 0 && s.pending == 0 => Some(s.last_activity),
                None => None,
            },
        );
        drop(g);
        match victim {
            Some(c) => {
                c.evict();
                true
            }
            None => false,
        }
    }

    /// May a request with a body start on `clock`'s connection? Refused when its address
    /// has `max_request_bytes_per_address` being received; at the server-wide cap the
    /// connection whose upload has been going longest (at least `upload_grace`) is closed
    /// instead, and the request refused only when there is none.
    fn admit_upload(&self, clock: &Clock) -> Result<(), Refusal> {
        let l = &self.limits;
        let mut g = self.lock();
        let held = g.uploads.held(clock.address.as_deref());
        if held > 0 && held >= l.max_request_bytes_per_address {
            return Err(Refusal::UploadsOfAddress {
                retry_after: l.upload_grace.as_secs().max(1),
            });
        }
        if g.uploads.total == 0 || g.uploads.total < l.max_request_bytes_in_flight {
            return Ok(());
        }
        let now = Instant::now();
        let victim = g.earliest(
            |c| c.id != clock.id,
            |s| {
                let started = s.upload.as_ref()?.started;
                (s.request_bytes > 0 && now.duration_since(started) >= l.upload_grace)
                    .then_some(started)
            },
        );
        let Some(victim) = victim else {
            return Err(Refusal::UploadsBusy);
        };
        // Its bytes stop counting now: it closes as soon as its task sees the flag.
        let left = std::mem::take(&mut victim.lock().request_bytes);
        g.uploads.release(victim.address.as_deref(), left);
        drop(g);
        tracing::debug!("request bytes cap reached: the longest upload closed");
        victim.evict();
        Ok(())
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
        let victim = g.earliest(
            |c| c.id != clock.id,
            |s| {
                let started = s.send_started?;
                (s.pending > 0 && now.duration_since(started) >= l.send_grace).then_some(started)
            },
        );
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
/// progress, the body being received, the response being written) and whether it was
/// told to close.
pub(super) struct Clock {
    id: u64,
    /// The per-address key (`None`: a trusted proxy, exempt).
    address: Option<String>,
    /// The per-block key (`None`: a trusted proxy, exempt).
    block: Option<String>,
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
    /// The request body being received, if any.
    upload: Option<Upload>,
    /// Request body bytes received and counted in the table (released when their
    /// request ends).
    request_bytes: u64,
    /// Numbers the uploads, so the end of one is not taken for the end of the next.
    uploads: u64,
}

/// A request body being received.
struct Upload {
    id: u64,
    started: Instant,
    declared: Option<u64>,
    received: u64,
    /// The body's last byte, or its start.
    last_progress: Instant,
    /// When the body must have arrived (`None` without `min_upload_rate`).
    deadline: Option<Instant>,
}

impl Clock {
    fn new(
        id: u64,
        address: Option<String>,
        block: Option<String>,
        table: std::sync::Weak<Table>,
        limits: Arc<Limits>,
    ) -> Self {
        Clock {
            id,
            address,
            block,
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
                upload: None,
                request_bytes: 0,
                uploads: 0,
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
        InFlight {
            clock: self.clone(),
            uploaded: Arc::new(AtomicU64::new(0)),
        }
    }

    /// May the request start: its response bytes, and (`with_body`) its request bytes.
    pub(super) fn admit(&self, with_body: bool) -> Result<(), Refusal> {
        match self.table.upgrade() {
            Some(t) => {
                t.admit(self)?;
                if with_body {
                    t.admit_upload(self)?;
                }
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// A request body of `declared` bytes (`None`: sent without a length) starts to
    /// arrive: its upload deadline is `upload_grace` plus its length at
    /// `min_upload_rate`. Returns the upload's number for [`Clock::upload_done`].
    pub(super) fn upload_started(&self, declared: Option<u64>) -> u64 {
        let now = Instant::now();
        let mut s = self.lock();
        s.uploads += 1;
        let id = s.uploads;
        s.upload = Some(Upload {
            id,
            started: now,
            declared,
            received: 0,
            last_progress: now,
            deadline: self.upload_deadline(now, declared.unwrap_or(0)),
        });
        drop(s);
        self.changed.notify_one();
        id
    }

    fn upload_deadline(&self, started: Instant, bytes: u64) -> Option<Instant> {
        let l = &self.limits;
        (l.min_upload_rate > 0)
            .then(|| instant_after(started, l.upload_grace.saturating_add(l.upload_time(bytes))))
    }

    /// `n` bytes of upload `id` arrived (counted in `uploaded`, its request's charge): they
    /// count as request bytes until the request ends, and a body without a length earns
    /// more time at `min_upload_rate`.
    pub(super) fn received(&self, id: u64, n: u64, uploaded: &AtomicU64) {
        if n == 0 {
            return;
        }
        let mut s = self.lock();
        s.request_bytes = s.request_bytes.saturating_add(n);
        uploaded.fetch_add(n, Ordering::Relaxed);
        if let Some(u) = s.upload.as_mut().filter(|u| u.id == id) {
            u.received = u.received.saturating_add(n);
            u.last_progress = Instant::now();
            if u.declared.is_none() {
                u.deadline = self.upload_deadline(u.started, u.received);
            }
        }
        drop(s);
        if let Some(t) = self.table.upgrade() {
            t.lock().uploads.charge(self.address.as_deref(), n);
        }
    }

    /// Upload `id` is over (its body read to the end, or dropped unread).
    pub(super) fn upload_done(&self, id: u64) {
        let mut s = self.lock();
        if s.upload.as_ref().is_some_and(|u| u.id == id) {
            s.upload = None;
            drop(s);
            self.changed.notify_one();
        }
    }

    /// Releases up to `n` of this connection's request bytes (its request ended).
    fn release_uploaded(&self, n: u64) {
        let mut s = self.lock();
        let n = n.min(s.request_bytes);
        s.request_bytes -= n;
        drop(s);
        if n > 0
            && let Some(t) = self.table.upgrade()
        {
            t.lock().uploads.release(self.address.as_deref(), n);
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
    /// progress and neither its body is being received nor a response written under a
    /// deadline.
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
        if let Some(d) = s.upload.as_ref().and_then(|u| u.deadline) {
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

/// A request in progress; dropped when hyper has taken its whole response body. Its
/// request bytes count until then.
pub(super) struct InFlight {
    clock: Arc<Clock>,
    /// Body bytes of this request counted in the table.
    uploaded: Arc<AtomicU64>,
}

impl InFlight {
    pub(super) fn clock(&self) -> &Arc<Clock> {
        &self.clock
    }

    /// The counter of this request's body bytes, for its body.
    pub(super) fn uploaded(&self) -> Arc<AtomicU64> {
        self.uploaded.clone()
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.clock
            .release_uploaded(self.uploaded.swap(0, Ordering::Relaxed));
        let mut s = self.clock.lock();
        s.in_flight -= 1;
        s.last_activity = Instant::now();
        s.head_started = None;
        drop(s);
        self.clock.changed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::listen::limits::tests::limits;

    #[test]
    fn nothing_in_flight_is_always_admitted_and_a_holder_waits_for_its_readers() {
        let t = Arc::new(Table::new(limits(0, 0, Duration::from_secs(3600))));
        let c = t.register(Some("ip:a".into()), Some("b:a".into()));
        assert!(
            c.admit(false).is_ok(),
            "caps of 0 still admit an address holding nothing"
        );
        c.sending(100);
        assert!(matches!(c.admit(false), Err(Refusal::Address { .. })));
        c.wrote(60);
        assert!(matches!(c.admit(false), Err(Refusal::Address { .. })));
        c.wrote(1000);
        assert!(c.admit(false).is_ok());
        assert_eq!(t.lock().total, 0);
        assert!(t.lock().bytes.is_empty());
    }

    #[test]
    fn at_the_total_cap_the_longest_sender_past_the_grace_makes_room() {
        let young = Arc::new(Table::new(limits(u64::MAX, 1, Duration::from_secs(3600))));
        let a = young.register(Some("ip:a".into()), None);
        let b = young.register(Some("ip:b".into()), None);
        a.sending(100);
        assert!(
            matches!(b.admit(false), Err(Refusal::Busy)),
            "no sender past the grace"
        );

        let t = Arc::new(Table::new(limits(u64::MAX, 1, Duration::ZERO)));
        let a = t.register(Some("ip:a".into()), Some("b:a".into()));
        let b = t.register(Some("ip:b".into()), Some("b:a".into()));
        a.sending(100);
        assert!(b.admit(false).is_ok());
        assert!(a.lock().evicted, "the sender was told to close");
        assert_eq!(t.lock().total, 0, "its bytes no longer count");
        t.unregister(&a);
        assert_eq!(t.lock().conns.len(), 1);
    }

    #[test]
    fn the_longest_quiet_idle_connection_of_an_address_makes_room() {
        let t = Arc::new(Table::new(limits(u64::MAX, u64::MAX, Duration::ZERO)));
        let first = t.register(Some("ip:a".into()), Some("b:a".into()));
        std::thread::sleep(Duration::from_millis(5));
        let second = t.register(Some("ip:a".into()), Some("b:a".into()));
        let _other = t.register(Some("ip:b".into()), Some("b:a".into()));
        assert!(t.make_room_for("ip:b", "b:b"), "b is below its cap of 2");
        let _busy = second.begin();
        assert!(t.make_room_for("ip:a", "b:a"));
        assert!(first.lock().evicted && !second.lock().evicted);
        // Now a's only live connection is busy: no room.
        let third = t.register(Some("ip:a".into()), Some("b:a".into()));
        let _also_busy = third.begin();
        assert!(!t.make_room_for("ip:a", "b:a"));
    }

    #[test]
    fn the_quietest_idle_or_uploading_connection_is_closed_at_the_connection_cap() {
        let t = Arc::new(Table::new(limits(u64::MAX, u64::MAX, Duration::ZERO)));
        let (stalled, moving, done) = (
            t.register(Some("ip:a".into()), None),
            t.register(Some("ip:b".into()), None),
            t.register(Some("ip:c".into()), None),
        );
        let (r1, r2, r3) = (stalled.begin(), moving.begin(), done.begin());
        assert!(!t.evict_quietest(), "every connection busy, none uploading");
        stalled.upload_started(Some(64));
        let id = moving.upload_started(Some(64));
        let id_done = done.upload_started(Some(1));
        std::thread::sleep(Duration::from_millis(5));
        // A newcomer that has not sent its head yet is idle, but only for an instant.
        let newcomer = t.register(Some("ip:d".into()), None);
        moving.received(id, 10, &r2.uploaded());
        done.received(id_done, 1, &r3.uploaded());
        done.upload_done(id_done);
        assert!(t.evict_quietest());
        assert!(
            stalled.lock().evicted,
            "no byte since its head: the least progress"
        );
        assert!(!moving.lock().evicted && !done.lock().evicted && !newcomer.lock().evicted);
        // Its deadline: the grace (zero here) plus 64 bytes at 1,000 bytes/s.
        assert!(moving.deadline(&t.limits).is_some());
        assert_eq!(t.lock().uploads.total, 11);
        drop((r1, r2, r3));
        assert_eq!(t.lock().uploads.total, 0, "released when the requests end");
    }

    #[test]
    fn request_bytes_are_capped_per_address_and_in_total() {
        let t = Arc::new(Table::new(limits(100, 150, Duration::ZERO)));
        let a = t.register(Some("ip:a".into()), None);
        let b = t.register(Some("ip:b".into()), None);
        let c = t.register(Some("ip:c".into()), None);
        assert!(a.admit(true).is_ok(), "nothing held: admitted");
        let ra = a.begin();
        let id = a.upload_started(None);
        a.received(id, 100, &ra.uploaded());
        std::thread::sleep(Duration::from_millis(2));
        assert!(matches!(
            a.admit(true),
            Err(Refusal::UploadsOfAddress { .. })
        ));
        assert!(
            a.admit(false).is_ok(),
            "a request without a body is not refused"
        );
        let rb = b.begin();
        let id = b.upload_started(None);
        b.received(id, 60, &rb.uploaded());
        // 160 held of 150: the longest upload past the grace (a's) is closed for c.
        assert!(c.admit(true).is_ok());
        assert!(a.lock().evicted && !b.lock().evicted);
        assert_eq!(t.lock().uploads.total, 60);
        drop(ra);
        assert_eq!(t.lock().uploads.total, 60, "a's bytes were released once");
        drop(rb);
        assert_eq!(t.lock().uploads.total, 0);
    }
}
