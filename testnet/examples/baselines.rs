//! Algorithms (and dropout rates) side by side over several seeds, in the simulator: final and best test
//! metric (mean ± sample standard deviation over the seeds), chunk bytes and messages per RN per round.
//! Every other testnet option (dataset, model, nodes, degree, rounds, partition, …) applies to every run.
//!
//! ```sh
//! cargo run --release -p testnet --example baselines -- --nodes 16   # writes results/baselines-synthetic/
//! # Fig. 11 of the paper (dropout), on the real MNIST subset:
//! cargo run --release -p testnet --example baselines -- --sweep-out results/dropout-mnist \
//!     --algos el,shatter@8 --dropouts 0,0.1,0.25,0.5,0.75 --dataset mnist --data-dir ../shared/data/mnist \
//!     --model lenet --partition dirichlet --alpha 0.1 --nodes 16 --degree 4 --rounds 30 --test-samples 300
//! ```
//!
//! Each run keeps its own testnet report (`<sweep-out>/<algo>[-dropout-P]/seed-<s>/`); `<sweep-out>/summary.csv`
//! and `<sweep-out>/summary.md` hold the comparison.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Mutex;

use anyhow::Context;
use clap::Parser;
use node::algo::AlgoSpec;
use testnet::cli::{Mode, Options};
use testnet::scenario::Settings;

#[derive(Parser)]
#[command(
    name = "baselines",
    about = "Algorithms, dropout rates and send jitters side by side over several seeds, in the simulator"
)]
struct Args {
    /// Seeds per cell (1, 2, …).
    #[arg(long, default_value_t = 3)]
    seeds: u64,
    /// The algorithms, as `--algo` names them; `name@k` runs one with k VNs (default k: --vns or 4).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "el,shatter,dpsgd,chunking:4,sparsify-random:0.25,muffliato:0.05,ghp:0.05@1,random:0.05@1,ghp:0.05"
    )]
    algos: Vec<String>,
    /// Dropout rates to run each algorithm at.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    dropouts: Vec<f64>,
    /// Send jitters (ms) to run each algorithm at; empty: the mode's default.
    #[arg(long, value_delimiter = ',')]
    send_jitters_ms: Vec<u64>,
    /// Runs at once (each uses about one core).
    #[arg(long, default_value_t = 1)]
    jobs: usize,
    #[arg(long, default_value = "results/baselines-synthetic")]
    sweep_out: PathBuf,
    /// Every testnet option, applied to every run (`--algo`, `--seed`, `--dropout`, `--out` and `--mode` are
    /// set by the sweep).
    #[command(flatten)]
    base: Options,
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

/// One cell of the table: an algorithm with its k at one dropout rate and send jitter.
struct Cell {
    name: String,
    spec: AlgoSpec,
    vns: usize,
    dropout: f64,
    jitter_ms: Option<u64>,
}

impl Cell {
    fn dir(&self) -> String {
        let mut d = self.name.replace([':', '@'], "-");
        if self.dropout > 0.0 {
            d += &format!("-dropout-{}", self.dropout);
        }
        if let Some(j) = self.jitter_ms {
            d += &format!("-jitter-{j}ms");
        }
        d
    }
}

/// The network observer's sibling-linkage AUC from a summary (`--audit` runs), by feature.
fn linkage_auc(s: &testnet::report::Summary, feature: &str) -> Option<f64> {
    s.extra.get("linkage")?[feature]["auc_pooled"].as_f64()
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let default_k = a.base.vns.as_ref().and_then(|v| v.first().copied()).unwrap_or(4);
    let mut cells = Vec::new();
    for name in &a.algos {
        let (algo, k) = match name.split_once('@') {
            Some((n, k)) => (n, k.parse::<usize>().context("name@k needs a number k")?),
            None => (name.as_str(), default_k),
        };
        let spec: AlgoSpec = algo.parse().map_err(anyhow::Error::msg)?;
        let jitters: Vec<Option<u64>> = if a.send_jitters_ms.is_empty() {
            vec![None]
        } else {
            a.send_jitters_ms.iter().copied().map(Some).collect()
        };
        for &dropout in &a.dropouts {
            for &jitter_ms in &jitters {
                cells.push(Cell {
                    name: name.clone(),
                    spec,
                    vns: if spec.uses_vns() { k } else { 1 },
                    dropout,
                    jitter_ms,
                });
            }
        }
    }
    std::fs::create_dir_all(&a.sweep_out)
        .with_context(|| format!("creating {}", a.sweep_out.display()))?;
    // Every (cell, seed) run, handed out to `jobs` threads; results land by index.
    let runs: Vec<(usize, u64)> = (0..cells.len())
        .flat_map(|c| (1..=a.seeds).map(move |s| (c, s)))
        .collect();
    let results: Mutex<Vec<Option<testnet::report::Summary>>> =
        Mutex::new((0..runs.len()).map(|_| None).collect());
    let next = Mutex::new(0usize);
    let run_one = |i: usize| -> anyhow::Result<()> {
        let (c, seed) = runs[i];
        let cell = &cells[c];
        let s = Settings::resolve(Options {
            mode: Some(Mode::Sim),
            vns: Some(vec![cell.vns]),
            algo: Some(cell.spec),
            dropout: Some(cell.dropout),
            send_jitter_ms: cell.jitter_ms.or(a.base.send_jitter_ms),
            seed: Some(seed),
            out: Some(a.sweep_out.join(cell.dir()).join(format!("seed-{seed}"))),
            plain: true,
            ..a.base.clone()
        })?;
        eprintln!("{} dropout {} jitter {:?} ms seed {seed}", cell.name, cell.dropout, cell.jitter_ms);
        let report = testnet::run(&s)?;
        let sum = report.summaries.into_iter().next().context("one setting")?;
        results.lock().expect("no panics")[i] = Some(sum);
        Ok(())
    };
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let workers: Vec<_> = (0..a.jobs.max(1))
            .map(|_| {
                scope.spawn(|| -> anyhow::Result<()> {
                    loop {
                        let i = {
                            let mut n = next.lock().expect("no panics");
                            let i = *n;
                            *n += 1;
                            i
                        };
                        if i >= runs.len() {
                            return Ok(());
                        }
                        run_one(i)?;
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().expect("worker")?;
        }
        Ok(())
    })?;
    let results = results.into_inner().expect("no panics");

    let mut csv = String::from(
        "algo,vns,dropout,send_jitter_ms,seeds,final_mean,final_std,best_mean,best_std,round_seconds_mean,chunk_bytes_per_rn_per_round,messages_per_rn_per_round,neighbours_per_vn,chunk_linkage_auc_mean,chunk_linkage_auc_std,walk_linkage_auc_mean,walk_linkage_auc_std,mia_auc_mean,mia_auc_std,la_success_mean,la_success_std\n",
    );
    let first = results.iter().flatten().next().context("no run finished")?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut md = format!(
        "{} ({}), {} nodes, r = {}, {} rounds, simulator; mean ± sample std over {} seeds.\n\
         Regenerate: `cargo run --release -p testnet --example baselines{}{}`\n\n\
         | algorithm | k | dropout | send jitter | final {m} | best {m} | round s | chunk bytes / RN / round | messages / RN / round | neighbours / VN | sibling linkage AUC: chunks | walks | MIA AUC (last audit) | LA success (last audit) |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        first.dataset,
        first.model,
        first.nodes,
        first.degree,
        first.rounds,
        a.seeds,
        if args.is_empty() { "" } else { " -- " },
        args.join(" "),
        m = first.metric_name,
    );
    for (c, cell) in cells.iter().enumerate() {
        let sums: Vec<&testnet::report::Summary> = runs
            .iter()
            .zip(&results)
            .filter(|((rc, _), _)| *rc == c)
            .filter_map(|(_, r)| r.as_ref())
            .collect();
        let Some(last) = sums.last() else { continue };
        let (fm, fs) = spread(&sums.iter().map(|s| s.final_metric).collect::<Vec<_>>());
        let (bm, bs) = spread(&sums.iter().map(|s| s.best_metric).collect::<Vec<_>>());
        let (rm, _) = spread(&sums.iter().map(|s| s.mean_round_seconds).collect::<Vec<_>>());
        // Linkage figures exist with --audit and k > 1.
        let link = |feature: &str| {
            let v: Vec<f64> = sums.iter().filter_map(|s| linkage_auc(s, feature)).collect();
            (!v.is_empty()).then(|| spread(&v))
        };
        let (lc, lw) = (link("chunks"), link("walks"));
        // MIA and LA of the last audited round (the trained model), with --audit.
        let last_audit = |f: fn(&models::privacy::AuditSummary) -> f64| {
            let v: Vec<f64> = sums
                .iter()
                .filter_map(|s| s.audit.as_ref()?.last.as_ref().map(|r| f(&r.summary)))
                .filter(|v| v.is_finite())
                .collect();
            (!v.is_empty()).then(|| spread(&v))
        };
        let (mia, la) = (last_audit(|a| a.mia_auc_mean), last_audit(|a| a.la_success));
        let csv_pair = |p: Option<(f64, f64)>| p.map_or(",".into(), |(m, s)| format!("{m:.4},{s:.4}"));
        let md_pair = |p: Option<(f64, f64)>| p.map_or("–".into(), |(m, s)| format!("{m:.3} ± {s:.3}"));
        let jitter = cell.jitter_ms.map_or(String::new(), |j| j.to_string());
        writeln!(
            csv,
            "{},{},{},{jitter},{},{fm:.4},{fs:.4},{bm:.4},{bs:.4},{rm:.3},{:.0},{:.1},{:.2},{},{},{},{}",
            cell.spec,
            cell.vns,
            cell.dropout,
            sums.len(),
            last.chunk_bytes_per_rn_per_round,
            last.messages_per_rn_per_round,
            last.neighbours_per_vn,
            csv_pair(lc),
            csv_pair(lw),
            csv_pair(mia),
            csv_pair(la),
        )?;
        writeln!(
            md,
            "| {} | {} | {} | {} | {fm:.3} ± {fs:.3} | {bm:.3} ± {bs:.3} | {rm:.2} | {:.0} | {:.1} | {:.2} | {} | {} | {} | {} |",
            cell.spec,
            cell.vns,
            cell.dropout,
            cell.jitter_ms.map_or("default".into(), |j| format!("{j} ms")),
            last.chunk_bytes_per_rn_per_round,
            last.messages_per_rn_per_round,
            last.neighbours_per_vn,
            md_pair(lc),
            md_pair(lw),
            md_pair(mia),
            md_pair(la),
        )?;
    }
    std::fs::write(a.sweep_out.join("summary.csv"), &csv)?;
    std::fs::write(a.sweep_out.join("summary.md"), &md)?;
    print!("{md}");
    Ok(())
}
