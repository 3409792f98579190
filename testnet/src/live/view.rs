//! `testnet view DIR [--ui ADDR]`: a finished run's directory (`summary.json`, `metrics.jsonl`) served as
//! the live view would have shown it. Overlays are not in the files: the page says so.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Parser;
use node::engine::RoundMetrics;
use serde_json::Value;

use super::event::{AuditRound, LiveEvent};

/// `testnet view DIR`: serve a finished run's report as a live page.
#[derive(Parser, Debug)]
#[command(name = "testnet view")]
pub struct ViewOptions {
    /// A testnet output directory (with summary.json and metrics.jsonl).
    pub dir: PathBuf,
    /// Where to serve the page.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8765")]
    pub ui: SocketAddr,
}

/// The directory's run as the events a live run would have sent.
pub fn events_of_dir(dir: &Path) -> anyhow::Result<Vec<LiveEvent>> {
    let read = |name: &str| {
        let p = dir.join(name);
        std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))
    };
    let summaries: Vec<Value> = serde_json::from_str(&read("summary.json")?)
        .with_context(|| format!("{}: not a testnet summary", dir.display()))?;
    let first = summaries
        .first()
        .with_context(|| format!("{}/summary.json lists no setting", dir.display()))?;
    let lines: Vec<Value> = read("metrics.jsonl")?
        .lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).with_context(|| format!("metrics.jsonl line {}", i + 1))
        })
        .collect::<anyhow::Result<_>>()?;
    let num = |v: &Value, key: &str| v[key].as_f64().unwrap_or(0.0);
    let text = |v: &Value, key: &str| v[key].as_str().unwrap_or_default().to_string();
    let ks: Vec<usize> = summaries.iter().map(|s| num(s, "vns") as usize).collect();
    let mut events = vec![LiveEvent::Run {
        description: format!(
            "{} (finished run, from {})",
            text(first, "algo"),
            dir.display()
        ),
        mode: text(first, "mode"),
        nodes: num(first, "nodes") as usize,
        rounds: num(first, "rounds") as u64,
        degree: num(first, "degree") as usize,
        ks,
        d: num(first, "d") as usize,
        audit: summaries.iter().any(|s| s.get("audit").is_some()),
        overlay_known: false,
    }];
    for s in &summaries {
        let k = num(s, "vns") as usize;
        events.push(LiveEvent::Setting {
            k,
            label: format!("{} k={k}", text(s, "algo")),
            cost_model_bytes: num(s, "cost_model_bytes_per_rn_per_round"),
        });
        for l in lines.iter().filter(|l| num(l, "vns") as usize == k) {
            let m: RoundMetrics = serde_json::from_value(l.clone())
                .context("a metrics.jsonl line that is not a node's round")?;
            events.push(LiveEvent::Round {
                k,
                node: num(l, "node") as usize,
                m,
            });
        }
        if let Some(audit) = s.get("audit") {
            let rounds = audit["rounds"]
                .as_array()
                .map(|rs| {
                    rs.iter()
                        .map(|r| AuditRound {
                            round: num(r, "round") as u64,
                            mia_auc: num(r, "mia_auc_mean"),
                            la_success: num(r, "la_success"),
                            la_chance: num(r, "la_chance"),
                        })
                        .collect()
                })
                .unwrap_or_default();
            events.push(LiveEvent::Audit {
                k,
                rounds,
                linkage_auc: s["linkage"]["chunks"]["auc_pooled"].as_f64(),
            });
        }
        events.push(LiveEvent::SettingDone {
            k,
            wall_secs: num(s, "wall_seconds"),
        });
    }
    events.push(LiveEvent::Finished {
        out: dir.display().to_string(),
    });
    Ok(events)
}

/// Serves `opts.dir` until Ctrl-C.
pub fn serve(opts: &ViewOptions) -> anyhow::Result<()> {
    let feed = super::LiveFeed::default();
    for e in events_of_dir(&opts.dir)? {
        feed.publish(&e);
    }
    let server = super::LiveServer::start(opts.ui, feed, Default::default())?;
    eprintln!(
        "serving {} at {} (Ctrl-C to exit)",
        opts.dir.display(),
        server.url()
    );
    super::wait_for_ctrl_c();
    Ok(())
}
