//! `psi match`: match a contact file against a server.

use psi_client::{
    CancelToken, Client, ClientConfig, FileCache, HttpTransport, MeasurementsFile, Phase,
};
use psi_contacts::read_rows;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct MatchArgs {
    /// Server base URL, e.g. https://discovery.example.com or http://127.0.0.1:8080
    /// (plain http:// only to loopback unless --allow-insecure-http).
    #[arg(long)]
    server: String,
    /// Trust only the CA certificates in this PEM file for https:// (a private CA or a
    /// self-signed server certificate); default: Mozilla's root certificates.
    #[arg(long)]
    tls_ca: Option<PathBuf>,
    /// Allow plain http:// to a host that is not loopback (development only: the token
    /// and the protocol messages travel in the clear).
    #[arg(long)]
    allow_insecure_http: bool,
    /// Contact file: CSV (identifier[,name] or with a header) or one per line; CSV if
    /// any line has a comma (docs/contacts.md "Files").
    file: PathBuf,
    /// Default region for phone numbers without a country code.
    #[arg(long, default_value = "US")]
    region: String,
    /// Protocol: auto (the one predicted best for this device, network and server among
    /// the protocols the server offers: docs/protocol-choice.md), dh (DH-PSI), ot (OT-PSI),
    /// cm20 (CM20-PSI, on servers started with --enable-cm20) or gbf (GBF-PSI, on servers
    /// started with --enable-gbf).
    #[arg(long, default_value = "auto", value_parser = crate::choice::parse_arg)]
    protocol: crate::choice::ProtocolArg,
    /// With --protocol auto: fastest, or fewest-bytes (metered or constrained networks).
    #[arg(long, default_value = "fastest", value_parser = crate::choice::parse_policy)]
    policy: psi_client::Policy,
    /// Name of the current network: link estimates are kept per network (in
    /// --cache-dir's measurements.json).
    #[arg(long, default_value = "")]
    network: String,
    /// Prior for the link before any run measured it: downstream Mbit/s.
    #[arg(long)]
    down_mbit: Option<f64>,
    /// Prior: upstream Mbit/s.
    #[arg(long)]
    up_mbit: Option<f64>,
    /// Prior: round-trip time in ms.
    #[arg(long)]
    rtt_ms: Option<f64>,
    #[command(flatten)]
    token: crate::token_args::TokenArgs,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Per-request timeout in seconds.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// A deadline for the whole run in seconds, retries and their waits included (each
    /// request's timeout is cut to what is left); default: none, each request's timeout
    /// bounds it.
    #[arg(long)]
    deadline: Option<u64>,
    /// Directory caching the encoded registry between runs (per server, by ETag) and
    /// the measurements of the automatic choice (`measurements.json`: device costs,
    /// link per network, the server's advertised costs).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Do not fetch labels.
    #[arg(long)]
    no_labels: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: MatchArgs) -> Result<(), String> {
    let f = std::fs::File::open(&args.file).map_err(|e| format!("{}: {e}", args.file.display()))?;
    let rows = read_rows(f).map_err(|e| format!("{}: {e}", args.file.display()))?;
    let choice = crate::choice::resolve(args.protocol, args.policy);
    let mut hints = psi_client::LinkHints::new(args.network.clone());
    hints.down_mbit = args.down_mbit;
    hints.up_mbit = args.up_mbit;
    hints.rtt_ms = args.rtt_ms;
    let mut config = ClientConfig::default()
        .with_link_hints(hints)
        .with_timeout(Duration::from_secs(args.timeout.max(1)))
        .with_deadline(args.deadline.map(|s| Duration::from_secs(s.max(1))))
        .with_labels(!args.no_labels)
        .with_default_region(args.region.clone())
        .with_insecure_http(args.allow_insecure_http);
    if let Some(t) = args.token.resolve()? {
        config = config.with_token(t);
    }
    if let Some(t) = args.threads {
        config = config.with_threads(psi_core::Threads::new(t));
    }
    let mut client = match &args.tls_ca {
        None => Client::new(&args.server, config),
        Some(path) => {
            let pem = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let transport = HttpTransport::with_root_certificates(&pem)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            Client::with_transport(&args.server, Arc::new(transport), config)
        }
    };
    let mut measurements = None;
    if let Some(dir) = &args.cache_dir {
        let file = MeasurementsFile::open(dir);
        client = client
            .with_cache(Arc::new(FileCache::new(dir)))
            .with_measurements(file.store());
        measurements = Some(file);
    }
    let identifiers: Vec<&str> = rows.iter().map(|r| r.identifier.as_str()).collect();
    let pb = crate::progress::spinner(args.json);
    let report = client
        .match_contacts(
            &identifiers,
            choice,
            &mut |p| {
                pb.set_message(if p.phase == Phase::RoundTrip {
                    format!("round {}", p.round)
                } else {
                    p.phase.to_string()
                })
            },
            &CancelToken::new(),
        )
        .map_err(|e| e.to_string())?;
    pb.finish_and_clear();
    if let Some(file) = &measurements {
        // A cache: failing to save costs the next run a calibration, no more.
        let _ = file.save();
    }
    let run = &report.run;
    let s = &run.stats;
    if args.json {
        let v = serde_json::json!({
            "protocol": run.protocol.api_name(),
            "epoch": run.epoch,
            "matches": report.matches.iter().map(|m| {
                let row = &rows[m.row];
                serde_json::json!({
                    "line": row.line,
                    "identifier": m.identifier,
                    "name": row.label,
                    "label": m.label,
                })
            }).collect::<Vec<_>>(),
            "rows": report.rows,
            "queried": run.client_items,
            "duplicates": run.duplicates,
            "rejected": report.rejected.iter().map(|r| serde_json::json!({
                "line": rows[r.row].line,
                "reason": r.reason.name(),
                "message": r.reason.to_string(),
            })).collect::<Vec<_>>(),
            "registry_items": run.server_items,
            "bytes_sent": s.bytes_sent,
            "bytes_received": s.bytes_received,
            "requests": s.requests,
            "encoded_set_from_cache": s.set_from_cache,
            // Sync mode (docs/protocol/sync.md): what the run downloaded to be in sync.
            "sync": s.sync.map(|y| serde_json::json!({
                "snapshot_bytes": y.snapshot_bytes,
                "delta_bytes": y.delta_bytes,
                "from_cache": y.from_cache,
                "candidates": y.candidates,
                "have_version": y.have_version,
                "served_version": y.served_version,
            })),
            "label_error": run.label_error,
            "label_status": run.label_status.name(),
            "labels_missing": run.labels_missing,
            "labels_skipped": run.labels_skipped,
            "registry_etag": run.registry_etag,
            "registry_version": run.registry_version(),
            "phases_ms": s.phases.iter().map(|(p, d)| (p.name().to_string(), serde_json::Value::from(d.as_secs_f64() * 1e3))).collect::<serde_json::Map<_, _>>(),
            "choice": run.choice.as_ref().map(crate::choice::to_json),
        });
        println!("{v}");
        return Ok(());
    }
    for m in &report.matches {
        let row = &rows[m.row];
        println!(
            "  {:<24} {:<28} {}",
            row.label.as_deref().unwrap_or("-"),
            m.identifier,
            m.label
                .as_deref()
                .map_or(String::from("(no label)"), |l| format!("label: {l}"))
        );
    }
    if run.client_items == 0 {
        // No valid row: nothing was sent (psi_client::MatchReport::nothing_sent).
        println!(
            "no valid contact among {} rows: nothing sent to the server ({} rejected)",
            report.rows,
            report.rejected.len()
        );
    } else {
        println!(
            "{} of {} contacts matched ({} queried, {} duplicates, {} rejected) against {} registry entries, {} (epoch {})",
            report.matches.len(),
            report.rows,
            run.client_items,
            run.duplicates,
            report.rejected.len(),
            run.server_items,
            run.protocol,
            run.epoch
        );
    }
    for r in &report.rejected {
        println!(
            "  rejected line {}: {} ({})",
            rows[r.row].line,
            r.reason.name(),
            r.reason
        );
    }
    if let Some(e) = &run.label_error {
        println!("  labels unavailable: {e}");
    }
    if run.labels_skipped > 0 {
        println!(
            "  {} matches got no label: the label step's fixed size left them out",
            run.labels_skipped
        );
    }
    if let Some(c) = &run.choice {
        crate::choice::print(c);
    }
    // Sync mode (docs/protocol/sync.md): what the synced set cost instead of the set.
    let download = match &s.sync {
        Some(y) => format!(
            "sync mode: first sync {} bytes, delta {} bytes, {} candidates, version {} answered by {}",
            y.snapshot_bytes, y.delta_bytes, y.candidates, y.have_version, y.served_version
        ),
        None if s.set_from_cache => "encoded registry from cache".to_string(),
        None => format!("encoded registry {} downloaded", s.set_bytes_downloaded),
    };
    println!(
        "bytes sent {}, received {} in {} requests ({download})",
        s.bytes_sent, s.bytes_received, s.requests,
    );
    Ok(())
}
