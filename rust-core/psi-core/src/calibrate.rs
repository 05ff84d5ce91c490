//! Measures a device's unit costs for the cost model ([`crate::cost::UnitCosts`]) by
//! timing [`crate::cost::kernels`]. Feature `calibrate`: it reads the clock, so like
//! [`crate::rng`] it is a helper for drivers (the client at its first automatic choice,
//! the server at start); no protocol code calls it.

use crate::cost::{UnitCosts, kernels};
use crate::parallel::Threads;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Wall time each timed repetition of a kernel aims at.
const TARGET_NS: f64 = 1.0e6;
/// Timed repetitions per kernel.
const REPS: u64 = 5;

/// Times `kernel` for about [`TARGET_NS`] (sized from `reference` ns per operation),
/// once to warm up and [`REPS`] times measured; the fastest repetition's ns per
/// operation. The minimum, not the median: on a device busy with other work every
/// repetition is slowed by a different amount, and the fastest is the closest to the
/// cost of the work itself (a busy device is slower for both protocols alike).
fn per_op(kernel: fn(u32, u64) -> u8, reference: f64) -> f64 {
    let k = (TARGET_NS / reference).clamp(8.0, 4e6) as u32;
    std::hint::black_box(kernel(k, 7));
    (0..REPS)
        .map(|i| {
            let t = Instant::now();
            std::hint::black_box(kernel(std::hint::black_box(k), i));
            t.elapsed().as_nanos() as f64 / f64::from(k)
        })
        .fold(f64::INFINITY, f64::min)
}

/// This device's unit costs on one thread (about 6 ms of work per kernel: the six shared
/// units' and each protocol's own, [`crate::Protocol::unit`]; six runs of about 1 ms
/// each), for `threads` threads.
pub fn unit_costs(threads: Threads) -> UnitCosts {
    unit_costs_unless(threads, &AtomicBool::new(false)).expect("never stopped")
}

/// [`unit_costs`], given up (`None`) as soon as `stop` is set: it is read before each
/// kernel, so a calibration told to stop ends within one kernel's time (about 6 ms). For a
/// calibration that runs beside a request and is not needed once the answer is in (the
/// client's first automatic choice, docs/adr/0054-first-runs.md).
pub fn unit_costs_unless(threads: Threads, stop: &AtomicBool) -> Option<UnitCosts> {
    let r = UnitCosts::REFERENCE;
    let timed = |kernel: fn(u32, u64) -> u8, reference: f64| {
        (!stop.load(Ordering::Relaxed)).then(|| per_op(kernel, reference))
    };
    let shared = UnitCosts::new(
        timed(kernels::scalar_mults, r.scalar_mult)?,
        timed(kernels::hash_to_group, r.hash_to_group)?,
        timed(kernels::element_decodes, r.element_decode)?,
        timed(kernels::aes_blocks, r.aes_block)?,
        timed(kernels::hash_blocks, r.hash_block)?,
        timed(kernels::entries, r.entry)?,
        threads.get() as u32,
    );
    crate::Protocol::ALL
        .iter()
        .try_fold(shared, |u, &p| match p.unit() {
            Some(unit) => Some(u.with_own(p, timed(unit.kernel, unit.reference)?)),
            None => Some(u),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measured_costs_are_positive_and_ordered() {
        let u = unit_costs(Threads::new(2));
        assert!(u.is_sane());
        assert_eq!(u.threads, 2);
        // A scalar multiplication costs far more than an AES block on any device.
        assert!(u.scalar_mult > 100.0 * u.aes_block, "{u:?}");
        assert!(u.scalar_mult > u.element_decode, "{u:?}");
        // A column lookup is a few instructions, far below a hash block; GBF-PSI's random
        // XOR reads 16 bytes out of the first-level caches: below a hash block too.
        for p in [crate::Protocol::Cm20, crate::Protocol::Gbf] {
            let own = u.own(p).unwrap();
            assert!(own > 0.0 && own < u.hash_block, "{p}: {u:?}");
        }
        assert_eq!(u.own(crate::Protocol::Dh), None);
    }

    #[test]
    fn a_stopped_calibration_gives_up() {
        assert_eq!(
            unit_costs_unless(Threads::new(1), &AtomicBool::new(true)),
            None
        );
    }
}
