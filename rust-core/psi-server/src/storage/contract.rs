//! The store contract both backends implement: the traits ([`RegistryStore`],
//! [`SetWork`], [`AccountStore`]) and the records they speak in, with the randomness and
//! clock they share. The budgets' part of the contract is its own room, `budgets.rs`
//! ([`BudgetStore`](super::BudgetStore)).

use super::error::StoreError;
use psi_core::dh::ServerKey;
use psi_core::oprf::OUTPUT_LEN;

/// The registry and its key epochs.
pub trait RegistryStore: SetWork + Send {
    /// When the current key was created, if known.
    fn key_created(&mut self) -> Result<Option<std::time::SystemTime>, StoreError>;
    /// The current key, creating the epoch-1 key on first use.
    fn current_key(&mut self) -> Result<ServerKey, StoreError>;
    /// Starts a new epoch with a fresh key; deletes the old key and the encoded sets of
    /// older epochs (the shared store keeps the old epoch's sets for its overlap:
    /// [`RegistryStore::previous_set`]). The next [`refresh`](super::refresh())
    /// recomputes every output. Also forgets the change log up to the current version
    /// ([`RegistryStore::forget_changes_before`]): deltas are per key epoch (ADR 0047
    /// §3.3), so a removed identifier stays in the log for one epoch at most.
    fn rotate_key(&mut self) -> Result<ServerKey, StoreError>;
    /// Adds entries (already normalized); existing identifiers count as duplicates and get
    /// the new label if one is given. One transaction; bumps the version.
    fn add_entry_list(
        &mut self,
        entries: &[(&str, Option<&str>)],
    ) -> Result<ImportCounts, StoreError>;
    /// [`RegistryStore::add_entry_list`] over the rows `entries` yields, never all held at
    /// once: the bulk import (`psi import`; PostgreSQL streams them with `COPY` into a
    /// staging table and merges it in one statement). The same counts and labels as
    /// [`RegistryStore::add_entry_list`]; one transaction, the version bumped once.
    fn add_entry_stream(
        &mut self,
        entries: &mut dyn Iterator<Item = (String, Option<String>)>,
    ) -> Result<ImportCounts, StoreError>;
    /// Removes entries by identifier; returns how many existed. One transaction; bumps
    /// the version when any existed.
    fn remove_entry_list(&mut self, identifiers: &[&str]) -> Result<u64, StoreError>;
    /// [`RegistryStore::remove_entry_list`] over the identifiers `identifiers` yields (the
    /// bulk path of `psi import --remove`). One transaction; the version bumped once.
    fn remove_entry_stream(
        &mut self,
        identifiers: &mut dyn Iterator<Item = String>,
    ) -> Result<u64, StoreError>;
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
    /// Every entry with its output (after a [`refresh`](super::refresh())).
    fn entries(&self) -> Result<Vec<LoadedEntry>, StoreError>;
    /// The encoded set at `max_client_items` of the epoch before the current one, kept
    /// through that epoch's overlap so that an instance started after a rotation serves it
    /// as the instances that swapped the epoch in do, with when the current key was
    /// created (the overlap's start). Only the set: it is what a client holding the
    /// previous epoch's set asks any instance for (`GET /v1/dh/encoded-set` is not routed
    /// by session), and it is public; the previous key is not kept (a restarted instance
    /// has no session of that epoch to evaluate). The shared store keeps it; a SQLite
    /// store (one instance, which holds the previous epoch in memory) keeps none.
    fn previous_set(
        &mut self,
        _max_client_items: usize,
    ) -> Result<Option<(StoredSet, std::time::SystemTime)>, StoreError> {
        Ok(None)
    }
    /// Deletes the sets of epochs before the current one once `overlap` has passed since
    /// the current key was created; returns how many were deleted.
    fn forget_previous_sets(&mut self, _overlap: std::time::Duration) -> Result<u64, StoreError> {
        Ok(0)
    }
    /// The net change of membership from registry version `after` to version `upto`
    /// (`after <= upto`): the identifiers absent at `after` and present at `upto`, and
    /// those present at `after` and absent at `upto`. An identifier added and removed
    /// again in the range, or removed and added again, is in neither list; a label change
    /// is not a change of membership. Read from one committed state (one statement), so it
    /// may be called inside [`RegistryStore::snapshot`]. Errors:
    /// [`StoreError::ChangesForgotten`] when `after` is older than
    /// [`RegistryStore::changes_kept_after`], [`StoreError::VersionAhead`] when `upto` is
    /// beyond [`RegistryStore::version`], [`StoreError::InvalidInput`] when `after > upto`.
    /// docs/adr/0055-registry-changes-in-the-store.md.
    fn changes(&mut self, after: i64, upto: i64) -> Result<RegistryChanges, StoreError>;
    /// How many identifiers [`RegistryStore::changes`] would list for the same range, as
    /// added and as removed, without reading them: sync mode decides from these whether
    /// a range is worth a delta before it reads the identifiers (a new store's first
    /// import logs every entry). The same errors, from one committed state.
    fn change_counts(&mut self, after: i64, upto: i64) -> Result<ChangeCounts, StoreError>;
    /// The oldest version the store keeps changes from: [`RegistryStore::changes`]
    /// answers for every `after` at or above it. Starts at the version a store had when
    /// it first kept changes (0 for a new store, the version then for an existing one
    /// upgraded), and moves up by [`RegistryStore::forget_changes_before`].
    fn changes_kept_after(&self) -> Result<i64, StoreError>;
    /// Forgets the changes that lead up to `version` (every change of a version at or
    /// below it), so that [`RegistryStore::changes_kept_after`] is at least `version`
    /// afterwards; a `version` at or below it forgets nothing. Returns how many logged
    /// changes (one per identifier and version) were deleted. The change log holds the
    /// removed identifiers, so this is also what deletes them (SQLite scrubs them from the
    /// file and its log, as a removal does); the sync design forgets everything at a key
    /// rotation of its epoch (ADR 0047 §3.4). [`StoreError::VersionAhead`] when `version`
    /// is beyond [`RegistryStore::version`].
    fn forget_changes_before(&mut self, version: i64) -> Result<u64, StoreError>;
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

/// The steps of a [`refresh`](super::refresh()): the work that computes an epoch's
/// outputs and encoded set.
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
    /// older epochs' sets (the shared store keeps the previous epoch's:
    /// [`RegistryStore::previous_set`]), in one transaction.
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
    /// The token whose digest is `digest` (see
    /// [`token_digest`](super::token_digest)), revoked or not.
    fn token_by_digest(&self, digest: &[u8; 32]) -> Result<Option<TokenInfo>, StoreError>;
    /// True once any token was issued (revoked ones count).
    fn has_tokens(&self) -> Result<bool, StoreError>;
    /// The saved rate-limit budgets.
    fn budgets(&self) -> Result<Vec<SavedBudget>, StoreError>;
    /// Saves `rows` and deletes the rows whose budget is full again at `now_ms`.
    fn save_budgets(&mut self, rows: &[SavedBudget], now_ms: i64) -> Result<(), StoreError>;
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

/// The net change of the registry's membership between two versions
/// ([`RegistryStore::changes`]). Its `Debug` shows the counts only, never an identifier.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RegistryChanges {
    /// Identifiers absent at the older version and present at the newer one, sorted by
    /// their bytes.
    pub added: Vec<String>,
    /// Identifiers present at the older version and absent at the newer one, sorted by
    /// their bytes.
    pub removed: Vec<String>,
}

impl RegistryChanges {
    /// True when nothing was net added or removed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty()
    }

    /// Builds the lists from `(identifier, net)` rows of a change log summed over a range
    /// (`net`: the sum of +1 per logged addition and -1 per logged removal; a log of one
    /// identifier alternates, so the sum of a range is -1, 0 or 1, and 0 rows are left
    /// out by the query). Sorts both lists.
    pub(crate) fn from_net(
        rows: impl IntoIterator<Item = Result<(String, i64), StoreError>>,
    ) -> Result<RegistryChanges, StoreError> {
        let mut out = RegistryChanges::default();
        for row in rows {
            match row? {
                (id, 1) => out.added.push(id),
                (id, -1) => out.removed.push(id),
                (_, 0) => {}
                _ => return Err(StoreError::CorruptChanges),
            }
        }
        out.added.sort_unstable();
        out.removed.sort_unstable();
        Ok(out)
    }
}

impl std::fmt::Debug for RegistryChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryChanges")
            .field("added", &self.added.len())
            .field("removed", &self.removed.len())
            .finish()
    }
}

/// The sizes of a range of net changes ([`RegistryStore::change_counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChangeCounts {
    /// Identifiers net added.
    pub added: u64,
    /// Identifiers net removed.
    pub removed: u64,
}

impl ChangeCounts {
    /// The counts of listed changes.
    pub fn of(changes: &RegistryChanges) -> ChangeCounts {
        ChangeCounts {
            added: changes.added.len() as u64,
            removed: changes.removed.len() as u64,
        }
    }

    /// From the counts of net +1 rows, net -1 rows and any other net (a log that
    /// alternates never has one: [`StoreError::CorruptChanges`]).
    pub(crate) fn from_rows(
        added: i64,
        removed: i64,
        other: i64,
    ) -> Result<ChangeCounts, StoreError> {
        if other != 0 || added < 0 || removed < 0 {
            return Err(StoreError::CorruptChanges);
        }
        Ok(ChangeCounts {
            added: added as u64,
            removed: removed as u64,
        })
    }
}

/// Checks a range of [`RegistryStore::changes`] (and of its counts) against the versions
/// the store keeps changes for (`kept_after..=current`), read in the same statement as
/// the changes; a store without the log's bounds (`None`: never opened by a writer that
/// keeps changes) answers no range.
pub(crate) fn check_change_range(
    after: i64,
    upto: i64,
    kept_after: Option<i64>,
    current: Option<i64>,
) -> Result<(), StoreError> {
    let (Some(kept_after), Some(current)) = (kept_after, current) else {
        return Err(StoreError::InvalidInput(
            "the store keeps no registry changes: open it with a writer first",
        ));
    };
    if after > upto {
        return Err(StoreError::InvalidInput(
            "a range of registry changes must not end before it starts",
        ));
    }
    if upto > current {
        return Err(StoreError::VersionAhead { upto, current });
    }
    if after < kept_after {
        return Err(StoreError::ChangesForgotten { after, kept_after });
    }
    Ok(())
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

/// What a server of one `max_client_items` can load from the store
/// ([`Store::readiness`](super::Store::readiness)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Readiness {
    /// Complete, with its encoded set at that size: the key epoch and registry version.
    Ready {
        /// Key epoch.
        epoch: u32,
        /// Registry version ([`Store::version`](super::Store::version)).
        version: i64,
    },
    /// Complete (every output computed under the current key, an encoded set built from
    /// the current entries), but the set was encoded for another `max_client_items` only
    /// (`psi import` or `psi rotate-key` run with another `--max-client-items` than the
    /// server's): the server encodes its own from the stored outputs.
    OtherSize {
        /// Key epoch.
        epoch: u32,
        /// Registry version ([`Store::version`](super::Store::version)).
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

/// What [`Store::revoke_token`](super::Store::revoke_token) did.
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

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

pub(crate) fn os_rng() -> Result<rand_chacha::ChaCha20Rng, StoreError> {
    psi_core::rng::os_rng().map_err(|e| StoreError::Random(e.to_string()))
}
