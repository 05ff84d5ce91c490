//! What the caller keeps between runs ([`Measurements`]: device costs, link estimates
//! per network, each server's health and probe pause), its JSON, and the shared store.

use super::costs::DeviceCosts;
use super::link::LinkEstimate;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// What the caller keeps between runs: the device's unit costs, a link estimate per
/// network, and each server's last health (so a choice needs no extra request).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Measurements {
    /// This device's unit costs, once calibrated.
    pub device: Option<DeviceCosts>,
    /// Link estimates by network name ([`LinkHints::network`](crate::measure::LinkHints::network)).
    pub networks: BTreeMap<String, LinkEstimate>,
    /// The last health of each server, by base URL.
    pub servers: BTreeMap<String, psi_http::Health>,
    /// Servers (by base URL) that refused the bounded probe for its budget (429), with
    /// the time (seconds since the Unix epoch) before which they are not probed again
    /// (docs/protocol-choice.md, "Bounded probe"). Absent from older stores.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub probe_paused_until: BTreeMap<String, u64>,
}

/// How long a server that refused the probe for its budget without a usable
/// `Retry-After` is left unprobed: the budget's window, an hour.
pub const PROBE_PAUSE_DEFAULT_SECS: u64 = 3600;
/// Bounds on the pause after a refused probe, whatever `Retry-After` says: at least a
/// minute (a `Retry-After: 0` must not make every choice probe), at most a day.
pub const PROBE_PAUSE_BOUNDS_SECS: (u64, u64) = (60, 86_400);

/// Seconds since the Unix epoch by the system clock (0 if it is set before 1970).
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Measurements {
    /// Whether the server at `base` may be probed at `now` (seconds since the Unix
    /// epoch): it has not refused a probe for its budget, or that pause is over.
    pub fn probe_allowed(&self, base: &str, now: u64) -> bool {
        self.probe_paused_until
            .get(base)
            .is_none_or(|&until| now >= until)
    }

    /// Records that the server at `base` refused the probe at `now` for its budget,
    /// asking to wait `retry_after` seconds: no probe until then, the wait taken within
    /// [`PROBE_PAUSE_BOUNDS_SECS`] ([`PROBE_PAUSE_DEFAULT_SECS`] if none was given).
    pub fn pause_probe(&mut self, base: &str, now: u64, retry_after: Option<u64>) {
        let (lo, hi) = PROBE_PAUSE_BOUNDS_SECS;
        let wait = retry_after
            .unwrap_or(PROBE_PAUSE_DEFAULT_SECS)
            .clamp(lo, hi);
        // Pauses that are over are dropped, so the map stays as small as the servers.
        self.probe_paused_until.retain(|_, &mut until| until > now);
        self.probe_paused_until
            .insert(base.to_string(), now.saturating_add(wait));
    }
}

impl Measurements {
    /// As JSON (for a file in the app's cache directory).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|_| "{}".into())
    }
    /// From [`Measurements::to_json`]'s output; anything unreadable gives an empty store
    /// (measurements are a cache: losing them costs a calibration and priors).
    pub fn from_json(s: &str) -> Self {
        serde_json::from_str(s).unwrap_or_default()
    }
}

/// A [`Measurements`] shared by the runs of one or more clients.
#[derive(Debug, Default)]
pub struct MeasurementStore(Mutex<Measurements>);

impl MeasurementStore {
    /// A store holding `m`.
    pub fn new(m: Measurements) -> Self {
        MeasurementStore(Mutex::new(m))
    }
    /// A copy of the contents.
    pub fn snapshot(&self) -> Measurements {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
    /// Reads the contents without copying them.
    pub fn read<T>(&self, f: impl FnOnce(&Measurements) -> T) -> T {
        f(&self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
    /// Changes the contents.
    pub fn update<T>(&self, f: impl FnOnce(&mut Measurements) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::link::DEFAULT_LINK;
    use psi_core::cost::UnitCosts;

    #[test]
    fn the_store_round_trips_through_json_and_survives_garbage() {
        let mut m = Measurements {
            device: Some(DeviceCosts::from_units(&UnitCosts::REFERENCE)),
            ..Measurements::default()
        };
        m.networks
            .insert("wifi".into(), LinkEstimate::prior(DEFAULT_LINK));
        let back = Measurements::from_json(&m.to_json());
        assert_eq!(back.device, m.device);
        assert_eq!(back.networks, m.networks);
        assert!(Measurements::from_json("not json").device.is_none());
    }

    /// A measurements.json written before a protocol's own unit existed still loads: the
    /// device costs it holds are kept, marked incomplete (the choice measures the device
    /// again, `driver::choice`), and the servers' healths read with the unit's reference.
    #[test]
    fn stores_older_than_an_own_unit_still_load() {
        use psi_core::Protocol;
        let device = r#""scalar_mult_ns": 41000.0, "hash_to_group_ns": 18500.0,
            "element_decode_ns": 8100.0, "aes_block_ns": 2.1, "hash_block_ns": 61.0,
            "entry_ns": 26.0"#;
        let health = r#"{"status": "ok", "epoch": 3, "registry_items": 100000,
            "protocols": ["dh-psi", "ot-psi", "cm20-psi"], "max_client_items": 10000,
            "max_body_bytes": 8388608, "costs": {"scalar_mult_ns": 40000.0,
            "hash_to_group_ns": 18000.0, "element_decode_ns": 8000.0, "aes_block_ns": 2.0,
            "hash_block_ns": 60.0, "entry_ns": 25.0, "cm20_lookup_ns": 1.2,
            "threads_per_step": 1, "workers": 2, "ot_workers": 1}}"#;
        // Before GBF-PSI's unit (CM20-PSI's present), and before CM20-PSI's.
        for cm20 in [r#", "cm20_lookup_ns": 1.1"#, ""] {
            let json = format!(
                r#"{{"device": {{{device}{cm20}}}, "networks": {{}},
                   "servers": {{"https://a": {health}}}}}"#
            );
            let m = Measurements::from_json(&json);
            let d = m.device.expect("the device costs load");
            assert_eq!(d.scalar_mult_ns, 41000.0);
            assert_eq!(d.own.get(Protocol::Cm20), (!cm20.is_empty()).then_some(1.1));
            assert_eq!(d.own.get(Protocol::Gbf), None);
            assert!(!d.own.is_complete());
            let h = &m.servers["https://a"];
            let units = crate::measure::server_units(h).unwrap();
            assert_eq!(units.own(Protocol::Cm20), Some(1.2));
            assert_eq!(
                units.own(Protocol::Gbf),
                UnitCosts::REFERENCE.own(Protocol::Gbf)
            );
            // Written back, it has what it read and no made-up GBF unit.
            let again = Measurements::from_json(&m.to_json());
            assert_eq!(again.device, m.device);
            assert!(!m.to_json().contains("gbf_xor_ns"));
        }
        // A calibrated device has every unit.
        let d = DeviceCosts::from_units(&UnitCosts::REFERENCE);
        assert!(d.own.is_complete());
        assert!(
            Measurements {
                device: Some(d),
                ..Measurements::default()
            }
            .to_json()
            .contains("gbf_xor_ns")
        );
    }

    #[test]
    fn a_probe_pause_is_bounded_kept_per_server_and_persisted() {
        let mut m = Measurements::default();
        assert!(m.probe_allowed("https://a", 1000));
        // The server's Retry-After, within the bounds.
        m.pause_probe("https://a", 1000, Some(600));
        assert!(!m.probe_allowed("https://a", 1599));
        assert!(m.probe_allowed("https://a", 1600));
        assert!(m.probe_allowed("https://b", 1000));
        // None: the budget's hour; 0: a minute; a year: a day.
        m.pause_probe("https://b", 1000, None);
        assert_eq!(
            m.probe_paused_until["https://b"],
            1000 + PROBE_PAUSE_DEFAULT_SECS
        );
        m.pause_probe("https://c", 1000, Some(0));
        assert_eq!(m.probe_paused_until["https://c"], 1060);
        m.pause_probe("https://d", 1000, Some(365 * 86_400));
        assert_eq!(m.probe_paused_until["https://d"], 1000 + 86_400);
        assert_eq!(
            Measurements::from_json(&m.to_json()).probe_paused_until,
            m.probe_paused_until
        );
        // A later pause drops the ones that are over.
        m.pause_probe("https://e", 5000, Some(60));
        assert_eq!(
            m.probe_paused_until.keys().collect::<Vec<_>>(),
            ["https://d", "https://e"]
        );
        // A store from before the field reads as no pause.
        assert!(
            Measurements::from_json(r#"{"networks":{}}"#)
                .probe_paused_until
                .is_empty()
        );
    }
}
