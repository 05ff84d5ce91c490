//! Issue 35 item 4 as a `psi attack` row (`pg-lookups`): cheap requests flooded at a
//! server whose PostgreSQL is a few milliseconds away (`--db-delay-ms` through the relay
//! of `relay.rs`), on a registry without tokens (authentication off). Before the fix
//! every token lookup went through one blocking connection behind a mutex, and until a
//! token existed every request asked the database whether any exists: at 6 ms an
//! instance answered at most about 170 API requests a second, and a flood of free 304s
//! made honest runs 7-25 times slower. Now the "any tokens" answer is kept by the store
//! watcher, lookups go through the async pool with short positive and negative caches,
//! and an address's lookups of credentials not known valid are budgeted (ADR 0040, 0046).
//!
//! Eight flooders (quick: two) on one keep-alive connection each, from one address, send
//! `GET /v1/dh/encoded-set` with `If-None-Match` of the current set (answered 304, free)
//! as fast as they are answered; four more (quick: two) send the same with a new made-up
//! bearer token each time, moving to the next address after each address's 600 lookups
//! an hour (the server's default `--invalid-tokens-per-hour`), so every one of their
//! requests costs a real lookup. In place once the flood has run `FLOOD` and the token
//! senders sent `LOOKUPS` tokens (quick: `QUICK_FLOOD`, `QUICK_LOOKUPS`).

use super::attacks::{Ctx, Tally, addr, reuse_or_open};
use psi_client::Method;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const FLOOD: Duration = Duration::from_secs(5);
const QUICK_FLOOD: Duration = Duration::from_secs(1);
const LOOKUPS: u64 = 1_200;
const QUICK_LOOKUPS: u64 = 200;

/// Made-up tokens sent from one address before the next: the server's default budget of
/// lookups of credentials not known valid, per address and hour.
const PER_ADDRESS: u64 = 600;

pub(super) fn pg_lookups(ctx: &Ctx, stop: &AtomicBool, ready: &AtomicBool, tally: &Tally) {
    let (flood_for, lookup_target, flooders, senders) = if ctx.quick {
        (QUICK_FLOOD, QUICK_LOOKUPS, 2, 2)
    } else {
        (FLOOD, LOOKUPS, 8, 4)
    };
    let t0 = Instant::now();
    let flooded = AtomicU64::new(0);
    let tokens = AtomicU64::new(0);
    let etag = ctx.etag().to_string();
    // Distinct across runs of the command too.
    let seed = u64::from(std::process::id()) << 40;
    let check_ready = |flooded: &AtomicU64, tokens: &AtomicU64| {
        if flooded.load(Ordering::Relaxed) > 0
            && t0.elapsed() >= flood_for
            && tokens.load(Ordering::Relaxed) >= lookup_target
        {
            ready.store(true, Ordering::Relaxed);
        }
    };
    std::thread::scope(|s| {
        for _ in 0..flooders {
            let (flooded, tokens, etag) = (&flooded, &tokens, &etag);
            s.spawn(move || {
                let mut conn = None;
                while !stop.load(Ordering::Relaxed) {
                    let Some(c) = reuse_or_open(&mut conn, addr(170, 1), ctx, stop, tally) else {
                        continue;
                    };
                    let r = c.request(
                        Method::Get,
                        "/v1/dh/encoded-set",
                        &[("if-none-match", etag)],
                        &[],
                    );
                    match r {
                        Ok(r) => tally.add(format!("if-none-match: {}", r.outcome())),
                        Err(e) => {
                            tally.io("if-none-match", &e);
                            conn = None;
                        }
                    }
                    flooded.fetch_add(1, Ordering::Relaxed);
                    check_ready(flooded, tokens);
                }
            });
        }
        for _ in 0..senders {
            let (flooded, tokens, etag) = (&flooded, &tokens, &etag);
            s.spawn(move || {
                let mut conn = None;
                let mut at = u64::MAX;
                while !stop.load(Ordering::Relaxed) {
                    let n = tokens.fetch_add(1, Ordering::Relaxed);
                    // Address k of 127.171.0.0/16 and up: a fresh lookup budget each.
                    let k = n / PER_ADDRESS;
                    if k != at {
                        at = k;
                        conn = None;
                    }
                    let from = addr(171 + ((k / 254) % 20) as u8, 1 + (k % 254) as u8);
                    let Some(c) = reuse_or_open(&mut conn, from, ctx, stop, tally) else {
                        continue;
                    };
                    let bearer = format!("Bearer psi_{:064x}", seed | n);
                    let r = c.request(
                        Method::Get,
                        "/v1/dh/encoded-set",
                        &[("if-none-match", etag), ("authorization", &bearer)],
                        &[],
                    );
                    match r {
                        Ok(r) => tally.add(format!("unknown token: {}", r.outcome())),
                        Err(e) => {
                            tally.io("unknown token", &e);
                            conn = None;
                        }
                    }
                    check_ready(flooded, tokens);
                }
            });
        }
    });
}
