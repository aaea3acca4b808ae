//! Process facts the examples log: resident memory and its peak (Linux `/proc`).

/// A `/proc/self/status` field in bytes (`VmRSS`, `VmHWM`, ...); `None`
/// where the platform does not expose it.
fn status_bytes(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Resident set size in bytes (Linux: `VmRSS` of `/proc/self/status`);
/// `None` where the platform does not expose it.
pub fn rss_bytes() -> Option<u64> {
    status_bytes("VmRSS:")
}

/// The peak resident set size of the process in MiB (Linux: `VmHWM`;
/// `NaN` where unknown).
pub fn peak_rss_mib() -> f64 {
    status_bytes("VmHWM:").map_or(f64::NAN, |b| b as f64 / (1024.0 * 1024.0))
}

/// `rss_bytes` in MiB for printing (`NaN` when unknown).
pub fn rss_mib() -> f64 {
    rss_bytes().map_or(f64::NAN, |b| b as f64 / (1024.0 * 1024.0))
}
