//! Who a request counts against when it carries no issued or configured token: the
//! client's IP address, grouped by prefix (`Config::ipv4_prefix`, `Config::ipv6_prefix`).
//!
//! The client's address is the TCP peer's, except when the peer is a trusted proxy
//! (`Config::trusted_proxies`): then it comes from the one forwarding header the proxies
//! are configured to append to (`Config::client_ip_header`), read from the right,
//! skipping trusted proxies; the first address that is not a trusted proxy is the
//! client. Entries left of it were written by the client or by proxies we do not trust,
//! and are never read. Headers from any other peer are ignored. ADR 0016.

use crate::config::Config;
use crate::limits::{Level, LevelKind, Payer};
use crate::net::{ClientIpHeader, IpNet, canonical, max_prefix};
use axum::http::HeaderMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

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
        // X-Forwarded-For has no quoted strings: a `"` the client wrote must not join the
        // proxy's entry to the client's (issue 35 item 6). Forwarded (RFC 7239) has them.
        let hops = match header {
            ClientIpHeader::XForwardedFor => line.split(',').collect(),
            ClientIpHeader::Forwarded => split_quoted(line, ','),
        };
        for hop in hops.into_iter().rev() {
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
    if net.prefix() == max_prefix(ip) {
        format!("ip:{}", net.addr())
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
pub(crate) fn address_payer(ip: IpAddr, c: &Config) -> Payer {
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
    let floor = address_floor(&levels, c.address_floor_divisor);
    Payer::new(levels).with_floor(floor)
}

/// The floor of an address caller with `levels` (ADR 0044): its own level, its floor
/// (`floor:` and its own key: 1/`divisor` of its own budget) and, for each shared level, its
/// reserve (`reserve:` and the level's key, as large as the level). Only a charge that a
/// shared level refused takes from these, so a network or the ceiling drained by others
/// does not refuse a caller that has spent less than its floor this hour; to drain a
/// reserve an attacker needs one address per floor it holds. Empty with no shared level
/// or with the floor off (`divisor` 0).
fn address_floor(levels: &[Level], divisor: u64) -> Vec<Level> {
    let Some(own) = levels.first() else {
        return Vec::new();
    };
    if divisor == 0 || levels.len() < 2 {
        return Vec::new();
    }
    let mut floor = vec![
        own.clone(),
        Level::fraction(format!("floor:{}", own.key()), divisor, LevelKind::Floor),
    ];
    floor.extend(
        levels[1..]
            .iter()
            .map(|l| Level::new(format!("reserve:{}", l.key()), l.scale(), l.kind())),
    );
    floor
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
        let c = Config::default();
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
        let c = Config {
            ipv4_prefix: 24,
            ipv6_prefix: 48,
            ipv6_allocation_budgets: 0,
            address_ceiling_budgets: 0,
            ..Config::default()
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
        // A quote the client wrote left of the proxy's entry is an entry like any other:
        // never read (it is left of the client's address).
        let h = headers("x-forwarded-for", &["\"x, 203.0.113.5"]);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &h, &trusted, xff),
            Ok(ip("203.0.113.5"))
        );
        let h = headers("x-forwarded-for", &["\"a, b\", 203.0.113.5, 10.0.0.2"]);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &h, &trusted, xff),
            Ok(ip("203.0.113.5"))
        );
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
