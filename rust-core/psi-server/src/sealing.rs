//! Secret values at rest, sealed under the at-rest key (docs/deploy.md "At-rest key",
//! docs/security.md "Keys at rest").
//!
//! A shared database (PostgreSQL) is read by more people and machines than one
//! instance's SQLite file: its role, its replicas, its dumps and backups. The OPRF keys
//! stored there are sealed under a key that only the instances hold, in a file of their
//! own, so a copy of the database alone does not reveal them.
//!
//! # The key file
//!
//! Text, one key per line, each 64 hex characters (32 bytes); lines starting with `#`
//! (after optional spaces) and blank lines are ignored. The **first** key seals; every
//! key listed opens. Rotation: add a new first line, run `psi reseal` (every sealed value
//! sealed under an older key is opened and sealed again under the first), then delete the
//! old line. On unix the file must not be readable or writable by group or others
//! (`mode & 0o077 == 0`): [`SealKeys::from_file`] refuses it otherwise.
//! [`SealKeys::generate_file`] (`psi seal-key new FILE`) writes a new one, mode 0600.
//!
//! # A sealed value, byte by byte
//!
//! | bytes | content |
//! |---|---|
//! | 1 | version, `1` |
//! | 8 | key id: the first 8 bytes of SHA-256(`"psi seal key id v1"` \|\| key) |
//! | 12 | nonce, random |
//! | n + 16 | ChaCha20-Poly1305 ciphertext of the n-byte value, then its 16-byte tag |
//!
//! The associated data is the caller's *purpose* (e.g. `b"oprf-key epoch=7 db=<db id>"`),
//! not stored: a sealed value opens only for the purpose it was sealed for, so it cannot be
//! copied to another row (another epoch, another database) and used there.
//!
//! # Why a 96-bit random nonce
//!
//! ChaCha20-Poly1305 with random 96-bit nonces is safe while a key seals far fewer than
//! 2^32 values (the chance of a repeated nonce stays below 2^-33; NIST SP 800-38D's bound
//! for the same construction with AES-GCM). The at-rest key seals one value per key epoch
//! and per reseal: a few thousand over its life. (XChaCha20-Poly1305, with 192-bit
//! nonces, is in the same crate; it would buy a margin not needed here at the cost of a
//! longer, non-RFC format.) Nonces come from a ChaCha20 generator seeded from the
//! operating system when the key file is loaded.

use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{ChaCha20Poly1305, Key, KeyInit, Nonce, Tag};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use thiserror::Error;
use zeroize::Zeroizing;

/// The version byte of the sealed-value format above.
pub const SEAL_VERSION: u8 = 1;
/// Bytes of a key id.
pub const KEY_ID_LEN: usize = 8;
const KEY_LEN: usize = 32;
const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;
const HEADER_LEN: usize = 1 + KEY_ID_LEN + NONCE_LEN;
/// Bytes a sealed value has beyond its plaintext (version, key id, nonce, tag).
pub const SEAL_OVERHEAD: usize = HEADER_LEN + TAG_LEN;
/// Domain separation of the key id hash.
const KEY_ID_DOMAIN: &[u8] = b"psi seal key id v1";

/// Errors of the at-rest key file and of opening sealed values. Never carry a key or a
/// plaintext: only paths, line numbers and key ids (public: they are in every sealed
/// value).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SealError {
    /// The key file could not be read or written.
    #[error("at-rest key file {}: {source}", path.display())]
    Io {
        /// The key file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The key file is readable or writable by group or others.
    #[error(
        "at-rest key file {} has mode {mode:03o}: group and others must have no access; run `chmod 600 {}`",
        path.display(),
        path.display()
    )]
    Permissions {
        /// The key file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A line of the key file is neither a key, a comment nor blank.
    #[error(
        "at-rest key file {}, line {line}: not a key (64 hex characters), a comment (#) or blank",
        path.display()
    )]
    BadLine {
        /// The key file.
        path: PathBuf,
        /// Its 1-based line number.
        line: usize,
    },
    /// The key file lists no key.
    #[error("at-rest key file {} lists no key", path.display())]
    NoKey {
        /// The key file.
        path: PathBuf,
    },
    /// [`SealKeys::generate_file`] was given a path that exists.
    #[error("at-rest key file {} already exists: not overwritten", path.display())]
    Exists {
        /// The existing file.
        path: PathBuf,
    },
    /// The value was sealed under a key the key file does not list.
    #[error(
        "sealed under at-rest key {key_id}, which is missing from the key file (was it deleted before `psi reseal`?)"
    )]
    UnknownKey {
        /// The missing key's id, hex.
        key_id: String,
    },
    /// The value is not in the sealed format (too short or an unknown version).
    #[error("not a sealed value (unknown version or too short)")]
    NotSealed,
    /// The tag does not verify: the value was changed, or sealed for another purpose.
    #[error("sealed value is corrupt or was sealed for another purpose")]
    Corrupt,
    /// No randomness from the operating system for the nonces or a new key.
    #[error("no randomness from the operating system: {0}")]
    Random(String),
}

/// One at-rest key and its id. The key is wiped when dropped.
struct SealKey {
    id: [u8; KEY_ID_LEN],
    key: Zeroizing<[u8; KEY_LEN]>,
}

impl SealKey {
    fn new(key: Zeroizing<[u8; KEY_LEN]>) -> SealKey {
        let digest = Sha256::new()
            .chain_update(KEY_ID_DOMAIN)
            .chain_update(key.as_slice())
            .finalize();
        let mut id = [0u8; KEY_ID_LEN];
        id.copy_from_slice(&digest[..KEY_ID_LEN]);
        SealKey { id, key }
    }

    /// The cipher; it wipes its copy of the key when dropped.
    fn cipher(&self) -> ChaCha20Poly1305 {
        ChaCha20Poly1305::new(Key::from_slice(self.key.as_slice()))
    }
}

/// The at-rest keys of an instance, from its key file: the first seals, all open.
pub struct SealKeys {
    /// Never empty; `keys[0]` seals.
    keys: Vec<SealKey>,
    /// Nonces. Behind a lock so [`SealKeys::seal`] takes `&self` and cannot fail.
    rng: Mutex<rand_chacha::ChaCha20Rng>,
}

impl std::fmt::Debug for SealKeys {
    /// Key ids only (public), never a key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealKeys")
            .field("sealing_key_id", &self.sealing_key_id())
            .field("keys", &self.keys.len())
            .finish_non_exhaustive()
    }
}

impl SealKeys {
    /// Reads the key file (format in the module doc). Refused when group or others may
    /// read or write it (unix), when a line is not a key, a comment or blank, or when it
    /// lists no key.
    pub fn from_file(path: impl AsRef<Path>) -> Result<SealKeys, SealError> {
        let path = path.as_ref();
        let io = |source| SealError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = std::fs::File::open(path).map_err(io)?;
        // The mode of the file opened, not of whatever the path names a moment later.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = file.metadata().map_err(io)?.permissions().mode() & 0o7777;
            if mode & 0o077 != 0 {
                return Err(SealError::Permissions {
                    path: path.to_path_buf(),
                    mode,
                });
            }
        }
        let mut text = Zeroizing::new(String::new());
        std::io::Read::read_to_string(&mut file, &mut text).map_err(io)?;
        let keys = parse_keys(&text).map_err(|line| match line {
            Some(line) => SealError::BadLine {
                path: path.to_path_buf(),
                line,
            },
            None => SealError::NoKey {
                path: path.to_path_buf(),
            },
        })?;
        SealKeys::with_keys(keys)
    }

    /// Creates a new key file at `path` with one fresh random key, mode 0600 on unix.
    /// Never overwrites: an existing path is [`SealError::Exists`].
    pub fn generate_file(path: impl AsRef<Path>) -> Result<(), SealError> {
        let path = path.as_ref();
        let mut key = Zeroizing::new([0u8; KEY_LEN]);
        rand_core::Rng::fill_bytes(&mut os_rng()?, key.as_mut_slice());
        let mut text = Zeroizing::new(String::from(
            "# psi at-rest key (docs/deploy.md \"At-rest key\"): the first key seals, every key\n\
             # listed opens. Keep this file mode 0600, on the instances only.\n",
        ));
        text.push_str(&Zeroizing::new(hex::encode(key.as_slice())));
        text.push('\n');
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::AlreadyExists {
                SealError::Exists {
                    path: path.to_path_buf(),
                }
            } else {
                SealError::Io {
                    path: path.to_path_buf(),
                    source,
                }
            }
        })?;
        let written =
            std::io::Write::write_all(&mut file, text.as_bytes()).and_then(|()| file.sync_all());
        if let Err(source) = written {
            // A half-written key file would be refused or, worse, used: remove it.
            drop(file);
            let _ = std::fs::remove_file(path);
            return Err(SealError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
        Ok(())
    }

    fn with_keys(keys: Vec<Zeroizing<[u8; KEY_LEN]>>) -> Result<SealKeys, SealError> {
        Ok(SealKeys {
            keys: keys.into_iter().map(SealKey::new).collect(),
            rng: Mutex::new(os_rng()?),
        })
    }

    /// The id of the key that seals (hex), for logs and `psi reseal` reports.
    pub fn sealing_key_id(&self) -> String {
        hex::encode(self.keys[0].id)
    }

    /// Seals `plaintext` under the first key, for `purpose` (the associated data: pass
    /// the same bytes to [`SealKeys::open`]). Format in the module doc.
    ///
    /// # Panics
    ///
    /// If `plaintext` is longer than ChaCha20-Poly1305 allows (256 GiB); the values
    /// sealed here are keys of a few dozen bytes.
    pub fn seal(&self, purpose: &[u8], plaintext: &[u8]) -> Vec<u8> {
        let key = &self.keys[0];
        let mut nonce = [0u8; NONCE_LEN];
        rand_core::Rng::fill_bytes(
            &mut *self.rng.lock().unwrap_or_else(PoisonError::into_inner),
            &mut nonce,
        );
        // Capacity for the whole value up front: the plaintext is never copied into a
        // buffer that is reallocated and freed unwiped.
        let mut sealed = Vec::with_capacity(SEAL_OVERHEAD + plaintext.len());
        sealed.push(SEAL_VERSION);
        sealed.extend_from_slice(&key.id);
        sealed.extend_from_slice(&nonce);
        sealed.extend_from_slice(plaintext);
        let tag = key
            .cipher()
            .encrypt_in_place_detached(
                Nonce::from_slice(&nonce),
                purpose,
                &mut sealed[HEADER_LEN..],
            )
            .expect("ChaCha20-Poly1305 seals values up to 256 GiB");
        sealed.extend_from_slice(&tag);
        sealed
    }

    /// Opens a value [`SealKeys::seal`] sealed for `purpose`, under any key of the file.
    pub fn open(&self, purpose: &[u8], sealed: &[u8]) -> Result<Zeroizing<Vec<u8>>, SealError> {
        let parts = Parts::of(sealed).ok_or(SealError::NotSealed)?;
        let key = self
            .keys
            .iter()
            .find(|k| k.id == parts.key_id)
            .ok_or_else(|| SealError::UnknownKey {
                key_id: hex::encode(parts.key_id),
            })?;
        let mut plaintext = Zeroizing::new(parts.ciphertext.to_vec());
        key.cipher()
            .decrypt_in_place_detached(
                Nonce::from_slice(parts.nonce),
                purpose,
                plaintext.as_mut_slice(),
                Tag::from_slice(parts.tag),
            )
            .map_err(|_| SealError::Corrupt)?;
        Ok(plaintext)
    }

    /// Whether `sealed` should be sealed again (`psi reseal`): true unless it is a sealed
    /// value under the first key (so also for a value under an older key, and for one
    /// that is not sealed at all).
    pub fn needs_reseal(&self, sealed: &[u8]) -> bool {
        Parts::of(sealed).is_none_or(|p| p.key_id != self.keys[0].id)
    }
}

/// Whether `bytes` has the form of a sealed value (version 1, long enough for the header
/// and tag). A bare 32-byte key is never taken for one (it is shorter than
/// [`SEAL_OVERHEAD`] + 1); whether it opens is for [`SealKeys::open`] to say.
pub fn is_sealed(bytes: &[u8]) -> bool {
    Parts::of(bytes).is_some()
}

/// The fields of a sealed value (format in the module doc): the one place that indexes
/// its bytes.
struct Parts<'a> {
    key_id: [u8; KEY_ID_LEN],
    nonce: &'a [u8],
    ciphertext: &'a [u8],
    tag: &'a [u8],
}

impl<'a> Parts<'a> {
    fn of(sealed: &'a [u8]) -> Option<Parts<'a>> {
        let (&version, rest) = sealed.split_first()?;
        if version != SEAL_VERSION || sealed.len() < SEAL_OVERHEAD {
            return None;
        }
        let (key_id, rest) = rest.split_at(KEY_ID_LEN);
        let (nonce, rest) = rest.split_at(NONCE_LEN);
        let (ciphertext, tag) = rest.split_at(rest.len() - TAG_LEN);
        Some(Parts {
            key_id: key_id.try_into().ok()?,
            nonce,
            ciphertext,
            tag,
        })
    }
}

/// The keys of a key file's text, first line first. `Err(Some(line))`: that 1-based
/// line is not a key, a comment or blank; `Err(None)`: no key at all.
fn parse_keys(text: &str) -> Result<Vec<Zeroizing<[u8; KEY_LEN]>>, Option<usize>> {
    let mut keys = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut key = Zeroizing::new([0u8; KEY_LEN]);
        hex::decode_to_slice(line, key.as_mut_slice()).map_err(|_| Some(i + 1))?;
        keys.push(key);
    }
    if keys.is_empty() {
        return Err(None);
    }
    Ok(keys)
}

fn os_rng() -> Result<rand_chacha::ChaCha20Rng, SealError> {
    psi_core::rng::os_rng().map_err(|e| SealError::Random(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch directory, removed when dropped (also when a test fails).
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!(
                "psi-sealing-{name}-{}-{:?}",
                std::process::id(),
                std::time::SystemTime::now()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }

        /// Writes `text` to `name` with `mode` (unix) and returns its path.
        fn file(&self, name: &str, text: &str, mode: u32) -> PathBuf {
            let path = self.0.join(name);
            std::fs::write(&path, text).unwrap();
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            }
            let _ = mode;
            path
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const K1: &str = "1111111111111111111111111111111111111111111111111111111111111111";
    const K2: &str = "2222222222222222222222222222222222222222222222222222222222222222";
    const PURPOSE: &[u8] = b"oprf-key epoch=7 db=test";

    fn keys(lines: &[&str]) -> SealKeys {
        SealKeys::with_keys(parse_keys(&lines.join("\n")).unwrap()).unwrap()
    }

    #[test]
    fn round_trip() {
        let k = keys(&[K1]);
        let secret = [7u8; 32];
        let sealed = k.seal(PURPOSE, &secret);
        assert_eq!(sealed.len(), SEAL_OVERHEAD + 32);
        assert_eq!(sealed[0], SEAL_VERSION);
        assert_eq!(hex::encode(&sealed[1..9]), k.sealing_key_id());
        assert!(
            !sealed.windows(32).any(|w| w == secret),
            "plaintext in clear"
        );
        assert_eq!(k.open(PURPOSE, &sealed).unwrap().as_slice(), &secret);
        // Fresh nonces: sealing twice gives two different values.
        assert_ne!(sealed, k.seal(PURPOSE, &secret));
        assert!(is_sealed(&sealed));
        assert!(!is_sealed(&secret));
        assert!(!k.needs_reseal(&sealed));
        assert!(k.needs_reseal(&secret));
    }

    #[test]
    fn the_key_id_is_the_documented_hash() {
        let k = keys(&[K1]);
        let digest = Sha256::digest([KEY_ID_DOMAIN, &[0x11; 32][..]].concat());
        assert_eq!(k.sealing_key_id(), hex::encode(&digest[..8]));
    }

    #[test]
    fn another_purpose_does_not_open() {
        let k = keys(&[K1]);
        let sealed = k.seal(PURPOSE, b"secret");
        assert!(matches!(
            k.open(b"oprf-key epoch=8 db=test", &sealed),
            Err(SealError::Corrupt)
        ));
    }

    #[test]
    fn every_tampered_byte_is_refused() {
        let k = keys(&[K1]);
        let sealed = k.seal(PURPOSE, b"secret");
        for i in 0..sealed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 0x01;
            let err = k.open(PURPOSE, &bad).unwrap_err();
            let expected = match i {
                0 => matches!(err, SealError::NotSealed),
                1..9 => matches!(err, SealError::UnknownKey { .. }),
                _ => matches!(err, SealError::Corrupt),
            };
            assert!(expected, "byte {i}: {err:?}");
        }
        assert!(matches!(
            k.open(PURPOSE, &sealed[..sealed.len() - 1]),
            Err(SealError::Corrupt)
        ));
        assert!(matches!(
            k.open(PURPOSE, &sealed[..SEAL_OVERHEAD - 1]),
            Err(SealError::NotSealed)
        ));
    }

    #[test]
    fn every_listed_key_opens_and_the_first_seals() {
        let old = keys(&[K1]);
        let sealed = old.seal(PURPOSE, b"secret");
        let rotated = keys(&[K2, K1]);
        assert_eq!(
            rotated.open(PURPOSE, &sealed).unwrap().as_slice(),
            b"secret"
        );
        assert!(rotated.needs_reseal(&sealed));
        let resealed = rotated.seal(PURPOSE, b"secret");
        assert!(!rotated.needs_reseal(&resealed));
        assert_eq!(resealed[1..9], rotated.keys[0].id);
        // After the old line is deleted, the resealed value still opens.
        let new = keys(&[K2]);
        assert_eq!(new.open(PURPOSE, &resealed).unwrap().as_slice(), b"secret");
    }

    #[test]
    fn a_deleted_key_is_named_by_its_id() {
        let old = keys(&[K1]);
        let sealed = old.seal(PURPOSE, b"secret");
        let err = keys(&[K2]).open(PURPOSE, &sealed).unwrap_err();
        match &err {
            SealError::UnknownKey { key_id } => assert_eq!(*key_id, old.sealing_key_id()),
            other => panic!("{other:?}"),
        }
        let message = err.to_string();
        assert!(message.contains(&old.sealing_key_id()), "{message}");
        assert!(!message.contains(K1) && !message.contains(K2), "{message}");
    }

    #[cfg(unix)]
    #[test]
    fn a_file_others_may_read_is_refused() {
        let dir = Scratch::new("mode");
        let open = dir.file("open.key", K1, 0o644);
        let err = SealKeys::from_file(&open).unwrap_err();
        assert!(
            matches!(err, SealError::Permissions { mode: 0o644, .. }),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(message.contains("chmod 600"), "{message}");
        assert!(!message.contains(K1), "{message}");
        for mode in [0o640, 0o604, 0o620, 0o602] {
            let path = dir.file(&format!("m{mode:o}.key"), K1, mode);
            assert!(
                matches!(
                    SealKeys::from_file(&path),
                    Err(SealError::Permissions { .. })
                ),
                "{mode:o}"
            );
        }
        for mode in [0o600, 0o400] {
            let path = dir.file(&format!("ok{mode:o}.key"), K1, mode);
            SealKeys::from_file(&path).unwrap();
        }
    }

    #[test]
    fn comments_and_blank_lines_are_ignored() {
        let dir = Scratch::new("comments");
        let text = format!("# new key, sealing since today\n\n   \n  {K2}  \n# old\n{K1}\r\n\n");
        let path = dir.file("k", &text, 0o600);
        let k = SealKeys::from_file(&path).unwrap();
        assert_eq!(k.keys.len(), 2);
        assert_eq!(k.sealing_key_id(), keys(&[K2]).sealing_key_id());
        assert_eq!(k.keys[1].id, keys(&[K1]).keys[0].id);
        let path = dir.file("empty", "# nothing yet\n\n", 0o600);
        assert!(matches!(
            SealKeys::from_file(&path),
            Err(SealError::NoKey { .. })
        ));
    }

    #[test]
    fn a_bad_line_is_named_by_its_number_only() {
        let dir = Scratch::new("badline");
        // Line 4: a key one character short (a typo that must not be echoed).
        let short = &K2[1..];
        let text = format!("# keys\n{K1}\n\n{short}\n");
        let path = dir.file("k", &text, 0o600);
        let err = SealKeys::from_file(&path).unwrap_err();
        assert!(matches!(err, SealError::BadLine { line: 4, .. }), "{err:?}");
        let message = err.to_string();
        assert!(message.contains("line 4"), "{message}");
        assert!(
            !message.contains(short) && !message.contains(K1),
            "{message}"
        );
        for bad in [format!("{K1}00"), K1.replace('1', "g"), "key".into()] {
            let path = dir.file("b", &bad, 0o600);
            assert!(matches!(
                SealKeys::from_file(&path),
                Err(SealError::BadLine { line: 1, .. })
            ));
        }
    }

    #[test]
    fn a_generated_file_is_private_loads_and_is_never_overwritten() {
        let dir = Scratch::new("generate");
        let path = dir.0.join("at-rest.key");
        SealKeys::generate_file(&path).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let first = std::fs::read_to_string(&path).unwrap();
        let k = SealKeys::from_file(&path).unwrap();
        assert_eq!(k.keys.len(), 1);
        assert_eq!(
            k.open(PURPOSE, &k.seal(PURPOSE, b"x")).unwrap().as_slice(),
            b"x"
        );
        assert!(matches!(
            SealKeys::generate_file(&path),
            Err(SealError::Exists { .. })
        ));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), first);
        // Two files, two keys.
        let other = dir.0.join("other.key");
        SealKeys::generate_file(&other).unwrap();
        assert_ne!(
            SealKeys::from_file(&other).unwrap().sealing_key_id(),
            k.sealing_key_id()
        );
    }

    #[test]
    fn debug_prints_no_key() {
        let k = keys(&[K1]);
        let shown = format!("{k:?}");
        assert!(shown.contains(&k.sealing_key_id()), "{shown}");
        assert!(!shown.contains("1111111111"), "{shown}");
    }
}
