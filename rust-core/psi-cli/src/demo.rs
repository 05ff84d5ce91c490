//! `psi demo`: private contact discovery on an embedded address book.

use crate::Protocol;
use crate::measure::{ms, thousands};
use crate::runner::run_dh;

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

pub fn run(protocol: Protocol, registry_size: usize, threads: Option<usize>) -> Result<(), String> {
    let threads = threads.unwrap_or_else(|| psi_core::Threads::available().get());
    let contacts = sample_contacts();
    let client: Vec<Vec<u8>> = contacts
        .iter()
        .map(|(_, id)| id.as_bytes().to_vec())
        .collect();
    let server = registry(&contacts, registry_size);
    let expected = contacts
        .iter()
        .step_by(OVERLAP_EVERY)
        .take(registry_size)
        .count();

    match protocol {
        Protocol::Dh => {
            println!(
                "psi demo: DH-PSI (RFC 9497 OPRF, ristretto255-SHA512), {threads} thread(s) per side"
            );
            println!(
                "  client: {} contacts (embedded sample)   server: {} registry entries (generated)",
                thousands(client.len() as u64),
                thousands(server.len() as u64)
            );
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
            println!(
                "\n  {} of {} contacts are registered (expected {expected}):",
                r.output.matches.len(),
                client.len()
            );
            for m in &r.output.matches {
                let (name, id) = contacts[m.index];
                println!("    {name:<24} {id}");
            }
            if r.output.matches.len() != expected {
                return Err(format!(
                    "found {} matches, expected {expected}",
                    r.output.matches.len()
                ));
            }
        }
    }
    Ok(())
}
