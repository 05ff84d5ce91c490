//! The vocabulary of the cost model ([`crate::cost`]): what a run will do
//! ([`Workload`]), one HTTP request ([`Exchange`]), the operations a side performs
//! ([`Ops`]), and a protocol's share of a run ([`Terms`]). Each protocol states its own
//! terms beside its sizes (`dh/cost.rs`, `ot/cost.rs`, `cm20/cost.rs`, `gbf/cost.rs`), and
//! a protocol whose inner loop no shared unit measures declares its own ([`ProtocolUnit`]); `cost.rs` adds the
//! session request and the label step and sums them. Re-exported from [`crate::cost`].

/// Average label record on the wire when the server does not say (30-byte record
/// header, a 16-byte AEAD tag and a short label): docs/protocol/labels.md §4.
pub const DEFAULT_LABEL_RECORD_BYTES: u64 = 64;
/// Entries per label bucket when the layout is not known (the server's default
/// `label_bucket_size`).
pub const DEFAULT_BUCKET_ENTRIES: u64 = 8;
/// Largest item count the model takes (2^32): larger counts, e.g. from a server's
/// health, are read as this.
pub const MAX_MODEL_ITEMS: u64 = 1 << 32;
/// Largest byte count the model takes from its inputs (2^40).
pub const MAX_MODEL_BYTES: u64 = 1 << 40;

/// What a run will do.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Workload {
    /// Distinct items the client queries (`n_c`).
    pub client_items: u64,
    /// Entries in the registry (`n_s`).
    pub server_items: u64,
    /// Whether the labels of the matches are fetched.
    pub labels: bool,
    /// Whether the client holds the current DH-PSI encoded registry (its ETag is the
    /// server's): then the set costs no request at all.
    pub cached_set: bool,
    /// The server's largest client set (fixes the DH-PSI truncation, `L`).
    pub max_client_items: u64,
    /// The server's largest request body (fixes the OT-PSI chunk size).
    pub max_body_bytes: u64,
    /// Bits of the label bucket id (`None`: about [`DEFAULT_BUCKET_ENTRIES`] per bucket).
    pub label_bucket_bits: Option<u8>,
    /// Bytes of all the server's label records (`None`: [`DEFAULT_LABEL_RECORD_BYTES`]
    /// per entry).
    pub label_record_bytes: Option<u64>,
    /// The width `Λ` of the server's label lanes (ADR 0053), when it sends them: with
    /// labels on, an OT-PSI or CM20-PSI run then carries the labels in its outputs
    /// (`3 n_s (1 + Λ)` bytes more for OT-PSI, `n_s (1 + Λ)` for CM20-PSI) and needs no
    /// label step. `None`: no lanes.
    pub label_lane_width: Option<u8>,
    /// A DH-PSI run in sync mode (docs/protocol/sync.md), when the server serves it and
    /// the client uses it: no encoded set, the sync bytes the client still owes, and the
    /// confirmation fetch (which carries the labels). `None`: the encoded set.
    pub sync: Option<SyncTerms>,
}

/// What a DH-PSI run in sync mode costs besides the query ([`Workload::sync`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncTerms {
    /// Bytes the client downloads to be in sync: 0 when its synced set is current, a
    /// delta's, or the snapshot's (`psi_http::SyncInfo::bytes_owed`).
    pub owed_bytes: u64,
    /// The confirmation's bucket bits.
    pub bucket_bits: u8,
    /// Bytes of all the server's confirmation records.
    pub record_bytes: u64,
}

impl Workload {
    /// `n_c` items against `n_s`, labels on, no cached set, the server's default
    /// limits (10,000 items, 8 MiB bodies).
    /// Counts above [`MAX_MODEL_ITEMS`] are read as that bound (the counts may come from a
    /// server's health; no protocol here takes more, and it keeps the byte sums far from
    /// overflow).
    pub fn new(client_items: u64, server_items: u64) -> Self {
        let client_items = client_items.min(MAX_MODEL_ITEMS);
        let server_items = server_items.min(MAX_MODEL_ITEMS);
        Workload {
            client_items,
            server_items,
            labels: true,
            cached_set: false,
            max_client_items: 10_000.max(client_items),
            max_body_bytes: 8 << 20,
            label_bucket_bits: None,
            label_record_bytes: None,
            label_lane_width: None,
            sync: None,
        }
    }
    /// Sets sync mode's terms (`None`: the encoded set).
    pub fn with_sync(mut self, sync: Option<SyncTerms>) -> Self {
        self.sync = sync.map(|t| SyncTerms {
            owed_bytes: t.owed_bytes.min(MAX_MODEL_BYTES),
            bucket_bits: t.bucket_bits.min(crate::labels::MAX_BUCKET_BITS),
            record_bytes: t.record_bytes.min(MAX_MODEL_BYTES),
        });
        self
    }
    /// Sets whether labels are fetched.
    pub fn with_labels(mut self, labels: bool) -> Self {
        self.labels = labels;
        self
    }
    /// Sets whether the current encoded registry is cached.
    pub fn with_cached_set(mut self, cached: bool) -> Self {
        self.cached_set = cached;
        self
    }
    /// Sets the server's limits.
    pub fn with_limits(mut self, max_client_items: u64, max_body_bytes: u64) -> Self {
        self.max_client_items = max_client_items.clamp(1, MAX_MODEL_ITEMS);
        self.max_body_bytes = max_body_bytes.min(MAX_MODEL_BYTES);
        self
    }
    /// Sets the width of the server's label lanes (`None`: it sends none), at most
    /// [`crate::lanes::MAX_LANE_LABEL`].
    pub fn with_label_lanes(mut self, width: Option<u8>) -> Self {
        self.label_lane_width = width.map(|w| w.min(crate::lanes::MAX_LANE_LABEL));
        self
    }
    /// Sets the label layout: bucket bits and the bytes of all records, as the server
    /// advertises them.
    pub fn with_label_layout(mut self, bits: Option<u8>, record_bytes: Option<u64>) -> Self {
        self.label_bucket_bits = bits.map(|b| b.min(32));
        self.label_record_bytes = record_bytes.map(|r| r.min(MAX_MODEL_BYTES));
        self
    }
}

/// One HTTP request of a run: body bytes each way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exchange {
    /// Request body bytes.
    pub up: u64,
    /// Response body bytes.
    pub down: u64,
}

/// Counts of the operations a side performs. Fractions are fine (expected values).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Ops {
    /// ristretto255 scalar multiplications (variable or fixed base).
    pub scalar_mults: f64,
    /// RFC 9380 hash-to-group (expand_message_xmd and two Elligator maps).
    pub hash_to_group: f64,
    /// Decodings of received group elements (an inverse square root each).
    pub element_decodes: f64,
    /// AES-128 block encryptions (PRG, pseudorandom code).
    pub aes_blocks: f64,
    /// SHA-256/SHA-512 compression-function blocks (64 bytes of SHA-256 each).
    pub hash_blocks: f64,
    /// Per-entry memory work over large sets: decoding a Golomb-Rice value, an insert
    /// or probe of a hash table, a bit-matrix transpose row, a shuffle step.
    pub entries: f64,
    /// Operations in the protocol's own unit ([`ProtocolUnit`], reached through
    /// [`crate::Protocol::unit`]): the inner loop no shared unit measures, counted by the
    /// protocol's `cost.rs`; 0 for a protocol without one.
    pub own: f64,
}

impl Ops {
    /// The sum of both counts, field by field.
    pub(crate) fn add(self, o: Ops) -> Ops {
        Ops {
            scalar_mults: self.scalar_mults + o.scalar_mults,
            hash_to_group: self.hash_to_group + o.hash_to_group,
            element_decodes: self.element_decodes + o.element_decodes,
            aes_blocks: self.aes_blocks + o.aes_blocks,
            hash_blocks: self.hash_blocks + o.hash_blocks,
            entries: self.entries + o.entries,
            own: self.own + o.own,
        }
    }
}

/// A unit of computation one protocol owns: the operation of its inner loop that none of
/// the shared units (scalar multiplication, AES block, ...) measures. Declared in the
/// protocol's `cost.rs` and reached through [`crate::Protocol::unit`] (the plug's table);
/// [`crate::cost::UnitCosts`] keeps its ns per operation in the protocol's slot, the
/// calibration times its kernel, and psi-http spells it `field` in a health answer and in
/// measurements.json. A new protocol's unit is its module's constant and one arm.
#[derive(Debug, Clone, Copy)]
pub struct ProtocolUnit {
    /// Its JSON field, ns per operation (`cm20_lookup_ns`).
    pub field: &'static str,
    /// ns per operation on the reference machine (docs/benchmarks.md): the prior for a
    /// side that has not measured it.
    pub reference: f64,
    /// The calibration kernel: `k` operations on data derived from `seed`, returning a
    /// value that depends on all of them (as [`crate::cost::kernels`]).
    pub kernel: fn(u32, u64) -> u8,
}

/// A protocol's requests (after the session request) and its computation on each side,
/// as its `cost` module states them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Terms {
    /// The HTTP requests, in the order the client driver makes them.
    pub(crate) requests: Vec<Exchange>,
    /// Client computation.
    pub(crate) client: Ops,
    /// Server computation.
    pub(crate) server: Ops,
    /// The run itself carries the matches' labels (OT-PSI's and CM20-PSI's label lanes, ADR 0053): no
    /// label step follows.
    pub(crate) labels_carried: bool,
}

/// Base OTs of an OT-PSI or CM20-PSI run (Masny-Rindal, docs/protocol/ot-psi.md,
/// docs/protocol/cm20-psi.md), as a count of operations.
pub(crate) const BASE_OTS: f64 = crate::ote::base_ot::BASE_OTS as f64;
