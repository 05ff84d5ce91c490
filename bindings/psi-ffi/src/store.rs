//! Where a client's measurements (device costs, link estimates per network, each
//! server's last health: `psi_client::Measurements`) live between runs and app starts:
//! `measurements.json` in a directory, the same file as `psi match --cache-dir`. The
//! clients of one process that name the same directory share one store, so parallel runs
//! see each other's measurements and the file is written from one place.

use psi_client::{MeasurementStore, Measurements};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// The file's name in its directory.
pub(crate) const FILE_NAME: &str = "measurements.json";

/// Largest file read (a few networks and servers take a few KiB): a larger or
/// unreadable file is treated as empty, as measurements are a cache.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// An open directory: its store and the lock its saves take.
type Open = (Weak<MeasurementStore>, Weak<Mutex<()>>);

/// The stores open in this process, by canonical directory.
static OPEN: Mutex<BTreeMap<PathBuf, Open>> = Mutex::new(BTreeMap::new());

/// Names temporary files uniquely within the process.
static SAVES: AtomicU64 = AtomicU64::new(0);

/// A client's measurement store, and the file that keeps it (if any).
#[derive(Debug)]
pub(crate) struct Stored {
    store: Arc<MeasurementStore>,
    file: Option<PathBuf>,
    /// Held by a save from its snapshot to its rename, shared by every `Stored` of the
    /// directory: the file is replaced in the order the snapshots were taken, so an
    /// older snapshot is never renamed over a newer one.
    saving: Arc<Mutex<()>>,
}

impl Stored {
    /// The store kept in `dir/measurements.json` (shared with the other clients of this
    /// process on the same directory, however it is spelt: the key is the canonical
    /// path; loaded from the file the first time), or a store of this client alone, in
    /// memory, when `dir` is `None`.
    pub(crate) fn open(dir: Option<&Path>) -> Stored {
        let Some(dir) = dir else {
            return Stored {
                store: Arc::new(MeasurementStore::default()),
                file: None,
                saving: Arc::new(Mutex::new(())),
            };
        };
        let dir = canonical(dir);
        let file = dir.join(FILE_NAME);
        let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        open.retain(|_, (s, _)| s.strong_count() > 0);
        let shared = open
            .get(&dir)
            .and_then(|(s, l)| Some((s.upgrade()?, l.upgrade()?)));
        let (store, saving) = match shared {
            Some(s) => s,
            None => {
                let s = Arc::new(MeasurementStore::new(load(&file)));
                let l = Arc::new(Mutex::new(()));
                open.insert(dir, (Arc::downgrade(&s), Arc::downgrade(&l)));
                (s, l)
            }
        };
        Stored {
            store,
            file: Some(file),
            saving,
        }
    }

    /// The store, for psi-client's `Client::with_measurements`.
    pub(crate) fn store(&self) -> Arc<MeasurementStore> {
        self.store.clone()
    }

    /// Writes the store to its file (if it has one), atomically: a temporary file in the
    /// same directory, then a rename. A failure is ignored: it costs the next app start a
    /// calibration and the link priors, no more.
    pub(crate) fn save(&self) {
        let Some(file) = &self.file else { return };
        let _saving = self.saving.lock().unwrap_or_else(|e| e.into_inner());
        let json = self.store.snapshot().to_json();
        let tmp = file.with_extension(format!(
            "{}.{}.tmp",
            std::process::id(),
            SAVES.fetch_add(1, Ordering::Relaxed)
        ));
        let written = file
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&tmp, json))
            .and_then(|()| std::fs::rename(&tmp, file));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
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

/// The measurements in `file`; empty if it is missing, too large or not a store.
fn load(file: &Path) -> Measurements {
    let mut text = String::new();
    let read = std::fs::File::open(file)
        .and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_string(&mut text));
    match read {
        Ok(n) if n as u64 <= MAX_FILE_BYTES => Measurements::from_json(&text),
        _ => Measurements::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("psi-ffi-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn with_wifi(s: &Stored, rtt: f64) {
        s.store.update(|m| {
            let mut e = psi_client::LinkEstimate::from_hints(&psi_client::LinkHints::default());
            e.rtt = rtt;
            e.rtt_samples = 1;
            m.networks.insert("wifi".into(), e);
        });
    }

    #[test]
    fn a_directory_keeps_the_measurements_across_clients_and_restarts() {
        let dir = temp_dir("store");
        let a = Stored::open(Some(&dir));
        let b = Stored::open(Some(&dir));
        assert!(Arc::ptr_eq(&a.store, &b.store), "one store per directory");
        with_wifi(&a, 0.123);
        a.save();
        assert!(dir.join(FILE_NAME).is_file());
        drop((a, b));
        // No client holds it any more: the next one reads the file.
        let c = Stored::open(Some(&dir));
        assert_eq!(c.store.snapshot().networks["wifi"].rtt, 0.123);
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [FILE_NAME]);
        // Without a directory the store is the client's own and nothing is written.
        let mem = Stored::open(None);
        with_wifi(&mem, 0.5);
        mem.save();
        assert!(!Arc::ptr_eq(&mem.store, &Stored::open(None).store));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_spelling_of_a_directory_opens_one_store() {
        let dir = temp_dir("spelt");
        let a = Stored::open(Some(&dir));
        // Relative parts and a trailing separator.
        let b = Stored::open(Some(
            &dir.join(".").join("..").join(dir.file_name().unwrap()),
        ));
        let c = Stored::open(Some(Path::new(&format!("{}/", dir.display()))));
        assert!(Arc::ptr_eq(&a.store, &b.store) && Arc::ptr_eq(&a.store, &c.store));
        assert!(Arc::ptr_eq(&a.saving, &b.saving));
        #[cfg(unix)]
        {
            let link = temp_dir("spelt-link");
            std::os::unix::fs::symlink(&dir, &link).unwrap();
            let d = Stored::open(Some(&link));
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
        let stores: Vec<Stored> = (0..8).map(|_| Stored::open(Some(&dir))).collect();
        std::thread::scope(|scope| {
            for s in &stores {
                scope.spawn(move || {
                    for _ in 0..100 {
                        // Each save follows a change: the last save holds every change.
                        s.store.update(|m| {
                            let e = m.networks.entry("n".into()).or_insert_with(|| {
                                psi_client::LinkEstimate::from_hints(&Default::default())
                            });
                            e.rtt_samples += 1;
                        });
                        s.save();
                    }
                });
            }
        });
        let on_disk = load(&dir.join(FILE_NAME));
        assert_eq!(on_disk.networks["n"].rtt_samples, 8 * 100);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_garbled_or_oversized_file_is_an_empty_store() {
        let dir = temp_dir("garbled");
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(FILE_NAME);
        std::fs::write(&file, b"{\"networks\": 17").unwrap();
        assert!(load(&file).networks.is_empty());
        let s = Stored::open(Some(&dir));
        with_wifi(&s, 0.2);
        s.save();
        let big = format!("{}{}", s.store.snapshot().to_json(), " ".repeat(1 << 20));
        assert_eq!(load(&file).networks.len(), 1);
        std::fs::write(&file, big).unwrap();
        assert!(load(&file).networks.is_empty());
        assert!(load(&dir.join("missing.json")).networks.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
