//! Where the server keeps what outlives a process: the registry and its key epochs, the
//! accounts (issued tokens, saved budgets), and the work that brings a key epoch's OPRF
//! outputs and encoded set up to date. Each is a small trait here; [`sqlite`] is the
//! embedded default (one file, one instance, no setup), and the shared store of several
//! instances sits beside it (docs/deploy.md, docs/adr/0040-shared-store.md).
//!
//! - [`RegistryStore`]: entries, labels, the key of each epoch, the registry version and
//!   the stored encoded sets; what `psi import`, `psi rotate-key` and a server's load read
//!   and write.
//! - [`SetWork`]: the steps a refresh is made of (outputs missing under the current key,
//!   storing them, storing an encoded set); [`refresh`] is the one algorithm over them, run
//!   under the store's build lease so that of several instances exactly one computes.
//! - [`AccountStore`]: tokens and the rate limiter's saved budgets.
//!
//! Errors never carry identifiers, labels or keys.

pub mod postgres;
pub mod sqlite;

use psi_core::dh::{DhServer, ServerKey};
use psi_core::oprf::OUTPUT_LEN;
use psi_core::{ItemSet, Threads};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use thiserror::Error;

pub use postgres::{PgAccounts, PgSettings, PgStore, SettingsError, TlsMode};
pub use sqlite::Store;

/// Where the store is: what `--db` names.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Database {
    /// A SQLite file (`:memory:`: a private in-memory store, for tests and the demo).
    Sqlite(PathBuf),
    /// A PostgreSQL database shared by several instances (`postgres://...`).
    Postgres(PgSettings),
}

impl Database {
    /// A private in-memory SQLite store.
    pub fn memory() -> Database {
        Database::Sqlite(PathBuf::from(":memory:"))
    }

    /// The SQLite file, for a SQLite store.
    pub fn sqlite_path(&self) -> Option<&Path> {
        match self {
            Database::Sqlite(p) => Some(p),
            Database::Postgres(_) => None,
        }
    }

    /// True for an in-memory store: nothing to reload, watch or rotate from.
    pub fn is_memory(&self) -> bool {
        self.sqlite_path()
            .is_some_and(|p| p.as_os_str() == ":memory:")
    }

    /// Opens the registry (and its epochs), creating what is missing. Blocking.
    pub fn open_registry(&self) -> Result<Box<dyn RegistryStore>, StoreError> {
        match self {
            Database::Sqlite(p) => Ok(Box::new(Store::open(p)?)),
            Database::Postgres(pg) => postgres::PgStore::open_registry(pg),
        }
    }

    /// Opens the registry for reading only, for a server that watches for changes other
    /// processes make (`psi import`, `psi rotate-key`, other instances). Blocking.
    pub fn open_registry_read_only(&self) -> Result<Box<dyn RegistryStore>, StoreError> {
        match self {
            Database::Sqlite(p) => Ok(Box::new(Store::open_read_only(p)?)),
            Database::Postgres(pg) => postgres::PgStore::open_registry_read_only(pg),
        }
    }

    /// Opens the accounts (tokens, saved budgets). Blocking.
    pub fn open_accounts(&self) -> Result<Box<dyn AccountStore>, StoreError> {
        match self {
            Database::Sqlite(p) => Ok(Box::new(Store::open(p)?)),
            Database::Postgres(pg) => postgres::PgStore::open_accounts(pg),
        }
    }
}

/// Names the store without credentials (for logs and messages).
impl std::fmt::Display for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Database::Sqlite(p) => write!(f, "{}", p.display()),
            Database::Postgres(pg) => write!(f, "{pg}"),
        }
    }
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Database({self})")
    }
}

impl From<PathBuf> for Database {
    fn from(p: PathBuf) -> Database {
        Database::Sqlite(p)
    }
}

/// The registry and its key epochs.
pub trait RegistryStore: SetWork + Send {
    /// When the current key was created, if known.
    fn key_created(&mut self) -> Result<Option<std::time::SystemTime>, StoreError>;
    /// The current key, creating the epoch-1 key on first use.
    fn current_key(&mut self) -> Result<ServerKey, StoreError>;
    /// Starts a new epoch with a fresh key; deletes the old key and encoded sets. The next
    /// [`refresh`] recomputes every output.
    fn rotate_key(&mut self) -> Result<ServerKey, StoreError>;
    /// Adds entries (already normalized); existing identifiers count as duplicates and get
    /// the new label if one is given. One transaction; bumps the version.
    fn add_entry_list(
        &mut self,
        entries: &[(&str, Option<&str>)],
    ) -> Result<ImportCounts, StoreError>;
    /// Removes entries by identifier; returns how many existed. One transaction.
    fn remove_entry_list(&mut self, identifiers: &[&str]) -> Result<u64, StoreError>;
    /// Number of entries.
    fn len(&self) -> Result<u64, StoreError>;
    /// True when the registry has no entries.
    fn is_empty(&self) -> Result<bool, StoreError> {
        Ok(self.len()? == 0)
    }
    /// What a server of `max_client_items` can load now, without computing or writing.
    fn readiness(&self, max_client_items: usize) -> Result<Readiness, StoreError>;
    /// True when every entry has its output under the key of `epoch`.
    fn outputs_complete(&self, epoch: u32) -> Result<bool, StoreError>;
    /// The sizes of the encoded sets stored for the current epoch.
    fn encoded_set_sizes(&self) -> Result<Vec<usize>, StoreError>;
    /// The registry version: bumped by every change of the entries.
    fn version(&self) -> Result<i64, StoreError>;
    /// The stored encoded set for the current epoch and `max_client_items`, if built.
    fn encoded_set(&mut self, max_client_items: usize) -> Result<Option<StoredSet>, StoreError>;
    /// Every entry with its output (after a [`refresh`]).
    fn entries(&self) -> Result<Vec<LoadedEntry>, StoreError>;
    /// Runs `read` inside one read transaction (one committed state). `read` must not
    /// write. See [`read_snapshot`] for the typed form.
    fn snapshot(
        &mut self,
        read: &mut dyn FnMut(&mut dyn RegistryStore) -> Result<(), StoreError>,
    ) -> Result<(), StoreError>;
}

/// [`RegistryStore::snapshot`] returning what `read` returns.
pub fn read_snapshot<T>(
    store: &mut dyn RegistryStore,
    read: impl FnOnce(&mut dyn RegistryStore) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let mut read = Some(read);
    let mut out = None;
    store.snapshot(&mut |s| {
        if let Some(f) = read.take() {
            out = Some(f(s)?);
        }
        Ok(())
    })?;
    out.ok_or(StoreError::InvalidInput("snapshot read did not run"))
}

/// Held while one process computes an epoch's outputs and encoded set; dropping it lets
/// another take over.
pub trait BuildLease {}

/// The steps of a [`refresh`]: the work that computes an epoch's outputs and encoded set.
pub trait SetWork {
    /// Waits for, then takes, the store's build lease: of several processes on one store,
    /// one builds at a time; a process that dies releases it.
    fn lease_builds(&mut self) -> Result<Box<dyn BuildLease>, StoreError>;
    /// How many entries have no output under `epoch`.
    fn pending_outputs(&mut self, epoch: u32) -> Result<u64, StoreError>;
    /// Up to `limit` entries (row id, identifier) with no output under `epoch`.
    fn pending_batch(&mut self, epoch: u32, limit: usize)
    -> Result<Vec<(i64, String)>, StoreError>;
    /// Stores the outputs of a batch under `epoch`, in one transaction.
    fn put_outputs(
        &mut self,
        epoch: u32,
        outputs: &[(i64, [u8; OUTPUT_LEN])],
    ) -> Result<(), StoreError>;
    /// The registry version the stored set of `epoch` at `max_client_items` was built at.
    fn set_built_at(
        &mut self,
        epoch: u32,
        max_client_items: usize,
    ) -> Result<Option<i64>, StoreError>;
    /// Every entry's output, in entry order.
    fn all_outputs(&mut self) -> Result<Vec<[u8; OUTPUT_LEN]>, StoreError>;
    /// Stores `set` (built at `version` for `max_client_items`), replacing that size's and
    /// other epochs' sets, in one transaction.
    fn put_set(
        &mut self,
        max_client_items: usize,
        version: i64,
        set: &StoredSet,
    ) -> Result<(), StoreError>;
    /// After outputs of an older epoch were overwritten (SQLite scrubs its log).
    fn outputs_overwritten(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// Entries whose outputs are computed per batch (bounds memory during a refresh).
const OUTPUT_BATCH: usize = 50_000;

/// Brings the store up to date for `max_client_items`: computes the OPRF output of every
/// entry that has none under the current key (only those), then rebuilds the encoded set
/// if the entries changed since it was built, holding the store's build lease throughout.
/// `progress(done, total)` is called after each batch of outputs. A process that dies
/// mid-way leaves the outputs it stored; the next refresh (here or elsewhere) goes on
/// from there, and a half-built set is never stored.
pub fn refresh(
    store: &mut dyn RegistryStore,
    max_client_items: usize,
    threads: Threads,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<RefreshStats, StoreError> {
    let _lease = store.lease_builds()?;
    let key = store.current_key()?;
    let epoch = key.epoch();
    let dh = DhServer::new(key, max_client_items, threads);
    let mut stats = RefreshStats::default();
    let total = store.pending_outputs(epoch)?;
    loop {
        let batch = store.pending_batch(epoch, OUTPUT_BATCH)?;
        if batch.is_empty() {
            break;
        }
        let items = ItemSet::new(batch.iter().map(|(_, s)| s.as_bytes()));
        let outputs = dh.outputs(&items)?;
        let rows: Vec<(i64, [u8; OUTPUT_LEN])> = batch
            .iter()
            .zip(outputs.iter())
            .map(|((id, _), o)| (*id, *o))
            .collect();
        store.put_outputs(epoch, &rows)?;
        stats.outputs_computed += batch.len() as u64;
        progress(stats.outputs_computed, total);
    }
    let version = store.version()?;
    let stored = store.set_built_at(epoch, dh.max_client_items())?;
    if stored != Some(version) || stats.outputs_computed > 0 {
        let set = encode_set(&dh, threads, &store.all_outputs()?)?;
        store.put_set(dh.max_client_items(), version, &set)?;
        stats.set_rebuilt = true;
    }
    if stats.outputs_computed > 0 {
        store.outputs_overwritten()?;
    }
    Ok(stats)
}

/// Issued tokens and the rate limiter's saved budgets.
pub trait AccountStore: Send {
    /// Issues a new random bearer token (`psi_` and 64 hex digits) and stores its digest.
    /// `items_per_hour`: its own budget (`None`: the server's default; 0: unlimited).
    fn add_token(
        &mut self,
        name: Option<&str>,
        items_per_hour: Option<u64>,
    ) -> Result<NewToken, StoreError>;
    /// Revokes token `id` (its row stays, marked revoked).
    fn revoke_token(&mut self, id: i64) -> Result<Revoked, StoreError>;
    /// Every issued token, revoked ones included, by id.
    fn tokens(&self) -> Result<Vec<TokenInfo>, StoreError>;
    /// The token whose digest is `digest` (see [`token_digest`]), revoked or not.
    fn token_by_digest(&self, digest: &[u8; 32]) -> Result<Option<TokenInfo>, StoreError>;
    /// True once any token was issued (revoked ones count).
    fn has_tokens(&self) -> Result<bool, StoreError>;
    /// The saved rate-limit budgets.
    fn budgets(&self) -> Result<Vec<SavedBudget>, StoreError>;
    /// Saves `rows` and deletes the rows whose budget is full again at `now_ms`.
    fn save_budgets(&mut self, rows: &[SavedBudget], now_ms: i64) -> Result<(), StoreError>;
}

/// Errors of the store. Never carry identifiers, labels or keys.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StoreError {
    /// SQLite failed.
    #[error("database: {0}")]
    Db(#[from] rusqlite::Error),
    /// PostgreSQL failed (its message and SQLSTATE; never the DETAIL, which can quote
    /// values).
    #[error("database: {}", postgres::error_text(.0))]
    Pg(#[from] ::postgres::Error),
    /// The PostgreSQL settings are unusable (URL, password file, TLS roots).
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// The at-rest key file is unusable, or a sealed key does not open.
    #[error(transparent)]
    Seal(#[from] crate::sealing::SealError),
    /// A PostgreSQL registry needs the at-rest key that seals its OPRF keys.
    #[error(
        "a PostgreSQL registry needs the at-rest key file that seals its OPRF keys: give \
         --seal-key-file FILE (or PSI_SEAL_KEY_FILE); create one with `psi seal-key new FILE`"
    )]
    SealKeyRequired,
    /// The PostgreSQL schema is newer than this program.
    #[error("the database schema is version {0}, newer than this program knows: upgrade psi")]
    SchemaTooNew(i64),
    /// Creating the directory or setting permissions failed.
    #[error("database file: {0}")]
    Io(#[from] std::io::Error),
    /// The stored key is not a valid scalar.
    #[error("stored key of epoch {0} is corrupt")]
    CorruptKey(u32),
    /// A stored OPRF output has the wrong length.
    #[error("stored OPRF output of entry {0} is corrupt")]
    CorruptOutput(i64),
    /// The PSI core refused (e.g. too many entries).
    #[error("psi: {0}")]
    Psi(#[from] psi_core::Error),
    /// No OS randomness.
    #[error("no OS randomness: {0}")]
    Random(String),
    /// A value given to the store is not acceptable (the message names the rule, never
    /// the value).
    #[error("invalid input: {0}")]
    InvalidInput(&'static str),
    /// The store is in memory: there is nothing to reload or rotate from.
    #[error("the registry store is in memory; reloading and rotation need a database file")]
    InMemory,
}

/// Counts of an import.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ImportCounts {
    /// New entries added.
    pub accepted: u64,
    /// Entries already in the registry (or repeated in the input); a label given for
    /// them replaces the stored one.
    pub duplicates: u64,
    /// Rows that failed normalization (reported by the caller, not stored).
    pub rejected: u64,
}

/// What [`Store::refresh`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RefreshStats {
    /// Entries whose OPRF output was computed now.
    pub outputs_computed: u64,
    /// True if the encoded set was rebuilt (false: the stored one is current).
    pub set_rebuilt: bool,
}

/// The encoded registry of an epoch.
#[derive(Clone)]
pub struct StoredSet {
    /// Key epoch.
    pub epoch: u32,
    /// The ENCODED_SET message bytes.
    pub bytes: Vec<u8>,
    /// Strong ETag, quoted.
    pub etag: String,
}

/// What a server of one `max_client_items` can load from the store ([`Store::readiness`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Readiness {
    /// Complete, with its encoded set at that size: the key epoch and registry version.
    Ready {
        /// Key epoch.
        epoch: u32,
        /// Registry version ([`Store::version`]).
        version: i64,
    },
    /// Complete (every output computed under the current key, an encoded set built from
    /// the current entries), but the set was encoded for another `max_client_items` only
    /// (`psi import` or `psi rotate-key` run with another `--max-client-items` than the
    /// server's): the server encodes its own from the stored outputs.
    OtherSize {
        /// Key epoch.
        epoch: u32,
        /// Registry version ([`Store::version`]).
        version: i64,
        /// The `max_client_items` the stored set was encoded for (the largest, if several).
        built_for: usize,
    },
    /// Between the steps of an import or a rotation (or never refreshed): nothing to
    /// load yet.
    InProgress,
}

impl Readiness {
    /// The key epoch and registry version that can be loaded, if any.
    pub fn version(self) -> Option<(u32, i64)> {
        match self {
            Readiness::Ready { epoch, version } | Readiness::OtherSize { epoch, version, .. } => {
                Some((epoch, version))
            }
            Readiness::InProgress => None,
        }
    }
}

/// One entry loaded for serving.
pub struct LoadedEntry {
    /// The normalized identifier.
    pub identifier: String,
    /// Optional label.
    pub label: Option<String>,
    /// OPRF output under the current key.
    pub output: [u8; OUTPUT_LEN],
}

/// A bearer token issued through the store (`psi token add`). Never holds the token.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TokenInfo {
    /// Its id (for `psi token revoke`); ids are never reused.
    pub id: i64,
    /// Optional name given at issue (at most 64 characters, no control characters).
    pub name: Option<String>,
    /// When it was issued, `YYYY-MM-DDTHH:MM:SSZ` (UTC).
    pub created: String,
    /// Revoked tokens are refused (`invalid_token`).
    pub revoked: bool,
    /// Its own items-per-hour budget; `None`: the server's `--items-per-hour`.
    pub items_per_hour: Option<u64>,
}

/// A token just issued: the only time the token itself exists outside its holder.
pub struct NewToken {
    /// Its record.
    pub info: TokenInfo,
    /// The bearer token (wiped on drop; the store keeps only its digest).
    pub token: zeroize::Zeroizing<String>,
}

impl std::fmt::Debug for NewToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewToken")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

/// What [`Store::revoke_token`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Revoked {
    /// The token was active and is now revoked.
    Now,
    /// The token was already revoked.
    Already,
    /// No token has this id.
    NoSuchToken,
}

/// One rate-limit budget as saved (see `budgets` in the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct SavedBudget {
    /// The rate-limit key (`ip:...`, `token:...`, `token-id:...`).
    pub client: String,
    /// Items left at `updated_ms`.
    pub remaining: f64,
    /// The budget's size and hourly refill.
    pub per_hour: u64,
    /// Unix time of `remaining`, in milliseconds.
    pub updated_ms: i64,
}

/// The SHA-256 digest under which a bearer token is stored and looked up.
pub fn token_digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Bytes of randomness in an issued token (256 bits: an unsalted digest suffices).
const TOKEN_BYTES: usize = 32;

/// A token about to be issued, what every store's `add_token` inserts: its checked name
/// and budget, the token itself and the digest stored in its place.
pub(crate) struct TokenIssue {
    /// The bearer token (`psi_` and 64 hex digits; wiped on drop).
    pub(crate) token: zeroize::Zeroizing<String>,
    /// What the store keeps ([`token_digest`]).
    pub(crate) digest: [u8; 32],
    /// Its own items-per-hour budget, as a database integer.
    pub(crate) items_per_hour: Option<i64>,
}

impl TokenIssue {
    /// Checks `name` and `items_per_hour` and draws a fresh token.
    pub(crate) fn new(
        name: Option<&str>,
        items_per_hour: Option<u64>,
    ) -> Result<TokenIssue, StoreError> {
        if let Some(n) = name {
            check_token_name(n)?;
        }
        let items_per_hour = items_per_hour
            .map(|v| {
                i64::try_from(v)
                    .map_err(|_| StoreError::InvalidInput("items_per_hour is at most 2^63 - 1"))
            })
            .transpose()?;
        let mut raw = zeroize::Zeroizing::new([0u8; TOKEN_BYTES]);
        rand_core::Rng::fill_bytes(&mut os_rng()?, raw.as_mut_slice());
        let token = zeroize::Zeroizing::new(format!("psi_{}", hex::encode(raw.as_slice())));
        let digest = token_digest(&token);
        Ok(TokenIssue {
            token,
            digest,
            items_per_hour,
        })
    }
}

fn check_token_name(name: &str) -> Result<(), StoreError> {
    if name.is_empty() || name.chars().count() > 64 || name.chars().any(char::is_control) {
        return Err(StoreError::InvalidInput(
            "a token name has 1 to 64 characters and no control characters",
        ));
    }
    Ok(())
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Strong ETag of an encoded set: 128 bits of its SHA-256, quoted.
pub fn etag(bytes: &[u8]) -> String {
    format!("\"{}\"", hex::encode(&Sha256::digest(bytes)[..16]))
}

/// The encoded set of `outputs` as `dh` serves it (its key epoch, its
/// `max_client_items`), with its ETag: what [`Store::refresh`] stores, and what a server
/// encodes for itself when the store holds the set at another size only. Deterministic:
/// the same outputs give the same bytes and ETag wherever they are encoded.
pub(crate) fn encode_set(
    dh: &DhServer,
    threads: Threads,
    outputs: &[[u8; OUTPUT_LEN]],
) -> Result<StoredSet, StoreError> {
    let bytes = threads.install(|| dh.encode_outputs(outputs))??.to_bytes();
    Ok(StoredSet {
        epoch: dh.epoch(),
        etag: etag(&bytes),
        bytes,
    })
}

pub(crate) fn os_rng() -> Result<rand_chacha::ChaCha20Rng, StoreError> {
    psi_core::rng::os_rng().map_err(|e| StoreError::Random(e.to_string()))
}
