//! The sync vector in tests/vectors/sync.json (docs/protocol/sync.md §8): a snapshot at
//! version 1, the delta to version 2, the snapshot at version 2, every entry's version-2
//! record, and a confirmation fetch with its response, all from the real OPRF outputs of
//! the DH-PSI transcript (tests/vectors/dh-psi-transcript.json: the same key and items),
//! with fixed nonces, for implementations in other languages to check their sync mode
//! against.
//!
//! The test rebuilds the vector from psi-core and compares it with the file, then runs
//! the real client on the file's bytes. Regenerate (only when the format changes on
//! purpose): `PSI_REGENERATE_VECTORS=1 cargo test -p psi-core --test sync_vector`

mod common;

use psi_core::labels;
use psi_core::oprf::{self, OprfKey};
use psi_core::sync::{self, ConfirmClient, ConfirmStore, Delta, Offered, Snapshot, SyncedSet};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use serde_json::{Value, json};

const VECTOR: &str = "sync.json";

/// 4 buckets: the 5 client items' fetch names every one, so the request is fixed.
const BUCKET_BITS: u8 = 2;

/// Version 1 holds entries 0 to 3; version 2 adds entry 4 and removes entry 0.
const ENTRIES: [(&str, Option<&str>); 5] = [
    ("+14155550100", Some("user:100")),
    ("carol@example.net", Some("user:carol")),
    ("alice@example.com", Some("user:alice Zoë")),
    ("", None),
    ("dave@example.com", Some("")),
];
const V1: [usize; 4] = [0, 1, 2, 3];
const V2: [usize; 4] = [1, 2, 3, 4];

/// The nonce of entry `j`: 12 bytes, each `0x10 * (j + 1)` (labels.json's).
fn nonce(j: usize) -> [u8; 12] {
    [0x10 * (j as u8 + 1); 12]
}

fn key() -> OprfKey {
    OprfKey::derive(&[0x42; 32], b"psi-sdk dh-psi transcript v1").unwrap()
}

fn outputs() -> Vec<[u8; 64]> {
    let k = key();
    ENTRIES
        .iter()
        .map(|(i, _)| oprf::evaluate(&k, i.as_bytes()))
        .collect()
}

/// The distinct client items of the DH transcript and their outputs, as it gives them.
fn client(t: &Value) -> (Vec<String>, Vec<[u8; 64]>) {
    let mut seen: Vec<String> = Vec::new();
    for item in t["client_items"].as_array().unwrap() {
        let item = item.as_str().unwrap().to_string();
        if !seen.contains(&item) {
            seen.push(item);
        }
    }
    let outs = t["client_outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            hex::decode(o.as_str().unwrap())
                .unwrap()
                .try_into()
                .unwrap()
        })
        .collect();
    (seen, outs)
}

/// A store whose records are sealed with the entries' fixed nonces: ConfirmStore draws
/// nonces from its RNG, so the vector's records are built here record by record and
/// checked against the store's layout.
fn records(outs: &[[u8; 64]], version: &[usize]) -> Vec<Vec<u8>> {
    let mut buckets = vec![Vec::new(); 1 << BUCKET_BITS];
    for &j in version {
        let rec = sync::seal_record(&outs[j], ENTRIES[j].1, nonce(j));
        let b = labels::bucket(&sync::confirm_tag(&outs[j]), BUCKET_BITS);
        buckets[b as usize].extend_from_slice(&rec);
    }
    buckets
}

fn build() -> Value {
    let t = common::stored_vector("dh-psi-transcript.json");
    let epoch = t["epoch"].as_u64().unwrap() as u32;
    let outs = outputs();
    let w = sync::sync_width(V1.len() as u64, sync::DEFAULT_EXTRA_BITS);
    let v1 = Snapshot::build(epoch, 1, w, V1.iter().map(|&j| &outs[j]));
    let v2 = Snapshot::build(epoch, 2, w, V2.iter().map(|&j| &outs[j]));
    let delta = Delta::build(epoch, 1, 2, w, [&outs[4]], [&outs[0]]);
    let entries: Vec<Value> = ENTRIES
        .iter()
        .enumerate()
        .map(|(j, (item, label))| {
            json!({
                "item": item,
                "label": label,
                "output": hex::encode(outs[j]),
                "sync_tag": sync::sync_tag(&outs[j], w),
                "confirm_tag": hex::encode(sync::confirm_tag(&outs[j])),
                "bucket": labels::bucket(&sync::confirm_tag(&outs[j]), BUCKET_BITS),
                "nonce": label.map(|_| hex::encode(nonce(j))),
                "record": hex::encode(sync::seal_record(&outs[j], *label, nonce(j))),
            })
        })
        .collect();
    let (items, client_outs) = client(&t);
    let synced = SyncedSet::from_snapshot(v2.clone()).unwrap();
    let candidates = synced.candidates(&client_outs).unwrap();
    let k = labels::fetch_buckets(items.len(), BUCKET_BITS);
    let request = sync::FetchRequest {
        mode: sync::MODE_CONFIRM,
        epoch,
        have_version: 2,
        buckets: (0..k as u32).collect(),
    }
    .to_bytes();
    let mut response = vec![sync::FETCH_VERSION];
    response.extend_from_slice(&epoch.to_be_bytes());
    response.extend_from_slice(&2u64.to_be_bytes());
    let buckets = records(&outs, &V2);
    for (b, recs) in buckets.iter().enumerate().take(k) {
        labels::messages::push_section(&mut response, b as u32, recs);
    }
    let matches: Vec<Value> = items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| {
            let j = V2.iter().copied().find(|&j| ENTRIES[j].0 == item)?;
            Some(json!({"client_index": i, "item": item, "label": ENTRIES[j].1}))
        })
        .collect();
    json!({
        "description": "Sync mode of docs/protocol/sync.md on the DH-PSI transcript (tests/vectors/dh-psi-transcript.json: its key and server items). Version 1 of the registry holds entries 0-3, version 2 adds entry 4 and removes entry 0. For each entry: its full OPRF output under the transcript's key, its sync tag at the width w = sync_width(4, 1), its confirmation tag, bucket (label_bucket_bits 2) and version-2 record (fixed nonce: 12 bytes of 0x10 * (j + 1); entry 3 has no label, so a record of len 0; entry 4 the empty label). The snapshot messages of versions 1 and 2 and the delta from 1 to 2 (applying it to version 1 gives version 2's snapshot byte for byte). A client with the transcript's 5 distinct items synced at version 2: its candidates (indices into those items), its confirmation request (fetch_buckets(5, 2) = 4 names every bucket), the server's response from version 2's records, and its matches with labels (null: no label). The removed +14155550100 is not a match.",
        "provenance": "Produced by rust-core/psi-core/tests/sync_vector.rs from psi-core (sync::sync_tag, Snapshot, Delta, seal_record, confirm_tag, FetchRequest) and oprf::evaluate; the client outputs are the DH transcript's; psi-core's SyncedSet and ConfirmClient read the file's messages.",
        "epoch": epoch,
        "width": w,
        "label_bucket_bits": BUCKET_BITS,
        "entries": entries,
        "version_1": V1,
        "version_2": V2,
        "snapshot_v1": hex::encode(v1.to_bytes()),
        "delta_1_2": hex::encode(delta.to_bytes()),
        "snapshot_v2": hex::encode(v2.to_bytes()),
        "client_items": items,
        "candidates": candidates,
        "confirm_request": hex::encode(&request),
        "confirm_response": hex::encode(&response),
        "matches": matches,
    })
}

#[test]
fn sync_vector_matches_the_checked_in_file() {
    let now = build();
    common::regenerate_vector_if_asked(VECTOR, &now);
    let stored = common::stored_vector(VECTOR);
    assert_eq!(
        now, stored,
        "sync vector changed: the sync format or the OPRF drifted"
    );
}

fn bytes(v: &Value, field: &str) -> Vec<u8> {
    hex::decode(v[field].as_str().unwrap()).unwrap()
}

/// psi-core's client reads the file: the delta takes version 1 to version 2, the
/// confirmation request is the file's, and the file's response gives the file's matches.
#[test]
fn the_sync_client_reads_the_vectors_messages() {
    let v = common::stored_vector(VECTOR);
    let t = common::stored_vector("dh-psi-transcript.json");
    let mut set =
        SyncedSet::from_snapshot(Snapshot::from_bytes(&bytes(&v, "snapshot_v1")).unwrap()).unwrap();
    assert_eq!(
        set.offer(Delta::from_bytes(&bytes(&v, "delta_1_2")).unwrap())
            .unwrap(),
        Offered::Applied { version: 2 }
    );
    assert_eq!(set.to_snapshot_bytes(), bytes(&v, "snapshot_v2"));
    let (items, outs) = client(&t);
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let (c, request) = ConfirmClient::start(&outs, &set, BUCKET_BITS, 4, &mut rng).unwrap();
    assert_eq!(request, bytes(&v, "confirm_request"));
    let conf = c.finish(&bytes(&v, "confirm_response")).unwrap();
    let got: Vec<Value> = conf
        .matches
        .iter()
        .map(|m| json!({"client_index": m.index, "item": items[m.index], "label": m.label}))
        .collect();
    assert_eq!(Value::Array(got), v["matches"]);
    assert!(
        !items
            .iter()
            .zip(0..)
            .any(|(i, n)| i == "+14155550100" && conf.matches.iter().any(|m| m.index == n))
    );
    // The store psi-core builds answers the same request with the same layout (its
    // nonces are random, so only the tags and lengths are compared).
    let outs_all = outputs();
    let store = ConfirmStore::build(
        v["epoch"].as_u64().unwrap() as u32,
        2,
        V2.iter().map(|&j| (&outs_all[j], ENTRIES[j].1)),
        1,
        &mut rng,
    );
    assert_eq!(store.bucket_bits(), BUCKET_BITS);
    let answer = store.answer(&request, items.len()).unwrap();
    assert_eq!(answer.len(), bytes(&v, "confirm_response").len());
}
