//! Keeps `docs/openapi.json` in sync with the server: psi-http's route table and error
//! codes, the JSON bodies, and the error statuses each route can answer with.
//! schemathesis (`ci/schemathesis.sh`) then checks the document against a running server.
//!
//! The rule for error statuses: every code a route can return (`can_return` below, read
//! off `psi-server/src/api/` and grouped by what a route does) must have its status
//! listed under the route's operation, as a reference to `#/components/responses/Error<status>`,
//! whose schema narrows `ErrorBody.error` to exactly the codes of that status. So the
//! documented statuses of a route are a superset of what the server can answer, and a
//! body with a code of another status does not validate against the documented schema.

mod common;

use psi_http::{
    CreateSession, DeltaSize, ErrorCode, Health, OwnUnitsNs, Route, ServerCosts, SessionCreated,
    SyncInfo, UnitCostsNs,
};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashSet};

fn document() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.json");
    let text = std::fs::read_to_string(path).expect("docs/openapi.json");
    serde_json::from_str(&text).expect("docs/openapi.json is JSON")
}

/// Resolves a local `$ref` (`#/components/...`).
fn resolve<'a>(doc: &'a Value, v: &'a Value) -> &'a Value {
    match v.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let ptr = r.strip_prefix('#').expect("local $ref");
            resolve(
                doc,
                doc.pointer(ptr).unwrap_or_else(|| panic!("dangling {r}")),
            )
        }
        None => v,
    }
}

fn strings(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|s| s.as_str().expect("string").to_string())
        .collect()
}

fn operation(doc: &Value, route: Route) -> &Value {
    let method = route.method().as_str().to_ascii_lowercase();
    doc["paths"][route.template()]
        .get(&method)
        .unwrap_or_else(|| {
            panic!(
                "{route:?}: {method} {} not in docs/openapi.json",
                route.template()
            )
        })
}

const OPERATIONS: &[&str] = &[
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

#[test]
fn every_route_is_documented_and_nothing_else() {
    let doc = document();
    let mut expected = BTreeSet::new();
    for &route in Route::ALL {
        let op = operation(&doc, route);
        assert_eq!(
            op["operationId"],
            format!("{route:?}"),
            "{route:?}: operationId"
        );
        expected.insert((
            route.template().to_string(),
            route.method().as_str().to_string(),
        ));
        // Health is open; everything else takes the (optional) bearer token.
        if route == Route::Health {
            assert_eq!(
                op["security"],
                serde_json::json!([]),
                "health needs no token"
            );
        } else {
            assert!(
                op.get("security").is_none(),
                "{route:?}: uses the document's security"
            );
        }
        // The `{id}` parameter is documented exactly where the template has it.
        let params: Vec<&Value> = doc["paths"][route.template()]
            .get("parameters")
            .into_iter()
            .chain(op.get("parameters"))
            .flat_map(|p| p.as_array().unwrap())
            .map(|p| resolve(&doc, p))
            .filter(|p| p["in"] == "path")
            .collect();
        let names: Vec<&str> = params.iter().map(|p| p["name"].as_str().unwrap()).collect();
        let want: Vec<&str> = route
            .template()
            .contains("{id}")
            .then_some("id")
            .into_iter()
            .collect();
        assert_eq!(names, want, "{route:?}: path parameters");
        // Bodies: JSON for session creation, binary for protocol steps, none otherwise.
        let body = op.get("requestBody").map(|b| {
            let mut types: Vec<&String> = b["content"].as_object().unwrap().keys().collect();
            types.sort();
            types.into_iter().cloned().collect::<Vec<_>>()
        });
        let want = match route {
            Route::CreateSession => Some(vec![psi_http::JSON.to_string()]),
            Route::DhQuery
            | Route::OtRound
            | Route::Cm20Round
            | Route::GbfRound
            | Route::LabelQuery
            | Route::LabelFetch
            | Route::ProbeUp
            | Route::PostGroupMessage => Some(vec![psi_http::BINARY.to_string()]),
            Route::CreateGroup | Route::JoinGroup => Some(vec![psi_http::JSON.to_string()]),
            Route::Health
            | Route::DeleteSession
            | Route::DhEncodedSet
            | Route::ProbeDown
            | Route::GroupState
            | Route::EndGroup
            | Route::FetchGroupMessage
            | Route::SyncSnapshot
            | Route::SyncDelta => None,
        };
        assert_eq!(body, want, "{route:?}: request body content types");
    }
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if OPERATIONS.contains(&method.as_str()) {
                documented.insert((path.clone(), method.to_ascii_uppercase()));
            }
        }
    }
    assert_eq!(
        documented, expected,
        "docs/openapi.json paths vs psi_http::Route::ALL"
    );
}

#[test]
fn error_codes_and_statuses_match_psi_http() {
    let doc = document();
    let code = &doc["components"]["schemas"]["ErrorCode"];
    let names: BTreeSet<String> = ErrorCode::ALL
        .iter()
        .map(|c| c.as_str().to_string())
        .collect();
    assert_eq!(
        strings(&code["enum"]),
        names,
        "ErrorCode enum vs psi_http::ErrorCode::ALL"
    );
    let statuses: BTreeMap<String, u64> = code["x-psi-status"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
        .collect();
    let want: BTreeMap<String, u64> = ErrorCode::ALL
        .iter()
        .map(|c| (c.as_str().to_string(), u64::from(c.status())))
        .collect();
    assert_eq!(
        statuses, want,
        "ErrorCode x-psi-status vs ErrorCode::status"
    );

    let body = &doc["components"]["schemas"]["ErrorBody"];
    assert_eq!(
        strings(&body["required"]),
        BTreeSet::from(["error".into(), "message".into()])
    );
    assert_eq!(
        body["properties"]["error"]["$ref"],
        "#/components/schemas/ErrorCode"
    );

    // One response per error status, whose schema is an ErrorBody narrowed to exactly the
    // codes of that status.
    let by_status: BTreeMap<u16, BTreeSet<String>> =
        ErrorCode::ALL.iter().fold(BTreeMap::new(), |mut m, c| {
            m.entry(c.status())
                .or_default()
                .insert(c.as_str().to_string());
            m
        });
    for (status, codes) in &by_status {
        let resp = &doc["components"]["responses"][format!("Error{status}")];
        let schema = resolve(&doc, &resp["content"][psi_http::JSON]["schema"]);
        let all_of = schema["allOf"].as_array().expect("allOf");
        assert_eq!(
            all_of[0]["$ref"], "#/components/schemas/ErrorBody",
            "Error{status}"
        );
        assert_eq!(
            strings(&all_of[1]["properties"]["error"]["enum"]),
            *codes,
            "Error{status}"
        );
        if [429, 503].contains(status) {
            assert!(
                resp["headers"].get("Retry-After").is_some(),
                "Error{status}: Retry-After"
            );
        }
    }
    // No error response for a status no code has.
    for name in doc["components"]["responses"].as_object().unwrap().keys() {
        let status: u16 = name.strip_prefix("Error").unwrap().parse().unwrap();
        assert!(
            by_status.contains_key(&status),
            "{name}: no code has this status"
        );
    }
    // The fallbacks (no route matched) are documented at the top.
    assert_eq!(
        strings(&doc["x-psi-fallback-errors"]["codes"]),
        BTreeSet::from([
            ErrorCode::NotFound.as_str().to_string(),
            ErrorCode::MethodNotAllowed.as_str().to_string()
        ])
    );
}

/// The codes `route` can answer with, from `psi-server/src/api/`. A new route panics
/// here until it is added (and to docs/openapi.json).
fn can_return(route: Route) -> HashSet<ErrorCode> {
    use ErrorCode as E;
    // Every request: the `deadline` layer; a failed blocking task or lookup; the
    // connection layer's response bytes in flight and request bytes being received, of
    // the address (429) or of the server (503), checked before the router
    // (docs/adr/0037-connection-exposure.md, 0045); the route's body limit on the
    // declared length (413, docs/adr/0045-upload-deadline-and-request-bytes.md).
    let mut codes = HashSet::from([
        E::RequestTimeout,
        E::Internal,
        E::RateLimited,
        E::TooManySessions,
        E::BodyTooLarge,
    ]);
    let authenticated = route != Route::Health;
    if route == Route::Health {
        // A trusted proxy's malformed forwarding header (issue 35 item 6).
        codes.insert(E::BadRequest);
    }
    let group = route.template().starts_with("/v1/groups");
    let session = route.template().contains("{id}") && !group;
    let step = matches!(
        route,
        Route::DhQuery | Route::OtRound | Route::Cm20Round | Route::LabelQuery | Route::LabelFetch
    );
    if authenticated {
        // `auth`: no or a refused token; an unreadable trusted-proxy client header; the
        // token lookup's database away (store_health.rs); the address's budget of
        // credentials not known valid spent (429, listed above for every route).
        codes.extend([
            E::RateLimited,
            E::MissingToken,
            E::InvalidToken,
            E::BadRequest,
            E::StoreUnavailable,
        ]);
    }
    if session {
        // `session()`: an id naming another instance; another caller's or no session; an
        // expired one.
        codes.extend([E::WrongInstance, E::UnknownSession, E::SessionExpired]);
    }
    if step {
        // `SessionCall`: binary body (content type, size, read error); `transition`: the
        // phase; psi-core's errors (`From<psi_core::Error>`); `session_registry`: the epoch;
        // `refused`: the session's third 400 ends it.
        codes.extend([
            E::SessionFailed,
            E::UnsupportedMediaType,
            E::BodyTooLarge,
            E::BadRequest,
            E::WrongPhase,
            E::EpochMismatch,
            E::InvalidMessage,
            E::TooManyItems,
            E::CountMismatch,
        ]);
    }
    if group && route.template().contains("{id}") {
        // `local()`: an id naming another instance or none; the table: no such group, an
        // expired one.
        codes.extend([E::WrongInstance, E::UnknownGroup, E::GroupExpired]);
        if route != Route::JoinGroup {
            // `credential()` and the table's constant-time lookup.
            codes.insert(E::InvalidParty);
        }
    }
    match route {
        Route::Health | Route::DeleteSession => {}
        // The JSON body; the group caps.
        Route::CreateGroup => codes.extend([
            E::BadRequest,
            E::UnsupportedMediaType,
            E::BodyTooLarge,
            E::TooManyGroups,
        ]),
        // The JSON body; full or ended.
        Route::JoinGroup => codes.extend([
            E::BadRequest,
            E::UnsupportedMediaType,
            E::GroupFull,
            E::GroupClosed,
        ]),
        Route::GroupState | Route::EndGroup => {}
        // `to`, the content type, the size, the recipient's phase and mailbox, an ended
        // group, the hourly group budget.
        Route::PostGroupMessage => codes.extend([
            E::BadRequest,
            E::UnsupportedMediaType,
            E::BodyTooLarge,
            E::WrongPhase,
            E::MailboxFull,
            E::GroupClosed,
            E::RateLimited,
        ]),
        // `wait_ms`; an ended group with an empty mailbox.
        Route::FetchGroupMessage => codes.extend([E::BadRequest, E::GroupClosed]),
        Route::CreateSession => codes.extend([
            E::BadRequest,
            E::UnsupportedMediaType,
            E::BodyTooLarge,
            E::UnsupportedProtocol,
            E::TooManyItems,
            E::RateLimited,
            E::TooManySessions,
            E::OtCapacity,
        ]),
        // Charged to the hourly budget.
        Route::LabelQuery => codes.extend([E::RateLimited]),
        Route::DhQuery
        | Route::OtRound
        | Route::Cm20Round
        | Route::GbfRound
        | Route::LabelFetch => {}
        // `X-PSI-Epoch`: not a number, or an epoch not served; the download budget.
        Route::DhEncodedSet => codes.extend([E::BadRequest, E::EpochMismatch, E::RateLimited]),
        // `X-PSI-Epoch`: not a number, or an epoch not served; no sync mode served (404);
        // the download budget (a 304 is free).
        Route::SyncSnapshot => {
            codes.extend([E::BadRequest, E::EpochMismatch, E::NotFound, E::RateLimited])
        }
        // `from` missing or not a number, and `X-PSI-Epoch` as the snapshot's; no sync mode
        // served, or no delta kept from `from` (404); the download budget (a 204 is free).
        Route::SyncDelta => {
            codes.extend([E::BadRequest, E::EpochMismatch, E::NotFound, E::RateLimited])
        }
        // `bytes` missing or above the cap; the hourly probe budget.
        Route::ProbeDown => codes.extend([E::BadRequest, E::RateLimited]),
        // A body above the cap; the hourly probe budget.
        Route::ProbeUp => codes.extend([E::BodyTooLarge, E::RateLimited]),
    }
    codes
}

#[test]
fn each_route_documents_the_status_of_every_code_it_can_return() {
    let doc = document();
    for &route in Route::ALL {
        let responses = &operation(&doc, route)["responses"];
        for code in can_return(route) {
            let status = code.status().to_string();
            let resp = responses.get(&status).unwrap_or_else(|| {
                panic!("{route:?} can return {code} but documents no {status} response")
            });
            assert_eq!(
                resp["$ref"],
                format!("#/components/responses/Error{status}"),
                "{route:?} {status}"
            );
        }
        // And every documented error response is a shared ErrorBody response.
        for (status, resp) in responses.as_object().unwrap() {
            if status.starts_with('4') || status.starts_with('5') {
                assert_eq!(
                    resp["$ref"],
                    format!("#/components/responses/Error{status}")
                );
            }
        }
    }
}

/// The properties and required fields of a JSON body schema equal the fields psi-http
/// serializes (a field added to the struct fails here until it is documented).
fn assert_fields(doc: &Value, schema: &str, sample: impl serde::Serialize) {
    assert_fields_optional(doc, schema, sample, &[]);
}

/// [`assert_fields`] for a schema whose `optional` fields may be left out: `sample` holds
/// the required ones, the properties are both.
fn assert_fields_optional(
    doc: &Value,
    schema: &str,
    sample: impl serde::Serialize,
    optional: &[&str],
) {
    let s = &doc["components"]["schemas"][schema];
    let fields: BTreeSet<String> = serde_json::to_value(sample)
        .unwrap()
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let props: BTreeSet<String> = s["properties"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let all: BTreeSet<String> = fields
        .iter()
        .cloned()
        .chain(optional.iter().map(|o| o.to_string()))
        .collect();
    assert_eq!(props, all, "{schema}: properties");
    assert_eq!(strings(&s["required"]), fields, "{schema}: required");
    assert_eq!(s["additionalProperties"], false, "{schema}: closed");
}

#[test]
fn json_bodies_match_psi_http() {
    let doc = document();
    assert_fields_optional(
        &doc,
        "CreateSession",
        CreateSession {
            protocol: "dh-psi".into(),
            client_items: 1,
            labels: None,
            replaces: None,
        },
        &["labels", "replaces"],
    );
    // `label_lane_width` is optional (OT-PSI sessions with label lanes only), `health`
    // too (a session asked for with `?health=1`).
    assert_fields_optional(
        &doc,
        "SessionCreated",
        SessionCreated {
            session_id: String::new(),
            protocol: String::new(),
            epoch: 0,
            registry_items: 0,
            max_client_items: 0,
            max_body_bytes: 0,
            encoded_set_etag: String::new(),
            label_bucket_bits: 0,
            expires_in_secs: 0,
            ends_on_completion: true,
            label_lane_width: None,
            health: None,
            sync: None,
        },
        &["label_lane_width", "health", "sync"],
    );
    // The group relay's bodies.
    assert_fields(
        &doc,
        "CreateGroup",
        psi_http::CreateGroup {
            size: 2,
            key: String::new(),
        },
    );
    assert_fields(
        &doc,
        "JoinGroup",
        psi_http::JoinGroup { key: String::new() },
    );
    assert_fields(
        &doc,
        "GroupJoined",
        psi_http::GroupJoined {
            group_id: String::new(),
            party: 0,
            credential: String::new(),
            size: 2,
            max_message_bytes: 0,
            max_mailbox_bytes: 0,
            max_mailbox_messages: 0,
            expires_in_secs: 0,
        },
    );
    assert_fields(
        &doc,
        "GroupState",
        psi_http::GroupState {
            group_id: String::new(),
            size: 2,
            joined: 1,
            keys: vec![],
            ended: false,
            expires_in_secs: 0,
        },
    );
    // `store` is optional (absent from servers older than the shared store's health).
    assert_fields_optional(
        &doc,
        "Health",
        Health {
            status: String::new(),
            epoch: 0,
            registry_items: 0,
            protocols: vec![],
            max_client_items: 0,
            max_body_bytes: 0,
            encoded_set_etag: String::new(),
            label_bucket_bits: 0,
            label_record_bytes: 0,
            label_lane_width: None,
            costs: None,
            features: vec![],
            store: None,
            sync: None,
        },
        &["store", "label_lane_width", "sync"],
    );
    // Sync mode's info: `deltas` is optional (health only, left out when empty).
    assert_fields_optional(
        &doc,
        "SyncInfo",
        SyncInfo {
            epoch: 0,
            version: 0,
            width: 1,
            bucket_bits: 0,
            snapshot_bytes: 0,
            snapshot_etag: String::new(),
            deltas_from: 0,
            deltas: vec![],
            record_bytes: 0,
        },
        &["deltas"],
    );
    assert_fields(&doc, "DeltaSize", DeltaSize { from: 0, bytes: 0 });
    let s = &doc["components"]["schemas"];
    assert_eq!(
        s["SyncInfo"]["properties"]["deltas"]["items"]["$ref"],
        "#/components/schemas/DeltaSize"
    );
    for body in ["Health", "SessionCreated"] {
        assert_eq!(
            s[body]["properties"]["sync"]["allOf"][0]["$ref"], "#/components/schemas/SyncInfo",
            "{body}.sync"
        );
    }
    // The feature names: psi-http's, every one.
    assert_eq!(
        strings(&doc["components"]["schemas"]["Health"]["properties"]["features"]["items"]["enum"]),
        psi_http::Feature::ALL
            .iter()
            .map(|f| f.as_str().to_string())
            .collect::<BTreeSet<String>>()
    );
    // The protocols' own units are optional (absent from servers older than the unit):
    // `cm20_lookup_ns`, `gbf_xor_ns`, psi-core's fields, every one.
    assert_fields_optional(
        &doc,
        "ServerCosts",
        ServerCosts {
            units: UnitCostsNs {
                scalar_mult_ns: 0.0,
                hash_to_group_ns: 0.0,
                element_decode_ns: 0.0,
                aes_block_ns: 0.0,
                hash_block_ns: 0.0,
                entry_ns: 0.0,
                own: OwnUnitsNs::default(),
            },
            threads_per_step: 0,
            workers: 0,
            ot_workers: 0,
        },
        &psi_core::Protocol::ALL
            .iter()
            .filter_map(|p| p.unit())
            .map(|u| u.field)
            .collect::<Vec<_>>(),
    );
    // Protocol names: psi-core's API names.
    let names: BTreeSet<String> = psi_core::Protocol::ALL
        .iter()
        .map(|p| p.api_name().to_string())
        .collect();
    let s = &doc["components"]["schemas"];
    assert_eq!(
        strings(&s["CreateSession"]["properties"]["protocol"]["enum"]),
        names
    );
    assert_eq!(
        strings(&s["Health"]["properties"]["protocols"]["items"]["enum"]),
        names
    );
    // The encoded set's headers (docs/api.md, "Encoded set").
    let op = operation(&doc, Route::DhEncodedSet);
    for status in ["200", "304"] {
        let h = op["responses"][status]["headers"].as_object().unwrap();
        for name in ["ETag", "X-PSI-Epoch", "Cache-Control", "Server-Timing"] {
            assert!(h.contains_key(name), "encoded-set {status}: {name}");
        }
    }
    assert!(psi_http::EPOCH_HEADER.eq_ignore_ascii_case("X-PSI-Epoch"));
    // Sync mode's downloads (docs/api.md, "Sync mode"): the snapshot's 200 and 304, the
    // delta's 200 and 204 carry the epoch, the registry version and the timing.
    for (route, statuses) in [
        (Route::SyncSnapshot, ["200", "304"]),
        (Route::SyncDelta, ["200", "204"]),
    ] {
        let op = operation(&doc, route);
        for status in statuses {
            let h = op["responses"][status]["headers"].as_object().unwrap();
            let mut want = vec![
                "X-PSI-Epoch",
                "X-PSI-Sync-Version",
                "Cache-Control",
                "Server-Timing",
            ];
            if route == Route::SyncSnapshot {
                want.push("ETag");
            }
            for name in want {
                assert!(h.contains_key(name), "{route:?} {status}: {name}");
            }
        }
    }
    assert!(psi_http::SYNC_VERSION_HEADER.eq_ignore_ascii_case("X-PSI-Sync-Version"));
    // The delta's `from`: a required query parameter.
    let from = operation(&doc, Route::SyncDelta)["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == psi_http::SYNC_FROM_PARAM)
        .expect("SyncDelta: the from parameter");
    assert_eq!(from["in"], "query");
    assert_eq!(from["required"], true);
    // `POST /v1/sessions?sync=1`: psi-http's query.
    let sync = operation(&doc, Route::CreateSession)["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "sync")
        .expect("CreateSession: the sync parameter");
    assert_eq!(
        format!("sync={}", sync["schema"]["enum"][0].as_str().unwrap()),
        psi_http::SESSION_SYNC_QUERY
    );
}

/// A request: path, headers, body.
type Case<'a> = (String, Vec<(&'static str, &'a str)>, Vec<u8>);

/// Requests the reference client never sends, to every route of a real server on
/// loopback: every answer that is an error is a JSON `ErrorBody` whose code has the
/// response's status, and that status is documented for the route. (schemathesis covers
/// far more; these are the cases it rarely generates, such as a session id that is not
/// UTF-8, which axum's own `Path` rejection once answered in plain text.)
#[test]
fn odd_requests_get_documented_json_errors() {
    let doc = document();
    let config = common::config("openapi");
    common::fill(&config, 20, |i| i % 2 == 0);
    let server = common::start(config);
    let t = common::raw(&server);
    let live = common::session_id(&common::session(&t, "dh-psi", 2, &[]));
    let bin = [("content-type", psi_http::BINARY)];
    let json = [("content-type", psi_http::JSON)];
    let mut checked = 0;
    for &route in Route::ALL {
        let mut cases: Vec<Case> = Vec::new();
        for id in [
            "%FF",
            "%00",
            "..",
            "x%2Fy",
            &live,
            "0123456789abcdef0123456789abcdef",
        ] {
            let path = route.path(id);
            cases.push((path.clone(), bin.to_vec(), b"\x01\x02".to_vec()));
            cases.push((path.clone(), json.to_vec(), b"{".to_vec()));
            cases.push((path.clone(), vec![], vec![]));
            cases.push((
                path,
                vec![("x-psi-epoch", "abc"), ("if-none-match", "*")],
                vec![],
            ));
        }
        for (path, headers, body) in cases {
            let r = common::send(&t, route.method(), &path, &headers, &body);
            if r.status < 400 {
                continue;
            }
            let ct = r
                .headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
                .map(|(_, v)| v.as_str());
            assert_eq!(
                ct,
                Some(psi_http::JSON),
                "{route:?} {path}: status {}",
                r.status
            );
            let body: psi_http::ErrorBody = serde_json::from_slice(&r.body)
                .unwrap_or_else(|_| panic!("{route:?} {path}: not an ErrorBody"));
            assert_eq!(
                body.error.status(),
                r.status,
                "{route:?} {path}: {}",
                body.error
            );
            let documented = &operation(&doc, route)["responses"][r.status.to_string()];
            assert!(
                documented.is_object(),
                "{route:?} {path}: status {} ({}) not documented",
                r.status,
                body.error
            );
            checked += 1;
        }
    }
    assert!(checked > 50, "only {checked} error answers checked");
}
