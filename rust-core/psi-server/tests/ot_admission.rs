//! OT-PSI admission and charging over the real server on loopback
//! (`docs/adr/0015-ot-psi-admission-and-charging.md`): a session gets no more OPRF
//! evaluations than it was charged for, finished runs free their OT slot at once, and
//! one caller cannot hold every OT slot.

mod common;

use common::*;
use psi_client::{Method, Response};
use psi_core::ItemSet;
use psi_core::ot::messages::max_bins_for;
use psi_core::ot::{ClientStep, OtClient, OtConfig};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;

const BIN: (&str, &str) = ("content-type", "application/octet-stream");
/// Frame offsets of the hello's `n_c` and `m` (`docs/protocol/ot-psi.md` §4.1: 9-byte
/// header, suite, 32-byte nonce).
const N_C: std::ops::Range<usize> = 42..46;
const BINS: std::ops::Range<usize> = 46..50;

fn expect(r: &Response, status: u16, code: &str) {
    assert_eq!(r.status, status, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(error_code(r), code);
}

fn round(t: &Raw, id: &str, body: &[u8], auth: &[(&'static str, &str)]) -> Response {
    let mut h = vec![BIN];
    h.extend_from_slice(auth);
    send(
        t,
        Method::Post,
        &format!("/v1/sessions/{id}/ot/round"),
        &h,
        body,
    )
}

fn client(n: u32, seed: u64) -> (OtClient, Vec<u8>) {
    let items = ItemSet::new((0..n as u64).map(id));
    OtClient::start(
        items,
        OtConfig::default().with_chunk_rows(1 << 12),
        &mut ChaCha20Rng::seed_from_u64(seed),
    )
    .unwrap()
}

/// Runs a whole OT-PSI protocol on session `sid` (no label step, no DELETE).
fn run_to_outputs(t: &Raw, sid: &str, n: u32, auth: &[(&'static str, &str)]) -> usize {
    let (mut c, mut request) = client(n, 7);
    loop {
        let r = round(t, sid, &request, auth);
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        match c.handle(&r.body).unwrap() {
            ClientStep::Send(next) => request = next,
            ClientStep::Done(out) => return out.matches.len(),
        }
    }
}

#[test]
fn a_hello_gets_no_more_bins_or_fewer_items_than_the_session_was_charged_for() {
    let mut config = config("ot-bypass");
    config.items_per_hour = 0;
    fill(&config, 50, |_| false);
    let server = start(config);
    let t = raw(&server);

    // The reported bypass: 1 item declared, a hand-built hello asking for 80 bins
    // (16·1 + 64, which the server used to accept: 80 OPRF evaluations for 1 item).
    let sid = session_id(&session(&t, "ot-psi", 1, &[]));
    let (_, hello) = client(1, 1);
    assert_eq!(&hello[BINS], &3u32.to_be_bytes());
    let mut forged = hello.clone();
    forged[BINS].copy_from_slice(&80u32.to_be_bytes());
    expect(&round(&t, &sid, &forged, &[]), 400, "invalid_message");
    // Fewer items than declared (0 items, any table): refused by count.
    forged[N_C].copy_from_slice(&0u32.to_be_bytes());
    forged[BINS].copy_from_slice(&3u32.to_be_bytes());
    expect(&round(&t, &sid, &forged, &[]), 400, "count_mismatch");
    // The honest hello is still accepted on the same session (rejections change nothing;
    // a third would have ended it, ADR 0036).
    assert_eq!(round(&t, &sid, &hello, &[]).status, 200);
    // More items than declared (a client that declared 1 and brings 40, whose table
    // would be 40× bigger): refused as well (another session, deleted after).
    let other = session_id(&session(&t, "ot-psi", 1, &[]));
    let (_, big) = client(40, 2);
    expect(&round(&t, &other, &big, &[]), 400, "count_mismatch");
    let r = send(
        &t,
        Method::Delete,
        &format!("/v1/sessions/{other}"),
        &[],
        &[],
    );
    assert_eq!(r.status, 204);

    // A 5-item session and a 1-item hello.
    let sid = session_id(&session(&t, "ot-psi", 5, &[]));
    expect(&round(&t, &sid, &hello, &[]), 400, "count_mismatch");
    assert_eq!(run_to_outputs(&t, &sid, 5, &[]), 5);
    assert_eq!(server.state.live_sessions(), 2);
}

#[test]
fn ot_sessions_are_charged_their_table_size() {
    let mut config = config("ot-charge");
    // Exactly one 4-item OT session: its table has max_bins_for(4) = 41 bins, and each
    // bin is one OPRF evaluation, so that is its charge (4 used to be charged).
    let m4 = u64::from(max_bins_for(4));
    assert_eq!(m4, 41);
    config.items_per_hour = m4;
    fill(&config, 50, |_| false);
    let server = start(config);
    let t = raw(&server);
    session_id(&session(&t, "ot-psi", 4, &[]));
    // Nothing is left: even a 1-item DH session is over the budget.
    expect(&session(&t, "dh-psi", 1, &[]), 429, "rate_limited");
}

#[test]
fn a_finished_ot_run_frees_its_slot_at_once() {
    let mut config = config("ot-slot");
    config.items_per_hour = 0;
    config.max_ot_sessions = 1;
    fill(&config, 50, |_| false);
    let server = start(config);
    let t = raw(&server);
    let first = session_id(&session(&t, "ot-psi", 3, &[]));
    assert_eq!(server.state.ot_runs_in_progress(), 1);
    // While the first run is in progress the only slot is taken.
    expect(&session(&t, "ot-psi", 3, &[]), 503, "ot_capacity");
    assert_eq!(run_to_outputs(&t, &first, 3, &[]), 3);
    // The run is over (the session lives on for its label step, well within its TTL, and
    // is not deleted) and its slot is free: a new OT session is admitted.
    assert_eq!(server.state.ot_runs_in_progress(), 0);
    assert_eq!(server.state.live_sessions(), 1);
    let second = session_id(&session(&t, "ot-psi", 3, &[]));
    assert_ne!(first, second);
    // The first session is still there: another round is out of phase, not unknown.
    let (_, hello) = client(3, 3);
    expect(&round(&t, &first, &hello, &[]), 409, "wrong_phase");
    // Deleting a session whose run is in progress frees its slot too.
    let r = send(
        &t,
        Method::Delete,
        &format!("/v1/sessions/{second}"),
        &[],
        &[],
    );
    assert_eq!(r.status, 204);
    assert_eq!(server.state.ot_runs_in_progress(), 0);
    session_id(&session(&t, "ot-psi", 3, &[]));
}

#[test]
fn one_caller_cannot_hold_every_ot_slot() {
    let mut config = config("ot-caller");
    config.items_per_hour = 0;
    config.max_ot_sessions = 8;
    config.max_ot_sessions_per_client = 2;
    config.ot_sessions_per_hour = 3;
    config.tokens = vec!["a".into(), "b".into()];
    fill(&config, 50, |_| false);
    let server = start(config);
    let t = raw(&server);
    let a = [("authorization", "Bearer a")];
    let b = [("authorization", "Bearer b")];
    let a1 = session_id(&session(&t, "ot-psi", 2, &a));
    let a2 = session_id(&session(&t, "ot-psi", 2, &a));
    // Caller a has 2 runs in progress: its cap.
    expect(&session(&t, "ot-psi", 2, &a), 503, "ot_capacity");
    // DH-PSI is not affected, nor is caller b.
    session_id(&session(&t, "dh-psi", 2, &a));
    session_id(&session(&t, "ot-psi", 2, &b));
    // Finishing a run gives caller a a slot back...
    run_to_outputs(&t, &a1, 2, &a);
    session_id(&session(&t, "ot-psi", 2, &a));
    // ...but its hourly OT budget (3) is now spent, whatever slots are free.
    let r = send(&t, Method::Delete, &format!("/v1/sessions/{a2}"), &a, &[]);
    assert_eq!(r.status, 204);
    assert_eq!(server.state.ot_runs_in_progress(), 2);
    let r = session(&t, "ot-psi", 2, &a);
    expect(&r, 429, "rate_limited");
    assert!(!String::from_utf8_lossy(&r.body).contains("+1202"));
    // Caller b's budget is its own.
    session_id(&session(&t, "ot-psi", 2, &b));
}

/// Waits (bounded) until no OT run is in progress.
fn wait_for_no_ot_runs(server: &psi_server::RunningServer) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while server.state.ot_runs_in_progress() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "stalled OT run still holds its slot"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn a_stalled_ot_run_frees_its_slot_after_the_idle_timeout() {
    let mut config = config("ot-idle");
    config.items_per_hour = 0;
    config.max_ot_sessions = 1;
    config.ot_idle_timeout = std::time::Duration::from_secs(1);
    fill(&config, 50, |_| false);
    let server = start(config);
    let t = raw(&server);
    // A session that never sends its hello: its slot goes at the next sweep after 1 s,
    // not when the session expires (300 s).
    let silent = session_id(&session(&t, "ot-psi", 3, &[]));
    expect(&session(&t, "ot-psi", 3, &[]), 503, "ot_capacity");
    wait_for_no_ot_runs(&server);
    // The sweep ended the session, not only its run: it no longer counts against the
    // session caps, a late request is told it is over, and a DELETE of it succeeds.
    assert_eq!(server.state.live_sessions(), 0);
    let (_, hello) = client(3, 3);
    let late = round(&t, &silent, &hello, &[]);
    expect(&late, 409, "wrong_phase");
    assert!(String::from_utf8_lossy(&late.body).contains("ended by the server"));
    let path = format!("/v1/sessions/{silent}");
    assert_eq!(send(&t, Method::Delete, &path, &[], b"").status, 204);
    // A session that stalls after its hello (the O(registry) state is built) likewise.
    let stalled = session_id(&session(&t, "ot-psi", 3, &[]));
    let (_, hello) = client(3, 4);
    assert_eq!(round(&t, &stalled, &hello, &[]).status, 200);
    expect(&session(&t, "ot-psi", 3, &[]), 503, "ot_capacity");
    wait_for_no_ot_runs(&server);
    // The slot is free again: a full run goes through.
    let next = session_id(&session(&t, "ot-psi", 3, &[]));
    assert_eq!(run_to_outputs(&t, &next, 3, &[]), 3);
}
