//! One in-memory session of an OT-extension protocol (OT-PSI, CM20-PSI, GBF-PSI) driven to
//! its end message by message from seeded generators: the run `ot_psi.rs`, `cm20_psi.rs`
//! and `gbf_psi.rs` share.

use super::check_output;
use psi_core::chunked::{ChunkedClient, ChunkedServer, ClientStep};
use psi_core::cm20::{Cm20Client, Cm20Config, Cm20Server};
use psi_core::gbf::{GbfClient, GbfConfig, GbfServer};
use psi_core::ot::{OtClient, OtConfig, OtServer};
use psi_core::{ItemSet, MatchOutput};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;

/// A protocol's config, and through it the protocol's two sides as [`run`] drives them
/// (through psi-core's [`ChunkedClient`] and [`ChunkedServer`]). Every call panics on an
/// error: the tests that use it expect none.
pub trait Protocol: Clone {
    type Client: ChunkedClient;
    type Server: ChunkedServer;
    /// The client and its first request.
    fn start(&self, items: ItemSet, rng: &mut ChaCha20Rng) -> (Self::Client, Vec<u8>);
    fn server(&self, items: ItemSet, rng: &mut ChaCha20Rng) -> Self::Server;
    /// The client's own `is_done` ([`ChunkedClient`] has none).
    fn client_done(client: &Self::Client) -> bool;
}

/// Every protocol starts a client, make a server and say a client is done the same way.
macro_rules! protocol {
    ($config:ty, $client:ty, $server:ty) => {
        impl Protocol for $config {
            type Client = $client;
            type Server = $server;
            fn start(&self, items: ItemSet, rng: &mut ChaCha20Rng) -> ($client, Vec<u8>) {
                <$client>::start(items, self.clone(), rng).unwrap()
            }
            fn server(&self, items: ItemSet, rng: &mut ChaCha20Rng) -> $server {
                <$server>::new(items, self.clone(), rng).unwrap()
            }
            fn client_done(client: &$client) -> bool {
                client.is_done()
            }
        }
    };
}

protocol!(OtConfig, OtClient, OtServer);
protocol!(Cm20Config, Cm20Client, Cm20Server);
protocol!(GbfConfig, GbfClient, GbfServer);

/// Runs a whole session in memory, the client's generator seeded with `seeds.0` and the
/// server's with `seeds.1`; returns the output and every message in order (see [`drive`]).
pub fn run<P: Protocol>(
    client_items: &[Vec<u8>],
    server_items: &[Vec<u8>],
    config: &P,
    seeds: (u64, u64),
) -> (MatchOutput, Vec<Vec<u8>>) {
    let mut crng = ChaCha20Rng::seed_from_u64(seeds.0);
    let mut srng = ChaCha20Rng::seed_from_u64(seeds.1);
    let (mut client, request) = config.start(ItemSet::new(client_items), &mut crng);
    let mut server = config.server(ItemSet::new(server_items), &mut srng);
    let run = drive(
        request,
        |req| server.handle(req).unwrap(),
        |resp| client.handle(resp).unwrap(),
    );
    assert!(server.is_done() && P::client_done(&client));
    run
}

/// Runs a session with seeds derived from `seed` and checks its output against the plain
/// intersection.
pub fn check<P: Protocol>(
    client_items: &[Vec<u8>],
    server_items: &[Vec<u8>],
    config: &P,
    seed: u64,
) {
    let (out, _) = run(client_items, server_items, config, (seed, seed ^ 0xabcdef));
    check_output(&out, client_items, server_items);
}

/// Drives an OT-extension run from the client's first request: `server` answers each
/// request, `client` handles each response. Returns the output and every message in
/// order (requests at even, responses at odd positions). Panics on any error or if the
/// run does not end within 10,000 round trips.
pub fn drive(
    mut request: Vec<u8>,
    mut server: impl FnMut(&[u8]) -> Vec<u8>,
    mut client: impl FnMut(&[u8]) -> ClientStep,
) -> (MatchOutput, Vec<Vec<u8>>) {
    let mut transcript = Vec::new();
    for _ in 0..10_000 {
        let response = server(&request);
        transcript.push(std::mem::take(&mut request));
        let step = client(&response);
        transcript.push(response);
        match step {
            ClientStep::Send(next) => request = next,
            ClientStep::Done(out) => return (out, transcript),
        }
    }
    panic!("run did not finish");
}
