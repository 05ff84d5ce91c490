//! Who the rate limit counts against (ADR 0016), over loopback HTTP against the real
//! server: the client address behind trusted proxies only, IPv6 prefixes, tokens issued
//! and revoked in the database while the server runs, per-token budgets, and budgets
//! that survive a restart.

mod common;

use common::*;
use psi_server::{ClientIpHeader, Config, Store};

/// Creates a DH-PSI session of `n` items with `headers`; returns the status and, for an
/// error, its code.
fn create(t: &Raw, n: u32, headers: &[(&'static str, &str)]) -> (u16, String) {
    let r = session(t, "dh-psi", n, headers);
    let code = if r.status == 201 {
        String::new()
    } else {
        error_code(&r)
    };
    (r.status, code)
}

fn small(name: &str, tune: impl FnOnce(&mut Config)) -> Config {
    let mut c = config(name);
    fill(&c, 50, |_| false);
    c.items_per_hour = 10;
    tune(&mut c);
    c
}

#[test]
fn forwarded_client_address_is_taken_only_from_a_trusted_proxy() {
    // The test's connections come from 127.0.0.1: trusted here.
    let server = start(small("trusted-proxy", |c| {
        c.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap()];
    }));
    let t = raw(&server);
    let xff = |v: &'static str| [("x-forwarded-for", v)];
    assert_eq!(create(&t, 10, &xff("203.0.113.1")).0, 201);
    assert_eq!(
        create(&t, 1, &xff("203.0.113.1")),
        (429, "rate_limited".into()),
        "the same forwarded client has spent its budget"
    );
    // Another client behind the proxy has its own budget.
    assert_eq!(create(&t, 10, &xff("203.0.113.2")).0, 201);
    // A client that prepends a made-up address is still itself: the walk from the right
    // stops at the address the proxy appended.
    assert_eq!(
        create(&t, 1, &xff("198.51.100.77, 203.0.113.2")),
        (429, "rate_limited".into())
    );
    // Trusted hops to the right are skipped.
    assert_eq!(
        create(&t, 1, &xff("203.0.113.1, 127.0.0.5")),
        (429, "rate_limited".into())
    );
    // A malformed header from a trusted proxy is a clear 400, not a fresh budget.
    assert_eq!(
        create(&t, 1, &xff("203.0.113.9, not-an-address")),
        (400, "bad_request".into())
    );
    // The other header is not read: this is the proxy itself (127.0.0.1), fresh budget once.
    assert_eq!(create(&t, 10, &[("forwarded", "for=203.0.113.3")]).0, 201);
    assert_eq!(
        create(&t, 1, &[("forwarded", "for=203.0.113.4")]),
        (429, "rate_limited".into())
    );
    server.shutdown().unwrap();

    // RFC 7239 Forwarded when configured.
    let server = start(small("trusted-proxy-forwarded", |c| {
        c.trusted_proxies = vec!["127.0.0.1".parse().unwrap()];
        c.client_ip_header = ClientIpHeader::Forwarded;
    }));
    let t = raw(&server);
    let fwd = |v: &'static str| [("forwarded", v)];
    assert_eq!(create(&t, 10, &fwd("for=192.0.2.60;proto=https")).0, 201);
    assert_eq!(
        create(&t, 1, &fwd("for=192.0.2.60")),
        (429, "rate_limited".into())
    );
    assert_eq!(
        create(&t, 10, &fwd(r#"for="[2001:db8:cafe::17]:4711""#)).0,
        201
    );
    assert_eq!(
        create(&t, 1, &fwd("for=unknown")),
        (400, "bad_request".into())
    );
    server.shutdown().unwrap();
}

#[test]
fn forwarding_headers_from_an_untrusted_peer_are_ignored() {
    // No trusted proxy (the default), then a trusted proxy that is not this peer.
    for trusted in [vec![], vec!["10.0.0.0/8".parse().unwrap()]] {
        let server = start(small("untrusted-peer", |c| c.trusted_proxies = trusted));
        let t = raw(&server);
        assert_eq!(create(&t, 10, &[("x-forwarded-for", "203.0.113.1")]).0, 201);
        // A spoofed header does not buy a new budget: the caller is still 127.0.0.1.
        assert_eq!(
            create(&t, 1, &[("x-forwarded-for", "203.0.113.2")]),
            (429, "rate_limited".into())
        );
        assert_eq!(
            create(&t, 1, &[("x-forwarded-for", "not-an-address")]),
            (429, "rate_limited".into()),
            "never parsed from an untrusted peer"
        );
        server.shutdown().unwrap();
    }
}

#[test]
fn ipv6_clients_share_a_budget_per_prefix() {
    // Default /56: two /64s of one /56 are one client; another /56 is another.
    let server = start(small("ipv6-56", |c| {
        c.trusted_proxies = vec!["127.0.0.1".parse().unwrap()];
    }));
    let t = raw(&server);
    let xff = |v: &'static str| [("x-forwarded-for", v)];
    assert_eq!(create(&t, 10, &xff("2001:db8:0:1::1")).0, 201);
    assert_eq!(
        create(&t, 1, &xff("2001:db8:0:2::99")),
        (429, "rate_limited".into()),
        "another /64 of the same /56"
    );
    assert_eq!(create(&t, 10, &xff("2001:db8:0:100::1")).0, 201);
    server.shutdown().unwrap();

    // --ipv6-prefix 64: each /64 is a client.
    let server = start(small("ipv6-64", |c| {
        c.trusted_proxies = vec!["127.0.0.1".parse().unwrap()];
        c.ipv6_prefix = 64;
    }));
    let t = raw(&server);
    assert_eq!(create(&t, 10, &xff("2001:db8:0:1::1")).0, 201);
    assert_eq!(create(&t, 10, &xff("2001:db8:0:2::99")).0, 201);
    assert_eq!(
        create(&t, 1, &xff("2001:db8:0:2::1234")),
        (429, "rate_limited".into())
    );
    server.shutdown().unwrap();

    // --ipv4-prefix 24: a /24 is a client.
    let server = start(small("ipv4-24", |c| {
        c.trusted_proxies = vec!["127.0.0.1".parse().unwrap()];
        c.ipv4_prefix = 24;
    }));
    let t = raw(&server);
    assert_eq!(create(&t, 10, &xff("203.0.113.1")).0, 201);
    assert_eq!(
        create(&t, 1, &xff("203.0.113.200")),
        (429, "rate_limited".into())
    );
    assert_eq!(create(&t, 10, &xff("203.0.114.1")).0, 201);
    server.shutdown().unwrap();
}

#[test]
fn issued_tokens_have_their_own_budgets_and_take_effect_without_restart() {
    let config = small("issued-tokens", |c| {
        c.items_per_hour = 20;
        c.tokens = vec!["static-shared".into()];
    });
    let mut store = Store::open(config.db.sqlite_path().unwrap()).unwrap();
    let alice = store.add_token(Some("alice"), Some(5)).unwrap();
    let bob = store.add_token(Some("bob"), None).unwrap();
    let server = start(config.clone());
    let t = raw(&server);
    let bearer = |tok: &str| format!("Bearer {tok}");
    let (a, b) = (bearer(&alice.token), bearer(&bob.token));
    fn auth(h: &str) -> [(&'static str, &str); 1] {
        [("authorization", h)]
    }
    // Alice's own budget of 5 items.
    assert_eq!(create(&t, 5, &auth(&a)).0, 201);
    assert_eq!(create(&t, 1, &auth(&a)), (429, "rate_limited".into()));
    // Bob has the server's default, 20, untouched by Alice's spending.
    assert_eq!(create(&t, 20, &auth(&b)).0, 201);
    assert_eq!(create(&t, 1, &auth(&b)), (429, "rate_limited".into()));
    // The static token still works, with one budget of its own.
    let s = bearer("static-shared");
    assert_eq!(create(&t, 20, &auth(&s)).0, 201);
    assert_eq!(create(&t, 1, &auth(&s)), (429, "rate_limited".into()));
    // A token issued while the server runs works at once.
    let carol = store.add_token(Some("carol"), Some(3)).unwrap();
    let c = bearer(&carol.token);
    assert_eq!(create(&t, 3, &auth(&c)).0, 201);
    assert_eq!(create(&t, 1, &auth(&c)), (429, "rate_limited".into()));
    // Revoked while the server runs: refused at once, with the usual code.
    let dave = store.add_token(None, None).unwrap();
    let d = bearer(&dave.token);
    assert_eq!(create(&t, 1, &auth(&d)).0, 201);
    store.revoke_token(dave.info.id).unwrap();
    assert_eq!(create(&t, 1, &auth(&d)), (401, "invalid_token".into()));
    assert_eq!(
        create(&t, 1, &auth("Bearer psi_00")),
        (401, "invalid_token".into())
    );
    assert_eq!(create(&t, 1, &[]), (401, "missing_token".into()));
    server.shutdown().unwrap();
}

#[test]
fn the_first_issued_token_turns_authentication_on_and_revoking_keeps_it_on() {
    let config = small("auth-on", |c| c.items_per_hour = 0);
    let server = start(config.clone());
    let t = raw(&server);
    assert_eq!(create(&t, 1, &[]).0, 201, "no tokens: open");
    let mut store = Store::open(config.db.sqlite_path().unwrap()).unwrap();
    let only = store.add_token(None, None).unwrap();
    assert_eq!(create(&t, 1, &[]), (401, "missing_token".into()));
    let h = format!("Bearer {}", only.token.as_str());
    assert_eq!(create(&t, 1, &[("authorization", &h)]).0, 201);
    store.revoke_token(only.info.id).unwrap();
    assert_eq!(
        create(&t, 1, &[]),
        (401, "missing_token".into()),
        "revoking the last token does not open the server"
    );
    assert_eq!(
        create(&t, 1, &[("authorization", &h)]),
        (401, "invalid_token".into())
    );
    server.shutdown().unwrap();
}

#[test]
fn budgets_survive_a_restart() {
    let config = small("budget-restart", |c| c.items_per_hour = 100);
    let token = Store::open(config.db.sqlite_path().unwrap())
        .unwrap()
        .add_token(Some("t"), Some(50))
        .unwrap();
    let h = format!("Bearer {}", token.token.as_str());
    let server = start(config.clone());
    let t = raw(&server);
    assert_eq!(create(&t, 45, &[("authorization", &h)]).0, 201);
    server.shutdown().unwrap();

    let server = start(config.clone());
    let t = raw(&server);
    assert_eq!(
        create(&t, 10, &[("authorization", &h)]),
        (429, "rate_limited".into()),
        "45 of 50 were spent before the restart"
    );
    assert_eq!(create(&t, 5, &[("authorization", &h)]).0, 201);
    server.shutdown().unwrap();

    // The same for an address-keyed budget (no authentication).
    let config = small("budget-restart-ip", |c| c.items_per_hour = 100);
    let server = start(config.clone());
    assert_eq!(create(&raw(&server), 80, &[]).0, 201);
    server.shutdown().unwrap();
    let server = start(config.clone());
    let t = raw(&server);
    assert_eq!(create(&t, 30, &[]), (429, "rate_limited".into()));
    assert_eq!(create(&t, 20, &[]).0, 201);
    server.shutdown().unwrap();
}
