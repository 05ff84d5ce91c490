//! The worked example of docs/protocol/labels.md §8, checked against psi-core and against
//! the page's own formulas (tag and key derived here with SHA-512 and ChaCha20-Poly1305
//! directly, not through `psi_core::labels`).
//!
//! The example is read from the page: the lines of its `text` block that start with a
//! field name (`output (o):`, `tag:`, `record:`, ...), a hex value possibly continued on
//! indented lines. Print the values these inputs give (only when the format changes on
//! purpose, then paste them into the page):
//! `PSI_PRINT_LABELS_EXAMPLE=1 cargo test -p psi-core --test labels_doc -- --nocapture`

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use psi_core::labels::{self, messages};
use sha2::{Digest, Sha512};

const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/protocol/labels.md");

/// The example's section of the page: from its heading to the next `## ` heading.
fn example_section() -> String {
    let doc = std::fs::read_to_string(PATH).expect("docs/protocol/labels.md");
    let start = doc
        .find("\n## 8. Example")
        .expect("labels.md has a section `## 8. Example`");
    let rest = &doc[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    rest[..end].to_string()
}

/// The value of field `name` (`"record:"`): the rest of its line, plus the following
/// indented lines that hold only hex digits and spaces.
fn field(section: &str, name: &str) -> String {
    let lines: Vec<&str> = section.lines().collect();
    let i = lines
        .iter()
        .position(|l| l.trim_start().starts_with(name))
        .unwrap_or_else(|| panic!("field `{name}` not found in the example"));
    let mut value = lines[i].trim_start()[name.len()..].trim().to_string();
    for l in &lines[i + 1..] {
        let t = l.trim();
        let continuation = l.starts_with(' ')
            && !t.is_empty()
            && t.chars().all(|c| c.is_ascii_hexdigit() || c == ' ');
        if !continuation {
            break;
        }
        value.push(' ');
        value.push_str(t);
    }
    value
}

fn hex_field(section: &str, name: &str) -> Vec<u8> {
    let v: String = field(section, name)
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    hex::decode(&v).unwrap_or_else(|e| panic!("field `{name}` is not hex: {e}"))
}

/// A quoted string field (`label: "user:42"`).
fn string_field(section: &str, name: &str) -> String {
    let v = field(section, name);
    v.strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or_else(|| panic!("field `{name}` is not a quoted string"))
        .to_string()
}

/// The first token of a numeric field (`bucket: 1234 (0x04d2)`).
fn number_field(section: &str, name: &str) -> u64 {
    field(section, name)
        .split_whitespace()
        .next()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("field `{name}` is not a number"))
}

fn array<const N: usize>(bytes: &[u8], what: &str) -> [u8; N] {
    bytes
        .try_into()
        .unwrap_or_else(|_| panic!("{what}: {} bytes, expected {N}", bytes.len()))
}

fn sha512(parts: &[&[u8]]) -> [u8; 64] {
    let mut h = Sha512::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

/// The page's derivations, written out independently of `psi_core::labels`.
fn spec_tag(o: &[u8; 64]) -> [u8; 16] {
    array(&sha512(&[b"psi-label-tag-v1", o])[..16], "tag")
}

fn spec_key(o: &[u8; 64]) -> [u8; 32] {
    array(&sha512(&[b"psi-label-key-v1", o])[..32], "key")
}

// The example's inputs (the page states them; `print_example` turns them into the block).
const OTHER_SEED_PREFIX: &str = "labels.md other entry ";
const BUCKET_BITS: u8 = 11;
const LABEL: &str = "user:42 Zoë";
const OTHER_LABEL: &str = "user:7";

fn example_output() -> [u8; 64] {
    std::array::from_fn(|i| i as u8)
}

fn example_nonce(first: u8) -> [u8; 12] {
    std::array::from_fn(|i| first + i as u8)
}

/// Prints the example block for the page (the other entry is the first
/// `SHA-512("labels.md other entry " || k)` whose tag falls in the same bucket).
fn print_example() {
    let o = example_output();
    let t = labels::tag(&o);
    let b = labels::bucket(&t, BUCKET_BITS);
    let (k, o2) = (0u32..)
        .map(|k| (k, sha512(&[format!("{OTHER_SEED_PREFIX}{k}").as_bytes()])))
        .find(|(_, o2)| labels::bucket(&labels::tag(o2), BUCKET_BITS) == b)
        .expect("some k");
    let rec = labels::seal(&o, LABEL, example_nonce(0xa0));
    let rec2 = labels::seal(&o2, OTHER_LABEL, example_nonce(0xb0));
    let mut records = rec2.clone();
    records.extend_from_slice(&rec);
    let mut response = Vec::new();
    messages::push_section(&mut response, b, &records);
    let wrap = |bytes: &[u8]| {
        bytes
            .chunks(32)
            .map(hex::encode)
            .collect::<Vec<_>>()
            .join("\n                   ")
    };
    println!("other entry k = {k}");
    println!("output (o):        {}", wrap(&o));
    println!("tag:               {}", hex::encode(t));
    println!("key:               {}", hex::encode(spec_key(&o)));
    println!("bucket_bits:       {BUCKET_BITS}");
    println!("bucket:            {b} (0x{b:08x})");
    println!("label:             \"{LABEL}\"");
    println!("label (UTF-8):     {}", hex::encode(LABEL));
    println!("nonce:             {}", hex::encode(example_nonce(0xa0)));
    println!("record:            {}", wrap(&rec));
    println!("other seed:        \"{OTHER_SEED_PREFIX}{k}\"");
    println!("other output (o'): {}", wrap(&o2));
    println!("other label:       \"{OTHER_LABEL}\"");
    println!("other nonce:       {}", hex::encode(example_nonce(0xb0)));
    println!("other tag:         {}", hex::encode(labels::tag(&o2)));
    println!("other record:      {}", wrap(&rec2));
    println!(
        "own bucket id:     {}",
        hex::encode(messages::encode_request(&[b]))
    );
    println!("own section:       {}", wrap(&response));
}

#[test]
fn labels_md_example() {
    if std::env::var_os("PSI_PRINT_LABELS_EXAMPLE").is_some() {
        print_example();
    }
    let s = example_section();

    // Inputs as the page states them.
    let o: [u8; 64] = array(&hex_field(&s, "output (o):"), "output (o)");
    assert_eq!(o, example_output(), "o is the bytes 0x00, 0x01, ..., 0x3f");
    let label = string_field(&s, "label:");
    assert_eq!(hex_field(&s, "label (UTF-8):"), label.as_bytes());
    let nonce: [u8; 12] = array(&hex_field(&s, "nonce:"), "nonce");
    let bits = u8::try_from(number_field(&s, "bucket_bits:")).expect("bucket_bits");
    let o2: [u8; 64] = array(&hex_field(&s, "other output (o'):"), "other output");
    let seed = string_field(&s, "other seed:");
    assert!(seed.starts_with(OTHER_SEED_PREFIX));
    assert_eq!(o2, sha512(&[seed.as_bytes()]), "o' = SHA-512(other seed)");
    let label2 = string_field(&s, "other label:");
    let nonce2: [u8; 12] = array(&hex_field(&s, "other nonce:"), "other nonce");

    // Tag and key: the library and the page's formulas agree with the page's values.
    let tag: [u8; 16] = array(&hex_field(&s, "tag:"), "tag");
    assert_eq!(labels::tag(&o), tag);
    assert_eq!(spec_tag(&o), tag);
    let key: [u8; 32] = array(&hex_field(&s, "key:"), "key");
    assert_eq!(spec_key(&o), key);
    let tag2: [u8; 16] = array(&hex_field(&s, "other tag:"), "other tag");
    assert_eq!(labels::tag(&o2), tag2);

    // Records: seal gives the page's bytes; the layout is tag || nonce || len || ct.
    let record = hex_field(&s, "record:");
    assert_eq!(labels::seal(&o, &label, nonce), record);
    assert_eq!(&record[..16], &tag);
    assert_eq!(&record[16..28], &nonce);
    let len = usize::from(u16::from_be_bytes([record[28], record[29]]));
    assert_eq!(
        len,
        label.len() + 16,
        "len counts the ciphertext and its Poly1305 tag"
    );
    assert_eq!(record.len(), 30 + len);
    let plain = ChaCha20Poly1305::new(Key::from_slice(&key))
        .decrypt(
            Nonce::from_slice(&nonce),
            Payload {
                msg: &record[30..],
                aad: &tag,
            },
        )
        .expect("the page's key opens the page's record, AAD = tag");
    assert_eq!(plain, label.as_bytes());
    let record2 = hex_field(&s, "other record:");
    assert_eq!(labels::seal(&o2, &label2, nonce2), record2);

    // Bucket ids: the first `bits` bits of the tag; both entries share the bucket.
    let bucket = number_field(&s, "bucket:");
    assert_eq!(u64::from(labels::bucket(&tag, bits)), bucket);
    assert_eq!(
        u64::from(u32::from_be_bytes([tag[0], tag[1], tag[2], tag[3]]) >> (32 - bits)),
        bucket
    );
    assert_eq!(labels::bucket(&tag2, bits), labels::bucket(&tag, bits));

    // The session's shape: one item, so one label slot and 64 buckets fetched (the
    // client's and 63 random ones); the stated registry size passes the occupancy check.
    let n = number_field(&s, "client_items:") as usize;
    let registry_items = number_field(&s, "registry_items:");
    assert_eq!(
        labels::label_slots(n) as u64,
        number_field(&s, "label slots:")
    );
    assert_eq!(
        labels::fetch_buckets(n, bits) as u64,
        number_field(&s, "fetch buckets:")
    );
    labels::check_layout(n, registry_items, bits).expect("the example's layout passes");

    // The client's id in the fetch request: the bucket id, u32 big-endian.
    let request = hex_field(&s, "own bucket id:");
    assert_eq!(
        messages::decode_request(&request).unwrap(),
        vec![bucket as u32]
    );
    assert_eq!(messages::encode_request(&[bucket as u32]), request);

    // The response's section for that bucket: the other entry's record, then ours.
    let response = hex_field(&s, "own section:");
    let mut expected = Vec::new();
    messages::push_section(
        &mut expected,
        bucket as u32,
        &[record2.clone(), record].concat(),
    );
    assert_eq!(response, expected);
    let sections = messages::split_response(&response).unwrap();
    assert_eq!(sections.len(), 1);
    let (b, data) = sections[0];
    assert_eq!(u64::from(b), bucket);
    let records = labels::parse_records(data).unwrap();
    assert_eq!(records.len(), 2);
    for r in &records {
        assert_eq!(labels::bucket(&r.tag, bits), b);
    }
    let mine = records.iter().find(|r| r.tag == tag).expect("our tag");
    assert_eq!(labels::open(&o, mine).as_deref(), Some(label.as_str()));
    let other = records
        .iter()
        .find(|r| r.tag != tag)
        .expect("the other tag");
    assert_eq!(
        labels::open(&o, other),
        None,
        "another entry's record does not open"
    );
    assert_eq!(labels::open(&o2, other).as_deref(), Some(label2.as_str()));
}

/// The refusal rule of §5.1 as the page states it is the one `check_layout` applies:
/// `R < MIN_BUCKET_OCCUPANCY * 2^b` (a client built from a wrong constant refuses every
/// labelled session of a default server, or accepts layouts that pin matches down).
#[test]
fn labels_md_states_the_layout_check_the_code_applies() {
    let doc = std::fs::read_to_string(PATH).expect("docs/protocol/labels.md");
    let k = labels::MIN_BUCKET_OCCUPANCY;
    let rule = format!("K < 2^b   and   R < {k} * 2^b");
    assert!(doc.contains(&rule), "labels.md §5.1 must state `{rule}`");
    assert!(
        doc.contains(&format!("`MIN_BUCKET_OCCUPANCY = {k}`")),
        "labels.md names the constant's value"
    );
    // The rule at its edge, as stated: b = 10, one contact (K = 64 < 1,024 buckets).
    let b = 10u8;
    let buckets = 1u64 << b;
    assert!(labels::check_layout(1, k * buckets - 1, b).is_err());
    assert!(labels::check_layout(1, k * buckets, b).is_ok());
}
