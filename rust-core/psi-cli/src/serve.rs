//! `psi serve`: the reference HTTP server.

use crate::ServerArgs;
use psi_server::{AppState, Config, Registry};
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Address to listen on (port 0: any free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: std::net::SocketAddr,
    /// Largest request body in bytes.
    #[arg(long, default_value_t = 8 << 20)]
    max_body_bytes: usize,
    /// Most live sessions.
    #[arg(long, default_value_t = 1024)]
    max_sessions: usize,
    /// Most live sessions of one caller (token, or IP address / IPv6 /64 without tokens).
    #[arg(long, default_value_t = 16)]
    max_sessions_per_client: usize,
    /// Most live OT-PSI sessions (each holds about 90 bytes per registry entry).
    #[arg(long, default_value_t = 8)]
    max_ot_sessions: usize,
    /// Session lifetime in seconds.
    #[arg(long, default_value_t = 300)]
    session_ttl: u64,
    /// Longest a request may take, body upload included, in seconds.
    #[arg(long, default_value_t = 120)]
    request_timeout: u64,
    /// Items one client (token or IP) may query per hour; 0 = unlimited.
    #[arg(long, default_value_t = 20_000)]
    items_per_hour: u64,
    /// Accepted bearer token (repeat for several; visible in the process list: prefer
    /// --token-file). Also read from PSI_TOKENS (comma separated). None: no authentication.
    #[arg(long = "token")]
    tokens: Vec<String>,
    /// File of accepted bearer tokens, one per line (empty lines and # comments skipped).
    #[arg(long)]
    token_file: Option<std::path::PathBuf>,
    /// Concurrent CPU-heavy jobs (default: cores).
    #[arg(long)]
    workers: Option<usize>,
    /// Serve DH-PSI only.
    #[arg(long)]
    no_ot: bool,
    /// Start a new key epoch when the key is this old (e.g. 24h, 90m, 7d; at least 1m;
    /// `off`: only `psi rotate-key`). The new epoch is built in the background; lookups
    /// and removals are bounded by it (docs/adr/0017-scheduled-key-rotation.md).
    #[arg(long, default_value = "24h", value_parser = parse_rotate_every)]
    rotate_every: RotateEvery,
    /// Seconds the previous key epoch stays served after a rotation, so sessions started
    /// before it can finish (default: the session lifetime).
    #[arg(long)]
    epoch_overlap: Option<u64>,
}

/// `--rotate-every`: a period, or off.
#[derive(Debug, Clone, Copy)]
struct RotateEvery(Option<Duration>);

/// Shortest period `--rotate-every` takes: each rotation recomputes every entry's output
/// (about 37 s for 10^6 entries on 2 cores), so shorter periods would rebuild without end.
const MIN_ROTATE_EVERY: Duration = Duration::from_secs(60);

fn parse_rotate_every(s: &str) -> Result<RotateEvery, String> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("off") {
        return Ok(RotateEvery(None));
    }
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| "expected a number with a unit (s, m, h, d), e.g. 24h, or off".to_string())?;
    let unit_secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err("the unit must be s, m, h or d (e.g. 24h), or use off".into()),
    };
    let d = Duration::from_secs(
        n.checked_mul(unit_secs)
            .ok_or_else(|| "period too long".to_string())?,
    );
    if d < MIN_ROTATE_EVERY {
        return Err("the rotation period must be at least 1m".into());
    }
    Ok(RotateEvery(Some(d)))
}

pub fn run(args: ServeArgs) -> Result<(), String> {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let mut config = Config::default();
    config.db_path = args.server.db.clone();
    config.max_client_items = args.server.max_client_items;
    config.max_body_bytes = args.max_body_bytes;
    config.max_sessions = args.max_sessions;
    config.max_sessions_per_client = args.max_sessions_per_client;
    config.max_ot_sessions = args.max_ot_sessions;
    config.session_ttl = Duration::from_secs(args.session_ttl.max(1));
    config.request_timeout = Duration::from_secs(args.request_timeout.max(1));
    config.items_per_hour = args.items_per_hour;
    config.tokens = args.tokens.clone();
    if let Some(path) = &args.token_file {
        config.tokens.extend(crate::read_token_file(path)?);
    }
    if let Ok(env) = std::env::var("PSI_TOKENS") {
        config.tokens.extend(
            env.split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(String::from),
        );
    }
    if let Some(w) = args.workers {
        config.workers = w.max(1);
    }
    config.enable_ot = !args.no_ot;
    config.rotate_every = args.rotate_every.0;
    config.epoch_overlap = args
        .epoch_overlap
        .map_or(config.session_ttl, Duration::from_secs);
    let pb = crate::progress_bar(0, "computing OPRF outputs", false);
    let registry = Registry::load(&config, &mut |done, total| {
        pb.set_length(total);
        pb.set_position(done);
    })
    .map_err(|e| e.to_string())?;
    pb.finish_and_clear();
    let stats = registry.stats();
    tracing::info!(
        epoch = stats.epoch,
        entries = stats.entries,
        labeled = stats.labeled,
        encoded_set_bytes = stats.encoded_set_bytes,
        outputs_computed = stats.outputs_computed,
        build_ms = stats.build_time.as_millis() as u64,
        "registry loaded"
    );
    let state = AppState::with_registry(config, registry);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        println!("psi serve: listening on http://{addr}");
        spawn_reload_on_sighup(state.clone());
        psi_server::serve(listener, state, shutdown_signal())
            .await
            .map_err(|e| e.to_string())?;
        tracing::info!("shut down");
        Ok(())
    })
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutdown requested; finishing requests in flight");
}

/// SIGHUP re-reads the store (after `psi import` or `psi rotate-key`); sessions of the
/// previous epoch finish within the overlap.
fn spawn_reload_on_sighup(state: Arc<AppState>) {
    #[cfg(unix)]
    tokio::spawn(async move {
        let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        else {
            return;
        };
        while hup.recv().await.is_some() {
            let st = state.clone();
            match tokio::task::spawn_blocking(move || st.reload()).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::error!(error = %e, "reload failed"),
                Err(_) => tracing::error!("reload task failed"),
            }
        }
    });
    #[cfg(not(unix))]
    let _ = state;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotate_every_parses_periods_and_off() {
        let p = |s| parse_rotate_every(s).map(|r| r.0);
        assert_eq!(p("24h"), Ok(Some(Duration::from_secs(86_400))));
        assert_eq!(p("90m"), Ok(Some(Duration::from_secs(5400))));
        assert_eq!(p("7d"), Ok(Some(Duration::from_secs(7 * 86_400))));
        assert_eq!(p("60s"), Ok(Some(Duration::from_secs(60))));
        assert_eq!(p("off"), Ok(None));
        for bad in ["", "h", "24", "24x", "-1h", "59s", "99999999999999999999d"] {
            assert!(p(bad).is_err(), "{bad}");
        }
    }
}
