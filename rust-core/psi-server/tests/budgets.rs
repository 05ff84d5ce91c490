//! Budgets per address block and the encoded-set download budget
//! (docs/adr/0038-budgets-per-address-block.md), over loopback HTTP against the real
//! server: many IPv6 /56s of one /48 (or /48s of one /32, addresses of one IPv4 /24) share
//! a few budgets instead of getting one each; every caller without a token is under a
//! server-wide ceiling; a charge refused by one level takes nothing from the others; full
//! downloads of the encoded set spend a byte budget and 304 answers stay free.
//!
//! The callers' addresses come from `X-Forwarded-For`, with loopback as a trusted proxy.

mod common;

use common::*;
use psi_client::{Method, Response};
use psi_server::{AppState, Config, Registry, RunningServer, Store};

/// Items of one caller's budget in these tests.
const B: u64 = 100;

/// A server of 50 entries; `tune` gets the config and the encoded set's size in bytes
/// (it varies with the key), and sets the budgets.
fn server_with(name: &str, tune: impl FnOnce(&mut Config, u64)) -> (RunningServer, Config) {
    let mut c = config(name);
    c.items_per_hour = B;
    // The levels alone; the floor under them has its own tests below.
    c.address_floor_divisor = 0;
    c.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap()];
    fill(&c, 50, |_| false);
    let registry = Registry::load(&c, &mut |_, _| {}).unwrap();
    tune(&mut c, registry.stats().encoded_set_bytes);
    let server = RunningServer::start(
        AppState::with_registry(c.clone(), registry),
        ([127, 0, 0, 1], 0).into(),
    )
    .unwrap();
    (server, c)
}

/// A DH-PSI session of `n` items from `ip`: its response.
fn create(t: &Raw, ip: &str, n: u32) -> Response {
    session(t, "dh-psi", n, &[("x-forwarded-for", ip)])
}

/// Asserts `r` is a `429 rate_limited` with a `Retry-After` of at least a second and a
/// message containing `says`.
fn assert_refused(r: &Response, says: &str) {
    let body = String::from_utf8_lossy(&r.body).to_string();
    assert_eq!(r.status, 429, "{body}");
    assert_eq!(error_code(r), "rate_limited");
    assert!(body.contains(says), "{body}");
    let wait: u64 = r
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("a Retry-After in seconds");
    assert!((1..=3600).contains(&wait), "{wait}");
}

/// Sessions of a full budget each from `ips`: how many were admitted; every refusal is a
/// `429` naming the caller's network.
fn admitted(t: &Raw, ips: impl IntoIterator<Item = String>) -> usize {
    admitted_n(t, ips, B as u32, "network")
}

#[test]
fn many_56s_of_one_48_cannot_get_a_budget_each() {
    // The defaults: a /48 shares 4 budgets, a /32 16, an IPv4 /24 4.
    let (server, _) = server_with("budgets-blocks", |_, _| {});
    let t = raw(&server);
    // Ten /56s of one /48, each spending a whole budget: only four get through (before,
    // each /56 was a caller of its own with a budget of its own: 256 budgets per /48).
    let site = (1..=10).map(|i| format!("2001:db8:1:{i:x}00::1"));
    assert_eq!(admitted(&t, site), 4);
    // A /56 of the same /48 that has spent nothing is refused too, with the network's
    // wait (its own budget is untouched).
    assert_refused(&create(&t, "2001:db8:1:ff00::1", 1), "network");
    // Other /48s of the same /32: the /32 shares 16 budgets, 4 already spent.
    let allocation =
        (2..=6).flat_map(|s| (1..=4).map(move |i| format!("2001:db8:{s:x}:{i:x}00::1")));
    assert_eq!(admitted(&t, allocation), 12);
    // Another /32 is not affected.
    assert_eq!(create(&t, "2001:db9:1:100::1", B as u32).status, 201);
    // IPv4: the addresses of one /24 share 4 budgets; another /24 has its own.
    let block = (1..=6).map(|h| format!("198.51.100.{h}"));
    assert_eq!(admitted(&t, block), 4);
    assert_eq!(create(&t, "198.51.101.1", B as u32).status, 201);
    server.shutdown().unwrap();
}

#[test]
fn the_server_wide_ceiling_bounds_all_callers_without_a_token() {
    let (server, _) = server_with("budgets-ceiling", |c, _| c.address_ceiling_budgets = 3);
    let t = raw(&server);
    // Callers of five unrelated networks: three budgets in all.
    let callers = [
        "192.0.2.1",
        "2001:db8:1::1",
        "203.0.113.1",
        "2001:db9:1::1",
        "198.51.100.1",
    ];
    let mut ok = 0;
    for ip in callers {
        let r = create(&t, ip, B as u32);
        if r.status == 201 {
            ok += 1;
        } else {
            assert_refused(&r, "server-wide");
        }
    }
    assert_eq!(ok, 3);
    server.shutdown().unwrap();
}

#[test]
fn a_charge_refused_by_one_level_charges_no_level() {
    // Each caller 100, an IPv4 /24 200, all callers without a token 300.
    let (server, c) = server_with("budgets-atomic", |c, _| {
        c.ipv4_block_budgets = 2;
        c.address_ceiling_budgets = 3;
    });
    let t = raw(&server);
    assert_eq!(create(&t, "198.51.100.1", 100).status, 201);
    assert_eq!(create(&t, "198.51.100.2", 100).status, 201);
    // The /24 is spent: a third address of it is refused, again and again, and the
    // refusals take nothing from its own budget or the ceiling.
    for _ in 0..3 {
        assert_refused(&create(&t, "198.51.100.3", 60), "network");
    }
    // So the ceiling still holds exactly 100: a caller of another network gets all of it
    // (had the refused charges been taken from the ceiling, this would be refused)...
    assert_eq!(create(&t, "203.0.113.1", 100).status, 201);
    // ...and not one item more.
    assert_refused(&create(&t, "192.0.2.1", 1), "server-wide");
    server.shutdown().unwrap();
    // The saved budgets (written at shutdown) show the same: no bucket for the refused
    // callers, the network and the ceiling spent to the item.
    let rows = Store::open(c.db.sqlite_path().unwrap())
        .unwrap()
        .budgets()
        .unwrap();
    let remaining = |key: &str| {
        rows.iter()
            .find(|r| r.client == key)
            .map(|r| r.remaining.round() as i64)
    };
    assert_eq!(remaining("ip:198.51.100.3"), None, "{rows:?}");
    assert_eq!(remaining("ip:192.0.2.1"), None, "{rows:?}");
    assert_eq!(remaining("ip:198.51.100.1"), Some(0));
    assert_eq!(remaining("net:198.51.100.0/24"), Some(0));
    assert_eq!(remaining("ceiling:address"), Some(0));
}

/// Sessions of `n` items, one from each of `ips`: how many were admitted (each refusal
/// names `refused_by`).
fn admitted_n(t: &Raw, ips: impl IntoIterator<Item = String>, n: u32, refused_by: &str) -> usize {
    let mut ok = 0;
    for ip in ips {
        let r = create(t, &ip, n);
        if r.status == 201 {
            ok += 1;
        } else {
            assert_refused(&r, refused_by);
        }
    }
    ok
}

#[test]
fn a_drained_network_does_not_refuse_a_caller_within_its_floor() {
    // Each caller 100 items, its floor 25 (1/4); an IPv4 /24 200 (and a reserve of 200
    // that only floor charges take); no ceiling.
    let (server, _) = server_with("budgets-floor-network", |c, _| {
        c.ipv4_block_budgets = 2;
        c.address_ceiling_budgets = 0;
        c.address_floor_divisor = 4;
    });
    let t = raw(&server);
    // Two addresses drain the /24 (issue 35: five addresses refused every tokenless user
    // of their /24).
    assert_eq!(create(&t, "198.51.100.1", 100).status, 201);
    assert_eq!(create(&t, "198.51.100.2", 100).status, 201);
    // Another address of it: a run above its floor is refused by the network...
    assert_refused(&create(&t, "198.51.100.3", 60), "network");
    // ...one within its floor goes through, charged to its own budget and the reserve...
    assert_eq!(create(&t, "198.51.100.3", 20).status, 201);
    // ...and its floor is 25 an hour, not more: 20 + 10 is refused.
    assert_refused(&create(&t, "198.51.100.3", 10), "network");
    assert_eq!(create(&t, "198.51.100.3", 5).status, 201);
    // Draining the reserve takes one address per floor: 175 left, 7 more floors of 25.
    let more = (10..30).map(|h| format!("198.51.100.{h}"));
    assert_eq!(admitted_n(&t, more, 25, "network"), 7);
    // Another /24 is untouched.
    assert_eq!(create(&t, "198.51.101.1", 100).status, 201);
    server.shutdown().unwrap();
}

#[test]
fn a_drained_ceiling_does_not_refuse_a_caller_within_its_floor() {
    // Each caller 100 items, its floor 6 (the default 1/16); all callers without a token
    // 300 (and a reserve of 300).
    let (server, _) = server_with("budgets-floor-ceiling", |c, _| {
        c.address_ceiling_budgets = 3;
        c.address_floor_divisor = 16;
    });
    let t = raw(&server);
    // Three networks spend the ceiling (issue 35: 60 addresses over 15 /24s refused every
    // 1,000-contact run server-wide).
    for ip in ["192.0.2.1", "203.0.113.1", "2001:db8:1::1"] {
        assert_eq!(create(&t, ip, 100).status, 201, "{ip}");
    }
    assert_refused(&create(&t, "198.51.100.1", 7), "server-wide");
    assert_eq!(create(&t, "198.51.100.1", 6).status, 201);
    assert_refused(&create(&t, "198.51.100.1", 1), "server-wide");
    // The reserve (300) holds 49 more floors of 6 across addresses of many networks (each
    // /24 also has its own reserve of 4 budgets, not binding here).
    let others = (1..=60).map(|i| format!("10.{i}.0.1"));
    assert_eq!(admitted_n(&t, others, 6, "server-wide"), 49);
    server.shutdown().unwrap();
}

fn download(t: &Raw, ip: &str, if_none_match: Option<&str>) -> Response {
    let mut h = vec![("x-forwarded-for", ip)];
    if let Some(tag) = if_none_match {
        h.push(("if-none-match", tag));
    }
    send(t, Method::Get, "/v1/dh/encoded-set", &h, b"")
}

#[test]
fn full_downloads_of_the_encoded_set_have_a_byte_budget_and_304s_are_free() {
    let mut size = 0;
    let (server, _) = server_with("budgets-download", |c, bytes| {
        size = bytes;
        c.encoded_set_bytes_per_hour = 2 * bytes + bytes / 2;
    });
    let t = raw(&server);
    let ip = "198.51.100.7";
    let first = download(&t, ip, None);
    assert_eq!(first.status, 200);
    assert_eq!(first.body.len() as u64, size);
    let etag = first.header("etag").unwrap().to_string();
    assert_eq!(download(&t, ip, None).status, 200);
    // A third full download is over the budget.
    let r = download(&t, ip, None);
    assert_refused(&r, "encoded-set download");
    assert!(String::from_utf8_lossy(&r.body).contains("304"));
    // A revalidation of the set the caller holds is still answered, and free.
    for _ in 0..5 {
        let r = download(&t, ip, Some(&etag));
        assert_eq!(r.status, 304);
        assert!(r.body.is_empty());
    }
    // Other callers have their own budget.
    assert_eq!(download(&t, "203.0.113.7", None).status, 200);
    server.shutdown().unwrap();

    // A set larger than the per-caller budget: one full download an hour, not none.
    let (server, _) = server_with("budgets-download-large", |c, bytes| {
        c.encoded_set_bytes_per_hour = bytes / 2;
    });
    let t = raw(&server);
    assert_eq!(download(&t, ip, None).status, 200);
    assert_refused(&download(&t, ip, None), "encoded-set download");
    server.shutdown().unwrap();
}
