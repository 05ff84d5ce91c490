//! What reports to a connection's [`Clock`]: the socket ([`Watched`]: bytes read and
//! written) and the response body ([`Tracked`]: the request in progress until hyper has
//! taken all of it).

use super::table::{Clock, InFlight};
use axum::body::Body;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A response body that keeps its request counted as in progress until it is dropped.
pub(super) struct Tracked {
    pub(super) inner: Body,
    pub(super) _in_flight: InFlight,
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
pub(super) struct Watched {
    pub(super) inner: TcpStream,
    pub(super) clock: Arc<Clock>,
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

/// A request body that reports what arrives to the connection's [`Clock`]: its bytes
/// count as request bytes until the request ends, and the upload is over (its deadline
/// gone) at the body's end or when it is dropped unread; `unread` is cleared at its end.
pub(super) struct Uploaded {
    inner: hyper::body::Incoming,
    clock: Arc<Clock>,
    uploaded: Arc<std::sync::atomic::AtomicU64>,
    id: u64,
    /// True until the body's end has been read.
    unread: Arc<AtomicBool>,
}

impl Uploaded {
    pub(super) fn new(
        inner: hyper::body::Incoming,
        request: &InFlight,
        id: u64,
        unread: Arc<AtomicBool>,
    ) -> Self {
        Uploaded {
            inner,
            clock: request.clock().clone(),
            uploaded: request.uploaded(),
            id,
            unread,
        }
    }

    fn ended(&self) {
        self.unread.store(false, Ordering::Relaxed);
        self.clock.upload_done(self.id);
    }
}

impl http_body::Body for Uploaded {
    type Data = axum::body::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        match &r {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.clock
                        .received(self.id, data.len() as u64, &self.uploaded);
                }
                if self.inner.is_end_stream() {
                    self.ended();
                }
            }
            Poll::Ready(None) => self.ended(),
            Poll::Ready(Some(Err(_))) => self.clock.upload_done(self.id),
            Poll::Pending => {}
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Uploaded {
    fn drop(&mut self) {
        self.clock.upload_done(self.id);
    }
}
