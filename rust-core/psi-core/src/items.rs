//! Input sets: arbitrary byte strings, de-duplicated before use.

use std::collections::HashSet;

/// A de-duplicated input set. Keeps the first occurrence of each item and the
/// index it had in the caller's list, so results can point back to it.
#[derive(Clone, Default)]
pub struct ItemSet {
    items: Vec<Vec<u8>>,
    original_index: Vec<usize>,
    duplicates: usize,
}

impl ItemSet {
    /// Builds the set from any list of byte strings (contacts as UTF-8, say).
    pub fn new<I, T>(items: I) -> Self
    where
        I: IntoIterator<Item = T>,
        T: AsRef<[u8]>,
    {
        let mut seen: HashSet<Vec<u8>> = HashSet::new();
        let mut set = ItemSet::default();
        for (i, item) in items.into_iter().enumerate() {
            let item = item.as_ref();
            if seen.contains(item) {
                set.duplicates += 1;
                continue;
            }
            seen.insert(item.to_vec());
            set.items.push(item.to_vec());
            set.original_index.push(i);
        }
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

    /// Index in the caller's original list of the `i`-th distinct item.
    pub fn original_index(&self, i: usize) -> usize {
        self.original_index[i]
    }
}

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
    }
}
