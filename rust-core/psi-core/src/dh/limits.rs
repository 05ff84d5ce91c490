//! Hard limits enforced by DH-PSI's encoders and decoders.

/// Most items a client may query in one run (2^20).
pub const MAX_CLIENT_ITEMS: usize = 1 << 20;
/// Most items an encoded server set may hold (2^26).
pub const MAX_SERVER_ITEMS: usize = 1 << 26;
