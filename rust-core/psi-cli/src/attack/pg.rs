//! `psi attack` on PostgreSQL (`pg-lookups`, `--postgres`): a throwaway cluster on
//! 127.0.0.1 (psi-test-support's, as the Rust tests start it: PSI_PG_BIN or
//! /usr/lib/postgresql/*/bin; stopped and removed with the command, also when it is
//! killed), one synthetic registry imported into it by `psi import --synthetic`, and a
//! fresh copy of it (`CREATE DATABASE ... TEMPLATE`) for each attack's server, which
//! reaches the database through a [`DelayRelay`] of `--db-delay-ms` each way.

use super::relay::DelayRelay;
use psi_test_support::pg::TempPostgres;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The database the registry is imported into, the template of every server's copy.
const REGISTRY: &str = "registry";

pub struct PgBackend {
    // Dropped first: the relay's connections end before the cluster stops.
    relay: DelayRelay,
    pg: TempPostgres,
    seal_key: PathBuf,
    delay: Duration,
}

impl PgBackend {
    /// Starts the cluster, imports `registry_size` synthetic entries (directly, without
    /// the delay) and starts the relay. `dir`: where the at-rest key file is written.
    pub fn start(dir: &Path, registry_size: u64, delay: Duration) -> Result<PgBackend, String> {
        psi_test_support::pg::find_bin_dir()?;
        eprintln!("starting a throwaway PostgreSQL cluster on 127.0.0.1...");
        let pg = std::panic::catch_unwind(TempPostgres::start)
            .map_err(|p| format!("starting PostgreSQL failed: {}", panic_text(&p)))?;
        let seal_key = dir.join("seal.key");
        psi(&["seal-key".as_ref(), "new".as_ref(), seal_key.as_os_str()])?;
        let created = std::panic::catch_unwind(|| pg.create_database(REGISTRY));
        let direct = created.map_err(|p| format!("creating the database: {}", panic_text(&p)))?;
        eprintln!("importing {registry_size} synthetic entries into PostgreSQL...");
        let password = pg.password_file();
        psi(&[
            "import".as_ref(),
            "--db".as_ref(),
            direct.as_ref(),
            "--db-password-file".as_ref(),
            password.as_os_str(),
            "--seal-key-file".as_ref(),
            seal_key.as_os_str(),
            "--synthetic".as_ref(),
            registry_size.to_string().as_ref(),
        ])?;
        let target = SocketAddr::from((Ipv4Addr::LOCALHOST, pg.port()));
        let relay =
            DelayRelay::start(target, delay).map_err(|e| format!("starting the db relay: {e}"))?;
        Ok(PgBackend {
            relay,
            pg,
            seal_key,
            delay,
        })
    }

    /// A fresh copy of the registry named after `attack`, and the `psi serve` arguments
    /// that reach it through the relay.
    pub fn server_db(&self, attack: &str) -> Result<Vec<String>, String> {
        let name = format!("a_{}", attack.replace('-', "_"));
        let sql = format!("create database \"{name}\" template \"{REGISTRY}\"");
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.pg.psql_in("postgres", &sql)
        }))
        .map_err(|p| format!("copying the registry: {}", panic_text(&p)))?;
        Ok(vec![
            "--db".into(),
            format!("postgres://psi@127.0.0.1:{}/{name}", self.relay.port()),
            "--db-password-file".into(),
            self.pg.password_file().display().to_string(),
            "--seal-key-file".into(),
            self.seal_key.display().to_string(),
        ])
    }

    /// The delay each way between the servers and the database.
    pub fn delay(&self) -> Duration {
        self.delay
    }
}

/// Runs this program with `args`, its output discarded; an error when it fails.
fn psi(args: &[&std::ffi::OsStr]) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let what = args
        .first()
        .map_or(String::new(), |a| a.to_string_lossy().into_owned());
    let status = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("psi {what}: {e}"))?;
    if !status.success() {
        return Err(format!("psi {what} on PostgreSQL failed ({status})"));
    }
    Ok(())
}

/// The message of a caught panic (psi-test-support reports its failures by panicking).
fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".into())
}
