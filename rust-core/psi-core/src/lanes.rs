//! Label lanes (ADR 0053): every output value of a run carries its entry's label,
//! one-time padded with bytes of the entry's OPRF digest that the server never sends, so
//! the label step needs no second protocol. Shared by OT-PSI (suite `0x02`,
//! `docs/protocol/ot-psi.md` §4.7) and CM20-PSI (suite `0x02`, `docs/protocol/cm20-psi.md`
//! §4.7); each protocol says which digest pads which lane.
//!
//! The plaintext of a lane is `lenbyte || label || zeros`, `1 + Λ` bytes: `lenbyte` is 0
//! for an entry without a label and `1 + |label|` otherwise, and `Λ` (the registry's
//! longest label, at most [`MAX_LANE_LABEL`]) is announced in the setup. The pad is bytes
//! `16 .. 17 + Λ` of the entry's 32-byte OPRF digest, whose first bytes (at most 16) are
//! the value: OT-PSI's `PHash(DS_OUT, sid, BE32(j), v)`, CM20-PSI's `H2`. Only a client
//! that holds the entry's input knows them.

use crate::error::{DecodeError, Error, Result};
use crate::wire::Reader;
use zeroize::Zeroize;

/// The longest label a lane carries (bytes): `17 + Λ` digest bytes must fit in 32.
pub const MAX_LANE_LABEL: u8 = 15;
/// Where the pad starts in the 32-byte digest: past the longest value (`L <= 16` bytes,
/// `l2 <= 128` bits).
pub(crate) const PAD_AT: usize = 16;
/// The suite byte that asks for (hello) and grants (setup) label lanes, in every protocol
/// that has them; the plain suite is `0x01`.
pub(crate) const SUITE_LANES: u8 = 0x02;

/// Reads a hello's or setup's suite byte: false for `plain`, true for [`SUITE_LANES`],
/// any other byte `InvalidParameter { what: "suite" }`.
pub(crate) fn read_suite(r: &mut Reader<'_>, plain: u8) -> Result<bool, DecodeError> {
    match r.u8()? {
        s if s == plain => Ok(false),
        SUITE_LANES => Ok(true),
        _ => Err(DecodeError::InvalidParameter { what: "suite" }),
    }
}

/// Reads the lane width `Λ` (at most [`MAX_LANE_LABEL`]).
pub(crate) fn read_width(r: &mut Reader<'_>) -> Result<u8, DecodeError> {
    let width = r.u8()?;
    if width > MAX_LANE_LABEL {
        return Err(DecodeError::InvalidParameter {
            what: "label lane width",
        });
    }
    Ok(width)
}

/// A server's labels must describe its set, one per item: otherwise
/// [`Error::CountMismatch`], not a wrong label.
pub(crate) fn check_count(labels: Option<&LaneLabels>, items: usize) -> Result<()> {
    match labels {
        Some(l) if l.len() != items => Err(Error::CountMismatch {
            expected: items as u64,
            found: l.len() as u64,
        }),
        _ => Ok(()),
    }
}

/// The labels a client asked for that the server granted: an error when the server
/// grants lanes the client did not ask for.
pub(crate) fn check_granted(asked: bool, granted: Option<u8>) -> Result<(), DecodeError> {
    if granted.is_some() && !asked {
        return Err(DecodeError::InvalidParameter { what: "suite" });
    }
    Ok(())
}

/// The server's labels in lane form, one row of `1 + width` bytes per item of its
/// [`ItemSet`](crate::items::ItemSet), in the set's (deduplicated) order. Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct LaneLabels {
    width: u8,
    rows: Vec<u8>,
}

impl std::fmt::Debug for LaneLabels {
    // Labels stay out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaneLabels")
            .field("width", &self.width)
            .field("items", &self.len())
            .finish_non_exhaustive()
    }
}

impl Drop for LaneLabels {
    fn drop(&mut self) {
        self.rows.zeroize();
    }
}

impl LaneLabels {
    /// Bytes held on the heap (the rows).
    pub fn heap_bytes(&self) -> usize {
        self.rows.capacity()
    }

    /// One label or `None` per server item, in the order of
    /// [`ItemSet::items`](crate::items::ItemSet::items). The lane width is the longest
    /// label (0 when none has one). A label over [`MAX_LANE_LABEL`] bytes is
    /// [`Error::InputTooLarge`]: such a registry answers the label query instead
    /// (`docs/protocol/labels.md`).
    pub fn new<I, L>(labels: I) -> Result<LaneLabels>
    where
        I: IntoIterator<Item = Option<L>>,
        L: AsRef<[u8]>,
    {
        let labels: Vec<Option<L>> = labels.into_iter().collect();
        let mut width = 0usize;
        for label in labels.iter().flatten() {
            let len = label.as_ref().len();
            if len > MAX_LANE_LABEL as usize {
                return Err(Error::InputTooLarge {
                    what: "lane label bytes",
                    value: len as u64,
                    limit: MAX_LANE_LABEL as u64,
                });
            }
            width = width.max(len);
        }
        let row = 1 + width;
        let mut rows = vec![0u8; labels.len() * row];
        for (dst, label) in rows.chunks_exact_mut(row).zip(&labels) {
            if let Some(label) = label {
                let label = label.as_ref();
                dst[0] = 1 + label.len() as u8;
                dst[1..1 + label.len()].copy_from_slice(label);
            }
        }
        Ok(LaneLabels {
            width: width as u8,
            rows,
        })
    }

    /// `Λ`: label bytes per lane.
    pub fn width(&self) -> u8 {
        self.width
    }

    /// Items described.
    pub fn len(&self) -> usize {
        self.rows.len() / (1 + self.width as usize)
    }

    /// True when no item is described.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Bytes of one lane, `1 + Λ`.
    pub fn lane_len(&self) -> usize {
        1 + self.width as usize
    }

    /// Item `i`'s lane, padded with `pad` (at least `1 + width` bytes).
    pub(crate) fn seal_into(&self, i: usize, pad: &[u8], out: &mut Vec<u8>) {
        let row = 1 + self.width as usize;
        let plain = &self.rows[i * row..(i + 1) * row];
        out.extend(plain.iter().zip(&pad[..row]).map(|(p, k)| p ^ k));
    }
}

/// What a matched item's lane says: `None` for an entry without a label. A lane that does
/// not decode (a length byte over `1 + Λ`, or padding that is not zero) can only come from
/// a server that does not follow the protocol: `InvalidParameter { what: "label lane" }`.
pub(crate) fn open(lane: &[u8], pad: &[u8]) -> Result<Option<Vec<u8>>> {
    let mut plain: Vec<u8> = lane.iter().zip(pad).map(|(c, k)| c ^ k).collect();
    let len = plain[0] as usize;
    let ok = len <= plain.len() && plain[len.max(1)..].iter().all(|&b| b == 0);
    let label = (ok && len > 0).then(|| plain[1..len].to_vec());
    plain.zeroize();
    if !ok {
        return Err(DecodeError::InvalidParameter { what: "label lane" }.into());
    }
    Ok(label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_and_width() {
        let l = LaneLabels::new([Some(&b"ab"[..]), None, Some(&b""[..])]).unwrap();
        assert_eq!(l.width(), 2);
        assert_eq!(l.len(), 3);
        assert_eq!(l.rows, [3, b'a', b'b', 0, 0, 0, 1, 0, 0]);
        let pad = [0x55u8; 3];
        let mut out = Vec::new();
        for i in 0..3 {
            out.clear();
            l.seal_into(i, &pad, &mut out);
            let want: [Option<&[u8]>; 3] = [Some(b"ab"), None, Some(b"")];
            assert_eq!(open(&out, &pad).unwrap().as_deref(), want[i]);
        }
        let none = LaneLabels::new(std::iter::repeat_n(None::<&[u8]>, 4)).unwrap();
        assert_eq!((none.width(), none.len()), (0, 4));
    }

    #[test]
    fn too_long_and_bad_lanes() {
        assert!(matches!(
            LaneLabels::new([Some(vec![0u8; 16])]),
            Err(Error::InputTooLarge { value: 16, .. })
        ));
        assert!(LaneLabels::new([Some(vec![7u8; 15])]).is_ok());
        let pad = [0u8; 4];
        // Length byte past the lane, non-zero padding after a short label or after "none".
        for bad in [[5u8, 0, 0, 0], [2, 9, 0, 1], [0, 0, 1, 0]] {
            assert!(open(&bad, &pad).is_err(), "{bad:?}");
        }
        assert_eq!(open(&[4, 1, 2, 3], &pad).unwrap(), Some(vec![1, 2, 3]));
    }
}
