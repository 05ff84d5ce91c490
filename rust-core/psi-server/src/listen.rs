//! The accept loop: TCP connections (optionally TLS), their time limits, the connection
//! cap and graceful shutdown (docs/adr/0019-tls-and-connection-limits.md).
//!
//! - At most `max_connections` connections are open; at the cap the loop stops
//!   accepting, so further connections wait in the kernel's listen backlog (queued, not
//!   refused) until one closes.
//! - A connection with no request in progress is closed when the client sends nothing
//!   for `idle_timeout` (a fresh connection, or keep-alive after a response), or when a
//!   request head that has started to arrive is not complete `header_read_timeout`
//!   after its first byte. A TLS handshake must finish within `header_read_timeout`.
//! - Requests in progress are bounded by the router's `request_timeout`, not here.
//! - Shutdown: stop accepting, let every connection finish the request it is serving
//!   (hyper's graceful shutdown), then return once all are closed.

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
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

/// The connection limits of [`crate::Config`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
}

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
    let (stop, stopping) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        // At the cap, wait for a connection to close before accepting the next one.
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => p.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
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
        // Request/response traffic: no Nagle delay on a response's last segment.
        let _ = tcp.set_nodelay(true);
        let conn = connection(
            tcp,
            peer,
            app.clone(),
            tls.clone(),
            limits,
            stopping.clone(),
        );
        tokio::spawn(async move {
            conn.await;
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
    limits: Limits,
    stopping: watch::Receiver<bool>,
) {
    let clock = Arc::new(Clock::new());
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

/// Runs HTTP/1.1 on `io` with the header-read and idle limits of [`Clock`].
async fn serve_http<IO>(
    io: IO,
    peer: SocketAddr,
    app: Router,
    limits: Limits,
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
        let mut app = app.clone();
        async move {
            let resp = tower_service::Service::call(&mut app, req).await?;
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
            // A request head started or a request ended: the deadline moved.
            () = clock.changed.notified() => {}
            () = sleep_until_or_forever(deadline) => {
                if let Some(d) = clock.deadline(&limits) && d <= Instant::now() {
                    tracing::debug!("connection closed: idle or slow request head");
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

/// What a connection's time limits watch: bytes moving, and requests in progress.
struct Clock {
    state: Mutex<ClockState>,
    /// Woken when the deadline moves earlier (a head starts) or appears (a request ends).
    changed: tokio::sync::Notify,
}

struct ClockState {
    /// Requests whose response body has not been fully handed to hyper.
    in_flight: usize,
    /// Last byte read or written, or the last request's end.
    last_activity: Instant,
    /// First byte of a request head not yet complete (no request in progress).
    head_started: Option<Instant>,
}

impl Clock {
    fn new() -> Self {
        Clock {
            state: Mutex::new(ClockState {
                in_flight: 0,
                last_activity: Instant::now(),
                head_started: None,
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

    fn wrote(&self) {
        self.lock().last_activity = Instant::now();
    }

    fn begin(self: &Arc<Self>) -> InFlight {
        let mut s = self.lock();
        s.in_flight += 1;
        s.head_started = None;
        InFlight(self.clone())
    }

    /// When the connection must close if nothing changes; `None` while a request is in
    /// progress.
    fn deadline(&self, limits: &Limits) -> Option<Instant> {
        let s = self.lock();
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
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.clock.wrote();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.clock.wrote();
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
