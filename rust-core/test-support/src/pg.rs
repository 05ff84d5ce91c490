//! A throwaway PostgreSQL cluster on 127.0.0.1 for tests.
//!
//! Two ways to hold one:
//! - [`TempPostgres::start`]: a cluster of the test's own, for fault tests that stop, kill
//!   or restart it. Dropping it stops it (immediate) and removes its directory.
//! - [`TempPostgres::shared`]: one cluster per test binary (initdb costs about 2 s), each test
//!   taking a fresh database with [`TempPostgres::fresh_database`] or
//!   [`TempPostgres::create_database`]. A `static` is never dropped, so it is stopped by its
//!   watchdog when the test process ends (`crate::guard`): no postgres outlives `cargo test`.
//!
//! The cluster has one role, `psi` (superuser, so tests can create databases), with a random
//! password and scram-sha-256 authentication on TCP; no Unix socket. `fsync` is off: a test
//! cluster need not survive a power cut, and `kill` (immediate stop) still keeps every
//! committed transaction, since commits still reach the OS.
//!
//! As root (CI containers), initdb refuses to run, so the cluster runs as the `postgres` user
//! (Debian's package creates it) or else `nobody`, through `runuser`; its directory is a
//! fresh 0755 directory under the system temporary directory, chowned to that user.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::guard::ExitGuard;
use crate::proc::{
    WAIT, accepts, euid, find_program, fresh_dir, id_of, random_hex, run_bounded, tail,
};

/// The role and the first database.
const USER: &str = "psi";

/// Extra settings appended to the cluster's postgresql.conf.
const SETTINGS: &str = "
# psi-test-support
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
fsync = off
full_page_writes = off
max_connections = 200
";

/// What a start attempt says in the log when another process took the port first.
const PORT_TAKEN: &[&str] = &["could not bind", "Address already in use"];

pub struct TempPostgres {
    bin: PathBuf,
    base: PathBuf,
    data: PathBuf,
    log: PathBuf,
    password: String,
    password_file: PathBuf,
    port: u16,
    /// The unprivileged user the cluster runs as when the tests run as root.
    run_as: Option<String>,
    guard: ExitGuard,
}

impl TempPostgres {
    /// Runs initdb and starts a new cluster on a free port; returns once it accepts
    /// connections and the database `psi` exists. Panics (naming ci/setup.sh) when the
    /// PostgreSQL binaries are missing.
    pub fn start() -> TempPostgres {
        let bin = bin_dir();
        let run_as = (euid() == 0).then(unprivileged_user);
        let base = fresh_dir("psi-pg");
        // The watchdog first: from here on, whatever happens, the directory (and a cluster
        // started in it) goes away with this value or with the process.
        let pg_ctl = bin.join("pg_ctl");
        let data = base.join("data");
        let mut guard_args: Vec<&OsStr> =
            vec![pg_ctl.as_os_str(), data.as_os_str(), base.as_os_str()];
        let prefix = run_as.as_deref().map(runuser_prefix).unwrap_or_default();
        guard_args.extend(prefix.iter().map(OsStr::new));
        let guard = ExitGuard::spawn(
            r#"read -r note
pg_ctl=$1 data=$2 base=$3
shift 3
if [ -f "$data/postmaster.pid" ]; then
  "$@" "$pg_ctl" -D "$data" stop -m immediate -w -t 30 >/dev/null 2>&1
fi
rm -rf "$base"
"#,
            &guard_args,
        );
        if let Some(user) = &run_as {
            chown_to(&base, user);
        }

        let password = random_hex(24);
        let password_file = base.join("password");
        write_private(&password_file, &password);
        // initdb reads the password from a file that its (maybe unprivileged) user can read;
        // removed as soon as initdb is done.
        let init_pw = base.join("initdb.pw");
        write_private(&init_pw, &password);
        if let Some(user) = &run_as {
            chown_to(&init_pw, user);
        }

        let mut pg = TempPostgres {
            log: base.join("server.log"),
            bin,
            base,
            data,
            password,
            password_file,
            port: 0,
            run_as,
            guard,
        };
        let out = run_bounded(
            pg.as_server_user("initdb")
                .arg("-D")
                .arg(&pg.data)
                .args([
                    "-U",
                    USER,
                    "--auth=scram-sha-256",
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "--no-sync",
                ])
                .arg(format!("--pwfile={}", init_pw.display())),
            "initdb",
        );
        let _ = std::fs::remove_file(&init_pw);
        expect_ok(&out, "initdb");
        append(&pg.data.join("postgresql.conf"), SETTINGS);

        // The port is picked free, then bound by postgres a moment later; another process
        // may win the race, so a clash means another port.
        for attempt in 1..=5 {
            pg.port = crate::proc::free_port();
            let out = pg.pg_ctl_start();
            if out.status.success() {
                pg.wait_accepting();
                pg.psql_in("postgres", "create database psi");
                return pg;
            }
            let log = std::fs::read_to_string(&pg.log).unwrap_or_default();
            if attempt < 5 && PORT_TAKEN.iter().any(|p| log.contains(p)) {
                continue;
            }
            panic!(
                "pg_ctl start failed: {}\n{}\nserver log:\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr),
                tail(&log)
            );
        }
        unreachable!("the last attempt returns or panics")
    }

    /// One cluster for the whole test binary, started on first use and stopped when the
    /// process ends. Take a database of your own with [`TempPostgres::fresh_database`]; do
    /// not stop or kill it (use [`TempPostgres::start`] for that).
    pub fn shared() -> &'static TempPostgres {
        static SHARED: OnceLock<TempPostgres> = OnceLock::new();
        SHARED.get_or_init(TempPostgres::start)
    }

    /// `postgres://psi@127.0.0.1:PORT/psi`: no password in it (see [`TempPostgres::password`]
    /// and [`TempPostgres::password_file`]).
    pub fn url(&self) -> String {
        self.url_for(USER)
    }

    pub fn password(&self) -> &str {
        &self.password
    }

    /// A 0600 file holding the password (no newline), as an operator would pass it.
    pub fn password_file(&self) -> PathBuf {
        self.password_file.clone()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Fast shutdown (clients disconnected, clean checkpoint); waits until it is down.
    pub fn stop(&self) {
        self.pg_ctl_stop("fast");
    }

    /// Immediate shutdown, as after a crash: no checkpoint, recovery on the next start.
    pub fn kill(&self) {
        self.pg_ctl_stop("immediate");
    }

    /// Starts a stopped or killed cluster again on the same port; returns once it accepts
    /// connections.
    pub fn start_again(&self) {
        let out = self.pg_ctl_start();
        if !out.status.success() {
            panic!(
                "pg_ctl start (again, port {}) failed: {}\n{}\nserver log:\n{}",
                self.port,
                out.status,
                String::from_utf8_lossy(&out.stderr),
                tail(&std::fs::read_to_string(&self.log).unwrap_or_default())
            );
        }
        self.wait_accepting();
    }

    /// [`TempPostgres::stop`] then [`TempPostgres::start_again`].
    pub fn restart(&self) {
        self.stop();
        self.start_again();
    }

    /// Runs `sql` in the database `psi` with `psql -At` as the `psi` role; returns its
    /// stdout without the final newline. Panics when psql fails.
    pub fn psql(&self, sql: &str) -> String {
        self.psql_in(USER, sql)
    }

    /// [`TempPostgres::psql`] in another database.
    pub fn psql_in(&self, database: &str, sql: &str) -> String {
        let out = run_bounded(
            self.psql_command(database, &self.password)
                .arg("-c")
                .arg(sql),
            "psql",
        );
        expect_ok(&out, "psql");
        let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
        if s.ends_with('\n') {
            s.pop();
        }
        s
    }

    /// A psql command against `database` with `password`, without `-c` (for tests that try a
    /// wrong password, or feed a script on stdin).
    pub fn psql_command(&self, database: &str, password: &str) -> Command {
        let mut cmd = Command::new(self.program("psql"));
        cmd.args(["-X", "-At", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1"])
            .arg("-p")
            .arg(self.port.to_string())
            .args(["-U", USER, "-d", database])
            .env("PGPASSWORD", password)
            .env("PGCONNECT_TIMEOUT", "10")
            .env_remove("PGSERVICE")
            .env_remove("PGOPTIONS");
        cmd
    }

    /// Creates the database `name` (lower-case letters, digits, `_`) and returns its URL
    /// (no password in it). Panics when it exists already.
    pub fn create_database(&self, name: &str) -> String {
        let valid = !name.is_empty()
            && name.len() <= 63
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        assert!(
            valid,
            "create_database: {name:?} is not a plain lower-case identifier"
        );
        self.psql_in("postgres", &format!("create database \"{name}\""));
        self.url_for(name)
    }

    /// A new database with a name unique in this cluster (`t_<pid>_<n>`); returns its URL.
    pub fn fresh_database(&self) -> String {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        self.create_database(&format!("t_{}_{n}", std::process::id()))
    }

    /// The cluster's directory (data directory, log); removed on drop.
    pub fn dir(&self) -> &Path {
        &self.base
    }

    /// The server log so far, for a test's failure message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn url_for(&self, database: &str) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/{database}", self.port)
    }

    fn program(&self, name: &str) -> PathBuf {
        let p = self.bin.join(name);
        if p.exists() {
            return p;
        }
        find_program(name, &[]).unwrap_or(p)
    }

    /// `program` of the bin directory, run as the cluster's user.
    fn as_server_user(&self, program: &str) -> Command {
        let prog = self.bin.join(program);
        let mut cmd = match &self.run_as {
            Some(user) => {
                let prefix = runuser_prefix(user);
                let mut c = Command::new(&prefix[0]);
                c.args(&prefix[1..]).arg(prog);
                c
            }
            None => Command::new(prog),
        };
        // The caller's directory may be unreachable for that user (a 0700 checkout).
        cmd.current_dir("/");
        cmd
    }

    fn pg_ctl_start(&self) -> Output {
        run_bounded(
            self.as_server_user("pg_ctl")
                .arg("-D")
                .arg(&self.data)
                .arg("-l")
                .arg(&self.log)
                .args(["-w", "-t", "30", "-o"])
                .arg(format!("-p {}", self.port))
                .arg("start"),
            "pg_ctl start",
        )
    }

    fn pg_ctl_stop(&self, mode: &str) {
        let out = run_bounded(
            self.as_server_user("pg_ctl")
                .arg("-D")
                .arg(&self.data)
                .args(["-m", mode, "-w", "-t", "30", "stop"]),
            "pg_ctl stop",
        );
        expect_ok(&out, &format!("pg_ctl stop -m {mode}"));
    }

    /// pg_ctl -w already waits for "ready"; this also sees the TCP port answer.
    fn wait_accepting(&self) {
        let deadline = Instant::now() + WAIT;
        while !accepts(self.port) {
            assert!(
                Instant::now() < deadline,
                "PostgreSQL did not accept connections on 127.0.0.1:{} within 30 s\nserver log:\n{}",
                self.port,
                tail(&self.log())
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

impl Drop for TempPostgres {
    /// Immediate stop and removal of the directory, by the watchdog (the same path as when
    /// the process dies).
    fn drop(&mut self) {
        self.guard.release("drop");
    }
}

/// `PSI_PG_BIN`, else the newest /usr/lib/postgresql/*/bin, else the directory of `initdb`
/// on PATH; panics with [`find_bin_dir`]'s message when none holds the binaries.
fn bin_dir() -> PathBuf {
    find_bin_dir().unwrap_or_else(|e| panic!("{e}"))
}

/// The directory of the PostgreSQL server binaries (initdb, pg_ctl, postgres) that
/// [`TempPostgres::start`] runs: `PSI_PG_BIN`, else the newest /usr/lib/postgresql/*/bin,
/// else the directory of `initdb` on PATH. The error says where they were looked for and
/// how to install them (for a caller that skips, or a command that reports it).
pub fn find_bin_dir() -> Result<PathBuf, String> {
    let has_all = |d: &Path| {
        ["initdb", "pg_ctl", "postgres"]
            .iter()
            .all(|p| d.join(p).exists())
    };
    if let Some(d) = std::env::var_os("PSI_PG_BIN") {
        let d = PathBuf::from(d);
        if !has_all(&d) {
            return Err(format!(
                "PSI_PG_BIN={} does not hold initdb, pg_ctl and postgres",
                d.display()
            ));
        }
        return Ok(d);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let d = e.path().join("bin");
            has_all(&d).then_some((v, d))
        })
        .collect();
    versions.sort();
    if let Some((_, d)) = versions.pop() {
        return Ok(d);
    }
    if let Some(initdb) = find_program("initdb", &[])
        && let Some(d) = initdb.parent()
        && has_all(d)
    {
        return Ok(d.to_path_buf());
    }
    Err(
        "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found: not in PSI_PG_BIN, \
         /usr/lib/postgresql/*/bin or PATH. The Rust tests start their own PostgreSQL; \
         install it with `source ci/setup.sh && psi_setup_postgres` (ci/test.sh does), \
         or set PSI_PG_BIN."
            .into(),
    )
}

/// As root: `postgres` where that user exists, else `nobody`.
fn unprivileged_user() -> String {
    if id_of("-u", Some("postgres")).is_some() {
        "postgres".into()
    } else {
        "nobody".into()
    }
}

fn runuser_prefix(user: &str) -> Vec<String> {
    let runuser = find_program("runuser", &["/usr/sbin", "/sbin"])
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "runuser".into());
    vec![runuser, "-u".into(), user.into(), "--".into()]
}

fn chown_to(path: &Path, user: &str) {
    let uid = id_of("-u", Some(user));
    let gid = id_of("-g", Some(user));
    std::os::unix::fs::chown(path, uid, gid)
        .unwrap_or_else(|e| panic!("chown {} to {user}: {e}", path.display()));
}

fn write_private(path: &Path, contents: &str) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(contents.as_bytes()))
        .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

fn append(path: &Path, text: &str) {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .unwrap_or_else(|e| panic!("appending to {}: {e}", path.display()));
}

fn expect_ok(out: &Output, what: &str) {
    if !out.status.success() {
        panic!(
            "{what} failed: {}\nstdout:\n{}\nstderr:\n{}",
            out.status,
            tail(&String::from_utf8_lossy(&out.stdout)),
            tail(&String::from_utf8_lossy(&out.stderr))
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole life of an owned cluster: password auth, a database, data kept across a
    /// restart and an immediate stop, and nothing left after drop.
    #[test]
    fn owned_cluster_lifecycle() {
        let pg = TempPostgres::start();
        let port = pg.port();
        let dir = pg.dir().to_path_buf();
        assert_eq!(pg.url(), format!("postgres://psi@127.0.0.1:{port}/psi"));
        assert!(!pg.url().contains(pg.password()));
        assert_eq!(pg.psql("select 1"), "1");

        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(pg.password_file()).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(
            std::fs::read_to_string(pg.password_file()).unwrap(),
            pg.password()
        );

        // scram-sha-256 on TCP: a wrong password is refused.
        let wrong = run_bounded(
            pg.psql_command("psi", "not-the-password")
                .args(["-c", "select 1"]),
            "psql",
        );
        assert!(!wrong.status.success(), "a wrong password was accepted");
        assert!(String::from_utf8_lossy(&wrong.stderr).contains("password authentication failed"));
        assert_eq!(
            pg.psql("select rolsuper from pg_roles where rolname = 'psi'"),
            "t"
        );

        let url = pg.create_database("lifecycle_db");
        assert_eq!(url, format!("postgres://psi@127.0.0.1:{port}/lifecycle_db"));
        pg.psql_in(
            "lifecycle_db",
            "create table t (v int); insert into t values (7)",
        );

        pg.restart();
        assert_eq!(pg.port(), port);
        assert_eq!(pg.psql_in("lifecycle_db", "select v from t"), "7");

        pg.psql_in("lifecycle_db", "insert into t values (8)");
        pg.kill();
        assert!(!accepts(port), "still accepting after kill");
        let down = run_bounded(
            pg.psql_command("psi", pg.password())
                .args(["-c", "select 1"]),
            "psql",
        );
        assert!(!down.status.success());
        pg.start_again();
        assert_eq!(pg.psql_in("lifecycle_db", "select sum(v) from t"), "15");

        pg.stop();
        assert!(!accepts(port));
        pg.start_again();
        drop(pg);
        assert!(!dir.exists(), "{} left behind", dir.display());
        assert!(!accepts(port), "still accepting after drop");
    }

    #[test]
    fn shared_cluster_gives_separate_databases() {
        let a = TempPostgres::shared();
        let b = TempPostgres::shared();
        assert!(std::ptr::eq(a, b));
        let u1 = a.fresh_database();
        let u2 = a.fresh_database();
        assert_ne!(u1, u2);
        let db1 = u1.rsplit('/').next().unwrap();
        let db2 = u2.rsplit('/').next().unwrap();
        a.psql_in(db1, "create table only_here (v int)");
        assert_eq!(
            a.psql_in(
                db2,
                "select count(*) from pg_tables where tablename = 'only_here'"
            ),
            "0"
        );
    }

    /// The shared cluster is a `static`, never dropped: its watchdog must stop it when the
    /// process ends. A child copy of this test binary starts one and exits; the cluster and
    /// its directory must then go away.
    #[test]
    fn shared_cluster_stops_when_the_process_ends() {
        if std::env::var_os("PSI_TS_CHILD").is_some() {
            let pg = TempPostgres::shared();
            println!("PSI_TS {} {}", pg.port(), pg.dir().display());
            return;
        }
        crate::proc::child_leaves_nothing(
            "pg::tests::shared_cluster_stops_when_the_process_ends",
            "the shared cluster",
        );
    }
}
