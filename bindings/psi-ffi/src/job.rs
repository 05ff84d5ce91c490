//! Threads and waiting: a run executes on its own thread behind a future the foreign
//! language awaits ([`spawn`]), and waits on the foreign transport's futures there
//! ([`block_on`]). No async runtime: the foreign side drives the outer future, the run's
//! thread parks on the inner ones.

use crate::error::PsiError;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

/// Runs `f`, turning a panic (its own, or one a rayon pool re-raised in it) into
/// [`PsiError::Internal`]. The panic's payload is not kept: it could hold data.
pub(crate) fn guarded<T>(
    what: &str,
    f: impl FnOnce() -> Result<T, PsiError>,
) -> Result<T, PsiError> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err(PsiError::internal(format!(
            "{what} panicked in the native library"
        )))
    })
}

/// Runs `f` on a new thread named `name` and returns a future of its result. Dropping the
/// future does not stop the thread: pair it with a cancel token the thread checks.
pub(crate) fn spawn<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> Result<T, PsiError> + Send + 'static,
) -> Result<Spawned<T>, PsiError> {
    let slot = Arc::new(Mutex::new(Slot {
        result: None,
        waker: None,
    }));
    let theirs = slot.clone();
    let what = name.to_string();
    thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            let result = guarded(&what, f);
            let waker = {
                let mut s = theirs.lock().unwrap_or_else(|e| e.into_inner());
                s.result = Some(result);
                s.waker.take()
            };
            // Woken outside the lock: the foreign side may poll again synchronously, on
            // this very thread (a Kotlin coroutine on an unconfined dispatcher does).
            if let Some(w) = waker {
                w.wake();
            }
        })
        .map_err(|_| PsiError::internal("could not start a thread for the run"))?;
    Ok(Spawned(slot))
}

struct Slot<T> {
    result: Option<Result<T, PsiError>>,
    waker: Option<Waker>,
}

/// The result of a [`spawn`]ed thread.
pub(crate) struct Spawned<T>(Arc<Mutex<Slot<T>>>);

impl<T> Future for Spawned<T> {
    type Output = Result<T, PsiError>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match s.result.take() {
            Some(r) => Poll::Ready(r),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// How a [`block_on`] ended.
pub(crate) enum Wait<T> {
    /// The future finished.
    Done(T),
    /// `abort` said stop; the future was dropped.
    Aborted,
    /// `limit` passed; the future was dropped.
    TimedOut,
}

/// How often a blocked wait looks at its abort condition.
const CHECK_EVERY: Duration = Duration::from_millis(20);

struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Waits on this thread for `fut`, at most `limit`, giving up early when `abort` returns
/// true (checked every 20 ms). The future is dropped when this returns.
pub(crate) fn block_on<F: Future>(
    fut: F,
    limit: Duration,
    abort: impl Fn() -> bool,
) -> Wait<F::Output> {
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(fut);
    let start = Instant::now();
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return Wait::Done(v);
        }
        if abort() {
            return Wait::Aborted;
        }
        let elapsed = start.elapsed();
        if elapsed >= limit {
            return Wait::TimedOut;
        }
        thread::park_timeout((limit - elapsed).min(CHECK_EVERY));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn a_panic_on_the_run_thread_is_an_internal_error() {
        let r = block_on(
            spawn("psi-test", || -> Result<(), PsiError> { panic!("boom") }).unwrap(),
            Duration::from_secs(10),
            || false,
        );
        match r {
            Wait::Done(Err(PsiError::Internal { reason })) => assert!(!reason.contains("boom")),
            _ => panic!("expected an internal error"),
        }
    }

    #[test]
    fn a_panic_in_a_rayon_worker_is_an_internal_error() {
        // rayon re-raises a worker's panic in the thread that waits for it.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let r = guarded("test", || {
            pool.scope(|s| s.spawn(|_| panic!("worker")));
            Ok(())
        });
        assert!(matches!(r, Err(PsiError::Internal { .. })));
    }

    #[test]
    fn block_on_aborts_and_times_out() {
        let never = std::future::pending::<()>();
        let stop = AtomicBool::new(false);
        let t = thread::spawn({
            let me = thread::current();
            move || {
                thread::sleep(Duration::from_millis(50));
                me.unpark();
            }
        });
        stop.store(true, Ordering::SeqCst);
        assert!(matches!(
            block_on(never, Duration::from_secs(10), || stop
                .load(Ordering::SeqCst)),
            Wait::Aborted
        ));
        t.join().unwrap();
        let start = Instant::now();
        assert!(matches!(
            block_on(
                std::future::pending::<()>(),
                Duration::from_millis(60),
                || false
            ),
            Wait::TimedOut
        ));
        assert!(start.elapsed() >= Duration::from_millis(60));
        assert!(matches!(
            block_on(std::future::ready(7), Duration::ZERO, || true),
            Wait::Done(7)
        ));
    }
}
