//! The session id both sides derive from the nonces and the run's parameters.

use super::params::Params;
use super::prf;

/// `sid = SHA-256(ds::SESSION, client_nonce, server_nonce, BE32 n_c, BE32 n_s, BE32 m,
/// BE16 w, l2)`.
pub(super) fn session_id(client_nonce: &[u8; 32], server_nonce: &[u8; 32], p: &Params) -> [u8; 32] {
    crate::ote::prc::hash(
        prf::ds::SESSION,
        &[
            client_nonce,
            server_nonce,
            &p.client_items.to_be_bytes(),
            &p.server_items.to_be_bytes(),
            &p.height.to_be_bytes(),
            &(p.width as u16).to_be_bytes(),
            &[p.output_bits as u8],
        ],
    )
}
