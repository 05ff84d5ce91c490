//! Sessions end themselves (docs/adr/0025-sessions-end-themselves.md): the server frees a
//! session with its final response, so a complete run needs no `DELETE`; a late request
//! to it gets a clear `wrong_phase`, and a `DELETE` of it still succeeds.

mod common;

use common::*;
use psi_client::Method;

const BIN: (&str, &str) = ("content-type", "application/octet-stream");
const JSON: (&str, &str) = ("content-type", "application/json");

fn create(t: &Raw, body: &str) -> (String, serde_json::Value) {
    let r = send(t, Method::Post, "/v1/sessions", &[JSON], body.as_bytes());
    let id = session_id(&r);
    (id, serde_json::from_slice(&r.body).unwrap())
}

#[test]
fn a_session_without_labels_ends_with_its_final_response() {
    let config = config("session-end");
    fill(&config, 20, |i| i % 2 == 0);
    let server = start(config);
    let t = raw(&server);
    // `labels: false`: the DH-PSI evaluation is the session's last answer.
    let (id, created) = create(
        &t,
        r#"{"protocol":"dh-psi","client_items":3,"labels":false}"#,
    );
    assert_eq!(created["ends_on_completion"], true);
    let epoch = created["epoch"].as_u64().unwrap() as u32;
    assert_eq!(server.state.live_sessions(), 1);
    let q = format!("/v1/sessions/{id}/dh/query");
    let r = send(&t, Method::Post, &q, &[BIN], &query(epoch, 3));
    assert_eq!(r.status, 200);
    // Gone without a DELETE: no slot held, no state.
    assert_eq!(server.state.live_sessions(), 0);
    // A late request (say, a retry after a lost answer) gets a typed error, not a second
    // evaluation; labels likewise.
    let late = send(&t, Method::Post, &q, &[BIN], &query(epoch, 3));
    assert_eq!(
        (late.status, error_code(&late).as_str()),
        (409, "wrong_phase")
    );
    let body = String::from_utf8_lossy(&late.body).to_string();
    assert!(body.contains("complete"), "{body}");
    let lf = format!("/v1/sessions/{id}/labels/fetch");
    let late = send(&t, Method::Post, &lf, &[BIN], &[0; 4]);
    assert_eq!(late.status, 409);
    // A DELETE of the ended session succeeds (the driver sends one after an error).
    let path = format!("/v1/sessions/{id}");
    assert_eq!(send(&t, Method::Delete, &path, &[], b"").status, 204);
    assert_eq!(send(&t, Method::Delete, &path, &[], b"").status, 204);
    // An unknown id is still unknown.
    let other = send(&t, Method::Delete, "/v1/sessions/00", &[], b"");
    assert_eq!(error_code(&other), "unknown_session");

    // Default (labels may follow): the evaluation leaves the session live for the label
    // step; the client's DELETE frees it as before.
    let (id, _) = create(&t, r#"{"protocol":"dh-psi","client_items":3}"#);
    let q = format!("/v1/sessions/{id}/dh/query");
    assert_eq!(
        send(&t, Method::Post, &q, &[BIN], &query(epoch, 3)).status,
        200
    );
    assert_eq!(server.state.live_sessions(), 1);
    let path = format!("/v1/sessions/{id}");
    assert_eq!(send(&t, Method::Delete, &path, &[], b"").status, 204);
    assert_eq!(server.state.live_sessions(), 0);
    // A malformed `labels` is a bad request like any other malformed field.
    let r = send(
        &t,
        Method::Post,
        "/v1/sessions",
        &[JSON],
        br#"{"protocol":"dh-psi","client_items":3,"labels":"no"}"#,
    );
    assert_eq!(error_code(&r), "bad_request");
    server.shutdown().unwrap();
}

/// ADR 0054: `?health=1` brings the health with the session, and `replaces` ends the
/// caller's named session before the new one is admitted, never another caller's.
#[test]
fn a_session_brings_the_health_and_replaces_the_callers_own_session_only() {
    let mut config = config("session-replaces");
    config.tokens = vec!["a".into(), "b".into()];
    config.max_sessions_per_client = 1;
    fill(&config, 20, |i| i % 2 == 0);
    let server = start(config);
    let t = raw(&server);
    let a = [JSON, ("authorization", "Bearer a")];
    let b = [JSON, ("authorization", "Bearer b")];
    let body = br#"{"protocol":"dh-psi","client_items":3}"#;
    // Asked for, the health is the body GET /v1/health gives; not asked for, absent.
    let r = send(&t, Method::Post, "/v1/sessions?health=1", &a, body);
    assert_eq!(r.status, 201);
    let created: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let first = created["session_id"].as_str().unwrap().to_string();
    let health = send(&t, Method::Get, "/v1/health", &[], b"");
    let mut expected: serde_json::Value = serde_json::from_slice(&health.body).unwrap();
    let mut got = created["health"].clone();
    for h in [&mut expected, &mut got] {
        h["store"] = serde_json::Value::Null; // a moment apart
    }
    assert_eq!(got, expected);
    for f in ["session-health", "session-replaces"] {
        assert!(
            got["features"].as_array().unwrap().iter().any(|x| x == f),
            "{f}"
        );
    }
    let b1 = session_id(&send(&t, Method::Post, "/v1/sessions?other=1", &b, body));
    // Caller a is at its cap of one session: a second is refused...
    let r = send(&t, Method::Post, "/v1/sessions", &a, body);
    assert_eq!(error_code(&r), "too_many_sessions");
    // ...unless it replaces the first, which then is gone.
    let replacing = format!(r#"{{"protocol":"dh-psi","client_items":3,"replaces":"{first}"}}"#);
    let r = send(&t, Method::Post, "/v1/sessions", &a, replacing.as_bytes());
    assert_eq!(r.status, 201);
    let created: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert!(created.get("health").is_none(), "{created}");
    let second = session_id(&r);
    let gone = send(
        &t,
        Method::Delete,
        &format!("/v1/sessions/{first}"),
        &a,
        b"",
    );
    assert_eq!(error_code(&gone), "unknown_session");
    // Caller b cannot end caller a's session by naming it; its own request is refused
    // at its own cap as usual, and a's session lives on.
    let hijack = format!(r#"{{"protocol":"dh-psi","client_items":3,"replaces":"{second}"}}"#);
    let r = send(&t, Method::Post, "/v1/sessions", &b, hijack.as_bytes());
    assert_eq!(error_code(&r), "too_many_sessions");
    assert_eq!(server.state.live_sessions(), 2);
    let epoch = created["epoch"].as_u64().unwrap() as u32;
    let q = send(
        &t,
        Method::Post,
        &format!("/v1/sessions/{second}/dh/query"),
        &[BIN, ("authorization", "Bearer a")],
        &query(epoch, 3),
    );
    assert_eq!(q.status, 200);
    // An id that names nothing of this caller (unknown, malformed, already replaced) is
    // ignored: caller b stays at its cap until it names its own live session.
    let replace = |id: &str| {
        let body = format!(r#"{{"protocol":"dh-psi","client_items":3,"replaces":"{id}"}}"#);
        send(&t, Method::Post, "/v1/sessions", &b, body.as_bytes())
    };
    for id in ["nothing", "", "a1-00"] {
        assert_eq!(error_code(&replace(id)), "too_many_sessions", "{id:?}");
    }
    let b2 = session_id(&replace(&b1));
    assert_eq!(error_code(&replace(&b1)), "too_many_sessions");
    session_id(&replace(&b2));
    // Not a string: a bad request like any malformed field.
    let r = send(
        &t,
        Method::Post,
        "/v1/sessions",
        &a,
        br#"{"protocol":"dh-psi","client_items":3,"replaces":7}"#,
    );
    assert_eq!(error_code(&r), "bad_request");
    server.shutdown().unwrap();
}

/// ADR 0054: a first run's plan (`?plan=`) gets the session of the first step the
/// registry is within and the server runs; the body's protocol otherwise; a malformed plan
/// is a bad request.
#[test]
fn a_session_plan_picks_the_protocol_for_the_registrys_size() {
    let config = config("session-plan");
    fill(&config, 20, |i| i % 2 == 0);
    let server = start(config);
    let t = raw(&server);
    let body = br#"{"protocol":"dh-psi","client_items":3}"#;
    let protocol_of = |query: &str| {
        let r = send(
            &t,
            Method::Post,
            &format!("/v1/sessions{query}"),
            &[JSON],
            body,
        );
        if r.status != 201 {
            return error_code(&r);
        }
        let created: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        let id = created["session_id"].as_str().unwrap();
        assert_eq!(
            send(&t, Method::Delete, &format!("/v1/sessions/{id}"), &[], b"").status,
            204
        );
        created["protocol"].as_str().unwrap().to_string()
    };
    // 20 entries: within 100, not within 10.
    assert_eq!(protocol_of("?plan=ot-psi:100"), "ot-psi");
    assert_eq!(protocol_of("?health=1&plan=ot-psi:100"), "ot-psi");
    assert_eq!(protocol_of("?plan=ot-psi:10"), "dh-psi");
    assert_eq!(protocol_of("?plan=ot-psi:10,ot-psi:20"), "ot-psi");
    // CM20-PSI is not run here (no --enable-cm20), an unknown name is no protocol: skipped.
    assert_eq!(protocol_of("?plan=cm20-psi:100,ot-psi:100"), "ot-psi");
    assert_eq!(protocol_of("?plan=xyz-psi:100"), "dh-psi");
    for bad in [
        "?plan=",
        "?plan=ot-psi",
        "?plan=ot-psi:-1",
        "?plan=OT:5",
        "?plan=ot-psi%3A5",
    ] {
        assert_eq!(protocol_of(bad), "bad_request", "{bad}");
    }
    assert_eq!(server.state.live_sessions(), 0);
    server.shutdown().unwrap();
}

/// A plan step with a range: the registry (20 entries) must be within it.
#[test]
fn a_session_plan_step_holds_only_its_range() {
    let config = config("session-plan-range");
    fill(&config, 20, |i| i % 2 == 0);
    let server = start(config);
    let t = raw(&server);
    let body = br#"{"protocol":"dh-psi","client_items":3}"#;
    for (query, want) in [
        ("?plan=ot-psi:21-100", "dh-psi"),
        ("?plan=ot-psi:20-20", "ot-psi"),
        ("?plan=ot-psi:0-19,ot-psi:5-25", "ot-psi"),
        ("?plan=ot-psi:1-19", "dh-psi"),
    ] {
        let r = send(
            &t,
            Method::Post,
            &format!("/v1/sessions{query}"),
            &[JSON],
            body,
        );
        assert_eq!(r.status, 201, "{query}");
        let created: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(created["protocol"], want, "{query}");
        let id = created["session_id"].as_str().unwrap();
        let path = format!("/v1/sessions/{id}");
        assert_eq!(send(&t, Method::Delete, &path, &[], b"").status, 204);
    }
    let r = send(
        &t,
        Method::Post,
        "/v1/sessions?plan=ot-psi:9-5",
        &[JSON],
        body,
    );
    assert_eq!(error_code(&r), "bad_request");
    server.shutdown().unwrap();
}
