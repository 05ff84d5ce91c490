//! Cancelling a run from another thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A handle that cancels the runs it is given to. Clone it to the thread (or UI action)
/// that may cancel; [`CancelToken::cancel`] is cheap and may be called any number of
/// times. The driver checks it before every request and between protocol steps; a
/// cancelled run deletes its server session and returns [`crate::ClientError::Cancelled`].
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels every run holding this token (or a clone of it).
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// True once [`CancelToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}
