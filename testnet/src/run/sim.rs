//! `--mode sim`: the node's round engine and overlay over the in-memory simulator (`node::sim`), on a virtual
//! clock. Training and evaluation are real; network and protocol time are virtual, so round times in the
//! report are virtual seconds and the wall time is reported beside them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use models::chunking::ChunkPartition;
use node::learner::Learner;
use node::sim::SimConfig;
use serde_json::json;

use crate::RunOutput;
use crate::audit::AuditPlan;
use crate::progress::Progress;
use crate::scenario::{Setting, Settings};

pub fn run(
    s: &Settings,
    setting: Setting,
    learners: Vec<Learner>,
    partition: Arc<ChunkPartition>,
    audit: Option<AuditPlan>,
    progress: &mut Progress,
) -> anyhow::Result<RunOutput> {
    let defaults = SimConfig::new(setting.vns, s.degree, s.rounds, s.learning.seed);
    let cfg = SimConfig {
        values: s.values,
        algorithm: Some(setting.algo),
        dropout: s.dropout,
        send_jitter: s.send_jitter.unwrap_or(defaults.send_jitter),
        send_pace: node::engine::SendPace::from_settings(
            s.send_pace.unwrap_or_default(),
            s.send_pace_auto,
        ),
        overlay: sampling::OverlayConfig {
            hide_origin: s.hide_walk_origin,
            ..defaults.overlay.clone()
        },
        // A neighbour's copy can come up to its whole send delay after ours: wait that much longer.
        exchange_timeout: defaults.exchange_timeout + s.send_jitter.unwrap_or_default(),
        ..defaults
    };
    let k = setting.vns as u32;
    // The simulator numbers VNs node by node: VN g belongs to real node g / k. Only the harness uses this.
    let observer = audit
        .map(|p| p.inline(move |g: &u32| Some((*g / k) as usize)))
        .transpose()?;
    // With the audit, every node is also a network observer attacking sibling linkage by timing.
    let linkage = observer.is_some().then(|| {
        crate::linkage::LinkageRecorder::new(setting.vns, move |g: &u32| Some((*g / k) as usize))
    });
    let tee = observer
        .as_ref()
        .zip(linkage.as_ref())
        .map(|(a, l)| node::observe::Tee(a, l));
    // `--ui`: the overlay as the simulator's copies travel (its VN numbers are already node by node).
    let overlay = progress.live_mut().map(|live| {
        let o = Arc::new(crate::live::OverlayRecorder::new(
            s.nodes,
            setting.vns,
            |g: &u32| Some(*g),
        ));
        live.overlay = Some(o.clone());
        o
    });
    let both = tee
        .as_ref()
        .zip(overlay.as_deref())
        .map(|(t, o)| node::observe::Tee(t, o));
    let watcher: Option<&dyn node::observe::Observer<u32>> = match (&both, &tee, &overlay) {
        (Some(b), _, _) => Some(b),
        (None, Some(t), None) => Some(t),
        (None, None, Some(o)) => Some(&**o),
        _ => None,
    };
    // Wall-clock time of the simulation, reported beside its virtual time.
    #[allow(clippy::disallowed_methods)]
    let t = Instant::now();
    let report = node::sim::run_observed(
        &cfg,
        learners,
        partition,
        |rn, m| progress.on_round(rn, m),
        watcher,
    )?;
    let wall = t.elapsed().as_secs_f64();
    let mut extra = BTreeMap::new();
    extra.insert("round_seconds_are".into(), json!("virtual"));
    extra.insert("virtual_seconds".into(), json!(report.virtual_secs));
    extra.insert(
        "wall_seconds_per_round".into(),
        json!(wall / s.rounds as f64),
    );
    extra.insert("sim_messages".into(), json!(report.messages));
    extra.insert("sim_messages_lost".into(), json!(report.lost));
    if let Some(l) = &linkage {
        extra.insert("linkage".into(), serde_json::to_value(l.finish())?);
    }
    Ok(RunOutput {
        metrics: report.metrics,
        wall_secs: wall,
        peak_rss_bytes: crate::rss::peak_rss_bytes(),
        extra,
        errors: Vec::new(),
        interrupted: false,
        audit: observer.map(|o| o.finish()),
    })
}
