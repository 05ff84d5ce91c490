//! Shared test support: the reference server on 127.0.0.1 (port 0) over an in-memory
//! registry.
#![allow(dead_code)]

use psi_server::{AppState, Config, Registry, RunningServer, Store};

/// Starts the reference server with `config` over an in-memory store holding `entries`
/// (identifier, optional label).
pub fn serve_entries<'a>(
    config: Config,
    entries: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
) -> RunningServer {
    let mut config = config;
    config.db = psi_server::Database::memory();
    let mut store = Store::open(std::path::Path::new(":memory:")).unwrap();
    store.add_entries(entries).unwrap();
    let registry = Registry::from_store(&mut store, &config, &mut |_, _| {}).unwrap();
    RunningServer::start(
        AppState::with_registry(config, registry),
        ([127, 0, 0, 1], 0).into(),
    )
    .unwrap()
}
