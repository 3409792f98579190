//! `cargo run -p testnet`: local Shatter networks for first runs and paper reproductions. Runs n real nodes ×
//! k virtual nodes in one process over real libp2p on 127.0.0.1 (`inproc`), as one `node` process per real
//! node from generated keys, peer list and configs (`procs`, the deployment path), or over the in-memory
//! simulator (`sim`, 1,000+ VNs); shows live progress; writes `metrics.jsonl` (and `metrics.csv`), `summary.json` and SVG plots
//! into an output directory; prints tables comparing settings (a `--vns 1,4,8` sweep puts EL, k = 1, next to
//! Shatter). The dataset is loaded once per invocation and every setting's learners are built from it.
//!
//! # Layout
//! - `main.rs`: the thin binary: parse options, run, print the tables and where the report is.
//! - `cli.rs`: [`cli::Options`], the command-line flags and the `--scenario FILE.toml` keys (one flat struct,
//!   its help grouped by what each option acts on: network, learning, timing, adversaries and audit,
//!   processes); typed values parsed once; options a mode would ignore refused there.
//! - `scenario.rs`: defaults and checks, from options to [`scenario::Settings`], one function per group; data
//!   loading with hints.
//! - `run/mod.rs`: one setting in the chosen mode ([`run::setting`]); one file per mode:
//!   - `run/inproc.rs`: `--mode inproc`, one `NodeBuilder` per RN in one tokio runtime.
//!   - `run/procs.rs`: `--mode procs`, generated deployment files and `node run` child processes.
//!   - `run/sim.rs`: `--mode sim`, `node::sim::run` on a virtual clock.
//! - `churn.rs`: [`churn::ChurnPlan`], `--kill`, `--restart-after` and `--pause` for procs mode (issue 15),
//!   with the parsed `--kill` and `--pause` values ([`churn::Kill`], [`churn::Pause`]).
//! - `progress.rs`: `indicatif` bar on a terminal, one line per round otherwise.
//! - `audit.rs`: `--audit`, the privacy audit run inside training (ground truth from the harness only).
//! - `pdmm_view.rs`: what a PDMM neighbour recovers of the sender's model from its Δz frames (for `--audit`).
//! - `linkage.rs`: [`linkage::LinkageRecorder`], the network observer's sibling-linkage attack by timing
//!   (with `--audit` in sim mode; `summary.json` → `linkage`).
//! - `packets.rs`, `coincidence.rs`: the packet attack (`--capture`): message timing on packet times, and
//!   the all-packet features (same-millisecond coincidence, cross-correlation at lags 0-50 ms).
//! - `report.rs`: [`report::Summary`], `metrics.jsonl`, `summary.json`, the printed tables.
//! - `plots.rs`: `metric.svg`, `bytes.svg`, `round_time.svg` (plotters, SVG only).
//! - `rss.rs`: peak resident memory from `/proc`.
//! - `live/`: `--ui ADDR` and `testnet view DIR`, the live view in a browser (server-sent events, an
//!   embedded page) and the in-process nodes' Prometheus metrics.
//! - `tests/smoke.rs`: tiny inproc and sim runs through the library, checking every output file.
//! - `tests/golden.rs` (+ `tests/golden/`): sim `metrics.jsonl` pinned byte for byte (wall-clock fields zeroed).
//! - `tests/cli.rs`: the binary's command line: grouped `--help`, refused values and mode-bound options.
//! - `tests/layout.rs`: no import circle between files of any crate; the sans-IO cores stay sans-IO.
//! - `tests/doc_links.rs`: every relative link in README.md, `docs/` and `results/` resolves.
//! - `benches/rounds.rs`: `cargo bench -p testnet --bench rounds`, round speed in the reference's MovieLens
//!   setting for k = 1, 2, 4 and the transport and aggregation limits beside it (docs/protocol.md, "Round
//!   speed").

pub mod audit;
pub mod churn;
pub mod cli;
pub mod coincidence;
pub mod cpu;
pub mod linkage;
pub mod live;
pub mod packets;
pub mod pdmm_view;
pub mod plots;
pub mod progress;
pub mod report;
pub mod rss;
pub mod run;
pub mod scenario;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use node::engine::RoundMetrics;

use cli::Mode;
use progress::Progress;
use report::Summary;
use scenario::Settings;

/// What one mode's run of one setting returns.
#[derive(Debug, Default)]
pub struct RunOutput {
    /// `metrics[rn]`: RN `rn`'s rounds, in order.
    pub metrics: Vec<Vec<RoundMetrics>>,
    pub wall_secs: f64,
    pub peak_rss_bytes: Option<u64>,
    /// Mode-specific figures for the summary.
    pub extra: BTreeMap<String, serde_json::Value>,
    /// Nodes that stopped on an error.
    pub errors: Vec<String>,
    /// Stopped by Ctrl-C: the report covers the rounds completed.
    pub interrupted: bool,
    /// `--audit` results.
    pub audit: Option<audit::AuditReport>,
}

/// A finished invocation.
#[derive(Debug)]
pub struct Report {
    pub out: PathBuf,
    pub summaries: Vec<Summary>,
    pub plots: Vec<PathBuf>,
    /// The settings side by side, then per-RN results.
    pub tables: String,
    /// Some node stopped on an error (the report still covers what ran).
    pub failed: bool,
    /// `--ui`: the live view, still serving.
    pub live: Option<live::LiveServer>,
}

/// One line describing the run, printed before it starts.
pub fn describe(s: &Settings) -> String {
    let ks: Vec<String> = s.settings.iter().map(|x| x.vns.to_string()).collect();
    let l = &s.learning;
    format!(
        "Shatter testnet: mode {}, {} nodes × k = {} VNs, r = {}, {} rounds; {} data ({} partition), model {}, lr {}, batch {}, {} per round, seed {}; timing {}",
        s.mode,
        s.nodes,
        ks.join(","),
        s.degree,
        s.rounds,
        l.dataset,
        l.partition,
        l.model
            .as_ref()
            .map_or_else(|| "default".into(), |m| m.to_string()),
        l.train.lr,
        l.train.batch_size,
        match l.train.work {
            models::train::LocalWork::Epochs(e) =>
                format!("{e} local epoch{}", if e == 1 { "" } else { "s" }),
            models::train::LocalWork::Steps(st) => format!("{st} local steps"),
        },
        l.seed,
        if s.mode == Mode::Sim {
            "virtual"
        } else {
            s.timing_name
        },
    )
}

/// Runs every setting and writes the report into `s.out`.
pub fn run(s: &Settings) -> anyhow::Result<Report> {
    std::fs::create_dir_all(&s.out)
        .with_context(|| format!("creating the output directory {}", s.out.display()))?;
    let metrics_path = s.out.join("metrics.jsonl");
    let csv_path = s.out.join("metrics.csv");
    let summary_path = s.out.join("summary.json");
    // A re-run into the same --out replaces the report rather than mixing two runs in one file.
    for p in [&metrics_path, &csv_path, &summary_path] {
        if p.exists() {
            std::fs::remove_file(p).with_context(|| format!("replacing {}", p.display()))?;
        }
    }

    let bar = progress::use_bar(s.plain);
    eprintln!("loading {} data…", s.learning.dataset.name());
    let (split, parts) = s.load_data()?;
    // The shared initial model (same seed on every node): its size and its test metric before training.
    // On node 0's device when `--device` names one, so that the probe opens no device the run does not use.
    let probe = if s.devices.is_empty() {
        s.learning.learners(&split, &parts, [0])?
    } else {
        s.learning
            .learners_on(&split, &parts, [0], |i| s.device_of(i).unwrap_or_default())?
    }
    .remove(0);
    let d = probe.model.flat_params()?.len();
    let init = models::train::evaluate(&probe.model, &probe.test)?;
    let initial = (init.metric_kind(), init.metric());
    drop(probe);
    eprintln!(
        "d = {d} parameters; initial test {} {:.4}",
        initial.0, initial.1
    );

    // `--ui`: the page's feed, the in-process nodes' metrics registry, and the server (bound before the run).
    let feed = live::LiveFeed::default();
    let registry = node::telemetry::SharedRegistry::default();
    let server =
        s.ui.map(|addr| live::LiveServer::start(addr, feed.clone(), registry.clone()))
            .transpose()?;
    if let Some(srv) = &server {
        eprintln!("live view: {}", srv.url());
        feed.publish(&live::LiveEvent::Run {
            description: describe(s),
            mode: s.mode.to_string(),
            nodes: s.nodes,
            rounds: s.rounds,
            degree: s.degree,
            ks: s.settings.iter().map(|x| x.vns).collect(),
            d,
            audit: s.audit.is_some(),
            overlay_known: s.mode != Mode::Procs,
        });
    }

    let audit_data = s
        .audit
        .is_some()
        .then(|| Arc::new(audit::AuditData::new(&split, &parts)));

    let mut summaries = Vec::new();
    let mut runs: Vec<Vec<Vec<RoundMetrics>>> = Vec::new();
    let mut failed = false;
    for (i, &setting) in s.settings.iter().enumerate() {
        let reset = rss::reset_peak();
        let live = server.as_ref().map(|_| {
            feed.publish(&live::LiveEvent::Setting {
                k: setting.vns,
                label: setting.label(),
                cost_model_bytes: report::cost_model_bytes(s, setting, d),
            });
            live::LiveSetting {
                feed: feed.clone(),
                k: setting.vns,
                exchanges_per_round: setting.algo.steps() as u64,
                overlay: None,
                registry: registry.clone(),
            }
        });
        let mut progress = Progress::new(setting.label(), s.nodes, s.rounds, bar).with_live(live);
        let out = run::setting(
            s,
            setting,
            &split,
            &parts,
            audit_data.as_ref(),
            &mut progress,
        )?;
        progress.finish();
        report::append_metrics(&metrics_path, setting, &out.metrics, out.audit.as_ref())?;
        let mut summary = Summary::new(s, setting, d, initial, &out);
        if let Some(dp) = report::dp_accounting(s, setting, &parts, summary.rounds_completed) {
            summary.extra.insert("dp_accountant".into(), dp);
        }
        if !reset && i > 0 && s.mode != Mode::Procs {
            summary.extra.insert(
                "peak_rss_includes_earlier_settings".into(),
                serde_json::json!(true),
            );
        }
        failed |= !out.errors.is_empty();
        if server.is_some() {
            live::publish_setting_end(&feed, setting.vns, &out);
        }
        summaries.push(summary);
        runs.push(out.metrics);
        // Written after every setting, so a long sweep stopped midway keeps what it finished.
        report::write_summary(&summary_path, &summaries)?;
        if out.interrupted {
            break;
        }
    }
    let refs: Vec<&[Vec<RoundMetrics>]> = runs.iter().map(|r| r.as_slice()).collect();
    let plots = plots::write_all(&s.out, &summaries, &refs)?;
    let tables = format!(
        "{}\n{}",
        report::settings_table(&summaries),
        report::per_rn_table(&summaries, &refs)
    );
    if server.is_some() {
        feed.publish(&live::LiveEvent::Finished {
            out: s.out.display().to_string(),
        });
    }
    Ok(Report {
        out: s.out.clone(),
        summaries,
        plots,
        tables,
        failed,
        live: server,
    })
}
