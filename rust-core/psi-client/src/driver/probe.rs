//! The requests outside a session that feed the automatic choice: the server's health
//! and the bounded link probe.

use super::run::Run;
use crate::error::{ClientError, Result};
use psi_http::Route;

impl Run<'_> {
    /// The bounded probe: `GET /v1/probe?bytes=0` (the RTT), `GET /v1/probe?bytes=n` and
    /// `POST /v1/probe` with `n` bytes (timed like every request: the link estimate takes
    /// them as samples). `n` is capped at [`psi_http::PROBE_MAX_BYTES`], and each response
    /// at the body asked for plus [`crate::measure::PROBE_RESPONSE_SLACK`], whatever the
    /// server sends.
    pub(super) fn probe(&mut self, n: u64) -> Result<()> {
        let n = n.min(psi_http::PROBE_MAX_BYTES);
        let result = self.probe_requests(n);
        self.max_response = None;
        result
    }

    fn probe_requests(&mut self, n: u64) -> Result<()> {
        let slack = crate::measure::PROBE_RESPONSE_SLACK;
        let down = |bytes: u64| format!("{}?bytes={bytes}", Route::ProbeDown.template());
        self.max_response = Some(slack);
        self.send_to(Route::ProbeDown, down(0), Vec::new(), None, vec![])?;
        self.max_response = Some(n + slack);
        let r = self.send_to(Route::ProbeDown, down(n), Vec::new(), None, vec![])?;
        if r.body.len() as u64 != n {
            return Err(ClientError::BadResponse("probe body".into()));
        }
        self.max_response = Some(slack);
        let r = self.send_to(
            Route::ProbeUp,
            Route::ProbeUp.template().to_string(),
            vec![0; n as usize],
            Some(psi_http::BINARY),
            vec![],
        )?;
        match serde_json::from_slice::<psi_http::ProbeReceived>(&r.body) {
            Ok(p) if p.bytes == n => Ok(()),
            _ => Err(ClientError::BadResponse("probe answer".into())),
        }
    }

    pub(super) fn health(&mut self) -> Result<psi_http::Health> {
        let r = self.send(Route::Health, "", Vec::new(), None, vec![])?;
        serde_json::from_slice(&r.body).map_err(|_| ClientError::BadResponse("health body".into()))
    }
}
