//! OT-PSI's terms in the cost model ([`crate::cost`]): its requests from the sizes in
//! [`super::sizes`] at the chunk size a driver picks for the server's body limit, and the
//! operations of each side; and what a session is charged.

use crate::cost_terms::{BASE_OTS, Exchange, Ops, Terms, Workload};

/// What a session of `n` client items is charged ([`crate::Protocol::charge`]): an OT-PSI
/// client gets one OPRF evaluation per Cuckoo bin, at most
/// [`super::messages::max_bins_for`]`(n)` (the hello must declare `n` items and at most
/// that many bins; the server state machine enforces both).
pub(crate) fn charge(client_items: u32) -> u64 {
    u64::from(super::messages::max_bins_for(client_items))
}

/// An OT-PSI run for `w`: hello and setup, then the matrix chunks, each answered by an
/// ack, the last by the outputs; with labels on and a server that sends label lanes, the
/// outputs carry them (one more byte in the setup, `1 + Λ` per output row, an XOR per
/// row on the server; ADR 0053) and no label step follows.
pub(crate) fn terms(w: &Workload) -> Option<Terms> {
    let (n_c, n_s) = (w.client_items, w.server_items);
    let (c, s) = (n_c as f64, n_s as f64);
    let mut requests = Vec::new();
    let bins = super::cuckoo::table_size(n_c as usize) as u64;
    let rows = super::config::OtConfig::new(crate::Threads::ONE)
        .with_max_request_bytes(w.max_body_bytes)
        .chunk_rows as u64;
    let chunks = bins.div_ceil(rows);
    let out_len = super::session::output_len(n_c as usize, n_s as usize) as u64;
    let chunk_header = super::sizes::matrix(1, 1) - 64;
    let lane = w.label_lane_width.filter(|_| w.labels).map(u64::from);
    requests.push(Exchange {
        up: super::sizes::hello(),
        down: super::sizes::setup() + u64::from(lane.is_some()),
    });
    for i in 0..chunks {
        let r = rows.min(bins - i * rows);
        let last = i + 1 == chunks;
        requests.push(Exchange {
            up: chunk_header + 64 * r,
            down: if last {
                match lane {
                    Some(width) => super::sizes::outputs_with_lanes(n_s, out_len, width),
                    None => super::sizes::outputs(n_s, out_len),
                }
            } else {
                super::sizes::acks(2, 1)
            },
        });
    }
    let m = bins as f64;
    // Base OTs (MR19 receiver): a fixed-base and a variable-base multiplication
    // and a hash-to-group each, decoding the sender's point. Per bin: the two
    // PRG matrices (2 x 512 columns = 8 AES blocks per row), the code of the
    // item (4 blocks), the row hash (2 blocks), the transpose. Per item: the
    // Cuckoo digest (1 block) and placement. Matching: the 3 n_s received
    // values probe a table of the client's values.
    let client = Ops {
        scalar_mults: 2.0 * BASE_OTS,
        hash_to_group: BASE_OTS,
        element_decodes: 1.0,
        aes_blocks: 12.0 * m,
        hash_blocks: 2.0 * m + c,
        entries: 2.0 * m + 3.0 * s + 2.0 * c,
        ..Ops::default()
    };
    // Base OTs (MR19 sender): two hash-to-group, decodings and multiplications
    // each. Per bin: one PRG matrix (4 blocks per row), the transpose. Per
    // server entry: its digest (1 block) and, for each of 3 hash functions, the
    // code (4 blocks) and the output hash (2 blocks), then the shuffle.
    let server = Ops {
        scalar_mults: 2.0 * BASE_OTS + 2.0,
        hash_to_group: 2.0 * BASE_OTS,
        element_decodes: 2.0 * BASE_OTS,
        aes_blocks: 4.0 * m + 12.0 * s,
        hash_blocks: 7.0 * s,
        entries: m + 6.0 * s,
        ..Ops::default()
    };
    Some(Terms {
        requests,
        client,
        server,
        labels_carried: lane.is_some(),
    })
}
