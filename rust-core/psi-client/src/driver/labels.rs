//! The label step of a run: the labels of the matches, from the run's own OPRF outputs
//! (DH-PSI) or an OPRF query over the matches first (OT-PSI, CM20-PSI).

use super::run::Run;
use crate::error::{ClientError, Result};
use crate::report::Matched;
use psi_core::labels::{LabelClient, LabelStep};
use psi_core::{MatchedOutputs, Phase};
use psi_http::{Route, SessionCreated};

/// How a run's labels are obtained.
pub(super) enum LabelSource {
    /// The run computed the matches' full OPRF outputs (DH-PSI).
    Outputs(MatchedOutputs),
    /// The run gave no outputs: one OPRF query over the matches first (OT-PSI).
    Query,
    /// The run carried the matches' labels itself (OT-PSI's and CM20-PSI's label lanes, ADR 0053), in the
    /// order of its matches: no label step, and the server ended the session with the
    /// outputs.
    Carried(psi_core::RunLabels),
    /// Sync mode's confirmation fetched them (the session's label fetch, made within
    /// the run: docs/protocol/sync.md §5), in the order of its matches.
    Confirmed(psi_core::RunLabels),
}

impl Run<'_> {
    /// The label step, run whenever labels are on, matches or not: its requests and their
    /// sizes depend on `n` and the session's layout only (docs/protocol/labels.md §6). A
    /// failure here (say, the hourly budget ran out) costs the labels, not the matches,
    /// which are computed and paid for: it is reported in the result. Except `421
    /// wrong_instance`: the run is retried like any step's 421. Cancellation is not
    /// a failure of the step: the run ends with `Cancelled`. Returns the matches, the
    /// failure and the number of matches whose label did not fit the step.
    pub(super) fn labels(
        &mut self,
        session: &SessionCreated,
        n: usize,
        matches: Vec<psi_core::Match>,
        source: LabelSource,
    ) -> Result<(Vec<Matched>, Option<String>, usize)> {
        let mut out: Vec<Matched> = matches
            .into_iter()
            .map(|mut m| Matched {
                index: m.index,
                // `Match` zeroizes its item on drop: take it out.
                item: std::mem::take(&mut m.item),
                label: None,
            })
            .collect();
        if let LabelSource::Confirmed(_) = source {
            // The confirmation was the session's last request, labels on or off.
            self.session_complete = true;
        }
        if !self.client.config.fetch_labels {
            return Ok((out, None, 0));
        }
        let carried = match source {
            // Sync mode's confirmation fetched them within the run (its Labels phase).
            LabelSource::Confirmed(labels) => Ok(labels),
            LabelSource::Carried(labels) => {
                // The server saw no label step coming: the outputs were the session's last.
                self.session_complete = true;
                // The labels phase is still heard, with no request in it: a run with labels
                // on reports it whichever way its labels came (the platforms' progress
                // contract).
                let t = self.enter(Phase::Labels)?;
                self.leave(Phase::Labels, t);
                Ok(labels)
            }
            other => Err(other),
        };
        let source = match carried {
            Ok(labels) => {
                return match carried_labels(labels) {
                    Ok(labels) => {
                        for (m, l) in out.iter_mut().zip(labels) {
                            m.label = l;
                        }
                        Ok((out, None, 0))
                    }
                    Err(e) => Ok((out, Some(e.to_string()), 0)),
                };
            }
            Err(source) => source,
        };
        match self.fetch_labels(session, n, &out, source) {
            Ok((labels, skipped)) => {
                for (m, l) in out.iter_mut().zip(labels) {
                    m.label = l;
                }
                Ok((out, None, skipped))
            }
            Err(ClientError::Cancelled) => Err(ClientError::Cancelled),
            // The step reached an instance that does not hold the session (a balancer's
            // misroute or failover): a new run, on a new session, gets the labels; retried
            // like the same answer to any other step (issue 35).
            Err(
                e @ ClientError::Http {
                    code: psi_http::ErrorCode::WrongInstance,
                    ..
                },
            ) => Err(e),
            Err(e) => Ok((out, Some(e.to_string()), 0)),
        }
    }

    fn fetch_labels(
        &mut self,
        session: &SessionCreated,
        n: usize,
        matches: &[Matched],
        source: LabelSource,
    ) -> Result<(Vec<Option<String>>, usize)> {
        let t = self.enter(Phase::Labels)?;
        let id = session.session_id.clone();
        let bits = session.label_bucket_bits;
        let (mut client, mut request, mut route) = match source {
            LabelSource::Outputs(outputs) => {
                let (c, r) = LabelClient::from_outputs(outputs, n, bits, self.rng()?)?;
                (c, r, Route::LabelFetch)
            }
            // `labels` answers a run that carried them without a step, and sync mode's.
            LabelSource::Carried(_) | LabelSource::Confirmed(_) => return Ok((Vec::new(), 0)),
            LabelSource::Query => {
                let items: Vec<Vec<u8>> = matches.iter().map(|m| m.item.clone()).collect();
                let threads = self.client.config.threads;
                let (c, r) =
                    LabelClient::start_query(&items, n, session.epoch, bits, threads, self.rng()?)?;
                (c, r, Route::LabelQuery)
            }
        };
        let labels = loop {
            let sent = request.len() as u64;
            let response = self.post_binary(route, &id, request)?;
            self.stats.label_bytes += sent + response.len() as u64;
            match client.handle(&response, self.rng()?)? {
                LabelStep::Send(next) => {
                    request = next;
                    route = Route::LabelFetch;
                }
                LabelStep::Done(labels) => {
                    self.session_complete = true;
                    break labels;
                }
                _ => return Err(ClientError::BadResponse("unknown label step".into())),
            }
        };
        self.leave(Phase::Labels, t);
        Ok((labels, client.skipped()))
    }
}

/// The labels a run carried, as text: registry labels are UTF-8 (`psi import`), so a lane
/// that is not is the server's error, reported like a failed label step.
fn carried_labels(labels: psi_core::RunLabels) -> Result<Vec<Option<String>>> {
    labels
        .into_vec()
        .into_iter()
        .map(|l| {
            l.map(|bytes| {
                String::from_utf8(bytes)
                    .map_err(|_| ClientError::BadResponse("a label lane is not UTF-8".into()))
            })
            .transpose()
        })
        .collect()
}
