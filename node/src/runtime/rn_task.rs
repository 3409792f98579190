//! The real node's task: drives its [`RnEngine`] through the shared router, with training and evaluation on
//! tokio's blocking pool (never on a worker thread, DESIGN §3.7).

use std::sync::Arc;
use std::time::Duration;

use libp2p::PeerId;
use protocol::Round;
use protocol::rnvn::{FromVirtualNode, ToVirtualNode};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::handle::NodeStatus;
use super::isolation::{Finding, IsolationWatch};
use super::metrics_file::MetricsFile;
use crate::checkpoint::{CheckpointDir, RunIdentity, SavedEntry, ViewBoard};
use crate::engine::{RnDriver, RnEngine, RnInput, RnOutput, RoundMetrics, route_rn};
use crate::events::{DurableFile, EventSink, NodeEvent};
use crate::learner::{Learner, Trained};
use crate::observe::{Observer, notify_round_start};
use crate::telemetry::{NodeMetrics, Phase};
use crate::{NodeError, Result};

enum Job {
    Trained(Round, Result<Trained>),
    Evaluated(Round, Result<(models::train::Evaluation, f64)>),
}

pub(super) struct RnTask {
    pub(super) index: usize,
    pub(super) engine: RnEngine,
    pub(super) learner: Option<Learner>,
    pub(super) vn_cmds: Vec<mpsc::Sender<ToVirtualNode>>,
    /// The VN tasks (`vn_ids[s]` is VN s's task) and the VNs found gone.
    pub(super) vn_tasks: JoinSet<()>,
    pub(super) vn_ids: Vec<tokio::task::Id>,
    pub(super) lost: Vec<usize>,
    pub(super) from_vns: mpsc::Receiver<(usize, FromVirtualNode)>,
    pub(super) events: EventSink,
    pub(super) status: watch::Sender<NodeStatus>,
    pub(super) stop: watch::Receiver<bool>,
    pub(super) metrics_file: Option<MetricsFile>,
    pub(super) checkpoints: Option<Checkpoints>,
    pub(super) epoch: Instant,
    pub(super) observer: Option<Arc<dyn Observer<PeerId>>>,
    pub(super) warmup: Duration,
    /// How long before the warm-up's end the VNs start negotiating round 0 (`Timing::prepare_lead`).
    pub(super) prepare_lead: Duration,
    /// The RN↔VN link's byte counter, when the VNs run in VN hosts.
    pub(super) link_stats: Option<Arc<crate::net::link::LinkStats>>,
    /// Whether the node reaches anyone (`isolation.rs`); `None` when its peer list names only its own VNs.
    pub(super) isolation: Option<IsolationWatch>,
    /// Rounds since the last checkpoint saved (0 when the last round's was): the metrics' gauge.
    pub(super) unsaved_checkpoints: u64,
    /// The last metrics write failed (so that its recovery is logged once).
    pub(super) metrics_failing: bool,
    /// The Prometheus families this task keeps up to date, when the node serves them.
    pub(super) metrics: Option<crate::telemetry::NodeMetrics>,
}

type JobHandle = tokio::task::JoinHandle<(Learner, Job)>;

/// Where and for which run the RN checkpoints every round, and the board its VNs publish their views on.
pub(super) struct Checkpoints {
    pub(super) dir: CheckpointDir,
    pub(super) run: RunIdentity,
    pub(super) views: ViewBoard,
}

impl RnTask {
    fn set_phase(&self, phase: Phase) {
        if let Some(m) = &self.metrics {
            m.set_phase(phase);
        }
    }

    pub(super) async fn run(mut self) {
        let result = self.rounds().await;
        for tx in &self.vn_cmds {
            let _ = tx.send(ToVirtualNode::Stop).await;
        }
        // They end on Stop; dropping the set would abort them mid-reply.
        self.vn_tasks.detach_all();
        self.set_phase(Phase::Finished);
        if let Err(e) = &result {
            tracing::error!(node = self.index, error = %e, "node stopped");
            self.events
                .send_reliably(NodeEvent::Error(e.to_string()))
                .await;
        }
        self.status.send_modify(|s| {
            s.finished = true;
            s.error = result.err().map(|e| e.to_string());
        });
        self.events.send_reliably(NodeEvent::Finished).await;
    }

    async fn rounds(&mut self) -> Result<()> {
        // During the warm-up the VNs gossip; what they tell the RN meanwhile is fed to the engine, which in
        // this phase acts only on `Behind`: a resumed node whose probes found the network ahead then starts
        // at the network's round instead of training a round nobody else is in — and starts at once: the
        // warm-up mixes views before round 0, while a resumed node has its saved view and a network that
        // moves on while it waits (at rounds of 0.3 s, the loopback timing's 3 s warm-up is ten rounds).
        let warmup = tokio::time::sleep(self.warmup);
        tokio::pin!(warmup);
        let resumed = self.engine.first_round() > Round::ZERO;
        // A fresh node's VNs negotiate round 0's overlays in the warm-up's tail (`Timing::prepare_lead`); a
        // resumed node starts as soon as its probes say where the network is, so it has nothing to prepare.
        let prepare = tokio::time::sleep(self.warmup.saturating_sub(self.prepare_lead));
        tokio::pin!(prepare);
        let mut prepared = resumed;
        loop {
            tokio::select! {
                _ = &mut warmup => break,
                _ = &mut prepare, if !prepared => prepared = true,
                _ = self.stop.wait_for(|s| *s) => return Ok(()),
                Some((vn, msg)) = self.from_vns.recv() => {
                    let behind = matches!(msg, FromVirtualNode::Behind { .. });
                    let out = self.engine.handle(self.epoch.elapsed(), RnInput::FromVn { vn, msg });
                    debug_assert!(out.is_empty(), "nothing is started before Start");
                    if resumed && behind {
                        break;
                    }
                    continue;
                }
            }
            // The prepare timer fired (the only other way here).
            for tx in &self.vn_cmds {
                // A VN that is gone is noticed when the rounds start; nothing to do about it here.
                let _ = tx.send(ToVirtualNode::Prepare(Round::ZERO)).await;
            }
        }
        let mut out = self.engine.handle(self.epoch.elapsed(), RnInput::Start);
        tracing::info!(
            node = self.index,
            round = %self.engine.round(),
            secs = self.epoch.elapsed().as_secs_f64(),
            "start-up: first round begins"
        );
        let mut job: Option<JobHandle> = None;
        loop {
            if self.apply(out, &mut job).await? {
                return Ok(());
            }
            let mut lost = None;
            let deadline = self.isolation.as_ref().and_then(|w| w.deadline());
            let input = tokio::select! {
                _ = tokio::time::sleep_until(self.epoch + deadline.unwrap_or_default()), if deadline.is_some() => {
                    isolation_deadline(self.isolation.as_mut(), self.epoch)?;
                    // Nothing for the engine: its last outputs were carried out above.
                    out = Vec::new();
                    continue;
                }
                Some(joined) = self.vn_tasks.join_next_with_id(), if !self.vn_tasks.is_empty() => {
                    let (id, reason) = match joined {
                        Ok((id, ())) => (id, "its task ended".to_string()),
                        Err(e) if e.is_panic() => (e.id(), format!("its task panicked: {e}")),
                        Err(e) => (e.id(), format!("its task was aborted: {e}")),
                    };
                    let vn = self.vn_ids.iter().position(|i| *i == id).expect("a VN task");
                    lost = Some(reason);
                    RnInput::VnLost { vn }
                }
                msg = self.from_vns.recv() => {
                    let (vn, msg) = msg.ok_or(NodeError::Stopped)?;
                    if let (Some(m), FromVirtualNode::Done(summary)) = (&self.metrics, &msg) {
                        m.vn_done(vn, summary);
                    }
                    RnInput::FromVn { vn, msg }
                }
                done = async { job.as_mut().expect("guarded").await }, if job.is_some() => {
                    job = None;
                    let (l, j) = done.map_err(|e| NodeError::Config(format!("training task failed: {e}")))?;
                    self.learner = Some(l);
                    match j {
                        Job::Trained(round, t) => {
                            let t = t?;
                            if let Some(m) = &self.metrics {
                                m.set_phase(Phase::Exchange);
                            }
                            RnInput::Trained { round, params: t.params, train_loss: t.train_loss, secs: t.secs }
                        }
                        Job::Evaluated(round, e) => {
                            let (e, secs) = e?;
                            RnInput::Evaluated { round, metric_name: e.metric_kind(), metric: e.metric(), loss: e.mean_loss(), secs }
                        }
                    }
                }
                _ = self.stop.wait_for(|s| *s) => return Ok(()),
            };
            if let (Some(reason), RnInput::VnLost { vn }) = (lost, &input) {
                self.lose(*vn, reason);
            }
            // Wall-clock time of the aggregation (the `handle` call that produces `Evaluate`).
            #[allow(clippy::disallowed_methods)] // a measurement, not an input to the engine
            let t = std::time::Instant::now();
            out = self.engine.handle(self.epoch.elapsed(), input);
            if out.iter().any(|o| matches!(o, RnOutput::Evaluate { .. })) {
                self.engine.set_aggregate_secs(t.elapsed().as_secs_f64());
            }
        }
    }

    /// Routes the engine's outputs (starting jobs at once), then carries out the effects that wait on
    /// channels, in order. Returns whether the node finished.
    async fn apply(&mut self, out: Vec<RnOutput>, job: &mut Option<JobHandle>) -> Result<bool> {
        // A finished round is checkpointed before anything else: the learner holds the round's model now,
        // and the next round's training (routed below) takes it. The metrics line follows the checkpoint
        // (see `metrics_file.rs` for why that order gives each round exactly one line).
        if let Some(m) = out.iter().find_map(|o| match o {
            RnOutput::RoundDone(m) => Some(m.clone()),
            _ => None,
        }) {
            self.checkpoint(m).await?;
        }
        let mut port = TaskPort {
            index: self.index,
            learner: &mut self.learner,
            job,
            status: &self.status,
            observer: self.observer.clone(),
            metrics: self.metrics.as_ref(),
            effects: Vec::new(),
            finished: false,
        };
        route_rn(self.vn_cmds.len(), out, &mut port)?;
        let (effects, finished) = (port.effects, port.finished);
        for effect in effects {
            match effect {
                Effect::Command(vn, _) if self.lost.contains(&vn) => {}
                Effect::Command(vn, cmd) => {
                    if self.vn_cmds[vn].send(cmd).await.is_err() {
                        // Gone before its end was noticed: the supervisor's report follows (and is handled
                        // then); skip its commands meanwhile.
                        self.lost.push(vn);
                    }
                }
                Effect::Record(m) => self.record(m).await?,
            }
        }
        Ok(finished)
    }

    /// The check at a round's end: a warning every round the node stays alone, and the stop at the timeout.
    fn isolation_after(&mut self, m: &RoundMetrics) -> Result<()> {
        let now = self.epoch.elapsed();
        let Some(w) = self.isolation.as_mut() else {
            return Ok(());
        };
        match w.after_round(now, m.neighbours, m.copies_received, m.absent) {
            Some(Finding::Alone { alone, stop: true }) => Err(w.error(alone)),
            Some(Finding::Alone { .. }) if w.state.quiet() => Ok(()),
            Some(Finding::Alone { alone, .. }) => {
                tracing::warn!(
                    node = self.index,
                    round = m.round.get(),
                    "{}",
                    w.warning(alone)
                );
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Marks VN `vn` gone and tells the embedder; the engine then stops waiting for it.
    fn lose(&mut self, vn: usize, reason: String) {
        tracing::error!(node = self.index, vn, %reason, "virtual node lost; the node goes on without it");
        if !self.lost.contains(&vn) {
            self.lost.push(vn);
        }
        if let Some(m) = &self.metrics {
            m.vn_lost();
        }
        self.events.send(NodeEvent::VnLost { vn, reason });
    }

    /// Saves the checkpoint of round `m.round` (model, training RNG, VN views), off the event loop, after
    /// syncing the metrics file (its durability rule, `metrics_file.rs`). A failed save or sync — a full or
    /// failing disk — is reported and counted, not fatal: the next round tries again.
    async fn checkpoint(&mut self, m: RoundMetrics) -> Result<()> {
        if self.checkpoints.is_none() {
            return Ok(());
        }
        let mut metrics_unsaved = 0;
        if let Some(f) = self.metrics_file.as_mut() {
            let sync = f.sync_job();
            let r = tokio::task::spawn_blocking(sync)
                .await
                .map_err(|e| NodeError::Config(format!("metrics sync task failed: {e}")))?;
            metrics_unsaved = f.synced(&r);
            if let Err(e) = r {
                report_write_failure(
                    &self.events,
                    self.metrics.as_ref(),
                    self.index,
                    DurableFile::Metrics,
                    f.path(),
                    &e,
                );
            }
        }
        let Some(c) = &self.checkpoints else {
            return Ok(());
        };
        let learner = self.learner.take().ok_or(NodeError::Stopped)?;
        let views: Vec<Vec<SavedEntry>> = c
            .views
            .lock()
            .map(|v| {
                v.iter()
                    .map(|es| es.iter().map(SavedEntry::of).collect())
                    .collect()
            })
            .unwrap_or_default();
        let (dir, run) = (c.dir.clone(), c.run.clone());
        let (learner, saved) = tokio::task::spawn_blocking(move || {
            let r = dir.save(&run, &learner, &m, views, metrics_unsaved);
            (learner, r)
        })
        .await
        .map_err(|e| NodeError::Config(format!("checkpoint task failed: {e}")))?;
        self.learner = Some(learner);
        match saved {
            Ok(_) => {
                if self.unsaved_checkpoints > 0 {
                    tracing::info!(
                        node = self.index,
                        unsaved = self.unsaved_checkpoints,
                        "checkpoints are saved again"
                    );
                }
                self.unsaved_checkpoints = 0;
            }
            Err(e) => {
                self.unsaved_checkpoints += 1;
                let path = match &e {
                    NodeError::Io { path, .. } => path.clone(),
                    _ => c.dir.path().to_path_buf(),
                };
                report_write_failure(
                    &self.events,
                    self.metrics.as_ref(),
                    self.index,
                    DurableFile::Checkpoint,
                    &path,
                    &e,
                );
            }
        }
        Ok(())
    }

    async fn record(&mut self, mut m: RoundMetrics) -> Result<()> {
        if let Some(s) = &self.link_stats {
            m.link_bytes = s.take();
        }
        m.unsaved_checkpoints = self.unsaved_checkpoints;
        if let Some(f) = self.metrics_file.as_mut() {
            match f.append(self.index, &mut m) {
                Ok(()) if self.metrics_failing => {
                    tracing::info!(node = self.index, path = %f.path().display(), "the metrics file is written again");
                    self.metrics_failing = false;
                }
                Ok(()) => {}
                Err(e) => {
                    self.metrics_failing = true;
                    report_write_failure(
                        &self.events,
                        self.metrics.as_ref(),
                        self.index,
                        DurableFile::Metrics,
                        f.path(),
                        &e,
                    );
                }
            }
        }
        tracing::info!(node = self.index, round = m.round.get(), metric = m.test_metric, name = %m.metric_name, "round finished");
        self.status.send_modify(|s| {
            s.rounds_completed += 1;
            s.last = Some(m.clone());
        });
        if let Some(metrics) = &self.metrics {
            metrics.round_finished(&m);
        }
        let checked = self.isolation_after(&m);
        self.events.send_reliably(NodeEvent::RoundFinished(m)).await;
        checked
    }
}

/// The isolation deadline came between rounds: stops the node if it still reaches nobody. (A function of the
/// one field, as the round loop's other branches hold borrows of the others.)
fn isolation_deadline(watch: Option<&mut IsolationWatch>, epoch: Instant) -> Result<()> {
    let Some(w) = watch else {
        return Ok(());
    };
    match w.at_deadline(epoch.elapsed()) {
        Some(Finding::Alone { alone, stop: true }) => Err(w.error(alone)),
        _ => Ok(()),
    }
}

/// Logs a failed durable write and tells the embedder; the node goes on (the caller counts it).
fn report_write_failure(
    events: &EventSink,
    metrics: Option<&NodeMetrics>,
    node: usize,
    file: DurableFile,
    path: &std::path::Path,
    error: &dyn std::fmt::Display,
) {
    tracing::warn!(node, ?file, path = %path.display(), %error, "write failed; training goes on and the write is tried again next round");
    if let Some(m) = metrics {
        m.write_failed(file);
    }
    events.send(NodeEvent::WriteFailed {
        file,
        path: path.to_path_buf(),
        error: error.to_string(),
    });
}

/// What must wait on a channel, kept in the engine's order.
enum Effect {
    Command(usize, ToVirtualNode),
    Record(RoundMetrics),
}

/// The RN task's side of the router: jobs start at once on the blocking pool; VN commands and metrics
/// records are queued as [`Effect`]s for the task to await.
struct TaskPort<'a> {
    index: usize,
    learner: &'a mut Option<Learner>,
    job: &'a mut Option<JobHandle>,
    status: &'a watch::Sender<NodeStatus>,
    observer: Option<Arc<dyn Observer<PeerId>>>,
    metrics: Option<&'a NodeMetrics>,
    effects: Vec<Effect>,
    finished: bool,
}

impl RnDriver for TaskPort<'_> {
    type Error = NodeError;

    fn to_vn(&mut self, vn: usize, msg: ToVirtualNode) -> Result<()> {
        self.effects.push(Effect::Command(vn, msg));
        Ok(())
    }

    fn idle(&mut self, round: Round, wait: Duration) -> Result<()> {
        self.status.send_modify(|s| s.round = round);
        self.metrics.inspect(|m| m.set_phase(Phase::Absent));
        let mut l = self.learner.take().ok_or(NodeError::Stopped)?;
        *self.job = Some(tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            // The model did not change; its evaluation is the round's (on the blocking pool, as always).
            tokio::task::spawn_blocking(move || {
                let r = l.evaluate();
                (l, Job::Evaluated(round, r))
            })
            .await
            .expect("evaluation task")
        }));
        Ok(())
    }

    fn train(&mut self, round: Round) -> Result<()> {
        self.status.send_modify(|s| s.round = round);
        self.metrics.inspect(|m| m.set_phase(Phase::Training));
        let mut l = self.learner.take().ok_or(NodeError::Stopped)?;
        let (observer, node) = (self.observer.clone(), self.index);
        *self.job = Some(tokio::task::spawn_blocking(move || {
            let r = notify_round_start(observer.as_deref(), node, round, || l.model.flat_params())
                .map_err(NodeError::from)
                .and_then(|()| l.train());
            (l, Job::Trained(round, r))
        }));
        Ok(())
    }

    fn evaluate(&mut self, round: Round, params: Vec<f32>) -> Result<()> {
        self.metrics.inspect(|m| m.set_phase(Phase::Evaluation));
        let mut l = self.learner.take().ok_or(NodeError::Stopped)?;
        *self.job = Some(tokio::task::spawn_blocking(move || {
            let r = l.load_and_evaluate(&params);
            (l, Job::Evaluated(round, r))
        }));
        Ok(())
    }

    fn round_done(&mut self, m: RoundMetrics) -> Result<()> {
        self.effects.push(Effect::Record(m));
        Ok(())
    }

    fn failed(&mut self, why: String) -> Result<()> {
        Err(NodeError::Config(why))
    }

    fn finished(&mut self) -> Result<()> {
        self.finished = true;
        Ok(())
    }
}
