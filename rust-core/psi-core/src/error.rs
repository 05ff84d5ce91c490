//! Error types.
//!
//! Every error is safe to log: no variant carries set elements, OPRF outputs,
//! blinds or keys, only counts, sizes, tags and phase names.

use thiserror::Error;

/// Why a byte string could not be decoded as a protocol message.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
#[allow(missing_docs)] // variant fields are named for what they hold
pub enum DecodeError {
    /// Fewer bytes than the header or a declared length needs.
    #[error("message truncated: needed {needed} bytes, had {available}")]
    Truncated { needed: usize, available: usize },
    /// Bytes left over after the declared message body.
    #[error("{extra} trailing bytes after the message")]
    TrailingBytes { extra: usize },
    /// The first two bytes are not the `PS` magic.
    #[error("not a PSI message (bad magic)")]
    BadMagic,
    /// A wire version this implementation does not speak.
    #[error("unsupported wire version {0}")]
    UnsupportedVersion(u8),
    /// The protocol id is not the one this decoder expects.
    #[error("wrong protocol id {found:#04x}, expected {expected:#04x}")]
    WrongProtocol { expected: u8, found: u8 },
    /// A message type this protocol does not define.
    #[error("unknown message type {0:#04x}")]
    UnknownMessageType(u8),
    /// A count or size field is above the hard limit.
    #[error("{what} is {value}, above the limit {limit}")]
    LimitExceeded {
        what: &'static str,
        value: u64,
        limit: u64,
    },
    /// The declared body length disagrees with the fields inside it.
    #[error("length mismatch in {what}: declared {declared}, fields need {actual}")]
    LengthMismatch {
        what: &'static str,
        declared: u64,
        actual: u64,
    },
    /// A group element is not a canonical ristretto255 encoding, or is the identity.
    #[error("element {index} is not a valid ristretto255 element")]
    InvalidElement { index: usize },
    /// A parameter field has a value outside its allowed range.
    #[error("invalid parameter {what}")]
    InvalidParameter { what: &'static str },
    /// The Golomb-Rice coded set is malformed.
    #[error("malformed encoded set: {0}")]
    MalformedSet(&'static str),
}

/// Errors of the protocol state machines and the primitives under them.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
#[allow(missing_docs)] // variant fields are named for what they hold
pub enum Error {
    /// A peer's message could not be decoded.
    #[error("decode error: {0}")]
    Decode(#[from] DecodeError),
    /// A well-formed message arrived in a phase that does not accept it.
    #[error("message type {message:#04x} not accepted in phase {phase}")]
    WrongPhase { phase: &'static str, message: u8 },
    /// The message belongs to another key epoch than the one in use.
    #[error("key epoch mismatch: expected {expected}, got {found}")]
    EpochMismatch { expected: u32, found: u32 },
    /// The peer answered with a different number of elements than asked.
    #[error("count mismatch: expected {expected}, got {found}")]
    CountMismatch { expected: u64, found: u64 },
    /// A local input is too large for the protocol limits.
    #[error("{what}: {value} exceeds the limit {limit}")]
    InputTooLarge {
        what: &'static str,
        value: u64,
        limit: u64,
    },
    /// The encoded set is too weak for this client's set size: the false-match
    /// bound 2^-40 would not hold.
    #[error(
        "encoded set truncates to {bits} bits, but {needed} are needed for {client_items} client items"
    )]
    TruncationTooShort {
        bits: u8,
        needed: u8,
        client_items: u64,
    },
    /// The session's label layout hides a fetched bucket among too few registry entries:
    /// fetching labels would narrow the matches down (docs/protocol/labels.md §6).
    #[error(
        "label layout too fine: {registry_items} registry entries in {buckets} buckets, \
         below the minimum of {minimum} entries per bucket (match without labels, or ask \
         the operator for a larger label bucket size)"
    )]
    LabelLayoutTooFine {
        registry_items: u64,
        buckets: u64,
        minimum: u64,
    },
    /// A run needs both the server's evaluation and its encoded set before it can finish.
    #[error("not finished: still waiting for {0}")]
    Incomplete(&'static str),
    /// Hash-to-group produced the identity (probability about 2^-252; RFC 9497 InvalidInputError).
    #[error("input hashes to the identity element")]
    IdentityElement,
    /// A key derivation failed (RFC 9497 DeriveKeyPairError).
    #[error("key derivation failed")]
    DeriveKeyPair,
    /// The worker thread pool could not be created.
    #[error("could not start worker threads: {0}")]
    ThreadPool(String),
    /// OT-PSI: the client's items could not be placed in the Cuckoo table (probability
    /// at most 2^-40 with the default table size; a retry uses fresh hash functions).
    #[error("cuckoo hashing failed to place {items} items in {bins} bins")]
    CuckooFailed { items: u64, bins: u64 },
    /// Group PSI: a member's garbled Bloom filter had no free cell for an item
    /// (probability at most 2^-40 per run with the parameters' `k`; a new run draws new
    /// nonces and so new positions).
    #[error("garbled Bloom filter of {items} items in {bits} cells is full")]
    GbfInsertionFailed { items: u64, bits: u64 },
    /// Group PSI: the leader was handed a message from a member it does not have.
    #[error("no member {index} in a group of {members} members")]
    UnknownMember { index: usize, members: usize },
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = core::result::Result<T, E>;
