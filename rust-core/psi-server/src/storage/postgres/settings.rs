//! What `--db postgres://...` names: where the database is, how the connection is
//! secured, where its password and the at-rest key come from. One owner for the
//! connection settings of both clients: the blocking one of the registry store (imports,
//! rotations, the epoch build) and the async pool of the request path (budgets).
//!
//! Credentials never come from the command line (where `ps` and shell histories show
//! them): a URL with a password is refused; the password comes from
//! `--db-password-file FILE`, else the environment (`PSI_DB_PASSWORD_FILE`, a file, else
//! `PSI_DB_PASSWORD`). [`PgSettings`]'s `Display` and `Debug` never show it.
//!
//! TLS (`sslmode`):
//! - `disable`: no TLS (a database on the same host or a private network you trust).
//! - `require` and `verify-full`: TLS with the server's certificate verified against the
//!   roots of `sslrootcert=PATH` (PEM) or, without it, the system bundle
//!   (`/etc/ssl/certs/ca-certificates.crt`), **and** its name checked against the host.
//!   libpq's `require` encrypts without verifying, which a man in the middle defeats; here
//!   `require` verifies like `verify-full` (a certificate that only encrypts is refused).
//! - not given: `disable` for a loopback host (`127.0.0.1`, `::1`, `localhost`) or a Unix
//!   socket (the traffic never leaves the machine), `verify-full` for any other host.
//!   `prefer`, `allow` and `verify-ca` are refused (they downgrade or skip a check).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_postgres::config::{Host, SslMode};
use zeroize::Zeroizing;

use super::super::error::{SettingsError, StoreError};

/// The system's bundle of trusted roots (Debian, Ubuntu, Alpine), used for TLS to the
/// database when the URL names no `sslrootcert`.
pub const SYSTEM_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Environment variable naming a file that holds the database password.
pub const PASSWORD_FILE_ENV: &str = "PSI_DB_PASSWORD_FILE";
/// Environment variable holding the database password.
pub const PASSWORD_ENV: &str = "PSI_DB_PASSWORD";
/// Environment variable naming the at-rest key file.
pub const SEAL_KEY_FILE_ENV: &str = "PSI_SEAL_KEY_FILE";

/// How the connection to the database is secured (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsMode {
    /// No TLS.
    Disable,
    /// TLS, certificate and host name verified (`sslmode=require` or `verify-full`).
    VerifyFull,
}

/// A PostgreSQL database as `--db postgres://...` names it, with its password (from a
/// file or the environment) and the at-rest key file that seals its OPRF keys.
#[derive(Clone, PartialEq, Eq)]
pub struct PgSettings {
    /// Host, port, user, database name, password; `ssl_mode` set from [`TlsMode`].
    /// Boxed: it is large, and [`crate::storage::Database`] is moved around by value.
    config: Box<tokio_postgres::Config>,
    tls: TlsMode,
    root_cert: Option<PathBuf>,
    seal_key_file: Option<PathBuf>,
}

impl PgSettings {
    /// Parses a `postgres://` (or `postgresql://`) URL: user, host, port, database name,
    /// `sslmode`, `sslrootcert`, and the other libpq options tokio-postgres knows
    /// (e.g. `connect_timeout`). Refuses a URL with a password.
    pub fn from_url(url: &str) -> Result<PgSettings, SettingsError> {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(SettingsError::Url(
                "must start with postgres:// or postgresql://".into(),
            ));
        }
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut sslmode = None;
        let mut root_cert = None;
        let mut rest = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "sslmode" => sslmode = Some(v.to_string()),
                "sslrootcert" => root_cert = Some(PathBuf::from(percent_decode(v)?)),
                _ => rest.push(pair),
            }
        }
        let kept = if rest.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", rest.join("&"))
        };
        let mut config: tokio_postgres::Config =
            kept.parse().map_err(|e: tokio_postgres::Error| {
                // tokio-postgres's parse errors name the option, never its value.
                SettingsError::Url(e.to_string())
            })?;
        if config.get_password().is_some() {
            return Err(SettingsError::PasswordInUrl);
        }
        if config.get_hosts().is_empty() {
            return Err(SettingsError::Url("no host".into()));
        }
        let tls = match sslmode.as_deref() {
            Some("disable") => TlsMode::Disable,
            Some("require" | "verify-full") => TlsMode::VerifyFull,
            Some(_) => return Err(SettingsError::SslMode),
            None if config.get_hosts().iter().all(is_local) => TlsMode::Disable,
            None => TlsMode::VerifyFull,
        };
        config.ssl_mode(match tls {
            TlsMode::Disable => SslMode::Disable,
            TlsMode::VerifyFull => SslMode::Require,
        });
        Ok(PgSettings {
            config: Box::new(config),
            tls,
            root_cert,
            seal_key_file: None,
        })
    }

    /// Sets the password.
    pub fn with_password(mut self, password: &str) -> PgSettings {
        self.config.password(password);
        self
    }

    /// Reads the password from `file` (`--db-password-file`), else from the file named by
    /// `PSI_DB_PASSWORD_FILE`, else from `PSI_DB_PASSWORD`; none of them: no password
    /// (peer or trust authentication). A file's trailing line break is not part of it.
    pub fn with_password_from(self, file: Option<&Path>) -> Result<PgSettings, SettingsError> {
        let file = file
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os(PASSWORD_FILE_ENV).map(PathBuf::from));
        if let Some(path) = file {
            let text = Zeroizing::new(
                std::fs::read_to_string(&path)
                    .map_err(|source| SettingsError::PasswordFile { path, source })?,
            );
            return Ok(self.with_password(text.trim_end_matches(['\r', '\n'])));
        }
        match std::env::var(PASSWORD_ENV) {
            Ok(p) => {
                let p = Zeroizing::new(p);
                Ok(self.with_password(&p))
            }
            Err(_) => Ok(self),
        }
    }

    /// Sets the at-rest key file (`--seal-key-file`) that seals the OPRF keys stored in
    /// the database; `None`: the file named by `PSI_SEAL_KEY_FILE`, if set.
    pub fn with_seal_key_file(mut self, file: Option<&Path>) -> PgSettings {
        self.seal_key_file = file
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os(SEAL_KEY_FILE_ENV).map(PathBuf::from));
        self
    }

    /// The at-rest key file, if given.
    pub fn seal_key_file(&self) -> Option<&Path> {
        self.seal_key_file.as_deref()
    }

    /// How the connection is secured.
    pub fn tls_mode(&self) -> TlsMode {
        self.tls
    }

    /// The connection settings for `tokio_postgres` (and, through `From`, the blocking
    /// `postgres` client and a deadpool pool): give it [`PgSettings::connect_tls`].
    pub fn pg_config(&self) -> tokio_postgres::Config {
        (*self.config).clone()
    }

    /// The TLS connector for [`PgSettings::pg_config`], for both clients. With
    /// `sslmode=disable` the configuration never asks it for TLS (it holds no roots).
    /// Otherwise it verifies the server's certificate against `sslrootcert` or the system
    /// bundle and checks the host name.
    pub fn connect_tls(&self) -> Result<tokio_postgres_rustls::MakeRustlsConnect, SettingsError> {
        let mut roots = rustls::RootCertStore::empty();
        if self.tls == TlsMode::VerifyFull {
            let path = self
                .root_cert
                .clone()
                .unwrap_or_else(|| PathBuf::from(SYSTEM_ROOTS));
            let roots_err = |reason: String| SettingsError::Roots {
                path: path.clone(),
                reason,
            };
            use rustls::pki_types::CertificateDer;
            use rustls::pki_types::pem::PemObject;
            let certs = CertificateDer::pem_file_iter(&path)
                .map_err(|e| roots_err(e.to_string()))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| roots_err(e.to_string()))?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(roots_err("no usable certificate".into()));
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| SettingsError::Tls(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
    }

    /// Connects the blocking client. Blocking: never call it on an async worker thread
    /// (it runs a runtime of its own).
    pub fn connect_blocking(&self) -> Result<postgres::Client, StoreError> {
        let tls = self.connect_tls()?;
        Ok(postgres::Config::from(self.pg_config()).connect(tls)?)
    }
}

fn is_local(host: &Host) -> bool {
    match host {
        Host::Tcp(h) => matches!(h.as_str(), "127.0.0.1" | "::1" | "localhost" | "[::1]"),
        #[cfg(unix)]
        Host::Unix(_) => true,
    }
}

fn percent_decode(s: &str) -> Result<String, SettingsError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| SettingsError::Url("bad percent escape in sslrootcert".into()))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| SettingsError::Url("sslrootcert is not UTF-8".into()))
}

/// `postgres://user@host:port/dbname?sslmode=...`: never the password.
impl std::fmt::Display for PgSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "postgres://")?;
        if let Some(u) = self.config.get_user() {
            write!(f, "{u}@")?;
        }
        for (i, h) in self.config.get_hosts().iter().enumerate() {
            if i > 0 {
                write!(f, ",")?;
            }
            match h {
                Host::Tcp(h) => write!(f, "{h}")?,
                #[cfg(unix)]
                Host::Unix(p) => write!(f, "{}", p.display())?,
            }
            if let Some(p) = self.config.get_ports().get(i) {
                write!(f, ":{p}")?;
            }
        }
        write!(f, "/{}", self.config.get_dbname().unwrap_or(""))?;
        let mode = match self.tls {
            TlsMode::Disable => "disable",
            TlsMode::VerifyFull => "verify-full",
        };
        write!(f, "?sslmode={mode}")
    }
}

impl std::fmt::Debug for PgSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgSettings({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_parsed_and_shown_without_credentials() {
        let s = PgSettings::from_url("postgres://psi@127.0.0.1:5433/reg").unwrap();
        assert_eq!(s.tls_mode(), TlsMode::Disable);
        assert_eq!(
            s.to_string(),
            "postgres://psi@127.0.0.1:5433/reg?sslmode=disable"
        );
        let c = s.clone().with_password("hunter2").pg_config();
        assert_eq!(c.get_password(), Some(&b"hunter2"[..]));
        assert_eq!(c.get_dbname(), Some("reg"));
        let shown = format!("{:?} {}", s.clone().with_password("hunter2"), s);
        assert!(!shown.contains("hunter2"));
        let remote = PgSettings::from_url("postgres://u@db.example/r").unwrap();
        assert_eq!(remote.tls_mode(), TlsMode::VerifyFull);
        let req = PgSettings::from_url(
            "postgres://u@db.example/r?sslmode=require&sslrootcert=/x%20y.pem",
        )
        .unwrap();
        assert_eq!(req.tls_mode(), TlsMode::VerifyFull);
        assert_eq!(req.root_cert.as_deref(), Some(Path::new("/x y.pem")));
        assert_eq!(req.pg_config().get_ssl_mode(), SslMode::Require);
        assert!(matches!(
            req.connect_tls(),
            Err(SettingsError::Roots { .. })
        ));
    }

    #[test]
    fn a_password_in_the_url_and_weak_ssl_modes_are_refused() {
        for url in [
            "postgres://psi:hunter2@127.0.0.1/reg",
            "postgres://psi@127.0.0.1/reg?password=hunter2",
        ] {
            let e = PgSettings::from_url(url).unwrap_err();
            assert!(matches!(e, SettingsError::PasswordInUrl));
            assert!(!e.to_string().contains("hunter2"));
        }
        for mode in ["prefer", "allow", "verify-ca", "bogus"] {
            assert!(matches!(
                PgSettings::from_url(&format!("postgres://u@h/r?sslmode={mode}")),
                Err(SettingsError::SslMode)
            ));
        }
        assert!(PgSettings::from_url("mysql://u@h/r").is_err());
    }
}
