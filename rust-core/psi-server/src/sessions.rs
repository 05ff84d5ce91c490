//! Live sessions: id -> state, with expiry and a cap on their number.

use psi_core::Protocol;
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
    /// OT-PSI: waiting for the next round; the session's server state machine.
    OtRunning(Box<OtServer>),
    /// A request of this session is being handled (or its OT state is being built).
    Busy,
    /// The protocol run is over; labels may follow (`label_queried`: an OT session's
    /// label OPRF query was answered; DH sessions fetch without one).
    Matched { label_queried: bool },
    /// Labels fetched: the session has nothing more to give.
    Done,
}

pub(crate) struct Session {
    pub protocol: Protocol,
    pub client_items: u32,
    pub client: String,
    pub epoch: u32,
    /// The registry's label bucket layout when the session started.
    pub label_bits: u8,
    pub phase: Phase,
}

pub(crate) enum Lookup {
    Live(Arc<Mutex<Session>>),
    Expired,
    Unknown,
}

struct Entry {
    expires: Instant,
    /// Copies of the session's caller key and protocol, for the per-caller and OT caps.
    client: String,
    protocol: Protocol,
    /// `None` once expired (state freed, id kept as a tombstone).
    session: Option<Arc<Mutex<Session>>>,
}

pub(crate) struct Sessions {
    limits: SessionLimits,
    ttl: Duration,
    map: Mutex<HashMap<String, Entry>>,
}

/// Caps on live sessions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionLimits {
    /// All sessions.
    pub total: usize,
    /// Sessions of one caller (token or IP): one caller cannot take every slot.
    pub per_client: usize,
    /// OT-PSI sessions, each holding per-session state proportional to the registry.
    pub ot: usize,
}

/// Why a session was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Full {
    Total,
    Client,
    Ot,
}

impl Sessions {
    pub(crate) fn new(limits: SessionLimits, ttl: Duration) -> Self {
        Sessions {
            limits,
            ttl,
            map: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Inserts a session unless a cap is reached.
    pub(crate) fn insert(&self, id: String, session: Session) -> Result<(), Full> {
        let now = Instant::now();
        let mut map = self.lock();
        let live: Vec<&Entry> = map.values().filter(|e| e.expires > now).collect();
        if live.len() >= self.limits.total {
            return Err(Full::Total);
        }
        if live.iter().filter(|e| e.client == session.client).count() >= self.limits.per_client {
            return Err(Full::Client);
        }
        if session.protocol == Protocol::Ot
            && live.iter().filter(|e| e.protocol == Protocol::Ot).count() >= self.limits.ot
        {
            return Err(Full::Ot);
        }
        map.insert(
            id,
            Entry {
                expires: now + self.ttl,
                client: session.client.clone(),
                protocol: session.protocol,
                session: Some(Arc::new(Mutex::new(session))),
            },
        );
        Ok(())
    }

    pub(crate) fn get(&self, id: &str) -> Lookup {
        let map = self.lock();
        match map.get(id) {
            Some(Entry {
                expires,
                session: Some(s),
                ..
            }) if *expires > Instant::now() => Lookup::Live(s.clone()),
            Some(_) => Lookup::Expired,
            None => Lookup::Unknown,
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

    /// Frees the state of expired sessions; forgets them after the tombstone period.
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
        before - map.len()
    }
}

pub(crate) fn lock(s: &Mutex<Session>) -> std::sync::MutexGuard<'_, Session> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}
