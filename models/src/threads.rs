//! The CPU matmul thread count, fixed once per process.
//!
//! Candle 0.11's CPU matmul asks for its thread count on every call (`candle_core::utils::get_num_threads`).
//! Unless `RAYON_NUM_THREADS` is set, that ends in `num_cpus::get_physical`, which opens, reads and parses
//! `/proc/cpuinfo` — on every matmul, so several times per SGD step. Measured on the default testnet run
//! (`target/release/testnet`, 8 nodes training an MLP in one process, two cores): local training took
//! 0.020 s per round without the variable and 0.007-0.008 s with it (set by hand to 2, or by
//! [`reexec_with_matmul_threads`]), and a profile of the run without it had 2-4 % of all CPU time in reading
//! `/proc/cpuinfo`.
//!
//! The variable has to be in the environment before the first matmul, and Rust can only set the process's own
//! environment with `unsafe` (which this workspace forbids). So [`reexec_with_matmul_threads`] starts the
//! binary again, in place, with the variable set to what Candle would have computed (the physical cores);
//! Candle then reads one environment variable per matmul. Binaries call it first thing in `main`; an
//! application that embeds a node sets `RAYON_NUM_THREADS` itself (the README says so).

use std::ffi::OsString;

/// The variable Candle's CPU matmul (and rayon's global pool) read for their thread count.
pub const THREADS_VAR: &str = "RAYON_NUM_THREADS";

/// Candle's own override of the CPUs it uses; when it is set Candle caches its answer and nothing is needed.
pub const CPU_MASK_VAR: &str = "CANDLE_CPU_MASK";

/// The value to give [`THREADS_VAR`], or `None` when the environment already fixes the count: Candle's
/// default, the physical cores.
pub fn threads_to_set(
    threads: Option<OsString>,
    cpu_mask: Option<OsString>,
    physical: usize,
) -> Option<String> {
    if threads.is_some() || cpu_mask.is_some() {
        return None;
    }
    Some(physical.max(1).to_string())
}

/// On Linux, if `RAYON_NUM_THREADS` (and `CANDLE_CPU_MASK`) are unset, replaces the running process with the
/// same binary and arguments and `RAYON_NUM_THREADS` set to the physical cores (see the module docs); the new
/// process finds it set and goes on. Call before anything else in `main`: before threads, files or sockets
/// exist. Returns `Ok(())` when there was nothing to do, and the error when the re-execution failed (the
/// process then runs on as it would have, only slower in matmuls).
pub fn reexec_with_matmul_threads() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        let Some(threads) = threads_to_set(
            std::env::var_os(THREADS_VAR),
            std::env::var_os(CPU_MASK_VAR),
            num_cpus::get_physical(),
        ) else {
            return Ok(());
        };
        let exe = std::env::current_exe()?;
        // `exec` returns only on failure.
        Err(std::process::Command::new(exe)
            .args(std::env::args_os().skip(1))
            .env(THREADS_VAR, threads)
            .exec())
    }
    #[cfg(not(target_os = "linux"))]
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_unset_environment_gets_the_physical_cores() {
        assert_eq!(threads_to_set(None, None, 4), Some("4".into()));
        assert_eq!(
            threads_to_set(None, None, 0),
            Some("1".into()),
            "never zero"
        );
        assert_eq!(
            threads_to_set(Some("2".into()), None, 4),
            None,
            "the user's choice stands"
        );
        assert_eq!(
            threads_to_set(None, Some("0-3".into()), 4),
            None,
            "Candle caches its mask"
        );
    }
}
