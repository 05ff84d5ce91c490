//! The encoded-registry cache. A DH-PSI client needs the server's encoded registry
//! (megabytes for a large registry); it changes only when the registry or the key does,
//! so clients keep it between runs. Its identity is the server plus the ETag the server
//! gave it: the key epoch alone is not enough, because imports and removals change the
//! set within an epoch.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// An encoded registry as downloaded: the server's ETag and the ENCODED_SET message.
#[derive(Clone, PartialEq, Eq)]
pub struct CachedSet {
    /// The server's ETag for it (quoted, as in the header).
    pub etag: String,
    /// The ENCODED_SET message bytes.
    pub bytes: Vec<u8>,
}

impl std::fmt::Debug for CachedSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedSet")
            .field("etag", &self.etag)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

/// Where a client keeps encoded registries, one per server. The client uses a stored
/// set only when its ETag is the one the server names for the session, and otherwise
/// sends it as `If-None-Match` (a 304 costs no download). Implementations must be safe
/// to share between threads; a failure to store is not an error for the run.
pub trait SetCache: Send + Sync {
    /// The set last stored for `server` (its base URL), if any.
    fn load(&self, server: &str) -> Option<CachedSet>;
    /// Stores `set` for `server`, replacing the previous one.
    fn store(&self, server: &str, set: &CachedSet) -> std::io::Result<()>;
}

/// The name under which a client keeps its sync-mode set for `server` in a [`SetCache`]
/// (docs/protocol/sync.md §4, "The cache file"): beside that server's encoded set, never
/// in its place, so neither is ever read as the other (a file of the wrong kind fails
/// its decoder and is downloaded again).
pub(crate) fn synced_key(server: &str) -> String {
    format!("{}#sync", server.trim_end_matches('/'))
}

/// The cache entry of the client's sync-mode fill key for `server` (ADR 0056), beside its
/// synced set.
pub(crate) fn fill_key_entry(server: &str) -> String {
    format!("{}#fill", server.trim_end_matches('/'))
}

/// A cache in memory, for one process (the default).
#[derive(Debug, Default)]
pub struct MemoryCache {
    sets: Mutex<HashMap<String, CachedSet>>,
}

impl MemoryCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }
}

impl SetCache for MemoryCache {
    fn load(&self, server: &str) -> Option<CachedSet> {
        self.sets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(server)
            .cloned()
    }

    fn store(&self, server: &str, set: &CachedSet) -> std::io::Result<()> {
        self.sets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(server.to_string(), set.clone());
        Ok(())
    }
}

/// A cache in a directory (an app's cache directory, `psi match --cache-dir`): one file
/// per server, `<h>.set`, where `<h>` is the first 16 bytes of SHA-256 of the server URL in
/// hex, holding the ETag, a newline, then the ENCODED_SET message. A store writes a
/// uniquely named temporary file, syncs it and renames it into place, so readers see the
/// old entry or the new one, never a torn or mismatched one (a damaged file is rejected by
/// the set's decoder, and the client then downloads the set again). Sets above `max_bytes`
/// are not stored.
#[derive(Debug, Clone)]
pub struct FileCache {
    dir: PathBuf,
    max_bytes: u64,
}

impl FileCache {
    /// Default cap on one stored set: 64 MiB (a 10^7-entry registry is about 65 MB).
    pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;

    /// A cache in `dir` (created on first store).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FileCache {
            dir: dir.into(),
            max_bytes: Self::DEFAULT_MAX_BYTES,
        }
    }

    /// Sets the largest set stored.
    pub fn with_max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, server: &str) -> PathBuf {
        let h = Sha256::digest(server.trim_end_matches('/').as_bytes());
        let name: String = h[..16].iter().map(|b| format!("{b:02x}")).collect();
        self.dir.join(name).with_extension("set")
    }
}

/// Most bytes of an ETag line read back.
const MAX_ETAG_LEN: usize = 1024;

impl SetCache for FileCache {
    fn load(&self, server: &str) -> Option<CachedSet> {
        let data = std::fs::read(self.path(server)).ok()?;
        let nl = data.iter().take(MAX_ETAG_LEN).position(|&b| b == b'\n')?;
        let etag = std::str::from_utf8(&data[..nl]).ok()?.to_string();
        Some(CachedSet {
            etag,
            bytes: data[nl + 1..].to_vec(),
        })
    }

    fn store(&self, server: &str, set: &CachedSet) -> std::io::Result<()> {
        if set.bytes.len() as u64 > self.max_bytes
            || set.etag.len() >= MAX_ETAG_LEN
            || set.etag.contains('\n')
        {
            return Ok(());
        }
        static NEXT: AtomicU64 = AtomicU64::new(0);
        std::fs::create_dir_all(&self.dir)?;
        let path = self.path(server);
        let tmp = path.with_extension(format!(
            "tmp-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let written = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(set.etag.as_bytes())?;
            f.write_all(b"\n")?;
            f.write_all(&set.bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_cache_round_trip_per_server_and_size_cap() {
        let dir = std::env::temp_dir().join(format!("psi-cache-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cache = FileCache::new(&dir).with_max_bytes(10);
        assert_eq!(cache.load("http://a"), None);
        let set = CachedSet {
            etag: "\"x\"".into(),
            bytes: vec![1, 2, 3],
        };
        cache.store("http://a", &set).unwrap();
        assert_eq!(cache.load("http://a"), Some(set.clone()));
        assert_eq!(cache.load("http://a/"), Some(set));
        assert_eq!(cache.load("http://b"), None);
        let big = CachedSet {
            etag: "\"y\"".into(),
            bytes: vec![0; 11],
        };
        cache.store("http://b", &big).unwrap();
        assert_eq!(cache.load("http://b"), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
