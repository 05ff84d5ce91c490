//! Issue 35 item 6 (the low finding on `X-Forwarded-For`) as a `psi attack` row
//! (`forwarded-quote`): the server trusts 127.0.0.1 as its reverse proxy (`psi serve
//! --trusted-proxy 127.0.0.1`), and everything below reaches it from that address, as
//! through the proxy. The honest clients send with `X-Forwarded-For: <their own
//! address>`, as the proxy appends it (`RawTransport::via_proxy`). The attacker writes
//! its own `X-Forwarded-For` with a quote or junk in it: through a proxy that appends,
//! the header becomes `<what it wrote>, 127.180.0.1`; through one that passes it on, just
//! what it wrote. Before the fix a quote made the whole header malformed and such health
//! requests were charged to the proxy's own address: after its hourly health budget a
//! balancer probing from the proxy's address was refused. Now the header is split
//! without quotes (the request is charged to the attacker's address) and a malformed one
//! is answered 400. A balancer probes `GET /v1/health` from 127.0.0.1 without the header
//! every `PROBE_EVERY` while the attack runs; its answers are tallied as `balancer
//! probe: ...`. In place once the attacker sent more health requests than the proxy's
//! hourly budget (`--health-per-hour`: the default 3,600; quick: 300, set on its server).

use super::attacks::{Ctx, Tally, pause, reuse_or_open};
use psi_client::Method;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// The proxy's address (`--trusted-proxy`).
pub(super) const PROXY: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// `--health-per-hour` of the quick server, and the server default.
pub(super) const QUICK_HEALTH_PER_HOUR: u64 = 300;
const HEALTH_PER_HOUR: u64 = 3_600;

const PROBE_EVERY: Duration = Duration::from_millis(250);

/// What the attacker writes into `X-Forwarded-For`.
const WRITTEN: [&str; 5] = [
    "\"",
    "\"x",
    "\"203.0.113.9, 198.51.100.7\"",
    "junk",
    "\"127.0.0.1",
];

pub(super) fn forwarded_quote(ctx: &Ctx, stop: &AtomicBool, ready: &AtomicBool, tally: &Tally) {
    let in_place = if ctx.quick {
        QUICK_HEALTH_PER_HOUR
    } else {
        HEALTH_PER_HOUR
    };
    let sent = AtomicU64::new(0);
    std::thread::scope(|s| {
        // The balancer.
        s.spawn(move || {
            let mut conn = None;
            while !stop.load(Ordering::Relaxed) {
                if let Some(c) = reuse_or_open(&mut conn, PROXY, ctx, stop, tally) {
                    match c.request(Method::Get, "/v1/health", &[], &[]) {
                        Ok(r) => {
                            tally.add(format!("balancer probe: {}", r.outcome()));
                            if r.status != 200 {
                                conn = None;
                            }
                        }
                        Err(e) => {
                            tally.io("balancer probe", &e);
                            conn = None;
                        }
                    }
                }
                pause(stop, PROBE_EVERY);
            }
        });
        // The attacker: two connections from the proxy's address.
        for t in 0..2u64 {
            let sent = &sent;
            s.spawn(move || {
                let mut conn = None;
                let mut k = t as usize;
                while !stop.load(Ordering::Relaxed) {
                    let Some(c) = reuse_or_open(&mut conn, PROXY, ctx, stop, tally) else {
                        continue;
                    };
                    let written = WRITTEN[k % WRITTEN.len()];
                    // Every other request as a proxy that appends the attacker's address.
                    let appended = (k / WRITTEN.len()).is_multiple_of(2);
                    k += 1;
                    let (header, what) = if appended {
                        (
                            format!("{written}, 127.180.0.1"),
                            "quote/junk, proxy appended",
                        )
                    } else {
                        (written.to_string(), "quote/junk alone")
                    };
                    match c.request(
                        Method::Get,
                        "/v1/health",
                        &[("x-forwarded-for", &header)],
                        &[],
                    ) {
                        Ok(r) => {
                            tally.add(format!("{what}: {}", r.outcome()));
                            // A 429 closes the connection.
                            if r.status == 429 {
                                conn = None;
                            }
                        }
                        Err(e) => {
                            tally.io(what, &e);
                            conn = None;
                        }
                    }
                    if sent.fetch_add(1, Ordering::Relaxed) + 1 >= in_place {
                        ready.store(true, Ordering::Relaxed);
                    }
                }
            });
        }
    });
}
