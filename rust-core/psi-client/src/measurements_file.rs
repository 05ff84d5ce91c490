//! Where a client's [`Measurements`] (device costs, link estimates per network, each
//! server's last health) live between runs and app starts: `measurements.json` in a
//! directory. The one owner of that file: `psi match --cache-dir` and the platform
//! bindings (`measurements_dir`) both open it here, so it has one format, one reader and
//! one writer.
//!
//! The clients of one process that name the same directory (however it is spelt) share
//! one [`MeasurementStore`], so parallel runs see each other's measurements. Saves are
//! atomic (a temporary file, then a rename) and serialized per directory, so an older
//! snapshot never replaces a newer one. Measurements are a cache: a missing, unreadable,
//! oversized or corrupt file reads as an empty store (the next choice calibrates the
//! device and starts from the link priors again).
//!
//! The file holds unit costs, network names as the app gave them, server URLs and their
//! health: no contact data. Errors name the path and the I/O failure, never the contents.

use crate::measure::{MeasurementStore, Measurements};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use thiserror::Error;

/// An open directory: its store and the lock its saves take.
type Open = (Weak<MeasurementStore>, Weak<Mutex<()>>);

/// The stores open in this process, by canonical directory.
static OPEN: Mutex<BTreeMap<PathBuf, Open>> = Mutex::new(BTreeMap::new());

/// Names temporary files uniquely within the process.
static SAVES: AtomicU64 = AtomicU64::new(0);

/// Why [`MeasurementsFile::save`] could not write the file. The previous file (if any)
/// is left as it was.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum MeasurementsFileError {
    /// The directory could not be created.
    #[error("cannot create the measurements directory {}: {source}", dir.display())]
    CreateDir {
        /// The directory.
        dir: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The temporary file could not be written, or could not be renamed over the file.
    #[error("cannot write the measurements file {}: {source}", file.display())]
    Write {
        /// The measurements file.
        file: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
}

/// A [`MeasurementStore`] and the file that keeps it (if any): open one per client (or
/// per process) and hand [`MeasurementsFile::store`] to
/// [`crate::Client::with_measurements`]; call [`MeasurementsFile::save`] after runs.
#[derive(Debug)]
pub struct MeasurementsFile {
    store: Arc<MeasurementStore>,
    file: Option<PathBuf>,
    /// Held by a save from its snapshot to its rename, shared by every
    /// `MeasurementsFile` of the directory: the file is replaced in the order the
    /// snapshots were taken, so an older snapshot is never renamed over a newer one.
    saving: Arc<Mutex<()>>,
}

impl MeasurementsFile {
    /// The file's name in its directory.
    pub const FILE_NAME: &'static str = "measurements.json";

    /// Largest file read (a few networks and servers take a few KiB): a larger file
    /// reads as an empty store.
    pub const MAX_BYTES: u64 = 1 << 20;

    /// The store kept in `dir/measurements.json`: shared with the other clients of this
    /// process on the same directory, however it is spelt (the key is the canonical path;
    /// the directory is created for that, as a save would), and loaded from the file the
    /// first time ([`MeasurementsFile::load`]).
    pub fn open(dir: &Path) -> MeasurementsFile {
        let dir = canonical(dir);
        let file = dir.join(Self::FILE_NAME);
        let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        open.retain(|_, (s, _)| s.strong_count() > 0);
        let shared = open
            .get(&dir)
            .and_then(|(s, l)| Some((s.upgrade()?, l.upgrade()?)));
        let (store, saving) = match shared {
            Some(s) => s,
            None => {
                let s = Arc::new(MeasurementStore::new(Self::load(&file)));
                let l = Arc::new(Mutex::new(()));
                open.insert(dir, (Arc::downgrade(&s), Arc::downgrade(&l)));
                (s, l)
            }
        };
        MeasurementsFile {
            store,
            file: Some(file),
            saving,
        }
    }

    /// A store of the caller's alone, in memory: [`MeasurementsFile::save`] writes
    /// nothing.
    pub fn in_memory() -> MeasurementsFile {
        MeasurementsFile {
            store: Arc::new(MeasurementStore::default()),
            file: None,
            saving: Arc::new(Mutex::new(())),
        }
    }

    /// The store, for [`crate::Client::with_measurements`].
    pub fn store(&self) -> Arc<MeasurementStore> {
        self.store.clone()
    }

    /// The file, if the store is kept on disk.
    pub fn path(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// Writes the store to its file (nothing for [`MeasurementsFile::in_memory`]),
    /// atomically: a temporary file in the same directory, then a rename. Callers may
    /// ignore a failure: it costs the next start a calibration and the link priors.
    pub fn save(&self) -> Result<(), MeasurementsFileError> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let _saving = self.saving.lock().unwrap_or_else(|e| e.into_inner());
        let json = self.store.snapshot().to_json();
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir).map_err(|source| MeasurementsFileError::CreateDir {
                dir: dir.to_path_buf(),
                source,
            })?;
        }
        let tmp = file.with_extension(format!(
            "{}.{}.tmp",
            std::process::id(),
            SAVES.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&tmp, json)
            .and_then(|()| std::fs::rename(&tmp, file))
            .map_err(|source| {
                let _ = std::fs::remove_file(&tmp);
                MeasurementsFileError::Write {
                    file: file.clone(),
                    source,
                }
            })
    }

    /// The measurements in `file`: empty if it is missing, unreadable, larger than
    /// [`MeasurementsFile::MAX_BYTES`] or not a store ([`Measurements::from_json`]).
    pub fn load(file: &Path) -> Measurements {
        let mut text = String::new();
        let read = std::fs::File::open(file)
            .and_then(|f| f.take(Self::MAX_BYTES + 1).read_to_string(&mut text));
        match read {
            Ok(n) if n as u64 <= Self::MAX_BYTES => Measurements::from_json(&text),
            _ => Measurements::default(),
        }
    }
}

/// `dir` as the key of its store: its canonical path (symbolic links, `.` and `..`
/// resolved; the directory is created for that, as a save would), or, if it cannot be
/// created or resolved, the absolute path as given.
fn canonical(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir)
        .and_then(|()| dir.canonicalize())
        .or_else(|_| std::path::absolute(dir))
        .unwrap_or_else(|_| dir.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::{LinkEstimate, LinkHints};

    const FILE_NAME: &str = MeasurementsFile::FILE_NAME;

    fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("psi-client-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn with_wifi(s: &MeasurementsFile, rtt: f64) {
        s.store.update(|m| {
            let mut e = LinkEstimate::from_hints(&LinkHints::default());
            e.rtt = rtt;
            e.rtt_samples = 1;
            m.networks.insert("wifi".into(), e);
        });
    }

    #[test]
    fn a_directory_keeps_the_measurements_across_clients_and_restarts() {
        let dir = temp_dir("store");
        let a = MeasurementsFile::open(&dir);
        let b = MeasurementsFile::open(&dir);
        assert!(Arc::ptr_eq(&a.store, &b.store), "one store per directory");
        with_wifi(&a, 0.123);
        a.save().unwrap();
        assert!(dir.join(FILE_NAME).is_file());
        assert_eq!(
            a.path(),
            Some(dir.canonicalize().unwrap().join(FILE_NAME)).as_deref()
        );
        drop((a, b));
        // No client holds it any more: the next one reads the file.
        let c = MeasurementsFile::open(&dir);
        assert_eq!(c.store.snapshot().networks["wifi"].rtt, 0.123);
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [FILE_NAME]);
        // Without a directory the store is the caller's own and nothing is written.
        let mem = MeasurementsFile::in_memory();
        with_wifi(&mem, 0.5);
        mem.save().unwrap();
        assert!(mem.path().is_none());
        assert!(!Arc::ptr_eq(
            &mem.store,
            &MeasurementsFile::in_memory().store
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_spelling_of_a_directory_opens_one_store() {
        let dir = temp_dir("spelt");
        let a = MeasurementsFile::open(&dir);
        // Relative parts and a trailing separator.
        let b = MeasurementsFile::open(&dir.join(".").join("..").join(dir.file_name().unwrap()));
        let c = MeasurementsFile::open(Path::new(&format!("{}/", dir.display())));
        assert!(Arc::ptr_eq(&a.store, &b.store) && Arc::ptr_eq(&a.store, &c.store));
        assert!(Arc::ptr_eq(&a.saving, &b.saving));
        #[cfg(unix)]
        {
            let link = temp_dir("spelt-link");
            std::os::unix::fs::symlink(&dir, &link).unwrap();
            let d = MeasurementsFile::open(&link);
            assert!(
                Arc::ptr_eq(&a.store, &d.store),
                "a link is the same directory"
            );
            std::fs::remove_file(&link).unwrap();
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn concurrent_saves_leave_the_newest_snapshot() {
        let dir = temp_dir("racing");
        let stores: Vec<MeasurementsFile> = (0..8).map(|_| MeasurementsFile::open(&dir)).collect();
        std::thread::scope(|scope| {
            for s in &stores {
                scope.spawn(move || {
                    for _ in 0..100 {
                        // Each save follows a change: the last save holds every change.
                        s.store.update(|m| {
                            let e = m
                                .networks
                                .entry("n".into())
                                .or_insert_with(|| LinkEstimate::from_hints(&Default::default()));
                            e.rtt_samples += 1;
                        });
                        s.save().unwrap();
                    }
                });
            }
        });
        let on_disk = MeasurementsFile::load(&dir.join(FILE_NAME));
        assert_eq!(on_disk.networks["n"].rtt_samples, 8 * 100);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_garbled_or_oversized_file_is_an_empty_store() {
        let dir = temp_dir("garbled");
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(FILE_NAME);
        std::fs::write(&file, b"{\"networks\": 17").unwrap();
        assert!(MeasurementsFile::load(&file).networks.is_empty());
        let s = MeasurementsFile::open(&dir);
        assert!(s.store.snapshot().networks.is_empty());
        with_wifi(&s, 0.2);
        s.save().unwrap();
        let big = format!("{}{}", s.store.snapshot().to_json(), " ".repeat(1 << 20));
        assert_eq!(MeasurementsFile::load(&file).networks.len(), 1);
        std::fs::write(&file, big).unwrap();
        assert!(MeasurementsFile::load(&file).networks.is_empty());
        assert!(
            MeasurementsFile::load(&dir.join("missing.json"))
                .networks
                .is_empty()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_file_is_the_stores_json() {
        // The on-disk format is `Measurements::to_json`, as `psi match` always wrote it.
        let dir = temp_dir("format");
        let s = MeasurementsFile::open(&dir);
        with_wifi(&s, 0.25);
        s.save().unwrap();
        let text = std::fs::read_to_string(dir.join(FILE_NAME)).unwrap();
        assert_eq!(text, s.store.snapshot().to_json());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_failed_save_is_a_typed_error_without_the_contents() {
        // A directory where the file should be: the rename fails.
        let dir = temp_dir("blocked");
        let s = MeasurementsFile::open(&dir);
        std::fs::create_dir_all(dir.join(FILE_NAME).join("x")).unwrap();
        with_wifi(&s, 0.3);
        let err = s.save().unwrap_err();
        assert!(
            matches!(err, MeasurementsFileError::Write { .. }),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(text.contains(FILE_NAME) && !text.contains("wifi"), "{text}");
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
