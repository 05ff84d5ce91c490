//! Live sessions: id -> state, with expiry and caps on their number; OT-PSI admission
//! (slots held only while a run is in progress, per-caller caps, a per-caller hourly
//! budget of OT-PSI sessions). Design: `docs/adr/0015-ot-psi-admission-and-charging.md`.

use crate::limits::RateLimiter;
use psi_core::Protocol;
use psi_core::cm20::Cm20Server;
use psi_core::ot::OtServer;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Expired sessions are answered with `session_expired` for this long, then forgotten
/// (and answered with `unknown_session`).
const TOMBSTONE: Duration = Duration::from_secs(120);

/// Where a session is in its run. Every handler moves a session from one phase to the
/// next through `api::transition`, the only place that takes, checks and restores it.
pub(crate) enum Phase {
    /// DH-PSI: waiting for the query.
    DhAwaitingQuery,
    /// OT-PSI: waiting for the next round; the session's server state machine and its OT
    /// slot (both freed as soon as the phase moves on).
    OtRunning(Box<OtRun>),
    /// A request of this session is being handled (or its OT state is being built).
    Busy,
    /// The protocol run is over; labels may follow (`label_queried`: an OT session's
    /// label OPRF query was answered; DH sessions fetch without one).
    Matched { label_queried: bool },
    /// Labels fetched: the session has nothing more to give.
    Done,
}

/// An OT-PSI or CM20-PSI run in progress: the server state (OT-PSI: about 90 bytes per
/// registry entry; CM20-PSI: about `16 + w / 8`, some 95 bytes) and the slot that counts it
/// against the OT caps. Dropping it frees both.
pub(crate) struct OtRun {
    pub server: RoundServer,
    pub _slot: OtSlot,
}

/// The server state machine of a round-based protocol ([`Protocol::runs_in_rounds`]).
pub(crate) enum RoundServer {
    Ot(OtServer),
    Cm20(Cm20Server),
}

impl RoundServer {
    pub(crate) fn protocol(&self) -> Protocol {
        match self {
            RoundServer::Ot(_) => Protocol::Ot,
            RoundServer::Cm20(_) => Protocol::Cm20,
        }
    }

    pub(crate) fn handle(&mut self, request: &[u8]) -> psi_core::Result<Vec<u8>> {
        match self {
            RoundServer::Ot(s) => s.handle(request),
            RoundServer::Cm20(s) => s.handle(request),
        }
    }

    pub(crate) fn is_done(&self) -> bool {
        match self {
            RoundServer::Ot(s) => s.is_done(),
            RoundServer::Cm20(s) => s.is_done(),
        }
    }

    pub(crate) fn is_finished(&self) -> bool {
        match self {
            RoundServer::Ot(s) => s.is_finished(),
            RoundServer::Cm20(s) => s.is_finished(),
        }
    }
}

/// One admitted OT-PSI run, counted against the global and the caller's OT caps until
/// dropped (when the run ends, fails, is deleted or expires).
pub(crate) struct OtSlot {
    ot: Arc<Mutex<OtState>>,
    client: String,
}

impl Drop for OtSlot {
    fn drop(&mut self) {
        let mut ot = lock_ot(&self.ot);
        ot.running = ot.running.saturating_sub(1);
        if let Some(c) = ot.per_client.get_mut(&self.client) {
            *c = c.saturating_sub(1);
            if *c == 0 {
                ot.per_client.remove(&self.client);
            }
        }
    }
}

/// OT-PSI runs in progress, in all and per caller.
#[derive(Default)]
struct OtState {
    running: usize,
    per_client: HashMap<String, usize>,
}

fn lock_ot(m: &Mutex<OtState>) -> std::sync::MutexGuard<'_, OtState> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) struct Session {
    /// The session's id (its key in [`Sessions`]), so a step that completes it can end it.
    pub id: String,
    pub protocol: Protocol,
    pub client_items: u32,
    pub client: String,
    pub epoch: u32,
    /// The registry's label bucket layout when the session started.
    pub label_bits: u8,
    /// Whether labels may follow the protocol run (`CreateSession::labels`); if not, the
    /// protocol's final response completes the session.
    pub labels: bool,
    pub phase: Phase,
    /// Requests of this session in progress (body upload included): counted by
    /// `api::SessionCall`, so an OT run is never ended as idle while one is under way.
    pub in_flight: u32,
    /// When the last request of this session started or ended (or the session was
    /// created).
    pub last_active: Instant,
}

pub(crate) enum Lookup {
    Live(Arc<Mutex<Session>>),
    Expired,
    /// Ended by the server after its final response (or a failed step): the caller's
    /// key, to answer only its owner.
    Ended(String),
    Unknown,
}

struct Entry {
    expires: Instant,
    /// Copy of the session's caller key, for the per-caller cap.
    client: String,
    /// `None` once expired or ended (state freed, id kept as a tombstone).
    session: Option<Arc<Mutex<Session>>>,
    /// Ended by the server (complete), not expired.
    ended: bool,
}

pub(crate) struct Sessions {
    limits: SessionLimits,
    ttl: Duration,
    /// Lock order: `map` before `ot` (an [`OtSlot`] can be dropped while `map` is held).
    map: Mutex<HashMap<String, Entry>>,
    ot: Arc<Mutex<OtState>>,
    /// Each caller's hourly budget of OT-PSI sessions (`ot_per_hour`).
    ot_budget: RateLimiter,
}

/// Caps on live sessions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionLimits {
    /// All sessions.
    pub total: usize,
    /// Sessions of one caller (token or IP): one caller cannot take every slot.
    pub per_client: usize,
    /// OT-PSI runs in progress, each holding state proportional to the registry.
    pub ot: usize,
    /// OT-PSI runs in progress of one caller.
    pub ot_per_client: usize,
    /// OT-PSI sessions one caller may start per hour (token bucket; 0 = no limit): each
    /// costs the server O(registry size) work whatever its `n`.
    pub ot_per_hour: u64,
    /// An OT-PSI run idle this long (no request in progress) is ended by the sweep.
    pub ot_idle: Duration,
}

/// Why a session was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Full {
    Total,
    Client,
    Ot,
    OtClient,
    /// The caller's hourly OT-PSI session budget is spent; seconds until one is back.
    OtBudget(u64),
}

impl Sessions {
    pub(crate) fn new(limits: SessionLimits, ttl: Duration) -> Self {
        Sessions {
            limits,
            ttl,
            map: Mutex::new(HashMap::new()),
            ot: Arc::default(),
            ot_budget: RateLimiter::in_memory(limits.ot_per_hour),
        }
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Inserts a session unless a cap is reached. An OT-PSI session also takes an OT slot
    /// and one unit of its caller's hourly OT budget: the slot is returned, for the
    /// caller to keep in the session's [`OtRun`] (or drop, to free it).
    pub(crate) fn insert(&self, id: String, session: Session) -> Result<Option<OtSlot>, Full> {
        let now = Instant::now();
        let mut map = self.lock();
        let live: Vec<&Entry> = map.values().filter(|e| e.expires > now).collect();
        if live.len() >= self.limits.total {
            return Err(Full::Total);
        }
        if live.iter().filter(|e| e.client == session.client).count() >= self.limits.per_client {
            return Err(Full::Client);
        }
        let slot = if session.protocol.runs_in_rounds() {
            let mut ot = lock_ot(&self.ot);
            if ot.running >= self.limits.ot {
                return Err(Full::Ot);
            }
            if ot.per_client.get(&session.client).copied().unwrap_or(0) >= self.limits.ot_per_client
            {
                return Err(Full::OtClient);
            }
            self.ot_budget
                .charge(&session.client, 1)
                .map_err(Full::OtBudget)?;
            ot.running += 1;
            *ot.per_client.entry(session.client.clone()).or_default() += 1;
            Some(OtSlot {
                ot: self.ot.clone(),
                client: session.client.clone(),
            })
        } else {
            None
        };
        map.insert(
            id,
            Entry {
                expires: crate::instant_after(self.ttl),
                client: session.client.clone(),
                session: Some(Arc::new(Mutex::new(session))),
                ended: false,
            },
        );
        Ok(slot)
    }

    /// Removes a session that was just inserted and gives back the OT budget unit its
    /// insertion took (for a session refused after admission, e.g. by the item budget).
    pub(crate) fn undo_insert(&self, id: &str, protocol: Protocol, client: &str) {
        self.remove(id);
        if protocol.runs_in_rounds() {
            self.ot_budget.refund(client, 1);
        }
    }

    /// OT-PSI runs in progress (for tests and metrics).
    pub(crate) fn ot_running(&self) -> usize {
        lock_ot(&self.ot).running
    }

    pub(crate) fn get(&self, id: &str) -> Lookup {
        let map = self.lock();
        match map.get(id) {
            Some(Entry {
                expires,
                session: Some(s),
                ..
            }) if *expires > Instant::now() => Lookup::Live(s.clone()),
            Some(Entry {
                ended: true,
                client,
                ..
            }) => Lookup::Ended(client.clone()),
            Some(_) => Lookup::Expired,
            None => Lookup::Unknown,
        }
    }

    /// Ends a session the server has nothing more to give for (its final response went
    /// out, or a step failed for good): its state and OT slot are freed and it stops
    /// counting against every cap at once; the id stays a tombstone for [`TOMBSTONE`], so
    /// a late request gets a clear answer (docs/adr/0025-sessions-end-themselves.md).
    pub(crate) fn end(&self, id: &str) {
        let mut map = self.lock();
        if let Some(e) = map.get_mut(id) {
            e.session = None;
            e.ended = true;
            e.expires = Instant::now();
        }
    }

    pub(crate) fn remove(&self, id: &str) -> bool {
        self.lock().remove(id).is_some()
    }

    /// Live sessions.
    pub(crate) fn len(&self) -> usize {
        let now = Instant::now();
        self.lock().values().filter(|e| e.expires > now).count()
    }

    /// Frees the state of expired sessions; forgets them after the tombstone period; ends
    /// OT runs idle for `ot_idle` ([`Sessions::end`]: they stop counting against every
    /// cap); forgets OT budgets that are full again.
    pub(crate) fn sweep(&self) -> usize {
        let now = Instant::now();
        let mut map = self.lock();
        let before = map.len();
        map.retain(|_, e| {
            if e.expires <= now {
                e.session = None;
            }
            e.expires + TOMBSTONE > now
        });
        let removed = before - map.len();
        let live: Vec<Arc<Mutex<Session>>> =
            map.values().filter_map(|e| e.session.clone()).collect();
        drop(map);
        // End OT runs nobody is driving: their state and OT slot go now, not at expiry, and
        // the session stops counting against the session caps. A session whose lock is
        // taken is being handled: skip it this time.
        let mut idle = Vec::new();
        for s in live {
            let Ok(mut g) = s.try_lock() else { continue };
            if matches!(g.phase, Phase::OtRunning(_))
                && g.in_flight == 0
                && now.saturating_duration_since(g.last_active) >= self.limits.ot_idle
            {
                g.phase = Phase::Done;
                idle.push(g.id.clone());
            }
        }
        for id in idle {
            self.end(&id);
        }
        self.ot_budget.sweep();
        removed
    }
}

pub(crate) fn lock(s: &Mutex<Session>) -> std::sync::MutexGuard<'_, Session> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The OT-session budget is never saved: once a caller's bucket is full again the
    /// sweep forgets it (before, a charged bucket stayed marked unsaved, so for ever).
    #[test]
    fn the_sweep_forgets_refilled_ot_budgets() {
        // 3.6e9 sessions an hour: a charge of one is back within a microsecond.
        let sessions = Sessions::new(
            SessionLimits {
                total: 100,
                per_client: 100,
                ot: 100,
                ot_per_client: 100,
                ot_per_hour: 3_600_000_000,
                ot_idle: Duration::from_secs(30),
            },
            Duration::from_secs(300),
        );
        for i in 0..50 {
            let id = format!("s{i}");
            let slot = sessions
                .insert(
                    id.clone(),
                    Session {
                        id: id.clone(),
                        protocol: Protocol::Ot,
                        client_items: 1,
                        client: format!("caller{i}"),
                        epoch: 1,
                        label_bits: 0,
                        labels: true,
                        phase: Phase::Busy,
                        in_flight: 0,
                        last_active: Instant::now(),
                    },
                )
                .unwrap();
            drop(slot);
            sessions.remove(&id);
        }
        assert_eq!(sessions.ot_budget.tracked(), 50);
        std::thread::sleep(Duration::from_millis(5));
        sessions.sweep();
        assert_eq!(sessions.ot_budget.tracked(), 0);
    }
}
