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
//! and `<sweep-out>/summary.md` hold the comparison. `--append` adds the cells run to those already in
//! `<sweep-out>/summary.json` (a cell run again replaces its row). `--plot-k a/summary.json,b/summary.json`
//! runs nothing: it draws Fig. 7 (MIA AUC, LA success and the final metric against k, EL as k = 1, error bars
//! the seed spread) from EL and Shatter cells of those summaries into `<sweep-out>/fig7*.svg`.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Mutex;

use anyhow::Context;
use clap::Parser;
use node::algo::AlgoSpec;
use serde::{Deserialize, Serialize};
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
    /// Add the cells to those of `<sweep-out>/summary.json` instead of replacing the table.
    #[arg(long)]
    append: bool,
    /// Run nothing: draw Fig. 7 from these summary.json files into `<sweep-out>/fig7.svg` and
    /// `<sweep-out>/fig7_accuracy.svg`.
    #[arg(long, value_delimiter = ',')]
    plot_k: Vec<PathBuf>,
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

/// One row of the comparison: mean and sample std over the cell's seeds.
#[derive(Serialize, Deserialize)]
struct CellStats {
    name: String,
    algo: String,
    vns: usize,
    dropout: f64,
    send_jitter_ms: Option<u64>,
    seeds: usize,
    final_metric: (f64, f64),
    best_metric: (f64, f64),
    round_seconds_mean: f64,
    chunk_bytes_per_rn_per_round: f64,
    messages_per_rn_per_round: f64,
    neighbours_per_vn: f64,
    chunk_linkage_auc: Option<(f64, f64)>,
    walk_linkage_auc: Option<(f64, f64)>,
    /// Walks at any hop: the only walk signal when walks hide their origin (`--hide-walk-origin`). Absent
    /// from summaries written before it existed.
    #[serde(default)]
    walk_any_hop_linkage_auc: Option<(f64, f64)>,
    /// The audit's last audited round (the trained model, as the paper's figures): per-seed mean and median
    /// chunk AUC, arg-min and assignment LA success, then mean ± std over seeds.
    mia_auc_mean: Option<(f64, f64)>,
    mia_auc_median: Option<(f64, f64)>,
    la_argmin: Option<(f64, f64)>,
    la_assignment: Option<(f64, f64)>,
    la_chance: Option<f64>,
    /// Chunks attacked in the last audited round, summed over the seeds.
    chunks_attacked: Option<usize>,
    /// Gradient inversion in the last audited round (MLP runs): PSNR (dB), SSIM, input coverage.
    gia_psnr: Option<(f64, f64)>,
    gia_ssim: Option<(f64, f64)>,
    gia_coverage: Option<(f64, f64)>,
    /// Rated-items inference in the last audited round (matrix factorisation): ROC-AUC against the victim's
    /// round start and against the attacker's own, and the share of rated items found.
    #[serde(default)]
    items_auc_victim_start: Option<(f64, f64)>,
    #[serde(default)]
    items_auc_own_start: Option<(f64, f64)>,
    #[serde(default)]
    items_found: Option<(f64, f64)>,
}

impl CellStats {
    fn of(cell: &Cell, sums: &[&testnet::report::Summary]) -> Option<Self> {
        let last = sums.last()?;
        let over = |f: &dyn Fn(&testnet::report::Summary) -> Option<f64>| {
            let v: Vec<f64> = sums
                .iter()
                .filter_map(|s| f(s))
                .filter(|x| x.is_finite())
                .collect();
            (!v.is_empty()).then(|| spread(&v))
        };
        let audit = |f: fn(&models::privacy::AuditSummary) -> f64| {
            over(&|s| s.audit.as_ref()?.last.as_ref().map(|l| f(&l.summary)))
        };
        let gia = |f: &dyn Fn(&testnet::audit::GiaSummary) -> Option<f64>| {
            over(&|s| f(s.audit.as_ref()?.last.as_ref()?.gia.as_ref()?))
        };
        let items = |f: fn(&testnet::audit::ItemsSummary) -> f64| {
            over(&|s| Some(f(s.audit.as_ref()?.last.as_ref()?.items.as_ref()?)))
        };
        let audited: Vec<&models::privacy::AuditSummary> = sums
            .iter()
            .filter_map(|s| s.audit.as_ref()?.last.as_ref().map(|l| &l.summary))
            .collect();
        Some(Self {
            name: cell.name.clone(),
            algo: cell.spec.to_string(),
            vns: cell.vns,
            dropout: cell.dropout,
            send_jitter_ms: cell.jitter_ms,
            seeds: sums.len(),
            final_metric: spread(&sums.iter().map(|s| s.final_metric).collect::<Vec<_>>()),
            best_metric: spread(&sums.iter().map(|s| s.best_metric).collect::<Vec<_>>()),
            round_seconds_mean: spread(
                &sums
                    .iter()
                    .map(|s| s.mean_round_seconds)
                    .collect::<Vec<_>>(),
            )
            .0,
            chunk_bytes_per_rn_per_round: last.chunk_bytes_per_rn_per_round,
            messages_per_rn_per_round: last.messages_per_rn_per_round,
            neighbours_per_vn: last.neighbours_per_vn,
            chunk_linkage_auc: over(&|s| linkage_auc(s, "chunks")),
            walk_linkage_auc: over(&|s| linkage_auc(s, "walks")),
            walk_any_hop_linkage_auc: over(&|s| linkage_auc(s, "walks_any_hop")),
            mia_auc_mean: audit(|a| a.mia_auc_mean),
            mia_auc_median: audit(|a| a.mia_auc_median),
            la_argmin: audit(|a| a.la_success),
            la_assignment: audit(|a| a.la_assignment_success),
            la_chance: audited.first().map(|a| a.la_chance),
            chunks_attacked: (!audited.is_empty()).then(|| audited.iter().map(|a| a.chunks).sum()),
            gia_psnr: gia(&|g| Some(g.psnr_mean)),
            gia_ssim: gia(&|g| g.ssim_mean),
            gia_coverage: gia(&|g| Some(g.coverage_mean)),
            items_auc_victim_start: items(|i| i.auc_victim_start_mean),
            items_auc_own_start: items(|i| i.auc_own_start_mean),
            items_found: items(|i| i.found_mean),
        })
    }
}

/// Fig. 7 from the EL (k = 1) and Shatter cells of `files` (`summary.json` of earlier sweeps, dropout 0 and
/// default jitter only; a k found twice keeps the cell with more seeds).
fn plot_k(a: &Args) -> anyhow::Result<()> {
    use testnet::plots::{ErrSeries, errorbar_plot};
    let mut by_k: std::collections::BTreeMap<usize, CellStats> = std::collections::BTreeMap::new();
    let mut metric = String::from("metric");
    for f in &a.plot_k {
        let json: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?,
        )?;
        if let Some(m) = json["metric"].as_str() {
            metric = m.to_string();
        }
        let cells: Vec<CellStats> = serde_json::from_value(json["cells"].clone())?;
        for c in cells {
            let k = match c.algo.as_str() {
                "el" => 1,
                "shatter" => c.vns,
                _ => continue,
            };
            if c.dropout != 0.0 || c.send_jitter_ms.is_some() {
                continue;
            }
            if by_k.get(&k).is_none_or(|old| old.seeds < c.seeds) {
                by_k.insert(k, c);
            }
        }
    }
    anyhow::ensure!(!by_k.is_empty(), "no EL or Shatter cell in {:?}", a.plot_k);
    let series = |label: &str, f: &dyn Fn(&CellStats) -> Option<(f64, f64)>| ErrSeries {
        label: label.into(),
        points: by_k
            .iter()
            .filter_map(|(&k, c)| f(c).map(|(m, e)| (k as f64, m, e)))
            .collect(),
    };
    let seeds: Vec<String> = by_k
        .iter()
        .map(|(k, c)| format!("k={k}: {}", c.seeds))
        .collect();
    let chance = by_k.values().find_map(|c| c.la_chance).unwrap_or(f64::NAN);
    std::fs::create_dir_all(&a.sweep_out)?;
    errorbar_plot(
        &a.sweep_out.join("fig7.svg"),
        "Fig. 7: privacy against k (mean ± sample std over seeds; k = 1 is EL)",
        "virtual nodes per real node k (log scale)",
        "MIA AUC / LA success rate",
        true,
        &[
            series("MIA AUC (mean)", &|c| c.mia_auc_mean),
            series("LA success, arg-min", &|c| c.la_argmin),
            series("LA success, assignment", &|c| c.la_assignment),
        ],
        &[("AUC 0.5", 0.5), ("LA chance", chance)],
    )?;
    errorbar_plot(
        &a.sweep_out.join("fig7_accuracy.svg"),
        &format!("Fig. 7: final test {metric} against k (mean ± sample std over seeds)"),
        "virtual nodes per real node k (log scale)",
        &format!("final test {metric}"),
        true,
        &[series(&format!("final {metric}"), &|c| {
            Some(c.final_metric)
        })],
        &[],
    )?;
    println!(
        "wrote {} and fig7_accuracy.svg (seeds per k: {})",
        a.sweep_out.join("fig7.svg").display(),
        seeds.join(", ")
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    if !a.plot_k.is_empty() {
        return plot_k(&a);
    }
    let default_k = a
        .base
        .vns
        .as_ref()
        .and_then(|v| v.first().copied())
        .unwrap_or(4);
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
    // The sweep's own wall time, reported beside the table (an example, not a node: the clock is fine here).
    #[allow(clippy::disallowed_methods)]
    let started = std::time::Instant::now();
    // Every (cell, seed) run, handed out to `jobs` threads; results land by index. Seed by seed, so a sweep
    // cut short still has every cell at the first seeds.
    let runs: Vec<(usize, u64)> = (1..=a.seeds)
        .flat_map(|s| (0..cells.len()).map(move |c| (c, s)))
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
        eprintln!(
            "{} dropout {} jitter {:?} ms seed {seed}",
            cell.name, cell.dropout, cell.jitter_ms
        );
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

    let first = results.iter().flatten().next().context("no run finished")?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let command = format!(
        "cargo run --release -p testnet --example baselines{}{}",
        if args.is_empty() { "" } else { " -- " },
        args.join(" ")
    );
    let mut stats: Vec<CellStats> = cells
        .iter()
        .enumerate()
        .filter_map(|(c, cell)| {
            let sums: Vec<&testnet::report::Summary> = runs
                .iter()
                .zip(&results)
                .filter(|((rc, _), _)| *rc == c)
                .filter_map(|(_, r)| r.as_ref())
                .collect();
            CellStats::of(cell, &sums)
        })
        .collect();
    // `--append`: the cells already in the table first (a cell run again replaces its old row in place).
    let mut commands = vec![command.clone()];
    let summary_json = a.sweep_out.join("summary.json");
    if a.append && summary_json.is_file() {
        let old: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&summary_json)?)?;
        let mut before: Vec<CellStats> = serde_json::from_value(old["cells"].clone())?;
        let same = |x: &CellStats, y: &CellStats| {
            (x.name.as_str(), x.dropout, x.send_jitter_ms)
                == (y.name.as_str(), y.dropout, y.send_jitter_ms)
        };
        for st in stats.drain(..) {
            match before.iter_mut().find(|b| same(b, &st)) {
                Some(b) => *b = st,
                None => before.push(st),
            }
        }
        stats = before;
        let old_commands: Vec<String> = match old.get("commands") {
            Some(c) => serde_json::from_value(c.clone())?,
            None => old["command"]
                .as_str()
                .map(String::from)
                .into_iter()
                .collect(),
        };
        commands = old_commands.into_iter().chain(commands).collect();
    }
    let regenerate = commands
        .iter()
        .map(|c| format!("`{c}`"))
        .collect::<Vec<_>>()
        .join(", then ");
    let mut csv = String::from(
        "algo,vns,dropout,send_jitter_ms,seeds,final_mean,final_std,best_mean,best_std,round_seconds_mean,chunk_bytes_per_rn_per_round,messages_per_rn_per_round,neighbours_per_vn,chunk_linkage_auc_mean,chunk_linkage_auc_std,walk_linkage_auc_mean,walk_linkage_auc_std,mia_auc_mean,mia_auc_mean_std,mia_auc_median,mia_auc_median_std,la_argmin,la_argmin_std,la_assignment,la_assignment_std,la_chance,chunks_attacked,gia_psnr,gia_psnr_std,gia_ssim,gia_ssim_std,gia_coverage,gia_coverage_std,items_auc_victim_start,items_auc_victim_start_std,items_auc_own_start,items_auc_own_start_std,items_found,items_found_std,walk_any_hop_linkage_auc_mean,walk_any_hop_linkage_auc_std\n",
    );
    let audited = stats.iter().any(|s| s.mia_auc_mean.is_some());
    let inverted = stats.iter().any(|s| s.gia_psnr.is_some());
    let items = stats.iter().any(|s| s.items_auc_victim_start.is_some());
    let mut md = format!(
        "{} ({}), {} nodes, r = {}, {} rounds, simulator; mean ± sample std over {} seeds.\n\
         Regenerate: {regenerate}\n\n\
         | algorithm | k | dropout | send jitter | final {m} | best {m} | round s | chunk bytes / RN / round | messages / RN / round | neighbours / VN | sibling linkage AUC: chunks | walks | walks (any hop) |{}{}\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|{}{}\n",
        first.dataset,
        first.model,
        first.nodes,
        first.degree,
        first.rounds,
        a.seeds,
        match (audited, inverted) {
            (true, true) =>
                " MIA AUC mean | MIA AUC median | LA arg-min | LA assignment (chance) | GIA PSNR dB | GIA SSIM | GIA coverage |",
            (true, false) =>
                " MIA AUC mean | MIA AUC median | LA arg-min | LA assignment (chance) |",
            _ => "",
        },
        if items {
            " rated items AUC (victim's start) | rated items AUC (own start) | rated items found |"
        } else {
            ""
        },
        match (audited, inverted) {
            (true, true) => "---|---|---|---|---|---|---|",
            (true, false) => "---|---|---|---|",
            _ => "",
        },
        if items { "---|---|---|" } else { "" },
        m = first.metric_name,
    );
    let csv_pair = |p: Option<(f64, f64)>| p.map_or(",".into(), |(m, s)| format!("{m:.4},{s:.4}"));
    let md_pair =
        |p: Option<(f64, f64)>| p.map_or("–".into(), |(m, s)| format!("{m:.3} ± {s:.3}"));
    for st in &stats {
        let jitter = st.send_jitter_ms.map_or(String::new(), |j| j.to_string());
        writeln!(
            csv,
            "{},{},{},{jitter},{},{},{},{:.3},{:.0},{:.1},{:.2},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            st.algo,
            st.vns,
            st.dropout,
            st.seeds,
            csv_pair(Some(st.final_metric)),
            csv_pair(Some(st.best_metric)),
            st.round_seconds_mean,
            st.chunk_bytes_per_rn_per_round,
            st.messages_per_rn_per_round,
            st.neighbours_per_vn,
            csv_pair(st.chunk_linkage_auc),
            csv_pair(st.walk_linkage_auc),
            csv_pair(st.mia_auc_mean),
            csv_pair(st.mia_auc_median),
            csv_pair(st.la_argmin),
            csv_pair(st.la_assignment),
            st.la_chance.map_or(String::new(), |c| format!("{c:.4}")),
            st.chunks_attacked.map_or(String::new(), |c| c.to_string()),
            csv_pair(st.gia_psnr),
            csv_pair(st.gia_ssim),
            csv_pair(st.gia_coverage),
            csv_pair(st.items_auc_victim_start),
            csv_pair(st.items_auc_own_start),
            csv_pair(st.items_found),
            csv_pair(st.walk_any_hop_linkage_auc),
        )?;
        write!(
            md,
            "| {} | {} | {} | {} | {} | {} | {:.2} | {:.0} | {:.1} | {:.2} | {} | {} | {} |",
            st.algo,
            st.vns,
            st.dropout,
            st.send_jitter_ms
                .map_or("default".into(), |j| format!("{j} ms")),
            md_pair(Some(st.final_metric)),
            md_pair(Some(st.best_metric)),
            st.round_seconds_mean,
            st.chunk_bytes_per_rn_per_round,
            st.messages_per_rn_per_round,
            st.neighbours_per_vn,
            md_pair(st.chunk_linkage_auc),
            md_pair(st.walk_linkage_auc),
            md_pair(st.walk_any_hop_linkage_auc),
        )?;
        if audited {
            write!(
                md,
                " {} | {} | {} | {} ({}) |",
                md_pair(st.mia_auc_mean),
                md_pair(st.mia_auc_median),
                md_pair(st.la_argmin),
                md_pair(st.la_assignment),
                st.la_chance.map_or("–".into(), |c| format!("{c:.3}")),
            )?;
        }
        if inverted {
            write!(
                md,
                " {} | {} | {} |",
                md_pair(st.gia_psnr),
                md_pair(st.gia_ssim),
                md_pair(st.gia_coverage)
            )?;
        }
        if items {
            write!(
                md,
                " {} | {} | {} |",
                md_pair(st.items_auc_victim_start),
                md_pair(st.items_auc_own_start),
                md_pair(st.items_found)
            )?;
        }
        md.push('\n');
    }
    let wall = started.elapsed().as_secs_f64();
    writeln!(
        md,
        "\nWall time of the {}sweep: {wall:.0} s ({} runs, {} at once).",
        if commands.len() > 1 { "last " } else { "" },
        runs.len(),
        a.jobs.max(1)
    )?;
    let json = serde_json::json!({
        "command": command,
        "commands": commands,
        "dataset": first.dataset,
        "model": first.model,
        "nodes": first.nodes,
        "degree": first.degree,
        "rounds": first.rounds,
        "seeds": a.seeds,
        "metric": first.metric_name,
        "wall_seconds": wall,
        "cells": stats,
    });
    std::fs::write(
        a.sweep_out.join("summary.json"),
        serde_json::to_string_pretty(&json)?,
    )?;
    std::fs::write(a.sweep_out.join("summary.csv"), &csv)?;
    std::fs::write(a.sweep_out.join("summary.md"), &md)?;
    print!("{md}");
    Ok(())
}
