//! The protocols' own cost units in their JSON spelling ([`OwnUnitsNs`]): one optional
//! field per unit a protocol declares (`psi_core::cost::ProtocolUnit`), named by the unit,
//! flattened into [`crate::UnitCostsNs`]. The names come from psi-core's table
//! (`Protocol::unit`), so a protocol's new unit needs no change here.

use psi_core::Protocol;
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// ns per operation of each protocol's own unit, where known: absent from a server (or a
/// stored measurement) older than the unit, which the reader then replaces by the unit's
/// reference ([`crate::UnitCostsNs::units`]). Serialized as one field per known unit
/// (`cm20_lookup_ns`, `gbf_xor_ns`), unknown fields ignored on reading.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct OwnUnitsNs([Option<f64>; Protocol::ALL.len()]);

fn slot(p: Protocol) -> usize {
    Protocol::ALL.iter().position(|&q| q == p).unwrap_or(0)
}

impl OwnUnitsNs {
    /// ns per operation of `protocol`'s own unit, if known (`None` for a protocol without
    /// one).
    pub fn get(&self, protocol: Protocol) -> Option<f64> {
        protocol.unit().and(self.0[slot(protocol)])
    }

    /// The same with `protocol`'s unit at `ns` (`None`: unknown); unchanged for a protocol
    /// without a unit.
    pub fn with(mut self, protocol: Protocol, ns: Option<f64>) -> Self {
        if protocol.unit().is_some() {
            self.0[slot(protocol)] = ns;
        }
        self
    }

    /// Every protocol's own unit, from the model's record.
    pub fn from_units(u: &psi_core::cost::UnitCosts) -> Self {
        Protocol::ALL
            .iter()
            .fold(OwnUnitsNs::default(), |o, &p| o.with(p, u.own(p)))
    }

    /// Whether every protocol that has an own unit has a value (a stored measurement
    /// older than a unit lacks it, and the device is measured again).
    pub fn is_complete(&self) -> bool {
        Protocol::ALL
            .iter()
            .all(|&p| p.unit().is_none() || self.get(p).is_some())
    }

    /// Each known unit's JSON field and value.
    fn fields(&self) -> impl Iterator<Item = (&'static str, f64)> + '_ {
        Protocol::ALL
            .iter()
            .filter_map(|&p| Some((p.unit()?.field, self.get(p)?)))
    }
}

impl Serialize for OwnUnitsNs {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        for (field, ns) in self.fields() {
            map.serialize_entry(field, &ns)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for OwnUnitsNs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = OwnUnitsNs;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("the protocols' own unit costs")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<OwnUnitsNs, A::Error> {
                let mut own = OwnUnitsNs::default();
                while let Some(key) = map.next_key::<String>()? {
                    match Protocol::ALL
                        .iter()
                        .find(|p| p.unit().is_some_and(|u| u.field == key))
                    {
                        // `null` reads as absent, as the derived `Option` fields do.
                        Some(&p) => own = own.with(p, map.next_value::<Option<f64>>()?),
                        None => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(own)
            }
        }
        d.deserialize_map(Fields)
    }
}
