//! Sync mode (docs/protocol/sync.md, ADR 0047 §3) through the real messages: a real
//! DH-PSI query and evaluation, the synced set from a snapshot and deltas, the
//! confirmation fetch; checked against the plain intersection and the registry's labels.

use psi_core::dh::{DhClient, DhServer, ServerKey};
use psi_core::sync::{
    self, ConfirmClient, ConfirmStore, Delta, FetchRequest, Offered, Snapshot, SyncedSet,
};
use psi_core::{DecodeError, Error, ItemSet, Threads};
use rand_chacha::ChaCha20Rng;
use rand_core::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};

mod common;

use common::{expected, items};

/// A registry at one version: items and their labels.
#[derive(Clone, Default)]
struct Registry {
    entries: BTreeMap<Vec<u8>, Option<String>>,
}

impl Registry {
    fn with(n: usize) -> Registry {
        let mut r = Registry::default();
        for (i, it) in items("r", 0..n).into_iter().enumerate() {
            let label = match i % 4 {
                0 => None,
                1 => Some(String::new()),
                _ => Some(format!("user-{i}")),
            };
            r.entries.insert(it, label);
        }
        r
    }

    fn items(&self) -> Vec<Vec<u8>> {
        self.entries.keys().cloned().collect()
    }
}

/// The items `new` holds and `old` does not, and those `old` holds and `new` does not.
fn membership_changes(old: &Registry, new: &Registry) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let only = |a: &Registry, b: &Registry| -> Vec<Vec<u8>> {
        a.entries
            .keys()
            .filter(|k| !b.entries.contains_key(*k))
            .cloned()
            .collect()
    };
    (only(new, old), only(old, new))
}

struct Server {
    dh: DhServer,
    width: u8,
}

impl Server {
    fn new(seed: u64, width: u8) -> Server {
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        Server {
            dh: DhServer::new(ServerKey::random(1, &mut rng), 4096, Threads::new(1)),
            width,
        }
    }

    fn outputs(&self, items: &[Vec<u8>]) -> Vec<[u8; 64]> {
        self.dh.outputs(&ItemSet::new(items)).unwrap()
    }

    fn snapshot(&self, reg: &Registry, version: u64) -> Snapshot {
        let outs = self.outputs(&reg.items());
        Snapshot::build(self.dh.epoch(), version, self.width, &outs)
    }

    fn delta(&self, old: &Registry, new: &Registry, from: u64, to: u64) -> Delta {
        let (added, removed) = membership_changes(old, new);
        let a = self.outputs(&added);
        let r = self.outputs(&removed);
        Delta::build(self.dh.epoch(), from, to, self.width, &a, &r)
    }

    fn store(&self, reg: &Registry, version: u64, bucket_size: usize) -> ConfirmStore {
        let its = reg.items();
        let outs = self.outputs(&its);
        let labels: Vec<Option<&str>> = its.iter().map(|k| reg.entries[k].as_deref()).collect();
        let mut rng = ChaCha20Rng::seed_from_u64(version);
        ConfirmStore::build(
            self.dh.epoch(),
            version,
            outs.iter().zip(labels.iter().copied()),
            bucket_size,
            &mut rng,
        )
    }
}

/// What [`run`] returns: matched original indices, their labels, the request and the
/// response bytes, the confirmation.
type Run = (
    Vec<usize>,
    Vec<Option<String>>,
    Vec<u8>,
    Vec<u8>,
    sync::Confirmation,
);

/// One run: the real OPRF query and evaluation, candidates from `synced`, the
/// confirmation against `store`. Returns (matched indices, labels, the request bytes,
/// the response bytes, the confirmation).
fn run(
    srv: &Server,
    synced: &SyncedSet,
    store: &ConfirmStore,
    registry_items: u64,
    client: &[Vec<u8>],
    seed: u64,
) -> Run {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let set = ItemSet::new(client);
    let (mut c, query) =
        DhClient::start(set.clone(), srv.dh.epoch(), Threads::new(1), &mut rng).unwrap();
    c.handle(&srv.dh.handle_query(&query).unwrap()).unwrap();
    let outputs = c.into_outputs().unwrap();
    let (confirm, request) = ConfirmClient::start(
        outputs.as_slice(),
        synced,
        store.bucket_bits(),
        registry_items,
        &mut rng,
    )
    .unwrap();
    let response = store.answer(&request, set.len()).unwrap();
    let conf = confirm.finish(&response).unwrap();
    let mut hits: Vec<(usize, Option<String>)> = conf
        .matches
        .iter()
        .map(|m| (set.original_index(m.index), m.label.clone()))
        .collect();
    hits.sort();
    let (idx, labels) = hits.into_iter().unzip();
    (idx, labels, request, response, conf)
}

#[test]
fn a_run_finds_the_plain_intersection_with_the_registrys_labels() {
    let reg = Registry::with(3_000);
    let srv = Server::new(1, sync::sync_width(3_000, sync::DEFAULT_EXTRA_BITS));
    let synced = SyncedSet::from_snapshot(srv.snapshot(&reg, 1)).unwrap();
    let store = srv.store(&reg, 1, 8);
    let mut client = items("r", 2_900..3_100); // 100 in the registry
    client.extend(items("x", 0..300));
    client.push(b"r2950".to_vec()); // a duplicate
    let (idx, labels, _, _, conf) = run(&srv, &synced, &store, 3_000, &client, 7);
    let reg_items = reg.items();
    assert_eq!(idx, expected(&client, &reg_items));
    for (i, l) in idx.iter().zip(&labels) {
        assert_eq!(l, &reg.entries[&client[*i]], "label of item {i}");
    }
    // Every match was a candidate, and some non-members were too (rho about 0.5).
    assert!(conf.candidates >= idx.len());
    assert!(conf.candidates < client.len());
    assert_eq!((conf.have_version, conf.served_version), (1, 1));
}

#[test]
fn the_traffic_has_one_shape_for_any_number_of_candidates_and_matches() {
    let reg = Registry::with(4_000);
    let srv = Server::new(2, sync::sync_width(4_000, 1));
    let store = srv.store(&reg, 1, 8);
    let full = SyncedSet::from_snapshot(srv.snapshot(&reg, 1)).unwrap();
    let empty = SyncedSet::from_snapshot(srv.snapshot(&Registry::default(), 1)).unwrap();
    let n = 100;
    let cases: Vec<(&SyncedSet, Vec<Vec<u8>>)> = vec![
        (&empty, items("r", 0..n)), // no candidates at all
        (&full, items("r", 0..n)),  // all candidates, all matches
        (&full, items("x", 0..n)),  // some candidates, no match
        (
            &full,
            items("r", 0..n / 2)
                .into_iter()
                .chain(items("x", 0..n / 2))
                .collect(),
        ),
    ];
    let mut shapes = BTreeSet::new();
    for (i, (synced, client)) in cases.iter().enumerate() {
        let (idx, _, req, resp, _) = run(&srv, synced, &store, 4_000, client, i as u64);
        let sections =
            psi_core::labels::messages::split_response(&resp[sync::RESPONSE_HEADER_LEN..])
                .unwrap()
                .len();
        shapes.insert((req.len(), sections));
        if i == 1 {
            assert_eq!(idx.len(), n);
        }
    }
    let k = psi_core::labels::fetch_buckets(n, store.bucket_bits());
    assert_eq!(
        shapes.into_iter().collect::<Vec<_>>(),
        vec![(FetchRequest::len_for(k), k)]
    );
}

/// A registry's history: version v is `hist[v]` (v = 1 ..), with adds and removes.
fn history(seed: u64, start: usize, versions: usize) -> Vec<Registry> {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let mut reg = Registry::with(start);
    let mut out = vec![Registry::default(), reg.clone()];
    let mut next = 0;
    for _ in 1..versions {
        // Remove a few, add a few, re-add one removed earlier.
        let keys = reg.items();
        for _ in 0..5 {
            let k = &keys[(rng.next_u32() as usize) % keys.len()];
            reg.entries.remove(k);
        }
        for _ in 0..7 {
            reg.entries.insert(
                format!("n{seed}-{next}").into_bytes(),
                Some(format!("new-{next}")),
            );
            next += 1;
        }
        out.push(reg.clone());
    }
    out
}

fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![vec![]];
    }
    let mut out = Vec::new();
    for p in permutations(n - 1) {
        for i in 0..=p.len() {
            let mut q = p.clone();
            q.insert(i, n - 1);
            out.push(q);
        }
    }
    out
}

#[test]
fn deltas_in_any_order_of_arrival_give_the_snapshot() {
    let hist = history(3, 500, 5); // versions 1..=5
    let srv = Server::new(3, 9); // narrow: repeated tags occur
    let target = srv.snapshot(&hist[5], 5).to_bytes();
    let deltas: Vec<Delta> = (1..5)
        .map(|v| srv.delta(&hist[v], &hist[v + 1], v as u64, v as u64 + 1))
        .collect();
    for order in permutations(deltas.len()) {
        let mut set = SyncedSet::from_snapshot(srv.snapshot(&hist[1], 1)).unwrap();
        for &i in &order {
            set.offer(deltas[i].clone()).unwrap();
            // A duplicate arrival changes nothing.
            set.offer(deltas[i].clone()).unwrap();
        }
        assert_eq!(set.version(), 5, "order {order:?}");
        assert_eq!(set.pending(), 0);
        assert_eq!(set.to_snapshot_bytes(), target, "order {order:?}");
    }
}

#[test]
fn a_client_two_versions_behind_catches_up_with_one_compacted_delta() {
    let hist = history(4, 800, 4);
    let srv = Server::new(4, 11);
    let mut set = SyncedSet::from_snapshot(srv.snapshot(&hist[2], 2)).unwrap();
    let compacted = srv.delta(&hist[2], &hist[4], 2, 4);
    assert_eq!(
        set.offer(compacted).unwrap(),
        Offered::Applied { version: 4 }
    );
    assert_eq!(
        set.to_snapshot_bytes(),
        srv.snapshot(&hist[4], 4).to_bytes()
    );
    // The single-version deltas are now stale; a delta that straddles the version
    // cannot be applied and leaves the set alone.
    assert_eq!(
        set.offer(srv.delta(&hist[3], &hist[4], 3, 4)).unwrap(),
        Offered::Stale
    );
    let before = set.to_snapshot_bytes();
    let mut fresh = SyncedSet::from_snapshot(srv.snapshot(&hist[3], 3)).unwrap();
    assert!(fresh.offer(srv.delta(&hist[2], &hist[4], 2, 4)).is_err());
    assert_eq!(fresh.version(), 3);
    assert_eq!(set.to_snapshot_bytes(), before);
}

#[test]
fn removed_entries_stop_matching_and_added_ones_wait_for_their_delta() {
    let hist = history(5, 2_000, 2);
    let srv = Server::new(5, sync::sync_width(2_000, 1));
    let old = &hist[1];
    let new = &hist[2];
    let (added, removed) = membership_changes(old, new);
    assert!(!removed.is_empty() && !added.is_empty());
    let mut client = removed.clone();
    client.extend(added.iter().cloned());
    client.extend(
        items("r", 1_000..1_050)
            .into_iter()
            .filter(|k| new.entries.contains_key(k)),
    );
    let store = srv.store(new, 2, 8);
    let r_items = new.entries.len() as u64;

    // A client still at version 1: removed entries are candidates but have no record, so
    // they do not match; added ones are mostly not candidates yet (missed until the delta).
    let at1 = SyncedSet::from_snapshot(srv.snapshot(old, 1)).unwrap();
    let (idx, _, _, _, conf) = run(&srv, &at1, &store, r_items, &client, 1);
    let got: BTreeSet<&Vec<u8>> = idx.iter().map(|&i| &client[i]).collect();
    assert!(removed.iter().all(|k| !got.contains(k)));
    // Whatever matches is in the registry now: an added entry matches early only when
    // its tag happens to equal an older entry's (a false candidate confirmed), never a
    // wrong match.
    let truth: BTreeSet<usize> = expected(&client, &new.items()).into_iter().collect();
    assert!(idx.iter().all(|i| truth.contains(i)));
    let early = added.iter().filter(|k| got.contains(k)).count();
    assert!(
        early < added.len(),
        "most added entries wait for their delta"
    );
    assert_eq!((conf.have_version, conf.served_version), (1, 2));

    // After the delta: exactly the plain intersection.
    let mut at2 = at1.clone();
    at2.offer(srv.delta(old, new, 1, 2)).unwrap();
    let (idx, labels, _, _, _) = run(&srv, &at2, &store, r_items, &client, 2);
    assert_eq!(idx, expected(&client, &new.items()));
    for (i, l) in idx.iter().zip(&labels) {
        assert_eq!(l, &new.entries[&client[*i]]);
    }
}

#[test]
fn a_rotation_mid_sync_is_refused_cleanly() {
    let hist = history(6, 300, 2);
    let srv = Server::new(6, 10);
    let mut set = SyncedSet::from_snapshot(srv.snapshot(&hist[1], 1)).unwrap();
    let mut rng = ChaCha20Rng::seed_from_u64(66);
    let rotated = Server {
        dh: DhServer::new(
            ServerKey::random(1, &mut rng).rotate(&mut rng),
            4096,
            Threads::new(1),
        ),
        width: 10,
    };
    let before = set.to_snapshot_bytes();
    let err = set
        .offer(rotated.delta(&hist[1], &hist[2], 1, 2))
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::EpochMismatch {
                expected: 1,
                found: 2
            }
        ),
        "{err:?}"
    );
    assert_eq!(set.to_snapshot_bytes(), before);
    // A run against the new epoch's store is refused by the server: the cache is stale.
    let store = rotated.store(&hist[2], 2, 8);
    let mut crng = ChaCha20Rng::seed_from_u64(1);
    let outs = srv.outputs(&items("r", 0..20));
    let (_, req) = ConfirmClient::start(&outs, &set, store.bucket_bits(), 300, &mut crng).unwrap();
    assert!(matches!(
        store.answer(&req, 20),
        Err(Error::EpochMismatch { .. })
    ));
}

#[test]
fn a_cache_is_read_back_or_refused_never_misread() {
    let srv = Server::new(7, 12);
    let set = SyncedSet::from_snapshot(srv.snapshot(&Registry::with(1_000), 3)).unwrap();
    let cache = set.to_cache();
    let back = SyncedSet::from_cache(&cache).unwrap();
    assert_eq!(back.to_snapshot_bytes(), set.to_snapshot_bytes());
    assert_eq!((back.version(), back.epoch(), back.width()), (3, 1, 12));
    // A bare snapshot, an encoded set, a truncated and an altered cache, another format.
    assert!(SyncedSet::from_cache(&set.to_snapshot_bytes()).is_err());
    let enc = srv
        .dh
        .encode_set(&ItemSet::new(items("r", 0..10)))
        .unwrap()
        .to_bytes();
    assert!(SyncedSet::from_cache(&enc).is_err());
    for cut in [0, 4, 5, cache.len() / 2, cache.len() - 1] {
        assert!(SyncedSet::from_cache(&cache[..cut]).is_err(), "cut {cut}");
    }
    for at in [5, 20, cache.len() / 2, cache.len() - 1] {
        let mut bad = cache.clone();
        bad[at] ^= 0x10;
        assert!(SyncedSet::from_cache(&bad).is_err(), "byte {at}");
    }
    let mut other = cache.clone();
    other[4] = 2;
    assert!(SyncedSet::from_cache(&other).is_err());
}

#[test]
fn a_delta_that_removes_what_the_set_lacks_is_refused() {
    let srv = Server::new(8, 16);
    let reg = Registry::with(100);
    let mut set = SyncedSet::from_snapshot(srv.snapshot(&reg, 1)).unwrap();
    let stranger = srv.outputs(&items("zz", 0..1));
    let bad = Delta::build(1, 1, 2, 16, &[], &stranger);
    let before = set.to_snapshot_bytes();
    assert!(set.offer(bad).is_err());
    assert_eq!((set.version(), set.to_snapshot_bytes()), (1, before));
    // Another width, and too many out-of-order deltas.
    assert!(set.offer(Delta::build(1, 1, 2, 15, &[], &[])).is_err());
    for v in 0..sync::MAX_PENDING_DELTAS as u64 {
        assert_eq!(
            set.offer(Delta::build(1, 10 + v, 11 + v, 16, &[], &[]))
                .unwrap(),
            Offered::Held
        );
    }
    assert!(matches!(
        set.offer(Delta::build(1, 500, 501, 16, &[], &[])),
        Err(Error::InputTooLarge { .. })
    ));
}

#[test]
fn a_client_opens_only_its_own_records_and_a_tampered_one_is_an_error() {
    let reg = Registry::with(500);
    let srv = Server::new(9, 10);
    let store = srv.store(&reg, 1, 8);
    let synced = SyncedSet::from_snapshot(srv.snapshot(&reg, 1)).unwrap();
    // Fetch every bucket of the registry with outputs of items it does not hold.
    let strangers = srv.outputs(&items("x", 0..200));
    let mut rng = ChaCha20Rng::seed_from_u64(3);
    let (c, req) =
        ConfirmClient::start(&strangers, &synced, store.bucket_bits(), 500, &mut rng).unwrap();
    let resp = store.answer(&req, 200).unwrap();
    let sections =
        psi_core::labels::messages::split_response(&resp[sync::RESPONSE_HEADER_LEN..]).unwrap();
    let mut seen = 0;
    for (_, data) in &sections {
        for rec in sync::parse_records(data).unwrap() {
            seen += 1;
            for o in &strangers {
                assert_eq!(sync::open_record(o, &rec).unwrap(), None);
            }
        }
    }
    assert_eq!(seen, 500, "every bucket was fetched: K = 2^b here");
    assert!(c.finish(&resp).unwrap().matches.is_empty());

    // A member whose record's label byte is flipped gets a typed error, not a wrong label.
    let member = srv.outputs(&items("r", 2..3)); // "r2" has a label
    let (c, req) =
        ConfirmClient::start(&member, &synced, store.bucket_bits(), 500, &mut rng).unwrap();
    let resp = store.answer(&req, 1).unwrap();
    let tag = sync::confirm_tag(&member[0]);
    let at = resp
        .windows(16)
        .position(|w| w == tag)
        .expect("its record is in the response");
    let mut bad = resp.clone();
    let last_of_record = at + 16 + 2 + 12 + "user-2".len() + 16 - 1;
    bad[last_of_record] ^= 1;
    assert!(matches!(
        c.finish(&bad),
        Err(Error::Decode(DecodeError::InvalidParameter { .. }))
    ));
}

#[test]
fn a_full_tag_decides_not_its_first_bytes() {
    // A record that agrees with a candidate's tag in all but the last byte is not its.
    let o = [5u8; 64];
    let mut rec = sync::seal_record(&o, Some("a"), [1; 12]);
    assert_eq!(
        sync::open_record(&o, &sync::parse_records(&rec).unwrap()[0]).unwrap(),
        Some(Some("a".to_string()))
    );
    rec[15] ^= 1;
    assert_eq!(
        sync::open_record(&o, &sync::parse_records(&rec).unwrap()[0]).unwrap(),
        None
    );
    let none = sync::seal_record(&o, None, [0; 12]);
    assert_eq!(none.len(), sync::RECORD_MIN_LEN);
    assert_eq!(
        sync::open_record(&o, &sync::parse_records(&none).unwrap()[0]).unwrap(),
        Some(None)
    );
}

#[test]
fn the_candidate_rate_is_what_the_width_says() {
    // 2^14 registry tags at width 15 (f = 1): rho = 1 - (1 - 2^-15)^(2^14), about 0.39.
    let mut rng = ChaCha20Rng::seed_from_u64(10);
    let mut out = |n: usize| -> Vec<[u8; 64]> {
        (0..n)
            .map(|_| {
                let mut o = [0u8; 64];
                rng.fill_bytes(&mut o);
                o
            })
            .collect()
    };
    let reg = out(1 << 14);
    let w = sync::sync_width(1 << 14, 1);
    assert_eq!(w, 15);
    let set = SyncedSet::from_snapshot(Snapshot::build(1, 1, w, &reg)).unwrap();
    let probes = out(20_000);
    let rate = set.candidates(&probes).unwrap().len() as f64 / probes.len() as f64;
    let rho = sync::candidate_rate(1 << 14, w);
    // 20,000 samples: a standard deviation of about 0.0035.
    assert!(
        (rate - rho).abs() < 0.02,
        "measured {rate}, predicted {rho}"
    );
    assert_eq!(
        set.candidates(&reg[..100]).unwrap(),
        (0..100).collect::<Vec<_>>()
    );
}

#[test]
fn bad_fetch_requests_and_responses_are_typed_errors() {
    let reg = Registry::with(2_000);
    let srv = Server::new(11, 12);
    let store = srv.store(&reg, 4, 8);
    let synced = SyncedSet::from_snapshot(srv.snapshot(&reg, 4)).unwrap();
    let outs = srv.outputs(&items("r", 0..10));
    let mut rng = ChaCha20Rng::seed_from_u64(4);
    let (c, req) =
        ConfirmClient::start(&outs, &synced, store.bucket_bits(), 2_000, &mut rng).unwrap();
    // Requests: wrong length (a session of another n), version, mode, count, order, range.
    assert!(store.answer(&req, 11_000).is_err());
    assert!(store.answer(&req[..req.len() - 4], 10).is_err());
    let mut v = req.clone();
    v[0] = 1;
    assert!(store.answer(&v, 10).is_err());
    let mut m = req.clone();
    m[1] = sync::MODE_LABELS;
    assert!(store.answer(&m, 10).is_err());
    let mut k = req.clone();
    k[17] ^= 1;
    assert!(store.answer(&k, 10).is_err());
    let mut order = req.clone();
    let (a, b) = (sync::REQUEST_HEADER_LEN, sync::REQUEST_HEADER_LEN + 4);
    let first: Vec<u8> = order[a..b].to_vec();
    order.copy_within(b..b + 4, a);
    order[b..b + 4].copy_from_slice(&first);
    assert!(store.answer(&order, 10).is_err());
    let mut range = req.clone();
    let end = range.len();
    range[end - 4..].copy_from_slice(&u32::MAX.to_be_bytes());
    assert!(store.answer(&range, 10).is_err());
    // Responses: truncated, another epoch, a missing section.
    let resp = store.answer(&req, 10).unwrap();
    for cut in [0, 5, 12, resp.len() - 1] {
        let c2 = ConfirmClient::start(
            &outs,
            &synced,
            store.bucket_bits(),
            2_000,
            &mut ChaCha20Rng::seed_from_u64(4),
        )
        .unwrap()
        .0;
        assert!(c2.finish(&resp[..cut]).is_err(), "cut {cut}");
    }
    let mut e = resp.clone();
    e[4] ^= 1;
    let c2 = ConfirmClient::start(
        &outs,
        &synced,
        store.bucket_bits(),
        2_000,
        &mut ChaCha20Rng::seed_from_u64(4),
    )
    .unwrap()
    .0;
    assert!(matches!(c2.finish(&e), Err(Error::EpochMismatch { .. })));
    assert_eq!(c.finish(&resp).unwrap().matches.len(), 10);
}
