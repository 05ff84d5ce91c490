//! The accept loop: TCP connections (optionally TLS), their time limits, the connection
//! caps, the bytes of responses in flight and graceful shutdown
//! (docs/adr/0019-tls-and-connection-limits.md, docs/adr/0037-connection-exposure.md).
//!
//! - At most `max_connections` connections are open. At the cap the connection with no
//!   request in progress that has been quiet longest is closed to make room; only when
//!   every connection has a request in progress does the loop wait for one to close
//!   (further connections queue in the kernel's listen backlog).
//! - At most `max_connections_per_address` connections of one address (IPv4 address or
//!   IPv6 prefix, by `ipv4_prefix`/`ipv6_prefix`; trusted proxies are exempt): a newcomer
//!   beyond it closes that address's longest-quiet idle connection, or is itself closed.
//! - A connection with no request in progress is closed when the client sends nothing
//!   for `idle_timeout` (a fresh connection, or keep-alive after a response), or when a
//!   request head that has started to arrive is not complete `header_read_timeout`
//!   after its first byte. A TLS handshake must finish within `header_read_timeout`.
//! - A response must be written within `send_grace` plus its size at `min_send_rate`
//!   (a deadline set when the response is handed over and extended by each response
//!   queued behind it); a client that reads slower is cut off.
//! - Bytes of responses not yet written to the socket are counted per address and in
//!   total. A request from an address holding `max_response_bytes_per_address` is
//!   refused (429 `rate_limited`); at `max_response_bytes_in_flight` the connection
//!   whose response has been sending longest (at least `send_grace`) is closed, and only
//!   when there is none is the request refused (503 `too_many_sessions`).
//! - Requests in progress are bounded by the router's `request_timeout`, not here.
//! - Shutdown: stop accepting, let every connection finish the request it is serving
//!   (hyper's graceful shutdown), then return once all are closed.

use crate::net::IpNet;
use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;

/// The connection limits of [`crate::config::Config`].
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    pub max_connections_per_address: usize,
    /// Bytes per second a response must at least be read at after `send_grace` (0: no
    /// limit).
    pub min_send_rate: u64,
    pub send_grace: Duration,
    pub max_response_bytes_in_flight: u64,
    pub max_response_bytes_per_address: u64,
    /// Peers exempt from the per-address caps (they carry many clients).
    pub trusted_proxies: Vec<IpNet>,
    /// Prefix lengths that make an address (as the budgets count callers).
    pub ipv4_prefix: u8,
    pub ipv6_prefix: u8,
}

impl Limits {
    /// How long `bytes` may take at `min_send_rate` (saturating; zero without a rate).
    fn send_time(&self, bytes: u64) -> Duration {
        if self.min_send_rate == 0 {
            return Duration::ZERO;
        }
        Duration::from_millis(bytes.saturating_mul(1000) / self.min_send_rate)
    }

    /// The key the per-address caps count `peer` under; `None` for a trusted proxy.
    fn address(&self, peer: SocketAddr) -> Option<String> {
        let ip = peer.ip();
        if self.trusted_proxies.iter().any(|n| n.contains(ip)) {
            return None;
        }
        Some(crate::caller::rate_key_ip(
            ip,
            self.ipv4_prefix,
            self.ipv6_prefix,
        ))
    }
}

/// How often a newcomer waiting at the connection cap looks for an idle connection to
/// close when none was idle.
const EVICT_RETRY: Duration = Duration::from_millis(250);

/// The first byte of a TLS handshake record (RFC 8446 §5.1, `ContentType.handshake`).
const TLS_HANDSHAKE: u8 = 0x16;

/// Serves `app` on `listener` until `shutdown` resolves; see the module doc.
pub(crate) async fn run(
    listener: TcpListener,
    app: Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let cap = limits.max_connections.clamp(1, u32::MAX as usize);
    let permits = Arc::new(Semaphore::new(cap));
    let limits = Arc::new(limits);
    let table = Arc::new(Table::new(limits.clone()));
    let (stop, stopping) = watch::channel(false);
    tokio::pin!(shutdown);
    'accept: loop {
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Per-connection errors (reset before accept) are normal; others
                    // (out of file descriptors) get a pause instead of a busy loop.
                    if !is_connection_error(&e) {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::select! {
                            () = tokio::time::sleep(Duration::from_millis(500)) => {},
                            () = &mut shutdown => break,
                        }
                    }
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let address = limits.address(peer);
        if let Some(a) = &address
            && !table.make_room_for(a)
        {
            // Every connection of this address has a request in progress.
            tracing::debug!("connection closed at accept: the address is at its cap");
            drop(tcp);
            continue;
        }
        // At the cap, close the longest-quiet idle connection; wait for it (or, when
        // every connection is busy, for any) to close.
        let permit = match permits.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                // Until one is told to close, look again now and then: a busy
                // connection may have become idle.
                let mut asked = false;
                loop {
                    if !asked {
                        asked = table.evict_idle(None);
                        if asked {
                            tracing::debug!(
                                "connection cap reached: the longest-idle connection closed"
                            );
                        }
                    }
                    tokio::select! {
                        p = permits.clone().acquire_owned() => {
                            break p.expect("the semaphore is never closed");
                        }
                        () = tokio::time::sleep(EVICT_RETRY), if !asked => {}
                        () = &mut shutdown => break 'accept,
                    }
                }
            }
        };
        // Request/response traffic: no Nagle delay on a response's last segment.
        let _ = tcp.set_nodelay(true);
        let clock = table.register(address);
        let conn = connection(
            tcp,
            peer,
            app.clone(),
            tls.clone(),
            limits.clone(),
            clock.clone(),
            stopping.clone(),
        );
        let table = table.clone();
        tokio::spawn(async move {
            conn.await;
            table.unregister(&clock);
            drop(permit);
        });
    }
    // Stop accepting (connections still in the backlog are reset), tell every
    // connection to finish, and wait until all have closed.
    drop(listener);
    let _ = stop.send(true);
    let _ = permits.acquire_many(cap as u32).await;
    Ok(())
}

fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

/// One connection, from accept to close.
async fn connection(
    tcp: TcpStream,
    peer: SocketAddr,
    app: Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: Arc<Limits>,
    clock: Arc<Clock>,
    stopping: watch::Receiver<bool>,
) {
    let Some(acceptor) = tls else {
        let io = Watched {
            inner: tcp,
            clock: clock.clone(),
        };
        return serve_http(io, peer, app, limits, clock, stopping).await;
    };
    let mut first = [0u8; 1];
    match tokio::time::timeout(limits.header_read_timeout, tcp.peek(&mut first)).await {
        Ok(Ok(1)) if first[0] == TLS_HANDSHAKE => {}
        Ok(Ok(1)) => return refuse_plain_http(tcp, limits.header_read_timeout).await,
        _ => return,
    }
    let io = Watched {
        inner: tcp,
        clock: clock.clone(),
    };
    let tls = match tokio::time::timeout(limits.header_read_timeout, acceptor.accept(io)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!("TLS handshake timed out");
            return;
        }
    };
    clock.reset();
    serve_http(tls, peer, app, limits, clock, stopping).await
}

/// Answers a plain-HTTP request sent to the TLS port with the API's JSON error (so a
/// client configured with `http://` gets a clear `bad_request`, not a broken
/// connection), then closes.
async fn refuse_plain_http(mut tcp: TcpStream, wait: Duration) {
    let body = serde_json::to_vec(&psi_http::ErrorBody {
        error: psi_http::ErrorCode::BadRequest,
        message: "this server speaks HTTPS: use an https:// URL".into(),
    })
    .unwrap_or_default();
    let head = format!(
        "HTTP/1.1 {} Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        psi_http::ErrorCode::BadRequest.status(),
        body.len()
    );
    let exchange = async {
        // Read the request head first: closing a socket with unread data resets it,
        // and the client would see a reset instead of the answer.
        let mut seen = Vec::new();
        let mut buf = [0u8; 2048];
        while !seen.windows(4).any(|w| w == b"\r\n\r\n") && seen.len() < 16 << 10 {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
        if tcp.write_all(head.as_bytes()).await.is_err() || tcp.write_all(&body).await.is_err() {
            return;
        }
        let _ = tcp.shutdown().await;
        // Drain what the client still sends (a request body) until it closes.
        while let Ok(n) = tcp.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(wait, exchange).await;
}

/// Runs HTTP/1.1 on `io` with the time limits of [`Clock`] and the response-bytes
/// admission of [`Table`].
async fn serve_http<IO>(
    io: IO,
    peer: SocketAddr,
    app: Router,
    limits: Arc<Limits>,
    clock: Arc<Clock>,
    mut stopping: watch::Receiver<bool>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service_clock = clock.clone();
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        // Handlers read the peer address (rate-limit identity without tokens).
        req.extensions_mut().insert(ConnectInfo(peer));
        let in_flight = service_clock.begin();
        let clock = service_clock.clone();
        let mut app = app.clone();
        async move {
            let resp = match clock.admit() {
                Ok(()) => tower_service::Service::call(&mut app, req).await?,
                Err(refusal) => refusal.response(),
            };
            // The response's bytes count as in flight until written to the socket.
            let size = http_body::Body::size_hint(resp.body());
            clock.sending(size.exact().unwrap_or(size.lower()));
            Ok::<_, Infallible>(resp.map(|body| {
                Body::new(Tracked {
                    inner: body,
                    _in_flight: in_flight,
                })
            }))
        }
    });
    // hyper's own header timer is off: it also runs while a keep-alive connection
    // waits, which would tie the idle limit to the header limit. The clock does both.
    let conn = hyper::server::conn::http1::Builder::new()
        .header_read_timeout(None)
        .serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let mut shutting_down = false;
    loop {
        let deadline = clock.deadline(&limits);
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            _ = stopping.wait_for(|&s| s), if !shutting_down => {
                shutting_down = true;
                conn.as_mut().graceful_shutdown();
            }
            // A request head started, a request ended, a response was handed over or
            // the connection was evicted: the deadline moved.
            () = clock.changed.notified() => {}
            () = sleep_until_or_forever(deadline) => {
                if let Some(d) = clock.deadline(&limits) && d <= Instant::now() {
                    tracing::debug!(
                        "connection closed: idle, slow request head, slow reader or evicted"
                    );
                    return;
                }
            }
        }
    }
}

async fn sleep_until_or_forever(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Why a request was refused before reaching the router (response bytes in flight).
enum Refusal {
    /// The client's address holds `max_response_bytes_per_address` unwritten bytes.
    Address { retry_after: u64 },
    /// The server holds `max_response_bytes_in_flight` and no response has been sending
    /// for `send_grace`.
    Busy,
}

impl Refusal {
    /// The API's JSON error for this refusal (`Connection: close`: the client's next try
    /// opens a new connection).
    fn response(&self) -> axum::response::Response {
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
struct Table {
    limits: Arc<Limits>,
    inner: Mutex<TableInner>,
}

#[derive(Default)]
struct TableInner {
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
    fn new(limits: Arc<Limits>) -> Self {
        Table {
            limits,
            inner: Mutex::new(TableInner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TableInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new connection of `address` (`None`: exempt from the per-address caps).
    fn register(self: &Arc<Self>, address: Option<String>) -> Arc<Clock> {
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
    fn unregister(&self, clock: &Clock) {
        let mut g = self.lock();
        g.conns.remove(&clock.id);
        let left = std::mem::take(&mut clock.lock().pending);
        g.release(clock.address.as_deref(), left);
    }

    /// Room for one more connection of `address`: true when it is below its cap or one
    /// of its idle connections was told to close; false when every one is busy.
    fn make_room_for(&self, address: &str) -> bool {
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
    fn evict_idle(&self, address: Option<&str>) -> bool {
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
struct Clock {
    id: u64,
    /// The per-address key (`None`: a trusted proxy, exempt).
    address: Option<String>,
    table: std::sync::Weak<Table>,
    limits: Arc<Limits>,
    state: Mutex<ClockState>,
    /// Woken when the deadline moves earlier (a head starts, a response is handed over,
    /// eviction) or appears (a request ends).
    changed: tokio::sync::Notify,
}

struct ClockState {
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
    fn reset(&self) {
        let mut s = self.lock();
        s.last_activity = Instant::now();
        s.head_started = None;
    }

    fn read(&self) {
        let now = Instant::now();
        let mut s = self.lock();
        s.last_activity = now;
        if s.in_flight == 0 && s.head_started.is_none() {
            s.head_started = Some(now);
            drop(s);
            self.changed.notify_one();
        }
    }

    fn wrote(&self, n: usize) {
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

    fn begin(self: &Arc<Self>) -> InFlight {
        let mut s = self.lock();
        s.in_flight += 1;
        s.head_started = None;
        InFlight(self.clone())
    }

    fn admit(&self) -> Result<(), Refusal> {
        match self.table.upgrade() {
            Some(t) => t.admit(self),
            None => Ok(()),
        }
    }

    /// A response of `bytes` was handed to hyper: its bytes count as in flight until
    /// written, and its write deadline starts (or, behind another response, grows).
    fn sending(&self, bytes: u64) {
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
    fn deadline(&self, limits: &Limits) -> Option<Instant> {
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
fn instant_after(t: Instant, d: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 86_400);
    t.checked_add(d.min(CENTURY)).unwrap_or(t)
}

/// A request in progress; dropped when hyper has taken its whole response body.
struct InFlight(Arc<Clock>);

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

/// A response body that keeps its request counted as in progress until it is dropped.
struct Tracked {
    inner: Body,
    _in_flight: InFlight,
}

impl http_body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A socket that reports the bytes it moves to the connection's [`Clock`].
struct Watched {
    inner: TcpStream,
    clock: Arc<Clock>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.clock.read();
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r
            && n > 0
        {
            self.clock.wrote(n);
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = r
            && n > 0
        {
            self.clock.wrote(n);
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(per_address: u64, total: u64, grace: Duration) -> Arc<Limits> {
        Arc::new(Limits {
            header_read_timeout: Duration::from_secs(20),
            idle_timeout: Duration::from_secs(30),
            max_connections: 512,
            max_connections_per_address: 2,
            min_send_rate: 1000,
            send_grace: grace,
            max_response_bytes_in_flight: total,
            max_response_bytes_per_address: per_address,
            trusted_proxies: vec!["10.0.0.0/8".parse().unwrap()],
            ipv4_prefix: 32,
            ipv6_prefix: 56,
        })
    }

    #[test]
    fn addresses_are_callers_and_trusted_proxies_are_exempt() {
        let l = limits(1, 1, Duration::ZERO);
        let a = |s: &str| l.address(SocketAddr::new(s.parse().unwrap(), 1));
        // One IPv6 /56 is one address; the next /56 another.
        assert_eq!(a("2001:db8:0:1::1"), a("2001:db8:0:ff::2"));
        assert_ne!(a("2001:db8:0:100::1"), a("2001:db8:0:1::1"));
        assert_ne!(a("192.0.2.1"), a("192.0.2.2"));
        assert_eq!(a("::ffff:192.0.2.1"), a("192.0.2.1"));
        assert_eq!(a("10.1.2.3"), None);
        assert_eq!(l.send_time(10_000), Duration::from_secs(10));
        assert_eq!(
            l.send_time(u64::MAX),
            Duration::from_millis(u64::MAX / 1000)
        );
    }

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
