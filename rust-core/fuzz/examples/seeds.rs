//! Writes the seed corpora (`fuzz/corpus/<target>/seed-*`) from the transcript vectors:
//! the DH-PSI messages verbatim from `tests/vectors/dh-psi-transcript.json`, the OT-PSI
//! messages regenerated from `tests/vectors/ot-psi-transcript.json`'s items and seeds and
//! checked against its SHA-256s. Structure-aware targets get the message inside the input
//! structure (checked by decoding it back); the sequence targets get the empty input, which
//! is an honest run of the transcript (each target asserts its result), and short inputs.
//!
//! Run from rust-core/fuzz: `cargo +nightly run --example seeds`.
use psi_core::ItemSet;
use psi_core::ot::{ClientStep, OtClient, OtServer};
use psi_fuzz::Framed;
use sha2::{Digest, Sha256};
use std::path::Path;

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join(format!("seed-{name}")), bytes).expect("write");
}

/// `[1] ++ msg`: a `Framed` in mode 1 (header repaired) holding `msg`, as a whole input.
fn framed(msg: &[u8]) -> Vec<u8> {
    let mut seed = vec![1u8];
    seed.extend_from_slice(msg);
    let back = Framed::from_input(&seed);
    assert_eq!(
        back,
        Framed {
            mode: 1,
            bytes: msg.to_vec()
        }
    );
    seed
}

fn main() {
    let f = psi_fuzz::dh();
    let names = ["query", "evaluation", "encoded-set"];
    for (name, m) in names.iter().zip(&f.messages) {
        write("wire_frame", &format!("dh-{name}"), m);
        write("dh_decode", &format!("dh-{name}"), &framed(m));
    }
    write("dh_server", "dh-query", &framed(&f.messages[0]));

    // The OT-PSI transcript, message by message, checked against the vector.
    let o = psi_fuzz::ot();
    let (mut client, mut request) = OtClient::start(
        ItemSet::new(o.client_items.clone()),
        o.client_config(),
        &mut psi_fuzz::rng(o.client_seed),
    )
    .expect("client");
    let mut server = OtServer::new(
        o.server_items.clone(),
        o.server_config(),
        &mut psi_fuzz::rng(o.server_seed),
    )
    .expect("server");
    let mut transcript = Vec::new();
    loop {
        let response = server.handle(&request).expect("server");
        transcript.push(std::mem::take(&mut request));
        let step = client.handle(&response).expect("client");
        transcript.push(response);
        match step {
            ClientStep::Send(next) => request = next,
            ClientStep::Done(_) => break,
        }
    }
    let hashes: Vec<String> = transcript
        .iter()
        .map(|m| hex::encode(Sha256::digest(m)))
        .collect();
    assert_eq!(
        hashes, o.sha256,
        "OT-PSI messages = tests/vectors/ot-psi-transcript.json"
    );
    let ot_names = ["hello", "setup", "chunk", "ack", "outputs"];
    for (i, m) in transcript.iter().enumerate() {
        let name = ot_names[usize::from(m[4]) - 1];
        if i < 4 || i + 1 == transcript.len() {
            write("wire_frame", &format!("ot-{i}-{name}"), m);
        }
    }
    // The empty input is an honest run for every sequence target.
    for t in [
        "dh_client",
        "ot_server",
        "ot_client",
        "client_dh",
        "client_ot",
        "labels",
    ] {
        write(t, "honest", &[]);
    }
    // A few short inputs: each a different first step (e.g. a repeat, an edit).
    for t in [
        "dh_client",
        "ot_server",
        "ot_client",
        "client_dh",
        "client_ot",
        "labels",
    ] {
        for (i, s) in [
            &[0x40u8, 0, 0, 0][..],
            &[0xc0, 0, 0, 0, 1],
            &[1, 0x40, 0, 0, 0, 3, 0],
        ]
        .iter()
        .enumerate()
        {
            write(t, &format!("short-{i}"), s);
        }
    }
    // CM20-PSI: the empty input is the vector's honest run (the target asserts its
    // matches), `[1]` the same with label lanes; the vector's hello, framed, is a raw first
    // message; short inputs as above.
    let c = psi_fuzz::cm20();
    let (_, hello) = psi_core::cm20::Cm20Client::start(
        ItemSet::new(c.client_items.clone()),
        c.client_config(),
        &mut psi_fuzz::rng(c.client_seed),
    )
    .expect("client");
    assert_eq!(
        hex::encode(Sha256::digest(&hello)),
        c.sha256[0],
        "CM20-PSI hello = tests/vectors/cm20-psi-transcript.json"
    );
    write("wire_frame", "cm20-hello", &hello);
    write("cm20", "honest", &[]);
    // The first byte's low bit picks label lanes (suite 0x02): the honest run with lanes
    // (the target asserts its matches and the lane vector's labels).
    write("cm20", "honest-lanes", &[1]);
    for (i, s) in [
        &[0x40u8, 0, 0, 0][..],
        &[0xc0, 0, 0, 0, 1],
        &[1, 0x40, 0, 0, 0, 3, 0],
    ]
    .iter()
    .enumerate()
    {
        write("cm20", &format!("short-{i}"), s);
    }
    // GBF-PSI: as CM20-PSI.
    let g = psi_fuzz::gbf();
    let (_, hello) = psi_core::gbf::GbfClient::start(
        ItemSet::new(g.client_items.clone()),
        g.client_config(),
        &mut psi_fuzz::rng(g.client_seed),
    )
    .expect("client");
    assert_eq!(
        hex::encode(Sha256::digest(&hello)),
        g.sha256[0],
        "GBF-PSI hello = tests/vectors/gbf-psi-transcript.json"
    );
    write("wire_frame", "gbf-hello", &hello);
    write("gbf", "honest", &[]);
    for (i, s) in [
        &[0x40u8, 0, 0, 0][..],
        &[0xc0, 0, 0, 0, 1],
        &[1, 0x40, 0, 0, 0, 3, 0],
    ]
    .iter()
    .enumerate()
    {
        write("gbf", &format!("short-{i}"), s);
    }
    println!("seeds written");
}
