//! `psi`: the command-line front end of the PSI SDK.
//!
//! - `psi demo`: a complete private contact discovery run on an embedded address book
//!   and a generated registry, over HTTP through a real server on loopback.
//! - `psi serve`, `psi import`, `psi rotate-key`: run the reference server and manage
//!   its registry (docs/api.md).
//! - `psi token add|revoke|list`: bearer tokens issued through the registry database.
//! - `psi match`: match a contact file against a server.
//! - `psi loadgen`: concurrent clients against a server (docs/benchmarks.md).
//! - `psi attack`: each denial-of-service attack of issue 23 beside honest clients, on
//!   loopback (docs/reliability.md).
//! - `psi bench`: the benchmark table recorded in docs/benchmarks.md.

mod attack;
mod bench;
mod bench_labels;
mod bench_lanes;
mod bench_sync;
mod choice;
mod db_args;
mod demo;
mod format;
mod group;
mod import;
mod loadgen;
mod match_cmd;
mod measure;
mod output;
mod proc_status;
mod progress;
mod reseal_cmd;
mod rng;
mod runner;
mod seal_key_cmd;
mod serve;
mod synthetic;
mod tcp;
mod token_args;
mod token_cmd;

use clap::{Parser, Subcommand};
use psi_core::Protocol;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "psi",
    version,
    about = "Private contact discovery (private set intersection)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of its largest variant (`psi serve`'s many options)
// costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run a contact discovery on an embedded sample over HTTP on loopback (no setup).
    Demo {
        /// Protocol: auto (predicted best for this machine among the protocols the
        /// server offers, docs/protocol-choice.md), dh (DH-PSI), ot (OT-PSI), cm20
        /// (CM20-PSI) or gbf (GBF-PSI). The demo's server offers CM20-PSI and GBF-PSI only
        /// when forced (--protocol cm20 or gbf: they are opt-in on a server), so here auto
        /// picks DH-PSI or OT-PSI.
        #[arg(long, default_value = "auto", value_parser = choice::parse_arg)]
        protocol: choice::ProtocolArg,
        /// With --protocol auto: fastest, or fewest-bytes.
        #[arg(long, default_value = "fastest", value_parser = choice::parse_policy)]
        policy: psi_client::Policy,
        /// Entries in the generated registry.
        #[arg(long, default_value_t = 20_000)]
        registry_size: usize,
        /// Worker threads per side (default: all cores).
        #[arg(long)]
        threads: Option<usize>,
        /// Print a JSON summary instead of the table.
        #[arg(long)]
        json: bool,
        /// Run client and server in one process without HTTP (the pre-server demo).
        #[arg(long)]
        in_process: bool,
        /// Serve and use DH-PSI's sync mode (docs/protocol/sync.md): the client downloads
        /// a few bits per entry (the first sync) instead of the encoded set; the table
        /// shows the first sync's bytes, then a second run's (nothing to download).
        #[arg(long, conflicts_with = "in_process")]
        sync: bool,
        /// Group PSI instead: N simulated phones (2 to 16) through the relay of an embedded
        /// server on loopback, with synthetic overlapping address books; prints the
        /// common contacts and the bytes and time per phone.
        #[arg(long, value_name = "N")]
        group: Option<u8>,
        /// With --group: contacts per phone.
        #[arg(long, default_value_t = 1000, requires = "group")]
        group_items: usize,
    },
    /// Group PSI through a server's relay: several phones learn the contacts all of them
    /// hold (docs/protocol/group-psi.md).
    Group {
        #[command(subcommand)]
        command: group::GroupCommand,
    },
    /// Run the HTTP server (docs/api.md).
    Serve(serve::ServeArgs),
    /// Import contacts into the registry (CSV or one per line), or remove them.
    Import(import::ImportArgs),
    /// Start a new key epoch: new key, every output and the encoded set recomputed.
    RotateKey {
        #[command(flatten)]
        server: db_args::ServerArgs,
    },
    /// Issue, revoke and list bearer tokens (each with its own budget) in the registry
    /// database; a running server sees changes on its next request.
    Token {
        #[command(subcommand)]
        command: token_cmd::TokenCommand,
    },
    /// The at-rest key file that seals the OPRF keys in a shared database
    /// (docs/deploy.md "At-rest key").
    SealKey {
        #[command(subcommand)]
        command: seal_key_cmd::SealKeyCommand,
    },
    /// Re-seal every OPRF key in a PostgreSQL database under the first key of the at-rest
    /// key file (the at-rest key rotation, docs/deploy.md "At-rest key").
    Reseal(reseal_cmd::ResealArgs),
    /// Match a contact file (CSV or one per line) against a server.
    Match(match_cmd::MatchArgs),
    /// Load generator: concurrent clients matching against a server.
    Loadgen(loadgen::LoadgenArgs),
    /// Each denial-of-service attack (session table filling, OT slots held, slow readers,
    /// connection hogging, failed steps, refused OT requests, encoded-set downloads,
    /// stalled uploads, unknown tokens, drained budgets, label fetches, cheap requests
    /// against a server on PostgreSQL, quotes in X-Forwarded-For) beside honest clients,
    /// each against a fresh `psi serve` on loopback: prints the honest runs completed and
    /// their p50/p99 without and with the attack (docs/reliability.md).
    Attack(attack::AttackArgs),
    /// Print the benchmark table (docs/benchmarks.md).
    Bench {
        /// Small sizes only, for a smoke test (seconds instead of minutes).
        #[arg(long)]
        quick: bool,
        /// Thread counts to run, comma separated.
        #[arg(long, value_delimiter = ',', default_values_t = vec![1, 2])]
        threads: Vec<usize>,
        /// Only the fixed cost of a balanced 2^10 OT-PSI run (over loopback TCP, the base
        /// OTs alone, in one process), this many rounds, with medians.
        #[arg(long, value_name = "ROUNDS", conflicts_with_all = ["quick", "protocol"])]
        ot_fixed_cost: Option<usize>,
        /// Only the label step: its bytes and what a fetched bucket hides, for sessions of
        /// 1 to 10,000 contacts against 10^5 and 10^6 labelled entries (with `--quick`:
        /// one small registry).
        #[arg(long, conflicts_with_all = ["ot_fixed_cost", "protocol"])]
        labels: bool,
        /// Only OT-PSI's and CM20-PSI's labels with and without label lanes: balanced
        /// runs at 2^12, 2^16 and 2^20 in one process, beside the label step lanes
        /// replace, medians of 3 (with `--quick`: one run at 2^10; `--protocol ot` or
        /// `cm20` for one of them).
        #[arg(long, conflicts_with_all = ["ot_fixed_cost", "labels"])]
        lanes: bool,
        /// With `--ot-fixed-cost`: pin the client's thread to the first CPU this process may
        /// use and the server's to the second (Linux), so the two sides never share a core,
        /// as on two machines.
        #[arg(long, requires = "ot_fixed_cost")]
        pin: bool,
        /// Protocols to run, comma separated (`dh`, `ot`, `cm20`, `gbf`; default all).
        #[arg(long, value_delimiter = ',', value_parser = choice::parse_protocol)]
        protocol: Vec<Protocol>,
        /// Only sync mode at scale, through the real path (a SQLite store, the server's
        /// load, loopback HTTP, the reference client): the first sync, runs of 1, 100
        /// and 1,000 contacts, a day's delta at 0.1% churn, beside the formula and its
        /// value at 10^8, for these registry sizes (comma separated; default 10^6 and
        /// 10^7: about 15 minutes and 6 GB here).
        #[arg(long, value_name = "SIZES", num_args = 0..=1, require_equals = true,
              value_delimiter = ',', conflicts_with_all = ["ot_fixed_cost", "protocol", "labels", "lanes", "quick"])]
        sync: Option<Vec<u64>>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Output to a closed pipe (`psi match --json | head`) ends the program quietly, as
    // for other command-line tools, instead of panicking in `println!`.
    output::quiet_on_broken_pipe();
    let result = match cli.command {
        Command::Demo {
            threads,
            json,
            group: Some(n),
            group_items,
            ..
        } => group::demo(n, group_items, threads, json),
        Command::Demo {
            protocol,
            policy,
            registry_size,
            threads,
            json,
            in_process,
            sync,
            group: None,
            group_items: _,
        } => {
            let choice = choice::resolve(protocol, policy);
            if in_process {
                demo::run_in_process(choice, registry_size, threads)
            } else {
                demo::run(choice, registry_size, threads, json, sync)
            }
        }
        Command::Group { command } => group::run(command),
        Command::Serve(args) => serve::run(args),
        Command::Import(args) => import::run(args),
        Command::RotateKey { server } => import::rotate(server),
        Command::Token { command } => token_cmd::run(command),
        Command::SealKey { command } => seal_key_cmd::run(command),
        Command::Reseal(args) => reseal_cmd::run(args),
        Command::Match(args) => match_cmd::run(args),
        Command::Loadgen(args) => loadgen::run(args),
        Command::Attack(args) => attack::run(args),
        Command::Bench {
            ot_fixed_cost: Some(rounds),
            pin,
            ..
        } => bench::run_ot_fixed_cost(rounds, pin),
        Command::Bench {
            labels: true,
            quick,
            ..
        } => bench_labels::run(quick),
        Command::Bench {
            lanes: true,
            quick,
            threads,
            protocol,
            ..
        } => {
            let protocols = if protocol.is_empty() {
                bench_lanes::PROTOCOLS.to_vec()
            } else {
                protocol
            };
            bench_lanes::run(
                quick,
                &protocols,
                threads.iter().copied().max().unwrap_or(2),
            )
        }
        Command::Bench {
            sync: Some(sizes),
            threads,
            ..
        } => {
            let sizes = if sizes.is_empty() {
                bench_sync::DEFAULT_SIZES.to_vec()
            } else {
                sizes
            };
            bench_sync::run_sizes(&sizes, threads.iter().copied().max().unwrap_or(2))
        }
        Command::Bench {
            quick,
            threads,
            protocol,
            ..
        } => {
            let protocols = if protocol.is_empty() {
                Protocol::ALL.to_vec()
            } else {
                protocol
            };
            bench::run(quick, &threads, &protocols)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("psi: error: {e}");
            ExitCode::FAILURE
        }
    }
}
