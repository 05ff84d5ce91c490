//! The connection limits the accept loop enforces ([`Limits`], from the server's
//! settings) and the key a connection's address is counted under.

use crate::net::IpNet;
use std::net::SocketAddr;
use std::time::Duration;

/// The connection limits of [`crate::config::Config`].
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    pub max_connections_per_address: usize,
    /// Bytes per second a response must at least be read at after `send_grace` (0: no
    /// limit).
    pub min_send_rate: u64,
    pub send_grace: Duration,
    pub max_response_bytes_in_flight: u64,
    pub max_response_bytes_per_address: u64,
    /// Most open connections of one address block (`ipv4_block_prefix`,
    /// `ipv6_block_prefix`).
    pub max_connections_per_block: usize,
    /// Bytes per second a request body must at least arrive at after `upload_grace` (0:
    /// no limit).
    pub min_upload_rate: u64,
    pub upload_grace: Duration,
    /// The largest body a route takes: the most declared bytes an upload deadline counts.
    pub max_body_bytes: u64,
    pub max_request_bytes_in_flight: u64,
    pub max_request_bytes_per_address: u64,
    /// Peers exempt from the per-address caps (they carry many clients).
    pub trusted_proxies: Vec<IpNet>,
    /// Prefix lengths that make an address (as the budgets count callers).
    pub ipv4_prefix: u8,
    pub ipv6_prefix: u8,
    /// Prefix lengths that make an address block (as the session table counts them).
    pub ipv4_block_prefix: u8,
    pub ipv6_block_prefix: u8,
}

impl Limits {
    /// How long `bytes` may take at `min_send_rate` (saturating; zero without a rate).
    pub(super) fn send_time(&self, bytes: u64) -> Duration {
        if self.min_send_rate == 0 {
            return Duration::ZERO;
        }
        Duration::from_millis(bytes.saturating_mul(1000) / self.min_send_rate)
    }

    /// How long a body of `bytes` (at most `max_body_bytes` count) may take to arrive at
    /// `min_upload_rate` (zero without a rate).
    pub(super) fn upload_time(&self, bytes: u64) -> Duration {
        if self.min_upload_rate == 0 {
            return Duration::ZERO;
        }
        let bytes = bytes.min(self.max_body_bytes);
        Duration::from_millis(bytes.saturating_mul(1000) / self.min_upload_rate)
    }

    /// The key the per-address caps count `peer` under; `None` for a trusted proxy.
    pub(super) fn address(&self, peer: SocketAddr) -> Option<String> {
        self.key(peer, self.ipv4_prefix, self.ipv6_prefix)
    }

    /// The key the per-block connection cap counts `peer` under; `None` for a trusted
    /// proxy.
    pub(super) fn block(&self, peer: SocketAddr) -> Option<String> {
        self.key(peer, self.ipv4_block_prefix, self.ipv6_block_prefix)
    }

    fn key(&self, peer: SocketAddr, v4: u8, v6: u8) -> Option<String> {
        let ip = peer.ip();
        if self.trusted_proxies.iter().any(|n| n.contains(ip)) {
            return None;
        }
        Some(crate::caller::rate_key_ip(ip, v4, v6))
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::sync::Arc;

    pub(crate) fn limits(per_address: u64, total: u64, grace: Duration) -> Arc<Limits> {
        Arc::new(Limits {
            header_read_timeout: Duration::from_secs(20),
            idle_timeout: Duration::from_secs(30),
            max_connections: 512,
            max_connections_per_address: 2,
            min_send_rate: 1000,
            send_grace: grace,
            max_response_bytes_in_flight: total,
            max_response_bytes_per_address: per_address,
            max_connections_per_block: 3,
            min_upload_rate: 1000,
            upload_grace: grace,
            max_body_bytes: 1 << 20,
            max_request_bytes_in_flight: total,
            max_request_bytes_per_address: per_address,
            trusted_proxies: vec!["10.0.0.0/8".parse().unwrap()],
            ipv4_prefix: 32,
            ipv6_prefix: 56,
            ipv4_block_prefix: 24,
            ipv6_block_prefix: 48,
        })
    }

    #[test]
    fn addresses_are_callers_and_trusted_proxies_are_exempt() {
        let l = limits(1, 1, Duration::ZERO);
        let a = |s: &str| l.address(SocketAddr::new(s.parse().unwrap(), 1));
        // One IPv6 /56 is one address; the next /56 another.
        assert_eq!(a("2001:db8:0:1::1"), a("2001:db8:0:ff::2"));
        assert_ne!(a("2001:db8:0:100::1"), a("2001:db8:0:1::1"));
        assert_ne!(a("192.0.2.1"), a("192.0.2.2"));
        assert_eq!(a("::ffff:192.0.2.1"), a("192.0.2.1"));
        assert_eq!(a("10.1.2.3"), None);
        let b = |s: &str| l.block(SocketAddr::new(s.parse().unwrap(), 1));
        assert_eq!(b("192.0.2.1"), b("192.0.2.200"));
        assert_ne!(b("192.0.2.1"), b("192.0.3.1"));
        assert_eq!(b("10.1.2.3"), None);
        assert_eq!(l.upload_time(2000), Duration::from_secs(2));
        assert_eq!(l.upload_time(u64::MAX), Duration::from_millis(1 << 20));
        assert_eq!(l.send_time(10_000), Duration::from_secs(10));
        assert_eq!(
            l.send_time(u64::MAX),
            Duration::from_millis(u64::MAX / 1000)
        );
    }
}
