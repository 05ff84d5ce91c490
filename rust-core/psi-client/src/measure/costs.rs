//! Unit costs: the device's (calibrated once, stored as psi-http's record) and a server's
//! advertised ones, believed only within a plausible range.

use psi_core::cost::UnitCosts;

/// A device's unit costs as stored in `measurements.json`: psi-http's
/// [`psi_http::UnitCostsNs`], the same record a server's health advertises, with its one
/// conversion to and from the model's [`UnitCosts`].
pub type DeviceCosts = psi_http::UnitCostsNs;

/// Measures this device (about 6 ms per unit): `psi_core::calibrate::unit_costs` on one thread.
pub fn calibrate_device() -> DeviceCosts {
    DeviceCosts::from_units(&psi_core::calibrate::unit_costs(psi_core::Threads::ONE))
}

/// How far a server's advertised unit costs are believed: each is taken within
/// `[reference / SERVER_COST_RANGE, reference * SERVER_COST_RANGE]` of
/// [`UnitCosts::REFERENCE`]'s. Real servers fall well inside (a machine without AES
/// instructions is about 10 times slower per AES block); a server claiming its OT-PSI
/// work costs nothing (or everything) to steer the automatic choice moves the prediction
/// of its own share at most this far (docs/security.md §4).
pub const SERVER_COST_RANGE: f64 = 16.0;
/// Most threads per session step taken from a server's advertisement.
pub const MAX_SERVER_THREADS: u32 = 64;

/// The server costs of a [`psi_http::Health`], if advertised: each unit cost clamped to
/// the plausible range ([`SERVER_COST_RANGE`]; one that is not a finite number is the
/// reference's), the threads to `1..=`[`MAX_SERVER_THREADS`].
pub fn server_units(h: &psi_http::Health) -> Option<UnitCosts> {
    let costs = h.costs?;
    let c = costs.units;
    let r = UnitCosts::REFERENCE;
    let f = |v: f64, reference: f64| {
        if v.is_finite() {
            v.clamp(reference / SERVER_COST_RANGE, reference * SERVER_COST_RANGE)
        } else {
            reference
        }
    };
    let shared = UnitCosts::new(
        f(c.scalar_mult_ns, r.scalar_mult),
        f(c.hash_to_group_ns, r.hash_to_group),
        f(c.element_decode_ns, r.element_decode),
        f(c.aes_block_ns, r.aes_block),
        f(c.hash_block_ns, r.hash_block),
        f(c.entry_ns, r.entry),
        costs.threads_per_step.clamp(1, MAX_SERVER_THREADS),
    );
    // Each protocol's own unit likewise; one not advertised (an older server) is the
    // reference's.
    let u = psi_core::Protocol::ALL
        .iter()
        .fold(shared, |u, &p| match (r.own(p), c.own.get(p)) {
            (Some(reference), advertised) => {
                u.with_own(p, f(advertised.unwrap_or(reference), reference))
            }
            (None, _) => u,
        });
    u.is_sane().then_some(u)
}
