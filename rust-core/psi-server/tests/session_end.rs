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
