//! DH-PSI's steps: the query, then the encoded registry (from the cache when its ETag is
//! the session's, else downloaded and cached).

use crate::cache::CachedSet;
use crate::driver::labels::LabelSource;
use crate::driver::run::Run;
use crate::error::{ClientError, Result};
use psi_core::dh::{DhClient, EncodedSet};
use psi_core::{ItemSet, MatchOutput, Phase};
use psi_http::{Route, SessionCreated};

impl Run<'_> {
    pub(super) fn dh(
        &mut self,
        session: &SessionCreated,
        set: ItemSet,
    ) -> Result<(MatchOutput, LabelSource)> {
        let threads = self.client.config.threads;
        let t = self.enter(Phase::ClientStart)?;
        let (mut client, query) = DhClient::start(set, session.epoch, threads, self.rng()?)?;
        self.leave(Phase::ClientStart, t);
        let evaluation = self.round_trip(Route::DhQuery, &session.session_id, query)?;
        let t = self.enter(Phase::ClientFinalize)?;
        client.handle(&evaluation)?;
        self.leave(Phase::ClientFinalize, t);
        let t = self.enter(Phase::EncodedSet)?;
        let encoded = self.encoded_set(session)?;
        self.leave(Phase::EncodedSet, t);
        let t = self.enter(Phase::ClientFinish)?;
        client.use_encoded_set(encoded)?;
        let (output, outputs) = client.finish_with_outputs()?;
        self.leave(Phase::ClientFinish, t);
        Ok((output, LabelSource::Outputs(outputs)))
    }

    /// The encoded registry for the session: from the cache if its ETag is the one the
    /// session names, otherwise downloaded conditionally (a 304 confirms the cached one).
    /// A new ETag (an import, a key rotation) therefore always means a fresh download.
    fn encoded_set(&mut self, session: &SessionCreated) -> Result<EncodedSet> {
        let cache = self.client.cache.clone();
        let base = self.client.base.clone();
        // Each set is decoded once. A stored set that no longer decodes (a damaged file)
        // counts as absent: it is downloaded again and replaced, instead of failing every
        // run until the ETag moves.
        let cached = cache.load(&base).and_then(|c| {
            let set = EncodedSet::from_bytes(&c.bytes).ok()?;
            Some((c.etag, c.bytes.len(), set))
        });
        let (set, len) = match cached {
            Some((etag, len, set)) if etag == session.encoded_set_etag => {
                self.stats.set_from_cache = true;
                (set, len)
            }
            cached => {
                // The set of the session's epoch: right after a key rotation the server
                // still serves the previous epoch's set to that epoch's sessions.
                let mut extra = vec![(
                    psi_http::EPOCH_HEADER.to_string(),
                    session.epoch.to_string(),
                )];
                if let Some((etag, ..)) = &cached {
                    extra.push(("if-none-match".to_string(), etag.clone()));
                }
                let r = self.send(Route::DhEncodedSet, "", Vec::new(), None, extra)?;
                if r.status == 304 {
                    self.stats.set_from_cache = true;
                    let (_, len, set) = cached.ok_or_else(|| {
                        ClientError::BadResponse("304 for a set not in the cache".into())
                    })?;
                    (set, len)
                } else {
                    self.stats.set_bytes_downloaded = r.body.len() as u64;
                    // Decoded before it is stored: a malformed set is never cached.
                    let set = EncodedSet::from_bytes(&r.body)?;
                    if let Some(etag) = r.header("etag") {
                        let stored = CachedSet {
                            etag: etag.to_string(),
                            bytes: r.body,
                        };
                        // A cache that cannot store costs the next run a download, no more.
                        let _ = cache.store(&base, &stored);
                    }
                    let len = set.encoded_len();
                    (set, len)
                }
            }
        };
        self.stats.set_bytes = len as u64;
        self.stats.truncation_bits = set.truncation_bits;
        Ok(set)
    }
}
