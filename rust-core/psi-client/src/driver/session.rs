//! A run's server session: created (saying "no labels" only to a server known to take
//! it) with its fields checked, a first run's opened with the server's health before the
//! choice (ADR 0054) and taken over or replaced after it, and deleted.

use super::run::Run;
use crate::error::{ClientError, Result};
use crate::report::RunStats;
use crate::server_input;
use psi_core::{Phase, Protocol};
use psi_http::{ErrorCode, Feature, Route, SessionCreated};

/// A session a first run opened before its choice (for DH-PSI, asking for the server's
/// health with it, docs/adr/0054-first-runs.md): the run takes it over if the choice is
/// its protocol, or replaces it with the chosen protocol's session.
pub(super) struct Opened {
    pub(super) session: SessionCreated,
    /// Whether its request said `"labels": false`.
    pub(super) said_no_labels: bool,
    /// Its request, counted (the link samples are in the measurements already).
    pub(super) stats: RunStats,
}

/// What a session request says besides the protocol and the count.
#[derive(Clone, Copy)]
struct Ask<'a> {
    no_labels: bool,
    health: bool,
    replaces: Option<&'a str>,
    /// A first run's plan: the server may create the session for one of its protocols.
    plan: &'a [psi_http::PlanStep],
}

impl Run<'_> {
    /// `POST /v1/sessions`. With labels off, `"labels": false` is sent only to a server
    /// whose stored health lists [`Feature::SessionLabelsOption`] (older servers refuse
    /// the unknown field); returns the session and whether it was sent. A `bad_request`
    /// to a request that carried it (a server replaced by an older one since its health
    /// was stored) drops the stored health and asks once more without it.
    pub(super) fn create_session(
        &mut self,
        protocol: Protocol,
        n: usize,
    ) -> Result<(SessionCreated, bool)> {
        let no_labels = !self.client.config.fetch_labels
            && self.client.stored_feature(Feature::SessionLabelsOption);
        self.create_asking(
            protocol,
            n,
            Ask {
                no_labels,
                health: false,
                replaces: None,
                plan: &[],
            },
        )
    }

    /// A first run's session, opened before the choice: `POST /v1/sessions?health=1` for
    /// DH-PSI with the plan (`&plan=...`, [`crate::measure::opening_plan`]) when there is
    /// one: the server creates it for the plan's protocol for its registry
    /// ([`Feature::SessionPlan`]), and its answer carries the server's health
    /// ([`Feature::SessionHealth`]); an older server ignores the query (a DH-PSI session,
    /// no health). Labels off, it says so whatever the server (nothing is stored of it
    /// yet); a `bad_request` to that asks once more without it, like
    /// [`Run::create_session`].
    pub(super) fn open_session(
        &mut self,
        plan: &[psi_http::PlanStep],
        n: usize,
    ) -> Result<(SessionCreated, bool)> {
        let no_labels = !self.client.config.fetch_labels;
        self.create_asking(
            Protocol::Dh,
            n,
            Ask {
                no_labels,
                health: true,
                replaces: None,
                plan,
            },
        )
    }

    /// The run's session from what the choice opened: `opened` itself when it is for
    /// `protocol` (the phase is still reported, with no request in it, so the phases of a
    /// run do not depend on whether it was a first one), else a new session that replaces
    /// it on the server ([`Feature::SessionReplaces`]; without it, `opened` is deleted).
    pub(super) fn take_over(
        &mut self,
        opened: Opened,
        protocol: Protocol,
        n: usize,
    ) -> Result<(SessionCreated, bool)> {
        if opened.session.protocol == protocol.api_name() {
            let t = match self.enter(Phase::CreateSession) {
                Ok(t) => t,
                Err(e) => {
                    let _ = self.delete_session(&opened.session.session_id);
                    return Err(e);
                }
            };
            self.stats.requests += opened.stats.requests;
            self.stats.bytes_sent += opened.stats.bytes_sent;
            self.stats.bytes_received += opened.stats.bytes_received;
            self.stats.server_time += opened.stats.server_time;
            self.adopt(&opened.session, protocol, n);
            self.leave(Phase::CreateSession, t);
            for (phase, d) in opened.stats.phases {
                self.stats.add_phase(phase, d);
            }
            return Ok((opened.session, opened.said_no_labels));
        }
        let id = opened.session.session_id;
        if self.client.stored_feature(Feature::SessionReplaces) {
            let no_labels = !self.client.config.fetch_labels
                && self.client.stored_feature(Feature::SessionLabelsOption);
            let created = self.create_asking(
                protocol,
                n,
                Ask {
                    no_labels,
                    health: false,
                    replaces: Some(&id),
                    plan: &[],
                },
            );
            if created.is_err() {
                // Refused before the server got to the replacement, it is still there.
                let _ = self.delete_session(&id);
            }
            created
        } else {
            let _ = self.delete_session(&id);
            self.create_session(protocol, n)
        }
    }

    fn create_asking(
        &mut self,
        protocol: Protocol,
        n: usize,
        ask: Ask<'_>,
    ) -> Result<(SessionCreated, bool)> {
        let t = self.enter(Phase::CreateSession)?;
        let session = match self.create(protocol, n, ask) {
            Err(ClientError::Http {
                code: ErrorCode::BadRequest,
                ..
            }) if ask.no_labels => {
                let base = &self.client.base;
                self.client.measurements.update(|m| m.servers.remove(base));
                let ask = Ask {
                    no_labels: false,
                    ..ask
                };
                self.create(protocol, n, ask).map(|s| (s, false))
            }
            r => r.map(|s| (s, ask.no_labels)),
        }?;
        self.leave(Phase::CreateSession, t);
        Ok(session)
    }

    fn create(&mut self, protocol: Protocol, n: usize, ask: Ask<'_>) -> Result<SessionCreated> {
        let body = serde_json::to_vec(&psi_http::CreateSession {
            protocol: protocol.api_name().to_string(),
            client_items: n as u64,
            // Said only when off: a request with labels on is as before this field.
            labels: ask.no_labels.then_some(false),
            replaces: ask.replaces.map(str::to_string),
        })
        .map_err(|_| ClientError::BadInput("session request".into()))?;
        let mut query = Vec::new();
        if ask.health {
            query.push(psi_http::SESSION_HEALTH_QUERY.to_string());
        }
        // Sync mode where the server serves it: asked for when the stored health says
        // so, or with a first run's queries (a server without it ignores the query). A
        // run of a fixed protocol that knows nothing of the server asks plainly.
        if self.client.config.sync
            && (protocol == Protocol::Dh || !ask.plan.is_empty())
            && (!query.is_empty() || self.client.stored_sync())
        {
            query.push(psi_http::SESSION_SYNC_QUERY.to_string());
        }
        if !ask.plan.is_empty() {
            let plan = psi_http::format_plan(ask.plan);
            query.push(format!("{}={plan}", psi_http::SESSION_PLAN_PARAM));
        }
        let mut path = Route::CreateSession.path("");
        if !query.is_empty() {
            path = format!("{path}?{}", query.join("&"));
        }
        let r = self.send_to(
            Route::CreateSession,
            path,
            body,
            Some(psi_http::JSON),
            vec![],
        )?;
        let s: SessionCreated = serde_json::from_slice(&r.body)
            .map_err(|_| ClientError::BadResponse("session body".into()))?;
        // A plan lets the server pick one of its protocols; otherwise the one asked for.
        let protocol = Protocol::from_api_name(&s.protocol)
            .filter(|p| ask.plan.iter().any(|step| step.protocol == p.api_name()))
            .unwrap_or(protocol);
        if let Err(e) = server_input::check_session(&s, protocol) {
            // A session refused for its fields is still freed on the server, when its id
            // can be named.
            if server_input::plain_session_id(&s.session_id) {
                let _ = self.delete_session(&s.session_id);
            }
            return Err(e);
        }
        self.adopt(&s, protocol, n);
        Ok(s)
    }

    /// The response caps and the plan of a run on session `s`.
    fn adopt(&mut self, s: &SessionCreated, protocol: Protocol, n: usize) {
        self.step_cap = server_input::step_response_cap(protocol, n, s);
        self.requests_planned =
            server_input::planned_requests(protocol, n, s, self.client.config.fetch_labels);
    }

    pub(super) fn delete_session(&mut self, id: &str) -> Result<()> {
        self.send(Route::DeleteSession, id, Vec::new(), None, vec![])
            .map(drop)
    }
}
