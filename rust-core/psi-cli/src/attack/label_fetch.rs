//! Issue 35 item 6 as a `psi attack` row (`label-fetch`): two callers run one-item
//! DH-PSI sessions only to fetch label buckets: the most bucket ids a session of one item
//! may name (`psi_core::labels::fetch_buckets`), each answer about 55 KB at 10^6 labeled
//! entries for one item of the items budget. Since the fix the answer is charged to the
//! download bytes budget. In place at once.

use super::attacks::{Ctx, Tally, addr, pause, reuse_or_open};
use psi_client::Method;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const JSON: (&str, &str) = ("content-type", "application/json");
const BIN: (&str, &str) = ("content-type", "application/octet-stream");

/// A DH-PSI QUERY of one element for `epoch`.
fn one_item_query(epoch: u32) -> Option<Vec<u8>> {
    let items = psi_core::ItemSet::new([b"+18880000000".to_vec()]);
    let mut rng = psi_core::rng::os_rng().ok()?;
    psi_core::dh::DhClient::start(items, epoch, psi_core::Threads::ONE, &mut rng)
        .ok()
        .map(|(_, q)| q)
}

pub(super) fn label_fetch(ctx: &Ctx, stop: &AtomicBool, ready: &AtomicBool, tally: &Tally) {
    ready.store(true, Ordering::Relaxed);
    std::thread::scope(|s| {
        for t in 0..2u8 {
            s.spawn(move || {
                let mut conn = None;
                let mut query: Option<(u32, Vec<u8>)> = None;
                while !stop.load(Ordering::Relaxed) {
                    let Some(c) = reuse_or_open(&mut conn, addr(170, 1 + t), ctx, stop, tally)
                    else {
                        continue;
                    };
                    let body = r#"{"protocol":"dh-psi","client_items":1}"#;
                    let created =
                        match c.request(Method::Post, "/v1/sessions", &[JSON], body.as_bytes()) {
                            Ok(r) if r.status == 201 => r,
                            Ok(r) => {
                                tally.add(format!("session: {}", r.outcome()));
                                pause(stop, Duration::from_millis(200));
                                continue;
                            }
                            Err(e) => {
                                tally.io("session", &e);
                                conn = None;
                                continue;
                            }
                        };
                    let v: serde_json::Value =
                        serde_json::from_slice(&created.body).unwrap_or_default();
                    let (Some(sid), Some(epoch), Some(bits)) = (
                        v["session_id"].as_str(),
                        v["epoch"].as_u64().and_then(|e| u32::try_from(e).ok()),
                        v["label_bucket_bits"]
                            .as_u64()
                            .and_then(|b| u8::try_from(b).ok()),
                    ) else {
                        tally.add("session: unexpected body");
                        continue;
                    };
                    if query.as_ref().is_none_or(|q| q.0 != epoch) {
                        query = one_item_query(epoch).map(|q| (epoch, q));
                    }
                    let Some((_, q)) = query.as_ref() else {
                        tally.add("no query");
                        return;
                    };
                    let path = format!("/v1/sessions/{sid}/dh/query");
                    if let Err(e) = c.request(Method::Post, &path, &[BIN], q) {
                        tally.io("query", &e);
                        conn = None;
                        continue;
                    }
                    // The most bucket ids a one-item session may name, all distinct.
                    let k = psi_core::labels::fetch_buckets(1, bits) as u32;
                    let ids: Vec<u32> = (0..k).collect();
                    let request = psi_core::labels::messages::encode_request(&ids);
                    let path = format!("/v1/sessions/{sid}/labels/fetch");
                    match c.request(Method::Post, &path, &[BIN], &request) {
                        Ok(r) => {
                            tally.add(format!("labels: {}", r.outcome()));
                            tally.count_bytes(r.body.len() as u64);
                            if r.status != 200 {
                                pause(stop, Duration::from_millis(200));
                            }
                        }
                        Err(e) => {
                            tally.io("labels", &e);
                            conn = None;
                        }
                    }
                }
            });
        }
    });
}
