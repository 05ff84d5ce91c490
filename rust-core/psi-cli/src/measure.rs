//! Wall-clock, CPU-time and peak-heap measurement for the demo and the benchmarks.

use std::time::{Duration, Instant};

/// CPU time (user + system) consumed by this process so far, all threads.
pub fn process_cpu_time() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a complete rusage into the pointer it is given.
    let ok = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) } == 0;
    if !ok {
        return Duration::ZERO;
    }
    // SAFETY: initialised by the successful call above (and zeroed before it).
    let u = unsafe { usage.assume_init() };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Hands the allocator's free pages back to the system. A registry's load frees
/// many small buffers (the entry list's identifiers and labels, once copied into the
/// served parts); glibc keeps them in its free lists, so without this the process holds
/// them as resident memory until the next load reuses them.
pub fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; any pad is valid.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Wall and CPU time of one phase.
#[derive(Debug, Clone, Copy, Default)]
pub struct Timing {
    pub wall: Duration,
    pub cpu: Duration,
}

/// Runs `f`, measuring its wall and process CPU time.
pub fn timed<T>(f: impl FnOnce() -> T) -> (T, Timing) {
    let c0 = process_cpu_time();
    let t0 = Instant::now();
    let out = f();
    let wall = t0.elapsed();
    let cpu = process_cpu_time().saturating_sub(c0);
    (out, Timing { wall, cpu })
}

/// A global allocator that counts live heap bytes and their high-water mark, so the
/// benchmarks can report the peak heap of one run (RSS only ever grows per process).
pub struct CountingAlloc;

static LIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static PEAK: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn grew(by: usize) {
    use std::sync::atomic::Ordering::Relaxed;
    let now = LIVE.fetch_add(by, Relaxed) + by;
    PEAK.fetch_max(now, Relaxed);
}

fn shrank(by: usize) {
    LIVE.fetch_sub(by, std::sync::atomic::Ordering::Relaxed);
}

// SAFETY: every call is forwarded unchanged to the system allocator; we only count sizes.
unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { std::alloc::System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { std::alloc::System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { std::alloc::System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { std::alloc::System.realloc(ptr, layout, new) };
        if !p.is_null() {
            shrank(layout.size());
            grew(new);
        }
        p
    }
}

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Starts a new peak-heap measurement from the current live bytes.
pub fn reset_peak_heap() {
    use std::sync::atomic::Ordering::Relaxed;
    PEAK.store(LIVE.load(Relaxed), Relaxed);
}

/// Highest live heap bytes since the last [`reset_peak_heap`].
pub fn peak_heap_bytes() -> u64 {
    PEAK.load(std::sync::atomic::Ordering::Relaxed) as u64
}
