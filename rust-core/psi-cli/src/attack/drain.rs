//! Issue 35 item 5: budget drain. Callers without a token share their network's budget
//! and the server-wide ceiling (ADR 0038); this attack spends both from addresses of the
//! honest clients' own /24s (hosts 2 to 5 of 127.(200+c).1.0/24, next to the honest
//! client at .1) and keeps them spent, so that without the floor (ADR 0044) every honest
//! run is refused with `429` although no honest client spent its own budget.

use super::attacks::{Ctx, IO, JSON, Tally, created, pause, session_body};
use super::raw::Conn;
use psi_client::Method;
use psi_core::Protocol;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The /24s drained: those of the first 50 honest clients under attack (phase 1).
const BLOCKS: u8 = 50;

/// Attacker `host` (2..=5) in honest client `c`'s /24 of the attacked phase.
fn neighbour(c: u8, host: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 200 + c, 1, host)
}

/// One session of `n` items from `conn`, deleted at once (the charge stays: only the
/// table is freed). True when it was admitted.
fn spend(conn: &mut Conn, n: u64, tally: &Tally) -> Option<bool> {
    let body = session_body(Protocol::Dh, n, false);
    let r = match conn.request(Method::Post, "/v1/sessions", &[JSON], body.as_bytes()) {
        Ok(r) => r,
        Err(e) => {
            tally.io("request", &e);
            return None;
        }
    };
    tally.add(r.outcome());
    if r.status != 201 {
        return Some(false);
    }
    if let Some((id, _)) = created(&r.body) {
        let path = format!("/v1/sessions/{id}");
        if let Err(e) = conn.request(Method::Delete, &path, &[], &[]) {
            tally.io("delete", &e);
        }
    }
    Some(true)
}

/// Spends every budget the attacker's addresses reach: first whole sessions of the
/// server's largest size from each address (its own budget, its /24's, the ceiling), then
/// in place; then, until `stop`, small sessions from every address in turn, so that what
/// the shared levels refill is spent again before an honest run can take it.
pub(super) fn budget_drain(ctx: &Ctx, stop: &AtomicBool, ready: &AtomicBool, tally: &Tally) {
    let mut conns: Vec<Option<Conn>> = (0..BLOCKS as usize * 4).map(|_| None).collect();
    let from = |i: usize| neighbour((i / 4) as u8, 2 + (i % 4) as u8);
    let mut round = 0u32;
    while !stop.load(Ordering::Relaxed) {
        // The first round spends whole budgets; later rounds take what refilled.
        let n = if round == 0 {
            ctx.max_client_items()
        } else {
            20
        };
        for (i, slot) in conns.iter_mut().enumerate() {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            if slot.is_none() {
                match Conn::open(from(i), ctx.server(), IO, None) {
                    Ok(c) => *slot = Some(c),
                    Err(e) => {
                        tally.io("connect", &e);
                        continue;
                    }
                }
            }
            let Some(conn) = slot.as_mut() else { continue };
            // At most a few sessions per address and round: refusals come quickly.
            for _ in 0..3 {
                match spend(conn, n, tally) {
                    Some(true) => {}
                    Some(false) => break,
                    None => {
                        *slot = None;
                        break;
                    }
                }
            }
        }
        if round == 0 {
            ready.store(true, Ordering::Relaxed);
        }
        round += 1;
        if !pause(stop, Duration::from_millis(20)) {
            return;
        }
    }
}
