//! The label vector in tests/vectors/labels.json (docs/protocol/labels.md §8): records,
//! a fetch request and a fetch response built from the real OPRF outputs of the DH-PSI
//! transcript (tests/vectors/dh-psi-transcript.json: the same key, the same items), with
//! fixed nonces, for implementations in other languages to check their label step
//! against.
//!
//! The test rebuilds the vector from psi-core and compares it with the file, checks that
//! the client outputs are the DH transcript's, and runs the real label client on the
//! file's response. Regenerate (only when the label format changes on purpose):
//! `PSI_REGENERATE_VECTORS=1 cargo test -p psi-core --test labels_vector`

mod common;

use psi_core::labels::{self, LabelClient, LabelStep, messages};
use psi_core::oprf::{self, OprfKey};
use psi_core::output::MatchedOutputs;
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use serde_json::{Value, json};

const VECTOR: &str = "labels.json";

/// Bucket bits of the example: 4 buckets, fewer than `fetch_buckets(5, 2)` would name, so
/// the fetch names every bucket and the request is fixed.
const BUCKET_BITS: u8 = 2;

/// The server's entries (the DH transcript's server items) and their labels: one without
/// a label (no record), one with the empty label (a record of `len = 16`).
const ENTRIES: [(&str, Option<&str>); 5] = [
    ("+14155550100", Some("user:100")),
    ("carol@example.net", Some("user:carol")),
    ("alice@example.com", Some("user:alice Zoë")),
    ("", None),
    ("dave@example.com", Some("")),
];

/// The nonce of entry `j`: 12 bytes, each `0x10 * (j + 1)`.
fn nonce(j: usize) -> [u8; 12] {
    [0x10 * (j as u8 + 1); 12]
}

fn key() -> OprfKey {
    OprfKey::derive(&[0x42; 32], b"psi-sdk dh-psi transcript v1").unwrap()
}

fn transcript() -> Value {
    common::stored_vector("dh-psi-transcript.json")
}

/// The distinct client items of the DH transcript, in first-seen order, with their outputs
/// as the transcript gives them.
fn client_items(t: &Value) -> Vec<(String, String)> {
    let mut seen = Vec::new();
    for item in t["client_items"].as_array().unwrap() {
        let item = item.as_str().unwrap().to_string();
        if !seen.contains(&item) {
            seen.push(item);
        }
    }
    let outputs = t["client_outputs"].as_array().unwrap();
    assert_eq!(outputs.len(), seen.len());
    seen.into_iter()
        .zip(outputs.iter().map(|o| o.as_str().unwrap().to_string()))
        .collect()
}

fn build() -> Value {
    let key = key();
    let t = transcript();
    let clients = client_items(&t);
    let mut entries = Vec::new();
    let mut buckets: Vec<Vec<u8>> = vec![Vec::new(); 1 << BUCKET_BITS];
    for (j, (item, label)) in ENTRIES.iter().enumerate() {
        let o = oprf::evaluate(&key, item.as_bytes());
        let tag = labels::tag(&o);
        let bucket = labels::bucket(&tag, BUCKET_BITS);
        let mut e = json!({
            "item": item,
            "output": hex::encode(o),
            "label": label,
            "tag": hex::encode(tag),
            "bucket": bucket,
        });
        if let Some(l) = label {
            let record = labels::seal(&o, l, nonce(j));
            e["nonce"] = json!(hex::encode(nonce(j)));
            e["record"] = json!(hex::encode(&record));
            buckets[bucket as usize].extend_from_slice(&record);
        }
        entries.push(e);
    }
    let n = clients.len();
    let k = labels::fetch_buckets(n, BUCKET_BITS);
    let ids: Vec<u32> = (0..k as u32).collect();
    let mut response = Vec::new();
    for &b in &ids {
        messages::push_section(&mut response, b, &buckets[b as usize]);
    }
    let matched: Vec<Value> = t["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let (item, output) = &clients[m.as_u64().unwrap() as usize];
            let label = ENTRIES
                .iter()
                .find(|(i, _)| i == item)
                .and_then(|(_, l)| *l);
            json!({"item": item, "output": output, "label": label})
        })
        .collect();
    json!({
        "description": "The label step of docs/protocol/labels.md on the DH-PSI transcript (tests/vectors/dh-psi-transcript.json): the server's entries with their full OPRF outputs under the transcript's key, labels, fixed nonces (entry j: 12 bytes of 0x10 * (j + 1)), tags, buckets and records (no record for an entry without a label; the empty label has a record), the fetch request of a session with the transcript's 5 distinct client items (label_bucket_bits 2: fetch_buckets(5, 2) = 4 names every bucket, ascending), the server's fetch response, and what the client opens for each of its matches (null: no label).",
        "provenance": "Produced by rust-core/psi-core/tests/labels_vector.rs from psi-core (labels::seal, tag, bucket, messages::push_section) and oprf::evaluate; the client outputs are checked equal to the DH transcript's client_outputs, and the label client of psi-core opens the response.",
        "label_bucket_bits": BUCKET_BITS,
        "client_items": n,
        "fetch_buckets": k,
        "entries": entries,
        "fetch_request": hex::encode(messages::encode_request(&ids)),
        "fetch_response": hex::encode(&response),
        "matches": matched,
    })
}

#[test]
fn labels_vector_matches_the_checked_in_file() {
    let now = build();
    common::regenerate_vector_if_asked(VECTOR, &now);
    let stored = common::stored_vector(VECTOR);
    assert_eq!(
        now, stored,
        "label vector changed: the label format or the OPRF drifted"
    );
}

/// The client outputs in the vector are the DH transcript's (the server's outputs of the
/// same items under the same key), and psi-core's label client, given those outputs and
/// the file's response, asks for the file's request and opens the file's labels.
#[test]
fn the_label_client_opens_the_vectors_response() {
    let v = common::stored_vector(VECTOR);
    let entries = v["entries"].as_array().unwrap();
    let mut outputs = Vec::new();
    let mut want = Vec::new();
    for m in v["matches"].as_array().unwrap() {
        let entry = entries.iter().find(|e| e["item"] == m["item"]).unwrap();
        assert_eq!(
            entry["output"], m["output"],
            "server and client outputs agree"
        );
        let o: [u8; 64] = hex::decode(m["output"].as_str().unwrap())
            .unwrap()
            .try_into()
            .unwrap();
        outputs.push(o);
        want.push(m["label"].as_str().map(String::from));
    }
    // The empty label and the missing one are both represented.
    assert!(want.contains(&None));
    assert!(entries.iter().any(|e| e["label"] == ""));
    let n = v["client_items"].as_u64().unwrap() as usize;
    let bits = v["label_bucket_bits"].as_u64().unwrap() as u8;
    let mut rng = ChaCha20Rng::seed_from_u64(7);
    let (mut client, request) =
        LabelClient::from_outputs(MatchedOutputs::from_outputs(outputs), n, bits, &mut rng)
            .unwrap();
    assert_eq!(hex::encode(&request), v["fetch_request"].as_str().unwrap());
    let response = hex::decode(v["fetch_response"].as_str().unwrap()).unwrap();
    match client.handle(&response, &mut rng).unwrap() {
        LabelStep::Done(labels) => assert_eq!(labels, want),
        other => panic!("unexpected step {other:?}"),
    }
    // Each stored record opens with its entry's output to its label.
    for e in entries {
        let Some(record) = e["record"].as_str() else {
            assert!(e["label"].is_null());
            continue;
        };
        let o: [u8; 64] = hex::decode(e["output"].as_str().unwrap())
            .unwrap()
            .try_into()
            .unwrap();
        let bytes = hex::decode(record).unwrap();
        let recs = labels::parse_records(&bytes).unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!(labels::open(&o, &recs[0]).as_deref(), e["label"].as_str());
    }
}
