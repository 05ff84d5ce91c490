//! The protocols' steps of a run, one room per family: DH-PSI (`dh`: one query and the
//! encoded registry, or in sync mode `sync`: the synced set and the confirmation) and the chunked rounds of OT-PSI, CM20-PSI and GBF-PSI (`chunked`).

mod chunked;
mod dh;
mod sync;

use super::labels::LabelSource;
use super::run::Run;
use crate::error::Result;
use psi_core::{ItemSet, MatchOutput, Protocol};
use psi_http::SessionCreated;

impl Run<'_> {
    pub(in crate::driver) fn protocol(
        &mut self,
        session: &SessionCreated,
        set: ItemSet,
        protocol: Protocol,
    ) -> Result<(MatchOutput, LabelSource)> {
        // Every protocol named: a new one does not compile until it has its run.
        match protocol {
            Protocol::Dh => match &session.sync {
                Some(info) => {
                    let info = info.clone();
                    self.dh_sync(session, &info, set)
                }
                None => self.dh(session, set),
            },
            Protocol::Ot | Protocol::Cm20 | Protocol::Gbf => self.rounds(session, set, protocol),
        }
    }
}
