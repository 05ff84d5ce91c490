//! Input sets: arbitrary byte strings, de-duplicated before use.

use std::collections::HashSet;
use zeroize::{Zeroize, ZeroizeOnDrop};

/// A list of byte strings read by position: what the batch functions (the OPRF's
/// [`blind_batch`](crate::oprf::blind_batch) and [`evaluate_batch`](crate::oprf::evaluate_batch),
/// the protocols' digests) take, so a set's items are read where they lie, whether in an
/// [`ItemSet`]'s single buffer or in a list of vectors.
pub trait ItemList: Sync {
    /// Number of items.
    fn count(&self) -> usize;
    /// The `i`-th item. Panics if `i >= count()`.
    fn item(&self, i: usize) -> &[u8];
}

impl<T: AsRef<[u8]> + Sync> ItemList for [T] {
    fn count(&self) -> usize {
        self.len()
    }
    fn item(&self, i: usize) -> &[u8] {
        self[i].as_ref()
    }
}

impl<T: AsRef<[u8]> + Sync> ItemList for Vec<T> {
    fn count(&self) -> usize {
        self.len()
    }
    fn item(&self, i: usize) -> &[u8] {
        self[i].as_ref()
    }
}

impl<const N: usize, T: AsRef<[u8]> + Sync> ItemList for [T; N] {
    fn count(&self) -> usize {
        N
    }
    fn item(&self, i: usize) -> &[u8] {
        self[i].as_ref()
    }
}

/// A de-duplicated input set. Keeps the first occurrence of each item and the
/// index it had in the caller's list, so results can point back to it.
///
/// The items lie end to end in one buffer, with the end of each (a registry of 10^7
/// identifiers holds them in their own bytes plus 8 per item, not a vector and an
/// allocation each: about 40 bytes per item less).
///
/// The items are contact data: they are zeroized when the set is dropped (and repeats
/// dropped by [`ItemSet::new`] are zeroized as the set is built).
#[derive(Clone, Default)]
pub struct ItemSet {
    /// Every item's bytes, in order.
    bytes: Vec<u8>,
    /// `ends[i]` is where item `i` ends in `bytes` (it starts where item `i - 1` ends).
    ends: Vec<usize>,
    /// `None` when no repeat was dropped: the `i`-th item is the caller's `i`-th (a
    /// registry's identifiers are distinct, and the index would cost 8 bytes each).
    original_index: Option<Vec<usize>>,
    duplicates: usize,
}

/// The items of an [`ItemSet`], borrowed: indexed (`items[i]` is the `i`-th item's
/// bytes) and iterated in order.
#[derive(Clone, Copy)]
pub struct Items<'a> {
    bytes: &'a [u8],
    ends: &'a [usize],
}

impl<'a> Items<'a> {
    /// Number of items.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The `i`-th item, or `None` past the end.
    pub fn get(&self, i: usize) -> Option<&'a [u8]> {
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Some(&self.bytes[start..end])
    }

    /// The items in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &'a [u8]> + DoubleEndedIterator + 'a {
        let (bytes, ends) = (self.bytes, self.ends);
        (0..ends.len()).map(move |i| {
            let start = if i == 0 { 0 } else { ends[i - 1] };
            &bytes[start..ends[i]]
        })
    }

    /// The items copied out, one vector each (for tests and small client sets).
    pub fn to_vecs(&self) -> Vec<Vec<u8>> {
        self.iter().map(<[u8]>::to_vec).collect()
    }
}

impl<'a> std::ops::Index<usize> for Items<'a> {
    type Output = [u8];
    fn index(&self, i: usize) -> &[u8] {
        match self.get(i) {
            Some(item) => item,
            None => panic!("item index {i} out of range for {} items", self.len()),
        }
    }
}

impl ItemList for Items<'_> {
    fn count(&self) -> usize {
        self.len()
    }
    fn item(&self, i: usize) -> &[u8] {
        &self[i]
    }
}

impl ItemList for ItemSet {
    fn count(&self) -> usize {
        self.len()
    }
    fn item(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }
}

/// Builds an [`ItemSet`] item by item into a buffer sized up front
/// ([`ItemSet::with_capacity`]), so a registry's identifiers are copied in once as they
/// are read and no list of vectors is held beside the set.
#[derive(Default)]
pub struct ItemSetBuilder {
    set: ItemSet,
}

impl ItemSetBuilder {
    /// Appends `item` (repeats are dropped by [`ItemSetBuilder::build`]).
    pub fn push(&mut self, item: &[u8]) {
        let bytes = &mut self.set.bytes;
        if bytes.capacity() - bytes.len() < item.len() {
            // Grow by hand, so the buffer left behind is wiped, not freed with contact
            // data in it (as `Vec`'s own growth would).
            let mut grown =
                Vec::with_capacity((bytes.len() + item.len()).max(2 * bytes.capacity()));
            grown.extend_from_slice(bytes);
            bytes.zeroize();
            *bytes = grown;
        }
        bytes.extend_from_slice(item);
        self.set.ends.push(self.set.bytes.len());
    }

    /// The set: the first occurrence of each item, in order. Repeats are zeroized.
    pub fn build(self) -> ItemSet {
        let mut set = self.set;
        let n = set.ends.len();
        // Mark first occurrences, borrowing the buffer.
        let mut keep = vec![false; n];
        {
            let items = set.items();
            let mut seen: HashSet<&[u8]> = HashSet::with_capacity(n);
            for (i, k) in keep.iter_mut().enumerate() {
                *k = seen.insert(&items[i]);
            }
        }
        let distinct = keep.iter().filter(|&&k| k).count();
        if distinct == n {
            // Nothing to drop: the index is the identity, and costs nothing.
            return set.fitted();
        }
        // Move the kept items left in place (an item only ever moves towards the
        // front), then wipe what is left past the end.
        let mut index = Vec::with_capacity(distinct);
        let (mut write, mut start, mut kept) = (0, 0, 0);
        for (i, k) in keep.into_iter().enumerate() {
            let end = set.ends[i];
            if k {
                set.bytes.copy_within(start..end, write);
                write += end - start;
                set.ends[kept] = write;
                index.push(i);
                kept += 1;
            }
            start = end;
        }
        set.bytes[write..].zeroize();
        set.bytes.truncate(write);
        set.ends.truncate(kept);
        set.original_index = Some(index);
        set.duplicates = n - distinct;
        set.fitted()
    }
}

impl ItemSet {
    /// The set with buffers of exactly its size; a larger item buffer is wiped once
    /// copied (a registry's, sized up front, is already exact and is not copied).
    fn fitted(mut self) -> ItemSet {
        if self.bytes.capacity() != self.bytes.len() {
            let exact = self.bytes.as_slice().to_vec();
            self.bytes.zeroize();
            self.bytes = exact;
        }
        self.ends.shrink_to_fit();
        self
    }
}

impl ItemSet {
    /// Builds the set from any list of byte strings (contacts as UTF-8, say).
    pub fn new<I, T>(items: I) -> Self
    where
        I: IntoIterator<Item = T>,
        T: AsRef<[u8]>,
    {
        let mut builder = ItemSetBuilder::default();
        for item in items {
            builder.push(item.as_ref());
        }
        builder.build()
    }

    /// As [`ItemSet::new`], taking the items' buffers: each is copied into the set's
    /// buffer, then zeroized and freed.
    pub fn from_vecs(all: Vec<Vec<u8>>) -> Self {
        let bytes = all.iter().map(Vec::len).sum();
        let mut builder = ItemSet::with_capacity(all.len(), bytes);
        for mut item in all {
            builder.push(&item);
            item.zeroize();
        }
        builder.build()
    }

    /// A builder for a set of up to `items` items of `bytes` bytes in all (more may be
    /// pushed; the buffers then grow).
    pub fn with_capacity(items: usize, bytes: usize) -> ItemSetBuilder {
        ItemSetBuilder {
            set: ItemSet {
                bytes: Vec::with_capacity(bytes),
                ends: Vec::with_capacity(items),
                original_index: None,
                duplicates: 0,
            },
        }
    }

    /// Number of distinct items.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// True when there are no items.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// How many input entries were dropped as repeats of an earlier one.
    pub fn duplicates(&self) -> usize {
        self.duplicates
    }

    /// The distinct items, in first-seen order.
    pub fn items(&self) -> Items<'_> {
        Items {
            bytes: &self.bytes,
            ends: &self.ends,
        }
    }

    /// Bytes this set holds on the heap: the items, their ends and their index (what a
    /// server's memory report counts; [`crate::ServerSet::heap_bytes`]).
    pub fn heap_bytes(&self) -> usize {
        self.bytes.capacity()
            + self.ends.capacity() * std::mem::size_of::<usize>()
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
                assert!(i < self.len(), "item index out of range");
                i
            }
        }
    }
}

impl Drop for ItemSet {
    fn drop(&mut self) {
        // `Vec<u8>::zeroize` wipes the whole allocation, not just its length.
        self.bytes.zeroize();
    }
}

impl ZeroizeOnDrop for ItemSet {}

impl std::fmt::Debug for ItemSet {
    // Never print the items themselves: they are contact data.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ItemSet")
            .field("len", &self.len())
            .field("duplicates", &self.duplicates)
            .finish()
    }
}

impl std::fmt::Debug for Items<'_> {
    // As the set: the count only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Items").field("len", &self.len()).finish()
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
        assert_eq!(
            s.items().to_vecs(),
            [b"a".to_vec(), b"b".to_vec(), b"".to_vec()]
        );
        assert_eq!((&s.items()[1], s.items().get(3)), (&b"b"[..], None));
        assert_eq!(s.items().iter().next_back(), Some(&b""[..]));
        assert_eq!(s.original_index(2), 3);
        assert_eq!(format!("{s:?}"), "ItemSet { len: 3, duplicates: 3 }");
        let moved = ItemSet::from_vecs(
            ["a", "b", "a", "", "b", ""]
                .map(|x| x.as_bytes().to_vec())
                .to_vec(),
        );
        assert_eq!(moved.items().to_vecs(), s.items().to_vecs());
        assert_eq!((moved.duplicates(), moved.original_index(2)), (3, 3));
        // Without repeats the index is the identity, and costs nothing.
        let distinct = ItemSet::new(["x", "y", "z"]);
        assert_eq!(
            (distinct.original_index(0), distinct.original_index(2)),
            (0, 2)
        );
        // One buffer of the items' bytes and an end each: no vector per item.
        assert_eq!(distinct.heap_bytes(), 3 + 3 * std::mem::size_of::<usize>());
        assert!(std::panic::catch_unwind(|| distinct.original_index(3)).is_err());
    }

    #[test]
    fn the_buffer_holds_what_a_list_of_vectors_would() {
        // Items of every length 0..40 with repeats scattered, pushed one by one (the
        // buffer grows by hand) and from vectors (sized up front): both give the first
        // occurrences in order, at their original indices, in a buffer of exact size.
        let all: Vec<Vec<u8>> = (0..500u32)
            .map(|i| {
                let k = (i * 7919) % 211;
                (0..k % 40)
                    .map(|b| (k as u8).wrapping_add(b as u8))
                    .collect()
            })
            .collect();
        let mut seen = HashSet::new();
        let expected: Vec<(usize, Vec<u8>)> = all
            .iter()
            .enumerate()
            .filter(|(_, x)| seen.insert(x.to_vec()))
            .map(|(i, x)| (i, x.clone()))
            .collect();
        for set in [ItemSet::new(&all), ItemSet::from_vecs(all.clone())] {
            assert_eq!(set.len(), expected.len());
            assert_eq!(set.duplicates(), all.len() - expected.len());
            for (j, (i, x)) in expected.iter().enumerate() {
                assert_eq!((set.original_index(j), &set.items()[j]), (*i, x.as_slice()));
                assert_eq!(set.item(j), x.as_slice());
            }
            let total: usize = expected.iter().map(|(_, x)| x.len()).sum();
            assert_eq!(set.bytes.capacity(), total);
            assert_eq!(set.items().iter().count(), set.len());
        }
    }
}
