//! Label lanes' shared test fixtures (`ot_lanes.rs`, `cm20_lanes.rs`): a labelled registry,
//! the check that a run's labels are the registry's, and the labels of the lane vectors.

use psi_core::lanes::LaneLabels;
use psi_core::{ItemSet, MatchOutput};
use std::collections::HashMap;
use std::sync::Arc;

/// The label of server item `i`: none for every fifth, the empty label for every seventh,
/// otherwise up to 11 bytes (a user id's length).
pub fn label_of(i: usize) -> Option<Vec<u8>> {
    if i.is_multiple_of(5) {
        None
    } else if i.is_multiple_of(7) {
        Some(Vec::new())
    } else {
        Some(format!("id{:09}", i * 7919).into_bytes()[..(3 + i % 9)].to_vec())
    }
}

/// A server's set `c<i>` with the labels [`label_of`], in lane form.
pub struct Registry {
    pub set: Arc<ItemSet>,
    pub labels: Arc<LaneLabels>,
    pub by_item: HashMap<Vec<u8>, Option<Vec<u8>>>,
}

/// The registry of items `c<i>` for `i` in `range`.
pub fn registry(range: std::ops::Range<usize>) -> Registry {
    let set = Arc::new(ItemSet::new(range.clone().map(|i| format!("c{i}"))));
    let by_item: HashMap<Vec<u8>, Option<Vec<u8>>> = range
        .map(|i| (format!("c{i}").into_bytes(), label_of(i)))
        .collect();
    let labels = LaneLabels::new(set.items().iter().map(|it| by_item[it].clone())).unwrap();
    Registry {
        set,
        labels: Arc::new(labels),
        by_item,
    }
}

/// The client items `c<i>` for `i` in `range`.
pub fn client_items(range: std::ops::Range<usize>) -> ItemSet {
    ItemSet::new(range.map(|i| format!("c{i}")))
}

/// The run carried labels, one per match, each the registry's.
pub fn check_labels(out: &MatchOutput, registry: &Registry) {
    let labels = out.labels.as_ref().expect("the run carried labels");
    assert_eq!(labels.0.len(), out.matches.len());
    for (m, label) in out.matches.iter().zip(&labels.0) {
        assert_eq!(label, &registry.by_item[&m.item], "match {}", m.index);
    }
}

/// The lane vectors' label of a server item of [`super::vector_sets`]: `+1555` number `i`
/// gets `u<i>`, the empty string the empty label, the `+4420` numbers none (`Λ = 4`).
pub fn vector_label(item: &str) -> Option<String> {
    match item.strip_prefix("+1555") {
        Some(number) => Some(format!("u{}", number.parse::<u32>().unwrap())),
        None if item.is_empty() => Some(String::new()),
        None => None,
    }
}

/// [`vector_label`] of every item of `server`, in lane form (in its [`ItemSet`]'s order).
pub fn vector_lane_labels(server: &[Vec<u8>]) -> Arc<LaneLabels> {
    let set = ItemSet::new(server);
    let labels = LaneLabels::new(
        set.items()
            .iter()
            .map(|it| vector_label(std::str::from_utf8(it).unwrap()).map(String::into_bytes)),
    )
    .unwrap();
    assert_eq!(labels.width(), 4);
    Arc::new(labels)
}

/// A lane run's labels as text, each checked against [`vector_label`] of its match.
pub fn vector_match_labels(out: &MatchOutput) -> Vec<Option<String>> {
    let got: Vec<Option<String>> = out
        .labels
        .clone()
        .expect("lanes")
        .into_vec()
        .into_iter()
        .map(|l| l.map(|l| String::from_utf8(l).unwrap()))
        .collect();
    assert!(!got.is_empty());
    for (m, l) in out.matches.iter().zip(&got) {
        assert_eq!(l, &vector_label(std::str::from_utf8(&m.item).unwrap()));
    }
    got
}
