//! The OS-seeded generator that every protocol run of the command starts from, its error
//! as the command reports it.

/// A fresh ChaCha20 generator seeded from the operating system.
pub fn os_rng() -> Result<rand_chacha::ChaCha20Rng, String> {
    psi_core::rng::os_rng().map_err(|e| e.to_string())
}
