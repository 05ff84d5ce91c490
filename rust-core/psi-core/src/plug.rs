//! One plug per protocol: what differs between the protocols, reached through
//! [`Protocol`] and answered by each protocol's own module (its `cost.rs`). Every `match`
//! here names each protocol and has no default arm, so a protocol added to [`Protocol`]
//! does not compile until it is plugged in. The names and wire ids are in
//! [`crate::protocol`], which stands below the protocols' modules; this file stands above
//! them.

use crate::Protocol;
use crate::cost_terms::{Terms, Workload};

impl Protocol {
    /// What a session of `client_items` items is charged against the caller's
    /// items-per-hour budget: the OPRF evaluations the protocol can give a client that
    /// declared that many items. DH-PSI and CM20-PSI: `n`; OT-PSI: one per Cuckoo bin, at
    /// most [`crate::ot::messages::max_bins_for`]`(n)`.
    pub fn charge(self, client_items: u32) -> u64 {
        match self {
            Protocol::Dh => crate::dh::cost::charge(client_items),
            Protocol::Ot => crate::ot::cost::charge(client_items),
            Protocol::Cm20 => crate::cm20::cost::charge(client_items),
        }
    }

    /// The protocol's requests (after the session request) and each side's operations for
    /// `w`, from its own `cost` module; `None` for a workload it cannot run.
    pub(crate) fn cost_terms(self, w: &Workload) -> Option<Terms> {
        match self {
            Protocol::Dh => crate::dh::cost::terms(w),
            Protocol::Ot => crate::ot::cost::terms(w),
            Protocol::Cm20 => crate::cm20::cost::terms(w),
        }
    }
}
