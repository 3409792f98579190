//! The in-memory driver: n real nodes × k virtual nodes running the same round engine as the libp2p shell,
//! over `sampling::sim::Network` (virtual clock, latency, loss, crashes). Deterministic for a seed: training
//! is real (Candle on this machine) but happens at virtual instants, and its virtual duration is drawn from
//! the seeded RNG, so wall-clock speed never changes a result.
//!
//! Used by the node's in-memory tests and by `testnet --mode sim` for networks of 1,000+ VNs.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use models::chunking::ChunkPartition;
use protocol::ChunkFrame;
use protocol::Round;
use protocol::rnvn::{FromVirtualNode, ToVirtualNode};
use rand::Rng;
use rand::seq::index::sample;
use rand_chacha::ChaCha12Rng;
use sampling::sim::{Event, NetConfig, Network};
use sampling::{CyclonConfig, OverlayConfig, SamplerConfig, Stream, derive_rng, vn_rng};

use crate::algo::{AlgoSpec, Algorithm};
use crate::engine::{
    RefusalKind, ReplyToken, RnDriver, RnEngine, RnInput, RnOutput, RoundMetrics, SendPace,
    ValueBounds, VnConfig, VnDriver, VnEngine, VnInput, VnRun, VnTiming, route_rn, route_vn,
};
use crate::learner::{Learner, Trained};
use crate::observe::{Arrival, Observer, notify_round_start};
use crate::{NodeError, Result};

/// Bootstrap entries each VN starts with (drawn at random from the peer list, as an operator would give a
/// node a few known peers).
pub const BOOTSTRAP_ENTRIES: usize = 4;

/// Timing and shape of a simulated network. Durations are virtual.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub vns: usize,
    pub degree: usize,
    pub rounds: u64,
    pub seed: u64,
    pub net: NetConfig,
    pub cyclon: CyclonConfig,
    pub overlay: OverlayConfig,
    pub exchange_timeout: Duration,
    /// Upper bound of each VN's random delay before sending its chunk.
    pub send_jitter: Duration,
    /// The earliest each VN sends, from its node's start of the round (`VnConfig::send_pace`).
    pub send_pace: SendPace,
    /// Rounds whose overlay a VN negotiates ahead of its node's round (as `Timing::overlay_lookahead`).
    pub lookahead: u64,
    /// Virtual duration of one local training: uniform in [train_time·(1−jitter), train_time·(1+jitter)].
    pub train_time: Duration,
    pub train_jitter: f64,
    /// Cyclon gossip before round 0, so views are mixed when the first overlay is built.
    pub warmup: Duration,
    /// The bound every VN puts on received values ([`ValueBounds`]; issue 14).
    pub values: ValueBounds,
    /// The algorithm every node runs (`None`: EL with one VN, Shatter with more).
    pub algorithm: Option<AlgoSpec>,
    /// Dropout rate: each round each RN sits out with this probability (Appendix E's model,
    /// `engine/dropout.rs`; 0: every node takes part in every round).
    pub dropout: f64,
    /// One node held back (issue 15, catch-up): RN `.0`'s training of round `.1` takes `.2` longer, as a
    /// node paused (SIGSTOP) or stuck would. Its VNs keep running; the network moves on without it.
    pub stall: Option<(usize, Round, Duration)>,
}

impl SimConfig {
    /// Defaults for k VNs per node and degree r: Cyclon c = 20, l = 8 every second (DESIGN §5 asks for
    /// ≥ 4 shuffles per round), 100 ms overlay sub-steps over 1-50 ms links, 10 s of training.
    pub fn new(vns: usize, degree: usize, rounds: u64, seed: u64) -> Self {
        Self {
            vns,
            degree,
            rounds,
            seed,
            net: NetConfig::default(),
            cyclon: CyclonConfig::default(),
            overlay: OverlayConfig::new(degree, Duration::from_millis(100)),
            exchange_timeout: Duration::from_secs(10),
            send_jitter: Duration::from_secs(1),
            send_pace: SendPace::default(),
            // The loopback timing's lookahead.
            lookahead: crate::runtime::LOOPBACK_LOOKAHEAD,
            train_time: Duration::from_secs(10),
            train_jitter: 0.2,
            warmup: Duration::from_secs(20),
            values: ValueBounds::default(),
            algorithm: None,
            dropout: 0.0,
            stall: None,
        }
    }

    /// The timing every simulated VN runs on (its configuration is then made by [`VnConfig::new`], as a
    /// node's is from its [`crate::Timing`]).
    pub fn vn_timing(&self) -> VnTiming {
        VnTiming {
            sampler: SamplerConfig {
                cyclon: self.cyclon.clone(),
                overlay: self.overlay.clone(),
            },
            exchange_timeout: self.exchange_timeout,
            send_jitter: self.send_jitter,
            send_pace: self.send_pace,
            lookahead: self.lookahead,
        }
    }

    /// The algorithm the nodes run.
    pub fn algorithm(&self) -> AlgoSpec {
        self.algorithm
            .unwrap_or_else(|| AlgoSpec::from_vns(self.vns))
    }
}

/// Messages between simulated VNs.
#[derive(Debug, Clone)]
enum Wire {
    Control(Vec<u8>),
    Chunk {
        bytes: Arc<Vec<u8>>,
        token: u64,
    },
    Reply {
        round: Round,
        bytes: Vec<u8>,
    },
    /// A catch-up probe's question, and its answer (`/shatter/round/1` in a real node).
    RoundQuery {
        token: u64,
    },
    RoundAnswer(Vec<u8>),
}

/// What a finished simulation reports.
#[derive(Debug, Clone)]
pub struct SimReport {
    /// `metrics[rn]` is RN `rn`'s per-round metrics.
    pub metrics: Vec<Vec<RoundMetrics>>,
    /// Virtual time at the end.
    pub virtual_secs: f64,
    /// Messages the network carried and lost.
    pub messages: u64,
    pub lost: u64,
}

/// An engine input waiting its turn (inputs caused at one virtual instant are handled in order).
enum Work {
    Vn(u32, VnInput<u32>),
    Rn(usize, RnInput),
}

/// Runs `learners.len()` real nodes with `cfg.vns` VNs each for `cfg.rounds` rounds of `cfg.algorithm()`,
/// over `partition` (the model cut into `cfg.algorithm().chunks(cfg.vns)` chunks). `on_round(rn, metrics)` is
/// called as each RN finishes a round (progress display).
pub fn run(
    cfg: &SimConfig,
    learners: Vec<Learner>,
    partition: Arc<ChunkPartition>,
    on_round: impl FnMut(usize, &RoundMetrics),
) -> Result<SimReport> {
    run_observed(cfg, learners, partition, on_round, None)
}

/// [`run`] with an [`Observer`]. VN `g` (the sender id the observer sees) belongs to real node `g / cfg.vns`;
/// observer calls happen on this thread, in the simulation's deterministic order.
pub fn run_observed(
    cfg: &SimConfig,
    learners: Vec<Learner>,
    partition: Arc<ChunkPartition>,
    on_round: impl FnMut(usize, &RoundMetrics),
    observer: Option<&dyn Observer<u32>>,
) -> Result<SimReport> {
    let spec = cfg.algorithm();
    spec.check_vns(cfg.vns)
        .map_err(|e| NodeError::Config(e.to_string()))?;
    let chunks = spec.chunks(cfg.vns);
    if partition.k() != chunks {
        return Err(NodeError::Config(format!(
            "partition has {} chunks; {spec} with {} VNs cuts {chunks}",
            partition.k(),
            cfg.vns
        )));
    }
    let algos = (0..learners.len() as u64)
        .map(|rn| {
            spec.build(
                partition.clone(),
                cfg.seed,
                AlgoSpec::simulated_private(cfg.seed, rn),
            )
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| NodeError::Config(e.to_string()))?;
    run_algorithms(cfg, learners, algos, on_round, observer)
}

/// [`run_observed`] with the algorithm each real node runs given, one per learner (all with `cfg.vns` VNs).
/// For harnesses and tests that run nodes unlike the rest — e.g. a test's wrapper that makes one node send
/// poisoned values, so that the honest nodes' defences are exercised through the real engines — without any
/// such behaviour in the node itself.
pub fn run_algorithms(
    cfg: &SimConfig,
    learners: Vec<Learner>,
    algos: Vec<Box<dyn Algorithm>>,
    mut on_round: impl FnMut(usize, &RoundMetrics),
    observer: Option<&dyn Observer<u32>>,
) -> Result<SimReport> {
    let mut sim = Sim::new(cfg, learners, algos, observer)?;
    while sim.finished < sim.rns.len() {
        let Some((now, ev)) = sim.fabric.net.pop_until(Duration::MAX) else {
            return Err(NodeError::Config(
                "simulation ran out of events before finishing".into(),
            ));
        };
        sim.on_event(now, ev);
        sim.drain_work(now, &mut on_round)?;
    }
    Ok(SimReport {
        metrics: sim.metrics,
        virtual_secs: sim.fabric.net.now().as_secs_f64(),
        messages: sim.fabric.net.sent,
        lost: sim.fabric.net.lost,
    })
}

/// What a network observer on the link sees of a message: its kind and round, decoded only for that.
fn classify(msg: &Wire) -> Arrival {
    match msg {
        Wire::Control(bytes) => crate::observe::classify_control::<u32>(bytes),
        Wire::Chunk { bytes, .. } => crate::observe::classify_chunk(bytes),
        Wire::Reply { .. } | Wire::RoundQuery { .. } | Wire::RoundAnswer(_) => Arrival::Control,
    }
}

/// The simulated network and everything the engines' outputs act on.
struct Fabric {
    net: Network<Wire>,
    /// Inbound chunk requests awaiting a reply: token → (sender VN, round).
    tokens: BTreeMap<u64, (u32, Round)>,
    /// Inbound round queries awaiting an answer: token → asking VN (tokens shared with chunk requests).
    queries: BTreeMap<u64, u32>,
    next_token: u64,
    /// Each VN's pending wake-up.
    wake: Vec<Option<Duration>>,
    work: VecDeque<Work>,
}

/// n RNs × k VNs on one [`Fabric`]. VN `g` is VN `g % k` of RN `g / k`; RN `rn`'s timer lives on network
/// index `n·k + rn`.
struct Sim<'a> {
    cfg: &'a SimConfig,
    k: usize,
    fabric: Fabric,
    vns: Vec<VnEngine<u32>>,
    rns: Vec<RnEngine>,
    learners: Vec<Learner>,
    /// Training done at a virtual instant, handed to the RN when its virtual training time is over.
    trained: Vec<Option<Trained>>,
    /// Rounds RNs sit out (dropout), until their idle timer fires.
    idling: Vec<Option<Round>>,
    started: Vec<bool>,
    metrics: Vec<Vec<RoundMetrics>>,
    finished: usize,
    /// Virtual training durations and bootstrap choices.
    rng: ChaCha12Rng,
    observer: Option<&'a dyn Observer<u32>>,
}

impl<'a> Sim<'a> {
    fn new(
        cfg: &'a SimConfig,
        learners: Vec<Learner>,
        algos: Vec<Box<dyn Algorithm>>,
        observer: Option<&'a dyn Observer<u32>>,
    ) -> Result<Self> {
        let n = learners.len();
        let k = cfg.vns;
        let total = n * k;
        if n == 0 || cfg.degree >= total {
            return Err(NodeError::Config(format!(
                "degree {} needs more than {} virtual nodes ({} nodes × {k})",
                cfg.degree, total, n
            )));
        }
        if algos.len() != n || algos.iter().any(|a| a.virtual_nodes() != k) {
            return Err(NodeError::Config(format!(
                "{} algorithms for {n} nodes, each needs {k} VNs",
                algos.len()
            )));
        }
        if !(0.0..=1.0).contains(&cfg.dropout) {
            return Err(NodeError::Config(format!(
                "dropout rate {} is not in [0, 1]",
                cfg.dropout
            )));
        }
        // A round sat out lasts about as long as a round: training, then the overlay window.
        let first_idle = cfg.train_time + cfg.overlay.deadline();
        let rns = algos
            .into_iter()
            .enumerate()
            .map(|(rn, a)| {
                let schedule = crate::engine::dropout::participation(
                    cfg.dropout,
                    cfg.rounds,
                    &mut vn_rng(cfg.seed, rn as u64, Stream::Dropout),
                );
                RnEngine::new(a, cfg.rounds).map(|e| e.with_participation(schedule, first_idle))
            })
            .collect::<Result<Vec<_>>>()?;
        let chunk_lens = Arc::new(rns[0].chunk_lens());
        // Every VN knows the network's size, as a node knows its peer list's.
        let run = VnRun {
            network_size: Some(total),
            exchanges: rns[0].exchanges(),
            chunk_lens,
            graph: rns[0].graph(),
            // Per-edge algorithms (PDMM) get every copy with its edge slot.
            edge_slots: rns[0].per_edge(),
            skip: Arc::default(),
            values: cfg.values,
        };
        let timing = cfg.vn_timing();
        let net: Network<Wire> = Network::new(cfg.net.clone(), derive_rng(cfg.seed, u64::MAX));
        let rng = derive_rng(cfg.seed, u64::MAX - 1);
        // A VN stays out of the overlays of the rounds its RN sits out (one set per RN, shared by its VNs).
        let skips: Vec<Arc<_>> = rns
            .iter()
            .map(|r| Arc::new(r.skipped_exchanges()))
            .collect();
        let vns = (0..total as u32)
            .map(|g| {
                // Distinct streams per VN: siblings share no randomness (DESIGN §5). A VN stays out of the
                // overlays of the rounds its RN sits out (one set per RN, shared by its VNs).
                let run = VnRun {
                    skip: skips[g as usize / k].clone(),
                    ..run.clone()
                };
                // Catch-up probes ask any other VN, never a sibling, as a node's own VNs do.
                let first = g - g % k as u32;
                let siblings = (first..first + k as u32).collect();
                VnEngine::new(
                    g,
                    VnConfig::new(&timing, run),
                    vn_rng(cfg.seed, g as u64, Stream::Cyclon),
                    vn_rng(cfg.seed, g as u64, Stream::Overlay),
                    Box::new(|_| true),
                )
                .map(|e| e.with_round_probes((0..total as u32).collect(), siblings, None))
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let mut sim = Self {
            cfg,
            k,
            fabric: Fabric {
                net,
                tokens: BTreeMap::new(),
                queries: BTreeMap::new(),
                next_token: 0,
                wake: vec![None; total],
                work: VecDeque::new(),
            },
            vns,
            rns,
            learners,
            trained: (0..n).map(|_| None).collect(),
            idling: vec![None; n],
            started: vec![false; n],
            metrics: vec![Vec::new(); n],
            finished: 0,
            rng,
            observer,
        };
        // Join: each VN gets a few random bootstrap entries.
        for g in 0..total as u32 {
            let boot: Vec<u32> = sample(&mut sim.rng, total, BOOTSTRAP_ENTRIES.min(total - 1) + 1)
                .into_iter()
                .map(|i| i as u32)
                .filter(|&i| i != g)
                .take(BOOTSTRAP_ENTRIES)
                .collect();
            let out = sim.vns[g as usize].join(Duration::ZERO, boot);
            let mut port = sim.fabric.vn_port(g, k, observer);
            route_vn(&sim.vns[g as usize], out, &mut port);
        }
        for rn in 0..n {
            sim.fabric.net.timer((total + rn) as u32, cfg.warmup, 0);
        }
        Ok(sim)
    }

    /// Turns one network event into engine work.
    fn on_event(&mut self, now: Duration, ev: Event<Wire>) {
        let total = self.vns.len();
        let work = match ev {
            Event::Deliver { from, to, msg } => {
                if let Some(o) = self.observer.filter(|o| o.wants_arrivals()) {
                    let (node, vn) = (to as usize / self.k, to as usize % self.k);
                    o.arrival(node, vn, &from, now, classify(&msg));
                }
                let input = match msg {
                    Wire::Control(bytes) => VnInput::Control { from, bytes },
                    Wire::Chunk { bytes, token } => VnInput::Chunk { from, bytes, token },
                    Wire::Reply { round, bytes } => VnInput::ChunkReply { from, round, bytes },
                    Wire::RoundQuery { token } => VnInput::RoundQuery {
                        from,
                        bytes: Vec::new(),
                        token,
                    },
                    Wire::RoundAnswer(bytes) => VnInput::RoundAnswer { from, bytes },
                };
                Work::Vn(to, input)
            }
            Event::SendFailed { from, to } => Work::Vn(from, VnInput::SendFailed { to }),
            Event::Timer { node, .. } if (node as usize) < total => {
                let wake = &mut self.fabric.wake[node as usize];
                if wake.is_some_and(|w| w <= now) {
                    *wake = None;
                }
                Work::Vn(node, VnInput::Tick)
            }
            Event::Timer { node, .. } => {
                let rn = node as usize - total;
                if !self.started[rn] {
                    self.started[rn] = true;
                    Work::Rn(rn, RnInput::Start)
                } else if let Some(t) = self.trained[rn].take() {
                    let round = self.rns[rn].round();
                    Work::Rn(
                        rn,
                        RnInput::Trained {
                            round,
                            params: t.params,
                            train_loss: t.train_loss,
                            secs: t.secs,
                        },
                    )
                } else if let Some(round) = self.idling[rn].take() {
                    // A round sat out is over: the unchanged model's evaluation is the round's.
                    let (eval, secs) = match self.learners[rn].evaluate() {
                        Ok(e) => e,
                        Err(e) => {
                            tracing::error!(rn, error = %e, "evaluation failed");
                            return;
                        }
                    };
                    Work::Rn(
                        rn,
                        RnInput::Evaluated {
                            round,
                            metric_name: eval.metric_kind(),
                            metric: eval.metric(),
                            loss: eval.mean_loss(),
                            secs,
                        },
                    )
                } else {
                    return;
                }
            }
        };
        self.fabric.work.push_back(work);
    }

    /// Handles queued inputs (and the inputs they cause) until none is left at this instant.
    fn drain_work(
        &mut self,
        now: Duration,
        on_round: &mut impl FnMut(usize, &RoundMetrics),
    ) -> Result<()> {
        let total = self.vns.len() as u32;
        while let Some(w) = self.fabric.work.pop_front() {
            match w {
                Work::Vn(g, input) => {
                    let out = self.vns[g as usize].handle(now, input);
                    let mut port = self.fabric.vn_port(g, self.k, self.observer);
                    route_vn(&self.vns[g as usize], out, &mut port);
                }
                Work::Rn(rn, input) => {
                    // Wall-clock time of the aggregation, reported beside the virtual times.
                    #[allow(clippy::disallowed_methods)]
                    // a measurement, not an input to the engine
                    let t = std::time::Instant::now();
                    let out = self.rns[rn].handle(now, input);
                    if out.iter().any(|o| matches!(o, RnOutput::Evaluate { .. })) {
                        self.rns[rn].set_aggregate_secs(t.elapsed().as_secs_f64());
                    }
                    let mut port = RnPort {
                        rn,
                        now,
                        first_vn: rn as u32 * self.k as u32,
                        rn_timer: total + rn as u32,
                        cfg: self.cfg,
                        fabric: &mut self.fabric,
                        learner: &mut self.learners[rn],
                        trained: &mut self.trained[rn],
                        idling: &mut self.idling[rn],
                        metrics: &mut self.metrics[rn],
                        finished: &mut self.finished,
                        rng: &mut self.rng,
                        observer: self.observer,
                        on_round: &mut *on_round,
                    };
                    route_rn(self.k, out, &mut port)?;
                }
            }
        }
        Ok(())
    }
}

impl Fabric {
    fn vn_port<'b>(
        &'b mut self,
        g: u32,
        k: usize,
        observer: Option<&'b dyn Observer<u32>>,
    ) -> VnPort<'b> {
        VnPort {
            g,
            k,
            fabric: self,
            observer,
        }
    }
}

/// VN `g`'s outputs on the simulated network.
struct VnPort<'a> {
    g: u32,
    k: usize,
    fabric: &'a mut Fabric,
    observer: Option<&'a dyn Observer<u32>>,
}

impl VnDriver<u32> for VnPort<'_> {
    fn send_control(&mut self, to: u32, bytes: Vec<u8>) {
        self.fabric.net.send(self.g, to, Wire::Control(bytes));
    }

    fn send_chunk(&mut self, to: u32, round: Round, bytes: Arc<Vec<u8>>) {
        let f = &mut *self.fabric;
        f.next_token += 1;
        f.tokens.insert(f.next_token, (self.g, round));
        let token = f.next_token;
        f.net.send(self.g, to, Wire::Chunk { bytes, token });
    }

    fn reply(&mut self, token: ReplyToken, bytes: Vec<u8>) {
        if let Some((sender, round)) = self.fabric.tokens.remove(&token) {
            self.fabric
                .net
                .send(self.g, sender, Wire::Reply { round, bytes });
        }
    }

    fn send_round_query(&mut self, to: u32) {
        let f = &mut *self.fabric;
        f.next_token += 1;
        f.queries.insert(f.next_token, self.g);
        let token = f.next_token;
        f.net.send(self.g, to, Wire::RoundQuery { token });
    }

    fn reply_round(&mut self, token: ReplyToken, bytes: Vec<u8>) {
        if let Some(asker) = self.fabric.queries.remove(&token) {
            self.fabric
                .net
                .send(self.g, asker, Wire::RoundAnswer(bytes));
        }
    }

    fn to_rn(&mut self, msg: FromVirtualNode) {
        let (rn, vn) = (self.g as usize / self.k, self.g as usize % self.k);
        self.fabric
            .work
            .push_back(Work::Rn(rn, RnInput::FromVn { vn, msg }));
    }

    fn observe_copy(&mut self, from: &u32, frame: &ChunkFrame) {
        if let Some(o) = self.observer {
            o.chunk_received(
                self.g as usize / self.k,
                self.g as usize % self.k,
                from,
                frame,
            );
        }
    }

    fn refused(&mut self, from: u32, what: RefusalKind) {
        tracing::debug!(vn = self.g, from, ?what, "refused");
    }

    fn set_timer(&mut self, at: Duration) {
        // One pending wake-up per VN, moved earlier when needed; a stale later one only ticks idly.
        let wake = &mut self.fabric.wake[self.g as usize];
        if wake.is_none_or(|w| at < w) {
            *wake = Some(at);
            self.fabric.net.timer(self.g, at, 0);
        }
    }
}

/// RN `rn`'s outputs: its VNs' inputs queued, training and evaluation done at once, virtual training time
/// drawn from the seeded RNG.
struct RnPort<'a, F> {
    rn: usize,
    now: Duration,
    first_vn: u32,
    rn_timer: u32,
    cfg: &'a SimConfig,
    fabric: &'a mut Fabric,
    learner: &'a mut Learner,
    trained: &'a mut Option<Trained>,
    /// The round this RN sits out, until its idle timer fires.
    idling: &'a mut Option<Round>,
    metrics: &'a mut Vec<RoundMetrics>,
    finished: &'a mut usize,
    rng: &'a mut ChaCha12Rng,
    observer: Option<&'a dyn Observer<u32>>,
    on_round: &'a mut F,
}

impl<F: FnMut(usize, &RoundMetrics)> RnDriver for RnPort<'_, F> {
    type Error = NodeError;

    fn to_vn(&mut self, vn: usize, msg: ToVirtualNode) -> Result<()> {
        let g = self.first_vn + vn as u32;
        self.fabric
            .work
            .push_back(Work::Vn(g, VnInput::FromRn(msg)));
        Ok(())
    }

    fn train(&mut self, round: Round) -> Result<()> {
        let learner = &mut *self.learner;
        notify_round_start(self.observer, self.rn, round, || {
            learner.model.flat_params()
        })?;
        *self.trained = Some(learner.train()?);
        let j = self.cfg.train_jitter.clamp(0.0, 1.0);
        let f = 1.0 + j * (2.0 * self.rng.random::<f64>() - 1.0);
        let stall = match self.cfg.stall {
            Some((rn, r, extra)) if rn == self.rn && r == round => extra,
            _ => Duration::ZERO,
        };
        let at = self.now + self.cfg.train_time.mul_f64(f) + stall;
        self.fabric.net.timer(self.rn_timer, at, 0);
        Ok(())
    }

    fn evaluate(&mut self, round: Round, params: Vec<f32>) -> Result<()> {
        let (eval, secs) = self.learner.load_and_evaluate(&params)?;
        let input = RnInput::Evaluated {
            round,
            metric_name: eval.metric_kind(),
            metric: eval.metric(),
            loss: eval.mean_loss(),
            secs,
        };
        self.fabric.work.push_back(Work::Rn(self.rn, input));
        Ok(())
    }

    fn idle(&mut self, round: Round, wait: Duration) -> Result<()> {
        *self.idling = Some(round);
        self.fabric.net.timer(self.rn_timer, self.now + wait, 0);
        Ok(())
    }

    fn round_done(&mut self, m: RoundMetrics) -> Result<()> {
        (self.on_round)(self.rn, &m);
        self.metrics.push(m);
        Ok(())
    }

    fn failed(&mut self, why: String) -> Result<()> {
        Err(NodeError::Config(why))
    }

    fn finished(&mut self) -> Result<()> {
        *self.finished += 1;
        Ok(())
    }
}
