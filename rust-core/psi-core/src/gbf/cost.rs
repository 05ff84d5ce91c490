//! GBF-PSI's terms in the cost model ([`crate::cost`]): its requests from the sizes in
//! [`super::sizes`] for the driver's configuration at the server's body limit, and the
//! operations of each side; and what a session is charged.

use super::{params::Params, sizes};
use crate::cost_terms::{BASE_OTS, Exchange, Ops, ProtocolUnit, Terms, Workload};

/// GBF-PSI's own cost unit, one hash function of one item's filter work: its position
/// (a 64-bit word of the AES-CTR stream keyed by the item's digest, multiplied down to
/// `m`), its share of sorting and deduplicating the item's `k` positions, and the XOR of
/// the 16-byte seed at that position, a random read of the `m`-row seed table
/// ([`super::bloom::positions`], [`super::bloom::value`]; the client's filter bit at a
/// position is the same access); `k` per item on each side ([`Ops::own`] in [`terms`]).
/// The AES of the positions is inside the unit (its key schedule per item costs more than
/// the blocks); the digests are not. Reference: `calibrate::unit_costs` on the development
/// machine (docs/protocol-choice.md, "Own units").
pub(crate) const XOR: ProtocolUnit = ProtocolUnit {
    field: "gbf_xor_ns",
    reference: 15.0,
    kernel: xors,
};

/// Rows of the kernel's seed table: the filter of 1,000 client items against 10^5 entries
/// (`m = 82,432`, 1.3 MB), the contact-discovery shape.
const KERNEL_ROWS: u32 = 82_432;
/// Hash functions per item in the kernel (`k` at `n_s = 10^5`).
const KERNEL_HASHES: u32 = 57;

/// `k` GBF-PSI hash functions' filter work ([`XOR`]): items of [`KERNEL_HASHES`]
/// positions in a [`KERNEL_ROWS`]-row table, through the real `bloom::positions` and
/// `bloom::value`, the items' digests drawn from `seed` (hashing them is not the unit).
fn xors(k: u32, seed: u64) -> u8 {
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    // A cheap fill (the table's contents do not change the work; its size does).
    let base = u128::from(next());
    let seeds: Vec<crate::ote::prc::Block> = (0..u128::from(KERNEL_ROWS))
        .map(|i| (base ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)).to_be_bytes())
        .collect();
    let mut ps = Vec::with_capacity(KERNEL_HASHES as usize);
    let mut acc = 0u128;
    for _ in 0..k.div_ceil(KERNEL_HASHES) {
        let digest = (u128::from(next()) << 64 | u128::from(next())).to_le_bytes();
        super::bloom::positions(&digest, KERNEL_HASHES, KERNEL_ROWS, &mut ps);
        acc ^= super::bloom::value(&seeds, &ps, 64);
    }
    (acc ^ (acc >> 64)) as u8
}

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
    // The IKNP columns: 128 columns of m bits, from one key (the server's) or two (the
    // client's t and u).
    let prg = BASE_OTS * m / 128.0;
    // A row hash is SHA-256 over 67 bytes: two blocks.
    let row_hash = 2.0;
    // Client: base OTs as the MR19 sender (as CM20-PSI's server); a digest per item; the
    // columns; one row hash per OT; per item its k positions (their AES-CTR words inside
    // the unit), filter bits and XORs at random positions of the seed table ([`XOR`]);
    // its values sorted and merged with the server's.
    let client = Ops {
        scalar_mults: 2.0 * BASE_OTS + 1.0,
        hash_to_group: 2.0 * BASE_OTS,
        element_decodes: 2.0 * BASE_OTS,
        aes_blocks: 2.0 * prg,
        hash_blocks: c + m * row_hash,
        entries: s + 2.0 * c,
        own: c * k,
    };
    // Server: base OTs as the MR19 receiver (as CM20-PSI's client); the columns; one row
    // hash per OT (`seed¹` only); the k positions and XORs ([`XOR`]) per registry entry (its digests
    // are prepared once per registry, `gbf::GbfSet`, as the reference server does); sort and
    // Golomb-Rice coding.
    let server = Ops {
        scalar_mults: 2.0 * BASE_OTS,
        hash_to_group: BASE_OTS,
        element_decodes: 1.0,
        aes_blocks: prg,
        hash_blocks: m * row_hash,
        entries: 2.0 * s,
        own: s * k,
    };
    Some(Terms {
        requests,
        client,
        server,
        labels_carried: false,
    })
}
