//! Issue 35 item 3 as a `psi attack` row: one address presenting a new made-up bearer
//! token on every request (`unknown-tokens`), as fast as one keep-alive connection per
//! worker goes, against a server without authentication (its honest callers present no
//! token). Each request is `DELETE /v1/sessions/{unknown}`, authenticated like every step
//! and then answered `404 unknown_session`. In place once `TOKENS` (quick: `QUICK_TOKENS`)
//! distinct tokens were sent: more than the 65,536 credentials the server once remembered
//! before every lookup scanned them all (docs/adr/0046-remembered-credentials.md).

use super::attacks::{Ctx, Tally, addr, pause, reuse_or_open};
use psi_client::Method;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Distinct tokens before the attack counts as in place.
const TOKENS: u64 = 70_000;
const QUICK_TOKENS: u64 = 2_000;

/// Connections (threads) sending from the one address.
const WORKERS: u64 = 2;

pub(super) fn unknown_tokens(ctx: &Ctx, stop: &AtomicBool, ready: &AtomicBool, tally: &Tally) {
    let sent = AtomicU64::new(0);
    let in_place = if ctx.quick { QUICK_TOKENS } else { TOKENS };
    // Distinct across runs of the command too.
    let seed = u64::from(std::process::id()) << 40;
    std::thread::scope(|s| {
        for _ in 0..WORKERS {
            let sent = &sent;
            s.spawn(move || {
                let from = addr(120, 1);
                let mut conn = None;
                while !stop.load(Ordering::Relaxed) {
                    let Some(c) = reuse_or_open(&mut conn, from, ctx, stop, tally) else {
                        continue;
                    };
                    let n = sent.fetch_add(1, Ordering::Relaxed);
                    let bearer = format!("Bearer psi_{:064x}", seed | n);
                    let r = c.request(
                        Method::Delete,
                        "/v1/sessions/nosuchsession",
                        &[("authorization", &bearer)],
                        &[],
                    );
                    match r {
                        Ok(r) => {
                            tally.add(r.outcome());
                            if r.status == 429 {
                                // Refused for the address: wait as told (at most 1 s here).
                                pause(stop, Duration::from_secs(1));
                            }
                        }
                        Err(e) => {
                            tally.io("request", &e);
                            conn = None;
                        }
                    }
                    if n + 1 >= in_place {
                        ready.store(true, Ordering::Relaxed);
                    }
                }
            });
        }
    });
}
