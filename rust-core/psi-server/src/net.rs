//! IP networks ([`IpNet`]) and the forwarding header ([`ClientIpHeader`]): the address
//! types the settings name trusted proxies and budget prefixes in.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IP network: an address and a prefix length (`10.0.0.0/8`, `2001:db8::/32`; a bare
/// address is a /32 or /128). Host bits are cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

/// A value that is not an IP address or network.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an IP address or network (expected e.g. 10.0.0.1, 10.0.0.0/8, fd00::/8)")]
pub struct InvalidIpNet;

impl IpNet {
    /// The network of `addr` with `prefix` bits (clamped to the address length).
    pub fn new(addr: IpAddr, prefix: u8) -> IpNet {
        let addr = canonical(addr);
        let prefix = prefix.min(max_prefix(addr));
        IpNet {
            addr: mask(addr, prefix),
            prefix,
        }
    }

    /// The network's address (host bits cleared).
    pub(crate) fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    pub(crate) fn prefix(&self) -> u8 {
        self.prefix
    }

    /// True if `ip` is in this network (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        ip.is_ipv4() == self.addr.is_ipv4() && mask(ip, self.prefix) == self.addr
    }
}

impl FromStr for IpNet {
    type Err = InvalidIpNet;

    fn from_str(s: &str) -> Result<Self, InvalidIpNet> {
        let s = s.trim();
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| InvalidIpNet)?;
        let max = max_prefix(canonical(addr));
        let prefix = match prefix {
            None => max,
            Some(p) if !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()) => {
                match p.parse::<u8>() {
                    Ok(p) if p <= max => p,
                    _ => return Err(InvalidIpNet),
                }
            }
            Some(_) => return Err(InvalidIpNet),
        };
        Ok(IpNet::new(addr, prefix))
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// The forwarding header trusted proxies append the client's address to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ClientIpHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (nginx `$proxy_add_x_forwarded_for`,
    /// HAProxy `option forwardfor`, most load balancers).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy1` (its `for=` parameters).
    Forwarded,
}

impl ClientIpHeader {
    /// The header's name.
    pub fn name(self) -> &'static str {
        match self {
            ClientIpHeader::XForwardedFor => "x-forwarded-for",
            ClientIpHeader::Forwarded => "forwarded",
        }
    }
}

impl FromStr for ClientIpHeader {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "x-forwarded-for" => Ok(ClientIpHeader::XForwardedFor),
            "forwarded" => Ok(ClientIpHeader::Forwarded),
            _ => Err("expected x-forwarded-for or forwarded".into()),
        }
    }
}

impl fmt::Display for ClientIpHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// IPv4-mapped IPv6 addresses (a dual-stack listener's view of IPv4 peers) as IPv4.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

pub(crate) fn max_prefix(ip: IpAddr) -> u8 {
    if ip.is_ipv4() { 32 } else { 128 }
}

fn mask(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let m = u32::MAX
                .checked_shl(32 - u32::from(prefix.min(32)))
                .unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(v4) & m))
        }
        IpAddr::V6(v6) => {
            let m = u128::MAX
                .checked_shl(128 - u32::from(prefix.min(128)))
                .unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & m))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn networks_parse_and_contain() {
        let n: IpNet = "10.1.2.3/8".parse().unwrap();
        assert_eq!(n.to_string(), "10.0.0.0/8");
        assert!(n.contains(ip("10.255.0.1")));
        assert!(n.contains(ip("::ffff:10.0.0.1")));
        assert!(!n.contains(ip("11.0.0.1")));
        let v6: IpNet = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains(ip("2001:db8:ffff::1")));
        assert!(!v6.contains(ip("10.0.0.1")));
        assert_eq!(
            "127.0.0.1".parse::<IpNet>().unwrap().to_string(),
            "127.0.0.1/32"
        );
        for bad in [
            "",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/",
            "x",
            "10.0.0.0/+8",
            "1.2.3.4/8/8",
        ] {
            assert_eq!(bad.parse::<IpNet>(), Err(InvalidIpNet), "{bad}");
        }
    }
}
