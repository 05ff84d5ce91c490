//! The client side: from the matched items' OPRF outputs to their labels.

use super::messages;
use super::record::{self, TAG_LEN};
use crate::dh::DhClient;
use crate::error::{DecodeError, Error, Result};
use crate::items::ItemSet;
use crate::output::MatchedOutputs;
use crate::parallel::Threads;
use std::collections::{BTreeSet, HashMap};

/// What the label client wants next.
#[derive(Debug)]
#[non_exhaustive]
pub enum LabelStep {
    /// Send these bytes (the fetch request) and pass the response to
    /// [`LabelClient::handle`].
    Send(Vec<u8>),
    /// Done: the label of each match, in the order given (`None`: no label, or not
    /// fetched: [`LabelClient::skipped`]).
    Done(Vec<Option<String>>),
}

enum LabelPhase {
    /// Waiting for the evaluation of the label OPRF query (protocols whose run does not
    /// give the client full OPRF outputs, e.g. OT-PSI). The first `real` items of the
    /// query are matches, the rest dummies.
    AwaitEvaluation {
        dh: Box<DhClient>,
        real: usize,
    },
    /// Waiting for the fetch response. `outputs` are those of the first
    /// `outputs.len()` matches.
    AwaitBuckets {
        outputs: MatchedOutputs,
        requested: Vec<u32>,
    },
    Done,
}

impl LabelPhase {
    fn name(&self) -> &'static str {
        match self {
            LabelPhase::AwaitEvaluation { .. } => "labels awaiting evaluation",
            LabelPhase::AwaitBuckets { .. } => "labels awaiting buckets",
            LabelPhase::Done => "labels done",
        }
    }
}

/// Client side of the label step (docs/protocol/labels.md §6): computes the matches'
/// tags and buckets, asks for exactly [`super::fetch_buckets`] buckets (its own mixed
/// with uniformly random others), opens the records whose tag is its own. The traffic
/// it sends depends on the session's `client_items` and bucket layout only, never on
/// the matches.
pub struct LabelClient {
    bucket_bits: u8,
    client_items: usize,
    matches: usize,
    skipped: usize,
    phase: LabelPhase,
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
    if bucket_bits > super::record::MAX_BUCKET_BITS {
        return Err(DecodeError::InvalidParameter {
            what: "label bucket bits",
        }
        .into());
    }
    Ok(())
}

/// A uniform integer below `bound` (> 0), by rejection.
pub(crate) fn below<R: rand_core::CryptoRng + ?Sized>(rng: &mut R, bound: u32) -> u32 {
    let zone = (1u64 << 32) / u64::from(bound) * u64::from(bound);
    loop {
        let x = u64::from(rng.next_u32());
        if x < zone {
            return (x % u64::from(bound)) as u32;
        }
    }
}

/// The buckets to fetch: exactly `count` distinct ids, `count <= 2^bits`. If the
/// matches' distinct buckets (`real`, sorted, distinct) are at most `count`, all of them
/// plus uniformly random distinct others; otherwise a uniformly random `count`-subset of
/// them. Either way, if the real buckets are uniform (tags are pseudorandom), the result
/// is a uniform `count`-subset of all buckets whatever their number. Sorted ascending.
pub(crate) fn choose_buckets<R: rand_core::CryptoRng + ?Sized>(
    mut real: Vec<u32>,
    count: usize,
    bits: u8,
    rng: &mut R,
) -> Vec<u32> {
    let mut chosen: BTreeSet<u32> = if real.len() > count {
        // Partial Fisher-Yates: the first `count` after it are a uniform subset.
        for i in 0..count {
            let j = i + below(rng, (real.len() - i) as u32) as usize;
            real.swap(i, j);
        }
        real.truncate(count);
        real.into_iter().collect()
    } else {
        real.into_iter().collect()
    };
    let mask = ((1u64 << bits) - 1) as u32;
    while chosen.len() < count {
        chosen.insert(rng.next_u32() & mask);
    }
    chosen.into_iter().collect()
}

impl LabelClient {
    fn fetch_request<R: rand_core::CryptoRng + ?Sized>(
        &mut self,
        outputs: &MatchedOutputs,
        rng: &mut R,
    ) -> (Vec<u32>, Vec<u8>) {
        let bits = self.bucket_bits;
        let mine: Vec<u32> = outputs
            .as_slice()
            .iter()
            .map(|o| record::bucket(&record::tag(o), bits))
            .collect();
        let mut real = mine.clone();
        real.sort_unstable();
        real.dedup();
        let count = super::layout::fetch_buckets(self.client_items, bits);
        let requested = choose_buckets(real, count, bits, rng);
        let fetched = mine
            .iter()
            .filter(|b| requested.binary_search(b).is_ok())
            .count();
        // Matches left out of the query (OT-PSI) or whose bucket was left out.
        self.skipped = self.matches - fetched;
        let request = messages::encode_request(&requested);
        (requested, request)
    }

    /// Labels from the full OPRF outputs the run already computed (DH-PSI:
    /// [`DhClient::finish_with_outputs`]): no OPRF round. Returns the client and the
    /// fetch request, which names exactly `fetch_buckets(client_items, bucket_bits)`
    /// buckets whatever the number of matches (none included). `client_items` is the
    /// session's `n`, `bucket_bits` the session's value (at most 24); check the layout
    /// first with [`super::check_layout`].
    pub fn from_outputs<R: rand_core::CryptoRng + ?Sized>(
        outputs: MatchedOutputs,
        client_items: usize,
        bucket_bits: u8,
        rng: &mut R,
    ) -> Result<(Self, Vec<u8>)> {
        check_bits(bucket_bits)?;
        let mut client = LabelClient {
            bucket_bits,
            client_items,
            matches: outputs.len(),
            skipped: 0,
            phase: LabelPhase::Done,
        };
        let (requested, request) = client.fetch_request(&outputs, rng);
        client.phase = LabelPhase::AwaitBuckets { outputs, requested };
        Ok((client, request))
    }

    /// Labels for a run that gave the client no full OPRF outputs (OT-PSI): an RFC 9497
    /// OPRF query under the server's key epoch `epoch` with exactly
    /// `label_slots(client_items)` elements, whatever the number of matches: the matched
    /// items (`matched`, distinct, in the order given; the driver gives them in the order
    /// of the caller's list; should there be more than the slots, which a session's own
    /// matches never are, the first ones), then random 32-byte dummy items, blinded
    /// alike. Returns the client and the query (a
    /// DH-PSI QUERY message); its evaluation goes to [`LabelClient::handle`], which
    /// answers with the fetch request.
    pub fn start_query<R: rand_core::CryptoRng + ?Sized>(
        matched: &[Vec<u8>],
        client_items: usize,
        epoch: u32,
        bucket_bits: u8,
        threads: Threads,
        rng: &mut R,
    ) -> Result<(Self, Vec<u8>)> {
        check_bits(bucket_bits)?;
        let slots = super::layout::label_slots(client_items);
        let real = matched.len().min(slots);
        let mut items: Vec<Vec<u8>> = Vec::with_capacity(slots);
        items.extend_from_slice(&matched[..real]);
        for _ in real..slots {
            let mut dummy = vec![0u8; DUMMY_ITEM_LEN];
            rng.fill_bytes(&mut dummy);
            items.push(dummy);
        }
        let items = ItemSet::new(items);
        if items.duplicates() != 0 {
            // Repeated matches (a caller bug), or a dummy equal to a match (2^-256).
            return Err(Error::CountMismatch {
                expected: slots as u64,
                found: items.len() as u64,
            });
        }
        let (dh, query) = DhClient::start(items, epoch, threads, rng)?;
        let client = LabelClient {
            bucket_bits,
            client_items,
            matches: matched.len(),
            skipped: 0,
            phase: LabelPhase::AwaitEvaluation {
                dh: Box::new(dh),
                real,
            },
        };
        Ok((client, query))
    }

    /// Matches whose label was not fetched because the label step's fixed size was too
    /// small for them (more matches than label slots, or their buckets more than the
    /// fetch names): they get `None`. Known once the fetch request is made.
    pub fn skipped(&self) -> usize {
        self.skipped
    }

    /// Handles the server's answer: the evaluation of the label query (then
    /// [`LabelStep::Send`] the fetch request, its padding drawn from `rng`) or the fetch
    /// response (then [`LabelStep::Done`]). A malformed answer is an error and leaves the
    /// client as it was.
    pub fn handle<R: rand_core::CryptoRng + ?Sized>(
        &mut self,
        response: &[u8],
        rng: &mut R,
    ) -> Result<LabelStep> {
        match &mut self.phase {
            LabelPhase::AwaitEvaluation { dh, .. } => {
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
                let LabelPhase::AwaitEvaluation { dh, real } =
                    std::mem::replace(&mut self.phase, LabelPhase::Done)
                else {
                    unreachable!("matched above")
                };
                let all = dh.into_outputs()?;
                // The dummies' outputs are dropped (zeroized with `all`).
                let outputs =
                    MatchedOutputs(zeroize::Zeroizing::new(all.as_slice()[..real].to_vec()));
                let (requested, request) = self.fetch_request(&outputs, rng);
                self.phase = LabelPhase::AwaitBuckets { outputs, requested };
                Ok(LabelStep::Send(request))
            }
            LabelPhase::AwaitBuckets { outputs, requested } => {
                let mut labels = open_all(outputs, requested, response)?;
                labels.resize(self.matches, None);
                self.phase = LabelPhase::Done;
                Ok(LabelStep::Done(labels))
            }
            LabelPhase::Done => Err(Error::WrongPhase {
                phase: "labels done",
                message: 0,
            }),
        }
    }
}

/// Bytes of a dummy item of the label query (random: no registry entry has it, except
/// with negligible probability, and its output is dropped anyway).
const DUMMY_ITEM_LEN: usize = 32;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dh::{DhServer, ServerKey};
    use crate::labels::layout::{fetch_buckets, label_slots};
    use crate::labels::server::LabelStore;
    use crate::oprf::OUTPUT_LEN;
    use rand_chacha::ChaCha20Rng;
    use rand_core::{Rng, SeedableRng};

    fn rng(seed: u64) -> ChaCha20Rng {
        ChaCha20Rng::seed_from_u64(seed)
    }

    fn outputs(v: Vec<[u8; OUTPUT_LEN]>) -> MatchedOutputs {
        MatchedOutputs(zeroize::Zeroizing::new(v))
    }

    fn random_outputs(count: usize, r: &mut ChaCha20Rng) -> Vec<[u8; OUTPUT_LEN]> {
        (0..count)
            .map(|_| {
                let mut o = [0u8; OUTPUT_LEN];
                r.fill_bytes(&mut o);
                o
            })
            .collect()
    }

    fn decode(request: &[u8]) -> Vec<u32> {
        messages::decode_request(request).unwrap()
    }

    /// The fetch names exactly `fetch_buckets(n, b)` distinct ascending buckets, its
    /// own among them, with 0, some or all of the `n` items matched.
    #[test]
    fn the_fetch_has_a_fixed_size_and_holds_the_real_buckets() {
        let mut r = rng(1);
        for (n, bits) in [(1, 11), (10, 0), (10, 3), (100, 14), (1_000, 14), (300, 6)] {
            let want = fetch_buckets(n, bits);
            for m in [0, 1, n / 3, n] {
                let outs = random_outputs(m, &mut r);
                let real: BTreeSet<u32> = outs
                    .iter()
                    .map(|o| record::bucket(&record::tag(o), bits))
                    .collect();
                let (client, request) =
                    LabelClient::from_outputs(outputs(outs), n, bits, &mut r).unwrap();
                assert_eq!(request.len(), 4 * want, "n {n} bits {bits} matches {m}");
                let ids = decode(&request);
                assert!(ids.windows(2).all(|w| w[0] < w[1]), "distinct, ascending");
                assert!(ids.iter().all(|&b| u64::from(b) < 1u64 << bits));
                if real.len() <= want {
                    assert!(real.iter().all(|b| ids.binary_search(b).is_ok()));
                    assert_eq!(client.skipped(), 0);
                } else {
                    assert!(ids.iter().all(|b| real.contains(b)));
                    assert!(client.skipped() > 0);
                }
            }
        }
    }

    /// With one real bucket among 16 and 4 fetched, every bucket is fetched with the
    /// same frequency as the real one would be under a uniform choice (the padding does
    /// not cluster): each other bucket in about 3/15 of the runs.
    #[test]
    fn padding_buckets_are_uniform() {
        let mut r = rng(2);
        let trials = 30_000;
        let mut hits = [0u32; 16];
        for _ in 0..trials {
            for b in choose_buckets(vec![5], 4, 4, &mut r) {
                hits[b as usize] += 1;
            }
        }
        assert_eq!(hits[5], trials);
        let expect = f64::from(trials) * 3.0 / 15.0;
        for (b, &h) in hits.iter().enumerate().filter(|(b, _)| *b != 5) {
            assert!(
                (f64::from(h) - expect).abs() < 0.05 * expect,
                "bucket {b}: {h} hits, expected about {expect}"
            );
        }
        // More real buckets than slots: a uniform subset of them.
        let mut hits = [0u32; 16];
        for _ in 0..trials {
            let ids = choose_buckets(vec![1, 2, 3, 4, 5, 6], 3, 4, &mut r);
            assert_eq!(ids.len(), 3);
            for b in ids {
                hits[b as usize] += 1;
            }
        }
        for (b, &h) in hits.iter().enumerate() {
            if (1..=6).contains(&b) {
                let expect = f64::from(trials) / 2.0;
                assert!((f64::from(h) - expect).abs() < 0.05 * expect, "{b}: {h}");
            } else {
                assert_eq!(h, 0);
            }
        }
    }

    /// Labels come back right with the padding: the client's own labels, `None` for its
    /// unlabeled matches, every dummy bucket answered and ignored.
    #[test]
    fn padded_fetch_opens_the_right_labels() {
        let mut r = rng(3);
        let registry = random_outputs(4_000, &mut r);
        let labels: Vec<String> = (0..registry.len()).map(|i| format!("user-{i}")).collect();
        // Every other entry labeled.
        let labeled: Vec<(&[u8; OUTPUT_LEN], &str)> = registry
            .iter()
            .zip(&labels)
            .step_by(2)
            .map(|(o, l)| (o, l.as_str()))
            .collect();
        let store = LabelStore::build(labeled.into_iter(), 32, &mut r);
        let bits = store.bucket_bits();
        assert_eq!(bits, 5);
        let n = 300; // 75 label slots, 32 buckets: the fetch names all of them
        for (n, picks) in [(n, vec![0usize, 1, 2, 7, 100]), (20, vec![]), (20, vec![6])] {
            let mine = outputs(picks.iter().map(|&i| registry[i]).collect());
            let (mut c, request) = LabelClient::from_outputs(mine, n, bits, &mut r).unwrap();
            assert_eq!(decode(&request).len(), fetch_buckets(n, bits));
            let response = store
                .answer_fetch(&request, fetch_buckets(n, bits))
                .unwrap();
            let LabelStep::Done(got) = c.handle(&response, &mut r).unwrap() else {
                panic!("done after the fetch")
            };
            let want: Vec<Option<String>> = picks
                .iter()
                .map(|&i| (i % 2 == 0).then(|| labels[i].clone()))
                .collect();
            assert_eq!(got, want);
        }
    }

    /// The OT-PSI label query has exactly `label_slots(n)` elements however many items
    /// matched; dummy outputs are dropped, the real matches' labels open; matches beyond
    /// the slots get `None` and are counted as skipped.
    #[test]
    fn the_label_query_is_padded_and_its_labels_open() {
        let mut r = rng(4);
        let server = DhServer::new(ServerKey::random(1, &mut r), 10_000, Threads::ONE);
        let ids: Vec<Vec<u8>> = (0..400)
            .map(|i| format!("+1202{i:07}").into_bytes())
            .collect();
        let outs = server.outputs(&ItemSet::new(&ids)).unwrap();
        let names: Vec<String> = (0..ids.len()).map(|i| format!("user-{i}")).collect();
        let store = LabelStore::build(
            outs.iter().zip(&names).map(|(o, l)| (o, l.as_str())),
            8,
            &mut r,
        );
        let bits = store.bucket_bits();
        for (n, matched) in [(10, 0usize), (10, 3), (10, 10), (300, 0), (300, 80)] {
            let items = &ids[..matched];
            let (mut c, query) =
                LabelClient::start_query(items, n, 1, bits, Threads::ONE, &mut r).unwrap();
            let slots = label_slots(n);
            assert_eq!(query.len(), 17 + 32 * slots, "n {n}, {matched} matched");
            let evaluation = server.handle_query(&query).unwrap();
            let LabelStep::Send(request) = c.handle(&evaluation, &mut r).unwrap() else {
                panic!("a fetch request after the evaluation")
            };
            assert_eq!(request.len(), 4 * fetch_buckets(n, bits));
            let response = store
                .answer_fetch(&request, fetch_buckets(n, bits))
                .unwrap();
            let LabelStep::Done(got) = c.handle(&response, &mut r).unwrap() else {
                panic!("done after the fetch")
            };
            assert_eq!(got.len(), matched);
            let fetched = matched.min(slots);
            for (i, l) in got.iter().enumerate() {
                if i < fetched {
                    assert_eq!(l.as_deref(), Some(names[i].as_str()), "match {i}");
                } else {
                    assert_eq!(l, &None);
                }
            }
            assert_eq!(c.skipped(), matched - fetched);
        }
    }
}
