//! Peak resident memory, from Linux's `/proc/<pid>/status` (`VmHWM`, the resident-set high-water mark).
//! Elsewhere every function returns `None` and reports say "n/a": the crate forbids `unsafe`, so no
//! `getrusage` fallback.

use std::path::Path;

/// This process's peak resident set size in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    read_hwm(Path::new("/proc/self/status"))
}

/// Peak resident set size of process `pid` (a child the caller polls while it runs: once it has exited and
/// been reaped its `/proc` entry is gone).
pub fn peak_rss_of(pid: u32) -> Option<u64> {
    read_hwm(&Path::new("/proc").join(pid.to_string()).join("status"))
}

/// Resets this process's high-water mark to its current RSS, so that in a `--vns` sweep each setting reports
/// its own peak rather than the largest so far (`echo 5 > /proc/self/clear_refs`, Linux ≥ 4.0). Returns
/// whether it worked; when it did not, later peaks include earlier settings, and the summary says so.
pub fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn read_hwm(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    parse_hwm(&text)
}

/// Parses the `VmHWM:   1234 kB` line.
fn parse_hwm(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let mut parts = line["VmHWM:".len()..].split_whitespace();
    let value: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") | None => Some(value * 1024),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_status_line() {
        assert_eq!(
            parse_hwm("Name:\tx\nVmPeak:\t  10 kB\nVmHWM:\t   2048 kB\nVmRSS:\t 1 kB\n"),
            Some(2048 * 1024)
        );
        assert_eq!(parse_hwm("Name:\tx\n"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn reads_this_process() {
        assert!(peak_rss_bytes().unwrap() > 1 << 20);
        assert!(peak_rss_of(std::process::id()).is_some());
    }
}
