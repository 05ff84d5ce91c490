//! Labels revealed only to holders of the item (docs/protocol/labels.md,
//! docs/adr/0011-labels.md).
//!
//! A registry entry may carry a label (a user id, say). For an entry with full 64-byte
//! OPRF output `o` (RFC 9497 `Finalize`, computable only by the server or by a holder of
//! the item who ran the OPRF with it):
//!
//! - `tag = SHA-512("psi-label-tag-v1" || o)[0..16]` looks the record up;
//! - `key = SHA-512("psi-label-key-v1" || o)[0..32]` is its ChaCha20-Poly1305 key;
//! - the record is `tag || nonce[12] || len u16 || ChaCha20-Poly1305(key, nonce, label, aad = tag)`;
//! - its bucket is the first `bucket_bits` bits of `tag`, so a client asks for a bucket of
//!   many entries, not for the entry itself.
//!
//! [`LabelStore`] is the server side (records by bucket, the fetch answer);
//! [`LabelClient`] the client side (outputs in, labels out). DH-PSI clients already hold
//! the full outputs of their matches ([`crate::dh::DhClient::finish_with_outputs`]);
//! OT-PSI clients get them with one OPRF query over the matches
//! ([`LabelClient::start_query`]).
//!
//! The label traffic has a fixed shape for a session's `client_items` and bucket layout
//! ([`label_slots`], [`fetch_buckets`]): the client pads the query with dummy items and
//! the fetch with random buckets, and refuses a layout with too few entries per bucket
//! ([`check_layout`]).

mod buckets;
mod client;
mod layout;
pub mod messages;
mod record;
mod server;

pub(crate) use buckets::BucketedRecords;
pub(crate) use client::choose_buckets;
pub use client::{LabelClient, LabelStep};
pub use layout::{
    MIN_BUCKET_OCCUPANCY, MIN_FETCH_BUCKETS, check_layout, fetch_buckets, label_slots,
};
pub use record::{
    AEAD_TAG_LEN, MAX_BUCKET_BITS, MAX_LABEL_LEN, NONCE_LEN, RECORD_HEADER_LEN, Record, TAG_LEN,
    bucket, open, parse_records, seal, tag,
};
pub(crate) use record::{cut_len, key_under, seal_label, tag_under};
pub use server::{LabelStore, bucket_bits};
