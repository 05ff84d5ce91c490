//! The encoded-registry cache. A DH-PSI client needs the server's encoded registry
//! (megabytes for a large registry); it changes only when the registry or the key does,
//! so clients keep it between runs. Its identity is the server plus the ETag the server
//! gave it: the key epoch alone is not enough, because imports and removals change the
//! set within an epoch.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

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

/// A cache in a directory (an app's cache directory, `psi match --cache-dir`): two files
/// per server, `<h>.set` (the message) and `<h>.etag`, where `<h>` is the first 16 bytes
/// of SHA-256 of the server URL in hex. Writes go to a temporary file first and are
/// renamed into place, so a crash never leaves a torn set (and a torn set would be
/// rejected by its decoder anyway). Sets above `max_bytes` are not stored.
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

    fn stem(&self, server: &str) -> PathBuf {
        let h = Sha256::digest(server.trim_end_matches('/').as_bytes());
        let name: String = h[..16].iter().map(|b| format!("{b:02x}")).collect();
        self.dir.join(name)
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

impl SetCache for FileCache {
    fn load(&self, server: &str) -> Option<CachedSet> {
        let stem = self.stem(server);
        let etag = std::fs::read_to_string(stem.with_extension("etag")).ok()?;
        let bytes = std::fs::read(stem.with_extension("set")).ok()?;
        Some(CachedSet {
            etag: etag.trim().to_string(),
            bytes,
        })
    }

    fn store(&self, server: &str, set: &CachedSet) -> std::io::Result<()> {
        if set.bytes.len() as u64 > self.max_bytes {
            return Ok(());
        }
        std::fs::create_dir_all(&self.dir)?;
        let stem = self.stem(server);
        // The set first, then its tag: a crash in between leaves an old tag naming a new
        // set, which the server's If-None-Match answer corrects on the next run.
        write_atomically(&stem.with_extension("set"), &set.bytes)?;
        write_atomically(&stem.with_extension("etag"), set.etag.as_bytes())
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
