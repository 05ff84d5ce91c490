//! Input sets: arbitrary byte strings, de-duplicated before use.

use std::collections::HashSet;
use zeroize::{Zeroize, ZeroizeOnDrop};

/// A de-duplicated input set. Keeps the first occurrence of each item and the
/// index it had in the caller's list, so results can point back to it.
///
/// The items are contact data: they are zeroized when the set is dropped (and repeats
/// dropped by [`ItemSet::new`] are zeroized at once).
#[derive(Clone, Default)]
pub struct ItemSet {
    items: Vec<Vec<u8>>,
    /// `None` when no repeat was dropped: the `i`-th item is the caller's `i`-th (a
    /// registry's identifiers are distinct, and the index would cost 8 bytes each).
    original_index: Option<Vec<usize>>,
    duplicates: usize,
}

impl ItemSet {
    /// Builds the set from any list of byte strings (contacts as UTF-8, say).
    pub fn new<I, T>(items: I) -> Self
    where
        I: IntoIterator<Item = T>,
        T: AsRef<[u8]>,
    {
        Self::from_vecs(items.into_iter().map(|x| x.as_ref().to_vec()).collect())
    }

    /// As [`ItemSet::new`], taking the items' buffers instead of copying them (a server
    /// moves its registry's identifiers in, so they are not held twice while it loads).
    pub fn from_vecs(all: Vec<Vec<u8>>) -> Self {
        // First pass marks first occurrences (borrowing, so each item is stored once).
        let mut keep = vec![false; all.len()];
        let mut seen: HashSet<&[u8]> = HashSet::with_capacity(all.len());
        for (k, item) in keep.iter_mut().zip(&all) {
            *k = seen.insert(item.as_slice());
        }
        drop(seen);
        let distinct = keep.iter().filter(|&&k| k).count();
        if distinct == all.len() {
            // Nothing to drop: the list is the set, in place.
            return ItemSet {
                items: all,
                original_index: None,
                duplicates: 0,
            };
        }
        let mut index = Vec::with_capacity(distinct);
        let mut set = ItemSet {
            items: Vec::with_capacity(distinct),
            original_index: None,
            duplicates: all.len() - distinct,
        };
        for (i, (mut item, k)) in all.into_iter().zip(keep).enumerate() {
            if k {
                set.items.push(item);
                index.push(i);
            } else {
                item.zeroize();
            }
        }
        set.original_index = Some(index);
        set
    }

    /// Number of distinct items.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when there are no items.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// How many input entries were dropped as repeats of an earlier one.
    pub fn duplicates(&self) -> usize {
        self.duplicates
    }

    /// The distinct items, in first-seen order.
    pub fn items(&self) -> &[Vec<u8>] {
        &self.items
    }

    /// Bytes this set holds on the heap: the items and their index (what a server's
    /// memory report counts; [`crate::ServerSet::heap_bytes`]).
    pub fn heap_bytes(&self) -> usize {
        self.items.capacity() * std::mem::size_of::<Vec<u8>>()
            + self.items.iter().map(Vec::capacity).sum::<usize>()
            + self
                .original_index
                .as_ref()
                .map_or(0, |x| x.capacity() * std::mem::size_of::<usize>())
    }

    /// Index in the caller's original list of the `i`-th distinct item.
    pub fn original_index(&self, i: usize) -> usize {
        match &self.original_index {
            Some(index) => index[i],
            None => {
                assert!(i < self.items.len(), "item index out of range");
                i
            }
        }
    }
}

impl Drop for ItemSet {
    fn drop(&mut self) {
        // `Vec<u8>::zeroize` wipes each item's whole allocation, not just its length.
        for item in &mut self.items {
            item.zeroize();
        }
    }
}

impl ZeroizeOnDrop for ItemSet {}

impl std::fmt::Debug for ItemSet {
    // Never print the items themselves: they are contact data.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ItemSet")
            .field("len", &self.items.len())
            .field("duplicates", &self.duplicates)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dedup_keeps_first_index() {
        let s = ItemSet::new(["a", "b", "a", "", "b", ""]);
        assert_eq!(s.len(), 3);
        assert_eq!(s.duplicates(), 3);
        assert_eq!(s.items(), &[b"a".to_vec(), b"b".to_vec(), b"".to_vec()]);
        assert_eq!(s.original_index(2), 3);
        assert_eq!(format!("{s:?}"), "ItemSet { len: 3, duplicates: 3 }");
        let moved = ItemSet::from_vecs(
            ["a", "b", "a", "", "b", ""]
                .map(|x| x.as_bytes().to_vec())
                .to_vec(),
        );
        assert_eq!(moved.items(), s.items());
        assert_eq!((moved.duplicates(), moved.original_index(2)), (3, 3));
        // Without repeats the index is the identity, and costs nothing.
        let distinct = ItemSet::new(["x", "y", "z"]);
        assert_eq!(
            (distinct.original_index(0), distinct.original_index(2)),
            (0, 2)
        );
        assert_eq!(
            distinct.heap_bytes(),
            3 * std::mem::size_of::<Vec<u8>>() + 3
        );
        assert!(std::panic::catch_unwind(|| distinct.original_index(3)).is_err());
    }
}
