//! The rounds of OT-PSI and CM20-PSI (`psi_core::chunked`): one request per round, the
//! next step worked ahead while a request is out.

use crate::driver::labels::LabelSource;
use crate::driver::run::Run;
use crate::error::{ClientError, Result};
use psi_core::chunked::ChunkedClient;
use psi_core::chunked::ClientStep;
use psi_core::{ItemSet, MatchOutput, Phase, Protocol};
use psi_http::{Route, SessionCreated};
use std::time::{Duration, Instant};

/// Most OT rounds a run accepts before giving up on a server that never finishes.
const MAX_OT_ROUNDS: usize = 1 << 16;

impl Run<'_> {
    /// A round-based protocol's run (OT-PSI, CM20-PSI: [`Protocol::runs_in_rounds`]): its
    /// client started by psi-core's plug with requests sized to the server's body limit,
    /// then its rounds on the protocol's round route. With labels on, an OT-PSI or CM20-PSI
    /// client asks for label lanes when the session offers them (`label_lane_width`, ADR 0053): the
    /// labels then come with the outputs. Otherwise they follow as an OPRF query over the
    /// matches.
    pub(super) fn rounds(
        &mut self,
        session: &SessionCreated,
        set: ItemSet,
        protocol: Protocol,
    ) -> Result<(MatchOutput, LabelSource)> {
        let unsupported =
            || ClientError::BadInput(format!("{protocol} is not supported by this client"));
        let route = Route::for_protocol(protocol.api_name()).ok_or_else(unsupported)?;
        let threads = self.client.config.threads;
        let t = self.enter(Phase::ClientStart)?;
        let lanes = self.client.config.fetch_labels
            && crate::server_input::label_lanes_pay_off(protocol, set.len(), session);
        let (mut client, request) = protocol
            .start_chunked_client(set, threads, session.max_body_bytes, lanes, self.rng()?)
            .ok_or_else(unsupported)??;
        self.leave(Phase::ClientStart, t);
        self.chunked_rounds(session, route, protocol, &mut *client, request)
    }

    /// The rounds of OT-PSI and CM20-PSI (psi_core::chunked): each request to `route`, its
    /// response to the client's `handle`, until the outputs; at most `MAX_OT_ROUNDS`.
    /// While a request is out, a helper thread (one for the run, so its worker pool is built
    /// once) has the client build what it can of its next step (`work_ahead`: the next
    /// chunk, or its side of the matching), so that work overlaps the network and the
    /// server's; the requests are the same either way. If the helper cannot be started, or
    /// working ahead fails, the run goes on without it (`handle` then does that work).
    fn chunked_rounds<C: ChunkedClient + ?Sized>(
        &mut self,
        session: &SessionCreated,
        route: Route,
        protocol: Protocol,
        client: &mut C,
        mut request: Vec<u8>,
    ) -> Result<(MatchOutput, LabelSource)> {
        std::thread::scope(|s| {
            let (to_helper, jobs) = std::sync::mpsc::channel::<&mut C>();
            let (done, from_helper) = std::sync::mpsc::channel::<(&mut C, Duration)>();
            let helper = std::thread::Builder::new()
                .name("psi-work-ahead".into())
                .spawn_scoped(s, move || {
                    for c in jobs {
                        let t = Instant::now();
                        // A failure leaves the client as it was: `handle` does the work.
                        let _ = c.work_ahead();
                        if done.send((c, t.elapsed())).is_err() {
                            return;
                        }
                    }
                });
            let ahead_on = helper.is_ok();
            let mut client = client;
            let mut first = true;
            loop {
                if self.stats.round_trips >= MAX_OT_ROUNDS {
                    return Err(ClientError::BadResponse(format!(
                        "too many {protocol} rounds"
                    )));
                }
                let mut ahead = Duration::ZERO;
                let response = if ahead_on && client.has_work_ahead() {
                    match to_helper.send(client) {
                        Ok(()) => {
                            let response = self.round_trip(route, &session.session_id, request);
                            // The helper only ends early by panicking, which the scope
                            // passes on when it ends.
                            let Ok((c, d)) = from_helper.recv() else {
                                return Err(ClientError::BadInput("work-ahead thread".into()));
                            };
                            (client, ahead) = (c, d);
                            response
                        }
                        Err(std::sync::mpsc::SendError(c)) => {
                            client = c;
                            self.round_trip(route, &session.session_id, request)
                        }
                    }
                } else {
                    self.round_trip(route, &session.session_id, request)
                }?;
                // One vocabulary for events and timings: the phase entered here is the one
                // the time is recorded under (the outputs' handling is the finish).
                let phase = if first {
                    Phase::ClientSetup
                } else if client.awaits_outputs() {
                    Phase::ClientFinish
                } else {
                    Phase::ClientChunk
                };
                first = false;
                let t = self.enter(phase)?;
                match client.handle(&response)? {
                    ClientStep::Send(next) => {
                        self.leave(phase, t);
                        self.stats.work_ahead += ahead;
                        request = next;
                    }
                    ClientStep::Done(mut output) => {
                        self.leave(phase, t);
                        self.stats.work_ahead += ahead;
                        let source = match output.labels.take() {
                            Some(labels) => LabelSource::Carried(labels),
                            None => LabelSource::Query,
                        };
                        return Ok((output, source));
                    }
                }
            }
        })
    }
}
