//! One in-process protocol run through the real message encoding, with per-phase
//! timings and byte counts. Shared by `psi demo` and `psi bench`.

use crate::measure::{Timing, timed};
use crate::rng::os_rng;
use psi_core::dh::{DhClient, DhServer, MatchOutput, ServerKey};
use psi_core::{ItemSet, Threads};

/// Results of one DH-PSI run.
pub struct DhRun {
    pub encode: Timing,
    pub blind: Timing,
    pub evaluate: Timing,
    pub finalize: Timing,
    pub matching: Timing,
    pub query_bytes: usize,
    pub evaluation_bytes: usize,
    pub set_bytes: usize,
    pub truncation_bits: u8,
    pub server_items: usize,
    pub output: MatchOutput,
}

/// Runs DH-PSI with both sides in this process; every message goes through its byte
/// encoding and decoding exactly as it would over a network.
pub fn run_dh(client: &[Vec<u8>], server: &[Vec<u8>], threads: usize) -> Result<DhRun, String> {
    let mut rng = os_rng()?;
    let threads = Threads::new(threads);
    let key = ServerKey::random(1, &mut rng);
    let server_set = ItemSet::new(server);
    let client_set = ItemSet::new(client);
    let srv = DhServer::new(key, client_set.len().max(1), threads);
    let (set, encode) = timed(|| srv.encode_set(&server_set));
    let set = set.map_err(|e| e.to_string())?;
    let truncation_bits = set.truncation_bits;
    let set = set.to_bytes();
    let ((mut c, query), blind) = {
        let (r, t) = timed(|| DhClient::start(client_set, srv.epoch(), threads, &mut rng));
        (r.map_err(|e| e.to_string())?, t)
    };
    let (evaluation, evaluate) = timed(|| srv.handle_query(&query));
    let evaluation = evaluation.map_err(|e| e.to_string())?;
    let (r, finalize) = timed(|| c.handle(&evaluation));
    r.map_err(|e| e.to_string())?;
    let (output, matching) = timed(|| c.handle(&set).and_then(|()| c.finish()));
    let output = output.map_err(|e| e.to_string())?;
    Ok(DhRun {
        encode,
        blind,
        evaluate,
        finalize,
        matching,
        query_bytes: query.len(),
        evaluation_bytes: evaluation.len(),
        set_bytes: set.len(),
        truncation_bits,
        server_items: server_set.len(),
        output,
    })
}

/// Results of one run of a round protocol (OT-PSI, CM20-PSI, GBF-PSI) in this process;
/// `S` is the protocol's in-memory traffic record.
pub struct RoundRun<S> {
    /// Wall time per step kind, in first-seen order (chunks summed).
    pub steps: Vec<(psi_core::Phase, std::time::Duration)>,
    /// Process CPU time of the whole run.
    pub cpu: std::time::Duration,
    pub wall: std::time::Duration,
    pub stats: S,
    pub matches: usize,
    pub output: psi_core::MatchOutput,
}

/// Results of one OT-PSI run.
pub type OtRun = RoundRun<psi_core::ot::InMemoryTraffic>;
/// Results of one CM20-PSI run.
pub type Cm20Run = RoundRun<psi_core::cm20::InMemoryTraffic>;
/// Results of one GBF-PSI run.
pub type GbfRun = RoundRun<psi_core::gbf::InMemoryTraffic>;

impl<S> RoundRun<S> {
    /// Total wall time of one side's steps.
    pub fn side(&self, client: bool) -> std::time::Duration {
        side_total(&self.steps, client)
    }

    /// Wall time of one step kind.
    pub fn step(&self, step: psi_core::Phase) -> std::time::Duration {
        self.steps
            .iter()
            .filter(|(s, _)| *s == step)
            .map(|(_, d)| *d)
            .sum()
    }
}

/// Runs `run` (an in-memory run of a round protocol, given the step observer), timing
/// each step.
fn round_run<S>(
    run: impl FnOnce(&mut dyn FnMut(psi_core::Phase)) -> psi_core::Result<(psi_core::MatchOutput, S)>,
) -> Result<RoundRun<S>, String> {
    let (result, steps, t) = timed_steps(|on_step| run(on_step));
    let (output, stats) = result.map_err(|e| e.to_string())?;
    Ok(RoundRun {
        steps,
        cpu: t.cpu,
        wall: t.wall,
        stats,
        matches: output.matches.len(),
        output,
    })
}

/// Runs OT-PSI with both sides in this process, through the real message encoding,
/// timing each step.
pub fn run_ot(
    client: &ItemSet,
    server: &std::sync::Arc<ItemSet>,
    config: &psi_core::ot::OtConfig,
) -> Result<OtRun, String> {
    let mut rng = os_rng()?;
    round_run(|on_step| {
        psi_core::ot::run_in_memory(client.clone(), server.clone(), config, &mut rng, on_step)
    })
}

/// Runs CM20-PSI with both sides in this process, through the real message encoding,
/// timing each step.
pub fn run_cm20(
    client: &ItemSet,
    server: &std::sync::Arc<ItemSet>,
    config: &psi_core::cm20::Cm20Config,
) -> Result<Cm20Run, String> {
    let mut rng = os_rng()?;
    round_run(|on_step| {
        psi_core::cm20::run_in_memory(client.clone(), server.clone(), config, &mut rng, on_step)
    })
}

/// Runs GBF-PSI with both sides in this process, through the real message encoding,
/// timing each step.
pub fn run_gbf(
    client: &ItemSet,
    server: &std::sync::Arc<ItemSet>,
    config: &psi_core::gbf::GbfConfig,
) -> Result<GbfRun, String> {
    let mut rng = os_rng()?;
    round_run(|on_step| {
        psi_core::gbf::run_in_memory(client.clone(), server.clone(), config, &mut rng, on_step)
    })
}

/// Total wall time of one side's steps.
fn side_total(
    steps: &[(psi_core::Phase, std::time::Duration)],
    client: bool,
) -> std::time::Duration {
    steps
        .iter()
        .filter(|(s, _)| s.is_client() == client)
        .map(|(_, d)| *d)
        .sum()
}

/// Runs `run`, giving it a callback to call at the end of each step; returns its result,
/// the wall time per step kind in first-seen order (repeated steps summed) and the
/// whole run's timing.
fn timed_steps<R>(
    run: impl FnOnce(&mut dyn FnMut(psi_core::Phase)) -> R,
) -> (R, Vec<(psi_core::Phase, std::time::Duration)>, Timing) {
    let mut steps: Vec<(psi_core::Phase, std::time::Duration)> = Vec::new();
    let (result, t) = timed(|| {
        let mut last = std::time::Instant::now();
        run(&mut |step| {
            let now = std::time::Instant::now();
            let d = now - last;
            last = now;
            match steps.iter_mut().find(|(s, _)| *s == step) {
                Some((_, total)) => *total += d,
                None => steps.push((step, d)),
            }
        })
    });
    (result, steps, t)
}
