//! DH-PSI on the RFC 9497 OPRF (ristretto255-SHA512).
//!
//! The client (an app) holds `n_c` items and learns which are in the server's `n_s`
//! items; the server learns `n_c` and nothing else (semi-honest model; see the Safety
//! section of the README for what a malicious client can do).
//!
//! 1. Client: blinds each item, `B_i = r_i * HashToGroup(x_i)`, and sends a
//!    [`message_type::QUERY`] with the key epoch it expects.
//! 2. Server: answers with `skS * B_i` in the same order ([`message_type::EVALUATION`]).
//! 3. Server: publishes its [`EncodedSet`]: the first `L` bits of
//!    `Finalize(y, skS * HashToGroup(y))` for every `y` of its set, sorted and
//!    Golomb-Rice coded. It depends only on the key and the set, so it is computed
//!    once per key epoch and cached by clients.
//! 4. Client: unblinds and finalizes, truncates to `L` bits and looks each value up in
//!    the encoded set.
//!
//! `L = 40 + ceil(log2 n_c) + ceil(log2 n_s)`: a client value matches a server value
//! by accident with probability `2^-L` per pair, so the chance of any false match in a
//! run is at most `n_c * n_s * 2^-L <= 2^-40`. A cached set is built for clients up to
//! `max_client_items`, and a client refuses a set whose `L` is too short for its size.
//!
//! Both sides are sans-IO: [`DhServer`] turns query bytes into evaluation bytes;
//! [`DhClient`] produces the query and consumes the evaluation and the encoded set.

pub(crate) mod cost;
pub mod limits;
pub(crate) mod messages;
#[cfg(test)]
mod transcript_tests;

pub use messages::{Elements, EncodedSet, message_type};

use crate::error::{DecodeError, Error, Result};
use crate::items::ItemSet;
use crate::oprf::{self, MAX_INPUT_LEN, OUTPUT_LEN, OprfKey};
use crate::parallel::Threads;
use crate::protocol::Protocol;
use crate::wire;
use curve25519_dalek::scalar::Scalar;
use rayon::prelude::*;
use zeroize::Zeroizing;

use limits::{MAX_CLIENT_ITEMS, MAX_SERVER_ITEMS};

/// `L`, the truncation length in bits: the false-match rule of
/// [`crate::protocol::false_match_bits`], `40 + ceil(log2 n_c) + ceil(log2 n_s)`.
pub fn truncation_bits(client_items: u64, server_items: u64) -> u8 {
    // At most 40 + 64 + 64 bits for any u64 sizes; real sizes keep it far below 128.
    crate::protocol::false_match_bits(client_items, server_items).min(128) as u8
}

/// The first `l` bits of an OPRF output as a big-endian integer.
pub fn truncate(output: &[u8; OUTPUT_LEN], l: u8) -> u128 {
    debug_assert!((1..=128).contains(&l));
    let mut b = [0u8; 16];
    b.copy_from_slice(&output[..16]);
    u128::from_be_bytes(b) >> (128 - u32::from(l))
}

fn check_client_items(items: &ItemSet) -> Result<()> {
    if items.len() > MAX_CLIENT_ITEMS {
        return Err(Error::InputTooLarge {
            what: "client items",
            value: items.len() as u64,
            limit: MAX_CLIENT_ITEMS as u64,
        });
    }
    check_item_lengths(items)
}

fn check_item_lengths(items: &ItemSet) -> Result<()> {
    match items.items().iter().map(<[u8]>::len).max() {
        Some(len) if len > MAX_INPUT_LEN => Err(Error::InputTooLarge {
            what: "item length in bytes",
            value: len as u64,
            limit: MAX_INPUT_LEN as u64,
        }),
        _ => Ok(()),
    }
}

/// The server's key for one epoch. Rotating the key starts a new epoch; encoded sets
/// and queries name the epoch they belong to.
#[derive(Clone, Debug)]
pub struct ServerKey {
    key: OprfKey,
    epoch: u32,
}

impl ServerKey {
    /// A fresh random key for `epoch`.
    pub fn random<R: rand_core::CryptoRng + ?Sized>(epoch: u32, rng: &mut R) -> Self {
        ServerKey {
            key: OprfKey::random(rng),
            epoch,
        }
    }

    /// Wraps an existing OPRF key (e.g. from RFC 9497 DeriveKeyPair or storage).
    pub fn new(key: OprfKey, epoch: u32) -> Self {
        ServerKey { key, epoch }
    }

    /// The next epoch with a fresh key: every encoded set must be recomputed.
    pub fn rotate<R: rand_core::CryptoRng + ?Sized>(&self, rng: &mut R) -> Self {
        ServerKey::random(self.epoch.wrapping_add(1), rng)
    }

    /// The key epoch.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// The OPRF key.
    pub fn oprf_key(&self) -> &OprfKey {
        &self.key
    }
}

/// Server side of DH-PSI. Holds the key; stateless per query, so one value serves
/// every client concurrently.
#[derive(Debug, Clone)]
pub struct DhServer {
    key: ServerKey,
    max_client_items: usize,
    threads: Threads,
}

impl DhServer {
    /// A server for `key`, accepting queries of up to `max_client_items` (at most
    /// [`limits::MAX_CLIENT_ITEMS`]) and working on `threads` threads.
    pub fn new(key: ServerKey, max_client_items: usize, threads: Threads) -> Self {
        DhServer {
            key,
            max_client_items: max_client_items.min(MAX_CLIENT_ITEMS),
            threads,
        }
    }

    /// The key epoch in use.
    pub fn epoch(&self) -> u32 {
        self.key.epoch
    }

    /// The largest query accepted.
    pub fn max_client_items(&self) -> usize {
        self.max_client_items
    }

    /// The full OPRF outputs of the server's items, in `items` order. The expensive
    /// step (one hash-to-group and one scalar multiplication per item); a store can keep
    /// these and re-encode after adding or removing entries without recomputing.
    pub fn outputs(&self, items: &ItemSet) -> Result<Vec<[u8; OUTPUT_LEN]>> {
        check_item_lengths(items)?;
        self.threads
            .install(|| oprf::evaluate_batch(self.key.oprf_key(), &items.items()))
    }

    /// The truncation length for this server's sets of `server_items` items.
    pub fn truncation_bits(&self, server_items: usize) -> u8 {
        truncation_bits(self.max_client_items.max(1) as u64, server_items as u64)
    }

    /// Encodes the set from precomputed OPRF outputs (see [`DhServer::outputs`]).
    pub fn encode_outputs(&self, outputs: &[[u8; OUTPUT_LEN]]) -> Result<EncodedSet> {
        if outputs.len() > MAX_SERVER_ITEMS {
            return Err(Error::InputTooLarge {
                what: "server items",
                value: outputs.len() as u64,
                limit: MAX_SERVER_ITEMS as u64,
            });
        }
        let l = self.truncation_bits(outputs.len());
        let mut values: Vec<u128> = outputs.iter().map(|o| truncate(o, l)).collect();
        values.par_sort_unstable();
        let k = crate::golomb::best_rice_bits(&values, l);
        let data = crate::golomb::encode(&values, l, k);
        Ok(EncodedSet {
            epoch: self.key.epoch,
            element_count: values.len() as u32,
            max_client_items: self.max_client_items as u32,
            truncation_bits: l,
            rice_bits: k,
            data,
        })
    }

    /// Computes and encodes the server's set: the one-time work per key epoch.
    pub fn encode_set(&self, items: &ItemSet) -> Result<EncodedSet> {
        if items.len() > MAX_SERVER_ITEMS {
            return Err(Error::InputTooLarge {
                what: "server items",
                value: items.len() as u64,
                limit: MAX_SERVER_ITEMS as u64,
            });
        }
        // The full outputs are the server's PRF values of its registry: wiped after use.
        let outputs = Zeroizing::new(self.outputs(items)?);
        self.threads.install(|| self.encode_outputs(&outputs))?
    }

    /// Answers a query message with an evaluation message.
    pub fn handle_query(&self, msg: &[u8]) -> Result<Vec<u8>> {
        let frame = wire::parse_frame(msg, Protocol::Dh)?;
        match frame.message_type {
            message_type::QUERY => {}
            message_type::EVALUATION | message_type::ENCODED_SET => {
                return Err(Error::WrongPhase {
                    phase: "server awaiting query",
                    message: frame.message_type,
                });
            }
            t => return Err(DecodeError::UnknownMessageType(t).into()),
        }
        self.evaluate(&Elements::decode_body(frame.body)?)
    }

    /// Answers an already decoded query (a driver that must check the element count
    /// against its session first decodes with [`Elements::from_bytes`], checks
    /// [`Elements::len`], then calls this).
    pub fn evaluate(&self, query: &Elements) -> Result<Vec<u8>> {
        if query.epoch != self.key.epoch {
            return Err(Error::EpochMismatch {
                expected: self.key.epoch,
                found: query.epoch,
            });
        }
        if query.elements.len() > self.max_client_items {
            return Err(Error::InputTooLarge {
                what: "client items in query",
                value: query.elements.len() as u64,
                limit: self.max_client_items as u64,
            });
        }
        let evaluated = self
            .threads
            .install(|| oprf::blind_evaluate_batch(self.key.oprf_key(), &query.elements))?
            .map_err(|index| DecodeError::InvalidElement { index })?;
        Ok(Elements {
            epoch: self.key.epoch,
            elements: evaluated,
        }
        .encode(message_type::EVALUATION))
    }
}

pub use crate::output::{Match, MatchOutput, MatchedOutputs};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DhClientPhase {
    AwaitingEvaluation,
    Evaluated,
}

impl DhClientPhase {
    fn name(self) -> &'static str {
        match self {
            DhClientPhase::AwaitingEvaluation => "client awaiting evaluation",
            DhClientPhase::Evaluated => "client evaluated",
        }
    }
}

/// Client side of DH-PSI.
///
/// ```text
/// let (mut client, query) = DhClient::start(items, epoch, threads, &mut rng)?;
/// // send `query`, receive `evaluation`; get the encoded set (or use a cached one)
/// client.handle(&evaluation)?;
/// client.handle(&encoded_set_bytes)?;   // or client.use_encoded_set(cached)?
/// let output = client.finish()?;
/// ```
pub struct DhClient {
    items: ItemSet,
    blinds: Zeroizing<Vec<Scalar>>,
    epoch: u32,
    threads: Threads,
    phase: DhClientPhase,
    outputs: Zeroizing<Vec<[u8; OUTPUT_LEN]>>,
    set: Option<EncodedSet>,
}

impl std::fmt::Debug for DhClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DhClient")
            .field("items", &self.items)
            .field("epoch", &self.epoch)
            .field("phase", &self.phase)
            .field("has_set", &self.set.is_some())
            .finish_non_exhaustive()
    }
}

impl DhClient {
    /// Blinds the items with fresh blinds from `rng` and returns the query message for
    /// key epoch `epoch` (from the server's encoded set or its API). Blinds are always fresh:
    /// the API offers no way to choose or reuse them (that would link queries).
    ///
    /// ```compile_fail
    /// // Test-only, not part of the API:
    /// let _ = psi_core::dh::DhClient::start_with_blinds;
    /// ```
    pub fn start<R: rand_core::CryptoRng + ?Sized>(
        items: ItemSet,
        epoch: u32,
        threads: Threads,
        rng: &mut R,
    ) -> Result<(Self, Vec<u8>)> {
        check_client_items(&items)?;
        let blinds = oprf::random_blinds(items.len(), rng);
        Self::start_blinded(items, epoch, threads, blinds)
    }

    /// [`DhClient::start`] with caller-chosen blinds, for the reproducible transcript
    /// vector only: chosen or reused blinds link a client's queries, so this does not exist
    /// outside this crate's unit tests.
    #[cfg(test)]
    pub(crate) fn start_with_blinds(
        items: ItemSet,
        epoch: u32,
        threads: Threads,
        blinds: Zeroizing<Vec<Scalar>>,
    ) -> Result<(Self, Vec<u8>)> {
        Self::start_blinded(items, epoch, threads, blinds)
    }

    fn start_blinded(
        items: ItemSet,
        epoch: u32,
        threads: Threads,
        blinds: Zeroizing<Vec<Scalar>>,
    ) -> Result<(Self, Vec<u8>)> {
        check_client_items(&items)?;
        if blinds.len() != items.len() || blinds.contains(&Scalar::ZERO) {
            return Err(Error::CountMismatch {
                expected: items.len() as u64,
                found: blinds.len() as u64,
            });
        }
        let blinded = threads.install(|| oprf::blind_batch(&items.items(), &blinds))??;
        let query = Elements {
            epoch,
            elements: blinded,
        }
        .encode(message_type::QUERY);
        let client = DhClient {
            items,
            blinds,
            epoch,
            threads,
            phase: DhClientPhase::AwaitingEvaluation,
            outputs: Zeroizing::new(Vec::new()),
            set: None,
        };
        Ok((client, query))
    }

    /// Handles a message from the server: the evaluation or the encoded set, in either
    /// order.
    pub fn handle(&mut self, msg: &[u8]) -> Result<()> {
        let frame = wire::parse_frame(msg, Protocol::Dh)?;
        match frame.message_type {
            message_type::EVALUATION => self.handle_evaluation(frame.body),
            message_type::ENCODED_SET => self.use_encoded_set(EncodedSet::decode_body(frame.body)?),
            message_type::QUERY => Err(Error::WrongPhase {
                phase: self.phase.name(),
                message: message_type::QUERY,
            }),
            t => Err(DecodeError::UnknownMessageType(t).into()),
        }
    }

    fn handle_evaluation(&mut self, body: &[u8]) -> Result<()> {
        if self.phase != DhClientPhase::AwaitingEvaluation {
            return Err(Error::WrongPhase {
                phase: self.phase.name(),
                message: message_type::EVALUATION,
            });
        }
        let evaluation = Elements::decode_body(body)?;
        if evaluation.epoch != self.epoch {
            return Err(Error::EpochMismatch {
                expected: self.epoch,
                found: evaluation.epoch,
            });
        }
        if evaluation.elements.len() != self.items.len() {
            return Err(Error::CountMismatch {
                expected: self.items.len() as u64,
                found: evaluation.elements.len() as u64,
            });
        }
        let outputs = self
            .threads
            .install(|| {
                oprf::finalize_batch(&self.items.items(), &self.blinds, &evaluation.elements)
            })?
            .map_err(|index| DecodeError::InvalidElement { index })?;
        self.outputs = outputs;
        self.blinds = Zeroizing::new(Vec::new());
        self.phase = DhClientPhase::Evaluated;
        Ok(())
    }

    /// Uses an encoded set the app already holds (cached from an earlier run of the
    /// same epoch), or one received separately.
    pub fn use_encoded_set(&mut self, set: EncodedSet) -> Result<()> {
        if self.set.is_some() {
            return Err(Error::WrongPhase {
                phase: "client already has an encoded set",
                message: message_type::ENCODED_SET,
            });
        }
        if set.epoch != self.epoch {
            return Err(Error::EpochMismatch {
                expected: self.epoch,
                found: set.epoch,
            });
        }
        let needed = truncation_bits(self.items.len() as u64, u64::from(set.element_count));
        if set.truncation_bits < needed {
            return Err(Error::TruncationTooShort {
                bits: set.truncation_bits,
                needed,
                client_items: self.items.len() as u64,
            });
        }
        self.set = Some(set);
        Ok(())
    }

    /// The full OPRF outputs of every item, in item order, for an OPRF-only run (the
    /// label query of protocols that give no outputs, see
    /// [`crate::labels::LabelClient::start_query`]). Needs the evaluation.
    pub fn into_outputs(self) -> Result<MatchedOutputs> {
        if self.phase != DhClientPhase::Evaluated {
            return Err(Error::Incomplete("the server's evaluation"));
        }
        Ok(MatchedOutputs(self.outputs.clone()))
    }

    /// True once both the evaluation and the encoded set are in.
    pub fn is_ready(&self) -> bool {
        self.phase == DhClientPhase::Evaluated && self.set.is_some()
    }

    /// Matches the finalized outputs against the encoded set.
    pub fn finish(self) -> Result<MatchOutput> {
        self.finish_with_outputs().map(|(output, _)| output)
    }

    /// As [`DhClient::finish`], and also the full OPRF outputs of the matched items,
    /// `outputs[i]` for `matches[i]`: the labels of the matches are derived from them
    /// ([`crate::labels::LabelClient::from_outputs`]), with no second OPRF round.
    pub fn finish_with_outputs(self) -> Result<(MatchOutput, MatchedOutputs)> {
        if self.phase != DhClientPhase::Evaluated {
            return Err(Error::Incomplete("the server's evaluation"));
        }
        let Some(set) = self.set.as_ref() else {
            return Err(Error::Incomplete("the server's encoded set"));
        };
        let l = set.truncation_bits;
        let mut mine: Zeroizing<Vec<(u128, usize)>> = Zeroizing::new(
            self.outputs
                .iter()
                .enumerate()
                .map(|(i, o)| (truncate(o, l), i))
                .collect(),
        );
        mine.sort_unstable();
        // Merge the sorted client values with the sorted server stream. Which items
        // matched is secret: the index list is zeroized on drop, and holds at most one hit
        // per item, reserved up front so it never reallocates (a reallocation would free
        // a copy unzeroized).
        let mut hits = Zeroizing::new(Vec::with_capacity(mine.len()));
        let mut values = set.values();
        let mut next = values.next_value()?;
        for &(v, i) in mine.iter() {
            while let Some(s) = next {
                if s >= v {
                    break;
                }
                next = values.next_value()?;
            }
            if next == Some(v) {
                hits.push(i);
            }
        }
        // Validate the rest of the stream too: a malformed tail is an error, not a
        // silently shorter set.
        while next.is_some() {
            next = values.next_value()?;
        }
        hits.sort_unstable();
        let outputs = MatchedOutputs(Zeroizing::new(
            hits.iter().map(|&i| self.outputs[i]).collect(),
        ));
        Ok((
            MatchOutput::new(&self.items, &hits, set.element_count),
            outputs,
        ))
    }
}

/// Analytic message sizes in bytes (docs/protocol/dh-psi.md, "Sizes").
pub mod sizes {
    use super::messages::{ELEMENTS_OVERHEAD, ENCODED_SET_OVERHEAD};

    /// Query: `17 + 32 n_c`.
    pub fn query(client_items: u64) -> u64 {
        ELEMENTS_OVERHEAD as u64 + 32 * client_items
    }

    /// Evaluation: `17 + 32 n_c`.
    pub fn evaluation(client_items: u64) -> u64 {
        query(client_items)
    }

    /// Expected encoded set size for `n` uniformly random values truncated to `l` bits,
    /// coded with the best Rice parameter `k` for the mean gap `2^l / n`: expected cost
    /// `n (k + 1/(1 - exp(-2^k n / 2^l)))` bits (the unary part, its terminating zero
    /// included, is geometric with that mean), plus the 27-byte overhead. The exact size
    /// of a given set: docs/protocol/dh-psi.md §4.
    pub fn encoded_set(server_items: u64, l: u8) -> u64 {
        if server_items == 0 {
            return ENCODED_SET_OVERHEAD as u64;
        }
        let n = server_items as f64;
        let mean_gap = 2f64.powi(i32::from(l)) / n;
        // Best k for a geometric gap distribution of this mean.
        let best = (0..=l.min(127))
            .map(|k| {
                let p = 2f64.powi(i32::from(k)) / mean_gap;
                let unary = 1.0 / (1.0 - (-p).exp());
                f64::from(k) + unary
            })
            .fold(f64::INFINITY, f64::min);
        ENCODED_SET_OVERHEAD as u64 + (n * best / 8.0).ceil() as u64
    }
}
