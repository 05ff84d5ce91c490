//! One plug per protocol: what differs between the protocols, reached through
//! [`Protocol`] and answered by each protocol's own module (its `cost.rs`). Every `match`
//! here names each protocol and has no default arm, so a protocol added to [`Protocol`]
//! does not compile until it is plugged in. The names and wire ids are in
//! [`crate::protocol`], which stands below the protocols' modules; this file stands above
//! them.

use crate::Protocol;
use crate::chunked::{ChunkedClient, StartedClient};
use crate::cost_terms::{Terms, Workload};
use crate::error::Result;
use crate::items::ItemSet;
use crate::parallel::Threads;
use rand_core::CryptoRng;

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
            Protocol::Gbf => crate::gbf::cost::charge(client_items),
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
            Protocol::Gbf => Some(crate::gbf::sizes::hello()),
        }
    }

    /// Starts a client of this round-based protocol for `set` on `threads`, its requests
    /// sized to a server's body limit of `max_body_bytes`: the client, as a driver runs
    /// it, and its hello. `None` for a protocol without rounds (DH-PSI).
    pub fn start_chunked_client<R: CryptoRng + ?Sized>(
        self,
        set: ItemSet,
        threads: Threads,
        max_body_bytes: u64,
        rng: &mut R,
    ) -> Option<Result<StartedClient>> {
        fn boxed<C: ChunkedClient + 'static>(
            started: Result<(C, Vec<u8>)>,
        ) -> Result<StartedClient> {
            started.map(|(c, hello)| (Box::new(c) as Box<dyn ChunkedClient>, hello))
        }
        match self {
            Protocol::Dh => None,
            Protocol::Ot => {
                let config =
                    crate::ot::OtConfig::new(threads).with_max_request_bytes(max_body_bytes);
                Some(boxed(crate::ot::OtClient::start(set, config, rng)))
            }
            Protocol::Cm20 => {
                let config = crate::cm20::Cm20Config::for_body_limit(threads, max_body_bytes);
                Some(boxed(crate::cm20::Cm20Client::start(set, config, rng)))
            }
            Protocol::Gbf => {
                let config = crate::gbf::GbfConfig::for_body_limit(threads, max_body_bytes);
                Some(boxed(crate::gbf::GbfClient::start(set, config, rng)))
            }
        }
    }

    /// The protocol's requests (after the session request) and each side's operations for
    /// `w`, from its own `cost` module; `None` for a workload it cannot run.
    pub(crate) fn cost_terms(self, w: &Workload) -> Option<Terms> {
        match self {
            Protocol::Dh => crate::dh::cost::terms(w),
            Protocol::Ot => crate::ot::cost::terms(w),
            Protocol::Cm20 => crate::cm20::cost::terms(w),
            Protocol::Gbf => crate::gbf::cost::terms(w),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::Protocol;

    /// A protocol starts a chunked client exactly when it runs in rounds, and that
    /// client's hello is [`Protocol::hello_len`] bytes (what a server holds a session's
    /// first round to).
    #[test]
    fn round_protocols_start_through_the_plug_with_their_hello_len() {
        use rand_chacha::rand_core::SeedableRng;
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        let set = || crate::ItemSet::new((0u32..5).map(|i| i.to_be_bytes().to_vec()));
        for &p in Protocol::ALL {
            assert_eq!(p.hello_len().is_some(), p.runs_in_rounds(), "{p}");
            let started = p.start_chunked_client(set(), crate::Threads::ONE, 1 << 20, &mut rng);
            assert_eq!(started.is_some(), p.runs_in_rounds(), "{p}");
            if let Some(started) = started {
                let (_, hello) = started.unwrap();
                assert_eq!(Some(hello.len() as u64), p.hello_len(), "{p}");
            }
        }
    }

    /// Every request of a run fits the server's [`crate::chunked::ChunkedServer::next_request_max`]
    /// before it is handled (what a server holds each round to before reading it), the whole
    /// matrix in one chunk exactly, and nothing fits once the run is over.
    #[test]
    fn every_request_fits_the_servers_next_request_max() {
        use crate::chunked::{ChunkedServer, ClientStep};
        use rand_chacha::rand_core::SeedableRng;
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(2);
        let items = std::sync::Arc::new(crate::ItemSet::new(
            (0u32..300).map(|i| i.to_be_bytes().to_vec()),
        ));
        for max_body in [1u64 << 20, 4 << 10] {
            for &p in Protocol::ALL.iter().filter(|p| p.runs_in_rounds()) {
                let set = crate::ItemSet::new((0u32..5).map(|i| i.to_be_bytes().to_vec()));
                let (mut client, mut request) = p
                    .start_chunked_client(set, crate::Threads::ONE, max_body, &mut rng)
                    .unwrap()
                    .unwrap();
                let one = crate::Threads::ONE;
                let mut server: Box<dyn ChunkedServer> = match p {
                    Protocol::Dh => unreachable!("DH-PSI has no rounds"),
                    Protocol::Ot => Box::new(
                        crate::ot::OtServer::new(
                            items.clone(),
                            crate::ot::OtConfig::new(one).with_expected_client_items(5),
                            &mut rng,
                        )
                        .unwrap(),
                    ),
                    Protocol::Cm20 => Box::new(
                        crate::cm20::Cm20Server::new(
                            items.clone(),
                            crate::cm20::Cm20Config::new(one).with_expected_client_items(5),
                            &mut rng,
                        )
                        .unwrap(),
                    ),
                    Protocol::Gbf => Box::new(
                        crate::gbf::GbfServer::new(
                            items.clone(),
                            crate::gbf::GbfConfig::new(one).with_expected_client_items(5),
                            &mut rng,
                        )
                        .unwrap(),
                    ),
                };
                let mut round = 0;
                loop {
                    let max = server.next_request_max();
                    assert!(
                        request.len() as u64 <= max,
                        "{p} round {round}: {} > {max}",
                        request.len()
                    );
                    if round == 0 || max_body == 1 << 20 {
                        // The hello, and with a large body limit the one chunk: exactly.
                        assert_eq!(request.len() as u64, max, "{p} round {round}");
                    }
                    let response = server.handle(&request).unwrap();
                    match client.handle(&response).unwrap() {
                        ClientStep::Send(next) => request = next,
                        ClientStep::Done(_) => break,
                    }
                    round += 1;
                }
                assert!(server.is_done());
                assert_eq!(server.next_request_max(), 0, "{p}");
            }
        }
    }
}
