//! Published test vectors: RFC 9497 A.1.1 (OPRF ristretto255-SHA512) and RFC 9380
//! expand_message_xmd (SHA-512). The JSON files in tests/vectors/ record provenance.

use curve25519_dalek::scalar::Scalar;
use psi_core::oprf::{self, OprfKey};
use serde_json::Value;

fn load(name: &str) -> Value {
    let path = format!("{}/../../tests/vectors/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).expect("vector file")).unwrap()
}

fn hex(v: &Value) -> Vec<u8> {
    hex::decode(v.as_str().unwrap()).unwrap()
}

fn arr<const N: usize>(v: &Value) -> [u8; N] {
    hex(v).try_into().unwrap()
}

#[test]
fn rfc9380_expand_message_xmd_sha512() {
    let v = load("rfc9380-expand-message-xmd-sha512.json");
    let mut n = 0;
    for group in v["groups"].as_array().unwrap() {
        let dst = group["dst"].as_str().unwrap().as_bytes();
        for t in group["tests"].as_array().unwrap() {
            let msg = t["msg"].as_str().unwrap().as_bytes();
            let len = t["len_in_bytes"].as_u64().unwrap() as usize;
            let got = oprf::expand_message_xmd(&[msg], dst, len);
            assert_eq!(hex::encode(got), t["uniform_bytes"].as_str().unwrap());
            // Splitting the message into parts must not change the result.
            let (a, b) = msg.split_at(msg.len() / 2);
            assert_eq!(
                hex::encode(oprf::expand_message_xmd(&[a, b], dst, len)),
                t["uniform_bytes"].as_str().unwrap()
            );
            n += 1;
        }
    }
    assert_eq!(n, 7);
}

#[test]
fn rfc9497_a_1_1_oprf_ristretto255_sha512() {
    let v = load("rfc9497-oprf-ristretto255-sha512.json");
    let seed: [u8; 32] = arr(&v["seed"]);
    let key = OprfKey::derive(&seed, &hex(&v["key_info"])).unwrap();
    assert_eq!(hex::encode(*key.to_bytes()), v["skSm"].as_str().unwrap());

    let vectors = v["vectors"].as_array().unwrap();
    assert_eq!(vectors.len(), 2);
    let mut inputs = Vec::new();
    let mut blinds = Vec::new();
    for t in vectors {
        let input = hex(&t["input"]);
        let blind = Scalar::from_canonical_bytes(arr(&t["blind"])).unwrap();
        let blinded = oprf::blind(&input, &blind).unwrap();
        assert_eq!(hex::encode(blinded), t["blinded_element"].as_str().unwrap());
        let evaluated = oprf::blind_evaluate(&key, &blinded).unwrap();
        assert_eq!(
            hex::encode(evaluated),
            t["evaluation_element"].as_str().unwrap()
        );
        let output = oprf::finalize(&input, &blind, &evaluated).unwrap();
        assert_eq!(hex::encode(output), t["output"].as_str().unwrap());
        assert_eq!(
            hex::encode(oprf::evaluate(&key, &input)),
            t["output"].as_str().unwrap()
        );
        inputs.push(input);
        blinds.push(blind);
    }

    // The batched, parallel paths used by DH-PSI give the same bytes.
    let blinded = oprf::blind_batch(&inputs, &blinds).unwrap();
    let evaluated = oprf::blind_evaluate_batch(&key, &blinded).unwrap();
    let outputs = oprf::finalize_batch(&inputs, &blinds, &evaluated).unwrap();
    let direct = oprf::evaluate_batch(&key, &inputs);
    for (i, t) in vectors.iter().enumerate() {
        assert_eq!(
            hex::encode(blinded[i]),
            t["blinded_element"].as_str().unwrap()
        );
        assert_eq!(
            hex::encode(evaluated[i]),
            t["evaluation_element"].as_str().unwrap()
        );
        assert_eq!(hex::encode(outputs[i]), t["output"].as_str().unwrap());
        assert_eq!(hex::encode(direct[i]), t["output"].as_str().unwrap());
    }
}
