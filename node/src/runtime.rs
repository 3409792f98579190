//! The embedding API: [`NodeBuilder`] → [`NodeBuilder::spawn`] → a cloneable [`NodeHandle`] plus a stream of
//! [`NodeEvent`]s. One node = one real node (RN) task and k virtual-node tasks, each VN with its own Swarm.
//!
//! Training and evaluation run on tokio's blocking pool, never on a worker thread (DESIGN §3.7).

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use libp2p::identity::Keypair;
use libp2p::pnet::PreSharedKey;
use libp2p::{Multiaddr, PeerId};
use models::chunking::ChunkPartition;
use protocol::rnvn::{FromVirtualNode, ToVirtualNode};
use sampling::{CyclonConfig, OverlayConfig, derive_rng};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::engine::{RnEngine, RnInput, RnOutput, RoundMetrics, VnConfig, VnEngine};
use crate::events::{EVENT_CAPACITY, EventSink, NodeEvent};
use crate::learner::{Learner, LearningConfig, Trained};
use crate::net::behaviour::Timeouts;
use crate::net::transport::build_swarm;
use crate::net::vn_task::{VnCommand, VnTask, listen};
use crate::observe::{Observer, notify_round_start};
use crate::peers::PeerList;
use crate::{NodeError, Result, VnAddr};

/// Commands queued per VN: a start and an exchange per round, and a stop. A handful is plenty; the bound
/// makes a stuck VN slow its RN down instead of growing a queue.
const VN_COMMAND_CAPACITY: usize = 8;

/// Messages from all VNs to their RN: about r copies per VN per round plus one report each. 1,024 lets a
/// round of k = 16, r = 8 (128 copies) arrive while the RN is busy without stalling any VN.
const TO_RN_CAPACITY: usize = 1024;

/// Protocol timing on a real network. The defaults suit a LAN or the Internet with rounds of seconds to
/// minutes; tests shorten them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Timing {
    /// Time between two Cyclon shuffles of one VN (DESIGN §5: ≥ 4 shuffles per round).
    pub cyclon_period_ms: u64,
    /// A shuffle without reply after this long removes its target.
    pub shuffle_timeout_ms: u64,
    /// One overlay sub-step; must exceed a round trip. The overlay takes (4r + r + 4) sub-steps.
    pub substep_ms: u64,
    /// How long a VN waits for its neighbours' chunks after sending its own.
    pub exchange_timeout_ms: u64,
    /// Upper bound of each VN's random delay before sending its chunk, so sibling VNs do not all send at the
    /// instant their node finishes training (DESIGN §5).
    pub send_jitter_ms: u64,
    /// Gossip before round 0, so views are mixed (and peers are up) when the first overlay is built.
    pub warmup_ms: u64,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            cyclon_period_ms: 1000,
            shuffle_timeout_ms: 2000,
            substep_ms: 200,
            exchange_timeout_ms: 30_000,
            send_jitter_ms: 1000,
            warmup_ms: 5000,
        }
    }
}

impl Timing {
    /// Short timing for loopback tests and local testnets.
    pub fn loopback() -> Self {
        Self {
            cyclon_period_ms: 250,
            shuffle_timeout_ms: 500,
            // Round starts of different nodes differ by up to a training time (hundreds of ms for small
            // models); sub-steps of 100 ms keep the overlay window
            // several times wider than that skew (the window is 5r + 4 sub-steps, `OverlayConfig::deadline`).
            substep_ms: 100,
            exchange_timeout_ms: 5000,
            send_jitter_ms: 200,
            warmup_ms: 1500,
        }
    }

    fn vn_config(&self, degree: usize, chunk_lens: Arc<Vec<usize>>) -> VnConfig {
        VnConfig {
            cyclon: CyclonConfig {
                period: Duration::from_millis(self.cyclon_period_ms),
                shuffle_timeout: Duration::from_millis(self.shuffle_timeout_ms),
                ..CyclonConfig::default()
            },
            overlay: OverlayConfig::new(degree, Duration::from_millis(self.substep_ms)),
            exchange_timeout: Duration::from_millis(self.exchange_timeout_ms),
            send_jitter: Duration::from_millis(self.send_jitter_ms),
            chunk_lens,
        }
    }
}

/// Where a node stands, as its handle reports it.
#[derive(Debug, Clone, Default)]
pub struct NodeStatus {
    /// The round in progress (or the last one, once finished).
    pub round: u64,
    pub rounds_completed: u64,
    pub last: Option<RoundMetrics>,
    pub finished: bool,
    pub error: Option<String>,
}

/// A running node. Cloneable; dropping every clone does not stop the node (call [`NodeHandle::stop`]).
#[derive(Clone)]
pub struct NodeHandle {
    status: watch::Receiver<NodeStatus>,
    stop: Arc<watch::Sender<bool>>,
    addrs: Arc<Vec<VnAddr>>,
}

impl NodeHandle {
    pub fn status(&self) -> NodeStatus {
        self.status.borrow().clone()
    }

    /// The VNs' identities and the addresses they announce.
    pub fn addresses(&self) -> &[VnAddr] {
        &self.addrs
    }

    /// Asks the node to stop: it leaves at once, mid-round if need be.
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }

    /// Waits until the node finished (all rounds, a stop, or an error) and returns its final status.
    pub async fn wait(&self) -> NodeStatus {
        let mut rx = self.status.clone();
        let _ = rx.wait_for(|s| s.finished).await;
        rx.borrow().clone()
    }
}

/// Builds a node. Required: the VN keys (k = number of keys), the learning config and this node's index in
/// it, and where to listen; everything else has defaults.
pub struct NodeBuilder {
    keys: Vec<Keypair>,
    learning: LearningConfig,
    index: usize,
    learner: Option<Learner>,
    partition: Option<Arc<ChunkPartition>>,
    listen: Vec<Multiaddr>,
    announce: Vec<Multiaddr>,
    peers: PeerList,
    psk: Option<PreSharedKey>,
    degree: usize,
    rounds: u64,
    timing: Timing,
    timeouts: Timeouts,
    metrics_path: Option<PathBuf>,
    observer: Option<Arc<dyn Observer<PeerId>>>,
}

impl NodeBuilder {
    pub fn new(keys: Vec<Keypair>, learning: LearningConfig, index: usize) -> Self {
        Self {
            keys,
            learning,
            index,
            learner: None,
            partition: None,
            listen: vec!["/ip4/127.0.0.1/tcp/0".parse().expect("valid multiaddr")],
            announce: Vec::new(),
            peers: PeerList::default(),
            psk: None,
            // Paper default r = 8 (Table 2).
            degree: 8,
            rounds: 10,
            timing: Timing::default(),
            timeouts: Timeouts::default(),
            metrics_path: None,
            observer: None,
        }
    }

    /// Listen addresses: one per VN, or one used by every VN (port 0 picks a free port for each).
    pub fn listen(mut self, addrs: Vec<Multiaddr>) -> Self {
        self.listen = addrs;
        self
    }

    /// Addresses the VNs announce to peers (one per VN), when the listen address is not reachable as is.
    pub fn announce(mut self, addrs: Vec<Multiaddr>) -> Self {
        self.announce = addrs;
        self
    }

    pub fn peers(mut self, peers: PeerList) -> Self {
        self.peers = peers;
        self
    }

    pub fn psk(mut self, psk: Option<PreSharedKey>) -> Self {
        self.psk = psk;
        self
    }

    pub fn degree(mut self, r: usize) -> Self {
        self.degree = r;
        self
    }

    pub fn rounds(mut self, rounds: u64) -> Self {
        self.rounds = rounds;
        self
    }

    pub fn timing(mut self, timing: Timing) -> Self {
        self.timing = timing;
        self
    }

    pub fn timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// Appends one JSON line per round to this file.
    pub fn metrics_file(mut self, path: Option<PathBuf>) -> Self {
        self.metrics_path = path;
        self
    }

    /// Lets a research harness watch the node (see [`crate::observe`]): the model each round starts from and
    /// every accepted chunk copy with the sending VN's PeerId.
    pub fn observer(mut self, observer: Arc<dyn Observer<PeerId>>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Uses an already-built learner (model + this node's data) instead of loading the dataset.
    pub fn learner(mut self, learner: Learner) -> Self {
        self.learner = Some(learner);
        self
    }

    /// Uses an already-built chunk partition (it must be the one `LearningConfig::chunk_partition` gives for
    /// this model and k). In-process networks share one: it takes ~10 bytes per parameter.
    pub fn partition(mut self, partition: Arc<ChunkPartition>) -> Self {
        self.partition = Some(partition);
        self
    }

    /// Starts listening, joins the network and runs the rounds in the background. Must be called within a
    /// tokio runtime.
    pub async fn spawn(self) -> Result<(NodeHandle, mpsc::Receiver<NodeEvent>)> {
        let k = self.keys.len();
        if k == 0 {
            return Err(NodeError::Config(
                "a node needs at least one virtual node key".into(),
            ));
        }
        if self.degree == 0 {
            return Err(NodeError::Config("degree must be at least 1".into()));
        }
        if self.rounds == 0 {
            return Err(NodeError::Config("rounds must be at least 1".into()));
        }
        if !(self.listen.len() == 1 || self.listen.len() == k) {
            return Err(NodeError::Config(format!(
                "{} listen addresses for {k} virtual nodes (give 1 or {k})",
                self.listen.len()
            )));
        }
        if !(self.announce.is_empty() || self.announce.len() == k) {
            return Err(NodeError::Config(format!(
                "{} announce addresses for {k} virtual nodes",
                self.announce.len()
            )));
        }
        let learner = match self.learner {
            Some(l) => l,
            None => {
                let (learning, index) = (self.learning.clone(), self.index);
                tokio::task::spawn_blocking(move || -> Result<Learner> {
                    let (split, parts) = learning.load()?;
                    Ok(learning.learners(&split, &parts, [index])?.remove(0))
                })
                .await
                .map_err(|e| NodeError::Config(format!("loading data panicked: {e}")))??
            }
        };
        let partition = match self.partition {
            Some(p) if p.k() == k && p.d() == learner.model.num_params() => p,
            Some(p) => {
                return Err(NodeError::Config(format!(
                    "partition has k = {}, d = {} but the node has {k} VNs and d = {}",
                    p.k(),
                    p.d(),
                    learner.model.num_params()
                )));
            }
            None => Arc::new(self.learning.chunk_partition(&learner.model, k)?),
        };
        let chunk_lens = Arc::new((0..k).map(|s| partition.chunk_len(s)).collect::<Vec<_>>());
        let vn_cfg = self.timing.vn_config(self.degree, chunk_lens);
        let metrics_file = match &self.metrics_path {
            Some(p) => Some((
                p.clone(),
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .map_err(|e| NodeError::io(p, e))?,
            )),
            None => None,
        };

        let (events, events_rx) = EventSink::new(EVENT_CAPACITY);
        let peers = Arc::new(self.peers);
        let epoch = Instant::now();
        let (to_rn, from_vns) = mpsc::channel(TO_RN_CAPACITY);
        let mut vn_cmds = Vec::with_capacity(k);
        let mut addrs = Vec::with_capacity(k);
        let mut tasks = Vec::with_capacity(k);
        for (s, key) in self.keys.into_iter().enumerate() {
            let stream = vn_stream(&key);
            let peer = key.public().to_peer_id();
            let mut swarm = build_swarm(key, self.psk, self.timeouts)?;
            for p in peers.allowed() {
                swarm.behaviour_mut().allow.allow_peer(*p);
            }
            let bound = listen(
                &mut swarm,
                self.listen[s.min(self.listen.len() - 1)].clone(),
            )
            .await?;
            let me = VnAddr::new(peer, self.announce.get(s).cloned().unwrap_or(bound));
            let allowed = peers.clone();
            let engine = VnEngine::new(
                me.clone(),
                vn_cfg.clone(),
                derive_rng(self.learning.seed, stream),
                derive_rng(self.learning.seed, stream ^ 0x5555_5555_5555_5555),
                Box::new(move |a: &VnAddr| allowed.is_allowed(&a.peer)),
            )?;
            let (tx, rx) = mpsc::channel(VN_COMMAND_CAPACITY);
            vn_cmds.push(tx);
            let bootstrap = peers
                .bootstrap()
                .into_iter()
                .filter(|b| b.peer != peer)
                .collect();
            tasks.push(VnTask {
                index: s,
                swarm,
                engine,
                bootstrap,
                peers: peers.clone(),
                commands: rx,
                to_rn: to_rn.clone(),
                events: events.clone(),
                epoch,
                node: self.index,
                observer: self.observer.clone(),
            });
            addrs.push(me);
        }
        drop(to_rn);
        for t in tasks {
            tokio::spawn(t.run());
        }

        let (status_tx, status_rx) = watch::channel(NodeStatus::default());
        let (stop_tx, stop_rx) = watch::channel(false);
        let rn = RnTask {
            index: self.index,
            engine: RnEngine::new(partition.clone(), self.rounds),
            learner: Some(learner),
            vn_cmds,
            from_vns,
            events: events.clone(),
            status: status_tx,
            stop: stop_rx,
            metrics_file,
            epoch,
            observer: self.observer.clone(),
            warmup: Duration::from_millis(self.timing.warmup_ms),
        };
        tokio::spawn(rn.run());
        Ok((
            NodeHandle {
                status: status_rx,
                stop: Arc::new(stop_tx),
                addrs: Arc::new(addrs),
            },
            events_rx,
        ))
    }
}

/// A per-VN RNG stream from the VN's secret key: unpredictable to others (unlike one derived from the public
/// PeerId) and distinct between siblings. FNV-1a is enough here: the secret, not the hash, gives the secrecy.
fn vn_stream(key: &Keypair) -> u64 {
    let bytes = key.to_protobuf_encoding().unwrap_or_default();
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

enum Job {
    Trained(u64, Result<Trained>),
    Evaluated(u64, Result<(models::train::Evaluation, f64)>),
}

struct RnTask {
    index: usize,
    engine: RnEngine,
    learner: Option<Learner>,
    vn_cmds: Vec<mpsc::Sender<VnCommand>>,
    from_vns: mpsc::Receiver<(usize, FromVirtualNode)>,
    events: EventSink,
    status: watch::Sender<NodeStatus>,
    stop: watch::Receiver<bool>,
    metrics_file: Option<(PathBuf, std::fs::File)>,
    epoch: Instant,
    observer: Option<Arc<dyn Observer<PeerId>>>,
    warmup: Duration,
}

impl RnTask {
    async fn run(mut self) {
        let result = self.rounds().await;
        for tx in &self.vn_cmds {
            let _ = tx.send(VnCommand::Rn(ToVirtualNode::Stop)).await;
        }
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
        tokio::select! {
            _ = tokio::time::sleep(self.warmup) => {}
            _ = self.stop.wait_for(|s| *s) => return Ok(()),
        }
        let mut outputs: std::collections::VecDeque<RnOutput> = self
            .engine
            .handle(self.epoch.elapsed(), RnInput::Start)
            .into();
        let mut job: Option<tokio::task::JoinHandle<(Learner, Job)>> = None;
        loop {
            while let Some(o) = outputs.pop_front() {
                match o {
                    RnOutput::StartRound { round } => {
                        self.status.send_modify(|s| s.round = round);
                        for tx in &self.vn_cmds {
                            tx.send(VnCommand::StartRound(round))
                                .await
                                .map_err(|_| NodeError::Stopped)?;
                        }
                    }
                    RnOutput::Train { round } => {
                        let mut l = self.learner.take().ok_or(NodeError::Stopped)?;
                        let (observer, node) = (self.observer.clone(), self.index);
                        job = Some(tokio::task::spawn_blocking(move || {
                            let r = notify_round_start(observer.as_deref(), node, round, || {
                                l.model.flat_params()
                            })
                            .map_err(NodeError::from)
                            .and_then(|()| l.train());
                            (l, Job::Trained(round, r))
                        }));
                    }
                    RnOutput::ToVn { vn, msg } => {
                        self.vn_cmds[vn]
                            .send(VnCommand::Rn(msg))
                            .await
                            .map_err(|_| NodeError::Stopped)?;
                    }
                    RnOutput::Evaluate { round, params } => {
                        let mut l = self.learner.take().ok_or(NodeError::Stopped)?;
                        job = Some(tokio::task::spawn_blocking(move || {
                            let r = l.load_and_evaluate(&params);
                            (l, Job::Evaluated(round, r))
                        }));
                    }
                    RnOutput::RoundDone(m) => self.record(m).await?,
                    RnOutput::Finished => return Ok(()),
                }
            }
            let input = tokio::select! {
                msg = self.from_vns.recv() => {
                    let (vn, msg) = msg.ok_or(NodeError::Stopped)?;
                    RnInput::FromVn { vn, msg }
                }
                done = async { job.as_mut().expect("guarded").await }, if job.is_some() => {
                    job = None;
                    let (l, j) = done.map_err(|e| NodeError::Config(format!("training task failed: {e}")))?;
                    self.learner = Some(l);
                    match j {
                        Job::Trained(round, t) => {
                            let t = t?;
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
            let t = std::time::Instant::now();
            let out = self.engine.handle(self.epoch.elapsed(), input);
            if out.iter().any(|o| matches!(o, RnOutput::Evaluate { .. })) {
                self.engine.set_aggregate_secs(t.elapsed().as_secs_f64());
            }
            outputs.extend(out);
        }
    }

    async fn record(&mut self, m: RoundMetrics) -> Result<()> {
        if let Some((path, f)) = self.metrics_file.as_mut() {
            #[derive(Serialize)]
            struct Line<'a> {
                node: usize,
                #[serde(flatten)]
                m: &'a RoundMetrics,
            }
            let line = serde_json::to_string(&Line {
                node: self.index,
                m: &m,
            })
            .expect("metrics serialise");
            writeln!(f, "{line}").map_err(|e| NodeError::io(path, e))?;
        }
        tracing::info!(node = self.index, round = m.round, metric = m.test_metric, name = %m.metric_name, "round finished");
        self.status.send_modify(|s| {
            s.rounds_completed += 1;
            s.last = Some(m.clone());
        });
        self.events.send_reliably(NodeEvent::RoundFinished(m)).await;
        Ok(())
    }
}
