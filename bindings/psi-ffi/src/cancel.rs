//! An explicit cancel path for platforms whose task cancellation does not reach the native
//! future (Swift through uniffi 0.32: a cancelled `Task` keeps awaiting, and the Rust future
//! is never dropped). Kotlin needs none: a cancelled coroutine drops the future.

use psi_client::CancelToken;
use std::sync::Arc;

/// A run's cancel switch. Create it before the run, pass it to
/// [`crate::DiscoveryClient::match_contacts_cancellable`], and call
/// [`CancelHandle::cancel`] from anywhere (a task-cancellation handler): the run abandons
/// the request in flight, deletes its server session and fails with `PsiError::Cancelled`.
/// A cancel that comes before the run starts is kept (the run then stops before its first
/// request). One handle may cancel several runs; it cannot be reset.
#[derive(Debug, Default, uniffi::Object)]
pub struct CancelHandle {
    token: CancelToken,
}

#[uniffi::export]
impl CancelHandle {
    /// A handle that is not cancelled.
    #[uniffi::constructor]
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Cancels every run given this handle, now and later. Cheap; may be called any number
    /// of times, from any thread.
    pub fn cancel(&self) {
        self.token.cancel();
    }

    /// True once [`CancelHandle::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }
}

impl CancelHandle {
    /// The token the run checks (shared: a cancel reaches every clone).
    pub(crate) fn token(&self) -> CancelToken {
        self.token.clone()
    }
}
