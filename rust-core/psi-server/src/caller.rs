//! Who a request counts against when it carries no issued or configured token: the
//! client's IP address, grouped by prefix (`Config::ipv4_prefix`, `Config::ipv6_prefix`).
//!
//! The client's address is the TCP peer's, except when the peer is a trusted proxy
//! (`Config::trusted_proxies`): then it comes from the one forwarding header the proxies
//! are configured to append to (`Config::client_ip_header`), read from the right,
//! skipping trusted proxies; the first address that is not a trusted proxy is the
//! client. Entries left of it were written by the client or by proxies we do not trust,
//! and are never read. Headers from any other peer are ignored. ADR 0016.

use crate::limits::{Level, LevelKind, Payer};
use axum::http::HeaderMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
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

/// A trusted proxy sent a forwarding header that does not parse as a list of IP
/// addresses where the walk from the right needed one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MalformedForwarding(pub(crate) ClientIpHeader);

/// The client's address: `peer`, or, when `peer` is a trusted proxy, the rightmost
/// address in `header` that is not a trusted proxy. If the header is absent, or lists
/// trusted proxies only, the leftmost trusted hop (the peer when absent) is the client.
pub(crate) fn client_ip(
    peer: IpAddr,
    headers: &HeaderMap,
    trusted: &[IpNet],
    header: ClientIpHeader,
) -> Result<IpAddr, MalformedForwarding> {
    let peer = canonical(peer);
    let is_trusted = |ip: IpAddr| trusted.iter().any(|n| n.contains(ip));
    if !is_trusted(peer) {
        return Ok(peer);
    }
    let malformed = MalformedForwarding(header);
    let mut client = peer;
    // Every line of the header, in order, as one list (RFC 9110 §5.3).
    for line in headers.get_all(header.name()).iter().rev() {
        let line = line.to_str().map_err(|_| malformed)?;
        for hop in split_quoted(line, ',').into_iter().rev() {
            let ip = match header {
                ClientIpHeader::XForwardedFor => parse_node(hop),
                ClientIpHeader::Forwarded => forwarded_for(hop),
            }
            .ok_or(malformed)?;
            client = canonical(ip);
            if !is_trusted(client) {
                return Ok(client);
            }
        }
    }
    Ok(client)
}

/// Splits at `sep` outside double-quoted strings (RFC 9110 quoted-string, with `\`
/// escapes).
fn split_quoted(s: &str, sep: char) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if quoted && c == '\\' {
            escaped = true;
        } else if c == '"' {
            quoted = !quoted;
        } else if c == sep && !quoted {
            out.push(&s[start..i]);
            start = i + c.len_utf8();
        }
    }
    out.push(&s[start..]);
    out
}

/// The `for=` node of one RFC 7239 forwarded-element (`for=192.0.2.60;proto=http`,
/// `For="[2001:db8::1]:4711"`). `unknown`, obfuscated nodes and elements without `for`
/// give `None`.
fn forwarded_for(element: &str) -> Option<IpAddr> {
    let mut found = None;
    for pair in split_quoted(element, ';') {
        let (name, value) = pair.trim().split_once('=')?;
        if name.trim().eq_ignore_ascii_case("for") {
            if found.is_some() {
                return None; // a parameter given twice
            }
            let value = value.trim();
            let value = match value.strip_prefix('"') {
                Some(v) => v.strip_suffix('"')?,
                None => value,
            };
            found = Some(parse_node(value)?);
        }
    }
    found
}

/// An address as proxies write it: `192.0.2.1`, `2001:db8::1`, `[2001:db8::1]`, or
/// either with a port (`192.0.2.1:80`, `[2001:db8::1]:80`).
fn parse_node(s: &str) -> Option<IpAddr> {
    let s = s.trim();
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(sa) = s.parse::<SocketAddr>() {
        return Some(sa.ip());
    }
    s.strip_prefix('[')
        .and_then(|v| v.strip_suffix(']'))
        .and_then(|v| v.parse::<Ipv6Addr>().ok())
        .map(IpAddr::V6)
}

/// IPv4-mapped IPv6 addresses (a dual-stack listener's view of IPv4 peers) as IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

fn max_prefix(ip: IpAddr) -> u8 {
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

/// The rate-limit key of a client address: `ip:` and the address, or its network when
/// the prefix is shorter than the address (`ip:203.0.113.0/24`, `ip:2001:db8:0:100::/56`).
pub(crate) fn rate_key_ip(ip: IpAddr, ipv4_prefix: u8, ipv6_prefix: u8) -> String {
    let ip = canonical(ip);
    let prefix = if ip.is_ipv4() {
        ipv4_prefix
    } else {
        ipv6_prefix
    };
    let net = IpNet::new(ip, prefix);
    if net.prefix == max_prefix(ip) {
        format!("ip:{}", net.addr)
    } else {
        format!("ip:{net}")
    }
}

/// The budgets a caller without a token is charged against, narrowest first
/// (docs/adr/0038-budgets-per-address-block.md): its own (`ip:` key of
/// [`rate_key_ip`]); the networks it belongs to, each shared by every caller in it (IPv4:
/// `Config::ipv4_block_prefix`, `Config::ipv4_block_budgets` budgets; IPv6:
/// `Config::ipv6_block_prefix` and `Config::ipv6_allocation_prefix`, with
/// `Config::ipv6_block_budgets` and `Config::ipv6_allocation_budgets`), each only if wider
/// than the level before it and not off (0); and the server-wide ceiling of all such
/// callers (`Config::address_ceiling_budgets`, key `ceiling:address`).
pub(crate) fn address_payer(ip: IpAddr, c: &crate::Config) -> Payer {
    let ip = canonical(ip);
    let own = if ip.is_ipv4() {
        c.ipv4_prefix
    } else {
        c.ipv6_prefix
    };
    let mut levels = vec![Level::new(
        rate_key_ip(ip, c.ipv4_prefix, c.ipv6_prefix),
        1,
        LevelKind::Address,
    )];
    let networks: &[(u8, u64)] = if ip.is_ipv4() {
        &[(c.ipv4_block_prefix, c.ipv4_block_budgets)]
    } else {
        &[
            (c.ipv6_block_prefix, c.ipv6_block_budgets),
            (c.ipv6_allocation_prefix, c.ipv6_allocation_budgets),
        ]
    };
    let mut narrowest = own.min(max_prefix(ip));
    for &(prefix, budgets) in networks {
        if prefix < narrowest && budgets > 0 {
            narrowest = prefix;
            levels.push(Level::new(
                format!("net:{}", IpNet::new(ip, prefix)),
                budgets,
                LevelKind::Network,
            ));
        }
    }
    if c.address_ceiling_budgets > 0 {
        levels.push(Level::new(
            "ceiling:address".to_string(),
            c.address_ceiling_budgets,
            LevelKind::Ceiling,
        ));
    }
    Payer::new(levels)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn headers(name: &'static str, values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(name, HeaderValue::from_str(v).unwrap());
        }
        h
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

    #[test]
    fn rate_keys_group_by_prefix() {
        assert_eq!(rate_key_ip(ip("203.0.113.7"), 32, 56), "ip:203.0.113.7");
        assert_eq!(rate_key_ip(ip("203.0.113.7"), 24, 56), "ip:203.0.113.0/24");
        assert_eq!(
            rate_key_ip(ip("::ffff:203.0.113.7"), 32, 56),
            "ip:203.0.113.7"
        );
        let a = rate_key_ip(ip("2001:db8:0:1::1"), 32, 56);
        assert_eq!(a, "ip:2001:db8::/56");
        assert_eq!(a, rate_key_ip(ip("2001:db8:0:ff:1:2:3:4"), 32, 56));
        assert_ne!(a, rate_key_ip(ip("2001:db8:0:100::1"), 32, 56));
        assert_eq!(
            rate_key_ip(ip("2001:db8:0:1::1"), 32, 64),
            "ip:2001:db8:0:1::/64"
        );
        assert_eq!(rate_key_ip(ip("2001:db8::1"), 32, 128), "ip:2001:db8::1");
    }

    fn level_keys(p: &Payer) -> Vec<&str> {
        p.keys()
    }

    #[test]
    fn address_payers_have_their_networks_and_the_ceiling() {
        let c = crate::Config::default();
        assert_eq!(
            level_keys(&address_payer(ip("2001:db8:1:2345::1"), &c)),
            [
                "ip:2001:db8:1:2300::/56",
                "net:2001:db8:1::/48",
                "net:2001:db8::/32",
                "ceiling:address"
            ]
        );
        assert_eq!(
            level_keys(&address_payer(ip("::ffff:203.0.113.7"), &c)),
            ["ip:203.0.113.7", "net:203.0.113.0/24", "ceiling:address"]
        );
        // A level no wider than the one before it, or off, is left out.
        let c = crate::Config {
            ipv4_prefix: 24,
            ipv6_prefix: 48,
            ipv6_allocation_budgets: 0,
            address_ceiling_budgets: 0,
            ..crate::Config::default()
        };
        assert_eq!(
            level_keys(&address_payer(ip("203.0.113.7"), &c)),
            ["ip:203.0.113.0/24"]
        );
        assert_eq!(
            level_keys(&address_payer(ip("2001:db8:1:2345::1"), &c)),
            ["ip:2001:db8:1::/48"]
        );
    }

    #[test]
    fn forwarding_headers_are_read_from_the_right_and_only_from_trusted_peers() {
        let trusted = nets(&["10.0.0.0/8"]);
        let xff = ClientIpHeader::XForwardedFor;
        let h = headers("x-forwarded-for", &["198.51.100.9, 203.0.113.5, 10.0.0.2"]);
        // An untrusted peer: its headers are ignored.
        assert_eq!(
            client_ip(ip("192.0.2.1"), &h, &trusted, xff),
            Ok(ip("192.0.2.1"))
        );
        // A trusted peer: skip the trusted hop 10.0.0.2, take 203.0.113.5 (the spoofable
        // 198.51.100.9 to its left is never read).
        assert_eq!(
            client_ip(ip("10.0.0.1"), &h, &trusted, xff),
            Ok(ip("203.0.113.5"))
        );
        // Several header lines are one list.
        let h = headers("x-forwarded-for", &["garbage, 203.0.113.5", "10.0.0.3"]);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &h, &trusted, xff),
            Ok(ip("203.0.113.5"))
        );
        // Ports and brackets as some proxies write them.
        let h = headers("x-forwarded-for", &["[2001:db8::7]:443"]);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &h, &trusted, xff),
            Ok(ip("2001:db8::7"))
        );
        // No header, or trusted hops only: the leftmost trusted hop.
        assert_eq!(
            client_ip(ip("10.0.0.1"), &HeaderMap::new(), &trusted, xff),
            Ok(ip("10.0.0.1"))
        );
        let h = headers("x-forwarded-for", &["10.0.0.9, 10.0.0.2"]);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &h, &trusted, xff),
            Ok(ip("10.0.0.9"))
        );
        // Malformed where the walk needs an address.
        for bad in ["203.0.113.5, nonsense", "", "203.0.113.5,", "unknown"] {
            let h = headers("x-forwarded-for", &[bad]);
            assert_eq!(
                client_ip(ip("10.0.0.1"), &h, &trusted, xff),
                Err(MalformedForwarding(xff)),
                "{bad}"
            );
        }
        // The other header is not read.
        let h = headers("forwarded", &["for=203.0.113.5"]);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &h, &trusted, xff),
            Ok(ip("10.0.0.1"))
        );
    }

    #[test]
    fn rfc7239_forwarded() {
        let trusted = nets(&["10.0.0.0/8", "2001:db8:ffff::/48"]);
        let fwd = ClientIpHeader::Forwarded;
        // RFC 7239 §4 and §7.1 examples.
        let h = headers(
            "forwarded",
            &[
                r#"for=192.0.2.43, For="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.4;by=10.0.0.1"#,
            ],
        );
        assert_eq!(
            client_ip(ip("10.0.0.1"), &h, &trusted, fwd),
            Ok(ip("2001:db8:cafe::17"))
        );
        let h = headers("forwarded", &[r#"for="_gazonk", for=10.0.0.4"#]);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &h, &trusted, fwd),
            Err(MalformedForwarding(fwd))
        );
        let h = headers("forwarded", &["proto=https;by=10.0.0.1"]);
        assert!(client_ip(ip("10.0.0.1"), &h, &trusted, fwd).is_err());
        let h = headers("forwarded", &["for=192.0.2.1;for=192.0.2.2"]);
        assert!(client_ip(ip("10.0.0.1"), &h, &trusted, fwd).is_err());
        // A quoted comma does not split elements.
        let h = headers("forwarded", &[r#"for=192.0.2.1;ext="a,b""#]);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &h, &trusted, fwd),
            Ok(ip("192.0.2.1"))
        );
    }
}
