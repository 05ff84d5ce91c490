//! How numbers read in the command's tables: milliseconds, thousands separators, MiB,
//! decimal KB and MB.

use std::time::Duration;

/// Milliseconds with one decimal.
pub fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

/// An integer with thousands separators.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Bytes as MiB with one decimal.
pub fn mb(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1 << 20) as f64)
}

/// Bytes in decimal units as docs/benchmarks.md quotes them: `0.35 MB` from 100 KB up,
/// `17.8 KB` below.
pub fn kb_or_mb(bytes: f64) -> String {
    if bytes >= 1e5 {
        format!("{:.2} MB", bytes / 1e6)
    } else {
        format!("{:.1} KB", bytes / 1e3)
    }
}
