//! A run's requests: one request built (token, content type, the route's response
//! cap), sent, timed and counted, and its answer read (error statuses as typed errors,
//! redirects refused, oversized bodies failed).

use super::run::Run;
use crate::error::{ClientError, Result};
use crate::measure::Sample;
use crate::server_input::{self, server_timing};
use crate::transport::{MAX_ERROR_BODY_BYTES, Request, Response, TransportError};
use psi_core::Phase;
use psi_http::{ErrorBody, ErrorCode, Route};
use std::time::{Duration, Instant};

/// The most a session's deletion may take once the run's deadline has passed: the slot is
/// freed on the server if it answers at once; otherwise the session ends itself later.
const DELETE_AFTER_DEADLINE: Duration = Duration::from_secs(1);

impl Run<'_> {
    /// A request's timeout: the configured one, cut to what is left of the run's deadline.
    /// Past the deadline a request is not sent (a timeout error), except the session's
    /// deletion, which gets [`DELETE_AFTER_DEADLINE`].
    fn request_timeout(&self, route: Route) -> Result<Duration> {
        let configured = self.client.config.timeout;
        let Some(deadline) = self.deadline else {
            return Ok(configured);
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if route == Route::DeleteSession {
            return Ok(configured.min(left.max(DELETE_AFTER_DEADLINE)));
        }
        if left.is_zero() {
            return Err(TransportError::timed_out("the run's deadline passed").into());
        }
        Ok(configured.min(left))
    }

    /// Sends one request (checking cancellation first) and turns error statuses into
    /// typed errors.
    pub(super) fn send(
        &mut self,
        route: Route,
        session: &str,
        body: Vec<u8>,
        content_type: Option<&str>,
        extra: Vec<(String, String)>,
    ) -> Result<Response> {
        self.send_to(route, route.path(session), body, content_type, extra)
    }

    /// [`Run::send`] to `path` (a route's path, with a query if it takes one).
    pub(super) fn send_to(
        &mut self,
        route: Route,
        path: String,
        body: Vec<u8>,
        content_type: Option<&str>,
        extra: Vec<(String, String)>,
    ) -> Result<Response> {
        if route != Route::DeleteSession {
            self.check()?;
        }
        let config = &self.client.config;
        let mut headers = extra;
        if let Some(t) = &config.token {
            headers.push(("authorization".into(), format!("Bearer {t}")));
        }
        if let Some(c) = content_type {
            headers.push(("content-type".into(), c.to_string()));
        }
        let sent = body.len() as u64;
        let cap = server_input::route_cap(
            route,
            self.step_cap,
            self.max_response,
            config.max_response_bytes,
        );
        let timeout = self.request_timeout(route)?;
        let t0 = self.client.clock.now();
        let mut resp = self.client.transport.send(Request {
            method: route.method(),
            url: format!("{}{}", self.client.base, path),
            headers,
            body,
            timeout,
            max_response_bytes: cap,
            abandon_on_cancel: !matches!(route, Route::CreateSession | Route::DeleteSession),
        })?;
        let elapsed = self.client.clock.now().saturating_sub(t0);
        // Checked again whatever the transport did: a platform transport that does not
        // honour a cap must not get an oversized health into the measurements. An error
        // body over its cap is dropped (its status still counts).
        if resp.status >= 400 && resp.body.len() as u64 > MAX_ERROR_BODY_BYTES.min(cap) {
            resp.body = Vec::new();
        }
        if resp.body.len() as u64 > cap {
            return Err(TransportError::failed(format!(
                "response body over its cap of {cap} bytes"
            ))
            .into());
        }
        self.stats.requests += 1;
        self.stats.bytes_sent += sent;
        self.stats.bytes_received += resp.body.len() as u64;
        let server = resp.header("server-timing").and_then(server_timing);
        if let Some(d) = server {
            self.stats.server_time += d;
        }
        if resp.status < 400 {
            self.samples.push(Sample {
                up: sent,
                down: resp.body.len() as u64,
                elapsed: elapsed.as_secs_f64(),
                server: server.unwrap_or_default().as_secs_f64(),
            });
        }
        if (300..400).contains(&resp.status) && resp.status != 304 {
            // Transports follow no redirect (crate::transport): the API has none.
            return Err(ClientError::BadResponse(format!(
                "HTTP {} redirect, not followed",
                resp.status
            )));
        }
        if resp.status >= 400 {
            let retry_after = resp
                .header("retry-after")
                .and_then(server_input::retry_after);
            let (code, message) = match serde_json::from_slice::<ErrorBody>(&resp.body) {
                Ok(e) => (e.error, e.message),
                Err(_) => (ErrorCode::Unknown, "non-JSON error response".to_string()),
            };
            return Err(ClientError::Http {
                status: resp.status,
                code,
                message,
                retry_after,
            });
        }
        Ok(resp)
    }

    pub(super) fn post_binary(
        &mut self,
        route: Route,
        session: &str,
        body: Vec<u8>,
    ) -> Result<Vec<u8>> {
        Ok(self
            .send(route, session, body, Some(psi_http::BINARY), vec![])?
            .body)
    }

    pub(super) fn round_trip(
        &mut self,
        route: Route,
        id: &str,
        request: Vec<u8>,
    ) -> Result<Vec<u8>> {
        self.stats.round_trips += 1;
        let t = self.enter(Phase::RoundTrip)?;
        self.stats.protocol_bytes_sent += request.len() as u64;
        let response = self.post_binary(route, id, request)?;
        self.stats.protocol_bytes_received += response.len() as u64;
        self.leave(Phase::RoundTrip, t);
        Ok(response)
    }
}
