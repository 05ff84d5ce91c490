//! Another process's memory and open file descriptors, read from Linux `/proc`: the
//! server's, sampled by `psi loadgen` and `psi attack`.

/// Open file descriptors of a process (Linux /proc).
pub fn open_fds(pid: u32) -> Option<u64> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64)
}

/// A `/proc/PID/status` memory field (`VmRSS:`, `VmHWM:`) in KiB.
pub fn rss_kib(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}
