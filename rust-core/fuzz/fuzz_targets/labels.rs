//! Label records and fetch bodies: `LabelStore::answer_fetch` on any request (its answer
//! must parse back: sections ascending, requested, records well formed); `split_response`,
//! `parse_records` and `open` on any bytes; and `LabelClient::handle` after a valid start,
//! both ways (from a DH-PSI run's outputs; after an OPRF label query), fed the honest
//! evaluation and fetch response, edited ones or any bytes. An honest run must open
//! exactly the labels of the matched items.
#![no_main]
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use psi_core::labels::{self, LabelClient, LabelStep, messages};
use psi_core::{Protocol, Threads};
use psi_fuzz::Send;

#[derive(Arbitrary, Debug)]
enum Input {
    Fetch {
        request: Vec<u8>,
        max_buckets: u16,
    },
    Records {
        data: Vec<u8>,
        output: u8,
    },
    FromOutputs {
        matches: u8,
        client_items: u16,
        response: Send,
    },
    Query {
        matches: u8,
        client_items: u16,
        evaluation: Send,
        response: Send,
    },
}

/// Checks an honest label result: every matched label item opens to its own label.
fn check(labels: &[Option<String>], matched: &[usize], skipped: usize) {
    assert_eq!(labels.len(), matched.len());
    let opened = labels.iter().filter(|l| l.is_some()).count();
    assert_eq!(
        opened + skipped,
        matched.len(),
        "every label opened or skipped"
    );
    for (l, &i) in labels.iter().zip(matched) {
        if let Some(l) = l {
            assert_eq!(*l, psi_fuzz::label_of(i));
        }
    }
}

fuzz_target!(|input: Input| {
    let f = psi_fuzz::dh();
    let store = &f.labels;
    let bits = store.bucket_bits();
    match input {
        Input::Fetch {
            request,
            max_buckets,
        } => {
            if let Ok(answer) = store.answer_fetch(&request, usize::from(max_buckets)) {
                let ids = messages::decode_request(&request).expect("accepted request");
                let sections = messages::split_response(&answer).expect("own answer");
                assert!(sections.len() <= usize::from(max_buckets));
                assert!(sections.windows(2).all(|w| w[0].0 < w[1].0), "ascending");
                for (b, recs) in sections {
                    assert!(ids.contains(&b), "only requested buckets");
                    for r in labels::parse_records(recs).expect("own records") {
                        assert_eq!(labels::bucket(&r.tag, bits), b);
                    }
                }
            }
        }
        Input::Records { data, output } => {
            let outputs = psi_fuzz::client_outputs(&f.label_items[..4], 7);
            let o = &outputs.as_slice()[usize::from(output) % 4];
            if let Ok(sections) = messages::split_response(&data) {
                for (_, recs) in sections {
                    if let Ok(recs) = labels::parse_records(recs) {
                        for r in &recs {
                            let _ = labels::open(o, r);
                        }
                    }
                }
            }
            if let Ok(recs) = labels::parse_records(&data) {
                for r in &recs {
                    let _ = labels::open(o, r);
                }
            }
        }
        Input::FromOutputs {
            matches,
            client_items,
            response,
        } => {
            let k = usize::from(matches) % 9;
            let matched: Vec<usize> = (0..k).map(|i| i * 31 % f.label_items.len()).collect();
            let items: Vec<Vec<u8>> = matched.iter().map(|&i| f.label_items[i].clone()).collect();
            let n = usize::from(client_items).max(k).max(1);
            let outputs = psi_fuzz::client_outputs(&items, 5);
            let Ok((mut client, request)) =
                LabelClient::from_outputs(outputs, n, bits, &mut psi_fuzz::rng(6))
            else {
                return;
            };
            let honest = store
                .answer_fetch(&request, usize::MAX)
                .expect("honest fetch");
            let body = match &response {
                Send::Mutated(m) => m.apply(&honest, None),
                other => other.bytes(&honest, &request, Protocol::Dh),
            };
            let result = client.handle(&body, &mut psi_fuzz::rng(8));
            if response.is_valid() {
                match result.expect("honest answer") {
                    LabelStep::Done(l) => check(&l, &matched, client.skipped()),
                    other => panic!("{other:?}"),
                }
            }
        }
        Input::Query {
            matches,
            client_items,
            evaluation,
            response,
        } => {
            let k = usize::from(matches) % 9;
            let matched: Vec<usize> = (0..k).map(|i| i * 17 % f.label_items.len()).collect();
            let items: Vec<Vec<u8>> = matched.iter().map(|&i| f.label_items[i].clone()).collect();
            // At most 256 items: 64 label slots, so a run costs 64 OPRF evaluations.
            let n = (usize::from(client_items) % 256).max(k).max(1);
            let Ok((mut client, query)) = LabelClient::start_query(
                &items,
                n,
                f.epoch,
                bits,
                Threads::ONE,
                &mut psi_fuzz::rng(9),
            ) else {
                return;
            };
            let honest = f.wide.handle_query(&query).unwrap_or_default();
            let eval = evaluation.bytes(&honest, &query, Protocol::Dh);
            let mut rng = psi_fuzz::rng(10);
            let request = match client.handle(&eval, &mut rng) {
                Ok(LabelStep::Send(r)) => r,
                Ok(other) => panic!("a fetch request after the evaluation, got {other:?}"),
                Err(_) => {
                    assert!(!evaluation.is_valid(), "honest evaluation accepted");
                    return;
                }
            };
            let honest = store.answer_fetch(&request, usize::MAX).unwrap_or_default();
            let body = match &response {
                Send::Mutated(m) => m.apply(&honest, None),
                other => other.bytes(&honest, &request, Protocol::Dh),
            };
            let result = client.handle(&body, &mut rng);
            if evaluation.is_valid() && response.is_valid() {
                match result.expect("honest answer") {
                    LabelStep::Done(l) => check(&l, &matched, client.skipped()),
                    other => panic!("{other:?}"),
                }
            }
        }
    }
});
