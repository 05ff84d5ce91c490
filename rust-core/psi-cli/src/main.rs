//! `psi`: the command-line front end of the PSI SDK.
//!
//! - `psi demo`: a complete private contact discovery run on an embedded address book
//!   and a generated registry, client and server in one process through the real
//!   message encoding.
//! - `psi bench`: the benchmark table recorded in docs/benchmarks.md.

mod bench;
mod demo;
mod measure;
mod runner;

use clap::{Parser, Subcommand, ValueEnum};
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

/// Which PSI protocol to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Protocol {
    /// DH-PSI on the RFC 9497 OPRF over ristretto255: fewest bytes, cacheable server set.
    Dh,
}

#[derive(Subcommand)]
enum Command {
    /// Run a contact discovery on an embedded sample (no setup needed).
    Demo {
        /// Protocol to use.
        #[arg(long, value_enum, default_value_t = Protocol::Dh)]
        protocol: Protocol,
        /// Entries in the generated registry.
        #[arg(long, default_value_t = 20_000)]
        registry_size: usize,
        /// Worker threads per side (default: all cores).
        #[arg(long)]
        threads: Option<usize>,
    },
    /// Print the benchmark table (docs/benchmarks.md).
    Bench {
        /// Small sizes only, for a smoke test (seconds instead of minutes).
        #[arg(long)]
        quick: bool,
        /// Thread counts to run, comma separated.
        #[arg(long, value_delimiter = ',', default_values_t = vec![1, 2])]
        threads: Vec<usize>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo {
            protocol,
            registry_size,
            threads,
        } => demo::run(protocol, registry_size, threads),
        Command::Bench { quick, threads } => bench::run(quick, &threads),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("psi: error: {e}");
            ExitCode::FAILURE
        }
    }
}
