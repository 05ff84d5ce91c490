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
    connect_at(srv, Ipv4Addr::new(127, 0, 0, host), small)
}

/// A connection to `srv` from `from` (any address of 127.0.0.0/8).
fn connect_at(srv: &psi_server::RunningServer, from: Ipv4Addr, small: bool) -> TcpStream {
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
            socket.bind(SocketAddr::from((from, 0)))?;
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

/// `POST /v1/sessions` with a declared body that never comes (issue 35 item 1): the
/// request is in progress, and before the upload deadline it held its connection for
/// the whole request timeout.
fn stalled_upload(srv: &psi_server::RunningServer, host: u8) -> TcpStream {
    let mut s = connect_from(srv, host, false);
    s.write_all(
        b"POST /v1/sessions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 64\r\n\r\n",
    )
    .unwrap();
    s
}

/// Whether the server closed `s` within `within` (a reset counts; a response does not).
fn closed_within(mut s: &TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut b = [0u8; 256];
    match s.read(&mut b) {
        Ok(0) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        Ok(_) => false,
    }
}

/// Issue 35 item 1: every connection is taken by an upload that never sends its body
/// (one per address, so the per-address cap does not act). A newcomer is served at
/// once: the upload that made the least progress is closed for it. Before the fix the
/// newcomer waited in the listen backlog for the 120 s request timeout.
#[test]
fn at_the_connection_cap_a_stalled_upload_is_closed_for_a_newcomer() {
    let srv = server(|c| {
        c.max_connections = 8;
        c.request_timeout = Duration::from_secs(120);
    });
    let held: Vec<TcpStream> = (0..8).map(|i| stalled_upload(&srv, 2 + i)).collect();
    std::thread::sleep(Duration::from_millis(500));
    let mut s = connect_from(&srv, 20, false);
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(HEALTH).unwrap();
    assert_eq!(read_response(&mut s).0, 200, "the newcomer was served");
    // One of the stalled uploads was closed for it.
    let closed = held
        .iter()
        .filter(|s| closed_within(s, Duration::from_millis(300)))
        .count();
    assert_eq!(closed, 1, "one stalled upload closed");
}

/// Issue 35 item 1: an upload must arrive within the upload grace plus its declared
/// length at the minimum upload rate; a stalled one is cut off long before the request
/// timeout. Before the fix it was answered `408` only after the 120 s timeout.
#[test]
fn a_stalled_upload_is_cut_off_at_its_upload_deadline() {
    let srv = server(|c| {
        c.request_timeout = Duration::from_secs(120);
        c.upload_grace = Duration::from_secs(1);
        c.min_upload_rate = 1024;
    });
    let s = stalled_upload(&srv, 2);
    let t = Instant::now();
    // 1 s of grace and 64 bytes at 1 KiB/s.
    assert!(closed_within(&s, Duration::from_secs(6)), "not cut off");
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(900), "cut off after {took:?}");
    // An upload that arrives in time is served.
    dh_session(&srv, 3, 10);
}

/// Issue 35 item 2: a JSON route refuses a declared body above its few KiB before reading
/// any of it (`413 body_too_large` at once). Before the fix every route took 8 MiB and
/// the server waited for the body.
#[test]
fn a_json_route_refuses_a_large_declared_body_before_reading_it() {
    let srv = server(|_| {});
    let mut s = connect_from(&srv, 2, false);
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(
        b"POST /v1/sessions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000000\r\n\r\n",
    )
    .unwrap();
    let (status, head) = read_response(&mut s);
    assert_eq!(status, 413, "{head}");
}

/// Creates a DH-PSI session of `n` items from 127.0.0.`host`; its id and epoch.
fn dh_session(srv: &psi_server::RunningServer, host: u8, n: u32) -> (String, u32) {
    let body = format!(r#"{{"protocol":"dh-psi","client_items":{n}}}"#);
    let mut s = connect_from(srv, host, false);
    s.write_all(
        format!(
            "POST /v1/sessions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    let v: serde_json::Value = loop {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&data));
        data.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&data);
        if let Some(i) = text.find("\r\n\r\n")
            && let Ok(v) = serde_json::from_str(&text[i + 4..])
        {
            break v;
        }
    };
    (
        v["session_id"].as_str().unwrap().to_string(),
        v["epoch"].as_u64().unwrap() as u32,
    )
}

/// Issue 35 item 2: a round route of a session without rounds (DH-PSI) is refused before
/// its body is read (`409 wrong_phase` at once). Before the fix the server read up to
/// 8 MiB first.
#[test]
fn a_round_of_a_session_without_rounds_is_refused_before_its_body() {
    let srv = server(|_| {});
    let (id, _) = dh_session(&srv, 2, 10);
    let mut s = connect_from(&srv, 2, false);
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(
        format!(
            "POST /v1/sessions/{id}/ot/round HTTP/1.1\r\nhost: x\r\ncontent-type: application/octet-stream\r\ncontent-length: 4000000\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let (status, head) = read_response(&mut s);
    assert_eq!(status, 409, "{head}");
}

/// Issue 35 item 2: request body bytes being received count against a server-wide cap,
/// as response bytes do. Two uploads hold more than the cap (their last byte never
/// sent); a third upload is refused (`503 too_many_sessions`), while a request without a
/// body is still served. Before the fix the third was read and answered whatever the
/// bytes held.
#[test]
fn request_bytes_being_received_are_capped_server_wide() {
    let n = 1000;
    let srv = server(|c| {
        c.max_request_bytes_in_flight = 48 * 1024;
        c.upload_grace = Duration::from_secs(60);
    });
    let len = psi_core::dh::sizes::query(n as u64) as usize;
    assert!(2 * len > 48 * 1024, "two queries hold more than the cap");
    // Sessions first: creating one is an upload too.
    let sessions: Vec<_> = (2..=4).map(|host| dh_session(&srv, host, n)).collect();
    let mut held = Vec::new();
    for (host, (id, epoch)) in [2, 3].into_iter().zip(&sessions) {
        let q = common::query(*epoch, n as usize);
        let mut s = connect_from(&srv, host, false);
        s.write_all(
            format!(
                "POST /v1/sessions/{id}/dh/query HTTP/1.1\r\nhost: x\r\ncontent-type: application/octet-stream\r\ncontent-length: {len}\r\n\r\n"
            )
            .as_bytes(),
        )
        .unwrap();
        s.write_all(&q[..len - 1]).unwrap();
        held.push(s);
    }
    std::thread::sleep(Duration::from_millis(500));
    let (id, epoch) = &sessions[2];
    let q = common::query(*epoch, n as usize);
    let mut s = connect_from(&srv, 4, false);
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(
        format!(
            "POST /v1/sessions/{id}/dh/query HTTP/1.1\r\nhost: x\r\ncontent-type: application/octet-stream\r\ncontent-length: {len}\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let _ = s.write_all(&q);
    let (status, head) = read_response(&mut s);
    assert_eq!(status, 503, "{head}");
    assert_eq!(get(&srv, 5, HEALTH).0, 200);
    // Once the held uploads end, uploads are taken again.
    drop(held);
    std::thread::sleep(Duration::from_millis(500));
    let mut s = connect_from(&srv, 4, false);
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(
        format!(
            "POST /v1/sessions/{id}/dh/query HTTP/1.1\r\nhost: x\r\ncontent-type: application/octet-stream\r\ncontent-length: {len}\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    s.write_all(&q).unwrap();
    assert_eq!(read_response(&mut s).0, 200);
}

/// Issue 35 item 1: connections are capped per address block (an IPv4 /24) as well as
/// per address: three addresses of one /24 keep three busy connections between them,
/// and an address of another block is served.
#[test]
fn one_address_block_cannot_take_every_connection() {
    let srv = server(|c| {
        c.max_connections = 16;
        c.max_connections_per_address = 2;
        c.max_connections_per_block = 3;
    });
    let mut held: Vec<TcpStream> = Vec::new();
    for host in [2, 3, 4] {
        for _ in 0..2 {
            held.push(busy(&srv, host));
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let closed = held
        .iter()
        .filter(|s| closed_within(s, Duration::from_millis(300)))
        .count();
    assert_eq!(closed, 3, "the block keeps three connections");
    let mut other = connect_at(&srv, Ipv4Addr::new(127, 0, 1, 2), false);
    other.write_all(HEALTH).unwrap();
    assert_eq!(read_response(&mut other).0, 200, "another block is served");
}

/// Issue 35 item 1: an OT-PSI round whose upload makes no progress does not keep its run
/// alive: the run is idle after `ot_idle_timeout` and its OT slot is freed for the next
/// session. Before the fix the request counted as in progress from its head, so the run
/// held the server's only slot until the request timeout (`503 ot_capacity`).
#[test]
fn an_ot_round_whose_upload_stalls_frees_its_slot() {
    use psi_client::Method;
    let srv = server(|c| {
        c.max_ot_sessions = 1;
        c.ot_idle_timeout = Duration::from_secs(1);
        c.ot_hello_timeout = Duration::from_secs(60);
        c.session_idle_timeout = Duration::from_secs(60);
        c.request_timeout = Duration::from_secs(120);
        c.upload_grace = Duration::from_secs(60);
    });
    let t = common::raw(&srv);
    let id = common::session_id(&common::session(&t, "ot-psi", 3, &[]));
    let mut rng = <rand_chacha::ChaCha20Rng as rand_core::SeedableRng>::from_seed([9; 32]);
    let set = psi_core::ItemSet::new(["a", "b", "c"].map(String::from));
    let (_client, hello) = psi_core::Protocol::Ot
        .start_chunked_client(set, psi_core::Threads::ONE, 8 << 20, false, &mut rng)
        .unwrap()
        .unwrap();
    let round = format!("/v1/sessions/{id}/ot/round");
    let bin = [("content-type", psi_http::BINARY)];
    assert_eq!(
        common::send(&t, Method::Post, &round, &bin, &hello).status,
        200
    );
    // The next round's head, and no body.
    let mut stalled = connect_from(&srv, 1, false);
    stalled
        .write_all(
            format!(
                "POST {round} HTTP/1.1\r\nhost: x\r\ncontent-type: application/octet-stream\r\ncontent-length: 1000\r\n\r\n"
            )
            .as_bytes(),
        )
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let next = common::session(&t, "ot-psi", 3, &[]);
    assert_eq!(next.status, 201, "{}", String::from_utf8_lossy(&next.body));
    drop(stalled);
}

/// Issue 35 item 2, the rounds after the hello: an OT-PSI or CM20-PSI round declaring
/// more bytes than the rest of its run's matrix (one chunk of every row or column not
/// yet sent, as the session's state machine knows it) is refused `413 body_too_large`
/// before its body is read, and the run goes on. Before the fix these rounds took up to
/// `max_body_bytes`: a declared length without its body was waited for (no answer), and
/// a longer body was read whole and refused `400`.
#[test]
fn a_round_longer_than_the_rest_of_its_matrix_is_refused_before_its_body() {
    use psi_client::Method;
    use psi_core::chunked::ClientStep;
    let srv = server(|c| {
        c.enable_cm20 = true;
        c.upload_grace = Duration::from_secs(60);
        c.request_timeout = Duration::from_secs(120);
    });
    let t = common::raw(&srv);
    let bin = [("content-type", psi_http::BINARY)];
    for (protocol, name, path) in [
        (psi_core::Protocol::Ot, "ot-psi", "ot"),
        (psi_core::Protocol::Cm20, "cm20-psi", "cm20"),
    ] {
        let id = common::session_id(&common::session(&t, name, 3, &[]));
        let mut rng = <rand_chacha::ChaCha20Rng as rand_core::SeedableRng>::from_seed([5; 32]);
        let set = psi_core::ItemSet::new(["a", "b", "c"].map(String::from));
        let (mut client, hello) = protocol
            .start_chunked_client(set, psi_core::Threads::ONE, 8 << 20, false, &mut rng)
            .unwrap()
            .unwrap();
        let round = format!("/v1/sessions/{id}/{path}/round");
        let setup = common::send(&t, Method::Post, &round, &bin, &hello);
        assert_eq!(setup.status, 200, "{name}");
        let ClientStep::Send(chunk) = client.handle(&setup.body).unwrap() else {
            panic!("{name}: the run ended at the setup");
        };
        // The whole matrix in one chunk is the most this round can be: one byte more,
        // declared and not sent, is answered at once (from the session's own address).
        let mut s = connect_from(&srv, 1, false);
        s.write_all(
            format!(
                "POST {round} HTTP/1.1\r\nhost: x\r\ncontent-type: application/octet-stream\r\ncontent-length: {}\r\n\r\n",
                chunk.len() + 1
            )
            .as_bytes(),
        )
        .unwrap();
        let (status, _) = read_response(&mut s);
        assert_eq!(
            status, 413,
            "{name}: a declared length above the rest of the matrix"
        );
        drop(s);
        // Sent whole: the same refusal, a typed JSON error.
        let mut longer = chunk.clone();
        longer.extend_from_slice(&[0; 64]);
        let r = common::send(&t, Method::Post, &round, &bin, &longer);
        assert_eq!(
            r.status,
            413,
            "{name}: {}",
            String::from_utf8_lossy(&r.body)
        );
        assert_eq!(common::error_code(&r), "body_too_large", "{name}");
        // The real chunk still completes the run.
        let r = common::send(&t, Method::Post, &round, &bin, &chunk);
        assert_eq!(
            r.status,
            200,
            "{name}: {}",
            String::from_utf8_lossy(&r.body)
        );
        assert!(
            matches!(client.handle(&r.body).unwrap(), ClientStep::Done(_)),
            "{name}: one chunk was the whole matrix"
        );
    }
}
