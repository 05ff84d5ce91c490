//! DH-PSI's terms in the cost model ([`crate::cost`]): its requests from the sizes in
//! [`super::sizes`] and the operations of each side. The label step's OPRF query of the
//! other protocols is [`query`] too; and what a session is charged.

use crate::cost_terms::{Exchange, Ops, Terms, Workload};

/// One OPRF query of `k` elements and its evaluation: the exchange and each side's
/// operations. Client: blind (hash-to-group and a multiplication per element), finalize
/// (decode, multiply by the inverse blind, SHA-512 of the output: 2 blocks). Server:
/// evaluate (decode and multiply per element).
pub(crate) fn query(k: u64) -> (Exchange, Ops, Ops) {
    let kf = k as f64;
    let exchange = Exchange {
        up: super::sizes::query(k),
        down: super::sizes::evaluation(k),
    };
    let client = Ops {
        scalar_mults: 2.0 * kf,
        hash_to_group: kf,
        element_decodes: kf,
        hash_blocks: 2.0 * kf,
        ..Ops::default()
    };
    let server = Ops {
        scalar_mults: kf,
        element_decodes: kf,
        ..Ops::default()
    };
    (exchange, client, server)
}

/// What a session of `n` client items is charged ([`crate::Protocol::charge`]): DH-PSI
/// evaluates exactly `n` elements (the query must have `n`).
pub(crate) fn charge(client_items: u32) -> u64 {
    u64::from(client_items)
}

/// A DH-PSI run for `w`: the query, then the encoded set unless the client holds it; in
/// sync mode, the sync bytes still owed and the confirmation ([`sync_terms`]).
pub(crate) fn terms(w: &Workload) -> Option<Terms> {
    let (n_c, n_s) = (w.client_items, w.server_items);
    let (c, s) = (n_c as f64, n_s as f64);
    let (exchange, mut client, server) = query(n_c);
    let mut requests = vec![exchange];
    if let Some(sync) = w.sync {
        return Some(sync_terms(w, sync, requests, client, server));
    }
    if !w.cached_set {
        let l = super::truncation_bits(w.max_client_items.max(n_c), n_s);
        requests.push(Exchange {
            up: 0,
            down: super::sizes::encoded_set(n_s, l),
        });
    }
    // Match: decode every coded set value and probe the client's table.
    client.entries = s + c;
    Some(Terms {
        requests,
        client,
        server,
        labels_carried: false,
    })
}

/// Sync mode (docs/protocol/sync.md §6): the download the client still owes (none when
/// in sync), then the confirmation fetch, made with labels on or off and carrying the
/// labels: `18 + 4 K` up, `13 + 8 K` and the records of `K` of the `2^b` buckets down.
/// The client streams its synced set once (about one entry of work per registry entry)
/// and hashes each output twice more (the short tag and the confirmation tag).
fn sync_terms(
    w: &Workload,
    sync: crate::cost_terms::SyncTerms,
    mut requests: Vec<Exchange>,
    mut client: Ops,
    server: Ops,
) -> Terms {
    let (n_c, n_s) = (w.client_items, w.server_items);
    if sync.owed_bytes > 0 {
        requests.push(Exchange {
            up: 0,
            down: sync.owed_bytes,
        });
    }
    let bits = sync.bucket_bits;
    let k = crate::labels::fetch_buckets(n_c as usize, bits) as u64;
    let records = (sync.record_bytes as f64 * k as f64 / (1u64 << bits) as f64).round() as u64;
    requests.push(Exchange {
        up: crate::sync::FetchRequest::len_for(k as usize) as u64,
        down: crate::sync::RESPONSE_HEADER_LEN as u64 + 8 * k + records,
    });
    client.entries = n_s as f64 + n_c as f64;
    client.hash_blocks += 4.0 * n_c as f64;
    Terms {
        requests,
        client,
        server,
        labels_carried: true,
    }
}
