//! CM20-PSI's terms in the cost model ([`crate::cost`]): its requests from the sizes in
//! [`super::sizes`] for the driver's configuration at the server's body limit, and the
//! operations of each side; and what a session is charged.

use super::{params, sizes};
use crate::cost_terms::{BASE_OTS, Exchange, Ops, ProtocolUnit, Terms, Workload};

/// CM20-PSI's own cost unit, a column lookup: one item's bit at a pseudorandom index of
/// an `m`-bit matrix column, gathered into the item's row; `w` per item on each side
/// ([`Ops::own`] in [`terms`]). Its reference is the development machine's
/// (docs/benchmarks.md); its JSON field `cm20_lookup_ns` is the one CM20-PSI servers have
/// advertised since the unit existed.
pub(crate) const LOOKUP: ProtocolUnit = ProtocolUnit {
    field: "cm20_lookup_ns",
    reference: 1.0,
    kernel: lookups,
};

/// `k` CM20-PSI column lookups, shaped as the real one: `log2 m` index bits cut from a
/// pseudorandom word per item, the bit at that index of an `m`-bit column (`m = 2^14`,
/// a column in cache as the real lookup keeps it), gathered into bit `i` of a row of
/// the lookups (`acc`). It replays the memory access pattern of the lookup in
/// `super::client` and `super::server`.
fn lookups(k: u32, seed: u64) -> u8 {
    const BITS: u32 = 14;
    let mut x = seed | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let col: Vec<u64> = (0..(1usize << BITS) / 64).map(|_| next()).collect();
    let mut acc = vec![0u64; (k as usize).div_ceil(64)];
    let mut word = 0u64;
    for i in 0..k as usize {
        // Four indices per 64-bit word, as F's output serves several columns.
        if i % 4 == 0 {
            word = next();
        }
        let v = ((word >> (16 * (i % 4))) & ((1 << BITS) - 1)) as usize;
        let bit = (col[v / 64] >> (v % 64)) & 1;
        acc[i / 64] |= bit << (i % 64);
    }
    acc.iter().fold(0u64, |a, w| a ^ w.count_ones() as u64) as u8
}

/// What a session of `n` client items is charged ([`crate::Protocol::charge`]): a
/// CM20-PSI client that follows the protocol gets one evaluation per item, `n` (the hello
/// must declare `n`); a malicious one can get more, which is why CM20-PSI is opt-in
/// (docs/adr/0021-cm20-psi.md).
pub(crate) fn charge(client_items: u32) -> u64 {
    u64::from(client_items)
}

/// A CM20-PSI run for `w`: hello and setup, then the matrix chunks, each answered by an
/// ack, the last by the outputs; with labels on and a server that sends label lanes, the
/// outputs carry them (one more byte in the setup, the width byte and `1 + Λ` per value in
/// the outputs, an XOR per entry on the server; spec §4.7, ADR 0053) and no label step
/// follows. `None` for a workload no width qualifies for.
pub(crate) fn terms(w: &Workload) -> Option<Terms> {
    let (c, s) = (w.client_items as f64, w.server_items as f64);
    let mut requests = Vec::new();
    // The driver's configuration for the server's body limit.
    let config = super::config::Cm20Config::for_body_limit(crate::Threads::ONE, w.max_body_bytes);
    let n_c = w.client_items.min(u64::from(super::messages::MAX_ITEMS));
    let n_s = w.server_items.min(u64::from(super::messages::MAX_ITEMS));
    let height = params::height(n_c);
    // A workload no width qualifies for cannot run (the server refuses it).
    let width = params::width(n_c, n_s, height)?;
    let t = sizes::traffic_with(n_c, n_s, &config);
    let chunks = t.round_trips.saturating_sub(1).max(1);
    // Hello and setup; then the chunks. The totals are the spec's (sizes); the
    // matrix is split evenly over the chunks (the time is linear in the bytes, so
    // the split, spec §4.3's with its small final chunk, does not change a
    // prediction), every chunk but the last answered
    // by an ack, the last by the outputs.
    let setup = sizes::setup(u64::from(width));
    let lane = w.label_lane_width.filter(|_| w.labels).map(u64::from);
    requests.push(Exchange {
        up: sizes::hello(),
        down: setup + u64::from(lane.is_some()),
    });
    let matrix = t.client_to_server - sizes::hello();
    let ack = sizes::acks(2);
    let outputs = t.server_to_client - setup - sizes::acks(chunks)
        + lane.map_or(0, |width| sizes::lanes(n_s, width) - 1);
    for i in 0..chunks {
        let last = i + 1 == chunks;
        requests.push(Exchange {
            up: matrix / chunks + if last { matrix % chunks } else { 0 },
            down: if last { outputs } else { ack },
        });
    }
    let (m, wf) = (f64::from(height), f64::from(width));
    // F: z = AES_{k_0}(h0) ⊕ h1 and t = ceil(w log2 m / 128) blocks per item.
    let prf = 1.0 + (wf * f64::from(params::index_bits(height)) / 128.0).ceil();
    // H2 over the prefix block and the w looked-up bits (ceil(w / 8) bytes + the
    // SHA-256 padding).
    let h2 = 1.0 + ((wf / 8.0).ceil() + 9.0) / 64.0;
    // Column PRG: m bits of AES-CTR per column, two seeds per column on the
    // client (A and the correction), one on the server.
    let prg = m * wf / 128.0;
    // Client: base OTs as the MR19 receiver (as OT-PSI's client); H1 (one
    // block) and F per item; the PRG; w lookups per item ([`LOOKUP`]); H2 per item; its
    // outputs sorted and merged with the server's n_s decoded values.
    let client = Ops {
        scalar_mults: 2.0 * BASE_OTS,
        hash_to_group: BASE_OTS,
        element_decodes: 1.0,
        aes_blocks: c * prf + 2.0 * prg,
        hash_blocks: c * (1.0 + h2),
        entries: s + 2.0 * c,
        own: c * wf,
    };
    // Server: base OTs as the MR19 sender; per registry entry F, w lookups and
    // H2 (its H1 digests are prepared once per registry, `cm20::Cm20Set`, as the
    // reference server does); the PRG of its choice columns; sort and Golomb-Rice
    // coding.
    let server = Ops {
        scalar_mults: 2.0 * BASE_OTS + 2.0,
        hash_to_group: 2.0 * BASE_OTS,
        element_decodes: 2.0 * BASE_OTS,
        aes_blocks: s * prf + prg,
        hash_blocks: s * h2,
        entries: 2.0 * s,
        own: s * wf,
    };
    Some(Terms {
        requests,
        client,
        server,
        labels_carried: lane.is_some(),
    })
}
