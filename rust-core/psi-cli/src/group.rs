//! `psi group create|join` (group PSI through a server's relay) and `psi demo --group N`
//! (N simulated phones on loopback): docs/protocol/group-psi.md, docs/adr/0051-group-relay.md.

use crate::format::{ms, thousands};
use psi_client::group::{GroupOptions, GroupReport};
use psi_client::{Client, ClientConfig};
use psi_contacts::{Normalizer, read_rows};
use psi_core::{ItemSet, Threads};
use std::path::PathBuf;
use std::time::Duration;

/// What every group command shares.
#[derive(clap::Args, Debug)]
pub struct Common {
    /// Server base URL (plain http:// only to loopback).
    #[arg(long)]
    server: String,
    /// Contact file: CSV or one identifier per line (docs/contacts.md "Files").
    file: PathBuf,
    /// Default region for phone numbers without a country code.
    #[arg(long, default_value = "US")]
    region: String,
    #[command(flatten)]
    token: crate::token_args::TokenArgs,
    /// Worker threads (default: 1).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// The longest the whole run may take, waiting for the group included, in seconds.
    #[arg(long, default_value_t = 300)]
    deadline: u64,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Subcommand, Debug)]
pub enum GroupCommand {
    /// Create a group as its leader: prints the code to show the other phones, waits for
    /// them, then prints the contacts every phone holds.
    Create {
        #[command(flatten)]
        common: Common,
        /// Phones in the group, this one included (2 to 16).
        #[arg(long)]
        size: u8,
        /// Do not send the common contacts to the members at the end.
        #[arg(long)]
        no_share: bool,
    },
    /// Join a group with the code its leader shows; prints the common contacts if the
    /// leader shares them.
    Join {
        #[command(flatten)]
        common: Common,
        /// The code the leader shows (GROUP_ID.SECRET).
        #[arg(long)]
        code: String,
    },
}

fn read_items(common: &Common) -> Result<Vec<Vec<u8>>, String> {
    let path = &common.file;
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let rows = read_rows(f).map_err(|e| format!("{}: {e}", path.display()))?;
    let n = Normalizer::new(&common.region).map_err(|e| e.to_string())?;
    let normalized = n.normalize_all(rows.iter().map(|r| r.identifier.as_str()));
    if !normalized.rejected.is_empty() {
        eprintln!(
            "{} entries are not valid phone numbers or emails: left out",
            normalized.rejected.len()
        );
    }
    Ok(normalized
        .accepted
        .into_iter()
        .map(|(_, c)| c.value.into_bytes())
        .collect())
}

fn client(common: &Common) -> Result<Client, String> {
    let mut config = ClientConfig::default();
    if let Some(t) = common.token.resolve()? {
        config = config.with_token(t);
    }
    Ok(Client::new(&common.server, config))
}

fn options(common: &Common, share: bool) -> GroupOptions {
    let mut o = GroupOptions::default();
    o.threads = Threads::new(common.threads.max(1));
    o.deadline = Duration::from_secs(common.deadline.max(1));
    o.share_result = share;
    o
}

pub fn run(command: GroupCommand) -> Result<(), String> {
    let (common, report) = match command {
        GroupCommand::Create {
            common,
            size,
            no_share,
        } => {
            let items = read_items(&common)?;
            let client = client(&common)?;
            let party = client.group_create(size).map_err(|e| e.to_string())?;
            if common.json {
                println!("{}", serde_json::json!({ "code": party.code() }));
            } else {
                println!("group code (show it to the other {} phones):", size - 1);
                println!("  {}", party.code());
                println!("waiting for them to join...");
            }
            let report = party
                .run(ItemSet::new(items), &options(&common, !no_share))
                .map_err(|e| e.to_string())?;
            (common, report)
        }
        GroupCommand::Join { common, code } => {
            let items = read_items(&common)?;
            let client = client(&common)?;
            let party = client.group_join(&code).map_err(|e| e.to_string())?;
            if !common.json {
                println!("joined as phone {} of {}", party.party(), party.size());
            }
            let report = party
                .run(ItemSet::new(items), &options(&common, true))
                .map_err(|e| e.to_string())?;
            (common, report)
        }
    };
    print_report(&report, common.json);
    Ok(())
}

fn common_strings(report: &GroupReport) -> Option<Vec<String>> {
    report.common.as_ref().map(|c| {
        c.iter()
            .map(|i| String::from_utf8_lossy(i).into_owned())
            .collect()
    })
}

fn print_report(report: &GroupReport, json: bool) {
    let common = common_strings(report);
    if json {
        println!("{}", party_json(report, common.as_deref()));
        return;
    }
    match &common {
        Some(c) => {
            println!("{} contacts every phone holds:", c.len());
            for i in c {
                println!("  {i}");
            }
        }
        None => println!("the leader did not share the common contacts"),
    }
    println!(
        "phone {} of {}: {} B sent, {} B received, {} ms ({} ms waiting, {} ms computing)",
        report.party,
        report.size,
        thousands(report.bytes_sent),
        thousands(report.bytes_received),
        ms(report.elapsed),
        ms(report.waited),
        ms(report.compute)
    );
}

fn party_json(r: &GroupReport, common: Option<&[String]>) -> serde_json::Value {
    serde_json::json!({
        "party": r.party,
        "size": r.size,
        "common": common,
        "bytes_sent": r.bytes_sent,
        "bytes_received": r.bytes_received,
        "protocol_bytes_sent": r.protocol_bytes_sent,
        "protocol_bytes_received": r.protocol_bytes_received,
        "requests": r.requests,
        "elapsed_ms": r.elapsed.as_secs_f64() * 1e3,
        "waited_ms": r.waited.as_secs_f64() * 1e3,
        "compute_ms": r.compute.as_secs_f64() * 1e3,
    })
}

/// The demo's synthetic address books: `common` numbers every phone holds, and `own`
/// numbers of each phone's own (in ranges no other phone uses), shuffled together.
fn address_books(parties: usize, items: usize) -> (Vec<Vec<Vec<u8>>>, Vec<Vec<u8>>) {
    let common_n = (items / 4).max(1).min(items);
    let common: Vec<Vec<u8>> = (0..common_n)
        .map(|i| format!("+1202555{i:04}").into_bytes())
        .collect();
    let books = (0..parties)
        .map(|p| {
            let mut b = common.clone();
            // Half of the rest shared with the next phone only (so pairwise overlaps are
            // larger than the group's), the rest its own.
            for i in 0..items - common_n {
                let owner = if i % 2 == 0 { p } else { (p + 1) % parties };
                b.push(format!("+1303{owner:02}{i:05}").into_bytes());
            }
            b.rotate_left(p % items.max(1));
            b
        })
        .collect();
    (books, common)
}

/// `psi demo --group N`: an embedded server on loopback and `N` phones, each on its own
/// thread with its own client, with synthetic overlapping address books of `items`
/// contacts; prints the common contacts and a table of bytes and time per phone.
pub fn demo(parties: u8, items: usize, threads: Option<usize>, json: bool) -> Result<(), String> {
    if !(2..=16).contains(&parties) {
        return Err("--group takes 2 to 16 phones".into());
    }
    let items = items.max(1);
    let mut config = psi_server::Config::default();
    config.db = psi_server::Database::memory();
    config.build_threads = 1;
    config.workers = 1;
    // One address (loopback) for every phone: room for the demo's posts.
    config.groups.bytes_per_hour = 0;
    let state = psi_server::AppState::open(config).map_err(|e| e.to_string())?;
    let srv = psi_server::RunningServer::start(state, ([127, 0, 0, 1], 0).into())
        .map_err(|e| format!("cannot start the loopback server: {e}"))?;
    let url = srv.url();
    let (books, expected) = address_books(parties as usize, items);
    let mut options = GroupOptions::default();
    options.threads = Threads::new(threads.unwrap_or(1).max(1));
    options.deadline = Duration::from_secs(600);
    let leader_client = Client::new(&url, ClientConfig::default());
    let leader = leader_client
        .group_create(parties)
        .map_err(|e| e.to_string())?;
    let code = leader.code();
    let mut books = books.into_iter();
    let leader_items = books.next().unwrap_or_default();
    let reports: Vec<Result<GroupReport, String>> = std::thread::scope(|s| {
        let mut handles = Vec::new();
        for book in books {
            let (url, code, options) = (url.clone(), code.clone(), options.clone());
            handles.push(s.spawn(move || {
                let c = Client::new(&url, ClientConfig::default());
                let p = c.group_join(&code).map_err(|e| e.to_string())?;
                p.run(ItemSet::new(book), &options)
                    .map_err(|e| e.to_string())
            }));
        }
        let lead = leader
            .run(ItemSet::new(leader_items), &options)
            .map_err(|e| e.to_string());
        let mut all = vec![lead];
        for h in handles {
            all.push(
                h.join()
                    .unwrap_or_else(|_| Err("a phone's thread panicked".into())),
            );
        }
        all
    });
    let counts = srv.state.group_counts();
    srv.shutdown().map_err(|e| e.to_string())?;
    let reports: Vec<GroupReport> = reports.into_iter().collect::<Result<_, _>>()?;
    let mut reports = reports;
    reports.sort_by_key(|r| r.party);
    let common = common_strings(&reports[0]).unwrap_or_default();
    let want: Vec<String> = expected
        .iter()
        .map(|i| String::from_utf8_lossy(i).into_owned())
        .collect();
    let mut sorted = common.clone();
    sorted.sort();
    let mut want_sorted = want;
    want_sorted.sort();
    let correct = sorted == want_sorted
        && reports
            .iter()
            .all(|r| r.common.as_ref() == reports[0].common.as_ref());
    if json {
        let v = serde_json::json!({
            "parties": parties,
            "items_per_phone": items,
            "common": common.len(),
            "correct": correct,
            "groups_left_on_server": counts.groups,
            "phones": reports.iter().map(|r| party_json(r, None)).collect::<Vec<_>>(),
        });
        println!("{v}");
    } else {
        println!(
            "{parties} phones, {} contacts each, through a relay on loopback",
            thousands(items as u64)
        );
        println!("{} contacts every phone holds (first 5):", common.len());
        for c in common.iter().take(5) {
            println!("  {c}");
        }
        println!(
            "{:>6} {:>8} {:>14} {:>14} {:>10} {:>10} {:>10}",
            "phone", "role", "bytes sent", "bytes recv", "total ms", "wait ms", "cpu ms"
        );
        for r in &reports {
            println!(
                "{:>6} {:>8} {:>14} {:>14} {:>10} {:>10} {:>10}",
                r.party,
                if r.party == 0 { "leader" } else { "member" },
                thousands(r.bytes_sent),
                thousands(r.bytes_received),
                ms(r.elapsed),
                ms(r.waited),
                ms(r.compute)
            );
        }
        println!(
            "result {} the common contacts; groups left on the server: {}",
            if correct { "matches" } else { "DOES NOT match" },
            counts.groups
        );
    }
    if !correct {
        return Err("the group's result is not the common contacts".into());
    }
    Ok(())
}
