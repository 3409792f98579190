//! [`NodeBuilder`]: checks a node's configuration, binds its VNs' Swarms and spawns the RN and VN tasks.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use libp2p::identity::Keypair;
use libp2p::pnet::PreSharedKey;
use libp2p::{Multiaddr, PeerId};
use models::chunking::ChunkPartition;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::handle::{NodeHandle, NodeStatus};
use super::metrics_file::MetricsFile;
use super::remote_vn::RemoteVn;
use super::rn_task::RnTask;
use super::timing::Timing;
use super::vn_setup::VnSetup;
use crate::algo::AlgoSpec;
use crate::engine::{RnEngine, ValueBounds};
use crate::events::{EVENT_CAPACITY, EventSink, NodeEvent};
use crate::learner::{Learner, LearningConfig};
use crate::net::behaviour::Timeouts;
use crate::observe::Observer;
use crate::peers::PeerList;
use crate::{NodeError, Result, VnAddr};

/// Messages from all VNs to their RN: about r copies per VN per round plus one report each. 1,024 lets a
/// round of k = 16, r = 8 (128 copies) arrive while the RN is busy without stalling any VN.
const TO_RN_CAPACITY: usize = 1024;

/// Builds a node. Required: the VN keys (k = number of keys), the learning config and this node's index in
/// it, and where to listen; everything else has defaults.
pub struct NodeBuilder {
    keys: Vec<Keypair>,
    learning: LearningConfig,
    index: usize,
    learner: Option<Learner>,
    /// Where the loaded learner trains (`None`: the best device compiled in and present).
    device: Option<models::device::DeviceSpec>,
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
    algorithm: Option<AlgoSpec>,
    value_bounds: ValueBounds,
    dropout: f64,
    checkpoints: Option<PathBuf>,
    resume: bool,
    /// The file layer of checkpoints and metrics lines.
    disk: Arc<dyn crate::disk::Disk>,
    /// VNs run by VN hosts (`node vn`), reached over a link with this identity; `keys` is then empty.
    remote: Option<(Keypair, Vec<RemoteVn>)>,
    /// Alone this long stops the node (`isolation.rs`); `None`: it waits for peers for ever.
    isolation_timeout: Option<Duration>,
    /// Where the node registers its Prometheus metrics, if anywhere (`crate::telemetry`).
    telemetry: Option<crate::telemetry::Telemetry>,
}

impl NodeBuilder {
    pub fn new(keys: Vec<Keypair>, learning: LearningConfig, index: usize) -> Self {
        Self {
            keys,
            learning,
            index,
            learner: None,
            device: None,
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
            algorithm: None,
            value_bounds: ValueBounds::default(),
            dropout: 0.0,
            checkpoints: None,
            resume: false,
            disk: Arc::new(crate::disk::OsDisk),
            remote: None,
            isolation_timeout: Some(super::isolation::DEFAULT_ISOLATION_TIMEOUT),
            telemetry: None,
        }
    }

    /// Registers the node's metrics — ours (`shatter_*`) and its VN swarms' (`libp2p_*`, by `vn` label) — in
    /// `telemetry`'s registry, for an endpoint to serve (`crate::telemetry::serve`). Default: none kept.
    pub fn telemetry(mut self, telemetry: crate::telemetry::Telemetry) -> Self {
        self.telemetry = Some(telemetry);
        self
    }

    /// How long the node may reach no peer outside itself before it stops with [`NodeError::Isolated`]
    /// (default [`super::DEFAULT_ISOLATION_TIMEOUT`], counted from the start); `None` waits for ever. Either
    /// way every round it spends alone is logged as a warning naming what it dialled and why that failed. A
    /// node whose peer list names only its own VNs is never isolated.
    pub fn isolation_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.isolation_timeout = timeout;
        self
    }

    /// Writes checkpoints and metrics lines through `disk` instead of the OS's filesystem: for tests that
    /// fail them on demand (`node::disk::FullDisk`).
    #[doc(hidden)]
    pub fn disk(mut self, disk: Arc<dyn crate::disk::Disk>) -> Self {
        self.disk = disk;
        self
    }

    /// Checkpoints every round into this directory (model as safetensors, metadata as JSON;
    /// `checkpoint.rs`). Default: none.
    pub fn checkpoint_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.checkpoints = dir;
        self
    }

    /// Continues from the last checkpoint in the checkpoint directory, if there is one (else starts at round
    /// 0): the model, training RNG and Cyclon views are restored, the first round is the one after the
    /// checkpoint's, and the VNs catch up with the network's round from there. Needs a checkpoint directory.
    pub fn resume(mut self, resume: bool) -> Self {
        self.resume = resume;
        self
    }

    /// Runs this node's VNs in VN hosts (`node vn`) instead of in this process: VN s is `vns[s]`, reached
    /// over the RN↔VN link with the identity `link_key` (its own, never a VN's). The node then has no VN
    /// keys of its own (`new` with none) and listens only for the link's replies.
    pub fn remote_vns(mut self, link_key: Keypair, vns: Vec<RemoteVn>) -> Self {
        self.remote = Some((link_key, vns));
        self
    }

    /// Dropout rate for experiments with intermittent nodes (Appendix E's model, `engine::dropout`): each
    /// round this node sits out with this probability — no training, no overlay, no exchange — drawn once
    /// from the run seed and the node's index. Default 0.
    pub fn dropout(mut self, rate: f64) -> Self {
        self.dropout = rate;
        self
    }

    /// The bound the VNs put on received values (default [`ValueBounds::default`]).
    pub fn value_bounds(mut self, bounds: ValueBounds) -> Self {
        self.value_bounds = bounds;
        self
    }

    /// The algorithm (default: EL with one VN key, Shatter with more). Every node of a network runs the same.
    pub fn algorithm(mut self, algorithm: AlgoSpec) -> Self {
        self.algorithm = Some(algorithm);
        self
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

    /// Trains and evaluates on `device` (`cpu`, `cuda:N`, `metal:N`); one that this build or machine lacks
    /// falls back to the CPU with a warning ([`models::device::DeviceSpec::open`]). Unused with
    /// [`Self::learner`], whose model already lives on a device.
    pub fn device(mut self, device: models::device::DeviceSpec) -> Self {
        self.device = Some(device);
        self
    }

    /// Uses an already-built learner (model + this node's data) instead of loading the dataset.
    pub fn learner(mut self, learner: Learner) -> Self {
        self.learner = Some(learner);
        self
    }

    /// Uses an already-built chunk partition (it must be the one `LearningConfig::chunk_partition` gives for
    /// this model and k). In-process networks share one: it takes ~6 bytes per parameter.
    pub fn partition(mut self, partition: Arc<ChunkPartition>) -> Self {
        self.partition = Some(partition);
        self
    }

    /// Starts listening, joins the network and runs the rounds in the background. Must be called within a
    /// tokio runtime. In order: the configuration is checked, the model loaded (or restored from the last
    /// checkpoint with `resume`), the round engine built — so that an algorithm the engine cannot run stops
    /// the node before any Swarm binds — then the VNs start (in-process or hosted) and the RN task runs them.
    pub async fn spawn(mut self) -> Result<(NodeHandle, mpsc::Receiver<NodeEvent>)> {
        // Start-up phases are logged with the time since this call (how long a restarted node takes to come
        // back: results/churn-procs); a measurement, not an input to any engine.
        #[allow(clippy::disallowed_methods)]
        let started = std::time::Instant::now();
        let k = self.check()?;
        let learner = self.load_learner(started).await?;
        let (spec, algorithm) = self.build_algorithm(k, &learner)?;
        let run = crate::checkpoint::RunIdentity {
            node: self.index,
            seed: self.learning.seed,
            algorithm: spec.to_string(),
            rounds: self.rounds,
            num_params: learner.model.num_params(),
        };
        let checkpoints = self
            .checkpoints
            .take()
            .map(|d| crate::checkpoint::CheckpointDir::new(d).with_disk(self.disk.clone()));
        let (learner, resumed) = self
            .resume_from(checkpoints.as_ref(), &run, learner, started)
            .await?;
        let engine = self.engine(algorithm, resumed.as_ref())?;
        let metrics_file = self.open_metrics_file(resumed.as_ref())?;
        let view_board: Option<crate::checkpoint::ViewBoard> = checkpoints
            .as_ref()
            .map(|_| Arc::new(std::sync::Mutex::new(vec![Vec::new(); k])));

        let node_metrics = self.telemetry.as_ref().map(|t| t.node_metrics(k));
        let (events, events_rx) = EventSink::new(EVENT_CAPACITY);
        // The libp2p shell's clock: engines get `epoch.elapsed()` as their `now`.
        #[allow(clippy::disallowed_methods)]
        let epoch = Instant::now();
        let (to_rn, from_vns) = mpsc::channel(TO_RN_CAPACITY);
        let (contact, isolation) = self.isolation_watch(epoch);
        let start = VnStart {
            contact,
            engine: &engine,
            resumed_at: resumed
                .as_ref()
                .map(|m| engine.exchange(m.round + 1, 0).get()),
            saved_views: saved_views(resumed.as_ref(), k),
            view_board: view_board.clone(),
            to_rn,
            events: events.clone(),
            epoch,
        };
        let vns = self.start_vns(start).await?;
        tracing::info!(
            secs = started.elapsed().as_secs_f64(),
            vns = vns.addrs.len(),
            "start-up: virtual nodes listening"
        );
        // The RN task supervises its VN tasks: one that ends before the node does is reported and the rounds
        // go on without it (`RnInput::VnLost`), instead of the RN waiting for it for ever.
        let mut vn_tasks = tokio::task::JoinSet::new();
        let mut vn_aborts: Vec<_> = vns
            .tasks
            .into_iter()
            .map(|t| vn_tasks.spawn(t.run()))
            .collect();
        vn_aborts.extend(vns.proxies.into_iter().map(|p| vn_tasks.spawn(p)));
        let vn_ids = vn_aborts.iter().map(|a| a.id()).collect();

        let (status_tx, status_rx) = watch::channel(NodeStatus::default());
        let (stop_tx, stop_rx) = watch::channel(false);
        let rn = RnTask {
            index: self.index,
            engine,
            learner: Some(learner),
            vn_cmds: vns.commands,
            vn_tasks,
            vn_ids,
            lost: Vec::new(),
            from_vns,
            events: events.clone(),
            status: status_tx,
            stop: stop_rx,
            metrics_file,
            unsaved_checkpoints: 0,
            metrics_failing: false,
            checkpoints: checkpoints.map(|dir| super::rn_task::Checkpoints {
                dir,
                run,
                views: view_board.expect("made with the directory"),
            }),
            epoch,
            observer: self.observer.clone(),
            warmup: Duration::from_millis(self.timing.warmup_ms),
            prepare_lead: self.timing.prepare_lead(self.degree),
            link_stats: vns.link_stats,
            isolation,
            metrics: node_metrics,
        };
        tokio::spawn(rn.run());
        Ok((
            NodeHandle {
                status: status_rx,
                stop: Arc::new(stop_tx),
                addrs: Arc::new(vns.addrs),
                vn_tasks: Arc::new(vn_aborts),
            },
            events_rx,
        ))
    }

    /// The node's private stream for `purpose`, from its secret (`crate::secret`): derived from its first VN
    /// key, or from its link key when its VNs are hosted.
    pub(crate) fn private_rng(
        &self,
        purpose: crate::secret::Purpose,
    ) -> Result<rand_chacha::ChaCha12Rng> {
        let key = match (&self.remote, self.keys.first()) {
            (Some((link_key, _)), _) => link_key,
            (None, Some(key)) => key,
            (None, None) => {
                return Err(NodeError::Config(
                    "a node needs at least one virtual node key".into(),
                ));
            }
        };
        crate::secret::private_rng(key, purpose)
    }

    /// The contact board of the node's own VNs (none when they are hosted) and the RN's isolation watch (none
    /// when the peer list names no VN but the node's own: it runs alone by design).
    fn isolation_watch(
        &self,
        epoch: Instant,
    ) -> (
        Option<Arc<crate::net::contact::Contact>>,
        Option<super::isolation::IsolationWatch>,
    ) {
        let own: Vec<PeerId> = match &self.remote {
            Some((_, r)) => r.iter().map(|v| v.peer).collect(),
            None => self.keys.iter().map(|k| k.public().to_peer_id()).collect(),
        };
        let board = self
            .remote
            .is_none()
            .then(|| Arc::new(crate::net::contact::Contact::default()));
        let watch = super::isolation::IsolationWatch::new(
            self.isolation_timeout,
            epoch.elapsed(),
            board.clone(),
            &own,
            self.peers.allowed().copied(),
            self.peers.bootstrap(),
        );
        if watch.is_none() {
            tracing::info!(
                "the peer list names only this node's VNs: it runs alone, unwatched for isolation"
            );
        }
        (board.filter(|_| watch.is_some()), watch)
    }

    /// Refuses a configuration no node could run; returns k, the node's number of VNs.
    fn check(&self) -> Result<usize> {
        let k = match &self.remote {
            Some(_) if !self.keys.is_empty() => {
                return Err(NodeError::Config(
                    "a node's VNs are either its own keys or hosted (remote), not both".into(),
                ));
            }
            Some((_, r)) => r.len(),
            None => self.keys.len(),
        };
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
        if self.remote.is_none() && !(self.listen.len() == 1 || self.listen.len() == k) {
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
        if self.resume && self.checkpoints.is_none() {
            return Err(NodeError::Config(
                "resume needs a checkpoint directory".into(),
            ));
        }
        if !(0.0..=1.0).contains(&self.dropout) {
            return Err(NodeError::Config(format!(
                "dropout rate {} is not in [0, 1]",
                self.dropout
            )));
        }
        Ok(k)
    }

    /// The node's model and data: the one given, or this node's share of the learning config's data set
    /// (loaded off the async runtime).
    async fn load_learner(&mut self, started: std::time::Instant) -> Result<Learner> {
        if let Some(l) = self.learner.take() {
            return Ok(l);
        }
        let (learning, index, device) = (self.learning.clone(), self.index, self.device);
        let l = tokio::task::spawn_blocking(move || -> Result<Learner> {
            let (split, parts) = learning.load()?;
            let learners = match device {
                Some(d) => learning.learners_on(&split, &parts, [index], |_| d)?,
                None => learning.learners(&split, &parts, [index])?,
            };
            Ok(learners.into_iter().next().expect("one index, one learner"))
        })
        .await
        .map_err(|e| NodeError::Config(format!("loading data panicked: {e}")))??;
        tracing::info!(
            secs = started.elapsed().as_secs_f64(),
            "start-up: data loaded"
        );
        Ok(l)
    }

    /// The algorithm for k VNs (the builder's, or Shatter / EL by k) over the run's chunk partition.
    fn build_algorithm(
        &mut self,
        k: usize,
        learner: &Learner,
    ) -> Result<(AlgoSpec, Box<dyn crate::algo::Algorithm>)> {
        let spec = self.algorithm.unwrap_or_else(|| AlgoSpec::from_vns(k));
        spec.check_vns(k)
            .map_err(|e| NodeError::Config(e.to_string()))?;
        let chunks = spec.chunks(k);
        let d = learner.model.num_params();
        let partition = match self.partition.take() {
            Some(p) if p.k() == chunks && p.d() == d => p,
            Some(p) => {
                return Err(NodeError::Config(format!(
                    "partition has k = {}, d = {} but {spec} cuts {chunks} chunks of d = {d}",
                    p.k(),
                    p.d(),
                )));
            }
            None => Arc::new(self.learning.chunk_partition(&learner.model, chunks)?),
        };
        let private = self.private_rng(crate::secret::Purpose::Algorithm)?;
        let algorithm = spec
            .build(partition, self.learning.seed, private)
            .map_err(|e| NodeError::Config(e.to_string()))?;
        Ok((spec, algorithm))
    }

    /// With `resume`, the last checkpoint of this run (checked against `run`) restored into `learner`.
    async fn resume_from(
        &self,
        checkpoints: Option<&crate::checkpoint::CheckpointDir>,
        run: &crate::checkpoint::RunIdentity,
        learner: Learner,
        started: std::time::Instant,
    ) -> Result<(Learner, Option<crate::checkpoint::CheckpointMeta>)> {
        let Some(dir) = checkpoints.filter(|_| self.resume) else {
            return Ok((learner, None));
        };
        let Some(meta) = dir.latest()? else {
            tracing::info!(dir = %dir.path().display(), "no checkpoint to resume from: starting at round 0");
            return Ok((learner, None));
        };
        meta.check(run)?;
        let (dir2, meta2, mut l) = (dir.clone(), meta.clone(), learner);
        let learner = tokio::task::spawn_blocking(move || -> Result<Learner> {
            dir2.restore(&meta2, &mut l)?;
            Ok(l)
        })
        .await
        .map_err(|e| NodeError::Config(format!("restoring panicked: {e}")))??;
        tracing::info!(round = %meta.round, dir = %dir.path().display(), secs = started.elapsed().as_secs_f64(), "resuming from a checkpoint");
        Ok((learner, Some(meta)))
    }

    /// The round engine: the algorithm, this node's dropout schedule, and the round it starts at.
    fn engine(
        &self,
        algorithm: Box<dyn crate::algo::Algorithm>,
        resumed: Option<&crate::checkpoint::CheckpointMeta>,
    ) -> Result<RnEngine> {
        // From the node secret: a schedule drawn from the run seed and the node's index let any participant
        // compute which rounds each node sits out, and match its VNs by their common absences.
        let schedule = crate::engine::dropout::participation(
            self.dropout,
            self.rounds,
            &mut self.private_rng(crate::secret::Purpose::Dropout)?,
        );
        // Before any round was timed, a round sat out lasts twice the overlay's 4r proposal sub-steps (about
        // two overlay windows).
        let first_idle = 2
            * Duration::from_millis(self.timing.substep_ms)
            * sampling::OverlayConfig::new(self.degree, Duration::from_millis(1)).substeps;
        let engine = RnEngine::new(algorithm, self.rounds)?
            .with_participation(schedule, first_idle)
            .starting_at(resumed.map_or(protocol::Round::ZERO, |m| m.round + 1));
        // Copies from hosted VNs are held to what a VN takes off the wire: at most one per neighbour (the
        // degree; with directed push, any listed peer may draw a VN). An in-process VN has already run exactly
        // these checks on every copy it hands over, so its copies are not checked twice.
        let engine = if self.remote.is_some() {
            let per_exchange = match engine.graph() {
                crate::algo::Graph::Push => self.peers.len().max(1),
                _ => self.degree,
            };
            let chunk_lens = std::sync::Arc::new(engine.chunk_lens());
            engine.with_copy_limits(crate::engine::CopyLimits {
                chunk_lens,
                values: self.value_bounds,
                per_exchange,
            })
        } else {
            engine
        };
        let largest = engine.chunk_lens().iter().copied().max().unwrap_or(0);
        if largest > protocol::chunk::MAX_CHUNK_VALUES {
            return Err(NodeError::Config(format!(
                "a chunk of {largest} values exceeds the protocol's {} (use more virtual nodes)",
                protocol::chunk::MAX_CHUNK_VALUES
            )));
        }
        Ok(engine)
    }

    /// The metrics file, if one is configured; a resumed node's checkpoint round gets its line if the crash
    /// came before it was written.
    fn open_metrics_file(
        &self,
        resumed: Option<&crate::checkpoint::CheckpointMeta>,
    ) -> Result<Option<MetricsFile>> {
        let Some(p) = &self.metrics_path else {
            return Ok(None);
        };
        let mut f = MetricsFile::open(p, self.disk.clone())?;
        if let Some(meta) = resumed {
            f.count_lost(meta.metrics_lines_unsaved);
            if f.last_round(self.index)?.is_none_or(|r| r < meta.round)
                && let Err(e) = f.append(self.index, &mut meta.metrics.clone())
            {
                // Kept, and written before the next line when the disk takes it.
                tracing::warn!(path = %p.display(), error = %e, "could not write the resumed round's metrics line yet");
            }
        }
        Ok(Some(f))
    }

    /// The timeouts the node's VNs use (the handshake's from the timing).
    fn vn_timeouts(&self) -> Timeouts {
        Timeouts {
            handshake: Duration::from_millis(self.timing.handshake_timeout_ms),
            peer_silence: Duration::from_millis(self.timing.peer_silence_ms),
            ..self.timeouts
        }
    }

    /// What every VN of this node needs from its run: in-process VNs are built from it here, hosted ones
    /// (`node vn`) from the same setup sent over the link.
    fn vn_setup(&self, vn: PeerId, engine: &RnEngine, resumed_at: Option<u64>) -> VnSetup {
        let timeouts = self.vn_timeouts();
        VnSetup {
            vn: vn.to_string(),
            degree: self.degree,
            timing: self.timing.clone(),
            exchanges: engine.exchanges(),
            chunk_lens: engine.chunk_lens(),
            graph: engine.graph(),
            // The VNs stay out of the overlays of the rounds the node sits out.
            skip: engine.skipped_exchanges().iter().map(|r| r.get()).collect(),
            per_edge: engine.per_edge(),
            values: self.value_bounds,
            seed: self.learning.seed,
            chunk_request_ms: timeouts.chunk_request.as_millis() as u64,
            control_request_ms: timeouts.control_request.as_millis() as u64,
            idle_connection_ms: timeouts.idle_connection.as_millis() as u64,
            resumed_at,
        }
    }

    /// Binds the node's own VNs and starts its hosted ones (over the link).
    async fn start_vns(&mut self, start: VnStart<'_>) -> Result<StartedVns> {
        let VnStart {
            contact,
            engine,
            resumed_at,
            mut saved_views,
            view_board,
            to_rn,
            events,
            epoch,
        } = start;
        // Catch-up probes ask listed peers other than this node's own VNs (those are exactly as far behind);
        // a resumed node counts the round it resumes at as its own from the start and probes as it joins. Only
        // in-process VNs are told their siblings: a VN host learns nothing of the node's other VNs (issue 43).
        let own: Vec<PeerId> = self.keys.iter().map(|k| k.public().to_peer_id()).collect();
        let peers = Arc::new(std::mem::take(&mut self.peers));
        let mut vns = StartedVns::default();
        for (s, key) in std::mem::take(&mut self.keys).into_iter().enumerate() {
            let setup = self.vn_setup(key.public().to_peer_id(), engine, resumed_at);
            let (task, tx, me) = setup
                .build(super::vn_setup::VnPlace {
                    key,
                    listen: self.listen[s.min(self.listen.len() - 1)].clone(),
                    announce: self.announce.get(s).cloned(),
                    peers: peers.clone(),
                    psk: self.psk,
                    index: s,
                    node: self.index,
                    to_rn: to_rn.clone(),
                    events: events.clone(),
                    epoch,
                    observer: self.observer.clone(),
                    restored_view: std::mem::take(&mut saved_views[s]),
                    view_board: view_board.clone(),
                    own: own.clone(),
                    contact: contact.clone(),
                    telemetry: self.telemetry.clone(),
                })
                .await?;
            vns.commands.push(tx);
            vns.tasks.push(task);
            vns.addrs.push(me);
        }
        if let Some((link_key, remotes)) = self.remote.take() {
            let setups = remotes
                .iter()
                .map(|r| self.vn_setup(r.peer, engine, resumed_at))
                .collect();
            let (started, stats) = super::remote_vn::start(
                link_key,
                &remotes,
                setups,
                self.vn_timeouts().handshake,
                to_rn,
            )
            .await?;
            vns.link_stats = Some(stats);
            for p in started {
                vns.commands.push(p.commands);
                vns.addrs.push(p.addr);
                vns.proxies.push(p.task);
            }
        }
        Ok(vns)
    }
}

/// What [`NodeBuilder::start_vns`] needs from the rest of start-up.
struct VnStart<'a> {
    /// The board the node's own VNs report their connections on, if the RN watches for isolation.
    contact: Option<Arc<crate::net::contact::Contact>>,
    engine: &'a RnEngine,
    /// The exchange a resumed node starts at: its VNs count it as their own and probe as they join.
    resumed_at: Option<u64>,
    /// Each VN's Cyclon view from the checkpoint resumed from (empty otherwise).
    saved_views: Vec<Vec<protocol::control::ViewEntry<VnAddr>>>,
    view_board: Option<crate::checkpoint::ViewBoard>,
    to_rn: mpsc::Sender<(usize, protocol::rnvn::FromVirtualNode)>,
    events: EventSink,
    epoch: Instant,
}

/// The node's VNs once started: in-process tasks, proxies of hosted VNs, their command channels and
/// addresses (in VN order), and the link's statistics if any VN is hosted.
#[derive(Default)]
struct StartedVns {
    commands: Vec<mpsc::Sender<protocol::rnvn::ToVirtualNode>>,
    addrs: Vec<VnAddr>,
    tasks: Vec<crate::net::vn_task::VnTask>,
    proxies: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>,
    link_stats: Option<Arc<crate::net::link::LinkStats>>,
}

/// Each VN's saved Cyclon view from the checkpoint `resumed` from, k of them (empty without one).
fn saved_views(
    resumed: Option<&crate::checkpoint::CheckpointMeta>,
    k: usize,
) -> Vec<Vec<protocol::control::ViewEntry<VnAddr>>> {
    let mut views: Vec<Vec<_>> = resumed
        .map(|m| {
            m.views
                .iter()
                .map(|v| v.iter().filter_map(|e| e.restore()).collect())
                .collect()
        })
        .unwrap_or_default();
    views.resize(k, Vec::new());
    views
}

#[cfg(test)]
mod tests {
    use super::*;
    use models::data::DatasetSpec;
    use models::data::partition::Partition;
    use models::nn::ModelSpec;
    use models::train::{LocalWork, TrainConfig};
    use protocol::Round;

    fn learning(seed: u64) -> LearningConfig {
        LearningConfig {
            dataset: DatasetSpec::default(),
            model: Some(ModelSpec::Mlp { hidden: vec![4] }),
            partition: Partition::Iid,
            nodes: 4,
            train: TrainConfig {
                lr: 0.1,
                batch_size: 8,
                work: LocalWork::Steps(1),
                clip: None,
            },
            seed,
            max_test_samples: Some(10),
        }
    }

    /// The chunks a GHP algorithm built with `private` sends in round 0 from `params`.
    fn ghp_chunks(private: rand_chacha::ChaCha12Rng, d: usize) -> Vec<Vec<f32>> {
        let partition = Arc::new(ChunkPartition::new(&[d], 2, 1).unwrap());
        let mut a = AlgoSpec::Ghp { sigma: 0.5 }
            .build(partition, 1, private)
            .unwrap();
        a.begin_round(Round::ZERO);
        let params = vec![0.25f32; d];
        a.outgoing(Round::ZERO, 0, &params)
            .unwrap()
            .into_iter()
            .map(|(_, p)| match p {
                crate::algo::Payload::Broadcast(f) => f.values,
                crate::algo::Payload::PerNeighbour => Vec::new(),
            })
            .collect()
    }

    /// DESIGN §7, the deviating insider: every participant knows the run seed and every node's index. When a
    /// node's GHP noise came from `vn_rng(seed, index, Algorithm)`, an insider rebuilt the node's algorithm,
    /// drew the same noise, subtracted it from the chunks it received, and — trying each index — named their
    /// sender. Drawn from the node secret, the noise matches none of the streams the insider can compute; the
    /// node's own stream is the same after a restart with the same keys.
    #[test]
    fn an_insider_cannot_regenerate_a_nodes_noise_from_the_run_seed_and_its_index() {
        let (seed, index, d) = (1, 2, 64);
        let keys = vec![Keypair::generate_ed25519(), Keypair::generate_ed25519()];
        let node = NodeBuilder::new(keys.clone(), learning(seed), index);
        let sent = ghp_chunks(
            node.private_rng(crate::secret::Purpose::Algorithm).unwrap(),
            d,
        );
        for guess in 0..8 {
            let regenerated = ghp_chunks(AlgoSpec::simulated_private(seed, guess), d);
            assert_ne!(
                sent, regenerated,
                "the noise of node {index} regenerated as index {guess}"
            );
        }
        let restarted = NodeBuilder::new(keys, learning(seed), index);
        let again = ghp_chunks(
            restarted
                .private_rng(crate::secret::Purpose::Algorithm)
                .unwrap(),
            d,
        );
        assert_eq!(sent, again, "the same keys draw the same private stream");
        let other = NodeBuilder::new(vec![Keypair::generate_ed25519()], learning(seed), index);
        let theirs = ghp_chunks(
            other
                .private_rng(crate::secret::Purpose::Algorithm)
                .unwrap(),
            d,
        );
        assert_ne!(sent, theirs, "another node's keys draw another stream");
    }

    /// Issue 43: what a node sends a VN host to set up one VN names no other VN of the node. The setup used to
    /// carry the node's whole list of VN PeerIds (for catch-up probes to skip), which tied the node's VNs
    /// together for whoever runs a host.
    #[test]
    fn a_vn_setup_names_no_other_vn_of_the_node() {
        let keys: Vec<Keypair> = (0..4).map(|_| Keypair::generate_ed25519()).collect();
        let ids: Vec<PeerId> = keys.iter().map(|k| k.public().to_peer_id()).collect();
        let node = NodeBuilder::new(keys, learning(1), 0);
        let partition = Arc::new(ChunkPartition::new(&[10], 4, 1).unwrap());
        let engine = RnEngine::new(crate::algo::shatter_or_el(partition), 3).unwrap();
        let bytes = node.vn_setup(ids[0], &engine, None).encode().unwrap();
        let holds = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
        assert!(holds(ids[0].to_string().as_bytes()), "it names its own VN");
        for other in &ids[1..] {
            assert!(
                !holds(other.to_string().as_bytes()) && !holds(&other.to_bytes()),
                "the setup names sibling {other}"
            );
        }
    }
}
