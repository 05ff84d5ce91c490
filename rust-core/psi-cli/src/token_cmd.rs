//! `psi token add|revoke|list`: bearer tokens issued through the registry database.
//! A running `psi serve` on the same database sees changes on the next request.
//! The token itself is printed once, by `add`; the database keeps only its SHA-256.

use crate::db_args::DbArgs;
use psi_server::storage::{AccountStore, Revoked, TokenInfo};

/// The registry database (`--db`), as for `psi serve`.
#[derive(clap::Args, Debug)]
pub struct DbArg {
    #[command(flatten)]
    db: DbArgs,
}

impl DbArg {
    fn open(&self) -> Result<Box<dyn AccountStore>, String> {
        let db = self.db.database()?;
        db.open_accounts().map_err(|e| format!("{db}: {e}"))
    }
}

#[derive(clap::Subcommand, Debug)]
pub enum TokenCommand {
    /// Issue a token: printed once on standard output (e.g. `psi token add > alice.token`,
    /// then `psi match --token-file alice.token`); only its SHA-256 digest is stored.
    /// The first issued token turns authentication on for `psi serve` on this database.
    Add {
        #[command(flatten)]
        db: DbArg,
        /// A name to recognise it by in `psi token list` (at most 64 characters).
        #[arg(long)]
        name: Option<String>,
        /// Its own items-per-hour budget (default: the server's --items-per-hour;
        /// 0 = unlimited).
        #[arg(long)]
        items_per_hour: Option<u64>,
    },
    /// Revoke a token by id: refused from the server's next request on.
    Revoke {
        #[command(flatten)]
        db: DbArg,
        /// The token's id (see `psi token list`).
        id: i64,
    },
    /// List issued tokens (never the tokens themselves).
    List {
        #[command(flatten)]
        db: DbArg,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(command: TokenCommand) -> Result<(), String> {
    match command {
        TokenCommand::Add {
            db,
            name,
            items_per_hour,
        } => {
            let new = db
                .open()?
                .add_token(name.as_deref(), items_per_hour)
                .map_err(|e| e.to_string())?;
            eprintln!(
                "psi token: issued token {}{}; it is shown only now, keep it secret",
                new.info.id,
                new.info
                    .name
                    .as_deref()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default()
            );
            println!("{}", new.token.as_str());
            Ok(())
        }
        TokenCommand::Revoke { db, id } => match db.open()?.revoke_token(id) {
            Ok(Revoked::Now) => {
                println!("token {id} revoked");
                Ok(())
            }
            Ok(Revoked::Already) => {
                println!("token {id} was already revoked");
                Ok(())
            }
            Ok(Revoked::NoSuchToken) => Err(format!("no token with id {id}")),
            Ok(_) => Err(format!("token {id}: unexpected result")),
            Err(e) => Err(e.to_string()),
        },
        TokenCommand::List { db, json } => {
            let tokens = db.open()?.tokens().map_err(|e| e.to_string())?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&tokens).map_err(|e| e.to_string())?
                );
            } else {
                print_table(&tokens);
            }
            Ok(())
        }
    }
}

fn print_table(tokens: &[TokenInfo]) {
    if tokens.is_empty() {
        println!("no tokens issued (authentication is off unless --token/--token-file is given)");
        return;
    }
    println!(
        "{:>4}  {:<8}  {:<20}  {:>13}  name",
        "id", "status", "created (UTC)", "items/hour"
    );
    for t in tokens {
        println!(
            "{:>4}  {:<8}  {:<20}  {:>13}  {}",
            t.id,
            if t.revoked { "revoked" } else { "active" },
            t.created,
            budget_cell(t.items_per_hour),
            t.name.as_deref().unwrap_or("")
        );
    }
}

/// A token's items-per-hour budget as the table shows it: its own number, `unlimited` for
/// its own 0 (as `psi token add --items-per-hour 0` sets), `default` for none of its own
/// (the server's --items-per-hour). `--json` keeps the stored number (0 = unlimited).
fn budget_cell(items_per_hour: Option<u64>) -> String {
    match items_per_hour {
        None => "default".to_string(),
        Some(0) => "unlimited".to_string(),
        Some(n) => n.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::budget_cell;

    #[test]
    fn an_unlimited_budget_reads_unlimited_not_zero() {
        assert_eq!(budget_cell(Some(0)), "unlimited");
        assert_eq!(budget_cell(Some(500)), "500");
        assert_eq!(budget_cell(None), "default");
    }
}
