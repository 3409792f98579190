//! This process's CPU time, from Linux's `/proc/self/stat` (user + system time of all its threads). Elsewhere
//! it is `None` and reports leave the figure out: the crate forbids `unsafe`, so no `getrusage` fallback.
//!
//! Why a run reports it: an in-process network shares the machine's cores, and whether its rounds wait on the
//! network's timing or on the cores decides what can make them faster. CPU seconds over wall seconds says
//! which (a two-core machine that stays at 1.9 is saturated).

use std::path::Path;

/// Clock ticks per second of `/proc`'s times: Linux's `USER_HZ`, which the kernel fixes at 100 for this
/// interface on every architecture it reports these fields for (`sysconf(_SC_CLK_TCK)`, not callable without
/// `unsafe`, returns it).
const USER_HZ: f64 = 100.0;

/// User + system CPU seconds this process has used so far, all threads together.
pub fn process_cpu_seconds() -> Option<f64> {
    let text = std::fs::read_to_string(Path::new("/proc/self/stat")).ok()?;
    parse_stat(&text)
}

/// Parses `utime` and `stime` (fields 14 and 15) of a `/proc/<pid>/stat` line. The command name (field 2) is
/// in parentheses and may hold spaces and parentheses itself, so the fields are counted from its last `)`.
fn parse_stat(stat: &str) -> Option<f64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace();
    // After the name: state is field 3, so utime (14) is the 12th field from here.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_and_system_ticks_are_read_after_the_command_name() {
        // A command name with a space and a parenthesis, as a thread may set it.
        let line = "4242 (tokio rt) worker)) S 1 4242 4242 0 -1 4194560 2048 0 0 0 250 75 0 0 20 0 3 0 100 0 0";
        assert_eq!(parse_stat(line), Some(3.25));
        assert_eq!(parse_stat("4242 (x) S 1 2"), None, "truncated");
        assert_eq!(parse_stat("no name at all"), None);
    }

    #[test]
    // A wall-clock bound on the busy loop below; nothing else reads the clock.
    #[allow(clippy::disallowed_methods)]
    fn the_count_grows_while_this_process_computes() {
        let Some(before) = process_cpu_seconds() else {
            return; // not Linux
        };
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while process_cpu_seconds().unwrap() < before + 0.05 {
            for i in 0..1_000_000u64 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
            }
            assert!(
                start.elapsed().as_secs() < 10,
                "10 s of computing and the CPU time read still has not grown by 0.05 s"
            );
        }
        std::hint::black_box(x);
    }
}
