//! DH-PSI in sync mode (docs/protocol/sync.md): the query as always, then the synced set
//! brought to the session's version (from the cache, with a delta, or a snapshot), the
//! candidates, and the confirmation fetch that decides the matches and carries their
//! labels. No encoded set is downloaded.

use crate::cache::{CachedSet, fill_key_entry, synced_key};
use crate::driver::labels::LabelSource;
use crate::driver::run::Run;
use crate::error::{ClientError, Result};
use crate::report::SyncReport;
use psi_core::dh::DhClient;
use psi_core::sync::{ConfirmClient, Delta, Offered, Snapshot, SyncedSet, sizes};
use psi_core::{ItemSet, Match, MatchOutput, Phase, RunLabels};
use psi_http::{ErrorCode, Route, SessionCreated, SyncInfo};
use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

/// Bytes of a client's fill key (ADR 0056).
const FILL_KEY_LEN: usize = 32;

/// The fill stream of a confirmation (ADR 0056): ChaCha20 seeded with
/// `SHA-256("psi-sync-fill-v1" || fill key || epoch (u32 BE) || bucket bits)`. The
/// request is the candidates' buckets topped up with this stream's first buckets not among
/// them, so within an epoch the fill is a fixed secret sequence: the same candidates give
/// the same request, one more candidate changes it by at most two buckets, and the server,
/// which cannot compute the stream, cannot tell its buckets from real ones by comparing
/// runs.
fn fill_rng(key: &[u8; FILL_KEY_LEN], epoch: u32, bucket_bits: u8) -> ChaCha20Rng {
    let mut h = Sha256::new();
    h.update(b"psi-sync-fill-v1");
    h.update(key);
    h.update(epoch.to_be_bytes());
    h.update([bucket_bits]);
    ChaCha20Rng::from_seed(h.finalize().into())
}

/// Room above the predicted size a snapshot or delta may take before it is refused as
/// oversized (a response cap, not a size the server must meet).
const SYNC_RESPONSE_SLACK: u64 = 64 << 10;

impl Run<'_> {
    pub(super) fn dh_sync(
        &mut self,
        session: &SessionCreated,
        info: &SyncInfo,
        set: ItemSet,
    ) -> Result<(MatchOutput, LabelSource)> {
        let threads = self.client.config.threads;
        let t = self.enter(Phase::ClientStart)?;
        let (mut client, query) =
            DhClient::start(set.clone(), session.epoch, threads, self.rng()?)?;
        self.leave(Phase::ClientStart, t);
        let evaluation = self.round_trip(Route::DhQuery, &session.session_id, query)?;
        let t = self.enter(Phase::ClientFinalize)?;
        client.handle(&evaluation)?;
        let outputs = client.into_outputs()?;
        self.leave(Phase::ClientFinalize, t);
        // The download phase of DH-PSI: here the synced set's, usually a small delta.
        let t = self.enter(Phase::EncodedSet)?;
        let synced = self.synced_set(session, info)?;
        self.leave(Phase::EncodedSet, t);
        // The confirmation is the session's label fetch, with labels on or off.
        let t = self.enter(Phase::Labels)?;
        let bits = session.label_bucket_bits;
        // The fill comes from this client's keyed stream for the epoch (ADR 0056), so
        // runs with the same candidates send the same buckets and a changed address book
        // changes only its own.
        let mut fill = fill_rng(&*self.fill_key()?, synced.epoch(), bits);
        let (confirm, request) = ConfirmClient::start(
            outputs.as_slice(),
            &synced,
            bits,
            session.registry_items,
            &mut fill,
        )?;
        drop(outputs);
        let sent = request.len() as u64;
        let response = self.post_binary(Route::LabelFetch, &session.session_id, request)?;
        self.stats.label_bytes += sent + response.len() as u64;
        self.session_complete = true;
        let confirmation = confirm.finish(&response)?;
        self.leave(Phase::Labels, t);
        self.stats.sync = Some(SyncReport {
            have_version: confirmation.have_version,
            served_version: confirmation.served_version,
            candidates: confirmation.candidates,
            ..self.stats.sync.take().unwrap_or_default()
        });
        // The matches in the order of the caller's list, as every protocol reports them.
        let mut found: Vec<(usize, Match, Option<Vec<u8>>)> = confirmation
            .matches
            .iter()
            .map(|c| {
                let index = set.original_index(c.index);
                let item = set.items()[c.index].to_vec();
                let label = c.label.as_ref().map(|l| l.as_bytes().to_vec());
                (index, Match { index, item }, label)
            })
            .collect();
        found.sort_unstable_by_key(|(i, ..)| *i);
        let mut matches = Vec::with_capacity(found.len());
        let mut labels = Vec::with_capacity(found.len());
        for (_, m, l) in found {
            matches.push(m);
            labels.push(l);
        }
        let labels = RunLabels(labels);
        let output = MatchOutput {
            matches,
            client_items: set.len(),
            duplicates: set.duplicates(),
            server_items: u32::try_from(session.registry_items).unwrap_or(u32::MAX),
            labels: Some(labels.clone()),
        };
        Ok((output, LabelSource::Confirmed(labels)))
    }

    /// This client's fill key for the server (ADR 0056): 32 random bytes kept in the
    /// cache beside the synced set (`<url>#fill`), made on first use. A cache that cannot
    /// keep it costs only the stability of the fill across runs.
    fn fill_key(&mut self) -> Result<Zeroizing<[u8; FILL_KEY_LEN]>> {
        let cache = self.client.cache.clone();
        let key = fill_key_entry(&self.client.base);
        let mut out = Zeroizing::new([0u8; FILL_KEY_LEN]);
        if let Some(c) = cache.load(&key).filter(|c| c.bytes.len() == FILL_KEY_LEN) {
            out.copy_from_slice(&c.bytes);
            return Ok(out);
        }
        self.rng()?.fill_bytes(&mut out[..]);
        let _ = cache.store(
            &key,
            &CachedSet {
                etag: String::new(),
                bytes: out.to_vec(),
            },
        );
        Ok(out)
    }

    /// The synced set at the session's version: the cached one if current; else the
    /// cached one with the delta from its version; else (none cached, another epoch or
    /// width, no delta kept from its version, a delta that does not apply) a snapshot.
    /// A set that changed is stored again; a damaged cache entry is never used.
    fn synced_set(&mut self, session: &SessionCreated, info: &SyncInfo) -> Result<SyncedSet> {
        let cache = self.client.cache.clone();
        let key = synced_key(&self.client.base);
        let cached = cache
            .load(&key)
            .and_then(|c| SyncedSet::from_cache(&c.bytes).ok())
            .filter(|s| s.epoch() == info.epoch && s.width() == info.width);
        let mut report = SyncReport {
            from_cache: cached.is_some(),
            ..SyncReport::default()
        };
        let mut changed = false;
        let mut set = match cached {
            Some(mut s) if s.version() < info.version => {
                if self.apply_delta(session, &mut s, info, &mut report)? {
                    changed = true;
                    Some(s)
                } else {
                    None
                }
            }
            other => other,
        };
        if set.is_none() {
            set = Some(self.download_snapshot(session, info, &mut report)?);
            changed = true;
        }
        let set = set.expect("set above");
        if changed {
            let stored = CachedSet {
                etag: format!("\"sync-{}-{}\"", set.epoch(), set.version()),
                bytes: set.to_cache(),
            };
            // A cache that cannot store costs the next run a download, no more.
            let _ = cache.store(&key, &stored);
        }
        self.stats.sync = Some(report);
        Ok(set)
    }

    /// `GET /v1/sync/delta?from=V` applied to `set`: `true` when the set is now usable
    /// (the delta applied, or the server had nothing newer), `false` when a snapshot is
    /// needed (no delta kept from `V`, or one that does not fit the set).
    fn apply_delta(
        &mut self,
        session: &SessionCreated,
        set: &mut SyncedSet,
        info: &SyncInfo,
        report: &mut SyncReport,
    ) -> Result<bool> {
        let path = format!(
            "{}?{}={}",
            Route::SyncDelta.path(""),
            psi_http::SYNC_FROM_PARAM,
            set.version()
        );
        // A delta is smaller than the snapshot (the server serves no larger one).
        let cap = download_cap(session, info);
        let r = self.with_cap(cap, |run| {
            run.send_to(Route::SyncDelta, path, Vec::new(), None, epoch_header(info))
        });
        let r = match r {
            Err(ClientError::Http {
                code: ErrorCode::NotFound,
                ..
            }) => return Ok(false),
            r => r?,
        };
        if r.status == 204 {
            return Ok(true);
        }
        report.delta_bytes += r.body.len() as u64;
        let delta = Delta::from_bytes(&r.body)?;
        if delta.epoch != info.epoch {
            return Err(epoch_moved());
        }
        match set.offer(delta) {
            Ok(Offered::Applied { .. }) | Ok(Offered::Stale) => Ok(true),
            // A delta that does not start at the set's version, or does not fit it: the
            // set and the server disagree; a snapshot settles it.
            Ok(_) | Err(_) => Ok(false),
        }
    }

    fn download_snapshot(
        &mut self,
        session: &SessionCreated,
        info: &SyncInfo,
        report: &mut SyncReport,
    ) -> Result<SyncedSet> {
        let cap = download_cap(session, info);
        let path = Route::SyncSnapshot.path("");
        let r = self.with_cap(cap, |run| {
            run.send_to(
                Route::SyncSnapshot,
                path,
                Vec::new(),
                None,
                epoch_header(info),
            )
        })?;
        report.snapshot_bytes += r.body.len() as u64;
        let snapshot = Snapshot::from_bytes(&r.body)?;
        if snapshot.epoch != info.epoch {
            return Err(epoch_moved());
        }
        if snapshot.width != info.width {
            return Err(ClientError::BadResponse(
                "sync snapshot of another tag width than the session's".into(),
            ));
        }
        Ok(SyncedSet::from_snapshot(snapshot)?)
    }

    /// Runs `f` with the responses capped at `cap` (the configured cap still applies).
    fn with_cap<T>(&mut self, cap: u64, f: impl FnOnce(&mut Self) -> T) -> T {
        let before = self.max_response.replace(cap);
        let out = f(self);
        self.max_response = before;
        out
    }
}

/// The cap on a snapshot or delta of the session's registry: twice the predicted
/// snapshot (docs/protocol/sync.md §6) plus [`SYNC_RESPONSE_SLACK`], for the session's
/// registry size bounded by the most tags a set may hold (a server overstating its size
/// raises the cap at most to the configured one).
fn download_cap(session: &SessionCreated, info: &SyncInfo) -> u64 {
    let items = session
        .registry_items
        .min(u64::from(psi_core::sync::MAX_SYNC_TAGS));
    (sizes::snapshot_bytes(items, info.width) * 2.0) as u64 + SYNC_RESPONSE_SLACK
}

fn epoch_header(info: &SyncInfo) -> Vec<(String, String)> {
    vec![(psi_http::EPOCH_HEADER.to_string(), info.epoch.to_string())]
}

/// The server's downloads are of another key epoch than the session's (a rotation
/// between the session and the download): retryable, as any epoch that moved.
fn epoch_moved() -> ClientError {
    ClientError::Http {
        status: 409,
        code: ErrorCode::EpochMismatch,
        message: "the sync download is of another key epoch than the session".into(),
        retry_after: None,
    }
}
