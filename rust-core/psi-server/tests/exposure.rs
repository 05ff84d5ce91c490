//! The server's connection layer against callers who try to lock others out
//! (docs/adr/0037-connection-exposure.md, issue 23 items 3 and 4), over raw TCP on
//! loopback. Callers are told apart by their source address: client sockets are bound to
//! 127.0.0.2, 127.0.0.3, ... (all loopback on Linux) before connecting to the server on
//! 127.0.0.1.
//!
//! A slow reader is a connection with pipelined `GET /v1/probe` requests (256 KiB each,
//! far more in all than the kernel's socket buffers hold) that reads slowly or not at
//! all, so the server keeps unwritten response bytes. Whether the server cut it off is
//! read from the bytes it delivered: a connection the server closed ends before the
//! last response.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Probe responses per slow reader and their size: 16 MiB in all.
const PROBES: usize = 64;
const PROBE: usize = 256 * 1024;

fn server(f: impl FnOnce(&mut psi_server::Config)) -> psi_server::RunningServer {
    let mut c = config("exposure");
    fill(&c, 20, |_| false);
    c.probe_bytes_per_hour = 0;
    c.idle_timeout = Duration::from_secs(30);
    c.header_read_timeout = Duration::from_secs(30);
    f(&mut c);
    start(c)
}

/// A connection to `srv` from 127.0.0.`host`, with a small receive buffer when `small`
/// (so the client's kernel does not read ahead for a slow reader).
fn connect_from(srv: &psi_server::RunningServer, host: u8, small: bool) -> TcpStream {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    let to = srv.addr;
    let s = rt
        .block_on(async move {
            let socket = tokio::net::TcpSocket::new_v4()?;
            if small {
                socket.set_recv_buffer_size(4096)?;
            }
            socket.bind(SocketAddr::from((Ipv4Addr::new(127, 0, 0, host), 0)))?;
            socket.connect(to).await?.into_std()
        })
        .unwrap();
    s.set_nonblocking(false).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

const HEALTH: &[u8] = b"GET /v1/health HTTP/1.1\r\nhost: x\r\n\r\n";

fn get(srv: &psi_server::RunningServer, host: u8, request: &[u8]) -> (u16, String) {
    let mut s = connect_from(srv, host, false);
    s.write_all(request).unwrap();
    read_response(&mut s)
}

fn probe_request() -> String {
    format!("GET /v1/probe?bytes={PROBE} HTTP/1.1\r\nhost: x\r\n\r\n")
}

/// A slow reader from 127.0.0.`host`: `PROBES` pipelined probe requests, nothing read.
fn slow_reader(srv: &psi_server::RunningServer, host: u8) -> TcpStream {
    let mut s = connect_from(srv, host, true);
    s.write_all(probe_request().repeat(PROBES).as_bytes())
        .unwrap();
    s
}

/// Reads `s` to its end, `pace` bytes per 50 ms for `slow_for`, then as fast as it
/// comes; returns the bytes received (a reset or 10 s without a byte end it too).
fn drain(s: &mut TcpStream, pace: usize, slow_for: Duration) -> usize {
    let t = Instant::now();
    let mut total = 0;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let want = if t.elapsed() < slow_for {
            std::thread::sleep(Duration::from_millis(50));
            pace
        } else {
            buf.len()
        };
        match s.read(&mut buf[..want]) {
            Ok(0) => return total,
            Ok(n) => total += n,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return total,
            // Nothing more for the read timeout and not closed: the server kept it open.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return total;
            }
            Err(e) => panic!("reading the slow connection: {e} after {total} bytes"),
        }
        assert!(
            t.elapsed() < slow_for + Duration::from_secs(60),
            "still reading after {total} bytes"
        );
    }
}

/// All `PROBES` bodies (and their heads): what a connection the server never cut
/// delivers.
fn everything() -> usize {
    PROBES * PROBE
}

#[test]
fn a_slow_reader_is_cut_off_while_an_honest_client_completes() {
    let srv = server(|c| {
        c.min_send_rate = 64 * 1024;
        c.send_grace = Duration::from_secs(1);
    });
    let mut slow = slow_reader(&srv, 2);
    // While it reads 5 KB/s (a response may take 1 s + 4 s at 64 KiB/s), an honest
    // client on another address reads its probe at full speed.
    let honest = std::thread::spawn({
        let url = srv.addr;
        move || {
            std::thread::sleep(Duration::from_secs(2));
            let mut s = TcpStream::connect(url).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s.write_all(probe_request().as_bytes()).unwrap();
            let (status, head) = read_response(&mut s);
            (status, head)
        }
    });
    let got = drain(&mut slow, 256, Duration::from_secs(12));
    let (status, head) = honest.join().unwrap();
    assert_eq!(status, 200, "{head}");
    assert!(
        got < everything(),
        "the slow reader got all {got} bytes: it was not cut off"
    );
}

#[test]
fn an_address_holding_unread_responses_is_refused_and_another_is_served() {
    let srv = server(|c| {
        c.min_send_rate = 0;
        c.max_response_bytes_per_address = 64 * 1024;
    });
    let mut slow = slow_reader(&srv, 2);
    std::thread::sleep(Duration::from_secs(1));
    // The same address on another connection: refused with the rate-limit code.
    let (status, head) = get(&srv, 2, HEALTH);
    assert_eq!(status, 429, "{head}");
    assert!(head.contains("retry-after:"), "{head}");
    // Another address is served, large responses too.
    assert_eq!(get(&srv, 3, HEALTH).0, 200);
    assert_eq!(get(&srv, 3, probe_request().as_bytes()).0, 200);
    // Once the reader catches up, the address is served again.
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0;
    while total < everything() {
        let n = slow.read(&mut buf).unwrap();
        assert!(n > 0, "closed after {total} bytes");
        total += n;
    }
    assert_eq!(get(&srv, 2, HEALTH).0, 200);
}

#[test]
fn at_the_bytes_cap_the_longest_sending_connection_is_closed_for_a_newcomer() {
    let srv = server(|c| {
        c.min_send_rate = 0;
        c.send_grace = Duration::from_secs(1);
        c.max_response_bytes_in_flight = 64 * 1024;
    });
    let mut slow = slow_reader(&srv, 2);
    std::thread::sleep(Duration::from_millis(2500));
    // The newcomer is admitted and the slow reader, sending for more than the grace,
    // is closed to make room.
    assert_eq!(get(&srv, 3, HEALTH).0, 200);
    let got = drain(&mut slow, usize::MAX >> 1, Duration::ZERO);
    assert!(got < everything(), "the slow reader was not closed");
}

/// A request in progress that does not end by itself: a POST whose body is still
/// arriving.
fn busy(srv: &psi_server::RunningServer, host: u8) -> TcpStream {
    let mut s = connect_from(srv, host, false);
    s.write_all(
        b"POST /v1/sessions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{",
    )
    .unwrap();
    s
}

#[test]
fn one_address_cannot_take_every_connection() {
    let srv = server(|c| {
        c.max_connections = 6;
        c.max_connections_per_address = 2;
    });
    // Six connections from one address, each with a request in progress: the address
    // keeps two, the others are closed at accept.
    let mut held: Vec<TcpStream> = (0..6)
        .map(|_| {
            let s = busy(&srv, 2);
            // Time for the server to read the head: the request is in progress.
            std::thread::sleep(Duration::from_millis(200));
            s
        })
        .collect();
    let mut closed = 0;
    for s in &mut held {
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut b = [0u8; 1];
        match s.read(&mut b) {
            Ok(0) => closed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => closed += 1,
            _ => {}
        }
    }
    assert_eq!(closed, 4, "the address keeps its two connections");
    // Another address is served at once.
    let mut other = connect_from(&srv, 3, false);
    other
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    other.write_all(HEALTH).unwrap();
    assert_eq!(read_response(&mut other).0, 200);
}

#[test]
fn a_newcomer_at_the_address_cap_replaces_its_idle_connection() {
    let srv = server(|c| {
        c.max_connections_per_address = 1;
    });
    let mut first = connect_from(&srv, 2, false);
    first.write_all(HEALTH).unwrap();
    assert_eq!(read_response(&mut first).0, 200);
    // The server counts the connection idle once it has finished the response's
    // bookkeeping, which can trail the last byte the client reads by a moment on a loaded
    // machine (a newcomer in that moment finds no idle connection and is closed: seen
    // once in a CI run on 2 cores). As the connection-cap test below does, let it settle.
    std::thread::sleep(Duration::from_millis(200));
    // The same address again: its idle connection is closed, the newcomer served.
    assert_eq!(get(&srv, 2, HEALTH).0, 200);
    let mut b = [0u8; 1];
    match first.read(&mut b) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        r => panic!("the idle connection is still open: {r:?}"),
    }
}

#[test]
fn at_the_connection_cap_the_longest_idle_connection_is_closed() {
    let srv = server(|c| {
        c.max_connections = 2;
    });
    let mut first = connect_from(&srv, 2, false);
    first.write_all(HEALTH).unwrap();
    assert_eq!(read_response(&mut first).0, 200);
    std::thread::sleep(Duration::from_millis(200));
    let mut second = connect_from(&srv, 3, false);
    second.write_all(HEALTH).unwrap();
    assert_eq!(read_response(&mut second).0, 200);
    // A third address at the cap is served; the longest idle (the first) is closed.
    let mut third = connect_from(&srv, 4, false);
    third.write_all(HEALTH).unwrap();
    assert_eq!(read_response(&mut third).0, 200);
    let mut b = [0u8; 1];
    match first.read(&mut b) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        r => panic!("the longest-idle connection is still open: {r:?}"),
    }
    second.write_all(HEALTH).unwrap();
    assert_eq!(read_response(&mut second).0, 200, "the newer one is kept");
}

#[test]
fn health_is_rate_limited_per_address_and_the_connection_closed() {
    let srv = server(|c| {
        c.health_per_hour = 3;
    });
    let mut s = connect_from(&srv, 2, false);
    for _ in 0..3 {
        s.write_all(HEALTH).unwrap();
        assert_eq!(read_response(&mut s).0, 200);
    }
    s.write_all(HEALTH).unwrap();
    let (status, head) = read_response(&mut s);
    assert_eq!(status, 429, "{head}");
    assert!(head.contains("retry-after:"), "{head}");
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(
        rest.is_empty(),
        "the connection is closed after the refusal"
    );
    // The body carries the existing rate-limit code.
    let mut t = connect_from(&srv, 2, false);
    t.write_all(HEALTH).unwrap();
    let mut answer = Vec::new();
    let _ = t.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.contains(&format!(
            r#""error":"{}""#,
            psi_http::ErrorCode::RateLimited.as_str()
        )),
        "{answer}"
    );
    // Another address is not limited.
    assert_eq!(get(&srv, 3, HEALTH).0, 200);
}
