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

    /// Bytes of the protocol's first round request (its hello), which a server can hold a
    /// session's first round to before reading it; `None` for a protocol without rounds
    /// (DH-PSI's query is sized by the session's `n`, [`crate::dh::sizes::query`]).
    pub fn hello_len(self) -> Option<u64> {
        match self {
            Protocol::Dh => None,
            Protocol::Ot => Some(crate::ot::sizes::hello()),
            Protocol::Cm20 => Some(crate::cm20::sizes::hello()),
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

#[cfg(test)]
mod tests {
    use crate::Protocol;

    /// A protocol has a hello exactly when it runs in rounds, and the length is the one its
    /// client sends (what a server holds a session's first round to).
    #[test]
    fn hello_len_is_the_first_round_request() {
        use rand_chacha::rand_core::SeedableRng;
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        for &p in Protocol::ALL {
            assert_eq!(p.hello_len().is_some(), p.runs_in_rounds(), "{p}");
        }
        let set = || crate::ItemSet::new((0u32..5).map(|i| i.to_be_bytes().to_vec()));
        let (_, hello) = crate::ot::OtClient::start(
            set(),
            crate::ot::OtConfig::new(crate::Threads::ONE),
            &mut rng,
        )
        .unwrap();
        assert_eq!(Some(hello.len() as u64), Protocol::Ot.hello_len());
        let (_, hello) = crate::cm20::Cm20Client::start(
            set(),
            crate::cm20::Cm20Config::new(crate::Threads::ONE),
            &mut rng,
        )
        .unwrap();
        assert_eq!(Some(hello.len() as u64), Protocol::Cm20.hello_len());
    }
}
