//! What both sides derive from a session's parameters alone: the length of each OPRF
//! value and the session id that binds the run's nonces and sizes.

use crate::ote::prc;

/// Bytes of each OPRF value the server sends: the false-match rule
/// ([`crate::protocol::false_match_bits`]) rounded up to whole bytes,
/// `ceil((40 + ceil(log2 n_c) + ceil(log2 n_s)) / 8)`.
pub fn output_len(client_items: usize, server_items: usize) -> usize {
    crate::protocol::false_match_bits(client_items as u64, server_items as u64).div_ceil(8) as usize
}

/// `sid = SHA-256(ds::SESSION, client_nonce, server_nonce, BE32 n_c, BE32 n_s, BE32 bins, L)`.
pub(super) fn session_id(
    client_nonce: &[u8; 32],
    server_nonce: &[u8; 32],
    n_c: u32,
    n_s: u32,
    bins: u32,
    out_len: u8,
) -> [u8; 32] {
    prc::hash(
        prc::ds::SESSION,
        &[
            client_nonce,
            server_nonce,
            &n_c.to_be_bytes(),
            &n_s.to_be_bytes(),
            &bins.to_be_bytes(),
            &[out_len],
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_lengths() {
        assert_eq!(output_len(0, 0), 5);
        assert_eq!(output_len(1, 1), 5);
        assert_eq!(output_len(2, 1), 6);
        assert_eq!(output_len(1 << 20, 1 << 20), 10);
        assert_eq!(output_len((1 << 20) + 1, 1 << 20), 11);
        assert_eq!(output_len(1 << 24, 1 << 24), 11);
    }
}
