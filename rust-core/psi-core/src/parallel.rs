//! Worker threads for the expensive per-item work.
//!
//! The core never spawns threads behind the caller's back: every entry point that does
//! heavy work takes a [`Threads`] and runs inside a rayon pool of exactly that size.

use crate::error::{Error, Result};
use std::num::NonZeroUsize;

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
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(self.get())
            .thread_name(|i| format!("psi-worker-{i}"))
            .build()
            .map_err(|e| Error::ThreadPool(e.to_string()))?;
        Ok(pool.install(f))
    }
}

impl Default for Threads {
    fn default() -> Self {
        Threads::available()
    }
}
