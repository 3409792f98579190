//! Every algorithm on the one engine, side by side, over several seeds, in the simulator: final and best
//! test metric (mean ± sample standard deviation over the seeds), chunk bytes and messages per RN per round.
//!
//! ```sh
//! cargo run --release -p testnet --example baselines                       # writes results/baselines-synthetic/
//! cargo run --release -p testnet --example baselines -- --seeds 5 --rounds 40 --out /tmp/b
//! ```
//!
//! Each (algorithm, seed) run keeps its own testnet report (`<out>/<algo>/seed-<s>/`: metrics.jsonl,
//! metrics.csv, summary.json, plots); `<out>/summary.csv` and `<out>/summary.md` hold the comparison.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use node::algo::AlgoSpec;
use testnet::cli::{Mode, Options};
use testnet::scenario::Settings;

#[derive(Parser)]
struct Args {
    /// Seeds per algorithm (1, 2, …).
    #[arg(long, default_value_t = 3)]
    seeds: u64,
    #[arg(long, default_value_t = 16)]
    nodes: usize,
    #[arg(long, default_value_t = 20)]
    rounds: u64,
    #[arg(long, default_value_t = 4)]
    degree: usize,
    /// VNs per RN for the algorithms that use them (Shatter, and GHP on Shatter).
    #[arg(long, default_value_t = 4)]
    vns: usize,
    /// The algorithms, as `--algo` names them; `name@k` runs one with k VNs.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "el,shatter,dpsgd,chunking:4,sparsify-random:0.25,muffliato:0.05,ghp:0.05@1,random:0.05@1,ghp:0.05"
    )]
    algos: Vec<String>,
    #[arg(long, default_value = "results/baselines-synthetic")]
    out: PathBuf,
}

/// Mean and sample standard deviation.
fn spread(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = if v.len() > 1 {
        v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (mean, var.sqrt())
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let mut csv = String::from(
        "algo,vns,seeds,final_mean,final_std,best_mean,best_std,chunk_bytes_per_rn_per_round,messages_per_rn_per_round,neighbours_per_vn\n",
    );
    let mut md = format!(
        "Synthetic data (the default testnet model), {} nodes, r = {}, {} rounds, simulator; mean ± sample std over {} seeds.\n\
         Regenerate: `cargo run --release -p testnet --example baselines -- --seeds {} --nodes {} --rounds {} --degree {} --vns {} --out {}`\n\n\
         | algorithm | k | final accuracy | best accuracy | chunk bytes / RN / round | messages / RN / round | neighbours / VN |\n|---|---|---|---|---|---|---|\n",
        a.nodes, a.degree, a.rounds, a.seeds, a.seeds, a.nodes, a.rounds, a.degree, a.vns, a.out.display()
    );
    for name in &a.algos {
        let (algo, vns) = match name.split_once('@') {
            Some((n, k)) => (n, k.parse::<usize>().context("name@k needs a number k")?),
            None => (name.as_str(), a.vns),
        };
        let spec: AlgoSpec = algo.parse().map_err(anyhow::Error::msg)?;
        let vns = if spec.uses_vns() { vns } else { 1 };
        let (mut finals, mut bests) = (Vec::new(), Vec::new());
        let mut last = None;
        for seed in 1..=a.seeds {
            let out = a.out.join(name.replace([':', '@'], "-")).join(format!("seed-{seed}"));
            let s = Settings::resolve(Options {
                mode: Some(Mode::Sim),
                nodes: Some(a.nodes),
                vns: Some(vec![vns]),
                degree: Some(a.degree),
                rounds: Some(a.rounds),
                algo: Some(spec),
                seed: Some(seed),
                out: Some(out),
                plain: true,
                ..Options::default()
            })?;
            eprintln!("{name} seed {seed}");
            let report = testnet::run(&s)?;
            let sum = report.summaries.into_iter().next().context("one setting")?;
            finals.push(sum.final_metric);
            bests.push(sum.best_metric);
            last = Some(sum);
        }
        let sum = last.context("at least one seed")?;
        let (fm, fs) = spread(&finals);
        let (bm, bs) = spread(&bests);
        writeln!(
            csv,
            "{name},{vns},{},{fm:.4},{fs:.4},{bm:.4},{bs:.4},{:.0},{:.1},{:.2}",
            a.seeds,
            sum.chunk_bytes_per_rn_per_round,
            sum.messages_per_rn_per_round,
            sum.neighbours_per_vn
        )?;
        writeln!(
            md,
            "| {algo} | {vns} | {fm:.3} ± {fs:.3} | {bm:.3} ± {bs:.3} | {:.0} | {:.1} | {:.2} |",
            sum.chunk_bytes_per_rn_per_round,
            sum.messages_per_rn_per_round,
            sum.neighbours_per_vn
        )?;
    }
    std::fs::write(a.out.join("summary.csv"), &csv)?;
    std::fs::write(a.out.join("summary.md"), &md)?;
    print!("{md}");
    Ok(())
}
