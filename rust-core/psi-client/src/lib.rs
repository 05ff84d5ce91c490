//! # psi-client
//!
//! The Rust client driver of the PSI SDK: runs psi-core's client state machines against
//! a `psi-server` over HTTP (`docs/api.md`). The same driver is meant for the mobile
//! bindings, which will plug in their platform HTTP stack through [`Transport`].
//!
//! ```no_run
//! use psi_client::{Client, ClientConfig, Protocol};
//! let client = Client::new("http://127.0.0.1:8080", ClientConfig::default());
//! let report = client.match_items(vec![b"+14155550123".to_vec()], Protocol::Dh, &mut |_| {})?;
//! for m in &report.matches {
//!     println!("#{} label {:?}", m.index, m.label);
//! }
//! # Ok::<(), psi_client::ClientError>(())
//! ```
//!
//! One run: create a session (naming the protocol and the set size), run the protocol
//! (DH-PSI: one query plus the encoded registry, cached per epoch by ETag; OT-PSI: one
//! POST per round), then fetch the labels of the matches (a DH-PSI OPRF query over the
//! matched items only, whose outputs derive the keys that decrypt the labels).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod error;
mod transport;

pub use error::ClientError;
pub use transport::{HttpTransport, Method, Request, Response, Transport, TransportError};

use psi_api::{ErrorBody, SessionCreated, labels, paths};
use psi_core::dh::{DhClient, Elements, EncodedSet, message_type};
use psi_core::ot::{ClientStep, OtClient, OtConfig};
use psi_core::{ItemSet, Threads};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

/// Which protocol to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Protocol {
    /// DH-PSI: fewest bytes; the encoded registry is cached per epoch.
    Dh,
    /// OT-PSI (KKRT16): less computation, more bytes.
    Ot,
}

impl Protocol {
    /// The API name (`dh-psi`, `ot-psi`).
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Dh => psi_api::protocol::DH,
            Protocol::Ot => psi_api::protocol::OT,
        }
    }
}

/// Client settings.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClientConfig {
    /// Bearer token, if the server requires one.
    pub token: Option<String>,
    /// Worker threads for blinding and unblinding.
    pub threads: Threads,
    /// Per-request timeout (the default transport's overall request timeout).
    pub timeout: Duration,
    /// Largest response body accepted (default 256 MiB: a 10^6-entry encoded set is
    /// about 6.5 MB; OT-PSI outputs are `3 n_s L` bytes).
    pub max_response_bytes: u64,
    /// Fetch the labels of matches (default true).
    pub fetch_labels: bool,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            token: None,
            threads: Threads::available(),
            timeout: Duration::from_secs(60),
            max_response_bytes: 256 << 20,
            fetch_labels: true,
        }
    }
}

impl ClientConfig {
    /// Sets the bearer token.
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }
    /// Sets the worker threads.
    pub fn with_threads(mut self, threads: Threads) -> Self {
        self.threads = threads;
        self
    }
    /// Sets the per-request timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
    /// Whether to fetch labels.
    pub fn with_labels(mut self, fetch: bool) -> Self {
        self.fetch_labels = fetch;
        self
    }
}

/// A cached encoded registry.
#[derive(Clone)]
pub struct CachedSet {
    /// Key epoch.
    pub epoch: u32,
    /// The server's ETag for it.
    pub etag: String,
    /// The ENCODED_SET message.
    pub bytes: Vec<u8>,
}

impl std::fmt::Debug for CachedSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedSet")
            .field("epoch", &self.epoch)
            .field("etag", &self.etag)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

/// One matched item.
#[derive(Clone, PartialEq, Eq)]
pub struct Matched {
    /// Index in the list passed to [`Client::match_items`] (first occurrence).
    pub index: usize,
    /// The item.
    pub item: Vec<u8>,
    /// Its label in the registry, if it has one (and labels were fetched).
    pub label: Option<String>,
}

impl std::fmt::Debug for Matched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Matched")
            .field("index", &self.index)
            .field("has_label", &self.label.is_some())
            .finish_non_exhaustive()
    }
}

/// Traffic and time of a run, measured by the driver.
#[derive(Debug, Clone, Default)]
pub struct RunStats {
    /// HTTP requests made.
    pub requests: usize,
    /// Request bytes (bodies only).
    pub bytes_sent: u64,
    /// Response bytes (bodies only).
    pub bytes_received: u64,
    /// Bytes of protocol messages sent (DH query or OT requests).
    pub protocol_bytes_sent: u64,
    /// Bytes of protocol messages received (DH evaluation or OT responses).
    pub protocol_bytes_received: u64,
    /// Bytes of the encoded registry (0 if it came from the cache).
    pub set_bytes_downloaded: u64,
    /// Size of the encoded registry used (DH-PSI).
    pub set_bytes: u64,
    /// True if the encoded registry came from the cache.
    pub set_from_cache: bool,
    /// Truncation bits of the encoded registry (DH-PSI).
    pub truncation_bits: u8,
    /// Bytes of the label query, evaluation and fetch (both ways).
    pub label_bytes: u64,
    /// Wall time per phase, in order.
    pub phases: Vec<(&'static str, Duration)>,
    /// Server compute time reported in `Server-Timing` headers.
    pub server_time: Duration,
}

impl RunStats {
    fn phase(&mut self, name: &'static str, d: Duration) {
        match self.phases.iter_mut().find(|(n, _)| *n == name) {
            Some((_, t)) => *t += d,
            None => self.phases.push((name, d)),
        }
    }
}

/// The result of a run.
#[derive(Debug, Clone)]
pub struct MatchReport {
    /// Matches in the order of the caller's list.
    pub matches: Vec<Matched>,
    /// Distinct items queried.
    pub client_items: usize,
    /// Entries dropped as repeats.
    pub duplicates: usize,
    /// Entries in the registry.
    pub server_items: u64,
    /// Key epoch used.
    pub epoch: u32,
    /// Protocol run.
    pub protocol: Protocol,
    /// Traffic and timings.
    pub stats: RunStats,
    /// Why labels are missing, if the label step failed after matching succeeded (the
    /// matches are still returned, with `label: None`). Log-safe: no contact data.
    pub label_error: Option<String>,
}

/// Progress of a run, for progress displays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Progress {
    /// Creating the session.
    Session,
    /// Blinding the items.
    Blinding,
    /// Sending the query / an OT round (`round` from 1).
    Round(usize),
    /// Downloading the encoded registry.
    Downloading,
    /// Matching.
    Matching,
    /// Fetching labels.
    Labels,
}

/// The client driver.
pub struct Client {
    transport: Box<dyn Transport>,
    config: ClientConfig,
    cache: Mutex<Option<CachedSet>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("config.threads", &self.config.threads)
            .finish_non_exhaustive()
    }
}

type Result<T, E = ClientError> = std::result::Result<T, E>;

impl Client {
    /// A client for the server at `base_url` over the default [`HttpTransport`].
    pub fn new(base_url: &str, config: ClientConfig) -> Client {
        let t = HttpTransport::new(base_url, config.timeout, config.max_response_bytes);
        Client::with_transport(Box::new(t), config)
    }

    /// A client over any transport (e.g. the platform HTTP stack).
    pub fn with_transport(transport: Box<dyn Transport>, config: ClientConfig) -> Client {
        Client {
            transport,
            config,
            cache: Mutex::new(None),
        }
    }

    /// The cached encoded registry, if any (persist it with [`Client::set_cache`]).
    pub fn cached_set(&self) -> Option<CachedSet> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Seeds the cache (e.g. from disk).
    pub fn set_cache(&self, set: Option<CachedSet>) {
        *self.cache.lock().unwrap_or_else(|e| e.into_inner()) = set;
    }

    fn send(
        &self,
        stats: &mut RunStats,
        method: Method,
        path: &str,
        ctype: Option<&str>,
        body: &[u8],
        extra: Vec<(&'static str, String)>,
    ) -> Result<Response> {
        let mut headers = extra;
        if let Some(t) = &self.config.token {
            headers.push(("authorization", format!("Bearer {t}")));
        }
        if let Some(c) = ctype {
            headers.push(("content-type", c.to_string()));
        }
        let resp = self.transport.send(Request {
            method,
            path,
            headers,
            body,
        })?;
        stats.requests += 1;
        stats.bytes_sent += body.len() as u64;
        stats.bytes_received += resp.body.len() as u64;
        if let Some(ms) = resp
            .header("server-timing")
            .and_then(|v| v.split("dur=").nth(1))
            .and_then(|v| v.trim().parse::<f64>().ok())
        {
            stats.server_time += Duration::from_secs_f64(ms.max(0.0) / 1e3);
        }
        if resp.status >= 400 {
            let retry_after = resp
                .header("retry-after")
                .and_then(|v| v.trim().parse().ok());
            let (code, message) = match serde_json::from_slice::<ErrorBody>(&resp.body) {
                Ok(e) => (e.error, e.message),
                Err(_) => ("unknown".to_string(), "non-JSON error response".to_string()),
            };
            return Err(ClientError::Http {
                status: resp.status,
                code,
                message,
                retry_after,
            });
        }
        Ok(resp)
    }

    fn post_bin(&self, stats: &mut RunStats, path: &str, body: &[u8]) -> Result<Vec<u8>> {
        let r = self.send(
            stats,
            Method::Post,
            path,
            Some("application/octet-stream"),
            body,
            vec![],
        )?;
        Ok(r.body)
    }

    /// `GET /v1/health`.
    pub fn health(&self) -> Result<psi_api::Health> {
        let r = self.send(
            &mut RunStats::default(),
            Method::Get,
            paths::HEALTH,
            None,
            &[],
            vec![],
        )?;
        serde_json::from_slice(&r.body).map_err(|_| ClientError::BadResponse("health body".into()))
    }

    /// Matches `items` (normalized identifiers, see psi-contacts) against the server's
    /// registry with `protocol`, fetching labels of the matches if configured.
    pub fn match_items(
        &self,
        items: Vec<Vec<u8>>,
        protocol: Protocol,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<MatchReport> {
        let set = ItemSet::new(items);
        if set.is_empty() {
            return Err(ClientError::BadInput("no items to match".into()));
        }
        if set
            .items()
            .iter()
            .any(|i| i.len() > psi_core::oprf::MAX_INPUT_LEN)
        {
            return Err(ClientError::BadInput(
                "an item is longer than 65,535 bytes".into(),
            ));
        }
        let mut stats = RunStats::default();
        let mut rng = os_rng()?;
        progress(Progress::Session);
        let t = Instant::now();
        let body = serde_json::to_vec(&psi_api::CreateSession {
            protocol: protocol.name().to_string(),
            client_items: set.len() as u32,
        })
        .map_err(|_| ClientError::BadInput("session request".into()))?;
        let r = self.send(
            &mut stats,
            Method::Post,
            paths::SESSIONS,
            Some("application/json"),
            &body,
            vec![],
        )?;
        let session: SessionCreated = serde_json::from_slice(&r.body)
            .map_err(|_| ClientError::BadResponse("session body".into()))?;
        if set.len() > session.max_client_items as usize {
            return Err(ClientError::BadInput(format!(
                "{} items, the server accepts at most {}",
                set.len(),
                session.max_client_items
            )));
        }
        stats.phase("create session", t.elapsed());
        let result = self.run(&session, set, protocol, &mut stats, &mut rng, progress);
        // Free the server's slot either way; an error here changes nothing for the caller.
        let _ = self.send(
            &mut RunStats::default(),
            Method::Delete,
            &paths::session(&session.session_id),
            None,
            &[],
            vec![],
        );
        let (matches, client_items, duplicates, label_error) = result?;
        Ok(MatchReport {
            label_error,
            matches,
            client_items,
            duplicates,
            server_items: session.registry_items,
            epoch: session.epoch,
            protocol,
            stats,
        })
    }

    #[allow(clippy::type_complexity)]
    fn run(
        &self,
        session: &SessionCreated,
        set: ItemSet,
        protocol: Protocol,
        stats: &mut RunStats,
        rng: &mut ChaCha20Rng,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(Vec<Matched>, usize, usize, Option<String>)> {
        let threads = self.config.threads;
        let (mut matches, client_items, duplicates) = match protocol {
            Protocol::Dh => {
                progress(Progress::Blinding);
                let t = Instant::now();
                let (mut client, query) = DhClient::start(set, session.epoch, threads, rng)?;
                stats.phase("client blind", t.elapsed());
                progress(Progress::Round(1));
                let t = Instant::now();
                let evaluation =
                    self.post_bin(stats, &paths::dh_query(&session.session_id), &query)?;
                stats.phase("query round trip", t.elapsed());
                stats.protocol_bytes_sent += query.len() as u64;
                stats.protocol_bytes_received += evaluation.len() as u64;
                let t = Instant::now();
                client.handle(&evaluation)?;
                stats.phase("client unblind + finalize", t.elapsed());
                progress(Progress::Downloading);
                let t = Instant::now();
                let encoded = self.encoded_set(session, stats)?;
                stats.phase("encoded registry (download or cache)", t.elapsed());
                progress(Progress::Matching);
                let t = Instant::now();
                client.use_encoded_set(encoded)?;
                let out = client.finish()?;
                stats.phase("client match", t.elapsed());
                let m: Vec<Matched> = out
                    .matches
                    .into_iter()
                    .map(|m| Matched {
                        index: m.index,
                        item: m.item,
                        label: None,
                    })
                    .collect();
                (m, out.client_items, out.duplicates)
            }
            Protocol::Ot => {
                // Largest chunk that fits the server's body limit: 64 bytes per row.
                let rows = ((session.max_body_bytes.saturating_sub(64) / 64) as usize / 128 * 128)
                    .clamp(128, psi_core::ot::DEFAULT_CHUNK_ROWS);
                let config = OtConfig::new(threads).with_chunk_rows(rows);
                let t = Instant::now();
                progress(Progress::Blinding);
                let (mut client, mut request) = OtClient::start(set, config, rng)?;
                stats.phase("client start", t.elapsed());
                let mut round = 0;
                let out = loop {
                    round += 1;
                    progress(Progress::Round(round));
                    let t = Instant::now();
                    let response =
                        self.post_bin(stats, &paths::ot_round(&session.session_id), &request)?;
                    stats.phase("round trips", t.elapsed());
                    stats.protocol_bytes_sent += request.len() as u64;
                    stats.protocol_bytes_received += response.len() as u64;
                    let t = Instant::now();
                    let step = client.handle(&response)?;
                    stats.phase("client rounds", t.elapsed());
                    match step {
                        ClientStep::Send(next) => request = next,
                        ClientStep::Done(out) => break out,
                        #[allow(unreachable_patterns)]
                        _ => return Err(ClientError::BadResponse("unknown OT step".into())),
                    }
                    if round > 1 << 16 {
                        return Err(ClientError::BadResponse("too many OT rounds".into()));
                    }
                };
                let m: Vec<Matched> = out
                    .matches
                    .into_iter()
                    .map(|m| Matched {
                        index: m.index,
                        item: m.item,
                        label: None,
                    })
                    .collect();
                (m, out.client_items, out.duplicates)
            }
        };
        let mut label_error = None;
        if self.config.fetch_labels && !matches.is_empty() {
            progress(Progress::Labels);
            let t = Instant::now();
            // The matches are computed and paid for: a failing label step (say, the hourly
            // budget ran out) costs the labels, not the result.
            if let Err(e) = self.fetch_labels(session, &mut matches, stats, rng) {
                for m in &mut matches {
                    m.label = None;
                }
                label_error = Some(e.to_string());
            }
            stats.phase("labels", t.elapsed());
        }
        Ok((matches, client_items, duplicates, label_error))
    }

    /// The encoded registry of the session's epoch: from the cache if its ETag is the
    /// session's, otherwise downloaded (conditionally, so an unchanged set costs a 304).
    fn encoded_set(&self, session: &SessionCreated, stats: &mut RunStats) -> Result<EncodedSet> {
        let cached = self.cached_set();
        let bytes = match cached {
            Some(c) if c.etag == session.encoded_set_etag && c.epoch == session.epoch => {
                stats.set_from_cache = true;
                c.bytes
            }
            cached => {
                let mut extra = vec![];
                if let Some(c) = &cached {
                    extra.push(("if-none-match", c.etag.clone()));
                }
                let r = self.send(stats, Method::Get, paths::DH_ENCODED_SET, None, &[], extra)?;
                let etag = r.header("etag").unwrap_or("").to_string();
                if r.status == 304 {
                    stats.set_from_cache = true;
                    cached.map(|c| c.bytes).ok_or_else(|| {
                        ClientError::BadResponse("304 for a set not in the cache".into())
                    })?
                } else {
                    stats.set_bytes_downloaded = r.body.len() as u64;
                    let set = EncodedSet::from_bytes(&r.body)?;
                    self.set_cache(Some(CachedSet {
                        epoch: set.epoch,
                        etag,
                        bytes: r.body.clone(),
                    }));
                    r.body
                }
            }
        };
        let set = EncodedSet::from_bytes(&bytes)?;
        stats.set_bytes = bytes.len() as u64;
        stats.truncation_bits = set.truncation_bits;
        Ok(set)
    }

    /// Labels: an OPRF query over the matched items only gives their full outputs;
    /// each output's tag names a bucket, and its key opens the record in that bucket.
    fn fetch_labels(
        &self,
        session: &SessionCreated,
        matches: &mut [Matched],
        stats: &mut RunStats,
        rng: &mut ChaCha20Rng,
    ) -> Result<()> {
        let items: Vec<Vec<u8>> = matches.iter().map(|m| m.item.clone()).collect();
        let blinds = psi_core::oprf::random_blinds(items.len(), rng);
        let threads = self.config.threads;
        let blinded = threads.install(|| psi_core::oprf::blind_batch(&items, &blinds))??;
        let query = Elements {
            epoch: session.epoch,
            elements: blinded,
        }
        .to_bytes(message_type::QUERY);
        let evaluation = self.post_bin(stats, &paths::label_query(&session.session_id), &query)?;
        let evaluated = parse_evaluation(&evaluation, session.epoch, items.len())?;
        let outputs = Zeroizing::new(
            threads
                .install(|| psi_core::oprf::finalize_batch(&items, &blinds, &evaluated))?
                .map_err(|index| psi_core::DecodeError::InvalidElement { index })?,
        );
        let tags: Vec<[u8; labels::TAG_LEN]> = outputs.iter().map(labels::tag).collect();
        let mut buckets: Vec<u32> = tags
            .iter()
            .map(|t| labels::bucket(t, session.label_bucket_bits))
            .collect();
        buckets.sort_unstable();
        buckets.dedup();
        let fetch = labels::encode_fetch(&buckets);
        let response = self.post_bin(stats, &paths::label_fetch(&session.session_id), &fetch)?;
        stats.label_bytes += (query.len() + evaluation.len() + fetch.len() + response.len()) as u64;
        let sections = labels::split_fetch_response(&response)
            .ok_or_else(|| ClientError::BadResponse("label response framing".into()))?;
        let mut by_tag: HashMap<[u8; labels::TAG_LEN], labels::Record<'_>> = HashMap::new();
        for (_, data) in sections {
            for rec in labels::parse_records(data)
                .ok_or_else(|| ClientError::BadResponse("label record framing".into()))?
            {
                by_tag.insert(rec.tag, rec);
            }
        }
        for ((m, tag), output) in matches.iter_mut().zip(&tags).zip(outputs.iter()) {
            if let Some(rec) = by_tag.get(tag) {
                m.label = labels::open(output, rec);
            }
        }
        Ok(())
    }
}

fn parse_evaluation(msg: &[u8], epoch: u32, n: usize) -> Result<Vec<[u8; 32]>> {
    let evaluation = Elements::from_bytes(msg, message_type::EVALUATION)?;
    if evaluation.epoch != epoch {
        return Err(psi_core::Error::EpochMismatch {
            expected: epoch,
            found: evaluation.epoch,
        }
        .into());
    }
    if evaluation.elements.len() != n {
        return Err(psi_core::Error::CountMismatch {
            expected: n as u64,
            found: evaluation.elements.len() as u64,
        }
        .into());
    }
    Ok(evaluation.elements)
}

fn os_rng() -> Result<ChaCha20Rng> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed)
        .map_err(|e| ClientError::BadInput(format!("no OS randomness: {e}")))?;
    Ok(ChaCha20Rng::from_seed(seed))
}
