//! A server at work: [`serve`] (the accept loop with its background tasks: the sweep,
//! the key-epoch schedule, the store watcher) and [`RunningServer`] on a runtime of its own.

use crate::accounts;
use crate::api::router;
use crate::listen;
use crate::state::AppState;
use crate::storage::{self, StoreError};
use crate::store_health;
use crate::tls::ServerTls;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

/// Serves `state` on `listener` until `shutdown` resolves, then finishes the requests in
/// flight (graceful shutdown). HTTPS when [`Config::tls`] is set. Connections are limited
/// by [`Config::header_read_timeout`], [`Config::idle_timeout`],
/// [`Config::max_connections`], [`Config::max_connections_per_address`], the write
/// deadline of [`Config::min_send_rate`] and the response bytes in flight
/// (docs/adr/0019-tls-and-connection-limits.md, docs/adr/0037-connection-exposure.md).
/// Background tasks run beside the accept loop and stop with it.
///
/// [`Config::tls`]: crate::Config::tls
/// [`Config::header_read_timeout`]: crate::Config::header_read_timeout
/// [`Config::idle_timeout`]: crate::Config::idle_timeout
/// [`Config::max_connections`]: crate::Config::max_connections
/// [`Config::max_connections_per_address`]: crate::Config::max_connections_per_address
/// [`Config::min_send_rate`]: crate::Config::min_send_rate
pub async fn serve(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // Background tasks: aborted when the server stops.
    let mut background = Vec::new();
    // Expired sessions and idle rate-limit entries.
    background.push({
        let state = state.clone();
        tokio::spawn(async move {
            // Sessions are swept often enough to keep their idle and hello periods;
            // budgets are saved every `SAVE_EVERY`.
            let mut tick = tokio::time::interval(state.sessions.sweep_every(accounts::SAVE_EVERY));
            let mut saved: Option<Instant> = None;
            loop {
                tick.tick().await;
                let removed = state.sessions.sweep();
                if removed > 0 {
                    tracing::debug!(removed, "expired sessions removed");
                }
                let removed = state.groups.sweep();
                if removed > 0 {
                    tracing::debug!(removed, "expired groups removed");
                }
                if saved.is_some_and(|t| t.elapsed() < accounts::SAVE_EVERY) {
                    continue;
                }
                saved = Some(Instant::now());
                let st = state.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    st.accounts.save_budgets(st.limiter.limiter())
                })
                .await;
                state.limiter.limiter().sweep();
                state.probe_limiter.limiter().sweep();
                state.group_limiter.limiter().sweep();
                state.health_limiter.sweep();
                state.invalid_token_limiter.sweep();
                state.download_limiter.limiter().sweep();
                // Shared budgets: rows full again are deleted (one statement for all).
                if let Some(store) = state.limiter.shared_store()
                    && let Err(e) = store.sweep().await
                {
                    tracing::warn!(error = %e, "sweeping the shared budgets failed");
                }
            }
        })
    });
    // Scheduled key rotation and the end of a previous epoch's overlap.
    background.push(tokio::spawn(maintain_epochs(state.clone())));
    if let Some(every) = state.config.watch_store
        && !state.config.db.is_memory()
    {
        background.push(tokio::spawn(watch_store(state.clone(), every)));
    }
    let limits = listen::Limits {
        header_read_timeout: state.config.header_read_timeout,
        idle_timeout: state.config.idle_timeout,
        max_connections: state.config.max_connections,
        max_connections_per_address: state.config.max_connections_per_address,
        min_send_rate: state.config.min_send_rate,
        send_grace: state.config.send_grace,
        max_response_bytes_in_flight: state.config.max_response_bytes_in_flight,
        max_response_bytes_per_address: state.config.max_response_bytes_per_address,
        max_connections_per_block: state.config.max_connections_per_block,
        min_upload_rate: state.config.min_upload_rate,
        upload_grace: state.config.upload_grace,
        max_body_bytes: state.config.max_body_bytes as u64,
        max_request_bytes_in_flight: state.config.max_request_bytes_in_flight,
        max_request_bytes_per_address: state.config.max_request_bytes_per_address,
        trusted_proxies: state.config.trusted_proxies.clone(),
        ipv4_prefix: state.config.ipv4_prefix,
        ipv6_prefix: state.config.ipv6_prefix,
        ipv4_block_prefix: state.config.ipv4_block_prefix,
        ipv6_block_prefix: state.config.ipv6_block_prefix,
    };
    let tls = state.config.tls.as_ref().map(ServerTls::acceptor);
    let result = listen::run(listener, router(state.clone()), tls, limits, shutdown).await;
    for task in background {
        task.abort();
    }
    // The budgets charged since the last save survive a shutdown.
    let _ =
        tokio::task::spawn_blocking(move || state.accounts.save_budgets(state.limiter.limiter()))
            .await;
    result
}

/// Every `every`, picks up a change another process made to the database file
/// ([`AppState::reload_if_changed`]). Keeps one read-only connection open between looks
/// ([`storage::Database::open_registry_read_only`]: the watcher never creates or writes anything); after an
/// error (logged once per failure streak) it opens a new one. It is also the probe of
/// [`AppState::store_health`]: a look that fails for the connection marks the store
/// unavailable, the next one that succeeds marks it available again.
///
/// So that an instance accepts sessions again within one `every` of the database coming
/// back (docs/deploy.md, "Faults"; issue 35): a look whose kept connection fails is made
/// again at once on a new connection (a restart of the database breaks every connection,
/// and it may be back already: the old connection's failure says nothing about now), and
/// while the store is unavailable the looks come every [`LOOK_WHILE_DOWN`], not every
/// `every`. (Before, the first look after a restart found its connection broken and the
/// next came a whole interval later: up to two intervals, 3.7 s measured.)
async fn watch_store(state: Arc<AppState>, every: Duration) {
    let mut store = HeldStore(None);
    let mut failing = false;
    loop {
        let wait = if state.store_health.is_down() {
            every.min(LOOK_WHILE_DOWN)
        } else {
            every
        };
        tokio::time::sleep(wait).await;
        let st = state.clone();
        // Moved in and out as a HeldStore, so that however the connection ends (this
        // look failing, the task dropped before it ran when the runtime shuts down) it is
        // dropped off the async workers.
        let held = HeldStore(store.0.take());
        let looked = tokio::task::spawn_blocking(move || {
            let mut held = held;
            if let Some(s) = held.0.as_mut() {
                match st.reload_if_changed(s.as_mut()) {
                    Ok(_) => return Ok(held),
                    // The kept connection broke: look again at once on a new one.
                    Err(e) if store_health::is_unavailable(&e) => {
                        drop(HeldStore(held.0.take()));
                    }
                    Err(e) => return Err(e),
                }
            }
            let s = held.0.insert(st.config.db.open_registry_read_only()?);
            st.reload_if_changed(s.as_mut())?;
            Ok::<_, StoreError>(held)
        })
        .await;
        match looked {
            Ok(Ok(mut s)) => {
                store.0 = s.0.take();
                // The "any tokens" answer, kept fresh for requests without a credential
                // (PostgreSQL; a no-op otherwise).
                match state.accounts.look_for_tokens().await {
                    Ok(()) => {
                        failing = false;
                        state.store_health.answered();
                    }
                    Err(accounts::LookupError::Unavailable(e)) => {
                        state.store_health.unreachable(&e);
                        failing = true;
                    }
                    Err(e) => {
                        if !failing {
                            tracing::warn!(error = %e, "looking for issued tokens failed");
                        }
                        failing = true;
                    }
                }
            }
            Ok(Err(e)) if state.store_health.failed(&e) => failing = true,
            Ok(Err(e)) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "looking for a database change failed");
            }
            Ok(Err(_)) => {}
            Err(_) => tracing::error!("database watch task failed"),
        }
    }
}

/// How often the store watcher looks while the store is unavailable (or its last look
/// failed for the connection): an instance accepts sessions again within about this of the database
/// answering. A look that finds the database down costs one refused connection.
pub(crate) const LOOK_WHILE_DOWN: Duration = Duration::from_millis(250);

/// The watcher's connection between looks. A blocking PostgreSQL client must not be
/// dropped on an async worker (its drop blocks on a runtime of its own, which panics
/// there); when the server stops and the watcher is aborted, it is dropped on a thread of
/// its own.
struct HeldStore(Option<Box<dyn storage::RegistryStore>>);

impl Drop for HeldStore {
    fn drop(&mut self) {
        if let Some(store) = self.0.take() {
            let _ = std::thread::Builder::new()
                .name("psi-store-drop".into())
                .spawn(move || drop(store));
        }
    }
}

/// Longest the epoch task sleeps before looking again (the store may have been rotated
/// by hand, the clock may have moved).
const EPOCH_CHECK: Duration = Duration::from_secs(3600);
/// Wait after a failed rotation before the next attempt.
const ROTATION_RETRY: Duration = Duration::from_secs(60);

/// The key-epoch task of a running server: rotates the key when `rotate_every` is due
/// (the work on a blocking thread, requests served meanwhile from the current epoch),
/// and drops the previous epoch when its overlap ends.
async fn maintain_epochs(state: Arc<AppState>) {
    let scheduled = state.config.rotate_every.is_some() && !state.config.db.is_memory();
    if state.config.rotate_every.is_some() && !scheduled {
        tracing::debug!("scheduled key rotation is off: the registry store is in memory");
    }
    // The shared store forgets the sets of epochs whose overlap is over (an instance
    // started during one serves the previous epoch's: AppState::with_registry).
    if matches!(state.config.db, storage::Database::Postgres(_)) {
        let st = state.clone();
        if let Ok(Err(e)) = tokio::task::spawn_blocking(move || st.forget_previous_sets()).await {
            tracing::warn!(error = %e, "deleting the previous key epoch's sets failed");
        }
    }
    loop {
        let had_previous = state.serves_previous_epoch();
        let retired_left = state.drop_retired();
        if had_previous && !state.serves_previous_epoch() {
            let st = state.clone();
            if let Ok(Err(e)) = tokio::task::spawn_blocking(move || st.forget_previous_sets()).await
            {
                tracing::warn!(error = %e, "deleting the previous key epoch's sets failed");
            }
        }
        let mut wait = EPOCH_CHECK;
        if scheduled {
            let st = state.clone();
            match tokio::task::spawn_blocking(move || st.scheduled_rotation()).await {
                Ok(Ok(Some(due))) if due.is_zero() => continue,
                Ok(Ok(Some(due))) => wait = due,
                Ok(Ok(None)) => {}
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "scheduled key rotation failed");
                    wait = ROTATION_RETRY;
                }
                Err(_) => {
                    tracing::error!("scheduled key rotation task failed");
                    wait = ROTATION_RETRY;
                }
            }
        }
        if let Some(left) = retired_left {
            wait = wait.min(left);
        }
        // A reload (SIGHUP) that changes the epoch wakes the task to time the overlap.
        tokio::select! {
            () = tokio::time::sleep(wait.min(EPOCH_CHECK)) => {}
            () = state.epoch_retired.notified() => {}
        }
    }
}

/// A server running on a background runtime: for tests, the demo and embedding.
pub struct RunningServer {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// Its state.
    pub state: Arc<AppState>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<std::io::Result<()>>>,
}

impl RunningServer {
    /// Starts `state` on `addr` (use port 0 for any free port) in a new thread with its
    /// own tokio runtime.
    pub fn start(state: Arc<AppState>, addr: SocketAddr) -> std::io::Result<RunningServer> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let listener = rt.block_on(TcpListener::bind(addr))?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let st = state.clone();
        let thread = std::thread::Builder::new()
            .name("psi-server".into())
            .spawn(move || {
                rt.block_on(serve(listener, st, async {
                    let _ = stopped.await;
                }))
            })?;
        Ok(RunningServer {
            addr,
            state,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// `http://ADDR`, or `https://ADDR` with [`Config::tls`](crate::Config::tls).
    pub fn url(&self) -> String {
        let scheme = if self.state.config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.addr)
    }

    /// Stops accepting, finishes requests in flight and joins the server thread.
    pub fn shutdown(mut self) -> std::io::Result<()> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> std::io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("server thread panicked"))),
            None => Ok(()),
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use psi_client::{CancelToken, Client, ClientConfig, Protocol};

    /// OT-PSI rounds take workers from their own pool: with every OT worker busy (held
    /// here, as a long OT round would hold it), a DH-PSI run still completes, while an
    /// OT-PSI run waits for the OT pool. (With one shared pool, as before, the DH run
    /// would wait too.)
    #[test]
    fn dh_is_served_while_every_ot_worker_is_busy() {
        let config = Config {
            workers: 1,
            ot_workers: 1,
            build_threads: 1,
            items_per_hour: 0,
            ..Config::default()
        };
        let entry = "+12025550100";
        let (state, dir) = crate::state::test_state("pools", entry, config);
        let server = RunningServer::start(state, ([127, 0, 0, 1], 0).into()).unwrap();
        let items = || vec![entry.as_bytes().to_vec(), b"+13035550199".to_vec()];
        let held = server.state.ot_workers.try_acquire().unwrap();
        let quick = ClientConfig::default().with_timeout(Duration::from_secs(2));
        let dh = Client::new(&server.url(), quick.clone())
            .match_items(items(), Protocol::Dh, &mut |_| {}, &CancelToken::new())
            .expect("DH-PSI is served while the OT pool is saturated");
        assert_eq!(dh.matches.len(), 1);
        // The OT pool really is saturated: an OT run cannot get its round answered.
        assert!(
            Client::new(&server.url(), quick)
                .match_items(items(), Protocol::Ot, &mut |_| {}, &CancelToken::new())
                .is_err()
        );
        drop(held);
        let ot = Client::new(&server.url(), ClientConfig::default())
            .match_items(items(), Protocol::Ot, &mut |_| {}, &CancelToken::new())
            .unwrap();
        assert_eq!(ot.matches.len(), 1);
        server.shutdown().unwrap();
        let _ = std::fs::remove_dir_all(dir);
    }
}
