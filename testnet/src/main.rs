//! `cargo run -p testnet -- [OPTIONS]`: runs a local Shatter network and writes a report. See `lib.rs`.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use testnet::cli::Options;
use testnet::scenario::Settings;

/// With `--features mimalloc`: mimalloc instead of glibc's malloc. Hundreds of Swarms in one process allocate
/// and free small buffers from every worker thread, and glibc's free lists then cost over half the CPU; on
/// small networks it only costs memory (`results/round-speed/README.md`, "In-process scale").
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // First, before any thread or socket: Candle's matmul thread count, fixed for the process.
    let reexec = models::threads::reexec_with_matmul_threads();
    // Warnings only: the progress display is the output; RUST_LOG=info shows the nodes' logs.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,libp2p=error".into()),
        )
        .with_writer(std::io::stderr)
        // No escape codes in CI logs or redirected output.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    if let Err(e) = reexec {
        tracing::warn!(%e, "could not restart with RAYON_NUM_THREADS set: matmuls will read /proc/cpuinfo each time");
    }
    // `testnet view DIR`: a finished run's directory, served as the live view.
    if std::env::args_os().nth(1).is_some_and(|a| a == "view") {
        let opts = testnet::live::view::ViewOptions::parse_from(std::env::args_os().skip(1));
        return match testnet::live::view::serve(&opts) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    match run(Options::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(opts: Options) -> anyhow::Result<ExitCode> {
    let settings = Settings::from_options(opts)?;
    eprintln!("{}", testnet::describe(&settings));
    let report = testnet::run(&settings)?;
    println!();
    print!("{}", report.tables);
    println!();
    let shown = report.out.display();
    println!("Report written to {shown}/");
    println!(
        "  summary.json    settings and results ({} setting{})",
        report.summaries.len(),
        if report.summaries.len() == 1 { "" } else { "s" }
    );
    println!("  metrics.jsonl   one line per node per round (metrics.csv: the same rows as CSV)");
    for p in &report.plots {
        println!(
            "  {:<17} {}",
            p.file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default(),
            match p.file_name().and_then(|f| f.to_str()) {
                Some("metric.svg") => "test metric vs round",
                Some("bytes.svg") => "bytes sent per node per round vs the 4·d·r cost model",
                Some("round_time.svg") => "round time",
                Some("audit_round.svg") => "MIA AUC and LA success vs round",
                Some("audit_cdf.svg") => "CDF of the per-victim MIA AUC",
                Some("audit_k.svg") => "MIA AUC and LA success vs k (last audited round)",
                _ => "",
            }
        );
    }
    if let Some(live) = &report.live {
        eprintln!("live view still at {} (Ctrl-C to exit)", live.url());
        testnet::live::wait_for_ctrl_c();
    }
    if report.failed {
        eprintln!("some nodes stopped on an error: see `errors` in summary.json");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
