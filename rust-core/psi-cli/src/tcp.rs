//! One OT-PSI run over a real loopback TCP connection (127.0.0.1, ephemeral port):
//! each request and response is a 4-byte big-endian length and the message bytes.

use psi_core::ItemSet;
use psi_core::ot::{ClientStep, OtClient, OtConfig, OtServer};
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

fn recv(s: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
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
    let mut buf = vec![0u8; len];
    s.read_exact(&mut buf)?;
    Ok(Some(buf))
}

/// Result of a loopback run.
pub struct TcpRun {
    pub wall: Duration,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub round_trips: usize,
    pub matches: usize,
}

/// Runs OT-PSI between a server thread and this thread over loopback TCP.
pub fn run_ot_tcp(
    client: ItemSet,
    server: Arc<ItemSet>,
    config: &OtConfig,
) -> Result<TcpRun, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let server_config = config.clone();
    let server_thread = std::thread::spawn(move || -> Result<(), String> {
        let (mut conn, _) = listener.accept().map_err(|e| e.to_string())?;
        conn.set_read_timeout(Some(Duration::from_secs(120)))
            .map_err(|e| e.to_string())?;
        let mut rng = crate::runner::os_rng()?;
        let mut srv = OtServer::new(server, server_config, &mut rng).map_err(|e| e.to_string())?;
        while let Some(req) = recv(&mut conn).map_err(|e| e.to_string())? {
            let resp = srv.handle(&req).map_err(|e| e.to_string())?;
            send(&mut conn, &resp).map_err(|e| e.to_string())?;
            if srv.is_done() {
                break;
            }
        }
        Ok(())
    });
    let t0 = Instant::now();
    let mut conn = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    conn.set_nodelay(true).map_err(|e| e.to_string())?;
    conn.set_read_timeout(Some(Duration::from_secs(120)))
        .map_err(|e| e.to_string())?;
    let mut rng = crate::runner::os_rng()?;
    let (mut c, mut req) =
        OtClient::start(client, config.clone(), &mut rng).map_err(|e| e.to_string())?;
    let (mut sent, mut received, mut rounds) = (0u64, 0u64, 0usize);
    let output = loop {
        send(&mut conn, &req).map_err(|e| e.to_string())?;
        sent += 4 + req.len() as u64;
        rounds += 1;
        let resp = recv(&mut conn)
            .map_err(|e| e.to_string())?
            .ok_or("server closed the connection")?;
        received += 4 + resp.len() as u64;
        match c.handle(&resp).map_err(|e| e.to_string())? {
            ClientStep::Send(next) => req = next,
            ClientStep::Done(out) => break out,
        }
    };
    let wall = t0.elapsed();
    server_thread
        .join()
        .map_err(|_| "server thread panicked".to_string())??;
    Ok(TcpRun {
        wall,
        bytes_sent: sent,
        bytes_received: received,
        round_trips: rounds,
        matches: output.matches.len(),
    })
}
