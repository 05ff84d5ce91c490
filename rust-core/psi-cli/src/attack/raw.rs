//! HTTP/1.1 over a TCP socket bound to a chosen loopback source address, for `psi attack`:
//! every address of 127.0.0.0/8 reaches the server over loopback, so each attacker is a
//! caller of its own (and its own address block) without a trusted proxy.
//!
//! [`Conn`] is one keep-alive connection; [`RawTransport`] is a psi-client `Transport`
//! (one connection per request) that may read large bodies slowly, as a slow reader does.

use psi_client::{Method, Request, Response, Transport, TransportError};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::os::fd::FromRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Largest response head or chunk-size line read.
const MAX_HEAD: usize = 64 << 10;

/// A TCP connection from `source` to `server` (IPv4), connected within `timeout`;
/// `rcvbuf`: a receive buffer of about this many bytes (a slow reader's small window).
pub fn connect_from(
    source: Ipv4Addr,
    server: SocketAddrV4,
    timeout: Duration,
    rcvbuf: Option<usize>,
) -> std::io::Result<TcpStream> {
    fn check(r: libc::c_int) -> std::io::Result<()> {
        if r < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
    fn sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
        // SAFETY: sockaddr_in is plain data; all-zero is a valid value.
        let mut s: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        s.sin_family = libc::AF_INET as libc::sa_family_t;
        s.sin_port = a.port().to_be();
        s.sin_addr.s_addr = u32::from(*a.ip()).to_be();
        s
    }
    // SAFETY: plain socket calls on a descriptor this function owns; on any error it is
    // closed (the TcpStream built at once owns it from then on).
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        check(fd)?;
        let stream = TcpStream::from_raw_fd(fd);
        if let Some(bytes) = rcvbuf {
            let v = bytes as libc::c_int;
            check(libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            ))?;
        }
        let local = sockaddr(SocketAddrV4::new(source, 0));
        check(libc::bind(
            fd,
            (&local as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        ))?;
        // Linux bounds a blocking connect by the send timeout.
        stream.set_write_timeout(Some(timeout.max(Duration::from_millis(1))))?;
        let remote = sockaddr(server);
        check(libc::connect(
            fd,
            (&remote as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        ))?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }
}

/// The server's IPv4 socket address in `http://127.0.0.1:PORT[/...]`.
pub fn server_addr(base_url: &str) -> Result<SocketAddrV4, String> {
    let rest = base_url
        .strip_prefix("http://")
        .ok_or("the server URL must be http:// on IPv4 loopback")?;
    let host = rest.split('/').next().unwrap_or_default();
    match host.parse::<SocketAddr>() {
        Ok(SocketAddr::V4(a)) => Ok(a),
        _ => Err("the server URL must be http://IPv4:PORT".into()),
    }
}

/// A response read by [`Conn`].
#[derive(Debug, Default)]
pub struct RawResponse {
    /// Status code.
    pub status: u16,
    /// Headers (names lower-cased).
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: Vec<u8>,
}

impl RawResponse {
    /// The error code of a JSON error body (`"error":"..."`), or "" when there is none.
    pub fn code(&self) -> String {
        serde_json::from_slice::<serde_json::Value>(&self.body)
            .ok()
            .and_then(|v| v["error"].as_str().map(String::from))
            .unwrap_or_default()
    }

    /// `status` and, for an error, its code: `201`, `503 too_many_sessions`.
    pub fn outcome(&self) -> String {
        match self.code() {
            c if c.is_empty() => self.status.to_string(),
            c => format!("{} {c}", self.status),
        }
    }
}

/// How a body is read.
#[derive(Debug, Clone, Copy)]
pub struct ReadPolicy {
    /// A body longer than this is an error.
    pub max_body: u64,
    /// Bodies above [`SLOW_ABOVE`] bytes are read at about this many bytes per second.
    pub slow_rate: Option<u64>,
}

/// Bodies up to this size are read at full speed also by a slow reader.
pub const SLOW_ABOVE: u64 = 64 << 10;

/// One keep-alive HTTP/1.1 connection.
pub struct Conn {
    reader: BufReader<TcpStream>,
    host: String,
}

impl Conn {
    /// Connects from `source`; every later read and write is bounded by `io_timeout`.
    pub fn open(
        source: Ipv4Addr,
        server: SocketAddrV4,
        io_timeout: Duration,
        rcvbuf: Option<usize>,
    ) -> std::io::Result<Conn> {
        let s = connect_from(source, server, io_timeout, rcvbuf)?;
        s.set_read_timeout(Some(io_timeout))?;
        s.set_write_timeout(Some(io_timeout))?;
        Ok(Conn {
            reader: BufReader::new(s),
            host: server.to_string(),
        })
    }

    /// Sends one request (`Content-Length` set from `body`).
    pub fn send(
        &mut self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<()> {
        let mut head = format!(
            "{} {path} HTTP/1.1\r\nhost: {}\r\n",
            method.as_str(),
            self.host
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        if !body.is_empty() || method == Method::Post {
            head.push_str(&format!("content-length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        let s = self.reader.get_mut();
        s.write_all(head.as_bytes())?;
        s.write_all(body)
    }

    /// Sends a request and reads its response at full speed (bodies up to 256 MiB).
    pub fn request(
        &mut self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<RawResponse> {
        self.send(method, path, headers, body)?;
        self.read_response(
            ReadPolicy {
                max_body: 256 << 20,
                slow_rate: None,
            },
            None,
        )
    }

    /// Reads one response; `stop` set (checked between slow reads) abandons it.
    pub fn read_response(
        &mut self,
        policy: ReadPolicy,
        stop: Option<&AtomicBool>,
    ) -> std::io::Result<RawResponse> {
        let status_line = self.line()?;
        let status = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad("no status line"))?;
        let mut headers = Vec::new();
        loop {
            let l = self.line()?;
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let find = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        let mut body = Vec::new();
        if status == 204 || status == 304 || (100..200).contains(&status) {
        } else if let Some(len) = find("content-length") {
            let len: u64 = len.parse().map_err(|_| bad("bad content-length"))?;
            if len > policy.max_body {
                return Err(bad("response body over the cap"));
            }
            self.body(len, &mut body, policy, stop)?;
        } else if find("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
            loop {
                let size = self.line()?;
                let size = size.split(';').next().unwrap_or_default().trim();
                let size = u64::from_str_radix(size, 16).map_err(|_| bad("bad chunk size"))?;
                if size == 0 {
                    while !self.line()?.is_empty() {}
                    break;
                }
                if body.len() as u64 + size > policy.max_body {
                    return Err(bad("response body over the cap"));
                }
                self.body(size, &mut body, policy, stop)?;
                self.line()?;
            }
        } else {
            (&mut self.reader)
                .take(policy.max_body + 1)
                .read_to_end(&mut body)?;
            if body.len() as u64 > policy.max_body {
                return Err(bad("response body over the cap"));
            }
        }
        Ok(RawResponse {
            status,
            headers,
            body,
        })
    }

    fn body(
        &mut self,
        len: u64,
        out: &mut Vec<u8>,
        policy: ReadPolicy,
        stop: Option<&AtomicBool>,
    ) -> std::io::Result<()> {
        let start = out.len();
        match policy.slow_rate {
            Some(rate) if len > SLOW_ABOVE => {
                // A tenth of a second's worth per read, then a pause.
                let piece = (rate / 10).max(1) as usize;
                out.resize(start + len as usize, 0);
                let mut at = start;
                while at < out.len() {
                    if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                        return Err(bad("stopped"));
                    }
                    let end = (at + piece).min(out.len());
                    self.reader.read_exact(&mut out[at..end])?;
                    at = end;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Ok(())
            }
            _ => {
                let got = (&mut self.reader).take(len).read_to_end(out)?;
                if (got as u64) < len {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                Ok(())
            }
        }
    }

    fn line(&mut self) -> std::io::Result<String> {
        let mut buf = Vec::new();
        (&mut self.reader)
            .take(MAX_HEAD as u64)
            .read_until(b'\n', &mut buf)?;
        if buf.is_empty() {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if buf.last() != Some(&b'\n') {
            return Err(bad("line too long"));
        }
        Ok(String::from_utf8_lossy(&buf).trim_end().to_string())
    }
}

fn bad(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string())
}

/// A psi-client transport from one source address, one connection per request; with a
/// slow rate it reads bodies above [`SLOW_ABOVE`] bytes at that rate through a small
/// receive window (a slow reader), and `stop` abandons a request under way.
pub struct RawTransport {
    source: Ipv4Addr,
    slow_rate: Option<u64>,
    stop: Arc<AtomicBool>,
    /// Sent as `X-Forwarded-For` (the client's address, `source` being its proxy's).
    forwarded_for: Option<Ipv4Addr>,
}

impl RawTransport {
    /// A transport from `source`; `slow_rate` in bytes per second.
    pub fn new(source: Ipv4Addr, slow_rate: Option<u64>, stop: Arc<AtomicBool>) -> Self {
        RawTransport {
            source,
            slow_rate,
            stop,
            forwarded_for: None,
        }
    }

    /// A transport for the client at `client` behind a reverse proxy at `proxy`: every
    /// request comes from `proxy` with `X-Forwarded-For: client`, as a proxy that appends
    /// the address it sees sends it.
    pub fn via_proxy(client: Ipv4Addr, proxy: Ipv4Addr, stop: Arc<AtomicBool>) -> Self {
        RawTransport {
            forwarded_for: Some(client),
            ..RawTransport::new(proxy, None, stop)
        }
    }
}

impl Transport for RawTransport {
    fn send(&self, request: Request) -> Result<Response, TransportError> {
        let err = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
                TransportError::timed_out(e.to_string())
            }
            _ => TransportError::failed(e.to_string()),
        };
        let server = server_addr(&request.url).map_err(TransportError::failed)?;
        let path = request
            .url
            .trim_start_matches("http://")
            .find('/')
            .map_or("/".to_string(), |i| {
                request.url.trim_start_matches("http://")[i..].to_string()
            });
        let deadline = Instant::now() + request.timeout;
        let rcvbuf = self.slow_rate.map(|_| 4096);
        let mut conn = Conn::open(self.source, server, request.timeout, rcvbuf).map_err(err)?;
        let mut headers: Vec<(&str, &str)> = request
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        headers.push(("connection", "close"));
        let forwarded = self.forwarded_for.map(|a| a.to_string());
        if let Some(a) = &forwarded {
            headers.push(("x-forwarded-for", a));
        }
        conn.send(request.method, &path, &headers, &request.body)
            .map_err(err)?;
        let r = conn
            .read_response(
                ReadPolicy {
                    max_body: request.max_response_bytes,
                    slow_rate: self.slow_rate,
                },
                Some(&self.stop),
            )
            .map_err(err)?;
        if Instant::now() > deadline {
            return Err(TransportError::timed_out("timed out"));
        }
        Ok(Response {
            status: r.status,
            headers: r.headers,
            body: r.body,
        })
    }
}
