//! The sync downloads (docs/protocol/sync.md §3): a registry version's tags
//! ([`Snapshot`], DH-PSI message `0x04`) and the tags added and removed between two
//! versions ([`Delta`], `0x05`). Both are public and the same for every client of an
//! epoch, so they can be cached anywhere.

use super::tag::{MAX_SYNC_WIDTH, MIN_SYNC_WIDTH, sync_tag};
use crate::dh::message_type;
use crate::error::DecodeError;
use crate::golomb;
use crate::oprf::OUTPUT_LEN;
use crate::protocol::Protocol;
use crate::wire::{self, Reader};

/// Most tags one list may hold (2^30: a registry of 10^9 entries fits).
pub const MAX_SYNC_TAGS: u32 = 1 << 30;

/// Bytes of a tag list before its coded data: count, Rice parameter, data length.
pub const TAG_LIST_HEADER_LEN: usize = 9;
/// Bytes of a snapshot message before its tag list: frame, epoch, version, width.
pub const SNAPSHOT_OVERHEAD: usize = wire::HEADER_LEN + 13;
/// Bytes of a delta message before its two tag lists: frame, epoch, two versions, width.
pub const DELTA_OVERHEAD: usize = wire::HEADER_LEN + 21;

/// A sorted multiset of `w`-bit tags, Golomb-Rice coded as in docs/protocol/dh-psi.md §4
/// (a repeated tag is a gap of 0).
#[derive(Clone, PartialEq, Eq)]
pub struct TagList {
    count: u32,
    rice_bits: u8,
    data: Vec<u8>,
}

impl std::fmt::Debug for TagList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TagList")
            .field("count", &self.count)
            .field("rice_bits", &self.rice_bits)
            .field("data_len", &self.data.len())
            .finish()
    }
}

impl TagList {
    /// Codes `tags` (any order; each below `2^width`) with the best Rice parameter.
    pub fn from_tags(mut tags: Vec<u64>, width: u8) -> TagList {
        tags.sort_unstable();
        Self::from_sorted(&tags, width)
    }

    /// Codes `sorted` (ascending, each below `2^width`).
    pub fn from_sorted(sorted: &[u64], width: u8) -> TagList {
        assert!(sorted.len() <= MAX_SYNC_TAGS as usize, "too many tags");
        let wide: Vec<u128> = sorted.iter().map(|&t| u128::from(t)).collect();
        let k = golomb::best_rice_bits(&wide, width);
        TagList {
            count: sorted.len() as u32,
            rice_bits: k,
            data: golomb::encode(&wide, width, k),
        }
    }

    /// A list from its coded parts (the synced set's merge, which codes as it goes).
    pub(super) fn from_parts(count: u32, rice_bits: u8, data: Vec<u8>) -> TagList {
        TagList {
            count,
            rice_bits,
            data,
        }
    }

    /// The list of the tags of `outputs` at `width`.
    pub fn from_outputs<'a>(
        outputs: impl IntoIterator<Item = &'a [u8; OUTPUT_LEN]>,
        width: u8,
    ) -> TagList {
        Self::from_tags(
            outputs.into_iter().map(|o| sync_tag(o, width)).collect(),
            width,
        )
    }

    /// Number of tags (with repeats).
    pub fn len(&self) -> u32 {
        self.count
    }

    /// True if the list holds no tag.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes of the coded data.
    pub fn data_len(&self) -> usize {
        self.data.len()
    }

    /// Bytes of the list on the wire.
    pub fn encoded_len(&self) -> usize {
        TAG_LIST_HEADER_LEN + self.data.len()
    }

    /// Streams the tags in ascending order, checking the coding as it goes (a
    /// malformed list is an error at the value where it shows, never a panic).
    pub fn tags(&self, width: u8) -> Tags<'_> {
        Tags(golomb::Decoder::new(
            &self.data,
            u64::from(self.count),
            width,
            self.rice_bits,
        ))
    }

    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.count.to_be_bytes());
        out.push(self.rice_bits);
        out.extend_from_slice(&(self.data.len() as u32).to_be_bytes());
        out.extend_from_slice(&self.data);
    }

    fn read(r: &mut Reader<'_>, width: u8) -> Result<TagList, DecodeError> {
        let count = r.u32()?;
        wire::check_limit("sync tag count", u64::from(count), u64::from(MAX_SYNC_TAGS))?;
        let rice_bits = r.u8()?;
        if rice_bits > width {
            return Err(DecodeError::InvalidParameter {
                what: "sync Rice parameter (at most the tag width)",
            });
        }
        let len = r.u32()? as usize;
        // Each tag takes at least k + 1 bits: refuse a count the data cannot hold before
        // decoding anything.
        if (len as u64) * 8 < u64::from(count) * (u64::from(rice_bits) + 1) {
            return Err(DecodeError::LengthMismatch {
                what: "sync tag data (too short for its count)",
                declared: len as u64,
                actual: (u64::from(count) * (u64::from(rice_bits) + 1)).div_ceil(8),
            });
        }
        let data = r.take(len)?.to_vec();
        Ok(TagList {
            count,
            rice_bits,
            data,
        })
    }
}

/// The ascending tags of a [`TagList`].
pub struct Tags<'a>(golomb::Decoder<'a>);

impl Tags<'_> {
    /// The next tag; `Ok(None)` after the last (once the padding checked out).
    pub fn next_tag(&mut self) -> Result<Option<u64>, DecodeError> {
        // Values are below 2^width <= 2^48, checked by the decoder.
        Ok(self.0.next_value()?.map(|v| v as u64))
    }
}

fn check_width(width: u8) -> Result<(), DecodeError> {
    if !(MIN_SYNC_WIDTH..=MAX_SYNC_WIDTH).contains(&width) {
        return Err(DecodeError::InvalidParameter {
            what: "sync tag width (1 to 48)",
        });
    }
    Ok(())
}

fn expect_type(found: u8, expected: u8) -> Result<(), DecodeError> {
    if found == expected {
        return Ok(());
    }
    Err(match found {
        message_type::QUERY
        | message_type::EVALUATION
        | message_type::ENCODED_SET
        | message_type::SYNC_SNAPSHOT
        | message_type::SYNC_DELTA => DecodeError::InvalidParameter {
            what: "another DH-PSI message than the sync download expected",
        },
        t => DecodeError::UnknownMessageType(t),
    })
}

/// Every entry's tag at one registry version of a sync epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// Key epoch the tags were computed under.
    pub epoch: u32,
    /// Registry version the tags are of.
    pub version: u64,
    /// Tag width `w`.
    pub width: u8,
    /// The tags.
    pub tags: TagList,
}

impl Snapshot {
    /// The snapshot of the entries whose OPRF outputs (under `epoch`'s key) are `outputs`.
    pub fn build<'a>(
        epoch: u32,
        version: u64,
        width: u8,
        outputs: impl IntoIterator<Item = &'a [u8; OUTPUT_LEN]>,
    ) -> Snapshot {
        Snapshot {
            epoch,
            version,
            width,
            tags: TagList::from_outputs(outputs, width),
        }
    }

    /// The message bytes (DH-PSI type `0x04`).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = wire::begin(
            Protocol::Dh,
            message_type::SYNC_SNAPSHOT,
            13 + self.tags.encoded_len(),
        );
        out.extend_from_slice(&self.epoch.to_be_bytes());
        out.extend_from_slice(&self.version.to_be_bytes());
        out.push(self.width);
        self.tags.write(&mut out);
        wire::finish(out)
    }

    /// Parses a snapshot message (the coded tags are checked when streamed).
    pub fn from_bytes(bytes: &[u8]) -> Result<Snapshot, DecodeError> {
        wire::decode_with(bytes, Protocol::Dh, |t, r| {
            expect_type(t, message_type::SYNC_SNAPSHOT)?;
            let epoch = r.u32()?;
            let version = r.u64()?;
            let width = r.u8()?;
            check_width(width)?;
            let tags = TagList::read(r, width)?;
            Ok(Snapshot {
                epoch,
                version,
                width,
                tags,
            })
        })
    }
}

/// The tags added and removed between registry versions `from_version` (exclusive) and
/// `to_version` (inclusive) of a sync epoch: the net change of membership, so an entry
/// added and removed again in between is in neither list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delta {
    /// Key epoch.
    pub epoch: u32,
    /// The version the delta starts from (a client holding it can apply the delta).
    pub from_version: u64,
    /// The version a client holds after applying it (`> from_version`).
    pub to_version: u64,
    /// Tag width `w` (the epoch's).
    pub width: u8,
    /// Tags of the entries added.
    pub added: TagList,
    /// Tags of the entries removed.
    pub removed: TagList,
}

impl Delta {
    /// The delta of the entries with outputs `added` and `removed` (under `epoch`'s key).
    pub fn build<'a>(
        epoch: u32,
        from_version: u64,
        to_version: u64,
        width: u8,
        added: impl IntoIterator<Item = &'a [u8; OUTPUT_LEN]>,
        removed: impl IntoIterator<Item = &'a [u8; OUTPUT_LEN]>,
    ) -> Delta {
        assert!(from_version < to_version, "a delta goes forward");
        Delta {
            epoch,
            from_version,
            to_version,
            width,
            added: TagList::from_outputs(added, width),
            removed: TagList::from_outputs(removed, width),
        }
    }

    /// The message bytes (DH-PSI type `0x05`).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = wire::begin(
            Protocol::Dh,
            message_type::SYNC_DELTA,
            21 + self.added.encoded_len() + self.removed.encoded_len(),
        );
        out.extend_from_slice(&self.epoch.to_be_bytes());
        out.extend_from_slice(&self.from_version.to_be_bytes());
        out.extend_from_slice(&self.to_version.to_be_bytes());
        out.push(self.width);
        self.added.write(&mut out);
        self.removed.write(&mut out);
        wire::finish(out)
    }

    /// Parses a delta message (the coded tags are checked when applied).
    pub fn from_bytes(bytes: &[u8]) -> Result<Delta, DecodeError> {
        wire::decode_with(bytes, Protocol::Dh, |t, r| {
            expect_type(t, message_type::SYNC_DELTA)?;
            let epoch = r.u32()?;
            let from_version = r.u64()?;
            let to_version = r.u64()?;
            if from_version >= to_version {
                return Err(DecodeError::InvalidParameter {
                    what: "sync delta versions (from must be below to)",
                });
            }
            let width = r.u8()?;
            check_width(width)?;
            let added = TagList::read(r, width)?;
            let removed = TagList::read(r, width)?;
            Ok(Delta {
                epoch,
                from_version,
                to_version,
                width,
                added,
                removed,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(list: &TagList, w: u8) -> Vec<u64> {
        let mut it = list.tags(w);
        let mut out = Vec::new();
        while let Some(t) = it.next_tag().unwrap() {
            out.push(t);
        }
        out
    }

    #[test]
    fn round_trips_keep_repeats() {
        let s = Snapshot {
            epoch: 3,
            version: 9,
            width: 12,
            tags: TagList::from_tags(vec![5, 1, 5, 4095, 0], 12),
        };
        let bytes = s.to_bytes();
        assert_eq!(bytes.len(), SNAPSHOT_OVERHEAD + s.tags.encoded_len());
        let back = Snapshot::from_bytes(&bytes).unwrap();
        assert_eq!(back, s);
        assert_eq!(all(&back.tags, 12), vec![0, 1, 5, 5, 4095]);
        let d = Delta {
            epoch: 3,
            from_version: 9,
            to_version: 11,
            width: 12,
            added: TagList::from_tags(vec![7, 7], 12),
            removed: TagList::from_tags(vec![], 12),
        };
        let bytes = d.to_bytes();
        assert_eq!(
            bytes.len(),
            DELTA_OVERHEAD + d.added.encoded_len() + d.removed.encoded_len()
        );
        assert_eq!(Delta::from_bytes(&bytes).unwrap(), d);
    }

    #[test]
    fn bad_messages_are_typed_errors() {
        let s = Snapshot {
            epoch: 1,
            version: 1,
            width: 10,
            tags: TagList::from_tags((0..100).collect(), 10),
        };
        let good = s.to_bytes();
        // Every truncation fails cleanly.
        for cut in 0..good.len() {
            assert!(Snapshot::from_bytes(&good[..cut]).is_err());
        }
        // A width out of range.
        let mut bad = good.clone();
        bad[wire::HEADER_LEN + 12] = 49;
        assert!(matches!(
            Snapshot::from_bytes(&bad),
            Err(DecodeError::InvalidParameter { .. })
        ));
        // A count the data cannot hold.
        let mut bad = good.clone();
        bad[wire::HEADER_LEN + 13..wire::HEADER_LEN + 17]
            .copy_from_slice(&100_000u32.to_be_bytes());
        assert!(matches!(
            Snapshot::from_bytes(&bad),
            Err(DecodeError::LengthMismatch { .. })
        ));
        // A delta read as a snapshot, and the other way round.
        let d = Delta::build(1, 1, 2, 10, &[[1u8; 64]], &[]).to_bytes();
        assert!(Snapshot::from_bytes(&d).is_err());
        assert!(Delta::from_bytes(&good).is_err());
        // A delta that goes backwards.
        let mut back = d.clone();
        back[wire::HEADER_LEN + 4..wire::HEADER_LEN + 12].copy_from_slice(&5u64.to_be_bytes());
        assert!(Delta::from_bytes(&back).is_err());
        // A coded value above the width shows when the tags are streamed.
        let wide = TagList::from_tags(vec![1 << 11], 12);
        let mut it = wide.tags(10);
        assert!(it.next_tag().is_err());
    }
}
