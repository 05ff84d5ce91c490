//! One plug per protocol: what differs between the protocols, reached through
//! [`Protocol`] and answered by each protocol's own module (its `cost.rs`). Every `match`
//! here names each protocol and has no default arm, so a protocol added to [`Protocol`]
//! does not compile until it is plugged in. The names and wire ids are in
//! [`crate::protocol`], which stands below the protocols' modules; this file stands above
//! them.

use crate::Protocol;
use crate::chunked::{ChunkedClient, ChunkedServer, StartedClient};
use crate::cost_terms::{ProtocolUnit, Terms, Workload};
use crate::error::Result;
use crate::items::ItemSet;
use crate::parallel::Threads;
use rand_core::CryptoRng;
use std::sync::Arc;

/// A server's registry as the round protocols' sessions start from it: the items, and what
/// a protocol computes once per registry instead of once per session (CM20-PSI's `H1`
/// digests, [`crate::cm20::Cm20Set`]; GBF-PSI's item digests, [`crate::gbf::GbfSet`]).
/// Built once when a registry is loaded ([`ServerSet::prepare`]); every session over it
/// starts with [`Protocol::start_chunked_server`]. A session over a prepared set sends the
/// same bytes as one over the plain items, with less work.
#[derive(Clone)]
pub struct ServerSet {
    items: Arc<ItemSet>,
    cm20: Option<Arc<crate::cm20::Cm20Set>>,
    gbf: Option<Arc<crate::gbf::GbfSet>>,
    /// The items' labels in lane form, for OT-PSI and CM20-PSI sessions whose client asks
    /// (ADR 0053).
    lanes: Option<Arc<crate::lanes::LaneLabels>>,
}

impl ServerSet {
    /// The items with nothing prepared: every session does its per-registry work itself.
    pub fn new(items: impl Into<Arc<ItemSet>>) -> ServerSet {
        ServerSet {
            items: items.into(),
            cm20: None,
            gbf: None,
            lanes: None,
        }
    }

    /// The set with its items' labels for label lanes (one per item of
    /// [`ServerSet::items`], in its order): its sessions of every protocol that
    /// [has them](Protocol::has_label_lanes) send them to a client that asks. A count that is not the set's is [`crate::Error::CountMismatch`].
    pub fn with_lane_labels(mut self, labels: crate::lanes::LaneLabels) -> Result<ServerSet> {
        crate::lanes::check_count(Some(&labels), self.items.len())?;
        self.lanes = Some(Arc::new(labels));
        Ok(self)
    }

    /// The width `Λ` of the set's label lanes, if it has them.
    pub fn lane_width(&self) -> Option<u8> {
        self.lanes.as_ref().map(|l| l.width())
    }

    /// The items prepared for each of `protocols` that prepares anything, on `threads`.
    /// A protocol whose limit the set is above gets nothing prepared (its sessions are
    /// refused as its server refuses them; the set still serves the other protocols).
    pub fn prepare(
        items: impl Into<Arc<ItemSet>>,
        protocols: &[Protocol],
        threads: Threads,
    ) -> Result<ServerSet> {
        let mut set = ServerSet::new(items);
        let n = set.items.len();
        for &p in protocols {
            match p {
                // DH-PSI's per-registry work is the server's key and encoded set, kept by
                // the server; OT-PSI has none.
                Protocol::Dh | Protocol::Ot => {}
                Protocol::Cm20 => {
                    if n <= crate::cm20::messages::MAX_ITEMS as usize {
                        let s = crate::cm20::Cm20Set::new(set.items.clone(), threads)?;
                        set.cm20 = Some(Arc::new(s));
                    }
                }
                Protocol::Gbf => {
                    if n <= crate::gbf::messages::MAX_ITEMS as usize {
                        let s = crate::gbf::GbfSet::new(set.items.clone(), threads)?;
                        set.gbf = Some(Arc::new(s));
                    }
                }
            }
        }
        Ok(set)
    }

    /// The items.
    pub fn items(&self) -> &Arc<ItemSet> {
        &self.items
    }

    /// Whether the set holds `protocol`'s per-registry work.
    pub fn is_prepared(&self, protocol: Protocol) -> bool {
        match protocol {
            Protocol::Dh | Protocol::Ot => false,
            Protocol::Cm20 => self.cm20.is_some(),
            Protocol::Gbf => self.gbf.is_some(),
        }
    }

    /// Bytes this set holds on the heap: the items (once, though the prepared forms share
    /// them), each protocol's prepared digests and the label lanes.
    pub fn heap_bytes(&self) -> usize {
        self.items.heap_bytes()
            + self.cm20.as_ref().map_or(0, |c| c.heap_bytes())
            + self.gbf.as_ref().map_or(0, |g| g.heap_bytes())
            + self.lanes.as_ref().map_or(0, |l| l.heap_bytes())
    }
}

impl std::fmt::Debug for ServerSet {
    // The items stay out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerSet")
            .field("items", &self.items.len())
            .field("cm20", &self.cm20.is_some())
            .field("gbf", &self.gbf.is_some())
            .field("lanes", &self.lane_width())
            .finish()
    }
}

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
    /// it, and its hello. With `label_lanes`, a protocol that can carry the matches'
    /// labels in its run asks for them (OT-PSI's and CM20-PSI's suite `0x02`, ADR 0053; the output's
    /// [`crate::MatchOutput::labels`] then has them if the server sent them); the others
    /// ignore it. `None` for a protocol without rounds (DH-PSI).
    pub fn start_chunked_client<R: CryptoRng + ?Sized>(
        self,
        set: ItemSet,
        threads: Threads,
        max_body_bytes: u64,
        label_lanes: bool,
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
                let mut config =
                    crate::ot::OtConfig::new(threads).with_max_request_bytes(max_body_bytes);
                if label_lanes {
                    config = config.with_label_lanes();
                }
                Some(boxed(crate::ot::OtClient::start(set, config, rng)))
            }
            Protocol::Cm20 => {
                let mut config = crate::cm20::Cm20Config::for_body_limit(threads, max_body_bytes);
                if label_lanes {
                    config = config.with_label_lanes();
                }
                Some(boxed(crate::cm20::Cm20Client::start(set, config, rng)))
            }
            Protocol::Gbf => {
                let config = crate::gbf::GbfConfig::for_body_limit(threads, max_body_bytes);
                Some(boxed(crate::gbf::GbfClient::start(set, config, rng)))
            }
        }
    }

    /// Starts a server session of this round-based protocol over `set` for a client
    /// admitted with `client_items` items (its hello must declare exactly that many), its
    /// heavy steps on `threads`: the session's state machine, which has drawn all of its
    /// randomness. `None` for a protocol without rounds (DH-PSI).
    pub fn start_chunked_server<R: CryptoRng + ?Sized>(
        self,
        set: &ServerSet,
        client_items: u32,
        threads: Threads,
        rng: &mut R,
    ) -> Option<Result<Box<dyn ChunkedServer>>> {
        fn boxed<S: ChunkedServer + 'static>(server: Result<S>) -> Result<Box<dyn ChunkedServer>> {
            server.map(|s| Box::new(s) as Box<dyn ChunkedServer>)
        }
        let n = client_items as usize;
        let items = set.items.clone();
        match self {
            Protocol::Dh => None,
            Protocol::Ot => {
                let mut config = crate::ot::OtConfig::new(threads).with_expected_client_items(n);
                if let Some(lanes) = &set.lanes {
                    config = config.with_lane_labels(lanes.clone());
                }
                Some(boxed(crate::ot::OtServer::new(items, config, rng)))
            }
            Protocol::Cm20 => {
                use crate::cm20::{Cm20Config, Cm20Server};
                let mut config = Cm20Config::new(threads).with_expected_client_items(n);
                if let Some(lanes) = &set.lanes {
                    config = config.with_lane_labels(lanes.clone());
                }
                Some(boxed(match &set.cm20 {
                    Some(prepared) => Cm20Server::with_set(prepared.clone(), config, rng),
                    None => Cm20Server::new(items, config, rng),
                }))
            }
            Protocol::Gbf => {
                use crate::gbf::{GbfConfig, GbfServer};
                let config = GbfConfig::new(threads).with_expected_client_items(n);
                Some(boxed(match &set.gbf {
                    Some(prepared) => GbfServer::with_set(prepared.clone(), config, rng),
                    None => GbfServer::new(items, config, rng),
                }))
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

    /// Whether the protocol's run can carry the matches' labels in label lanes (OT-PSI's
    /// and CM20-PSI's suite `0x02`, ADR 0053) when the server's set has them
    /// ([`ServerSet::with_lane_labels`]).
    pub const fn has_label_lanes(self) -> bool {
        match self {
            Protocol::Ot | Protocol::Cm20 => true,
            Protocol::Dh | Protocol::Gbf => false,
        }
    }

    /// The protocol's own cost unit, from its `cost` module: the operation of its inner
    /// loop that no shared unit measures (its terms count it in [`crate::cost::Ops::own`]);
    /// `None` for a protocol whose work the shared units cover.
    pub const fn unit(self) -> Option<&'static ProtocolUnit> {
        match self {
            Protocol::Dh | Protocol::Ot => None,
            Protocol::Cm20 => Some(&crate::cm20::cost::LOOKUP),
            Protocol::Gbf => Some(&crate::gbf::cost::XOR),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ServerSet;
    use crate::{Protocol, Threads};

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
            let started =
                p.start_chunked_client(set(), crate::Threads::ONE, 1 << 20, false, &mut rng);
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
        use crate::chunked::ClientStep;
        use rand_chacha::rand_core::SeedableRng;
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(2);
        let items = std::sync::Arc::new(crate::ItemSet::new(
            (0u32..300).map(|i| i.to_be_bytes().to_vec()),
        ));
        for max_body in [1u64 << 20, 4 << 10] {
            for &p in Protocol::ALL.iter().filter(|p| p.runs_in_rounds()) {
                let set = crate::ItemSet::new((0u32..5).map(|i| i.to_be_bytes().to_vec()));
                let (mut client, mut request) = p
                    .start_chunked_client(set, crate::Threads::ONE, max_body, false, &mut rng)
                    .unwrap()
                    .unwrap();
                let mut server = p
                    .start_chunked_server(&ServerSet::new(items.clone()), 5, Threads::ONE, &mut rng)
                    .unwrap()
                    .unwrap();
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

    /// A session over a prepared set answers byte for byte as one over the plain items, for
    /// every round protocol; each protocol that prepares something is prepared.
    #[test]
    fn a_prepared_set_gives_the_same_responses() {
        use crate::chunked::ClientStep;
        use rand_chacha::rand_core::SeedableRng;
        let items = std::sync::Arc::new(crate::ItemSet::new(
            (0u32..400).map(|i| i.to_be_bytes().to_vec()),
        ));
        let prepared = ServerSet::prepare(items.clone(), Protocol::ALL, Threads::ONE).unwrap();
        let plain = ServerSet::new(items);
        assert!(prepared.is_prepared(Protocol::Cm20) && prepared.is_prepared(Protocol::Gbf));
        assert!(!plain.is_prepared(Protocol::Cm20) && !plain.is_prepared(Protocol::Gbf));
        assert!(
            Protocol::Dh
                .start_chunked_server(
                    &plain,
                    5,
                    Threads::ONE,
                    &mut rand_chacha::ChaCha20Rng::seed_from_u64(0)
                )
                .is_none()
        );
        for &p in Protocol::ALL.iter().filter(|p| p.runs_in_rounds()) {
            let transcript = |set: &ServerSet| {
                let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(7);
                let client_set =
                    crate::ItemSet::new((390u32..400).map(|i| i.to_be_bytes().to_vec()));
                let (mut client, mut request) = p
                    .start_chunked_client(client_set, Threads::ONE, 1 << 20, false, &mut rng)
                    .unwrap()
                    .unwrap();
                let mut server = p
                    .start_chunked_server(set, 10, Threads::ONE, &mut rng)
                    .unwrap()
                    .unwrap();
                assert_eq!(server.protocol(), p);
                let mut responses = Vec::new();
                loop {
                    let response = server.handle(&request).unwrap();
                    responses.push(response.clone());
                    match client.handle(&response).unwrap() {
                        ClientStep::Send(next) => request = next,
                        ClientStep::Done(out) => {
                            assert_eq!(out.matches.len(), 10, "{p}");
                            return responses;
                        }
                    }
                }
            };
            assert_eq!(transcript(&plain), transcript(&prepared), "{p}");
        }
    }
}
