//! Sync mode for large registries (docs/protocol/sync.md; ADR 0047 §3): instead of the
//! encoded set (6.45 bytes per entry), a client downloads once a *snapshot* of every
//! entry's short tag (a few bits per entry) and afterwards only *deltas* between registry
//! versions. A run is a DH-PSI query and evaluation as always; the items whose tag is in
//! the synced set are candidates, and the confirmation fetch, with one slot per item,
//! decides which are matches and carries their labels.
//!
//! - [`sync_tag`], [`sync_width`]: the tags (§2).
//! - [`Snapshot`], [`Delta`]: the downloads (§3).
//! - [`SyncedSet`]: the client's copy, deltas applied in any order of arrival (§4).
//! - [`ConfirmStore`], [`ConfirmClient`]: the confirmation, server and client (§5).
//! - [`sizes`]: the byte counts the design predicts (§6), which `sync_scale` checks.
//!
//! Sans-IO like the rest of the crate: the server's storage, routes and the client's
//! cache file are the drivers' (not yet built: see ADR 0047's status).

mod confirm;
mod messages;
pub mod sizes;
mod synced;
mod tag;

pub use confirm::{
    ConfirmClient, ConfirmStore, Confirmation, Confirmed, FETCH_VERSION, FetchRequest,
    MODE_CONFIRM, MODE_LABELS, RECORD_LABEL_OVERHEAD, RECORD_MIN_LEN, REQUEST_HEADER_LEN,
    RESPONSE_HEADER_LEN, RecordV2, confirm_tag, open_record, parse_records, seal_record,
};
pub use messages::{
    DELTA_OVERHEAD, Delta, MAX_SYNC_TAGS, SNAPSHOT_OVERHEAD, Snapshot, TAG_LIST_HEADER_LEN,
    TagList, Tags,
};
pub use synced::{MAX_PENDING_DELTAS, Offered, SyncedSet};
pub use tag::{
    DEFAULT_EXTRA_BITS, MAX_SYNC_WIDTH, MIN_SYNC_WIDTH, candidate_rate, sync_tag, sync_width,
};
