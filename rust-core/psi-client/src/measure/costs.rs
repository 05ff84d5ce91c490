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

/// How far this device may be from the reference machine ([`UnitCosts::REFERENCE`], the
/// prior of a device not yet calibrated), as a factor either way: a phone's cores are a
/// few times slower than the reference's, a desktop's about as fast. A first choice that
/// is the same for a device this much faster and slower does not wait for the
/// calibration (docs/adr/0054-first-runs.md).
pub const DEVICE_PRIOR_RANGE: f64 = 4.0;

/// Whether the device's calibration can change a choice: the choice with the reference
/// device's costs (`inputs.client`) differs from the choice with those costs scaled by
/// `1/factor` or `factor`. Pure, like [`crate::measure::probe_worthwhile`].
pub fn calibration_matters(
    w: &psi_core::cost::Workload,
    inputs: &psi_core::cost::Inputs,
    policy: psi_core::cost::Policy,
    candidates: &[psi_core::Protocol],
    factor: f64,
) -> bool {
    use psi_core::cost::choose;
    let pick = |i: &psi_core::cost::Inputs| choose(w, i, policy, candidates).map(|c| c.protocol);
    let prior = pick(inputs);
    [1.0 / factor, factor].iter().any(|&f| {
        let mut i = *inputs;
        i.client = i.client.scaled(f);
        pick(&i) != prior
    })
}

/// The device's calibration on a thread of its own, started before a first run's first
/// request so that it runs while the network waits ([`Calibration::start`]), then waited
/// for ([`Calibration::finish`]) only when it can change the choice
/// ([`calibration_matters`]), else stopped ([`Calibration::stop`]; also on drop).
pub struct Calibration {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Option<UnitCosts>>>,
}

impl Calibration {
    /// Starts calibrating on a thread named `psi-calibrate` (where no thread can be
    /// started, [`Calibration::finish`] calibrates on the caller's).
    pub fn start() -> Calibration {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("psi-calibrate".into())
            .spawn(move || psi_core::calibrate::unit_costs_unless(psi_core::Threads::ONE, &flag))
            .ok();
        Calibration { stop, thread }
    }

    /// The device's costs: the thread's result, waited for (or a calibration here if the
    /// thread could not run or failed).
    pub fn finish(mut self) -> DeviceCosts {
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(Some(u))) => DeviceCosts::from_units(&u),
            _ => calibrate_device(),
        }
    }

    /// Stops the calibration within one kernel's time, without waiting for it.
    pub fn stop(self) {}
}

impl Drop for Calibration {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use psi_core::Protocol;
    use psi_core::cost::{Inputs, Link, Policy, Workload};

    fn matters(n_c: u64, n_s: u64, link: Link, labels: bool) -> bool {
        calibration_matters(
            &Workload::new(n_c, n_s).with_labels(labels),
            &Inputs {
                link,
                client: UnitCosts::REFERENCE.with_threads(2),
                server: UnitCosts::REFERENCE,
            },
            Policy::Fastest,
            &[Protocol::Dh, Protocol::Ot],
            DEVICE_PRIOR_RANGE,
        )
    }

    #[test]
    fn the_calibration_matters_only_where_the_device_can_change_the_pick() {
        // Contact discovery on a slow link: DH-PSI whatever the device.
        assert!(!matters(1000, 1_000_000, Link::mbit(200.0, 0.5, 2.0), true));
        // 512 against 512 without labels on an intra-country WAN (20 ms, 25 Mbit/s):
        // DH-PSI's group work against OT-PSI's bytes and round trips, close enough that a
        // device 4x faster or slower tips it.
        assert!(matters(512, 512, Link::mbit(20.0, 25.0, 25.0), false));
        // Balanced 2^16 on a gigabit LAN: OT-PSI, whatever the device.
        assert!(!matters(
            1 << 16,
            1 << 16,
            Link::mbit(0.4, 1000.0, 1000.0),
            false
        ));
        // A single protocol: nothing to choose.
        assert!(!calibration_matters(
            &Workload::new(4096, 4096),
            &Inputs {
                link: Link::mbit(0.4, 1000.0, 1000.0),
                client: UnitCosts::REFERENCE,
                server: UnitCosts::REFERENCE,
            },
            Policy::Fastest,
            &[Protocol::Dh],
            DEVICE_PRIOR_RANGE,
        ));
    }

    #[test]
    fn a_calibration_on_its_own_thread_gives_the_devices_costs() {
        let c = Calibration::start();
        let d = c.finish();
        assert!(d.units(1).is_sane());
        // Stopped, it ends by itself (the thread is not waited for).
        Calibration::start().stop();
    }
}
