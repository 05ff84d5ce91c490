//! Worker threads for the expensive per-item work.
//!
//! The core never uses threads the caller did not ask for: every entry point that does
//! heavy work takes a [`Threads`] and runs inside a rayon pool of exactly that size. The
//! pool belongs to the calling thread: built on its first use, reused by its later calls,
//! and ended (its threads stopped) when the calling thread ends.

use crate::error::{Error, Result};
use std::cell::RefCell;
use std::num::NonZeroUsize;
use std::sync::Arc;

/// How many worker threads a computation may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Threads(NonZeroUsize);

impl Threads {
    /// One thread: everything runs on a single worker.
    pub const ONE: Threads = Threads(NonZeroUsize::MIN);

    /// Exactly `n` threads; `0` is read as 1.
    pub fn new(n: usize) -> Self {
        Threads(NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN))
    }

    /// As many threads as the machine has cores.
    pub fn available() -> Self {
        Threads(std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN))
    }

    /// The number of threads.
    pub fn get(self) -> usize {
        self.0.get()
    }

    /// Runs `f` inside a pool of this many threads.
    pub fn install<T: Send>(self, f: impl FnOnce() -> T + Send) -> Result<T> {
        Ok(self.pool()?.install(f))
    }

    /// The calling thread's pool of this size, built on its first use and kept until the
    /// calling thread ends. A pool per call would start and stop its threads on every
    /// call (tens of microseconds each, and visible to leak checkers as thread-local
    /// allocations of threads still exiting); a pool shared by every caller would make
    /// concurrent callers (a server's request threads) queue for each other's workers.
    fn pool(self) -> Result<Arc<rayon::ThreadPool>> {
        POOLS.with(|pools| {
            let mut pools = pools.borrow_mut();
            if let Some((_, pool)) = pools.iter().find(|(n, _)| *n == self.get()) {
                return Ok(pool.clone());
            }
            let pool = Arc::new(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(self.get())
                    .thread_name(|i| format!("psi-worker-{i}"))
                    .build()
                    .map_err(|e| Error::ThreadPool(e.to_string()))?,
            );
            if pools.len() >= POOLS_PER_THREAD {
                pools.remove(0);
            }
            pools.push((self.get(), pool.clone()));
            Ok(pool)
        })
    }
}

/// Pool sizes a calling thread keeps (callers use one or two: their configured count,
/// and one).
const POOLS_PER_THREAD: usize = 4;

thread_local! {
    static POOLS: RefCell<Vec<(usize, Arc<rayon::ThreadPool>)>> = const { RefCell::new(Vec::new()) };
}

impl Default for Threads {
    fn default() -> Self {
        Threads::available()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    fn worker_id(threads: Threads) -> std::thread::ThreadId {
        threads.install(|| std::thread::current().id()).unwrap()
    }

    #[test]
    fn a_callers_later_calls_reuse_its_pool() {
        // Found by the long run of the `labels` fuzz target: a new pool per call started
        // a thread per call (12 executions/s) and LeakSanitizer saw the exiting threads'
        // thread-local allocations.
        let one = worker_id(Threads::ONE);
        assert_ne!(
            one,
            std::thread::current().id(),
            "work runs on a pool thread"
        );
        assert_eq!(worker_id(Threads::ONE), one);
        let two: std::collections::BTreeSet<String> = (0..50)
            .map(|_| format!("{:?}", worker_id(Threads::new(2))))
            .collect();
        assert!(two.len() <= 2, "{two:?}");
        assert!(!two.contains(&format!("{one:?}")));
        // The pool has the size asked for.
        assert_eq!(
            Threads::new(3).install(rayon::current_num_threads).unwrap(),
            3
        );
    }

    #[test]
    fn concurrent_callers_do_not_share_workers() {
        // Two callers with one thread each must run at the same time: each job waits for
        // the other to start (a shared one-thread pool would time out here).
        let (a_tx, a_rx) = mpsc::channel::<()>();
        let (b_tx, b_rx) = mpsc::channel::<()>();
        let wait = Duration::from_secs(10);
        let other = std::thread::spawn(move || {
            Threads::ONE
                .install(move || {
                    a_tx.send(()).unwrap();
                    b_rx.recv_timeout(wait).is_ok()
                })
                .unwrap()
        });
        let here = Threads::ONE
            .install(move || {
                b_tx.send(()).unwrap();
                a_rx.recv_timeout(wait).is_ok()
            })
            .unwrap();
        assert!(here && other.join().unwrap());
    }
}
