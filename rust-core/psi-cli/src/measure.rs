//! Wall-clock and CPU-time measurement for the demo and the benchmarks.

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

/// Peak resident set size of this process so far, in bytes.
pub fn peak_rss_bytes() -> u64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: as above.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) } != 0 {
        return 0;
    }
    // SAFETY: initialised by the successful call above.
    (unsafe { usage.assume_init() }.ru_maxrss as u64) * 1024
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

/// Milliseconds with one decimal.
pub fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

/// An integer with thousands separators.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}
