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

/// A DH-PSI run for `w`: the query, then the encoded set unless the client holds it.
pub(crate) fn terms(w: &Workload) -> Option<Terms> {
    let (n_c, n_s) = (w.client_items, w.server_items);
    let (c, s) = (n_c as f64, n_s as f64);
    let (exchange, mut client, server) = query(n_c);
    let mut requests = vec![exchange];
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
