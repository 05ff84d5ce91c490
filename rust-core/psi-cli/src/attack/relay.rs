//! A TCP relay on 127.0.0.1 that holds every byte for a fixed time in each direction: the
//! database "a few milliseconds away" of `psi attack --db-delay-ms` (this machine's kernel
//! has no `tc netem`). Each direction of each connection is read as it comes, each piece
//! kept until `delay` after it was read, then written: a round trip through the relay
//! takes at least twice the delay, and pieces keep their order. No bandwidth limit.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A running relay; dropping it closes its listener and every connection through it.
pub struct DelayRelay {
    port: u16,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
    /// Both sockets of every connection, to close them on drop.
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl DelayRelay {
    /// Listens on 127.0.0.1 (a free port) and relays each connection to `target` with
    /// `delay` each way.
    pub fn start(target: SocketAddr, delay: Duration) -> std::io::Result<DelayRelay> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let open = Arc::new(Mutex::new(Vec::new()));
        let (stop2, open2) = (stop.clone(), open.clone());
        let accept = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        if let Err(e) = relay(client, target, delay, &open2) {
                            eprintln!("db relay: a connection to the database failed: {e}");
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    Err(e) => {
                        eprintln!("db relay: accept failed: {e}");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        });
        Ok(DelayRelay {
            port,
            stop,
            accept: Some(accept),
            open,
        })
    }

    /// The port on 127.0.0.1 to connect to instead of the target's.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for DelayRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(a) = self.accept.take() {
            let _ = a.join();
        }
        for s in self
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

/// Connects `client` to `target`: one reader and one writer thread per direction.
fn relay(
    client: TcpStream,
    target: SocketAddr,
    delay: Duration,
    open: &Mutex<Vec<TcpStream>>,
) -> std::io::Result<()> {
    client.set_nonblocking(false)?;
    let server = TcpStream::connect_timeout(&target, Duration::from_secs(5))?;
    for s in [&client, &server] {
        s.set_nodelay(true)?;
    }
    {
        let mut open = open.lock().unwrap_or_else(|e| e.into_inner());
        // Connections that ended are dropped from the list (a closed socket's peer
        // address is gone).
        open.retain(|s| s.peer_addr().is_ok());
        open.push(client.try_clone()?);
        open.push(server.try_clone()?);
    }
    pump(client.try_clone()?, server.try_clone()?, delay);
    pump(server, client, delay);
    Ok(())
}

/// Moves bytes read from `from` to `to`, each piece `delay` after it was read; at the end
/// of `from` (or an error on either side) closes `to` for writing (both on an error).
fn pump(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let from2 = from.try_clone();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx
                        .send((Instant::now() + delay, buf[..n].to_vec()))
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    });
    std::thread::spawn(move || {
        for (due, piece) in rx {
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            if to.write_all(&piece).is_err() {
                let _ = to.shutdown(Shutdown::Both);
                if let Ok(f) = &from2 {
                    let _ = f.shutdown(Shutdown::Both);
                }
                return;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server behind the relay: every round trip takes at least twice the delay,
    /// and the bytes come back whole and in order.
    #[test]
    fn a_round_trip_takes_twice_the_delay() {
        let echo = TcpListener::bind("127.0.0.1:0").unwrap();
        let target = echo.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = echo.accept().unwrap();
            let mut buf = [0u8; 4096];
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 || s.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        });
        let relay = DelayRelay::start(target, Duration::from_millis(20)).unwrap();
        let mut c = TcpStream::connect(("127.0.0.1", relay.port())).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        for round in 0..3u8 {
            let msg: Vec<u8> = (0..1000u32).map(|i| (i as u8) ^ round).collect();
            let t = Instant::now();
            c.write_all(&msg).unwrap();
            let mut back = vec![0u8; msg.len()];
            c.read_exact(&mut back).unwrap();
            assert!(
                t.elapsed() >= Duration::from_millis(40),
                "{:?}",
                t.elapsed()
            );
            assert_eq!(back, msg);
        }
        drop(relay);
        // Closed with the relay.
        let mut buf = [0u8; 1];
        assert!(matches!(c.read(&mut buf), Ok(0) | Err(_)));
    }
}
