//! One OT-PSI or CM20-PSI run over a real loopback TCP connection (127.0.0.1, ephemeral
//! port): each request and response is a 4-byte big-endian length and the message bytes.
//!
//! After each request the client calls `work_ahead` before it reads the response, so it
//! builds its next chunk (or its side of the matching) while the server works on the
//! request: one thread per side, and the two sides' work overlaps.
//!
//! The hello is streamed: the client writes each part as soon as it is computed
//! ([`OtClient::start_in_parts`]) and the server hands each read to
//! [`OtServer::handle_hello_part`]; the server sends the setup's head (through its base-OT
//! point) as soon as it has the hello's fixed fields ([`OtServer::setup_head`]) and the
//! client computes its base-OT keys from it ([`OtClient::handle_setup_head`]) while the
//! server finishes. So the two sides' base-OT work overlaps. The bytes on the wire are the
//! same as for messages sent whole.

use psi_core::ItemSet;
use psi_core::chunked::ChunkedClient;
use psi_core::cm20::{Cm20Client, Cm20Config, Cm20Server, Cm20Set};
use psi_core::ot::{self, ClientStep, OtClient, OtConfig, OtServer};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest frame either side accepts (the protocol's own limits are lower).
const MAX_FRAME: usize = 1 << 28;

fn send(s: &mut TcpStream, msg: &[u8]) -> std::io::Result<()> {
    s.write_all(&(msg.len() as u32).to_be_bytes())?;
    s.write_all(msg)
}

/// Both ends: no Nagle delay (a frame is a length and a body, written separately), and a
/// bound on every read.
fn tune(conn: &TcpStream) -> Result<(), String> {
    conn.set_nodelay(true).map_err(|e| e.to_string())?;
    conn.set_read_timeout(Some(Duration::from_secs(120)))
        .map_err(|e| e.to_string())
}

/// How a loopback run is made.
#[derive(Debug, Clone, Copy)]
pub struct TcpOptions {
    /// The client works ahead while the server answers, as psi-client's driver does (ADR
    /// 0026); off only to measure what that gains.
    pub work_ahead: bool,
    /// Pins the server's thread, and so the worker pool it starts, to this CPU (Linux); the
    /// caller pins its own thread with [`pin_current_thread`] before its first run, so each
    /// side has a core of its own, as on two machines.
    pub server_cpu: Option<usize>,
}

impl Default for TcpOptions {
    fn default() -> Self {
        TcpOptions {
            work_ahead: true,
            server_cpu: None,
        }
    }
}

/// Pins the calling thread to `cpu`; worker pools it starts later inherit the pin.
#[cfg(target_os = "linux")]
pub fn pin_current_thread(cpu: usize) -> Result<(), String> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(format!("no CPU {cpu}"));
    }
    // SAFETY: `set` is a plain bit set that CPU_ZERO/CPU_SET initialise; the call reads it
    // and changes only this thread's affinity.
    let r = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if r != 0 {
        return Err(format!(
            "cannot pin a thread to CPU {cpu}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// The CPUs the calling thread may run on (its affinity mask: a cpuset or `taskset` may
/// exclude some), in increasing order.
#[cfg(target_os = "linux")]
pub fn allowed_cpus() -> Result<Vec<usize>, String> {
    // SAFETY: `set` is a plain bit set that the call fills; CPU_ISSET reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(format!(
                "cannot read the CPU affinity: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok((0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect())
    }
}

/// Pinning threads is implemented on Linux only.
#[cfg(not(target_os = "linux"))]
pub fn pin_current_thread(_cpu: usize) -> Result<(), String> {
    Err("pinning threads to CPUs is implemented on Linux only".into())
}

/// Pinning threads is implemented on Linux only.
#[cfg(not(target_os = "linux"))]
pub fn allowed_cpus() -> Result<Vec<usize>, String> {
    Err("pinning threads to CPUs is implemented on Linux only".into())
}

/// A client's connection to `addr`, tuned, and its randomness.
fn connect(addr: std::net::SocketAddr) -> Result<(TcpStream, rand_chacha::ChaCha20Rng), String> {
    let conn = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    tune(&conn)?;
    Ok((conn, crate::rng::os_rng()?))
}

/// Reads a frame's length prefix (`None` at a clean end of the stream).
fn recv_len(s: &mut TcpStream) -> std::io::Result<Option<usize>> {
    let mut len = [0u8; 4];
    match s.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::other("frame too large"));
    }
    Ok(Some(len))
}

fn recv(s: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let Some(len) = recv_len(s)? else {
        return Ok(None);
    };
    let mut buf = vec![0u8; len];
    s.read_exact(&mut buf)?;
    Ok(Some(buf))
}

/// Server: reads the first frame (the hello) and hands each read to the session as it
/// arrives, sends the setup's head as soon as the session has it, then the rest of the
/// setup. Returns `false` if the client closed the connection before a hello.
fn serve_hello(conn: &mut TcpStream, srv: &mut OtServer) -> Result<bool, String> {
    let Some(len) = recv_len(conn).map_err(|e| e.to_string())? else {
        return Ok(false);
    };
    let mut buf = vec![0u8; 16 << 10];
    let mut left = len;
    let mut setup = None;
    let mut head_sent = 0;
    while left > 0 {
        let n = conn
            .read(&mut buf[..left.min(16 << 10)])
            .map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("connection closed inside a frame".into());
        }
        left -= n;
        // An error after the head was sent ends the connection with the setup half
        // written, which the client reports as a closed connection.
        setup = srv
            .handle_hello_part(&buf[..n])
            .map_err(|e| e.to_string())?;
        if head_sent == 0
            && let Some(head) = srv.setup_head().map_err(|e| e.to_string())?
        {
            conn.write_all(&(ot::sizes::setup() as u32).to_be_bytes())
                .and_then(|()| conn.write_all(&head))
                .map_err(|e| e.to_string())?;
            head_sent = head.len();
        }
    }
    let setup = setup.ok_or("first frame shorter than a hello")?;
    if head_sent == 0 {
        send(conn, &setup).map_err(|e| e.to_string())?;
    } else {
        conn.write_all(&setup[head_sent..])
            .map_err(|e| e.to_string())?;
    }
    Ok(true)
}

/// Client: reads the setup, giving its head to the client as soon as it arrives.
fn recv_setup(conn: &mut TcpStream, c: &mut OtClient) -> Result<Vec<u8>, String> {
    let len = recv_len(conn)
        .map_err(|e| e.to_string())?
        .ok_or("server closed the connection")?;
    let mut setup = vec![0u8; len];
    let head = ot::messages::SETUP_HEAD_LEN.min(len);
    conn.read_exact(&mut setup[..head])
        .map_err(|e| e.to_string())?;
    c.handle_setup_head(&setup[..head])
        .map_err(|e| e.to_string())?;
    conn.read_exact(&mut setup[head..])
        .map_err(|e| e.to_string())?;
    Ok(setup)
}

/// One OT-PSI session over one connection: the streamed hello, then request after request
/// until the outputs.
fn serve_ot_connection(
    mut conn: TcpStream,
    server: &Arc<ItemSet>,
    config: &OtConfig,
    rng: &mut (impl rand_core::CryptoRng + ?Sized),
) -> Result<(), String> {
    tune(&conn)?;
    let mut srv = OtServer::new(server.clone(), config.clone(), rng).map_err(|e| e.to_string())?;
    if !serve_hello(&mut conn, &mut srv)? {
        return Ok(());
    }
    serve_requests(&mut conn, |req| {
        let resp = srv.handle(req)?;
        Ok((resp, srv.is_done()))
    })
}

/// Request after request on `conn`, each answered by `handle` (the response and whether the
/// session is done), until the session is done or the client closes the connection.
fn serve_requests(
    conn: &mut TcpStream,
    mut handle: impl FnMut(&[u8]) -> psi_core::Result<(Vec<u8>, bool)>,
) -> Result<(), String> {
    while let Some(req) = recv(conn).map_err(|e| e.to_string())? {
        let (resp, done) = handle(&req).map_err(|e| e.to_string())?;
        send(conn, &resp).map_err(|e| e.to_string())?;
        if done {
            break;
        }
    }
    Ok(())
}

/// One CM20-PSI session over one connection: request after request until the outputs.
fn serve_cm20_connection(
    mut conn: TcpStream,
    set: &Arc<Cm20Set>,
    config: &Cm20Config,
    rng: &mut (impl rand_core::CryptoRng + ?Sized),
) -> Result<(), String> {
    tune(&conn)?;
    let mut srv =
        Cm20Server::with_set(set.clone(), config.clone(), rng).map_err(|e| e.to_string())?;
    serve_requests(&mut conn, |req| {
        let resp = srv.handle(req)?;
        Ok((resp, srv.is_done()))
    })
}

/// Result of a loopback run.
#[derive(Default)]
pub struct TcpRun {
    pub wall: Duration,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub round_trips: usize,
    pub matches: usize,
}

/// A loopback OT-PSI or CM20-PSI server on its own thread, serving one connection after
/// another (a new session per connection) until it is dropped, like a long-running server
/// whose worker thread and pool stay up between sessions.
pub struct TcpServer {
    addr: std::net::SocketAddr,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<(), String>>>,
}

impl TcpServer {
    /// Binds 127.0.0.1 on an ephemeral port and starts serving `server`'s set by OT-PSI.
    pub fn ot(
        server: Arc<ItemSet>,
        config: &OtConfig,
        cpu: Option<usize>,
    ) -> Result<TcpServer, String> {
        let config = config.clone();
        TcpServer::spawn(cpu, move |conn, rng| {
            serve_ot_connection(conn, &server, &config, rng)
        })
    }

    /// Binds 127.0.0.1 on an ephemeral port and starts serving `server`'s set by CM20-PSI.
    /// The set's `H1` digests are computed here, once, as a long-running server computes
    /// them when it loads its registry ([`Cm20Set`]), not in any session.
    pub fn cm20(
        server: Arc<ItemSet>,
        config: &Cm20Config,
        cpu: Option<usize>,
    ) -> Result<TcpServer, String> {
        let config = config.clone();
        let set = Arc::new(Cm20Set::new(server, config.threads).map_err(|e| e.to_string())?);
        TcpServer::spawn(cpu, move |conn, rng| {
            serve_cm20_connection(conn, &set, &config, rng)
        })
    }

    fn spawn(
        cpu: Option<usize>,
        mut session: impl FnMut(TcpStream, &mut rand_chacha::ChaCha20Rng) -> Result<(), String>
        + Send
        + 'static,
    ) -> Result<TcpServer, String> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || -> Result<(), String> {
            if let Some(cpu) = cpu {
                pin_current_thread(cpu)?;
            }
            let mut rng = crate::rng::os_rng()?;
            for conn in listener.incoming() {
                if stopped.load(std::sync::atomic::Ordering::SeqCst) {
                    return Ok(());
                }
                // A failed connection ends that session only; the server keeps serving.
                let served = conn
                    .map_err(|e| e.to_string())
                    .and_then(|conn| session(conn, &mut rng));
                if let Err(e) = served {
                    eprintln!("loopback server: a connection failed: {e}");
                }
            }
            Ok(())
        });
        Ok(TcpServer {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// Runs `client` against the server's address, then stops the server (whose thread's
    /// error, if any, is returned first).
    fn run(
        mut self,
        client: impl FnOnce(std::net::SocketAddr) -> Result<TcpRun, String>,
    ) -> Result<TcpRun, String> {
        let run = client(self.addr);
        self.shut_down()?;
        run
    }

    fn shut_down(&mut self) -> Result<(), String> {
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        // Wakes the accept loop; a refused connection means the thread already ended.
        let _ = TcpStream::connect(self.addr);
        thread
            .join()
            .map_err(|_| "server thread panicked".to_string())?
    }
}

impl Drop for TcpServer {
    fn drop(&mut self) {
        let _ = self.shut_down();
    }
}

/// Runs OT-PSI between a fresh server thread and this thread over loopback TCP.
pub fn run_ot_tcp(
    client: ItemSet,
    server: Arc<ItemSet>,
    config: &OtConfig,
    opts: TcpOptions,
) -> Result<TcpRun, String> {
    TcpServer::ot(server, config, opts.server_cpu)?
        .run(|addr| ot_client(addr, client, config, opts.work_ahead))
}

/// Runs OT-PSI's client on this thread against a server at `addr`: one connection.
fn ot_client(
    addr: std::net::SocketAddr,
    client: ItemSet,
    config: &OtConfig,
    work_ahead: bool,
) -> Result<TcpRun, String> {
    let t0 = Instant::now();
    let (mut conn, mut rng) = connect(addr)?;
    let (mut c, first) =
        OtClient::start_in_parts(client, config.clone(), &mut rng).map_err(|e| e.to_string())?;
    let hello_len = ot::sizes::hello();
    let mut streamed = first.len() as u64;
    conn.write_all(&(hello_len as u32).to_be_bytes())
        .map_err(|e| e.to_string())?;
    conn.write_all(&first).map_err(|e| e.to_string())?;
    while let Some(part) = c.next_hello_part().map_err(|e| e.to_string())? {
        conn.write_all(&part).map_err(|e| e.to_string())?;
        streamed += part.len() as u64;
    }
    if streamed != hello_len {
        return Err(format!("hello of {streamed} bytes, expected {hello_len}"));
    }
    let setup = recv_setup(&mut conn, &mut c)?;
    let step = c.handle(&setup).map_err(|e| e.to_string())?;
    let mut run = TcpRun {
        bytes_sent: 4 + hello_len,
        bytes_received: 4 + setup.len() as u64,
        round_trips: 1,
        ..TcpRun::default()
    };
    rounds(&mut conn, &mut c, step, work_ahead, &mut run)?;
    run.wall = t0.elapsed();
    Ok(run)
}

/// The client's rounds from `step` on: send a request, work ahead while the server answers
/// (if `work_ahead`; off only to measure what it gains), hand over the response; until the
/// result.
fn rounds(
    conn: &mut TcpStream,
    c: &mut impl ChunkedClient,
    mut step: ClientStep,
    work_ahead: bool,
    run: &mut TcpRun,
) -> Result<(), String> {
    loop {
        let req = match step {
            ClientStep::Send(req) => req,
            ClientStep::Done(out) => {
                run.matches = out.matches.len();
                return Ok(());
            }
        };
        send(conn, &req).map_err(|e| e.to_string())?;
        run.bytes_sent += 4 + req.len() as u64;
        run.round_trips += 1;
        if work_ahead {
            c.work_ahead().map_err(|e| e.to_string())?;
        }
        let resp = recv(conn)
            .map_err(|e| e.to_string())?
            .ok_or("server closed the connection")?;
        run.bytes_received += 4 + resp.len() as u64;
        step = c.handle(&resp).map_err(|e| e.to_string())?;
    }
}

/// Runs CM20-PSI between a fresh server thread and this thread over loopback TCP.
pub fn run_cm20_tcp(
    client: ItemSet,
    server: Arc<ItemSet>,
    config: &Cm20Config,
    opts: TcpOptions,
) -> Result<TcpRun, String> {
    TcpServer::cm20(server, config, opts.server_cpu)?
        .run(|addr| cm20_client(addr, client, config, opts.work_ahead))
}

/// Runs CM20-PSI's client on this thread against a server at `addr`: one connection.
fn cm20_client(
    addr: std::net::SocketAddr,
    client: ItemSet,
    config: &Cm20Config,
    work_ahead: bool,
) -> Result<TcpRun, String> {
    let t0 = Instant::now();
    let (mut conn, mut rng) = connect(addr)?;
    let (mut c, hello) =
        Cm20Client::start(client, config.clone(), &mut rng).map_err(|e| e.to_string())?;
    let mut run = TcpRun::default();
    rounds(
        &mut conn,
        &mut c,
        ClientStep::Send(hello),
        work_ahead,
        &mut run,
    )?;
    run.wall = t0.elapsed();
    Ok(run)
}
