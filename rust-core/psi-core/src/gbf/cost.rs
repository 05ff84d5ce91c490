//! GBF-PSI's terms in the cost model ([`crate::cost`]): its requests from the sizes in
//! [`super::sizes`] for the driver's configuration at the server's body limit, and the
//! operations of each side; and what a session is charged.

use super::{params::Params, sizes};
use crate::cost_terms::{BASE_OTS, Exchange, Ops, Terms, Workload};

/// What a session of `n` client items is charged ([`crate::Protocol::charge`]): a client
/// that follows the protocol sets the filter bits of `n` items and learns at most their
/// values, `n`; a malicious one can set more, which is why GBF-PSI is opt-in on a server,
/// as CM20-PSI is (docs/adr/0048-gbf-psi.md).
pub(crate) fn charge(client_items: u32) -> u64 {
    u64::from(client_items)
}

/// A GBF-PSI run for `w`: hello and setup, then the matrix chunks, each answered by an
/// ack, the last by the outputs. `None` for a workload above the protocol's limits.
pub(crate) fn terms(w: &Workload) -> Option<Terms> {
    let max = u64::from(super::messages::MAX_ITEMS);
    if w.client_items > max || w.server_items > max {
        return None;
    }
    let p = Params::new(w.client_items as u32, w.server_items as u32)?;
    let config = super::config::GbfConfig::for_body_limit(crate::Threads::ONE, w.max_body_bytes);
    let t = sizes::traffic_with(w.client_items, w.server_items, &config);
    let chunks = t.round_trips.saturating_sub(1).max(1);
    let mut requests = vec![Exchange {
        up: sizes::hello(),
        down: sizes::setup(),
    }];
    let matrix = t.client_to_server - sizes::hello();
    let outputs = t.server_to_client - sizes::setup() - sizes::acks(chunks);
    for i in 0..chunks {
        let last = i + 1 == chunks;
        requests.push(Exchange {
            up: matrix / chunks + if last { matrix % chunks } else { 0 },
            down: if last { outputs } else { sizes::acks(2) },
        });
    }
    let (c, s) = (w.client_items as f64, w.server_items as f64);
    let (m, k) = (f64::from(p.filter_bits), f64::from(p.hashes));
    // Positions: k words of AES-CTR per item, two per block.
    let positions = (k / 2.0).ceil();
    // The IKNP columns: 128 columns of m bits, from one key (the server's) or two (the
    // client's t and u).
    let prg = BASE_OTS * m / 128.0;
    // A row hash is SHA-256 over 67 bytes: two blocks.
    let row_hash = 2.0;
    // Client: base OTs as the MR19 sender (as CM20-PSI's server); a digest and the
    // positions per item; the columns; one row hash per OT; k XORs per item at random
    // positions of the seed table (counted in the model's random-lookup unit); its values
    // sorted and merged with the server's.
    let client = Ops {
        scalar_mults: 2.0 * BASE_OTS + 1.0,
        hash_to_group: 2.0 * BASE_OTS,
        element_decodes: 2.0 * BASE_OTS,
        aes_blocks: c * positions + 2.0 * prg,
        hash_blocks: c + m * row_hash,
        entries: s + 2.0 * c,
        cm20_lookups: c * k,
    };
    // Server: base OTs as the MR19 receiver (as CM20-PSI's client); the columns; one row
    // hash per OT (`seed¹` only); the positions and k XORs per registry entry (its digests
    // are prepared once per registry, `gbf::GbfSet`, as the reference server does); sort and
    // Golomb-Rice coding.
    let server = Ops {
        scalar_mults: 2.0 * BASE_OTS,
        hash_to_group: BASE_OTS,
        element_decodes: 1.0,
        aes_blocks: s * positions + prg,
        hash_blocks: m * row_hash,
        entries: 2.0 * s,
        cm20_lookups: s * k,
    };
    Some(Terms {
        requests,
        client,
        server,
    })
}
