//! The shared DH-PSI transcript in tests/vectors/dh-psi-transcript.json: fixed key,
//! fixed blinds, every message byte for byte, for implementations in other languages. A unit
//! test, not an integration test, because choosing the blinds is test-only
//! ([`DhClient::start_with_blinds`] exists only under `cfg(test)`).
//!
//! Regenerate (only when the wire format changes on purpose):
//! `PSI_REGENERATE_VECTORS=1 cargo test -p psi-core --lib dh::transcript_tests`

use crate::dh::{DhClient, DhServer, ServerKey};
use crate::oprf::{self, OprfKey};
use crate::{ItemSet, Threads};
use curve25519_dalek::scalar::Scalar;
use serde_json::{Value, json};
use zeroize::Zeroizing;

const PATH: &str = "../../tests/vectors/dh-psi-transcript.json";

fn transcript() -> Value {
    let seed = [0x42u8; 32];
    let info = b"psi-sdk dh-psi transcript v1";
    let key = OprfKey::derive(&seed, info).unwrap();
    let sk_hex = hex::encode(*key.to_bytes());
    let client: Vec<&str> = vec![
        "alice@example.com",
        "+14155550100",
        "",
        "bob@example.org",
        "Zoë",
        "alice@example.com",
    ];
    let server: Vec<&str> = vec![
        "+14155550100",
        "carol@example.net",
        "alice@example.com",
        "",
        "dave@example.com",
    ];
    let items = ItemSet::new(&client);
    // Blind i = HashToScalar("blind" || I2OSP(i, 4)) with the DeriveKeyPair DST: fixed,
    // reproducible, and non-zero (checked).
    let blinds: Vec<Scalar> = (0..items.len() as u32)
        .map(|i| oprf::hash_to_scalar(&[b"blind", &i.to_be_bytes()], oprf::DERIVE_KEY_PAIR_DST))
        .collect();
    let srv = DhServer::new(ServerKey::new(key, 1), 8, Threads::ONE);
    let set = srv.encode_set(&ItemSet::new(&server)).unwrap().to_bytes();
    let (mut c, query) = DhClient::start_with_blinds(
        items.clone(),
        1,
        Threads::ONE,
        Zeroizing::new(blinds.clone()),
    )
    .unwrap();
    let evaluation = srv.handle_query(&query).unwrap();
    c.handle(&evaluation).unwrap();
    c.handle(&set).unwrap();
    let out = c.finish().unwrap();
    let key2 = OprfKey::derive(&seed, info).unwrap();
    json!({
        "description": "DH-PSI (docs/protocol/dh-psi.md) full transcript. Items are UTF-8 strings. The client list contains a duplicate (index 5) that is removed before blinding; blinds are listed per distinct item in first-seen order. Produced by rust-core/psi-core/src/dh/transcript_tests.rs.",
        "suite": "OPRF(ristretto255, SHA-512) mode 0x00 (RFC 9497)",
        "key_derivation": {"seed": hex::encode(seed), "info": hex::encode(info), "skS": sk_hex},
        "epoch": 1,
        "max_client_items": 8,
        "client_items": client,
        "server_items": server,
        "blinds": blinds.iter().map(|b| hex::encode(b.to_bytes())).collect::<Vec<_>>(),
        "client_outputs": items.items().iter().map(|x| hex::encode(oprf::evaluate(&key2, x))).collect::<Vec<_>>(),
        "query": hex::encode(&query),
        "evaluation": hex::encode(&evaluation),
        "encoded_set": hex::encode(&set),
        "matches": out.matches.iter().map(|m| m.index).collect::<Vec<_>>(),
    })
}

#[test]
fn dh_transcript_matches_checked_in_vector() {
    let path = format!("{}/{PATH}", env!("CARGO_MANIFEST_DIR"));
    let now = transcript();
    assert_eq!(now["matches"], json!([0, 1, 2]));
    if std::env::var_os("PSI_REGENERATE_VECTORS").is_some() {
        std::fs::write(&path, serde_json::to_string_pretty(&now).unwrap() + "\n").unwrap();
    }
    let stored: Value = serde_json::from_str(
        &std::fs::read_to_string(&path).expect("vector file missing: see the module docs"),
    )
    .unwrap();
    assert_eq!(
        now, stored,
        "DH-PSI transcript changed: wire format or crypto drifted"
    );
}
