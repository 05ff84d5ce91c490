//! The client side: from the matched items' OPRF outputs to their labels.

use super::messages;
use super::record::{self, TAG_LEN};
use crate::dh::DhClient;
use crate::error::{DecodeError, Error, Result};
use crate::items::ItemSet;
use crate::output::MatchedOutputs;
use crate::parallel::Threads;
use std::collections::HashMap;

/// What the label client wants next.
#[derive(Debug)]
#[non_exhaustive]
pub enum LabelStep {
    /// Send these bytes (the fetch request) and pass the response to
    /// [`LabelClient::handle`].
    Send(Vec<u8>),
    /// Done: the label of each match, in the order given (`None`: no label).
    Done(Vec<Option<String>>),
}

enum Phase {
    /// Waiting for the evaluation of the label OPRF query (protocols whose run does not
    /// give the client full OPRF outputs, e.g. OT-PSI).
    AwaitEvaluation(Box<DhClient>),
    /// Waiting for the fetch response.
    AwaitBuckets {
        outputs: MatchedOutputs,
        requested: Vec<u32>,
    },
    Done,
}

impl Phase {
    fn name(&self) -> &'static str {
        match self {
            Phase::AwaitEvaluation(_) => "labels awaiting evaluation",
            Phase::AwaitBuckets { .. } => "labels awaiting buckets",
            Phase::Done => "labels done",
        }
    }
}

/// Client side of the label step (docs/protocol/labels.md): computes the matches' tags
/// and buckets, asks for the buckets, opens the records whose tag is its own.
pub struct LabelClient {
    bucket_bits: u8,
    matches: usize,
    phase: Phase,
}

impl std::fmt::Debug for LabelClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LabelClient")
            .field("matches", &self.matches)
            .field("phase", &self.phase.name())
            .finish_non_exhaustive()
    }
}

fn check_bits(bucket_bits: u8) -> Result<()> {
    if bucket_bits > super::MAX_BUCKET_BITS {
        return Err(DecodeError::InvalidParameter {
            what: "label bucket bits",
        }
        .into());
    }
    Ok(())
}

fn fetch_request(outputs: &MatchedOutputs, bucket_bits: u8) -> (Vec<u32>, Vec<u8>) {
    let mut buckets: Vec<u32> = outputs
        .as_slice()
        .iter()
        .map(|o| record::bucket(&record::tag(o), bucket_bits))
        .collect();
    buckets.sort_unstable();
    buckets.dedup();
    let request = messages::encode_request(&buckets);
    (buckets, request)
}

impl LabelClient {
    /// Labels from the full OPRF outputs the run already computed (DH-PSI:
    /// [`DhClient::finish_with_outputs`]): no OPRF round. Returns the client and the
    /// fetch request. `bucket_bits` is the server's (session) value, at most 24.
    pub fn from_outputs(outputs: MatchedOutputs, bucket_bits: u8) -> Result<(Self, Vec<u8>)> {
        check_bits(bucket_bits)?;
        let (requested, request) = fetch_request(&outputs, bucket_bits);
        let client = LabelClient {
            bucket_bits,
            matches: outputs.len(),
            phase: Phase::AwaitBuckets { outputs, requested },
        };
        Ok((client, request))
    }

    /// Labels for a run that gave the client no full OPRF outputs (OT-PSI): an RFC 9497
    /// OPRF query over the matched items (`matched`, distinct, in match order) under the
    /// server's key epoch `epoch`. Returns the client and the query (a DH-PSI QUERY
    /// message); its evaluation goes to [`LabelClient::handle`], which answers with the
    /// fetch request.
    pub fn start_query<R: rand_core::CryptoRng + ?Sized>(
        matched: &[Vec<u8>],
        epoch: u32,
        bucket_bits: u8,
        threads: Threads,
        rng: &mut R,
    ) -> Result<(Self, Vec<u8>)> {
        check_bits(bucket_bits)?;
        let items = ItemSet::new(matched);
        if items.duplicates() != 0 {
            return Err(Error::CountMismatch {
                expected: matched.len() as u64,
                found: items.len() as u64,
            });
        }
        let (dh, query) = DhClient::start(items, epoch, threads, rng)?;
        let client = LabelClient {
            bucket_bits,
            matches: matched.len(),
            phase: Phase::AwaitEvaluation(Box::new(dh)),
        };
        Ok((client, query))
    }

    /// Handles the server's answer: the evaluation of the label query (then
    /// [`LabelStep::Send`] the fetch request) or the fetch response (then
    /// [`LabelStep::Done`]). A malformed answer is an error and leaves the client as it was.
    pub fn handle(&mut self, response: &[u8]) -> Result<LabelStep> {
        match &mut self.phase {
            Phase::AwaitEvaluation(dh) => {
                // Only an EVALUATION answers the label query (the DH client would also take
                // an encoded set, which has no place here).
                let frame = crate::wire::parse_frame(response, crate::Protocol::Dh)?;
                if frame.message_type != crate::dh::message_type::EVALUATION {
                    return Err(Error::WrongPhase {
                        phase: "labels awaiting evaluation",
                        message: frame.message_type,
                    });
                }
                dh.handle(response)?;
                let Phase::AwaitEvaluation(dh) = std::mem::replace(&mut self.phase, Phase::Done)
                else {
                    unreachable!("matched above")
                };
                let outputs = dh.into_outputs()?;
                let (requested, request) = fetch_request(&outputs, self.bucket_bits);
                self.phase = Phase::AwaitBuckets { outputs, requested };
                Ok(LabelStep::Send(request))
            }
            Phase::AwaitBuckets { outputs, requested } => {
                let labels = open_all(outputs, requested, response)?;
                self.phase = Phase::Done;
                Ok(LabelStep::Done(labels))
            }
            Phase::Done => Err(Error::WrongPhase {
                phase: "labels done",
                message: 0,
            }),
        }
    }
}

fn open_all(
    outputs: &MatchedOutputs,
    requested: &[u32],
    response: &[u8],
) -> Result<Vec<Option<String>>> {
    let mut by_tag: HashMap<[u8; TAG_LEN], record::Record<'_>> = HashMap::new();
    for (bucket, data) in messages::split_response(response)? {
        if requested.binary_search(&bucket).is_err() {
            return Err(DecodeError::InvalidParameter {
                what: "label section for a bucket that was not requested",
            }
            .into());
        }
        for rec in record::parse_records(data)? {
            by_tag.insert(rec.tag, rec);
        }
    }
    Ok(outputs
        .as_slice()
        .iter()
        .map(|o| {
            by_tag
                .get(&record::tag(o))
                .and_then(|rec| record::open(o, rec))
        })
        .collect())
}
