//! The drivers' random generator: ChaCha20 seeded from the operating system, the seed
//! zeroized after use. Behind the `os-rng` feature, which drivers (client, server, CLI)
//! enable; the protocol code itself never calls it and takes its RNG as a parameter.

use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use zeroize::Zeroizing;

/// The operating system gave no randomness (log-safe: carries no secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no randomness from the operating system: {0}")]
pub struct NoOsRandomness(String);

/// A fresh ChaCha20 generator seeded with 32 bytes from the operating system.
pub fn os_rng() -> Result<ChaCha20Rng, NoOsRandomness> {
    let mut seed = Zeroizing::new([0u8; 32]);
    getrandom::fill(seed.as_mut()).map_err(|e| NoOsRandomness(e.to_string()))?;
    Ok(ChaCha20Rng::from_seed(*seed))
}
