//! Group PSI through the reference server's relay, over loopback HTTP
//! (docs/protocol/group-psi.md §9, docs/adr/0051-group-relay.md): the plain intersection for
//! t = 3 and t = 5, a member with an empty set, every bad input a typed error, a tampering
//! relay caught, no core message in the clear on the server, and cleanup after the end and
//! after the lifetime.

use psi_client::group::{GroupError, GroupOptions, GroupReport};
use psi_client::{
    Client, ClientConfig, ClientError, ErrorCode, HttpTransport, Method, Request, Response,
    Transport, TransportError,
};
use psi_core::ItemSet;
use psi_server::{AppState, Config, Database, GroupLimits, RunningServer};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn server(limits: impl FnOnce(&mut GroupLimits)) -> RunningServer {
    let mut config = Config::default();
    config.db = Database::memory();
    config.build_threads = 1;
    config.workers = 1;
    limits(&mut config.groups);
    let state = AppState::open(config).expect("an in-memory store");
    RunningServer::start(state, ([127, 0, 0, 1], 0).into()).expect("a loopback server")
}

fn options() -> GroupOptions {
    let mut o = GroupOptions::default();
    o.deadline = Duration::from_secs(60);
    o.poll = Duration::from_millis(500);
    o
}

fn client_over(url: &str, transport: Arc<dyn Transport>) -> Client {
    Client::with_transport(
        url,
        transport,
        ClientConfig::default().with_timeout(Duration::from_secs(20)),
    )
}

fn client(url: &str) -> Client {
    client_over(url, Arc::new(HttpTransport::new()))
}

/// Address books: `common` items every party holds, plus items of each party's own and
/// items shared with the next party only.
fn books(parties: usize, own: usize, common: usize) -> (Vec<Vec<Vec<u8>>>, BTreeSet<Vec<u8>>) {
    let shared: Vec<Vec<u8>> = (0..common)
        .map(|i| format!("+1202555{i:04}").into_bytes())
        .collect();
    let books = (0..parties)
        .map(|p| {
            let mut b = Vec::new();
            for i in 0..own {
                b.push(format!("+1303{p:02}{i:05}").into_bytes());
                b.push(format!("+1404{:02}{i:05}", (p + 1) % parties).into_bytes());
                b.push(format!("+1404{p:02}{i:05}").into_bytes());
            }
            b.extend(shared.iter().cloned());
            let n = b.len().max(1);
            b.rotate_left(p * 3 % n);
            b
        })
        .collect();
    (books, shared.into_iter().collect())
}

/// Runs a group of `books.len()` parties through `url`, each on its own thread and
/// client; the leader's client uses `leader_transport`, the members' `member_transport`.
fn run_group(
    url: &str,
    books: Vec<Vec<Vec<u8>>>,
    leader_transport: Arc<dyn Transport>,
    member_transport: Arc<dyn Transport>,
    opts: &GroupOptions,
) -> Vec<Result<GroupReport, ClientError>> {
    let leader_client = client_over(url, leader_transport);
    let size = books.len() as u8;
    let leader = leader_client.group_create(size).expect("create");
    let code = leader.code();
    let mut books = books.into_iter();
    let first = books.next().unwrap();
    std::thread::scope(|s| {
        let handles: Vec<_> = books
            .map(|b| {
                let (code, t, url) = (code.clone(), member_transport.clone(), url.to_string());
                s.spawn(move || {
                    let c = client_over(&url, t);
                    c.group_join(&code)?.run(ItemSet::new(b), opts)
                })
            })
            .collect();
        let mut out = vec![leader.run(ItemSet::new(first), opts)];
        out.extend(handles.into_iter().map(|h| h.join().unwrap()));
        out
    })
}

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let t = Instant::now();
    while !ok() {
        assert!(t.elapsed() < Duration::from_secs(10), "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn check_correct(reports: &[GroupReport], want: &BTreeSet<Vec<u8>>) {
    let leader = &reports[0];
    let got: BTreeSet<Vec<u8>> = leader.common.clone().unwrap().into_iter().collect();
    assert_eq!(&got, want);
    for r in reports {
        assert_eq!(
            r.common.as_ref(),
            leader.common.as_ref(),
            "party {}",
            r.party
        );
        assert!(r.protocol_bytes_sent > 0 && r.bytes_sent > r.protocol_bytes_sent);
    }
}

#[test]
fn groups_of_3_and_5_learn_the_plain_intersection_and_leave_nothing_behind() {
    let srv = server(|_| {});
    for (t, own, common) in [(3, 40, 25), (5, 20, 17)] {
        let (books, want) = books(t, own, common);
        let h: Arc<dyn Transport> = Arc::new(HttpTransport::new());
        let results = run_group(&srv.url(), books, h.clone(), h, &options());
        assert!(results.iter().all(Result::is_ok), "t = {t}: {results:?}");
        let reports: Vec<GroupReport> = results.into_iter().map(Result::unwrap).collect();
        check_correct(&reports, &want);
        let mut parties: Vec<u8> = reports.iter().map(|r| r.party).collect();
        parties.sort();
        assert_eq!(parties, (0..t as u8).collect::<Vec<_>>());
        wait_for("every party ended the group", || {
            srv.state.group_counts() == Default::default()
        });
    }
    srv.shutdown().unwrap();
}

#[test]
fn a_member_with_an_empty_set_empties_the_intersection_and_no_share_keeps_it() {
    let srv = server(|_| {});
    let (mut books, _) = books(3, 10, 8);
    books[2].clear();
    let h: Arc<dyn Transport> = Arc::new(HttpTransport::new());
    let reports: Vec<GroupReport> =
        run_group(&srv.url(), books.clone(), h.clone(), h.clone(), &options())
            .into_iter()
            .collect::<Result<_, _>>()
            .unwrap();
    check_correct(&reports, &BTreeSet::new());
    // Without sharing, the members learn nothing and still finish.
    let (books, want) = self::books(3, 10, 8);
    let mut o = options();
    o.share_result = false;
    let reports: Vec<GroupReport> = run_group(&srv.url(), books, h.clone(), h, &o)
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    let got: BTreeSet<Vec<u8>> = reports[0].common.clone().unwrap().into_iter().collect();
    assert_eq!(got, want);
    assert!(reports[1..].iter().all(|r| r.common.is_none()));
    srv.shutdown().unwrap();
}

/// One raw request to the server.
fn raw(url: &str, method: Method, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
    HttpTransport::new()
        .send(Request {
            method,
            url: format!("{url}{path}"),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: body.to_vec(),
            timeout: Duration::from_secs(10),
            max_response_bytes: 1 << 20,
            abandon_on_cancel: false,
        })
        .unwrap()
}

fn code_of(r: &Response) -> (u16, ErrorCode) {
    let b: psi_http::ErrorBody = serde_json::from_slice(&r.body)
        .unwrap_or_else(|_| panic!("status {}: not an ErrorBody", r.status));
    assert_eq!(b.error.status(), r.status);
    (r.status, b.error)
}

const JSON: (&str, &str) = ("content-type", "application/json");
const BIN: (&str, &str) = ("content-type", "application/octet-stream");

fn key() -> String {
    "ab".repeat(64)
}

fn create(url: &str, size: u8) -> psi_http::GroupJoined {
    let body = format!(r#"{{"size":{size},"key":"{}"}}"#, key());
    let r = raw(url, Method::Post, "/v1/groups", &[JSON], body.as_bytes());
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    serde_json::from_slice(&r.body).unwrap()
}

fn join(url: &str, id: &str) -> Response {
    let body = format!(r#"{{"key":"{}"}}"#, key());
    raw(
        url,
        Method::Post,
        &format!("/v1/groups/{id}/join"),
        &[JSON],
        body.as_bytes(),
    )
}

fn post(url: &str, id: &str, cred: &str, to: &str, body: &[u8]) -> Response {
    raw(
        url,
        Method::Post,
        &format!("/v1/groups/{id}/messages?to={to}"),
        &[BIN, ("x-psi-party", cred)],
        body,
    )
}

#[test]
fn bad_inputs_are_typed_errors() {
    let srv = server(|g| {
        g.max_message_bytes = 1000;
        g.mailbox_messages = 2;
    });
    let url = srv.url();
    let e = |r: Response| code_of(&r).1;
    // Creation: sizes, keys, bodies.
    for body in [
        format!(r#"{{"size":1,"key":"{}"}}"#, key()),
        format!(r#"{{"size":17,"key":"{}"}}"#, key()),
        r#"{"size":3,"key":"abcd"}"#.to_string(),
        format!(r#"{{"size":3,"key":"{}","extra":1}}"#, key()),
        "{".to_string(),
    ] {
        let r = raw(&url, Method::Post, "/v1/groups", &[JSON], body.as_bytes());
        assert_eq!(e(r), ErrorCode::BadRequest, "{body}");
    }
    let g = create(&url, 2);
    let id = g.group_id.clone();
    let unknown = format!("{}-{}", id.split('-').next().unwrap(), "0".repeat(32));
    assert_eq!(e(join(&url, &unknown)), ErrorCode::UnknownGroup);
    assert_eq!(
        e(join(&url, &format!("zz-{}", "0".repeat(32)))),
        ErrorCode::WrongInstance
    );
    // Wrong or missing credential.
    let state = |cred: &str| {
        raw(
            &url,
            Method::Get,
            &format!("/v1/groups/{id}"),
            &[("x-psi-party", cred)],
            b"",
        )
    };
    assert_eq!(e(state(&"0".repeat(64))), ErrorCode::InvalidParty);
    assert_eq!(
        e(raw(
            &url,
            Method::Get,
            &format!("/v1/groups/{id}"),
            &[],
            b""
        )),
        ErrorCode::InvalidParty
    );
    assert_eq!(state(&g.credential).status, 200);
    // Posting before the member joined; to itself; to no party.
    assert_eq!(
        e(post(&url, &id, &g.credential, "1", b"x")),
        ErrorCode::WrongPhase
    );
    let m = join(&url, &id);
    assert_eq!(m.status, 201);
    let m: psi_http::GroupJoined = serde_json::from_slice(&m.body).unwrap();
    assert_eq!(m.party, 1);
    // Full group (joining after it started).
    assert_eq!(e(join(&url, &id)), ErrorCode::GroupFull);
    assert_eq!(
        e(post(&url, &id, &g.credential, "0", b"x")),
        ErrorCode::BadRequest
    );
    assert_eq!(
        e(post(&url, &id, &g.credential, "7", b"x")),
        ErrorCode::BadRequest
    );
    assert_eq!(
        e(post(&url, &id, &g.credential, "x", b"x")),
        ErrorCode::BadRequest
    );
    // Oversized message, mailbox full (count).
    assert_eq!(
        e(post(&url, &id, &g.credential, "1", &[0; 1001])),
        ErrorCode::BodyTooLarge
    );
    let r = raw(
        &url,
        Method::Post,
        &format!("/v1/groups/{id}/messages?to=1"),
        &[JSON, ("x-psi-party", &g.credential)],
        b"{}",
    );
    assert_eq!(e(r), ErrorCode::UnsupportedMediaType);
    assert_eq!(post(&url, &id, &g.credential, "1", &[1; 1000]).status, 204);
    assert_eq!(post(&url, &id, &g.credential, "1", &[2; 10]).status, 204);
    let full = post(&url, &id, &g.credential, "1", &[3; 10]);
    assert_eq!(full.header("retry-after"), Some("1"));
    assert_eq!(e(full), ErrorCode::MailboxFull);
    // A fetch with a bad wait; then the envelopes in order, with their sender.
    let fetch = |cred: &str, q: &str| {
        raw(
            &url,
            Method::Get,
            &format!("/v1/groups/{id}/messages{q}"),
            &[("x-psi-party", cred)],
            b"",
        )
    };
    assert_eq!(
        e(fetch(&m.credential, "?wait_ms=5001")),
        ErrorCode::BadRequest
    );
    let first = fetch(&m.credential, "");
    assert_eq!((first.status, first.header("x-psi-from")), (200, Some("0")));
    assert_eq!(first.body, vec![1; 1000]);
    assert_eq!(fetch(&m.credential, "").body, vec![2; 10]);
    let t = Instant::now();
    assert_eq!(fetch(&m.credential, "?wait_ms=300").status, 204);
    assert!(t.elapsed() >= Duration::from_millis(250));
    // A fetch waiting on the server returns as soon as an envelope is posted.
    std::thread::scope(|s| {
        let waiting = s.spawn(|| fetch(&m.credential, "?wait_ms=5000"));
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(post(&url, &id, &g.credential, "1", b"late").status, 204);
        let t = Instant::now();
        let r = waiting.join().unwrap();
        assert_eq!(r.body, b"late");
        assert!(t.elapsed() < Duration::from_secs(2));
    });
    // Ending: no more posts or joins; the others drain, then hear the end.
    assert_eq!(post(&url, &id, &g.credential, "1", b"last").status, 204);
    let end = |cred: &str| {
        raw(
            &url,
            Method::Delete,
            &format!("/v1/groups/{id}"),
            &[("x-psi-party", cred)],
            b"",
        )
    };
    assert_eq!(end(&g.credential).status, 204);
    assert_eq!(
        e(post(&url, &id, &m.credential, "0", b"x")),
        ErrorCode::GroupClosed
    );
    assert_eq!(fetch(&m.credential, "").body, b"last");
    assert_eq!(
        e(fetch(&m.credential, "?wait_ms=100")),
        ErrorCode::GroupClosed
    );
    assert_eq!(srv.state.group_counts().groups, 1);
    assert_eq!(end(&m.credential).status, 204);
    assert_eq!(srv.state.group_counts(), Default::default());
    assert_eq!(e(end(&m.credential)), ErrorCode::UnknownGroup);
    srv.shutdown().unwrap();
}

#[test]
fn groups_expire_and_the_sweep_removes_them_with_their_mailboxes() {
    let srv = server(|g| g.ttl = Duration::from_millis(600));
    let url = srv.url();
    let g = create(&url, 3);
    let m: psi_http::GroupJoined = serde_json::from_slice(&join(&url, &g.group_id).body).unwrap();
    assert_eq!(
        post(&url, &g.group_id, &m.credential, "0", &[5; 100]).status,
        204
    );
    assert_eq!(srv.state.group_counts().bytes, 100);
    // The sweep (every few seconds at most) removes it without any request.
    let t = Instant::now();
    while srv.state.group_counts().groups > 0 {
        assert!(t.elapsed() < Duration::from_secs(15), "not swept");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(srv.state.group_counts(), Default::default());
    let r = raw(
        &url,
        Method::Get,
        &format!("/v1/groups/{}", g.group_id),
        &[("x-psi-party", &g.credential)],
        b"",
    );
    assert_eq!(code_of(&r).1, ErrorCode::UnknownGroup);
    // A group that expires under a request is answered `group_expired` and removed.
    let g = create(&url, 2);
    std::thread::sleep(Duration::from_millis(700));
    let r = raw(
        &url,
        Method::Get,
        &format!("/v1/groups/{}", g.group_id),
        &[("x-psi-party", &g.credential)],
        b"",
    );
    let c = code_of(&r).1;
    assert!(
        matches!(c, ErrorCode::GroupExpired | ErrorCode::UnknownGroup),
        "{c}"
    );
    srv.shutdown().unwrap();
}

/// A relay in the middle: records every body the server carries for the group, and may
/// flip a byte of the `n`-th fetched envelope, or swap the key announcements it returns.
struct Relay {
    inner: HttpTransport,
    posted: Mutex<Vec<Vec<u8>>>,
    flip_fetch: Mutex<Option<usize>>,
    fetched: Mutex<usize>,
    swap_keys: bool,
}

impl Relay {
    fn new(flip_fetch: Option<usize>, swap_keys: bool) -> Arc<Relay> {
        Arc::new(Relay {
            inner: HttpTransport::new(),
            posted: Mutex::new(Vec::new()),
            flip_fetch: Mutex::new(flip_fetch),
            fetched: Mutex::new(0),
            swap_keys,
        })
    }
}

impl Transport for Relay {
    fn send(&self, request: Request) -> Result<Response, TransportError> {
        let messages = request.url.contains("/messages");
        let roster =
            request.method == Method::Get && !messages && request.url.contains("/v1/groups/");
        if messages && request.method == Method::Post {
            self.posted.lock().unwrap().push(request.body.clone());
        }
        let mut resp = self.inner.send(request)?;
        if messages && resp.status == 200 {
            self.posted.lock().unwrap().push(resp.body.clone());
            let mut n = self.fetched.lock().unwrap();
            if *self.flip_fetch.lock().unwrap() == Some(*n) {
                let i = resp.body.len() / 2;
                resp.body[i] ^= 0x20;
            }
            *n += 1;
        }
        if roster && self.swap_keys && resp.status == 200 {
            // The relay's own point with the tag it cannot compute: an altered announcement.
            let mut s: psi_http::GroupState = serde_json::from_slice(&resp.body).unwrap();
            for k in s.keys.iter_mut().flatten() {
                let mut b = hex::decode(&*k).unwrap();
                b[0] ^= 1;
                *k = hex::encode(b);
            }
            resp.body = serde_json::to_vec(&s).unwrap();
        }
        Ok(resp)
    }
}

fn failures(results: &[Result<GroupReport, ClientError>]) -> Vec<&ClientError> {
    results.iter().filter_map(|r| r.as_ref().err()).collect()
}

#[test]
fn a_tampering_relay_gets_a_typed_error_never_a_wrong_answer() {
    let srv = server(|_| {});
    let h: Arc<dyn Transport> = Arc::new(HttpTransport::new());
    // A flipped byte in the leader's third fetched envelope (a member's cell chunk or
    // hello), and in a member's first (its setup).
    for (leader_flip, member_flip) in [(Some(2), None), (None, Some(0))] {
        let (books, _) = books(3, 10, 5);
        let leader_t = Relay::new(leader_flip, false);
        let member_t = Relay::new(member_flip, false);
        let results = run_group(&srv.url(), books, leader_t, member_t, &options());
        let errs = failures(&results);
        assert!(
            errs.iter()
                .any(|e| matches!(e, ClientError::Group(GroupError::Tampered { .. }))),
            "{errs:?}"
        );
        // Nobody reports a result: the leader cannot finish, and a member that finished its
        // part hears the end without a result.
        assert!(results[0].is_err(), "the leader finished");
        for r in results.iter().flatten() {
            assert!(r.common.is_none(), "party {} has a result", r.party);
        }
        wait_for("the groups were ended", || {
            srv.state.group_counts().groups == 0
        });
    }
    // A relay that alters the announcements the leader reads: refused before any message.
    let (books, _) = books(2, 5, 5);
    let results = run_group(&srv.url(), books, Relay::new(None, true), h, &options());
    assert!(
        matches!(
            &results[0],
            Err(ClientError::Group(GroupError::BadAnnouncement { .. }))
        ),
        "{:?}",
        results[0]
    );
    assert!(results[1].is_err(), "the member hears the end");
    srv.shutdown().unwrap();
}

#[test]
fn the_relay_never_carries_a_core_message_in_the_clear() {
    let srv = server(|_| {});
    let (books, want) = books(3, 10, 6);
    let relay = Relay::new(None, false);
    let clear: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let url = srv.url();
    let leader_client = client_over(&url, relay.clone());
    let mut leader = leader_client.group_create(3).unwrap();
    let c = clear.clone();
    leader.observe(Arc::new(move |_, _, m| c.lock().unwrap().push(m.to_vec())));
    let code = leader.code();
    let mut books = books.into_iter();
    let first = books.next().unwrap();
    let reports: Vec<GroupReport> = std::thread::scope(|s| {
        let hs: Vec<_> = books
            .map(|b| {
                let (code, relay, clear, url) =
                    (code.clone(), relay.clone(), clear.clone(), url.clone());
                s.spawn(move || {
                    let cl = client_over(&url, relay);
                    let mut p = cl.group_join(&code).unwrap();
                    p.observe(Arc::new(move |_, _, m| {
                        clear.lock().unwrap().push(m.to_vec())
                    }));
                    p.run(ItemSet::new(b), &options()).unwrap()
                })
            })
            .collect();
        let mut out = vec![leader.run(ItemSet::new(first), &options()).unwrap()];
        out.extend(hs.into_iter().map(|h| h.join().unwrap()));
        out
    });
    check_correct(&reports, &want);
    let clear = clear.lock().unwrap();
    let carried = relay.posted.lock().unwrap();
    // Every core message was seen in the clear by both ends (hello, setups, chunks).
    assert!(clear.len() >= 2 * (2 + 2 * 2), "{} messages", clear.len());
    assert!(!carried.is_empty());
    for m in clear.iter() {
        // Any 24-byte window of a core message past its 9-byte frame header would be a
        // chance match of 2^-192: none may appear in what the server carried.
        for w in m
            .get(9..)
            .unwrap_or(&[])
            .chunks(24)
            .filter(|w| w.len() == 24)
            .take(64)
        {
            for c in carried.iter() {
                assert!(
                    !c.windows(24).any(|x| x == w),
                    "a core message in the clear"
                );
            }
        }
        // And the common contacts never travel in the clear either.
        for item in &want {
            for c in carried.iter() {
                assert!(!c.windows(item.len()).any(|x| x == &item[..]));
            }
        }
    }
    srv.shutdown().unwrap();
}

#[test]
fn a_bad_code_is_refused_before_any_request() {
    let c = client("http://127.0.0.1:9");
    for bad in [
        "",
        "no-dot",
        "a-1.tooshort",
        "a-1.AAAAAAAAAAAAAAAAAAAAAAAAAB",
    ] {
        assert!(
            matches!(
                c.group_join(bad),
                Err(ClientError::Group(GroupError::BadCode))
            ),
            "{bad:?}"
        );
    }
}

/// Posts are charged to the poster's hourly group bytes budget (at least 1 KiB each),
/// only once admitted: a refused post costs nothing, a spent budget is `429 rate_limited`.
#[test]
fn posts_are_charged_to_the_callers_group_budget() {
    let srv = server(|g| g.bytes_per_hour = 3000);
    let url = srv.url();
    let g = create(&url, 2);
    let m: psi_http::GroupJoined = serde_json::from_slice(&join(&url, &g.group_id).body).unwrap();
    // Refused posts (to itself, too large for nobody's mailbox) are not charged.
    for _ in 0..5 {
        assert_eq!(
            post(&url, &g.group_id, &g.credential, "0", &[1; 10]).status,
            400
        );
    }
    assert_eq!(
        post(&url, &g.group_id, &g.credential, "1", &[1; 10]).status,
        204
    );
    assert_eq!(
        post(&url, &g.group_id, &m.credential, "0", &[1; 1500]).status,
        204
    );
    let r = post(&url, &g.group_id, &g.credential, "1", &[1; 10]);
    assert_eq!(
        code_of(&r),
        (429, ErrorCode::RateLimited),
        "1024 + 1500 + 1024 > 3000"
    );
    assert!(r.header("retry-after").is_some());
    assert_eq!(
        srv.state.group_counts().messages,
        2,
        "the refused post is not in a mailbox"
    );
    srv.shutdown().unwrap();
}

/// A size outside 2 ..= 16 is the caller's input, refused before any request (the server
/// here does not exist: a request would be a network error).
#[test]
fn a_size_outside_2_to_16_is_refused_before_any_request() {
    let c = client("http://127.0.0.1:9");
    for size in [0, 1, 17, 255] {
        assert!(
            matches!(c.group_create(size), Err(ClientError::BadInput(_))),
            "{size}"
        );
    }
    assert!(matches!(
        c.group_create(2),
        Err(ClientError::Network { .. })
    ));
}

/// The options' cancel token stops a leader waiting for its group: the run fails with
/// `Cancelled`, and the group is ended on the way out (a late member cannot join).
#[test]
fn a_cancelled_run_ends_the_group() {
    let srv = server(|_| {});
    let url = srv.url();
    let c = Arc::new(client(&url));
    let leader = c.group_create_shared(3).unwrap();
    let code = leader.code();
    let o = options();
    let cancel = o.cancel.clone();
    let run = std::thread::spawn(move || leader.run(ItemSet::new([b"+12025550100"]), &o));
    std::thread::sleep(Duration::from_millis(300));
    cancel.cancel();
    assert!(matches!(run.join().unwrap(), Err(ClientError::Cancelled)));
    match c.group_join(&code) {
        Err(ClientError::Http { code, .. }) => assert!(
            matches!(code, ErrorCode::GroupClosed | ErrorCode::UnknownGroup),
            "{code:?}"
        ),
        other => panic!("joined an ended group: {other:?}"),
    }
}

/// `run_contacts` normalizes each party's rows and maps the common identifiers back to
/// them: rows spelt differently match, invalid rows are returned, not sent.
#[test]
fn run_contacts_maps_the_intersection_back_to_each_partys_rows() {
    let srv = server(|_| {});
    let url = srv.url();
    let leader_client = Arc::new(client(&url));
    let member_client = client(&url);
    let leader = leader_client.group_create_shared(2).unwrap();
    let code = leader.code();
    let mine = [
        "Ann@Example.com",
        "not a contact",
        "+1 202 555 0100",
        "zed@example.com",
    ];
    let theirs = ["(202) 555-0100", "ann@example.com ", "bob@example.com"];
    let led = std::thread::spawn(move || leader.run_contacts(&mine, &options()));
    let member = member_client
        .group_join(&code)
        .unwrap()
        .run_contacts(&theirs, &options())
        .unwrap();
    let led = led.join().unwrap().unwrap();
    let want: BTreeSet<Vec<u8>> = [b"ann@example.com".to_vec(), b"+12025550100".to_vec()]
        .into_iter()
        .collect();
    for r in [&led, &member] {
        let common: BTreeSet<Vec<u8>> = r.run.common.clone().unwrap().into_iter().collect();
        assert_eq!(common, want);
    }
    let rows = |r: &psi_client::group::GroupContactReport| -> Vec<usize> {
        r.matches.iter().map(|m| m.row).collect()
    };
    assert_eq!(rows(&led), [0, 2]);
    assert_eq!(rows(&member), [0, 1]);
    assert_eq!(led.rejected.iter().map(|r| r.row).collect::<Vec<_>>(), [1]);
    assert!(member.rejected.is_empty());
    assert_eq!((led.rows, member.rows), (4, 3));
}
