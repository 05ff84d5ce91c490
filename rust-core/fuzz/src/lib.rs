//! Shared pieces of the fuzz targets: structure-aware inputs (a message whose frame header
//! can be repaired, a valid transcript message edited at chosen offsets) and deterministic
//! fixtures built from the transcript vectors in `tests/vectors/` (the DH-PSI key, items
//! and epoch; the OT-PSI items, seeds and chunk size). Only psi-core's public API is used.

use arbitrary::Arbitrary;
use psi_core::Protocol;
use psi_core::dh::{DhClient, DhServer, EncodedSet, ServerKey};
use psi_core::labels::LabelStore;
use psi_core::oprf::{OUTPUT_LEN, OprfKey};
use psi_core::ot::OtConfig;
use psi_core::{ItemSet, MatchedOutputs, Threads};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use std::sync::{Arc, OnceLock};

/// Header length of every protocol message (`psi_core::wire::HEADER_LEN`).
pub const HEADER_LEN: usize = psi_core::wire::HEADER_LEN;

/// A message as a target receives it. `mode % 3`: 0 the bytes as they are; 1 the bytes
/// are a whole message whose header (magic, version, protocol, body length) is repaired,
/// so mutations of the body are not all stopped by the frame check; 2 `bytes[0]` is the
/// message type and the rest the body, framed correctly. A committed seed is `[1] ++ a
/// transcript message` (see `examples/seeds.rs`).
#[derive(Arbitrary, Debug, Clone, PartialEq, Eq)]
pub struct Framed {
    /// How to read `bytes` (see the type's documentation).
    pub mode: u8,
    /// The message or body.
    pub bytes: Vec<u8>,
}

impl Framed {
    /// A whole fuzz input read as a `Framed`: its first byte is the mode, the rest the bytes.
    pub fn from_input(data: &[u8]) -> Framed {
        match data.split_first() {
            Some((&mode, bytes)) => Framed {
                mode,
                bytes: bytes.to_vec(),
            },
            None => Framed {
                mode: 0,
                bytes: Vec::new(),
            },
        }
    }

    /// The message bytes for `protocol`.
    pub fn message(&self, protocol: Protocol) -> Vec<u8> {
        match self.mode % 3 {
            1 if self.bytes.len() >= HEADER_LEN => {
                let mut m = self.bytes.clone();
                repair_header(&mut m, protocol);
                m
            }
            2 if !self.bytes.is_empty() => frame(protocol, self.bytes[0], &self.bytes[1..]),
            _ => self.bytes.clone(),
        }
    }
}

/// A whole message: the 9-byte header of docs/protocol/README.md, then `body`.
pub fn frame(protocol: Protocol, message_type: u8, body: &[u8]) -> Vec<u8> {
    frame_id(protocol.wire_id(), message_type, body)
}

/// [`frame`] for a raw wire id (group PSI's `0x05` is not a [`Protocol`]).
pub fn frame_id(wire_id: u8, message_type: u8, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(HEADER_LEN + body.len());
    m.extend_from_slice(&psi_core::wire::MAGIC);
    m.push(psi_core::wire::VERSION);
    m.push(wire_id);
    m.push(message_type);
    m.extend_from_slice(&(body.len() as u32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

/// Sets magic, version, protocol id and body length of a message of at least 9 bytes.
pub fn repair_header(m: &mut [u8], protocol: Protocol) {
    repair_header_id(m, protocol.wire_id())
}

/// [`repair_header`] for a raw wire id.
pub fn repair_header_id(m: &mut [u8], wire_id: u8) {
    if m.len() < HEADER_LEN {
        return;
    }
    let body = (m.len() - HEADER_LEN) as u32;
    m[0..2].copy_from_slice(&psi_core::wire::MAGIC);
    m[2] = psi_core::wire::VERSION;
    m[3] = wire_id;
    m[5..9].copy_from_slice(&body.to_be_bytes());
}

/// One edit of a valid message; offsets are taken modulo the message length.
#[derive(Arbitrary, Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    /// XOR one byte.
    Xor {
        /// Offset.
        at: u16,
        /// Mask.
        mask: u8,
    },
    /// Overwrite a big-endian u32 (a count, an epoch, a length, a row offset).
    SetU32 {
        /// Offset.
        at: u16,
        /// Value.
        value: u32,
    },
    /// Keep only the first `keep` bytes.
    Truncate {
        /// Bytes kept.
        keep: u16,
    },
    /// Insert bytes.
    Insert {
        /// Offset.
        at: u16,
        /// Bytes.
        bytes: Vec<u8>,
    },
}

/// Edits of a valid message, then (if `fix_header`) its header repaired so the edits
/// reach the body decoder.
#[derive(Arbitrary, Debug, Clone, PartialEq, Eq)]
pub struct Mutation {
    /// The edits, in order.
    pub edits: Vec<Edit>,
    /// Repair the frame header afterwards.
    pub fix_header: bool,
}

impl Mutation {
    /// `valid` with the edits applied.
    pub fn apply(&self, valid: &[u8], protocol: Option<Protocol>) -> Vec<u8> {
        let mut m = valid.to_vec();
        for e in &self.edits {
            let len = m.len();
            match e {
                Edit::Xor { at, mask } if len > 0 => m[*at as usize % len] ^= mask,
                Edit::SetU32 { at, value } if len >= 4 => {
                    let at = *at as usize % (len - 3);
                    m[at..at + 4].copy_from_slice(&value.to_be_bytes());
                }
                Edit::Truncate { keep } => m.truncate(*keep as usize),
                Edit::Insert { at, bytes } => {
                    let at = *at as usize % (len + 1);
                    m.splice(at..at, bytes.iter().copied());
                }
                _ => {}
            }
        }
        if let (true, Some(p)) = (self.fix_header, protocol) {
            repair_header(&mut m, p);
        }
        m
    }
}

/// What a peer sends in one step of a run.
#[derive(Arbitrary, Debug, Clone, PartialEq, Eq)]
pub enum Send {
    /// The message an honest peer sends here.
    Valid,
    /// That message, edited.
    Mutated(Mutation),
    /// Any message.
    Raw(Framed),
    /// The message sent in the step before, again.
    Repeat,
}

impl Send {
    /// The bytes to deliver, given the honest message and the previous delivery.
    pub fn bytes(&self, valid: &[u8], previous: &[u8], protocol: Protocol) -> Vec<u8> {
        match self {
            Send::Valid => valid.to_vec(),
            Send::Mutated(m) => m.apply(valid, Some(protocol)),
            Send::Raw(f) => f.message(protocol),
            Send::Repeat => previous.to_vec(),
        }
    }

    /// True for the honest message.
    pub fn is_valid(&self) -> bool {
        matches!(self, Send::Valid)
    }
}

/// Deterministic randomness for a party (the targets must replay exactly).
pub fn rng(seed: u64) -> ChaCha20Rng {
    ChaCha20Rng::seed_from_u64(seed)
}

fn hex32(s: &str) -> [u8; 32] {
    hex::decode(s).expect("hex").try_into().expect("32 bytes")
}

/// The DH-PSI transcript vector (`tests/vectors/dh-psi-transcript.json`), compiled in.
pub const DH_TRANSCRIPT: &str = include_str!("../../../tests/vectors/dh-psi-transcript.json");
/// The OT-PSI transcript vector (`tests/vectors/ot-psi-transcript.json`), compiled in.
pub const OT_TRANSCRIPT: &str = include_str!("../../../tests/vectors/ot-psi-transcript.json");

/// The DH-PSI fixture: the transcript's key, epoch, items and encoded set, and a label
/// store for the server items (labels `label-<i>`), all built once.
pub struct Dh {
    /// The server (one thread), for the transcript's 8 client items at most.
    pub server: DhServer,
    /// The same key for up to 4096 items (label queries of larger sessions).
    pub wide: DhServer,
    /// Key epoch.
    pub epoch: u32,
    /// The client's items.
    pub client_items: Vec<Vec<u8>>,
    /// The server's items.
    pub server_items: Vec<Vec<u8>>,
    /// The encoded server set.
    pub set: EncodedSet,
    /// Indices of the matches (original client order).
    pub matches: Vec<usize>,
    /// The transcript's QUERY, EVALUATION and ENCODED_SET messages.
    pub messages: [Vec<u8>; 3],
    /// Label records of the label server items.
    pub labels: LabelStore,
    /// The items of the label store: the server items and 252 more, so that there are 16
    /// buckets.
    pub label_items: Vec<Vec<u8>>,
}

fn strings(v: &serde_json::Value) -> Vec<Vec<u8>> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|s| s.as_str().expect("string").as_bytes().to_vec())
        .collect()
}

/// A vector's list of indices (its matches).
fn indices(v: &serde_json::Value) -> Vec<usize> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|m| m.as_u64().expect("index") as usize)
        .collect()
}

/// The DH-PSI fixture, built on first use.
pub fn dh() -> &'static Dh {
    static DH: OnceLock<Dh> = OnceLock::new();
    DH.get_or_init(|| {
        let v: serde_json::Value = serde_json::from_str(DH_TRANSCRIPT).expect("json");
        let kd = &v["key_derivation"];
        let key = OprfKey::derive(
            &hex32(kd["seed"].as_str().expect("seed")),
            &hex::decode(kd["info"].as_str().expect("info")).expect("hex"),
        )
        .expect("key");
        let epoch = v["epoch"].as_u64().expect("epoch") as u32;
        let max = v["max_client_items"].as_u64().expect("max") as usize;
        let wide = DhServer::new(ServerKey::new(key.clone(), epoch), 4096, Threads::ONE);
        let server = DhServer::new(ServerKey::new(key, epoch), max, Threads::ONE);
        let server_items = strings(&v["server_items"]);
        let set = server
            .encode_set(&ItemSet::new(server_items.clone()))
            .expect("set");
        let msg = |k: &str| hex::decode(v[k].as_str().expect(k)).expect("hex");
        let messages = [msg("query"), msg("evaluation"), msg("encoded_set")];
        assert_eq!(set.to_bytes(), messages[2], "fixture = transcript vector");
        let mut label_items = server_items.clone();
        label_items.extend((0..252u32).map(|i| format!("+4477{i:08}").into_bytes()));
        let outputs = server
            .outputs(&ItemSet::new(label_items.clone()))
            .expect("outputs");
        let names: Vec<String> = (0..label_items.len())
            .map(|i| format!("label-{i}"))
            .collect();
        let labels = LabelStore::build(
            outputs.iter().zip(names.iter().map(String::as_str)),
            16,
            &mut rng(3),
        );
        Dh {
            server,
            wide,
            epoch,
            client_items: strings(&v["client_items"]),
            server_items,
            set,
            matches: indices(&v["matches"]),
            messages,
            labels,
            label_items,
        }
    })
}

/// The full OPRF outputs of `items` as a client computes them (a whole DH-PSI exchange
/// with the fixture's server), for the label client.
pub fn client_outputs(items: &[Vec<u8>], seed: u64) -> MatchedOutputs {
    let f = dh();
    let (mut c, q) =
        DhClient::start(ItemSet::new(items), f.epoch, Threads::ONE, &mut rng(seed)).expect("start");
    c.handle(&f.server.handle_query(&q).expect("evaluation"))
        .expect("handle");
    c.into_outputs().expect("outputs")
}

/// The label of label item `i` (its index in [`Dh::label_items`]).
pub fn label_of(i: usize) -> String {
    format!("label-{i}")
}

/// The fixture of an OT-extension transcript vector (OT-PSI's [`Ot`], CM20-PSI's
/// [`Cm20`]): items, seeds, the vector's chunking `C`, matches and message hashes.
pub struct Transcript<C> {
    /// Client items.
    pub client_items: Vec<Vec<u8>>,
    /// Server items.
    pub server_items: Arc<ItemSet>,
    /// Client RNG seed.
    pub client_seed: u64,
    /// Server RNG seed.
    pub server_seed: u64,
    /// How the vector's client splits the matrix into chunks.
    pub chunking: C,
    /// Indices of the client items in the intersection.
    pub matches: Vec<usize>,
    /// SHA-256 of every message of the transcript, in order.
    pub sha256: Vec<String>,
}

/// Parses a transcript vector; `chunking` reads the protocol's chunking field.
fn transcript<C>(json: &str, chunking: impl FnOnce(&serde_json::Value) -> C) -> Transcript<C> {
    let v: serde_json::Value = serde_json::from_str(json).expect("json");
    Transcript {
        client_items: strings(&v["client_items"]),
        server_items: Arc::new(ItemSet::new(strings(&v["server_items"]))),
        client_seed: v["client_seed"].as_u64().expect("seed"),
        server_seed: v["server_seed"].as_u64().expect("seed"),
        chunking: chunking(&v),
        matches: indices(&v["match_indices"]),
        sha256: v["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .map(|m| m["sha256"].as_str().expect("sha").to_string())
            .collect(),
    }
}

/// OT-PSI's chunking: matrix rows per chunk.
#[derive(Debug, Clone, Copy)]
pub struct ChunkRows(pub usize);

/// The OT-PSI fixture.
pub type Ot = Transcript<ChunkRows>;

impl Ot {
    /// Client configuration (one thread).
    pub fn client_config(&self) -> OtConfig {
        OtConfig::new(Threads::ONE).with_chunk_rows(self.chunking.0)
    }

    /// Server configuration: one thread, at most 1024 client items (the fuzzer may ask for
    /// any count up to that; a real server pins the session's count).
    pub fn server_config(&self) -> OtConfig {
        OtConfig::new(Threads::ONE)
            .with_chunk_rows(self.chunking.0)
            .with_max_client_items(1024)
    }
}

/// The OT-PSI fixture, built on first use.
pub fn ot() -> &'static Ot {
    static OT: OnceLock<Ot> = OnceLock::new();
    OT.get_or_init(|| {
        transcript(OT_TRANSCRIPT, |v| {
            ChunkRows(v["chunk_rows"].as_u64().expect("rows") as usize)
        })
    })
}

/// Length of a full OPRF output.
pub const OUTPUT: usize = OUTPUT_LEN;

/// psi-client against a fake server: a [`psi_client::Transport`] that answers every
/// request of a `Client::match_items` run like an honest server over the fixtures (DH-PSI
/// key and set, OT-PSI session, label store), then lets the fuzzer change each answer's
/// status, headers and body.
pub mod fake {
    use super::{Framed, Mutation, dh, ot, rng};
    use arbitrary::Arbitrary;
    use psi_client::{Method, Request, Response, Transport, TransportError};
    use psi_core::ot::OtServer;
    use psi_core::{Protocol, labels};
    use std::sync::Mutex;

    /// The session id the fake server hands out.
    pub const SESSION: &str = "0123456789abcdef0123456789abcdef";
    /// The encoded set's ETag.
    pub const ETAG: &str = "\"fuzz-set\"";

    /// How the fuzzer changes one answer.
    #[derive(Arbitrary, Debug, Clone)]
    pub struct Reply {
        /// `None`: the honest status; otherwise this one.
        pub status: Option<u16>,
        /// Headers added before the honest ones (looked up first).
        pub headers: Vec<(String, String)>,
        /// The body.
        pub body: Body,
    }

    /// A body.
    #[derive(Arbitrary, Debug, Clone)]
    pub enum Body {
        /// The honest body.
        Valid,
        /// The honest body, edited.
        Mutated(Mutation),
        /// Any bytes.
        Raw(Framed),
        /// A session answer with chosen fields (as JSON; other answers: the honest body).
        Session {
            /// Key epoch.
            epoch: u32,
            /// Registry size.
            registry_items: u64,
            /// Largest client set.
            max_client_items: u32,
            /// Largest request body.
            max_body_bytes: u64,
            /// Label bucket bits.
            label_bucket_bits: u8,
            /// Protocol name.
            protocol: String,
            /// The ETag.
            etag: String,
        },
        /// A JSON error body with this code and message.
        Error {
            /// Code.
            code: String,
            /// Message.
            message: String,
        },
        /// No response at all.
        NoResponse {
            /// A timeout.
            timeout: bool,
        },
    }

    /// A fake server for one run of `protocol`; `replies[i]` changes the `i`-th answer.
    pub struct FakeServer {
        protocol: Protocol,
        replies: Vec<Reply>,
        state: Mutex<State>,
    }

    struct State {
        requests: usize,
        ot: Option<OtServer>,
    }

    impl FakeServer {
        /// A fake server for a run of `protocol`.
        pub fn new(protocol: Protocol, replies: Vec<Reply>) -> Self {
            FakeServer {
                protocol,
                replies,
                state: Mutex::new(State {
                    requests: 0,
                    ot: None,
                }),
            }
        }

        /// Requests answered so far.
        pub fn requests(&self) -> usize {
            self.state.lock().expect("lock").requests
        }

        fn honest(&self, r: &Request, state: &mut State) -> (u16, Vec<(String, String)>, Vec<u8>) {
            let f = dh();
            let path = r.url.split_once("/v1/").map_or("", |(_, p)| p);
            let json = vec![("content-type".to_string(), psi_http::JSON.to_string())];
            let bin = vec![("content-type".to_string(), psi_http::BINARY.to_string())];
            let err = |status: u16, code: &str| {
                let body = format!(r#"{{"error":"{code}","message":"fake server"}}"#);
                (status, json.clone(), body.into_bytes())
            };
            let session = format!("sessions/{SESSION}");
            match (r.method, path) {
                (Method::Post, "sessions") => {
                    let created = psi_http::SessionCreated {
                        session_id: SESSION.into(),
                        protocol: self.protocol.api_name().into(),
                        epoch: f.epoch,
                        registry_items: f.label_items.len() as u64,
                        max_client_items: 1024,
                        max_body_bytes: 1 << 20,
                        encoded_set_etag: ETAG.into(),
                        label_bucket_bits: f.labels.bucket_bits(),
                        expires_in_secs: 300,
                        ends_on_completion: true,
                        label_lane_width: None,
                        health: None,
                        sync: None,
                    };
                    if self.protocol == Protocol::Ot {
                        state.ot = OtServer::new(
                            ot().server_items.clone(),
                            ot().server_config(),
                            &mut rng(ot().server_seed),
                        )
                        .ok();
                    }
                    let body = serde_json::to_vec(&created).expect("json");
                    (201, json.clone(), body)
                }
                (Method::Delete, p) if p == session => (204, vec![], vec![]),
                (Method::Get, "dh/encoded-set") => {
                    if r.header("if-none-match") == Some(ETAG) {
                        return (304, vec![("etag".into(), ETAG.into())], vec![]);
                    }
                    let mut h = bin.clone();
                    h.push(("etag".into(), ETAG.into()));
                    (200, h, f.set.to_bytes())
                }
                (Method::Post, p) if p.starts_with(&session) => {
                    let answer = match &p[session.len()..] {
                        "/dh/query" => f.server.handle_query(&r.body),
                        "/labels/query" => f.wide.handle_query(&r.body),
                        "/ot/round" => match state.ot.as_mut() {
                            Some(s) => s.handle(&r.body),
                            None => return err(404, "session_not_found"),
                        },
                        "/labels/fetch" => f.labels.answer_fetch(
                            &r.body,
                            labels::fetch_buckets(1024, f.labels.bucket_bits()),
                        ),
                        _ => return err(404, "not_found"),
                    };
                    match answer {
                        Ok(body) => (200, bin, body),
                        Err(_) => err(400, "bad_message"),
                    }
                }
                _ => err(404, "not_found"),
            }
        }
    }

    impl Transport for FakeServer {
        fn send(&self, r: Request) -> Result<Response, TransportError> {
            let mut state = self.state.lock().expect("lock");
            let i = state.requests;
            state.requests += 1;
            let (status, headers, body) = self.honest(&r, &mut state);
            let Some(reply) = self.replies.get(i) else {
                return Ok(Response {
                    status,
                    headers,
                    body,
                });
            };
            let body = match &reply.body {
                Body::Valid => body,
                Body::Mutated(m) => m.apply(&body, Some(self.protocol)),
                Body::Raw(f) => f.message(self.protocol),
                Body::Session {
                    epoch,
                    registry_items,
                    max_client_items,
                    max_body_bytes,
                    label_bucket_bits,
                    protocol,
                    etag,
                } if r.method == Method::Post && r.url.ends_with("/v1/sessions") => {
                    let protocol = if protocol.is_empty() {
                        self.protocol.api_name().to_string()
                    } else {
                        protocol.clone()
                    };
                    serde_json::to_vec(&psi_http::SessionCreated {
                        session_id: SESSION.into(),
                        protocol,
                        epoch: *epoch,
                        registry_items: *registry_items,
                        max_client_items: *max_client_items,
                        max_body_bytes: *max_body_bytes,
                        encoded_set_etag: etag.clone(),
                        label_bucket_bits: *label_bucket_bits,
                        expires_in_secs: 300,
                        ends_on_completion: true,
                        label_lane_width: None,
                        health: None,
                        sync: None,
                    })
                    .expect("json")
                }
                Body::Session { .. } => body,
                Body::Error { code, message } => {
                    serde_json::to_vec(&serde_json::json!({ "error": code, "message": message }))
                        .expect("json")
                }
                Body::NoResponse { timeout } => {
                    return Err(if *timeout {
                        TransportError::timed_out("fuzzed: no response")
                    } else {
                        TransportError::failed("fuzzed: no response")
                    });
                }
            };
            let mut all = reply.headers.clone();
            all.extend(headers);
            Ok(Response {
                status: reply.status.unwrap_or(status),
                headers: all,
                body,
            })
        }
    }
}

/// The CM20-PSI transcript vector (`tests/vectors/cm20-psi-transcript.json`), compiled in.
pub const CM20_TRANSCRIPT: &str = include_str!("../../../tests/vectors/cm20-psi-transcript.json");

/// CM20-PSI's chunking: the client's request limit in bytes (several chunks).
#[derive(Debug, Clone, Copy)]
pub struct RequestBytes(pub u64);

/// The CM20-PSI fixture.
pub type Cm20 = Transcript<RequestBytes>;

impl Cm20 {
    /// Client configuration: one thread, the vector's chunking.
    pub fn client_config(&self) -> psi_core::cm20::Cm20Config {
        psi_core::cm20::Cm20Config::new(Threads::ONE).with_max_request_bytes(self.chunking.0)
    }

    /// Server configuration: one thread, at most 1024 client items.
    pub fn server_config(&self) -> psi_core::cm20::Cm20Config {
        psi_core::cm20::Cm20Config::new(Threads::ONE).with_max_client_items(1024)
    }
}

/// The CM20-PSI label-lane vector (`tests/vectors/cm20-psi-lanes-transcript.json`): the
/// same sets, seeds and chunking as [`CM20_TRANSCRIPT`], suite `0x02`, compiled in.
pub const CM20_LANES_TRANSCRIPT: &str =
    include_str!("../../../tests/vectors/cm20-psi-lanes-transcript.json");

impl Cm20 {
    /// The lane vector's labels of the server's items, in lane form (`Λ = 4`).
    pub fn lane_labels(&self) -> Arc<psi_core::lanes::LaneLabels> {
        static LABELS: OnceLock<Arc<psi_core::lanes::LaneLabels>> = OnceLock::new();
        LABELS
            .get_or_init(|| {
                let v: serde_json::Value =
                    serde_json::from_str(CM20_LANES_TRANSCRIPT).expect("json");
                let by_item: std::collections::HashMap<Vec<u8>, Option<String>> =
                    strings(&v["server_items"])
                        .into_iter()
                        .zip(v["server_labels"].as_array().expect("labels"))
                        .map(|(item, l)| (item, l.as_str().map(str::to_string)))
                        .collect();
                let labels = psi_core::lanes::LaneLabels::new(
                    self.server_items
                        .items()
                        .iter()
                        .map(|it| by_item[it].clone().map(String::into_bytes)),
                )
                .expect("short labels");
                Arc::new(labels)
            })
            .clone()
    }

    /// The lane vector's labels of the matches, in match order.
    pub fn match_labels(&self) -> Vec<Option<Vec<u8>>> {
        let v: serde_json::Value = serde_json::from_str(CM20_LANES_TRANSCRIPT).expect("json");
        v["match_labels"]
            .as_array()
            .expect("labels")
            .iter()
            .map(|l| l.as_str().map(|s| s.as_bytes().to_vec()))
            .collect()
    }
}

/// The CM20-PSI fixture, built on first use.
pub fn cm20() -> &'static Cm20 {
    static CM20: OnceLock<Cm20> = OnceLock::new();
    CM20.get_or_init(|| {
        transcript(CM20_TRANSCRIPT, |v| {
            RequestBytes(v["max_request_bytes"].as_u64().expect("bytes"))
        })
    })
}

/// The GBF-PSI transcript vector (`tests/vectors/gbf-psi-transcript.json`), compiled in.
pub const GBF_TRANSCRIPT: &str = include_str!("../../../tests/vectors/gbf-psi-transcript.json");

/// GBF-PSI's chunking: the client's request limit in bytes (several chunks).
#[derive(Debug, Clone, Copy)]
pub struct GbfRequestBytes(pub u64);

/// The GBF-PSI fixture.
pub type Gbf = Transcript<GbfRequestBytes>;

impl Gbf {
    /// Client configuration: one thread, the vector's chunking.
    pub fn client_config(&self) -> psi_core::gbf::GbfConfig {
        psi_core::gbf::GbfConfig::new(Threads::ONE).with_max_request_bytes(self.chunking.0)
    }

    /// Server configuration: one thread, at most 1024 client items.
    pub fn server_config(&self) -> psi_core::gbf::GbfConfig {
        psi_core::gbf::GbfConfig::new(Threads::ONE).with_max_client_items(1024)
    }
}

/// The GBF-PSI fixture, built on first use.
pub fn gbf() -> &'static Gbf {
    static GBF: OnceLock<Gbf> = OnceLock::new();
    GBF.get_or_init(|| {
        transcript(GBF_TRANSCRIPT, |v| {
            GbfRequestBytes(v["max_request_bytes"].as_u64().expect("bytes"))
        })
    })
}

/// The body of the round protocols' state-machine targets (`cm20`, `gbf`): a sequence of
/// steps, each sent to `server` (the honest client's next request, an edited one, any
/// message, or a repeat); the server's answers go to the honest client, and every fuzzed
/// message is also given to a second client waiting for its setup (`start` makes both).
/// With no steps the run must finish with `matches`.
pub fn round_steps<C: psi_core::chunked::ChunkedClient, S: psi_core::chunked::ChunkedServer>(
    steps: &[Send],
    protocol: Protocol,
    start: impl Fn() -> (C, Vec<u8>),
    mut server: S,
    matches: &[usize],
) -> Option<psi_core::MatchOutput> {
    use psi_core::chunked::ClientStep;
    let (mut client, mut request) = start();
    let (mut bystander, _) = start();
    let mut previous = Vec::new();
    let mut output = None;
    let honest_tail = std::iter::repeat_n(Send::Valid, 64);
    for s in steps.iter().take(8).cloned().chain(honest_tail) {
        if server.is_finished() || output.is_some() {
            break;
        }
        let msg = s.bytes(&request, &previous, protocol);
        let _ = bystander.handle(&msg);
        if let Ok(response) = server.handle(&msg) {
            let _ = bystander.handle(&response);
            match client.handle(&response) {
                Ok(ClientStep::Send(next)) => request = next,
                Ok(ClientStep::Done(out)) => output = Some(out),
                Err(_) => {}
            }
        }
        previous = msg;
    }
    if steps.is_empty() {
        let out = output.expect("honest run finishes");
        let got: Vec<usize> = out.matches.iter().map(|m| m.index).collect();
        assert_eq!(got, matches, "transcript matches");
        return Some(out);
    }
    None
}

/// The group PSI transcript vector (`tests/vectors/group-psi-transcript.json`), compiled in.
pub const MPSI_TRANSCRIPT: &str = include_str!("../../../tests/vectors/group-psi-transcript.json");

/// The group PSI fixture (t = 3): the vector's items, seeds, chunking and matches.
pub struct Mpsi {
    /// The leader's items.
    pub leader_items: Vec<Vec<u8>>,
    /// Each member's items, members 1, 2, ... in order.
    pub member_items: Vec<Vec<Vec<u8>>>,
    /// The leader's RNG seed.
    pub leader_seed: u64,
    /// The members' RNG seeds.
    pub member_seeds: Vec<u64>,
    /// The leader's matrix-chunk limit in bytes.
    pub max_chunk_bytes: u64,
    /// Indices of the leader items every member holds.
    pub matches: Vec<usize>,
}

impl Mpsi {
    /// Configuration of every party: one thread, the vector's chunking, at most 1024
    /// items per member (a fuzzed hello may not make the leader build a huge filter).
    pub fn config(&self) -> psi_core::mpsi::MpsiConfig {
        psi_core::mpsi::MpsiConfig::new(Threads::ONE)
            .with_max_chunk_bytes(self.max_chunk_bytes)
            .with_max_member_items(1024)
    }
}

/// The group PSI fixture, built on first use.
pub fn mpsi() -> &'static Mpsi {
    static MPSI: OnceLock<Mpsi> = OnceLock::new();
    MPSI.get_or_init(|| {
        let v: serde_json::Value = serde_json::from_str(MPSI_TRANSCRIPT).expect("json");
        Mpsi {
            leader_items: strings(&v["leader_items"]),
            member_items: v["member_items"]
                .as_array()
                .expect("members")
                .iter()
                .map(strings)
                .collect(),
            leader_seed: v["leader_seed"].as_u64().expect("seed"),
            member_seeds: v["member_seeds"]
                .as_array()
                .expect("seeds")
                .iter()
                .map(|s| s.as_u64().expect("seed"))
                .collect(),
            max_chunk_bytes: v["max_chunk_bytes"].as_u64().expect("bytes"),
            matches: indices(&v["match_indices"]),
        }
    })
}
