//! `psi match`: match a contact file against a server.

use crate::Protocol;
use psi_client::{CachedSet, Client, ClientConfig, Progress};
use psi_contacts::{Normalizer, read_rows};
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct MatchArgs {
    /// Server base URL, e.g. http://127.0.0.1:8080.
    #[arg(long)]
    server: String,
    /// Contact file: CSV (identifier[,name] or with a header) or one per line.
    file: PathBuf,
    /// Default region for phone numbers without a country code.
    #[arg(long, default_value = "US")]
    region: String,
    /// Protocol to use.
    #[arg(long, value_enum, default_value_t = Protocol::Dh)]
    protocol: Protocol,
    /// Bearer token (default: the PSI_TOKEN environment variable).
    #[arg(long)]
    token: Option<String>,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Per-request timeout in seconds.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// Directory caching the encoded registry between runs (per epoch, by ETag).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Do not fetch labels.
    #[arg(long)]
    no_labels: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn load_cache(dir: &std::path::Path) -> Option<CachedSet> {
    let meta = std::fs::read_to_string(dir.join("encoded-set.meta")).ok()?;
    let (epoch, etag) = meta.trim().split_once(' ')?;
    Some(CachedSet {
        epoch: epoch.parse().ok()?,
        etag: etag.to_string(),
        bytes: std::fs::read(dir.join("encoded-set.bin")).ok()?,
    })
}

fn save_cache(dir: &std::path::Path, set: &CachedSet) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("encoded-set.bin"), &set.bytes)?;
    std::fs::write(
        dir.join("encoded-set.meta"),
        format!("{} {}\n", set.epoch, set.etag),
    )
}

pub fn run(args: MatchArgs) -> Result<(), String> {
    let normalizer = Normalizer::new(&args.region).map_err(|e| e.to_string())?;
    let f = std::fs::File::open(&args.file).map_err(|e| format!("{}: {e}", args.file.display()))?;
    let rows = read_rows(f).map_err(|e| format!("{}: {e}", args.file.display()))?;
    let mut items: Vec<Vec<u8>> = Vec::new();
    let mut row_of: Vec<usize> = Vec::new();
    let mut rejected: Vec<(usize, String)> = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        match normalizer.normalize(&row.identifier) {
            Ok(c) => {
                items.push(c.value.into_bytes());
                row_of.push(i);
            }
            Err(e) => rejected.push((row.line, e.to_string())),
        }
    }
    let mut config = ClientConfig::default()
        .with_timeout(Duration::from_secs(args.timeout.max(1)))
        .with_labels(!args.no_labels);
    if let Some(t) = args
        .token
        .clone()
        .or_else(|| std::env::var("PSI_TOKEN").ok())
        .as_ref()
    {
        config = config.with_token(t.clone());
    }
    if let Some(t) = args.threads {
        config = config.with_threads(psi_core::Threads::new(t));
    }
    let client = Client::new(&args.server, config);
    if let Some(dir) = &args.cache_dir {
        client.set_cache(load_cache(dir));
    }
    let pb = crate::spinner(args.json);
    let report = client
        .match_items(items, args.protocol.client(), &mut |p| {
            pb.set_message(match p {
                Progress::Session => "creating session".to_string(),
                Progress::Blinding => "blinding contacts".to_string(),
                Progress::Round(r) => format!("round {r}"),
                Progress::Downloading => "fetching encoded registry".to_string(),
                Progress::Matching => "matching".to_string(),
                Progress::Labels => "fetching labels".to_string(),
                _ => String::new(),
            })
        })
        .map_err(|e| e.to_string())?;
    pb.finish_and_clear();
    if let (Some(dir), Some(set)) = (&args.cache_dir, client.cached_set()) {
        save_cache(dir, &set).map_err(|e| format!("cache: {e}"))?;
    }
    let s = &report.stats;
    if args.json {
        let v = serde_json::json!({
            "protocol": report.protocol.name(),
            "epoch": report.epoch,
            "matches": report.matches.iter().map(|m| {
                let row = &rows[row_of[m.index]];
                serde_json::json!({
                    "line": row.line,
                    "identifier": String::from_utf8_lossy(&m.item),
                    "name": row.label,
                    "label": m.label,
                })
            }).collect::<Vec<_>>(),
            "rows": rows.len(),
            "queried": report.client_items,
            "duplicates": report.duplicates,
            "rejected": rejected.iter().map(|(l, r)| serde_json::json!({"line": l, "reason": r})).collect::<Vec<_>>(),
            "registry_items": report.server_items,
            "bytes_sent": s.bytes_sent,
            "bytes_received": s.bytes_received,
            "encoded_set_from_cache": s.set_from_cache,
            "label_error": report.label_error,
            "phases_ms": s.phases.iter().map(|(n, d)| (n.to_string(), serde_json::Value::from(d.as_secs_f64() * 1e3))).collect::<serde_json::Map<_, _>>(),
        });
        println!("{v}");
        return Ok(());
    }
    for m in &report.matches {
        let row = &rows[row_of[m.index]];
        println!(
            "  {:<24} {:<28} {}",
            row.label.as_deref().unwrap_or("-"),
            String::from_utf8_lossy(&m.item),
            m.label
                .as_deref()
                .map_or(String::from("(no label)"), |l| format!("label: {l}"))
        );
    }
    println!(
        "{} of {} contacts matched ({} queried, {} duplicates, {} rejected) against {} registry entries, {} (epoch {})",
        report.matches.len(),
        rows.len(),
        report.client_items,
        report.duplicates,
        rejected.len(),
        report.server_items,
        report.protocol.name(),
        report.epoch
    );
    for (line, reason) in &rejected {
        println!("  rejected line {line}: {reason}");
    }
    if let Some(e) = &report.label_error {
        println!("  labels unavailable: {e}");
    }
    println!(
        "bytes sent {}, received {} (encoded registry {})",
        s.bytes_sent,
        s.bytes_received,
        if s.set_from_cache {
            "from cache".to_string()
        } else {
            format!("{} downloaded", s.set_bytes_downloaded)
        }
    );
    Ok(())
}
