//! The URL rule: which server base URLs a client accepts (`http://` or `https://`, a
//! host, no query or fragment), plain `http://` only to loopback unless allowed.

use super::client::Client;
use crate::config::ClientConfig;
use crate::error::{ClientError, Result};

impl Client {
    /// `url` as a server base URL (`http://` or `https://`, a host, no query, fragment or
    /// spaces), without surrounding spaces and trailing slashes. `http://` is refused
    /// ([`ClientError::InsecureUrl`]) unless the host is loopback (`127.0.0.0/8`, `::1`,
    /// `localhost`) or `config` allows insecure HTTP. The one owner of the URL rule:
    /// every run checks it before its first request.
    pub fn check_base_url(url: &str, config: &ClientConfig) -> Result<String> {
        let url = url.trim();
        let (https, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err(ClientError::BadInput(
                "the server URL must start with http:// or https://".into(),
            ));
        };
        let host = host_of(rest);
        if host.is_empty() || rest.contains(['?', '#', ' ']) {
            return Err(ClientError::BadInput(
                "the server URL needs a host and no query, fragment or spaces".into(),
            ));
        }
        if !https && !config.allow_insecure_http && !is_loopback(host) {
            return Err(ClientError::InsecureUrl {
                host: host.to_string(),
            });
        }
        Ok(url.trim_end_matches('/').to_string())
    }
}

/// The host of a URL's part after `scheme://`: without user info and port, IPv6
/// addresses without brackets.
fn host_of(rest: &str) -> &str {
    let authority = rest.split('/').next().unwrap_or("");
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split(']').next().unwrap_or("");
    }
    authority.split(':').next().unwrap_or("")
}

/// Loopback: `localhost`, `127.0.0.0/8`, `::1` (and `::ffff:127.0.0.0/104`). Names other
/// than `localhost` are not resolved: the rule must hold before any connection.
fn is_loopback(host: &str) -> bool {
    if host.eq_ignore_ascii_case("localhost") || host.eq_ignore_ascii_case("localhost.") {
        return true;
    }
    match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(a)) => a.is_loopback(),
        Ok(std::net::IpAddr::V6(a)) => {
            a.is_loopback() || a.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        Err(_) => false,
    }
}
