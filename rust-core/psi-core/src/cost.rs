//! The cost model behind the automatic protocol choice (docs/protocol-choice.md,
//! docs/adr/0023-protocol-choice.md). Pure: no clock, no I/O. The caller measures the
//! link and the unit costs (psi-client's `measure`) and passes them in.
//!
//! For a [`Workload`] each protocol has a [`Cost`]: its HTTP requests in the order the
//! client driver makes them (bytes up and down each, from the spec formulas in
//! [`crate::dh::sizes`] and [`crate::ot::sizes`]), and its computation on each side as
//! [`Ops`] (scalar multiplications, hash-to-group, element decodings, AES blocks, SHA-256
//! blocks, per-entry memory work). Unit costs turn the operations into seconds; a [`Link`]
//! turns the requests into seconds:
//!
//! ```text
//! time = Σ_requests (rtt + (up_i + H_up) / up_rate + (down_i + H_down) / down_rate)
//!      + client_ops · client_units / client_threads + server_ops · server_units
//! ```
//!
//! The run is sequential (the driver waits for each response before computing the next
//! request), so the terms add. [`choose`] ranks the protocols by a [`Policy`].
//!
//! Each protocol states its own terms beside its sizes (`dh/cost.rs`, `ot/cost.rs`,
//! `cm20/cost.rs`, `gbf/cost.rs`, reached through `Protocol`), and so does the unit of an
//! inner loop none of the shared units measures (its [`ProtocolUnit`], with reference and
//! calibration kernel: CM20-PSI's column lookup, GBF-PSI's random XOR); this file is the
//! frame that adds the session request and the label step and sums them. A new protocol
//! is its own `cost.rs` and its arms in `plug.rs`.

use crate::Protocol;
use crate::cost_terms::Terms;
pub use crate::cost_terms::{
    DEFAULT_BUCKET_ENTRIES, DEFAULT_LABEL_RECORD_BYTES, Exchange, MAX_MODEL_BYTES, MAX_MODEL_ITEMS,
    Ops, ProtocolUnit, SyncTerms, Workload,
};
use crate::labels::{fetch_buckets, label_slots};

/// HTTP request line and headers the model adds to every request body (method, path,
/// host, `authorization`, `content-type`, `content-length`, `accept-encoding`, ...).
pub const REQUEST_OVERHEAD: u64 = 220;
/// HTTP status line and headers added to every response body.
pub const RESPONSE_OVERHEAD: u64 = 160;
/// `POST /v1/sessions` body (`{"protocol":"ot-psi","client_items":1000}`).
pub const SESSION_REQUEST_BYTES: u64 = 44;
/// `POST /v1/sessions` response body (`SessionCreated` JSON, about 300 bytes).
pub const SESSION_RESPONSE_BYTES: u64 = 300;

/// The network between client and server.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    /// Round-trip time in seconds.
    pub rtt: f64,
    /// Client to server throughput, bytes per second.
    pub up: f64,
    /// Server to client throughput, bytes per second.
    pub down: f64,
}

impl Link {
    /// A link of `rtt_ms` round trip and `up`/`down` Mbit/s.
    pub fn mbit(rtt_ms: f64, up_mbit: f64, down_mbit: f64) -> Self {
        Link {
            rtt: rtt_ms / 1e3,
            up: up_mbit * 1e6 / 8.0,
            down: down_mbit * 1e6 / 8.0,
        }
    }

    /// Seconds to exchange one request of `up` body bytes and its response of `down`.
    pub fn exchange(&self, up: u64, down: u64) -> f64 {
        let rate = |r: f64| if r > 0.0 { r } else { f64::MIN_POSITIVE };
        self.rtt.max(0.0)
            + (up + REQUEST_OVERHEAD) as f64 / rate(self.up)
            + (down + RESPONSE_OVERHEAD) as f64 / rate(self.down)
    }
}

impl Ops {
    /// Seconds on one thread at `units`, for a run of `protocol` (whose own unit,
    /// [`Protocol::unit`], prices [`Ops::own`]).
    pub fn seconds(&self, protocol: Protocol, units: &UnitCosts) -> f64 {
        (self.scalar_mults * units.scalar_mult
            + self.hash_to_group * units.hash_to_group
            + self.element_decodes * units.element_decode
            + self.aes_blocks * units.aes_block
            + self.hash_blocks * units.hash_block
            + self.entries * units.entry
            + self.own * units.own(protocol).unwrap_or(0.0))
            / 1e9
    }
}

/// Slots of [`UnitCosts`]'s own units: one per protocol, in [`Protocol::ALL`] order.
const SLOTS: usize = Protocol::ALL.len();

fn slot(p: Protocol) -> usize {
    Protocol::ALL.iter().position(|&q| q == p).unwrap_or(0)
}

/// Every protocol's own unit at its reference (0 in the slot of a protocol without one).
const fn own_references() -> [f64; SLOTS] {
    let mut own = [0.0; SLOTS];
    let mut i = 0;
    while i < SLOTS {
        if let Some(u) = Protocol::ALL[i].unit() {
            own[i] = u.reference;
        }
        i += 1;
    }
    own
}

/// Nanoseconds per operation on one thread of a device, and its threads.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct UnitCosts {
    /// ns per scalar multiplication.
    pub scalar_mult: f64,
    /// ns per hash-to-group.
    pub hash_to_group: f64,
    /// ns per element decoding.
    pub element_decode: f64,
    /// ns per AES-128 block.
    pub aes_block: f64,
    /// ns per hash compression block.
    pub hash_block: f64,
    /// ns per entry of memory work.
    pub entry: f64,
    /// ns per operation of each protocol's own unit ([`Protocol::unit`]), by its slot:
    /// read with [`UnitCosts::own`], set with [`UnitCosts::with_own`].
    own: [f64; SLOTS],
    /// Threads the side uses for a run's heavy steps (at least 1).
    pub threads: u32,
}

impl UnitCosts {
    /// Unit costs measured on the project's development machine (2 vCPUs of an Intel
    /// Xeon with AES-NI and SHA-NI, docs/benchmarks.md): a prior until a device measures
    /// its own.
    pub const REFERENCE: UnitCosts = UnitCosts {
        scalar_mult: 40_000.0,
        hash_to_group: 18_000.0,
        element_decode: 8_000.0,
        aes_block: 2.0,
        hash_block: 60.0,
        entry: 25.0,
        own: own_references(),
        threads: 1,
    };

    /// The given costs (ns per operation) on `threads` threads; every protocol's own unit
    /// at its reference until [`UnitCosts::with_own`] sets it.
    pub fn new(
        scalar_mult: f64,
        hash_to_group: f64,
        element_decode: f64,
        aes_block: f64,
        hash_block: f64,
        entry: f64,
        threads: u32,
    ) -> Self {
        UnitCosts {
            scalar_mult,
            hash_to_group,
            element_decode,
            aes_block,
            hash_block,
            entry,
            own: own_references(),
            threads,
        }
    }

    /// ns per operation of `protocol`'s own unit ([`Protocol::unit`]); `None` for a
    /// protocol without one.
    pub fn own(&self, protocol: Protocol) -> Option<f64> {
        protocol.unit().map(|_| self.own[slot(protocol)])
    }

    /// The same costs with `ns` per operation of `protocol`'s own unit (unchanged for a
    /// protocol without one). A peer that does not advertise a unit keeps its reference.
    pub fn with_own(mut self, protocol: Protocol, ns: f64) -> Self {
        if protocol.unit().is_some() {
            self.own[slot(protocol)] = ns;
        }
        self
    }

    /// The same costs on `threads` threads.
    pub fn with_threads(mut self, threads: u32) -> Self {
        self.threads = threads.max(1);
        self
    }

    /// The same device `factor` times slower (every cost times `factor`, threads kept):
    /// how far a prior may be off, for the choices that depend on it.
    pub fn scaled(mut self, factor: f64) -> Self {
        for c in [
            &mut self.scalar_mult,
            &mut self.hash_to_group,
            &mut self.element_decode,
            &mut self.aes_block,
            &mut self.hash_block,
            &mut self.entry,
        ] {
            *c *= factor;
        }
        for c in &mut self.own {
            *c *= factor;
        }
        self
    }

    /// Whether every cost is finite and non-negative (a peer's advertisement is checked
    /// before use).
    pub fn is_sane(&self) -> bool {
        [
            self.scalar_mult,
            self.hash_to_group,
            self.element_decode,
            self.aes_block,
            self.hash_block,
            self.entry,
        ]
        .iter()
        .chain(&self.own)
        .all(|c| c.is_finite() && *c >= 0.0 && *c < 1e9)
    }
}

/// Everything the model needs besides the workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Inputs {
    /// The network.
    pub link: Link,
    /// The client device.
    pub client: UnitCosts,
    /// The server (its `threads` is the threads of one job: the reference server runs
    /// each session step on one worker).
    pub server: UnitCosts,
}

/// What to optimise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[non_exhaustive]
pub enum Policy {
    /// Least predicted time (the default).
    #[default]
    Fastest,
    /// Fewest bytes both ways (metered or constrained networks); time breaks ties.
    FewestBytes,
}

impl Policy {
    /// `fastest`, `fewest-bytes`.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Fastest => "fastest",
            Policy::FewestBytes => "fewest-bytes",
        }
    }

    /// Parses [`Policy::name`] (case-insensitive; `_` for `-` accepted).
    pub fn parse(s: &str) -> Option<Policy> {
        let s = s.trim().to_ascii_lowercase().replace('_', "-");
        [Policy::Fastest, Policy::FewestBytes]
            .into_iter()
            .find(|p| p.name() == s)
    }
}

/// A protocol's cost for a workload, before unit costs and link.
#[derive(Debug, Clone, PartialEq)]
pub struct Cost {
    /// The protocol.
    pub protocol: Protocol,
    /// The HTTP requests the client driver makes, in order (session creation included;
    /// a complete run sends no deletion).
    pub requests: Vec<Exchange>,
    /// Client computation.
    pub client: Ops,
    /// Server computation during the run (precomputation such as the encoded registry is
    /// not counted: it is shared by every run).
    pub server: Ops,
    /// The run carries the labels itself (OT-PSI's and CM20-PSI's label lanes, ADR 0053):
    /// labels on, and no label step among the requests.
    pub labels_carried: bool,
}

impl Cost {
    /// Request bodies, bytes.
    pub fn bytes_up(&self) -> u64 {
        self.requests.iter().map(|e| e.up).sum()
    }
    /// Response bodies, bytes.
    pub fn bytes_down(&self) -> u64 {
        self.requests.iter().map(|e| e.down).sum()
    }
}

/// The predicted cost of one protocol.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Prediction {
    /// The protocol.
    pub protocol: Protocol,
    /// HTTP requests (round trips) of the run.
    pub requests: u32,
    /// Request body bytes.
    pub bytes_up: u64,
    /// Response body bytes.
    pub bytes_down: u64,
    /// Seconds on the network (latency and transfer).
    pub network: f64,
    /// Seconds of client computation.
    pub client: f64,
    /// Seconds of server computation.
    pub server: f64,
}

impl Prediction {
    /// Predicted seconds of the whole run.
    pub fn total(&self) -> f64 {
        self.network + self.client + self.server
    }
    /// Body bytes both ways.
    pub fn bytes(&self) -> u64 {
        self.bytes_up + self.bytes_down
    }
}

/// The choice and why.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Choice {
    /// The protocol chosen.
    pub protocol: Protocol,
    /// The policy applied.
    pub policy: Policy,
    /// Every candidate's prediction, in [`Protocol::ALL`] order.
    pub predictions: Vec<Prediction>,
}

impl Choice {
    /// The prediction of `protocol`, if it was a candidate.
    pub fn prediction(&self, protocol: Protocol) -> Option<&Prediction> {
        self.predictions.iter().find(|p| p.protocol == protocol)
    }
}

/// `protocol`'s requests and operations for `w`, or `None` for a protocol the model
/// does not know or a workload it cannot run (no items). The frame: the session request,
/// the protocol's own terms (its `cost.rs`), and the label step when labels are fetched.
/// Where the server offers label lanes (`w.label_lane_width`), the run carries the labels
/// when that moves no more bytes than the label step would, and the label step follows
/// otherwise: the rule a client applies ([`label_lanes_pay_off`], ADR 0053).
pub fn cost(protocol: Protocol, w: &Workload) -> Option<Cost> {
    let with = assemble(protocol, w)?;
    if !with.labels_carried {
        return Some(with);
    }
    let without = assemble(protocol, &w.with_label_lanes(None))?;
    Some(
        if with.bytes_up() + with.bytes_down() <= without.bytes_up() + without.bytes_down() {
            with
        } else {
            without
        },
    )
}

/// Whether a run of `protocol` for `w` should carry the labels in label lanes rather than
/// fetch them in a label step: the server offers lanes, labels are on, and the lanes move
/// no more bytes (for OT-PSI, `3 n_s (1 + Λ)`, for CM20-PSI `n_s (1 + Λ)`, against the
/// label query and fetch, sized by `n_c`: lanes for balanced sets, the label step for a
/// small client against a large registry).
pub fn label_lanes_pay_off(protocol: Protocol, w: &Workload) -> bool {
    cost(protocol, w).is_some_and(|c| c.labels_carried)
}

/// [`cost`] as the protocol's terms give it, lanes included where offered.
fn assemble(protocol: Protocol, w: &Workload) -> Option<Cost> {
    if w.client_items == 0 {
        return None;
    }
    let session = Exchange {
        up: SESSION_REQUEST_BYTES,
        down: SESSION_RESPONSE_BYTES,
    };
    let run = protocol.cost_terms(w)?;
    let mut requests = vec![session];
    requests.extend(run.requests);
    let (mut client, mut server) = (run.client, run.server);
    if w.labels && !run.labels_carried {
        let labels = label_terms(protocol, w);
        requests.extend(labels.requests);
        client = client.add(labels.client);
        server = server.add(labels.server);
    }
    // No DELETE: the server ends the session with its final response (docs/adr/
    // 0025-sessions-end-themselves.md); the driver deletes only after an error.
    Some(Cost {
        protocol,
        requests,
        client,
        server,
        labels_carried: w.labels && run.labels_carried,
    })
}

/// The label step (docs/protocol/labels.md): for a protocol whose labels need a query
/// round ([`Protocol::labels_need_query`]) an OPRF query over `label_slots(n_c)` items
/// first, then one fetch of the buckets.
fn label_terms(protocol: Protocol, w: &Workload) -> Terms {
    let (n_c, n_s) = (w.client_items, w.server_items);
    let mut requests = Vec::new();
    let (mut client, mut server) = (Ops::default(), Ops::default());
    if protocol.labels_need_query() {
        let k = label_slots(n_c as usize) as u64;
        let (exchange, c, s) = crate::dh::cost::query(k);
        requests.push(exchange);
        client = c;
        server = s;
    }
    let bits = w.label_bucket_bits.unwrap_or_else(|| {
        crate::labels::bucket_bits(n_s as usize, DEFAULT_BUCKET_ENTRIES as usize)
    });
    let bits = bits.min(crate::labels::MAX_BUCKET_BITS);
    let buckets = fetch_buckets(n_c as usize, bits) as u64;
    let all = w
        .label_record_bytes
        .unwrap_or(n_s * DEFAULT_LABEL_RECORD_BYTES);
    // Each section: an 8-byte header and on average 1 / 2^bits of the records.
    let records = (all as f64 * buckets as f64 / (1u64 << bits) as f64).round() as u64;
    requests.push(Exchange {
        up: 4 * buckets,
        down: buckets * 8 + records,
    });
    Terms {
        requests,
        client,
        server,
        labels_carried: false,
    }
}

/// The prediction of `protocol` for `w` with `inputs`.
pub fn predict(protocol: Protocol, w: &Workload, inputs: &Inputs) -> Option<Prediction> {
    let c = cost(protocol, w)?;
    let threads = |u: &UnitCosts| f64::from(u.threads.max(1));
    Some(Prediction {
        protocol,
        requests: c.requests.len() as u32,
        bytes_up: c.bytes_up(),
        bytes_down: c.bytes_down(),
        network: c
            .requests
            .iter()
            .map(|e| inputs.link.exchange(e.up, e.down))
            .sum(),
        client: c.client.seconds(protocol, &inputs.client) / threads(&inputs.client),
        server: c.server.seconds(protocol, &inputs.server) / threads(&inputs.server),
    })
}

/// Ranks `candidates` (those the server runs) for `w` by `policy`. `None` if no
/// candidate has a prediction.
pub fn choose(
    w: &Workload,
    inputs: &Inputs,
    policy: Policy,
    candidates: &[Protocol],
) -> Option<Choice> {
    let predictions: Vec<Prediction> = Protocol::ALL
        .iter()
        .filter(|p| candidates.contains(p))
        .filter_map(|&p| predict(p, w, inputs))
        .collect();
    let best = predictions.iter().min_by(|a, b| {
        let time = a.total().total_cmp(&b.total());
        match policy {
            Policy::Fastest => time,
            Policy::FewestBytes => a.bytes().cmp(&b.bytes()).then(time),
        }
    })?;
    Some(Choice {
        protocol: best.protocol,
        policy,
        predictions,
    })
}

pub mod kernels;

#[cfg(test)]
mod tests;
