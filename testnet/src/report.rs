//! The report: `metrics.jsonl` (one line per RN per round), `summary.json` (one object, or an array for a
//! `--vns` sweep) and the tables printed at the end (settings side by side, per-RN results side by side).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use anyhow::Context;
use models::train::MetricKind;
use node::engine::RoundMetrics;
use serde::Serialize;

use crate::RunOutput;
use crate::progress::human_bytes;
use crate::scenario::{Setting, Settings};

/// What one setting (one value of k) achieved. Means "per RN per round" are over every (RN, round) reported.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub algo: String,
    pub mode: String,
    pub dataset: String,
    pub model: String,
    pub nodes: usize,
    /// k: virtual nodes per RN.
    pub vns: usize,
    /// r: overlay degree.
    pub degree: usize,
    pub rounds: u64,
    /// Rounds every RN completed.
    pub rounds_completed: u64,
    /// Model parameters.
    pub d: usize,
    /// "accuracy" (higher is better) or "rmse" (lower is better).
    pub metric_name: MetricKind,
    /// Test metric of the shared initial model, before any training.
    pub initial_metric: f64,
    /// Mean over RNs after the last round every RN completed.
    pub final_metric: f64,
    /// Best per-round mean over RNs, and its round (1-based).
    pub best_metric: f64,
    pub best_round: u64,
    /// `--target`, and the first round (1-based) whose mean over RNs reached it (0: the initial model already
    /// did; `null`: never).
    pub target_metric: Option<f64>,
    pub rounds_to_target: Option<u64>,
    /// All VN↔VN bytes sent (chunks, overlay, Cyclon; frame payloads and length prefixes).
    pub wire_bytes_per_rn_per_round: f64,
    /// Chunk frames only, and the cost model for them: 4·d·r bytes (f32 values, every VN at full degree) per
    /// exchange for the whole model, × the share an algorithm sends (1/K for one chunk of K) × its exchanges
    /// per round (Muffliato's 10).
    pub chunk_bytes_per_rn_per_round: f64,
    pub cost_model_bytes_per_rn_per_round: f64,
    pub messages_per_rn_per_round: f64,
    /// Confirmed overlay neighbours per VN per round (r for a perfect overlay).
    pub neighbours_per_vn: f64,
    /// Round time per RN (virtual seconds in sim mode).
    pub mean_round_seconds: f64,
    pub mean_train_seconds: f64,
    /// Of the mean round, how long its exchange waited for the round's overlay to freeze (0 when every
    /// overlay was negotiated ahead; see `node::RoundMetrics::overlay_wait_secs`).
    pub mean_overlay_wait_seconds: f64,
    pub wall_seconds: f64,
    /// This process's peak RSS (inproc, sim; reset between settings of a sweep where Linux allows), or the
    /// sum of the node processes' peaks (procs). `null` where `/proc` is unavailable.
    pub peak_rss_bytes: Option<u64>,
    pub lr: f64,
    pub batch: usize,
    pub partition: String,
    pub seed: u64,
    pub timing: String,
    pub interrupted: bool,
    /// `--audit` results: MIA AUC and LA success overall, in the last audited round, per round, per victim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit: Option<crate::audit::AuditReport>,
    /// Mode-specific figures, and room for later options (e.g. privacy audits) without changing this type.
    #[serde(flatten)]
    pub extra: BTreeMap<String, serde_json::Value>,
}

/// Mean over RNs of each round's metric, for the rounds every RN reached (up to the lowest last round
/// reported): a round averages the RNs that reported it. An RN that was down (killed, then restarted with
/// `--resume`) or skipped rounds catching up has no line for them and is left out of those rounds' means
/// (a round nobody reported repeats the previous mean); its later rounds count again. Counting reports
/// instead of rounds reached cut such a run's series short: a node killed after round 6 of 25 and back for
/// the last 4 has 11 lines, so the "final" mean was round 10's, over the others only.
pub fn mean_series(metrics: &[Vec<RoundMetrics>], f: impl Fn(&RoundMetrics) -> f64) -> Vec<f64> {
    let reached = metrics
        .iter()
        .map(|m| m.iter().map(|x| x.round.get() + 1).max().unwrap_or(0))
        .min()
        .unwrap_or(0);
    let mut series: Vec<f64> = Vec::with_capacity(reached as usize);
    for t in 0..reached {
        let vals: Vec<f64> = metrics
            .iter()
            .filter_map(|m| m.iter().find(|x| x.round.get() == t))
            .map(&f)
            .collect();
        let mean = if vals.is_empty() {
            series.last().copied().unwrap_or(f64::NAN)
        } else {
            vals.iter().sum::<f64>() / vals.len() as f64
        };
        series.push(mean);
    }
    series
}

impl Summary {
    pub fn new(
        s: &Settings,
        setting: Setting,
        d: usize,
        initial: (MetricKind, f64),
        out: &RunOutput,
    ) -> Summary {
        let all: Vec<&RoundMetrics> = out.metrics.iter().flatten().collect();
        let count = all.len().max(1) as f64;
        let mean = |f: &dyn Fn(&RoundMetrics) -> f64| all.iter().map(|m| f(m)).sum::<f64>() / count;
        let series = mean_series(&out.metrics, |m| m.test_metric);
        let metric_name = all.first().map(|m| m.metric_name).unwrap_or(initial.0);
        let lower = !metric_name.higher_is_better();
        let better = |a: f64, b: f64| metric_name.better(a, b);
        let (mut best, mut best_round) = (f64::NAN, 0);
        for (t, &v) in series.iter().enumerate() {
            if best.is_nan() || better(v, best) {
                (best, best_round) = (v, t as u64 + 1);
            }
        }
        let reached = |v: f64, target: f64| if lower { v <= target } else { v >= target };
        // 0: the initial model already meets the target (e.g. MF with the global-mean offset vs RMSE 1.10).
        let rounds_to_target = s.target.and_then(|target| {
            if reached(initial.1, target) {
                return Some(0);
            }
            series
                .iter()
                .position(|&v| reached(v, target))
                .map(|t| t as u64 + 1)
        });
        let l = &s.learning;
        let mut extra = out.extra.clone();
        if s.mode != crate::cli::Mode::Sim {
            // The timing actually used (a named preset plus any --substep-ms / --lookahead override).
            extra.insert(
                "timing_detail".into(),
                serde_json::to_value(&s.timing).unwrap_or_default(),
            );
        }
        if !out.errors.is_empty() {
            extra.insert("errors".into(), serde_json::json!(out.errors));
        }
        Summary {
            algo: setting.algo().to_string(),
            mode: s.mode.to_string(),
            dataset: l.dataset.to_string(),
            model: l
                .model
                .as_ref()
                .map_or_else(|| "default".into(), |m| m.to_string()),
            nodes: s.nodes,
            vns: setting.vns,
            degree: s.degree,
            rounds: s.rounds,
            rounds_completed: series.len() as u64,
            d,
            metric_name,
            initial_metric: initial.1,
            final_metric: series.last().copied().unwrap_or(f64::NAN),
            best_metric: best,
            best_round,
            target_metric: s.target,
            rounds_to_target,
            wire_bytes_per_rn_per_round: mean(&|m| m.bytes_sent as f64),
            chunk_bytes_per_rn_per_round: mean(&|m| m.chunk_bytes_sent as f64),
            cost_model_bytes_per_rn_per_round: cost_model_bytes(s, setting, d),
            messages_per_rn_per_round: mean(&|m| m.messages_sent as f64),
            // Per exchange: a round of several exchanges sums them.
            neighbours_per_vn: mean(&|m| m.neighbours as f64)
                / (setting.vns as f64 * setting.algo.steps() as f64),
            mean_round_seconds: mean(&|m| m.round_secs),
            mean_train_seconds: mean(&|m| m.train_secs),
            mean_overlay_wait_seconds: mean(&|m| m.overlay_wait_secs),
            wall_seconds: out.wall_secs,
            peak_rss_bytes: out.peak_rss_bytes,
            lr: l.train.lr,
            batch: l.train.batch_size,
            partition: l.partition.to_string(),
            seed: l.seed,
            timing: if s.mode == crate::cli::Mode::Sim {
                "virtual".into()
            } else {
                s.timing_name.into()
            },
            interrupted: out.interrupted,
            audit: out.audit.clone(),
            extra,
        }
    }
}

/// GHP's DP accountant (GFL paper, Theorem 2: ε(i) = √2·μ·B·i(i+1)/σ; `models::schemes::DpParams`) for a
/// `ghp:SIGMA` run with per-sample clipping (`--clip B`), over the `rounds` exchanges it completed; `None` for
/// any other run (no clipping: B is not enforced, so no ε is claimed; `random:SIGMA` is not what the theorem
/// covers).
///
/// The theorem is for one gradient step of size μ per noisy exchange. A round here is several local SGD
/// steps of rate `lr`, each on a batch mean of gradients clipped to norm ≤ B (so each step moves a node's
/// model by at most lr·B), and one noisy exchange. The μ assumed is therefore **lr × H**, H the most local
/// steps any node takes in a round (`local_steps`, or epochs × ⌈largest share / batch⌉): the bound by which
/// one round's training can move the model is μ·B, the role μ·B plays in the theorem's sensitivity
/// 2μBj. That mapping is our reading, not the paper's; it is written out in the JSON with the figures.
pub fn dp_accounting(
    s: &Settings,
    setting: Setting,
    parts: &[Vec<usize>],
    rounds: u64,
) -> Option<serde_json::Value> {
    let node::algo::AlgoSpec::Ghp { sigma } = setting.algo else {
        return None;
    };
    let t = &s.learning.train;
    let bound = t.clip?;
    let steps = parts
        .iter()
        .map(|p| match t.work {
            models::train::LocalWork::Epochs(e) => e * p.len().div_ceil(t.batch_size),
            models::train::LocalWork::Steps(st) => st,
        })
        .max()
        .unwrap_or(0);
    let mu = t.lr * steps as f64;
    let dp = models::schemes::DpParams { mu, clip: bound };
    // σ = 0 gives ε = ∞, written as null (JSON has no infinity).
    let eps = |i: u64| dp.epsilon(sigma, i).ok().filter(|e| e.is_finite());
    Some(serde_json::json!({
        "theorem": "GFL Theorem 2: epsilon(i) = sqrt(2) * mu * B * i * (i + 1) / sigma",
        "sigma": sigma,
        "clip_b": bound,
        "lr": t.lr,
        "local_steps_per_round_max": steps,
        "mu_assumed": mu,
        "mu_is": "lr x the most local SGD steps any node takes per round (our mapping of several clipped \
                  local steps per noisy exchange onto the theorem's one step of size mu; not the paper's)",
        "iterations": rounds,
        "epsilon": eps(rounds),
        "epsilon_per_round": (1..=rounds).map(eps).collect::<Vec<_>>(),
    }))
}

/// Columns of `metrics.csv`: the JSONL's fields, flat (refusals by reason stay in the JSONL).
const CSV_COLUMNS: [&str; 28] = [
    "vns",
    "algo",
    "node",
    "round",
    "metric_name",
    "test_metric",
    "test_loss",
    "train_loss",
    "train_diverged",
    "absent",
    "chunk_bytes_sent",
    "bytes_sent",
    "bytes_received",
    "messages_sent",
    "messages_received",
    "neighbours",
    "copies_received",
    "copies_delivered",
    "refused",
    "train_secs",
    "exchange_secs",
    "aggregate_secs",
    "eval_secs",
    "round_secs",
    "audit_chunks",
    "mia_auc_mean",
    "la_success",
    "la_assignment_success",
];

/// Appends one line per RN per round to `metrics.jsonl`, and the same rows to `metrics.csv` beside it (with
/// a header when the file is new) for tools that read CSV (decentralizepy's notebooks, spreadsheets).
pub fn append_metrics(
    path: &Path,
    setting: Setting,
    metrics: &[Vec<RoundMetrics>],
    audit: Option<&crate::audit::AuditReport>,
) -> anyhow::Result<()> {
    #[derive(Serialize)]
    struct Line<'a> {
        vns: usize,
        algo: String,
        node: usize,
        #[serde(flatten)]
        m: &'a RoundMetrics,
        /// This node's attacks in this round (audited rounds only).
        #[serde(skip_serializing_if = "Option::is_none")]
        audit_chunks: Option<usize>,
        #[serde(skip_serializing_if = "Option::is_none")]
        mia_auc_mean: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        la_success: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        la_assignment_success: Option<f64>,
    }
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    let mut w = std::io::BufWriter::new(f);
    let csv_path = path.with_extension("csv");
    let new_csv = !csv_path.exists();
    let c = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&csv_path)
        .with_context(|| format!("opening {}", csv_path.display()))?;
    let mut csv = std::io::BufWriter::new(c);
    let csv_err = || format!("writing {}", csv_path.display());
    if new_csv {
        writeln!(csv, "{}", CSV_COLUMNS.join(",")).with_context(csv_err)?;
    }
    for (node, ms) in metrics.iter().enumerate() {
        for m in ms {
            let a = audit.and_then(|a| a.attacker_round(node, m.round.get()));
            let line = serde_json::to_value(Line {
                vns: setting.vns,
                algo: setting.algo().to_string(),
                node,
                m,
                audit_chunks: a.map(|a| a.0),
                mia_auc_mean: a.map(|a| a.1),
                la_success: a.map(|a| a.2),
                la_assignment_success: a.map(|a| a.3),
            })?;
            writeln!(w, "{line}").with_context(|| format!("writing {}", path.display()))?;
            let row: Vec<String> = CSV_COLUMNS
                .iter()
                .map(|k| match line.get(k) {
                    // Flags the JSONL leaves out when false.
                    None if matches!(*k, "absent" | "train_diverged") => "false".into(),
                    None | Some(serde_json::Value::Null) => String::new(),
                    Some(serde_json::Value::String(v)) => v.clone(),
                    Some(v) => v.to_string(),
                })
                .collect();
            writeln!(csv, "{}", row.join(",")).with_context(csv_err)?;
        }
    }
    w.flush()
        .with_context(|| format!("writing {}", path.display()))?;
    csv.flush().with_context(csv_err)?;
    Ok(())
}

/// Writes `summary.json`: one object, or an array for a sweep.
pub fn write_summary(path: &Path, summaries: &[Summary]) -> anyhow::Result<()> {
    let text = if summaries.len() == 1 {
        serde_json::to_string_pretty(&summaries[0])?
    } else {
        serde_json::to_string_pretty(summaries)?
    };
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

/// A plain text table with right-aligned columns after the first.
fn table(header: &[String], rows: &[Vec<String>]) -> String {
    let cols = header.len();
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .map(|r| r[c].chars().count())
                .chain([header[c].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let fmt_row = |r: &[String]| -> String {
        let mut s = String::new();
        for (c, cell) in r.iter().enumerate() {
            let pad = widths[c] - cell.chars().count();
            if c == 0 {
                s += &format!("{cell}{}", " ".repeat(pad));
            } else {
                s += &format!("  {}{cell}", " ".repeat(pad));
            }
        }
        s.trim_end().to_string()
    };
    let mut out = fmt_row(header) + "\n";
    out += &widths
        .iter()
        .enumerate()
        .map(|(c, w)| "-".repeat(*w + if c == 0 { 0 } else { 2 }))
        .collect::<String>();
    out += "\n";
    for r in rows {
        out += &fmt_row(r);
        out += "\n";
    }
    out
}

fn opt_round(v: Option<u64>) -> String {
    v.map_or_else(|| "never".into(), |r| r.to_string())
}

/// A table row: its name and how to fill one setting's cell.
type Row = (String, Box<dyn Fn(&Summary) -> String>);

/// The comparison of settings, side by side (one column per setting: EL next to Shatter).
pub fn settings_table(summaries: &[Summary]) -> String {
    let mut header = vec![String::new()];
    header.extend(summaries.iter().map(|s| format!("k={} {}", s.vns, s.algo)));
    let kind = summaries.first().map(|s| s.metric_name);
    let metric = kind.map_or("metric", MetricKind::name);
    let mut rows: Vec<Row> = vec![
        (
            format!("initial {metric}"),
            Box::new(|s| format!("{:.4}", s.initial_metric)),
        ),
        (
            format!("final {metric} (mean over RNs)"),
            Box::new(|s| format!("{:.4}", s.final_metric)),
        ),
        (
            format!("best {metric} (round)"),
            Box::new(|s| format!("{:.4} ({})", s.best_metric, s.best_round)),
        ),
    ];
    if let Some(t) = summaries.first().and_then(|s| s.target_metric) {
        rows.push((
            format!(
                "rounds to {metric} {} {t}",
                if kind.is_some_and(MetricKind::higher_is_better) {
                    "≥"
                } else {
                    "≤"
                }
            ),
            Box::new(|s| opt_round(s.rounds_to_target)),
        ));
    }
    rows.extend::<Vec<Row>>(vec![
        (
            "rounds completed".into(),
            Box::new(|s| format!("{}/{}", s.rounds_completed, s.rounds)),
        ),
        (
            "wire bytes / RN / round".into(),
            Box::new(|s| human_bytes(s.wire_bytes_per_rn_per_round)),
        ),
        (
            "chunk bytes / RN / round".into(),
            Box::new(|s| human_bytes(s.chunk_bytes_per_rn_per_round)),
        ),
        (
            "cost model 4·d·r".into(),
            Box::new(|s| human_bytes(s.cost_model_bytes_per_rn_per_round)),
        ),
        (
            "messages / RN / round".into(),
            Box::new(|s| format!("{:.0}", s.messages_per_rn_per_round)),
        ),
        (
            "neighbours / VN (r)".into(),
            Box::new(|s| format!("{:.2} ({})", s.neighbours_per_vn, s.degree)),
        ),
        (
            "round time (s)".into(),
            Box::new(|s| {
                format!(
                    "{:.2}{}",
                    s.mean_round_seconds,
                    if s.mode == "sim" { " virt." } else { "" }
                )
            }),
        ),
        (
            "training time (s)".into(),
            Box::new(|s| format!("{:.3}", s.mean_train_seconds)),
        ),
        (
            "… waiting for the overlay (s)".into(),
            Box::new(|s| format!("{:.3}", s.mean_overlay_wait_seconds)),
        ),
        (
            "wall time (s)".into(),
            Box::new(|s| format!("{:.1}", s.wall_seconds)),
        ),
        (
            "peak RSS".into(),
            Box::new(|s| {
                s.peak_rss_bytes
                    .map_or_else(|| "n/a".into(), |b| human_bytes(b as f64))
            }),
        ),
    ]);
    if summaries.iter().any(|s| s.audit.is_some()) {
        let last = |s: &Summary| s.audit.as_ref().and_then(|a| a.last.clone());
        rows.extend::<Vec<Row>>(vec![
            (
                "MIA AUC mean / median (last audit)".into(),
                Box::new(move |s| {
                    last(s).map_or_else(
                        || "-".into(),
                        |l| {
                            format!(
                                "{:.3} / {:.3}",
                                l.summary.mia_auc_mean, l.summary.mia_auc_median
                            )
                        },
                    )
                }),
            ),
            (
                "LA success: arg-min / assignment (chance)".into(),
                Box::new(move |s| {
                    last(s).map_or_else(
                        || "-".into(),
                        |l| {
                            format!(
                                "{:.3} / {:.3} ({:.3})",
                                l.summary.la_success,
                                l.summary.la_assignment_success,
                                l.summary.la_chance
                            )
                        },
                    )
                }),
            ),
            (
                "chunks attacked (all rounds)".into(),
                Box::new(|s| {
                    s.audit
                        .as_ref()
                        .map_or_else(|| "-".into(), |a| a.overall.chunks.to_string())
                }),
            ),
        ]);
    }
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|(name, f)| {
            std::iter::once(name.clone())
                .chain(summaries.iter().map(f))
                .collect()
        })
        .collect();
    table(&header, &body)
}

/// Most RNs listed one by one; larger networks get min/median/max rows.
const PER_RN_ROWS: usize = 16;

/// Per-RN results, settings side by side: final metric, bytes per round, round time.
pub fn per_rn_table(summaries: &[Summary], runs: &[&[Vec<RoundMetrics>]]) -> String {
    let mut header = vec!["RN".to_string()];
    for s in summaries {
        let tag = format!("k={}", s.vns);
        header.push(format!("{tag} {}", s.metric_name));
        header.push(format!("{tag} sent/round"));
        header.push(format!("{tag} round s"));
    }
    let per_rn = |ms: &[RoundMetrics]| -> [f64; 3] {
        let n = ms.len().max(1) as f64;
        [
            ms.last().map_or(f64::NAN, |m| m.test_metric),
            ms.iter().map(|m| m.bytes_sent as f64).sum::<f64>() / n,
            ms.iter().map(|m| m.round_secs).sum::<f64>() / n,
        ]
    };
    let cells = |v: [f64; 3]| {
        vec![
            format!("{:.4}", v[0]),
            human_bytes(v[1]),
            format!("{:.2}", v[2]),
        ]
    };
    let nodes = runs.iter().map(|r| r.len()).max().unwrap_or(0);
    let mut rows = Vec::new();
    if nodes <= PER_RN_ROWS {
        for i in 0..nodes {
            let mut row = vec![i.to_string()];
            for r in runs {
                row.extend(cells(r.get(i).map_or([f64::NAN; 3], |m| per_rn(m))));
            }
            rows.push(row);
        }
    } else {
        for (name, q) in [("min", 0.0), ("median", 0.5), ("max", 1.0)] {
            let mut row = vec![name.to_string()];
            for r in runs {
                let vals: Vec<[f64; 3]> = r.iter().map(|m| per_rn(m)).collect();
                let mut v = [0.0; 3];
                for (c, slot) in v.iter_mut().enumerate() {
                    let mut col: Vec<f64> = vals.iter().map(|x| x[c]).collect();
                    col.sort_by(f64::total_cmp);
                    *slot = col
                        .get(((col.len().saturating_sub(1)) as f64 * q).round() as usize)
                        .copied()
                        .unwrap_or(f64::NAN);
                }
                row.extend(cells(v));
            }
            rows.push(row);
        }
    }
    let mut out = table(&header, &rows);
    if nodes > PER_RN_ROWS {
        let _ = writeln!(
            out,
            "({nodes} RNs: per-column min/median/max; every RN's rounds are in metrics.jsonl)"
        );
    }
    out
}

/// Chunk bytes an RN sends per round by the cost model: 4·d·r (f32 values, every VN at full degree) per
/// exchange for the whole model, × the share the algorithm sends × its exchanges per round.
pub fn cost_model_bytes(s: &Settings, setting: Setting, d: usize) -> f64 {
    4.0 * d as f64
        * s.degree as f64
        * setting.algo.payload_fraction(setting.vns)
        * setting.algo.steps() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(round: u64, metric: f64) -> RoundMetrics {
        RoundMetrics {
            round: protocol::Round(round),
            metric_name: MetricKind::Rmse,
            test_metric: metric,
            bytes_sent: 100,
            ..Default::default()
        }
    }

    #[test]
    fn series_and_target_use_complete_rounds() {
        let runs = vec![
            vec![m(0, 2.0), m(1, 1.2), m(2, 1.0)],
            vec![m(0, 2.0), m(1, 1.0)],
        ];
        assert_eq!(mean_series(&runs, |m| m.test_metric), vec![2.0, 1.1]);
    }

    /// A node killed after round 1 and back for rounds 4-5 (issue 15) has fewer lines than rounds: the
    /// series still runs to the last round, each round over the nodes that reported it.
    #[test]
    fn series_run_to_the_last_round_over_nodes_that_were_down() {
        let runs = vec![
            (0..6).map(|t| m(t, 1.0)).collect::<Vec<_>>(),
            vec![m(0, 3.0), m(1, 3.0), m(4, 2.0), m(5, 2.0)],
        ];
        assert_eq!(
            mean_series(&runs, |m| m.test_metric),
            vec![2.0, 2.0, 1.0, 1.0, 1.5, 1.5]
        );
        // Rounds nobody reported repeat the previous mean.
        let gap = vec![vec![m(0, 1.0), m(3, 2.0)], vec![m(0, 3.0), m(3, 2.0)]];
        assert_eq!(mean_series(&gap, |m| m.test_metric), vec![2.0, 2.0, 2.0, 2.0]);
    }

    #[test]
    fn tables_align() {
        let t = table(
            &["a".into(), "bb".into()],
            &[vec!["xyz".into(), "1".into()]],
        );
        assert_eq!(t, "a    bb\n-------\nxyz   1\n");
    }
}
