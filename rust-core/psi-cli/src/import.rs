//! `psi import` and `psi rotate-key`: manage the registry database.

use crate::db_args::ServerArgs;
use crate::progress::progress_bar;
use crate::synthetic;
use psi_contacts::{Format, Invalid, Normalizer, read_contacts};
use psi_core::Threads;
use psi_server::storage::{self, RegistryStore};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Contact file: CSV (identifier[,label] or a header naming the columns) or one
    /// identifier per line; CSV if any line has a comma (docs/contacts.md "Files"). A
    /// blank label cell means no label. `-` reads standard input.
    file: Option<PathBuf>,
    /// Default region for phone numbers without a country code (ISO 3166, e.g. US, GB).
    #[arg(long, default_value = "US")]
    region: String,
    /// Remove the listed identifiers instead of adding them.
    #[arg(long)]
    remove: bool,
    /// Add N synthetic entries (+1202xxxxxxx with labels user-N), for load tests.
    #[arg(long, hide = true)]
    synthetic: Option<u64>,
    /// Print a JSON summary.
    #[arg(long)]
    json: bool,
}

fn open(server: &ServerArgs) -> Result<Box<dyn RegistryStore>, String> {
    let db = server.db.database()?;
    db.open_registry().map_err(db_error(server))
}

/// A store error as the command reports it: with the database's path, so "disk I/O
/// error" or "database is locked" says which file (the same for every step, not only
/// the opening).
fn db_error(server: &ServerArgs) -> impl Fn(psi_server::StoreError) -> String + '_ {
    move |e| format!("{}: {e}", server.db.shown())
}

fn refresh(
    store: &mut dyn RegistryStore,
    server: &ServerArgs,
    quiet: bool,
) -> Result<(u64, bool), String> {
    let pb = progress_bar(0, "computing OPRF outputs", quiet);
    let r = storage::refresh(
        store,
        server.max_client_items,
        Threads::available(),
        &mut |done, total| {
            pb.set_length(total);
            pb.set_position(done);
        },
    )
    .map_err(db_error(server))?;
    pb.finish_and_clear();
    Ok((r.outputs_computed, r.set_rebuilt))
}

/// Says (on stderr) when the database holds an encoded set for another
/// `--max-client-items` than the one this command builds: a server running with that
/// size finds no set at its size and encodes its own when it picks the change up.
fn note_other_sizes(store: &dyn RegistryStore, server: &ServerArgs) -> Result<(), String> {
    let ours = server
        .max_client_items
        .min(psi_core::dh::limits::MAX_CLIENT_ITEMS);
    let others: Vec<String> = store
        .encoded_set_sizes()
        .map_err(db_error(server))?
        .into_iter()
        .filter(|&n| n != ours)
        .map(|n| n.to_string())
        .collect();
    if !others.is_empty() {
        eprintln!(
            "note: the database also holds an encoded set for --max-client-items {}; this \
             builds it for {ours}: a `psi serve` running with another size encodes its own \
             set when it picks the change up (give the server's --max-client-items to spare it)",
            others.join(", ")
        );
    }
    Ok(())
}

pub fn run(args: ImportArgs) -> Result<(), String> {
    let normalizer = Normalizer::new(&args.region).map_err(|e| e.to_string())?;
    let mut store = open(&args.server)?;
    let mut counts = psi_server::ImportCounts::default();
    let mut rejected: Vec<(usize, Invalid)> = Vec::new();
    let mut removed = 0u64;
    // The file as read: its format, rows and rows with a label.
    let mut file: Option<(Format, usize, usize)> = None;
    if let Some(n) = args.synthetic {
        // One streamed import (one transaction, the version bumped once): the rows are
        // made as the store takes them, never all held at once.
        let pb = progress_bar(n, "adding synthetic entries", args.json);
        let mut rows = (0..n).map(|k| {
            if k % 100_000 == 0 {
                pb.set_position(k);
            }
            (synthetic::entry(k), Some(synthetic::label(k)))
        });
        let c = store
            .add_entry_stream(&mut rows)
            .map_err(db_error(&args.server))?;
        counts.accepted += c.accepted;
        counts.duplicates += c.duplicates;
        pb.finish_and_clear();
    }
    if let Some(path) = &args.file {
        let contacts = if path.as_os_str() == "-" {
            read_contacts(std::io::stdin().lock())
        } else {
            let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
            read_contacts(f)
        }
        .map_err(|e| format!("{}: {e}", path.display()))?;
        file = Some((contacts.format, contacts.rows.len(), contacts.labeled()));
        let rows = contacts.rows;
        let normalized = normalizer.normalize_all(rows.iter().map(|r| r.identifier.as_str()));
        rejected.extend(
            normalized
                .rejected
                .iter()
                .map(|&(i, reason)| (rows[i].line, reason)),
        );
        let mut good = normalized
            .accepted
            .into_iter()
            .map(|(i, c)| (c.value, rows[i].label.clone()));
        // Both through the store's bulk path (PostgreSQL: `COPY` and one statement), one
        // transaction each: a removal is a delta like an addition, and the refresh below
        // computes only the outputs of the entries added.
        if args.remove {
            removed = store
                .remove_entry_stream(&mut good.map(|(id, _)| id))
                .map_err(db_error(&args.server))?;
        } else {
            let c = store
                .add_entry_stream(&mut good)
                .map_err(db_error(&args.server))?;
            counts.accepted += c.accepted;
            counts.duplicates += c.duplicates;
        }
    } else if args.synthetic.is_none() {
        return Err("give a contact file (or - for standard input)".into());
    }
    counts.rejected = rejected.len() as u64;
    note_other_sizes(store.as_ref(), &args.server)?;
    let (computed, rebuilt) = refresh(store.as_mut(), &args.server, args.json)?;
    let total = store.len().map_err(db_error(&args.server))?;
    if args.json {
        let v = serde_json::json!({
            "accepted": counts.accepted,
            "duplicates": counts.duplicates,
            "rejected": counts.rejected,
            "removed": removed,
            "rejected_rows": rejected.iter().map(|(l, r)| serde_json::json!({"line": l, "reason": r.name(), "message": r.to_string()})).collect::<Vec<_>>(),
            "format": file.map(|(f, _, _)| f.name()),
            "rows": file.map_or(0, |(_, n, _)| n),
            "labeled_rows": file.map_or(0, |(_, _, n)| n),
            "registry_entries": total,
            "outputs_computed": computed,
            "encoded_set_rebuilt": rebuilt,
        });
        println!("{v}");
    } else {
        if let Some((format, rows, labeled)) = file {
            println!("read {rows} rows ({format}), {labeled} with a label");
        }
        if args.remove {
            println!("removed {removed}, rejected {}", counts.rejected);
        } else {
            println!(
                "accepted {}, duplicates {}, rejected {}",
                counts.accepted, counts.duplicates, counts.rejected
            );
        }
        for (line, reason) in &rejected {
            println!("  line {line}: {} ({reason})", reason.name());
        }
        println!(
            "registry: {total} entries; {computed} OPRF outputs computed; encoded set {}",
            if rebuilt { "rebuilt" } else { "unchanged" }
        );
        println!(
            "(a running `psi serve` picks the changes up within its --watch-store period, 2 s by default, or at once on SIGHUP)"
        );
    }
    Ok(())
}

pub fn rotate(server: ServerArgs) -> Result<(), String> {
    let mut store = open(&server)?;
    note_other_sizes(store.as_ref(), &server)?;
    // Held through the rotation and its build (the refresh takes it again on the same
    // store): a server's scheduled rotation on a shared store waits instead of racing
    // this one for the next epoch.
    let lease = store.lease_builds().map_err(db_error(&server))?;
    let key = store.rotate_key().map_err(db_error(&server))?;
    let (computed, _) = refresh(store.as_mut(), &server, false)?;
    drop(lease);
    // SQLite zeroes the old key in the file and its log; PostgreSQL keeps deleted rows
    // until VACUUM (docs/deploy.md "Tables"), sealed.
    let deleted = match server.db.database()? {
        psi_server::Database::Sqlite(_) => "old key deleted and scrubbed from the database file",
        _ => "old key deleted (its sealed row stays in dead tuples until VACUUM)",
    };
    println!(
        "key epoch {} started; {computed} OPRF outputs recomputed, encoded set rebuilt; {deleted}",
        key.epoch()
    );
    println!(
        "(a running `psi serve` picks it up within its --watch-store period, 2 s by default, or \
         at once on SIGHUP; sessions of the old epoch finish within the overlap)"
    );
    Ok(())
}
