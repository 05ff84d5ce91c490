//! What the client takes from a server: how large each response may be, and the checks on
//! every number it reads (headers and JSON fields). A server is a peer like any other: a
//! malicious or broken one must get a typed error or have its value ignored, never a panic,
//! an unbounded allocation or a value that steers the client outside a plausible range
//! (docs/security.md §4, docs/adr/0035-client-response-caps-and-redirects.md).

use crate::error::ClientError;
use psi_core::Protocol;
use psi_http::{Route, SessionCreated};
use std::time::Duration;

/// Largest `GET /v1/health` body accepted: a health is under 2 KB (a few hundred bytes of
/// numbers, the protocol and feature names).
pub const HEALTH_RESPONSE_BYTES: u64 = 64 << 10;
/// Largest body accepted in answer to creating or deleting a session (the created
/// session's JSON is about 300 bytes; a deletion's is empty); a created session that
/// carries the health may have [`HEALTH_RESPONSE_BYTES`] more.
pub const SESSION_RESPONSE_BYTES: u64 = 16 << 10;
/// Added to twice the cost model's largest response of a protocol step
/// ([`step_response_cap`]): room for a registry that grew since the session was created
/// and for framing.
pub const STEP_RESPONSE_SLACK: u64 = 1 << 20;
/// Longest `Retry-After` taken from a server: a day. A longer one is read as a day (the
/// run is not retried in either case: the driver waits at most 30 s).
pub const MAX_RETRY_AFTER_SECS: u64 = 86_400;
/// Longest session id accepted (the reference server's are an instance name of at most 16
/// characters, `-` and 32 hex digits): the id goes into every later URL, so it must be a
/// plain token.
pub const MAX_SESSION_ID_LEN: usize = 128;

/// The response cap of one request to `route`: the route's own (health and sessions: a few
/// KB; protocol steps: `step`, sized by the protocol for the session; label steps and the
/// probe: the configured cap, or `probe` for the probe), never above `configured`
/// ([`crate::ClientConfig::max_response_bytes`]).
pub(crate) fn route_cap(
    route: Route,
    step: Option<u64>,
    probe: Option<u64>,
    configured: u64,
) -> u64 {
    let own = match route {
        Route::Health => HEALTH_RESPONSE_BYTES,
        // A created session may carry the health (`?health=1`, ADR 0054).
        Route::CreateSession => SESSION_RESPONSE_BYTES + HEALTH_RESPONSE_BYTES,
        Route::DeleteSession => SESSION_RESPONSE_BYTES,
        // The group relay's JSON answers (a roster of 16 keys is about 2 KB) and empty ones.
        Route::CreateGroup
        | Route::JoinGroup
        | Route::GroupState
        | Route::EndGroup
        | Route::PostGroupMessage => SESSION_RESPONSE_BYTES,
        // An envelope: `step` is the relay's `max_message_bytes`.
        Route::FetchGroupMessage => step.unwrap_or(u64::MAX),
        Route::DhQuery
        | Route::DhEncodedSet
        | Route::OtRound
        | Route::Cm20Round
        | Route::GbfRound => step.unwrap_or(u64::MAX),
        // The probe's, and sync mode's downloads, sized by the run for what it asked.
        Route::ProbeDown | Route::ProbeUp | Route::SyncSnapshot | Route::SyncDelta => {
            probe.unwrap_or(u64::MAX)
        }
        // Label steps: the records' sizes are the server's data, not the protocol's
        // (docs/protocol/labels.md); the configured cap bounds them.
        Route::LabelQuery | Route::LabelFetch => u64::MAX,
    };
    own.min(configured)
}

/// The largest response a protocol step of `session` (`protocol`, `n` items) may need:
/// twice the cost model's largest response of the run (the DH-PSI evaluation or encoded
/// set, the OT-PSI or CM20-PSI outputs) plus [`STEP_RESPONSE_SLACK`]. The model takes the
/// session's own figures (registry size, limits), bounded by the model's maxima, so a
/// server that overstates them raises the cap at most to the configured one. `None` when
/// the model cannot size the run (the configured cap then applies).
pub(crate) fn step_response_cap(
    protocol: Protocol,
    n: usize,
    session: &SessionCreated,
) -> Option<u64> {
    let largest = largest_step_response(protocol, &session_workload(n, session))?;
    Some(
        largest
            .saturating_mul(2)
            .saturating_add(STEP_RESPONSE_SLACK),
    )
}

/// The requests the cost model predicts for a run of `protocol` over `n` items in
/// `session` (its registry size, limits and label layout), the session's own included, for
/// the progress fraction. A cached DH-PSI set makes one request fewer than predicted.
/// `None` when the model cannot size the run.
pub(crate) fn planned_requests(
    protocol: Protocol,
    n: usize,
    session: &SessionCreated,
    labels: bool,
) -> Option<usize> {
    let w = session_workload(n, session).with_labels(labels);
    psi_core::cost::cost(protocol, &w).map(|c| c.requests.len())
}

/// Whether a run of `protocol` over `n` items in `session` should ask for the label lanes
/// the session offers (`label_lane_width`): the cost model's rule, lanes when they move no
/// more bytes than the label step ([`psi_core::cost::label_lanes_pay_off`], ADR 0053).
pub(crate) fn label_lanes_pay_off(protocol: Protocol, n: usize, session: &SessionCreated) -> bool {
    session.label_lane_width.is_some()
        && psi_core::cost::label_lanes_pay_off(protocol, &session_workload(n, session))
}

/// The cost model's workload for a run of `n` items in `session`: its registry size,
/// limits, label layout and lanes, labels on. One workload for the cap, the plan and the
/// lanes, so the cap always fits the outputs the client asks for.
fn session_workload(n: usize, session: &SessionCreated) -> psi_core::cost::Workload {
    psi_core::cost::Workload::new(n as u64, session.registry_items)
        .with_limits(u64::from(session.max_client_items), session.max_body_bytes)
        .with_label_layout(Some(session.label_bucket_bits), None)
        .with_label_lanes(session.label_lane_width)
}

/// The cost model's largest response to one protocol step of `protocol` for `workload`
/// (the DH-PSI evaluation or encoded set, an OT-PSI or CM20-PSI output chunk; label steps
/// are left out: their caps are the configured one; labels the run carries itself, OT-PSI's
/// and CM20-PSI's label lanes, are in its outputs and counted). `None` when the model cannot size the
/// run.
pub(crate) fn largest_step_response(
    protocol: Protocol,
    workload: &psi_core::cost::Workload,
) -> Option<u64> {
    let carried = psi_core::cost::cost(protocol, &workload.with_labels(true))
        .filter(|c| c.labels_carried && workload.label_lane_width.is_some());
    let cost = match carried {
        Some(c) => c,
        None => psi_core::cost::cost(protocol, &workload.with_labels(false))?,
    };
    // The first exchange is the session's.
    cost.requests.iter().skip(1).map(|e| e.down).max()
}

/// The protocols of `served` whose largest step response ([`largest_step_response`]) fits
/// in `cap` ([`crate::ClientConfig::max_response_bytes`]): the automatic choice picks among
/// these, so a capped client (an app's 32 MiB) does not choose a protocol whose output it
/// would then refuse. A protocol the model cannot size stays. When none fits, all of
/// `served` stay: the run then fails with the cap's error, which names the limit.
pub(crate) fn fitting_protocols(
    served: &[Protocol],
    workload: &psi_core::cost::Workload,
    cap: u64,
) -> Vec<Protocol> {
    let fits: Vec<Protocol> = served
        .iter()
        .copied()
        .filter(|p| largest_step_response(*p, workload).is_none_or(|b| b <= cap))
        .collect();
    if fits.is_empty() {
        served.to_vec()
    } else {
        fits
    }
}

/// Checks a created session's fields before any of them is used: the id is a plain token
/// (it goes into URLs), the protocol is the one asked for, the label layout is one psi-core
/// accepts. The counts need no check here: every use bounds them (the cost model, psi-core's
/// decoders, `check_layout`).
pub(crate) fn check_session(s: &SessionCreated, protocol: Protocol) -> Result<(), ClientError> {
    let bad = |what: &str| Err(ClientError::BadResponse(format!("session body: {what}")));
    if !plain_session_id(&s.session_id) {
        return bad("the session id is not a plain token");
    }
    if s.protocol != protocol.api_name() {
        return bad("the session's protocol is not the one asked for");
    }
    if s.label_bucket_bits > psi_core::labels::MAX_BUCKET_BITS {
        return bad("label bucket bits out of range");
    }
    if let Some(sync) = &s.sync {
        if protocol != Protocol::Dh {
            return bad("sync mode on a session that is not DH-PSI");
        }
        if sync.epoch != s.epoch {
            return bad("sync epoch is not the session's key epoch");
        }
        if !(psi_core::sync::MIN_SYNC_WIDTH..=psi_core::sync::MAX_SYNC_WIDTH).contains(&sync.width)
        {
            return bad("sync tag width out of range");
        }
        if sync.bucket_bits != s.label_bucket_bits {
            return bad("sync bucket bits are not the session's");
        }
    }
    Ok(())
}

/// Whether `id` can go into a URL path as it is: 1 to [`MAX_SESSION_ID_LEN`] ASCII letters,
/// digits, `-` or `_`.
pub(crate) fn plain_session_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_SESSION_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Seconds from a `Retry-After` header (delta-seconds only): `None` for anything but a
/// non-negative integer (`-1`, `NaN`, `inf`, `1e300`, an HTTP date, a number beyond
/// `u64`); at most [`MAX_RETRY_AFTER_SECS`].
pub(crate) fn retry_after(value: &str) -> Option<u64> {
    let v = value.trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // All digits: only an overflow fails to parse, and it is more than a day.
    Some(
        v.parse::<u64>()
            .map_or(MAX_RETRY_AFTER_SECS, |s| s.min(MAX_RETRY_AFTER_SECS)),
    )
}

/// The server's time from a `Server-Timing` header value (`psi;dur=12.5`, milliseconds),
/// `None` if it has none or it is not a finite number; clamped to `[0, 10^6 s]`. `NaN` or
/// `inf` must not reach `Duration`, which panics.
pub(crate) fn server_timing(value: &str) -> Option<Duration> {
    let ms = value
        .split("dur=")
        .nth(1)?
        .split([',', ';'])
        .next()?
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|ms| ms.is_finite())?;
    Some(Duration::from_secs_f64(ms.clamp(0.0, 1e9) / 1e3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_timing_takes_finite_numbers_only() {
        assert_eq!(
            server_timing("psi;dur=12.5"),
            Some(Duration::from_micros(12_500))
        );
        assert_eq!(server_timing("psi;dur=0, db;dur=3"), Some(Duration::ZERO));
        assert_eq!(server_timing("psi;dur=-1"), Some(Duration::ZERO));
        assert_eq!(
            server_timing("psi;dur=1e300"),
            Some(Duration::from_secs(1_000_000))
        );
        for bad in [
            "psi;dur=NaN",
            "psi;dur=nan",
            "psi;dur=inf",
            "psi;dur=-inf",
            "psi;dur=",
            "psi;dur=x",
            "psi",
            "",
        ] {
            assert_eq!(server_timing(bad), None, "{bad}");
        }
    }

    #[test]
    fn retry_after_takes_whole_seconds_up_to_a_day() {
        assert_eq!(retry_after("7"), Some(7));
        assert_eq!(retry_after(" 0 "), Some(0));
        assert_eq!(retry_after("86401"), Some(MAX_RETRY_AFTER_SECS));
        assert_eq!(
            retry_after("18446744073709551615"),
            Some(MAX_RETRY_AFTER_SECS)
        );
        assert_eq!(
            retry_after("99999999999999999999999"),
            Some(MAX_RETRY_AFTER_SECS)
        );
        for bad in [
            "NaN",
            "inf",
            "-1",
            "1e300",
            "1.5",
            "+3",
            "",
            "Wed, 21 Oct 2015 07:28:00 GMT",
        ] {
            assert_eq!(retry_after(bad), None, "{bad}");
        }
    }

    fn session(registry_items: u64) -> SessionCreated {
        SessionCreated {
            session_id: "0123456789abcdef0123456789abcdef".into(),
            protocol: "ot-psi".into(),
            epoch: 1,
            registry_items,
            max_client_items: 10_000,
            max_body_bytes: 8 << 20,
            encoded_set_etag: "\"x\"".into(),
            label_bucket_bits: 4,
            expires_in_secs: 300,
            ends_on_completion: true,
            label_lane_width: None,
            health: None,
            sync: None,
        }
    }

    /// A session whose OT-PSI or CM20-PSI run carries label lanes gets a cap that fits its
    /// larger outputs (`L + 1 + Λ` bytes per OT-PSI row, `1 + Λ` more per CM20-PSI value).
    #[test]
    fn the_cap_counts_label_lanes() {
        // Balanced: the lanes pay off, the client asks, the cap fits them.
        let n = 10_000;
        let plain = step_response_cap(Protocol::Ot, n, &session(n as u64)).unwrap();
        let mut s = session(n as u64);
        s.label_lane_width = Some(15);
        assert!(label_lanes_pay_off(Protocol::Ot, n, &s));
        let lanes = step_response_cap(Protocol::Ot, n, &s).unwrap();
        let l = psi_core::ot::output_len(n, n) as u64;
        let rows = 3 * n as u64;
        assert_eq!(lanes - plain, 2 * (1 + rows * 16));
        assert!(lanes >= psi_core::ot::sizes::outputs_with_lanes(n as u64, l, 15));
        // CM20-PSI's outputs: the width byte and one lane per value (`1 + Λ` bytes).
        let plain = step_response_cap(Protocol::Cm20, n, &session(n as u64)).unwrap();
        assert!(label_lanes_pay_off(Protocol::Cm20, n, &s));
        let lanes = step_response_cap(Protocol::Cm20, n, &s).unwrap();
        assert_eq!(lanes - plain, 2 * (1 + n as u64 * 16));
        // Another protocol ignores the lanes.
        let dh = step_response_cap(Protocol::Dh, n, &session(n as u64));
        assert_eq!(dh, step_response_cap(Protocol::Dh, n, &s));
        // 1,000 against 10^6: the label step is cheaper, the client does not ask, and the
        // cap is the plain one.
        let mut big = session(1_000_000);
        // The server's default layout at 10^6 (8 to 16 records per bucket).
        big.label_bucket_bits = psi_core::labels::bucket_bits(1_000_000, 8);
        let plain = step_response_cap(Protocol::Ot, 1000, &big);
        big.label_lane_width = Some(15);
        assert!(!label_lanes_pay_off(Protocol::Ot, 1000, &big));
        assert_eq!(step_response_cap(Protocol::Ot, 1000, &big), plain);
    }

    #[test]
    fn the_choice_leaves_out_a_protocol_whose_outputs_exceed_the_cap() {
        let served = [Protocol::Dh, Protocol::Ot];
        // 2 * 10^6 entries: OT-PSI's outputs are about 48 MB, the DH-PSI set about 13 MB.
        let w = psi_core::cost::Workload::new(1000, 2_000_000);
        let ot = largest_step_response(Protocol::Ot, &w).unwrap();
        let dh = largest_step_response(Protocol::Dh, &w).unwrap();
        assert!(ot > 32 << 20 && dh < 32 << 20, "ot {ot} dh {dh}");
        assert_eq!(fitting_protocols(&served, &w, 32 << 20), vec![Protocol::Dh]);
        assert_eq!(fitting_protocols(&served, &w, 256 << 20), served.to_vec());
        // Nothing fits: every protocol stays, and the run reports the cap.
        assert_eq!(fitting_protocols(&served, &w, 1 << 20), served.to_vec());
    }

    #[test]
    fn caps_are_small_for_health_and_sessions_and_sized_for_protocol_steps() {
        let configured = 256 << 20;
        assert_eq!(route_cap(Route::Health, None, None, configured), 64 << 10);
        // A created session may carry the health.
        assert_eq!(
            route_cap(Route::CreateSession, None, None, configured),
            (16 << 10) + (64 << 10)
        );
        assert_eq!(
            route_cap(Route::DeleteSession, None, None, configured),
            16 << 10
        );
        assert_eq!(route_cap(Route::Health, None, None, 100), 100);
        assert_eq!(
            route_cap(Route::LabelFetch, Some(5), None, configured),
            configured
        );
        assert_eq!(route_cap(Route::ProbeDown, None, Some(9), configured), 9);
        // OT-PSI against 10^6 entries: outputs of about 24 MB, so a cap of about 49 MB;
        // against 10 entries, about 1 MiB.
        let big = step_response_cap(Protocol::Ot, 1000, &session(1_000_000)).unwrap();
        assert!((40 << 20..60 << 20).contains(&big), "{big}");
        let small = step_response_cap(Protocol::Ot, 3, &session(10)).unwrap();
        assert!(small < 2 << 20, "{small}");
        assert_eq!(
            route_cap(Route::OtRound, Some(small), None, configured),
            small
        );
        assert_eq!(
            route_cap(Route::OtRound, Some(big), None, 32 << 20),
            32 << 20
        );
        // DH-PSI: the encoded set of 10^6 entries is about 6.5 MB.
        let dh = step_response_cap(Protocol::Dh, 1000, &session(1_000_000)).unwrap();
        assert!((12 << 20..20 << 20).contains(&dh), "{dh}");
        // Whatever the server claims, no overflow and no panic.
        for p in Protocol::ALL {
            let mut s = session(u64::MAX);
            s.max_client_items = u32::MAX;
            s.max_body_bytes = u64::MAX;
            let _ = step_response_cap(*p, 10_000, &s);
            s.max_body_bytes = 0;
            let _ = step_response_cap(*p, 10_000, &s);
        }
    }

    #[test]
    fn a_session_with_a_strange_id_protocol_or_layout_is_refused() {
        assert!(check_session(&session(10), Protocol::Ot).is_ok());
        assert!(check_session(&session(10), Protocol::Dh).is_err());
        for id in ["", "../x", "a b", "a?b=1", "a/b", &"a".repeat(129)] {
            let mut s = session(10);
            s.session_id = id.to_string();
            assert!(check_session(&s, Protocol::Ot).is_err(), "{id}");
        }
        // The reference server's ids, before and after instance names (an instance name of
        // up to 16 characters and `-` before the 32 hex digits), are plain tokens.
        let hex = "0123456789abcdef".repeat(2);
        for id in [
            hex.clone(),
            format!("a-{hex}"),
            format!("{}-{hex}", "z9".repeat(8)),
        ] {
            let mut s = session(10);
            s.session_id = id.clone();
            assert!(check_session(&s, Protocol::Ot).is_ok(), "{id}");
        }
        let mut s = session(10);
        s.label_bucket_bits = 25;
        assert!(check_session(&s, Protocol::Ot).is_err());
    }
}
