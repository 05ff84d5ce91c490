//! A run's server session: created (saying "no labels" only to a server known to take
//! it) with its fields checked, and deleted.

use super::run::Run;
use crate::error::{ClientError, Result};
use crate::server_input;
use psi_core::{Phase, Protocol};
use psi_http::{ErrorCode, Feature, Route, SessionCreated};

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
        let t = self.enter(Phase::CreateSession)?;
        let say_no_labels = !self.client.config.fetch_labels
            && self.client.stored_feature(Feature::SessionLabelsOption);
        let session = match self.create(protocol, n, say_no_labels) {
            Err(ClientError::Http {
                code: ErrorCode::BadRequest,
                ..
            }) if say_no_labels => {
                let base = &self.client.base;
                self.client.measurements.update(|m| m.servers.remove(base));
                self.create(protocol, n, false).map(|s| (s, false))
            }
            r => r.map(|s| (s, say_no_labels)),
        }?;
        self.leave(Phase::CreateSession, t);
        Ok(session)
    }

    fn create(&mut self, protocol: Protocol, n: usize, no_labels: bool) -> Result<SessionCreated> {
        let body = serde_json::to_vec(&psi_http::CreateSession {
            protocol: protocol.api_name().to_string(),
            client_items: n as u64,
            // Said only when off: a request with labels on is as before this field.
            labels: no_labels.then_some(false),
        })
        .map_err(|_| ClientError::BadInput("session request".into()))?;
        let r = self.send(Route::CreateSession, "", body, Some(psi_http::JSON), vec![])?;
        let s: SessionCreated = serde_json::from_slice(&r.body)
            .map_err(|_| ClientError::BadResponse("session body".into()))?;
        if let Err(e) = server_input::check_session(&s, protocol) {
            // A session refused for its fields is still freed on the server, when its id
            // can be named.
            if server_input::plain_session_id(&s.session_id) {
                let _ = self.delete_session(&s.session_id);
            }
            return Err(e);
        }
        self.step_cap = server_input::step_response_cap(protocol, n, &s);
        self.requests_planned =
            server_input::planned_requests(protocol, n, &s, self.client.config.fetch_labels);
        Ok(s)
    }

    pub(super) fn delete_session(&mut self, id: &str) -> Result<()> {
        self.send(Route::DeleteSession, id, Vec::new(), None, vec![])
            .map(drop)
    }
}
