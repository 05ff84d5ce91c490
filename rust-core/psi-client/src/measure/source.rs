//! Where an input of the automatic choice came from: measured, given, or the default;
//! for the link, figure by figure.

/// Where an input of the choice came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Source {
    /// Measured during earlier runs or this one.
    Measured,
    /// From the platform's hints (link) or the configuration (device).
    Given,
    /// The built-in default ([`DEFAULT_LINK`](crate::measure::DEFAULT_LINK), [`UnitCosts::REFERENCE`](psi_core::cost::UnitCosts::REFERENCE)).
    Default,
}

impl Source {
    /// `measured`, `given`, `default`.
    pub fn name(self) -> &'static str {
        match self {
            Source::Measured => "measured",
            Source::Given => "given",
            Source::Default => "default",
        }
    }
}

/// Where each figure of a [`LinkEstimate`](crate::measure::LinkEstimate) came from
/// ([`LinkEstimate::sources`](crate::measure::LinkEstimate::sources)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LinkSources {
    /// The round-trip time's.
    pub rtt: Source,
    /// The upstream rate's.
    pub up: Source,
    /// The downstream rate's.
    pub down: Source,
}
