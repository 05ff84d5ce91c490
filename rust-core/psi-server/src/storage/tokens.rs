//! How a bearer token is issued and stored: drawn fresh, checked, kept only as its digest.

use super::contract::os_rng;
use super::error::StoreError;
use sha2::{Digest, Sha256};

/// The SHA-256 digest under which a bearer token is stored and looked up.
pub fn token_digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Bytes of randomness in an issued token (256 bits: an unsalted digest suffices).
const TOKEN_BYTES: usize = 32;

/// A token about to be issued, what every store's `add_token` inserts: its checked name
/// and budget, the token itself and the digest stored in its place.
pub(crate) struct TokenIssue {
    /// The bearer token (`psi_` and 64 hex digits; wiped on drop).
    pub(crate) token: zeroize::Zeroizing<String>,
    /// What the store keeps ([`token_digest`]).
    pub(crate) digest: [u8; 32],
    /// Its own items-per-hour budget, as a database integer.
    pub(crate) items_per_hour: Option<i64>,
}

impl TokenIssue {
    /// Checks `name` and `items_per_hour` and draws a fresh token.
    pub(crate) fn new(
        name: Option<&str>,
        items_per_hour: Option<u64>,
    ) -> Result<TokenIssue, StoreError> {
        if let Some(n) = name {
            check_token_name(n)?;
        }
        let items_per_hour = items_per_hour
            .map(|v| {
                i64::try_from(v)
                    .map_err(|_| StoreError::InvalidInput("items_per_hour is at most 2^63 - 1"))
            })
            .transpose()?;
        let mut raw = zeroize::Zeroizing::new([0u8; TOKEN_BYTES]);
        rand_core::Rng::fill_bytes(&mut os_rng()?, raw.as_mut_slice());
        let token = zeroize::Zeroizing::new(format!("psi_{}", hex::encode(raw.as_slice())));
        let digest = token_digest(&token);
        Ok(TokenIssue {
            token,
            digest,
            items_per_hour,
        })
    }
}

fn check_token_name(name: &str) -> Result<(), StoreError> {
    if name.is_empty() || name.chars().count() > 64 || name.chars().any(char::is_control) {
        return Err(StoreError::InvalidInput(
            "a token name has 1 to 64 characters and no control characters",
        ));
    }
    Ok(())
}
