//! The accept loop: TCP connections (optionally TLS), their time limits, the connection
//! caps, the bytes of responses in flight and graceful shutdown
//! (docs/adr/0019-tls-and-connection-limits.md, docs/adr/0037-connection-exposure.md).
//!
//! - At most `max_connections` connections are open. At the cap the connection that has
//!   been quiet longest among those with no request in progress and those whose request
//!   body is arriving (quiet since the body's last byte, or its head: the upload that has
//!   made the least progress) is closed to make room; only when every connection has a
//!   request in progress and none is uploading does the loop wait for one to close
//!   (further connections queue in the kernel's listen backlog).
//! - At most `max_connections_per_address` connections of one address (IPv4 address or
//!   IPv6 prefix, by `ipv4_prefix`/`ipv6_prefix`; trusted proxies are exempt), and
//!   `max_connections_per_block` of one address block (`ipv4_block_prefix`/
//!   `ipv6_block_prefix`): a newcomer beyond either closes that address's (block's)
//!   longest-quiet idle connection, or is itself closed.
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
//! - A request body must arrive within `upload_grace` plus its declared length (at most
//!   `max_body_bytes`; a body without a length: the bytes received so far) at
//!   `min_upload_rate`; a client that uploads slower is cut off
//!   (docs/adr/0045-upload-deadline-and-request-bytes.md).
//! - Body bytes received for requests in progress are counted per address and in total,
//!   until their request ends. A request with a body from an address holding
//!   `max_request_bytes_per_address` is refused (429 `rate_limited`); at
//!   `max_request_bytes_in_flight` the connection whose upload has been going longest
//!   (at least `upload_grace`) is closed, and only when there is none is the request
//!   refused (503 `too_many_sessions`).
//! - Requests in progress are otherwise bounded by the router's `request_timeout`.
//! - A response to a request whose body was not read to its end (a refusal before the
//!   body) says `connection: close`: hyper does not keep such a connection, and a
//!   keep-alive client would otherwise send its next request into the close.
//! - Lingering close: when hyper ends a connection (a response sent without reading its
//!   request's body, `connection: close`), the connection's write half is shut down and
//!   what the client still sends is read and discarded, until it closes or for at most
//!   [`LINGER_TIME`] and [`LINGER_BYTES`] (nginx's `lingering_close`): closing a socket
//!   with unread input resets it, and the client can lose the answer already sent. A
//!   lingering connection has no request in progress: it is idle in the table (evicted
//!   first at the caps) and under its idle and header-read limits.
//! - Shutdown: stop accepting, let every connection finish the request it is serving
//!   (hyper's graceful shutdown), then return once all are closed.

mod limits;
mod table;
mod watched;

pub(crate) use limits::Limits;

use self::table::{Clock, Table};
use self::watched::{Tracked, Uploaded, Watched};
use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderValue, header};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;

/// How often a newcomer waiting at the connection cap looks for an idle connection to
/// close when none was idle.
const EVICT_RETRY: Duration = Duration::from_millis(250);

/// The longest a closing connection reads and discards what the client still sends
/// (nginx's `lingering_time` is 30 s; a client that has its answer closes at once).
const LINGER_TIME: Duration = Duration::from_secs(5);

/// The most bytes a closing connection reads and discards.
const LINGER_BYTES: u64 = 16 << 20;

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
        let block = limits.block(peer);
        if let (Some(a), Some(b)) = (&address, &block)
            && !table.make_room_for(a, b)
        {
            // Every connection of this address (or block) has a request in progress.
            tracing::debug!("connection closed at accept: the address or its block is at its cap");
            drop(tcp);
            continue;
        }
        // At the cap, close the longest-quiet idle or uploading connection; wait for it
        // (or, when every connection is busy, for any) to close.
        let permit = match permits.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                // Until one is told to close, look again now and then: a busy
                // connection may have become idle.
                let mut asked = false;
                loop {
                    if !asked {
                        asked = table.evict_quietest();
                        if asked {
                            tracing::debug!(
                                "connection cap reached: the longest-quiet idle or uploading connection closed"
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
        let clock = table.register(address, block);
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
        // Boxed: hyper hands the socket back (`poll_without_shutdown`) only for an
        // `Unpin` service future.
        Box::pin(async move {
            use http_body::Body as _;
            let with_body = !req.body().is_end_stream();
            // Until the body's end has been read: then the answer closes the connection.
            let unread = Arc::new(AtomicBool::new(with_body));
            let mut resp = match clock.admit(with_body) {
                Ok(()) => {
                    // The body counts as an upload (deadline, bytes) until it has all
                    // arrived or is dropped unread.
                    let req = if with_body {
                        let declared = req.body().size_hint().exact();
                        let id = clock.upload_started(declared);
                        req.map(|body| {
                            Body::new(Uploaded::new(body, &in_flight, id, unread.clone()))
                        })
                    } else {
                        req.map(Body::new)
                    };
                    tower_service::Service::call(&mut app, req).await?
                }
                Err(refusal) => refusal.response(),
            };
            // Answered with its body unread (a refusal before the body): hyper will not
            // keep the connection, so the answer says so, or a keep-alive client sends
            // its next request into the close and loses it.
            if unread.load(Ordering::Relaxed) {
                resp.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            // The response's bytes count as in flight until written to the socket.
            let size = http_body::Body::size_hint(resp.body());
            clock.sending(size.exact().unwrap_or(size.lower()));
            Ok::<_, Infallible>(resp.map(|body| {
                Body::new(Tracked {
                    inner: body,
                    _in_flight: in_flight,
                })
            }))
        })
    });
    // hyper's own header timer is off: it also runs while a keep-alive connection
    // waits, which would tie the idle limit to the header limit. The clock does both.
    let mut conn = hyper::server::conn::http1::Builder::new()
        .header_read_timeout(None)
        .serve_connection(TokioIo::new(io), service);
    let mut shutting_down = false;
    loop {
        let deadline = clock.deadline(&limits);
        tokio::select! {
            r = std::future::poll_fn(|cx| conn.poll_without_shutdown(cx)) => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                break;
            }
            _ = stopping.wait_for(|&s| s), if !shutting_down => {
                shutting_down = true;
                std::pin::Pin::new(&mut conn).graceful_shutdown();
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
    // hyper is done with the connection (its answers are written): close it lingering.
    let io = conn.into_parts().io.into_inner();
    linger(io, &limits, &clock, stopping).await;
}

/// Shuts down the write half of `io` (the client reads the end of the answer) and reads
/// and discards its input until the client closes, for at most [`LINGER_TIME`] and
/// [`LINGER_BYTES`], or until the connection's own limits end it (idle, header read,
/// eviction) or the server stops; see the module doc.
async fn linger<IO>(mut io: IO, limits: &Limits, clock: &Clock, mut stopping: watch::Receiver<bool>)
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let until = Instant::now() + LINGER_TIME;
    let drain = async {
        if io.shutdown().await.is_err() {
            return;
        }
        let mut buf = vec![0u8; 16 << 10];
        let mut discarded = 0u64;
        while discarded < LINGER_BYTES {
            match io.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => discarded += n as u64,
            }
        }
    };
    tokio::pin!(drain);
    loop {
        let deadline = clock.deadline(limits).map_or(until, |d| d.min(until));
        tokio::select! {
            () = drain.as_mut() => return,
            _ = stopping.wait_for(|&s| s) => return,
            () = clock.changed.notified() => {}
            () = tokio::time::sleep_until(deadline) => {
                if Instant::now() >= until
                    || clock.deadline(limits).is_some_and(|d| d <= Instant::now())
                {
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
