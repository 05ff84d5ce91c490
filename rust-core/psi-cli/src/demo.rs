//! `psi demo`: private contact discovery on an embedded address book, over HTTP
//! through a real `psi-server` on loopback.

use crate::format::{ms, thousands};
use crate::runner::{run_dh, run_ot};
use psi_client::CancelToken;
use psi_core::Protocol;

/// The embedded address book: display name and normalized identifier per line.
const SAMPLE: &str = include_str!("../data/sample-contacts.tsv");

/// Every `OVERLAP_EVERY`-th sample contact is also registered with the service.
const OVERLAP_EVERY: usize = 7;

fn sample_contacts() -> Vec<(&'static str, &'static str)> {
    SAMPLE
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split_once('\t'))
        .collect()
}

/// A generated registry of `size` identifiers, containing every `OVERLAP_EVERY`-th
/// sample contact (so the expected result is known) and made-up numbers otherwise.
fn registry(contacts: &[(&str, &str)], size: usize) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = contacts
        .iter()
        .step_by(OVERLAP_EVERY)
        .take(size)
        .map(|(_, id)| id.as_bytes().to_vec())
        .collect();
    // Phone numbers outside the sample's 555 range, then emails: never a false overlap.
    let mut i = 0u64;
    while out.len() < size {
        out.push(if i < 10_000_000 {
            format!("+1202{i:07}").into_bytes()
        } else {
            format!("user{i}@registry.example").into_bytes()
        });
        i += 1;
    }
    out
}

/// The demo's inputs: the embedded address book, a generated registry holding every
/// `OVERLAP_EVERY`-th of its contacts, and the number of matches to expect.
struct Sample {
    contacts: Vec<(&'static str, &'static str)>,
    client: Vec<Vec<u8>>,
    server: Vec<Vec<u8>>,
    expected: usize,
}

fn sample(registry_size: usize) -> Sample {
    let contacts = sample_contacts();
    let client = contacts
        .iter()
        .map(|(_, id)| id.as_bytes().to_vec())
        .collect();
    let server = registry(&contacts, registry_size);
    let expected = contacts
        .iter()
        .step_by(OVERLAP_EVERY)
        .take(registry_size)
        .count();
    Sample {
        contacts,
        client,
        server,
        expected,
    }
}

/// Starts a server on loopback with the generated registry (labels `member-<n>`), then
/// matches the sample over HTTP with the real client driver.
pub fn run(
    choice: psi_client::ProtocolChoice,
    registry_size: usize,
    threads: Option<usize>,
    json: bool,
    sync: bool,
) -> Result<(), String> {
    let threads = threads.unwrap_or_else(|| psi_core::Threads::available().get());
    let Sample {
        contacts,
        client: client_items,
        server,
        expected,
    } = sample(registry_size);

    // Server: an in-memory store, outputs and encoded set computed as on a first start.
    let mut config = psi_server::Config::default();
    config.db = psi_server::Database::memory();
    config.build_threads = threads;
    config.workers = threads;
    config.max_client_items = client_items.len().max(1000);
    // CM20 is opt-in on a server (semi-honest clients only); the demo's client is ours.
    config.enable_cm20 = matches!(choice, psi_client::ProtocolChoice::Fixed(Protocol::Cm20));
    config.enable_gbf = matches!(choice, psi_client::ProtocolChoice::Fixed(Protocol::Gbf));
    config.enable_sync = sync;
    let mut store =
        psi_server::Store::open(std::path::Path::new(":memory:")).map_err(|e| e.to_string())?;
    let labels: Vec<String> = (0..server.len()).map(|i| format!("member-{i}")).collect();
    store
        .add_entries(
            server
                .iter()
                .zip(&labels)
                .map(|(id, l)| (std::str::from_utf8(id).unwrap_or(""), Some(l.as_str()))),
        )
        .map_err(|e| e.to_string())?;
    let pb = crate::progress::progress_bar(0, "encoding registry", json);
    let reg = psi_server::Registry::from_store(&mut store, &config, &mut |d, t| {
        pb.set_length(t);
        pb.set_position(d);
    })
    .map_err(|e| e.to_string())?;
    pb.finish_and_clear();
    let encode = reg.stats().build_time;
    let state = psi_server::AppState::with_registry(config, reg);
    let srv = psi_server::RunningServer::start(state, ([127, 0, 0, 1], 0).into())
        .map_err(|e| format!("cannot start the loopback server: {e}"))?;

    let client = psi_client::Client::new(
        &srv.url(),
        psi_client::ClientConfig::default().with_threads(psi_core::Threads::new(threads)),
    );
    if sync {
        // The client learns that the server serves sync mode from its health.
        client.health().map_err(|e| e.to_string())?;
    }
    let report = client
        .match_items(
            client_items.clone(),
            choice,
            &mut |_| {},
            &CancelToken::new(),
        )
        .map_err(|e| e.to_string())?;
    srv.shutdown().map_err(|e| e.to_string())?;
    let protocol = report.protocol;
    let s = &report.stats;
    if json {
        let v = serde_json::json!({
            "protocol": report.protocol.api_name(),
            "client_items": client_items.len(),
            "registry_items": report.server_items,
            "matches": report.matches.iter().map(|m| serde_json::json!({
                "name": contacts[m.index].0,
                "identifier": contacts[m.index].1,
                "label": m.label,
            })).collect::<Vec<_>>(),
            "expected_matches": expected,
            "server_encode_ms": encode.as_secs_f64() * 1e3,
            "phases_ms": s.phases.iter().map(|(p, d)| (p.name().to_string(), serde_json::Value::from(d.as_secs_f64() * 1e3))).collect::<serde_json::Map<_, _>>(),
            "requests": s.requests,
            "server_compute_ms": s.server_time.as_secs_f64() * 1e3,
            "protocol_bytes_sent": s.protocol_bytes_sent,
            "protocol_bytes_received": s.protocol_bytes_received,
            "encoded_set_bytes": s.set_bytes,
            "sync_snapshot_bytes": s.sync.map(|y| y.snapshot_bytes),
            "sync_delta_bytes": s.sync.map(|y| y.delta_bytes),
            "label_bytes": s.label_bytes,
            "http_bytes_sent": s.bytes_sent,
            "http_bytes_received": s.bytes_received,
            "choice": report.choice.as_ref().map(crate::choice::to_json),
        });
        println!("{v}");
    } else {
        let name = protocol.description();
        println!("psi demo: {name}, {threads} thread(s) per side, over HTTP on loopback");
        println!(
            "  client: {} contacts (embedded sample)   server: {} registry entries (generated)",
            thousands(client_items.len() as u64),
            thousands(server.len() as u64)
        );
        if let Some(c) = &report.choice {
            print!("  ");
            crate::choice::print(c);
        }
        println!("\n  phase                                          wall ms");
        let encode_name = if protocol == Protocol::Dh {
            "server  encode registry (once per key epoch)"
        } else {
            "server  load registry (once per key epoch)"
        };
        println!("  {encode_name:<45} {:>8}", ms(encode));
        for (phase, t) in &s.phases {
            let name = phase.name();
            let name = name.strip_prefix("client ").unwrap_or(name);
            println!("  client  {name:<37} {:>8}", ms(*t));
        }
        println!(
            "  {:<45} {:>8}",
            "server  compute (inside the round trips)",
            ms(s.server_time)
        );
        println!(
            "\n  bytes client -> server: {:>10}  ({})",
            thousands(s.protocol_bytes_sent),
            if protocol == Protocol::Dh {
                "query"
            } else {
                "OT requests"
            }
        );
        println!(
            "  bytes server -> client: {:>10}  ({})",
            thousands(s.protocol_bytes_received),
            if protocol == Protocol::Dh {
                "evaluation"
            } else {
                "OT responses"
            }
        );
        if let Some(y) = &s.sync {
            println!(
                "                          {:>10}  (sync mode's first sync: short tags, {:.2} bytes/entry; then deltas only)",
                thousands(y.snapshot_bytes),
                y.snapshot_bytes as f64 / report.server_items.max(1) as f64
            );
            println!(
                "                          {:>10}  candidates confirmed by the label fetch",
                thousands(y.candidates as u64)
            );
        } else if protocol == Protocol::Dh {
            println!(
                "                          {:>10}  (encoded registry, {}-bit values, {:.2} bytes/entry; cacheable per key epoch)",
                thousands(s.set_bytes),
                s.truncation_bits,
                s.set_bytes as f64 / report.server_items.max(1) as f64
            );
        }
        println!(
            "  labels, both ways:      {:>10}  (label buckets{})",
            thousands(s.label_bytes),
            if protocol == Protocol::Dh {
                ""
            } else {
                ", after an OPRF query over the matches"
            }
        );
        println!(
            "  HTTP bodies total:      {:>10} sent, {} received in {} requests",
            thousands(s.bytes_sent),
            thousands(s.bytes_received),
            s.requests
        );
        println!(
            "\n  {} of {} contacts are registered (expected {expected}):",
            report.matches.len(),
            client_items.len()
        );
        for m in &report.matches {
            let (name, id) = contacts[m.index];
            println!(
                "    {name:<24} {id:<30} {}",
                m.label.as_deref().unwrap_or("(no label)")
            );
        }
    }
    if report.matches.len() != expected {
        return Err(format!(
            "found {} matches, expected {expected}",
            report.matches.len()
        ));
    }
    if report.matches.iter().any(|m| m.label.is_none()) {
        return Err("a match came back without its label".into());
    }
    Ok(())
}

/// The in-process run (no HTTP): both sides in this process through the real message
/// encoding, with times per phase.
pub fn run_in_process(
    choice: psi_client::ProtocolChoice,
    registry_size: usize,
    threads: Option<usize>,
) -> Result<(), String> {
    let threads = threads.unwrap_or_else(|| psi_core::Threads::available().get());
    let Sample {
        contacts,
        client,
        server,
        expected,
    } = sample(registry_size);
    let protocol = match choice {
        psi_client::ProtocolChoice::Fixed(p) => p,
        psi_client::ProtocolChoice::Auto(policy) => {
            // In one process the link costs nothing: the model weighs computation only,
            // both sides on this machine's measured costs.
            let units = psi_core::calibrate::unit_costs(psi_core::Threads::new(threads));
            let inputs = psi_core::cost::Inputs {
                link: psi_core::cost::Link {
                    rtt: 0.0,
                    up: 1e12,
                    down: 1e12,
                },
                client: units,
                server: units,
            };
            let w = psi_core::cost::Workload::new(client.len() as u64, server.len() as u64)
                .with_labels(false);
            let c = psi_core::cost::choose(&w, &inputs, policy, psi_core::Protocol::ALL)
                .ok_or("no protocol to choose from")?;
            for p in &c.predictions {
                println!(
                    "  predicted {}: {:.1} ms ({} bytes){}",
                    p.protocol,
                    p.total() * 1e3,
                    p.bytes(),
                    if p.protocol == c.protocol {
                        "  <- chosen"
                    } else {
                        ""
                    }
                );
            }
            c.protocol
        }
        _ => return Err("unknown protocol choice".into()),
    };
    println!(
        "psi demo: {}, {threads} thread(s) per side, in process",
        protocol.description()
    );
    println!(
        "  client: {} contacts (embedded sample)   server: {} registry entries (generated)",
        thousands(client.len() as u64),
        thousands(server.len() as u64)
    );
    let output = if protocol == Protocol::Dh {
        let r = run_dh(&client, &server, threads)?;
        println!("\n  phase                                          wall ms    cpu ms");
        for (name, t) in [
            ("server  encode registry (once per key epoch)", r.encode),
            ("client  blind contacts", r.blind),
            ("server  evaluate blinded contacts", r.evaluate),
            ("client  unblind + finalize", r.finalize),
            ("client  match against encoded registry", r.matching),
        ] {
            println!("  {name:<45} {:>8} {:>9}", ms(t.wall), ms(t.cpu));
        }
        println!(
            "\n  bytes client -> server: {:>10}  (query)",
            thousands(r.query_bytes as u64)
        );
        println!(
            "  bytes server -> client: {:>10}  (evaluation)",
            thousands(r.evaluation_bytes as u64)
        );
        println!(
            "                          {:>10}  (encoded registry, {}-bit values, {:.2} bytes/entry; cacheable per key epoch)",
            thousands(r.set_bytes as u64),
            r.truncation_bits,
            r.set_bytes as f64 / r.server_items.max(1) as f64
        );
        r.output
    } else if protocol == Protocol::Ot {
        let config = psi_core::ot::OtConfig::new(psi_core::Threads::new(threads));
        let r = run_ot(
            &psi_core::ItemSet::new(&client),
            &std::sync::Arc::new(psi_core::ItemSet::new(&server)),
            &config,
        )?;
        print_steps(&r.steps);
        println!(
            "\n  bytes client -> server: {:>10}  ({} round trips, {} Cuckoo bins)",
            thousands(r.stats.client_to_server_bytes),
            r.stats.round_trips,
            r.stats.bins
        );
        println!(
            "  bytes server -> client: {:>10}",
            thousands(r.stats.server_to_client_bytes)
        );
        r.output
    } else if protocol == Protocol::Cm20 {
        let config = psi_core::cm20::Cm20Config::new(psi_core::Threads::new(threads));
        let r = crate::runner::run_cm20(
            &psi_core::ItemSet::new(&client),
            &std::sync::Arc::new(psi_core::ItemSet::new(&server)),
            &config,
        )?;
        print_steps(&r.steps);
        let p = r.stats.params;
        println!(
            "\n  bytes client -> server: {:>10}  ({} round trips, matrix {} x {})",
            thousands(r.stats.client_to_server_bytes),
            r.stats.round_trips,
            p.map_or(0, |p| p.height),
            p.map_or(0, |p| p.width)
        );
        println!(
            "  bytes server -> client: {:>10}",
            thousands(r.stats.server_to_client_bytes)
        );
        r.output
    } else {
        return Err(format!("{protocol} has no in-process demo"));
    };
    println!(
        "\n  {} of {} contacts are registered (expected {expected}):",
        output.matches.len(),
        client.len()
    );
    for m in &output.matches {
        let (name, id) = contacts[m.index];
        println!("    {name:<24} {id}");
    }
    if output.matches.len() != expected {
        return Err(format!(
            "found {} matches, expected {expected}",
            output.matches.len()
        ));
    }
    Ok(())
}

/// The in-process run's wall time per step, each with its side.
fn print_steps(steps: &[(psi_core::Phase, std::time::Duration)]) {
    println!("\n  phase                                          wall ms");
    for (phase, t) in steps {
        let side = if phase.is_client() {
            "client"
        } else {
            "server"
        };
        println!("  {side}  {:<37} {:>8}", phase.name(), ms(*t));
    }
}
