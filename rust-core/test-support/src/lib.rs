//! Real services for the tests of psi-server, psi-client and psi-cli: a private CA and server
//! certificate for the TLS tests ([`pki`]), and (issue 22) a PostgreSQL cluster and
//! an nginx load balancer, each started on 127.0.0.1 under a fresh directory in the system's
//! temporary directory and stopped again when the test lets go of it, or when the test process
//! ends in any way (see [`guard`]); and [`fresh_dir`], the one way the tests make a scratch
//! directory of their own.
//!
//! Missing binaries are a test failure, never a silent skip: the panic names `ci/setup.sh`,
//! which installs both (`psi_setup_postgres`, `psi_setup_nginx`).

mod guard;
pub mod nginx;
pub mod pg;
pub mod pki;
mod proc;

pub use nginx::TempNginx;
pub use pg::TempPostgres;
pub use proc::fresh_dir;
