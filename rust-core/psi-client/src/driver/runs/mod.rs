//! The protocols' steps of a run, one room per family: DH-PSI (`dh`: one query and the
//! encoded registry) and the chunked rounds of OT-PSI and CM20-PSI (`chunked`).

mod chunked;
mod dh;

use super::labels::LabelSource;
use super::run::Run;
use crate::error::{ClientError, Result};
use psi_core::{ItemSet, MatchOutput, Protocol};
use psi_http::SessionCreated;

impl Run<'_> {
    pub(in crate::driver) fn protocol(
        &mut self,
        session: &SessionCreated,
        set: ItemSet,
        protocol: Protocol,
    ) -> Result<(MatchOutput, LabelSource)> {
        match protocol {
            Protocol::Dh => self.dh(session, set),
            p if p.runs_in_rounds() => self.rounds(session, set, p),
            _ => Err(ClientError::BadInput(format!(
                "{protocol} is not supported by this client"
            ))),
        }
    }
}
