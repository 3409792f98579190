//! The in-memory driver: n real nodes × k virtual nodes running the same round engine as the libp2p shell,
//! over `sampling::sim::Network` (virtual clock, latency, loss, crashes). Deterministic for a seed: training
//! is real (Candle on this machine) but happens at virtual instants, and its virtual duration is drawn from
//! the seeded RNG, so wall-clock speed never changes a result.
//!
//! Used by the node's in-memory tests and by `testnet --mode sim` for networks of 1,000+ VNs.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use models::chunking::ChunkPartition;
use protocol::rnvn::{FromVirtualNode, ToVirtualNode};
use rand::Rng;
use rand::seq::index::sample;
use sampling::sim::{Event, NetConfig, Network};
use sampling::{CyclonConfig, OverlayConfig, derive_rng};

use crate::engine::{
    RnEngine, RnInput, RnOutput, RoundMetrics, VnConfig, VnEngine, VnInput, VnOutput,
};
use crate::learner::Learner;
use crate::observe::{Observer, notify_round_start};
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
    /// Virtual duration of one local training: uniform in [train_time·(1−jitter), train_time·(1+jitter)].
    pub train_time: Duration,
    pub train_jitter: f64,
    /// Cyclon gossip before round 0, so views are mixed when the first overlay is built.
    pub warmup: Duration,
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
            train_time: Duration::from_secs(10),
            train_jitter: 0.2,
            warmup: Duration::from_secs(20),
        }
    }
}

/// Messages between simulated VNs.
#[derive(Debug, Clone)]
enum Wire {
    Control(Vec<u8>),
    Chunk { bytes: Arc<Vec<u8>>, token: u64 },
    Reply { round: u64, bytes: Vec<u8> },
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

enum Work {
    Vn(u32, VnInput<u32>),
    Rn(usize, RnInput),
}

/// Runs `learners.len()` real nodes with `cfg.vns` VNs each for `cfg.rounds` rounds. `on_round(rn, metrics)`
/// is called as each RN finishes a round (progress display).
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
    mut learners: Vec<Learner>,
    partition: Arc<ChunkPartition>,
    mut on_round: impl FnMut(usize, &RoundMetrics),
    observer: Option<&dyn Observer<u32>>,
) -> Result<SimReport> {
    let n = learners.len();
    let k = cfg.vns;
    let total = n * k;
    if partition.k() != k {
        return Err(NodeError::Config(format!(
            "partition has {} chunks for {k} VNs",
            partition.k()
        )));
    }
    if n == 0 || cfg.degree >= total {
        return Err(NodeError::Config(format!(
            "degree {} needs more than {} virtual nodes ({} nodes × {k})",
            cfg.degree, total, n
        )));
    }
    let chunk_lens = Arc::new((0..k).map(|s| partition.chunk_len(s)).collect::<Vec<_>>());
    let vn_cfg = VnConfig {
        cyclon: cfg.cyclon.clone(),
        overlay: cfg.overlay.clone(),
        exchange_timeout: cfg.exchange_timeout,
        send_jitter: cfg.send_jitter,
        chunk_lens,
    };
    let mut net: Network<Wire> = Network::new(cfg.net.clone(), derive_rng(cfg.seed, u64::MAX));
    let mut rng = derive_rng(cfg.seed, u64::MAX - 1);
    let mut vns = (0..total as u32)
        .map(|g| {
            // Distinct streams per VN: siblings share no randomness (DESIGN §5).
            VnEngine::new(
                g,
                vn_cfg.clone(),
                derive_rng(cfg.seed, 4 * g as u64),
                derive_rng(cfg.seed, 4 * g as u64 + 1),
                Box::new(|_| true),
            )
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let mut rns: Vec<RnEngine> = (0..n)
        .map(|_| RnEngine::new(partition.clone(), cfg.rounds))
        .collect();
    let mut metrics: Vec<Vec<RoundMetrics>> = vec![Vec::new(); n];
    let mut trained: Vec<Option<crate::learner::Trained>> = (0..n).map(|_| None).collect();
    let mut tokens: BTreeMap<u64, (u32, u64)> = BTreeMap::new();
    let mut next_token = 0u64;
    let mut wake: Vec<Option<Duration>> = vec![None; total];
    let mut finished = 0usize;
    let mut work: VecDeque<Work> = VecDeque::new();

    // Join: each VN gets a few random bootstrap entries.
    for g in 0..total as u32 {
        let boot: Vec<u32> = sample(&mut rng, total, BOOTSTRAP_ENTRIES.min(total - 1) + 1)
            .into_iter()
            .map(|i| i as u32)
            .filter(|&i| i != g)
            .take(BOOTSTRAP_ENTRIES)
            .collect();
        let out = vns[g as usize].join(Duration::ZERO, boot);
        apply_vn(
            g,
            out,
            &mut net,
            &mut tokens,
            &mut next_token,
            &mut wake,
            &mut work,
            k,
            observer,
        );
    }
    // RN timers live on network indices after the VNs'.
    for rn in 0..n {
        net.timer((total + rn) as u32, cfg.warmup, 0);
    }

    let mut started = vec![false; n];
    while finished < n {
        let Some((now, ev)) = net.pop_until(Duration::MAX) else {
            return Err(NodeError::Config(
                "simulation ran out of events before finishing".into(),
            ));
        };
        match ev {
            Event::Deliver { from, to, msg } => {
                let input = match msg {
                    Wire::Control(bytes) => VnInput::Control { from, bytes },
                    Wire::Chunk { bytes, token } => VnInput::Chunk {
                        from,
                        bytes: (*bytes).clone(),
                        token,
                    },
                    Wire::Reply { round, bytes } => VnInput::ChunkReply { from, round, bytes },
                };
                work.push_back(Work::Vn(to, input));
            }
            Event::SendFailed { from, to } => {
                work.push_back(Work::Vn(from, VnInput::SendFailed { to }))
            }
            Event::Timer { node, .. } if (node as usize) < total => {
                if wake[node as usize].is_some_and(|w| w <= now) {
                    wake[node as usize] = None;
                }
                work.push_back(Work::Vn(node, VnInput::Tick));
            }
            Event::Timer { node, .. } => {
                let rn = node as usize - total;
                if !started[rn] {
                    started[rn] = true;
                    work.push_back(Work::Rn(rn, RnInput::Start));
                } else if let Some(t) = trained[rn].take() {
                    let round = rns[rn].round();
                    work.push_back(Work::Rn(
                        rn,
                        RnInput::Trained {
                            round,
                            params: t.params,
                            train_loss: t.train_loss,
                            secs: t.secs,
                        },
                    ));
                }
            }
        }
        while let Some(w) = work.pop_front() {
            match w {
                Work::Vn(g, input) => {
                    let out = vns[g as usize].handle(now, input);
                    apply_vn(
                        g,
                        out,
                        &mut net,
                        &mut tokens,
                        &mut next_token,
                        &mut wake,
                        &mut work,
                        k,
                        observer,
                    );
                }
                Work::Rn(rn, input) => {
                    let t = Instant::now();
                    let out = rns[rn].handle(now, input);
                    if out.iter().any(|o| matches!(o, RnOutput::Evaluate { .. })) {
                        rns[rn].set_aggregate_secs(t.elapsed().as_secs_f64());
                    }
                    for o in out {
                        match o {
                            RnOutput::StartRound { round } => {
                                for s in 0..k {
                                    work.push_back(Work::Vn(
                                        (rn * k + s) as u32,
                                        VnInput::StartRound(round),
                                    ));
                                }
                            }
                            RnOutput::Train { round } => {
                                notify_round_start(observer, rn, round, || {
                                    learners[rn].model.flat_params()
                                })?;
                                trained[rn] = Some(learners[rn].train()?);
                                let j = cfg.train_jitter.clamp(0.0, 1.0);
                                let f = 1.0 + j * (2.0 * rng.random::<f64>() - 1.0);
                                net.timer((total + rn) as u32, now + cfg.train_time.mul_f64(f), 0);
                            }
                            RnOutput::ToVn { vn, msg } => {
                                work.push_back(Work::Vn(
                                    (rn * k + vn) as u32,
                                    VnInput::FromRn(msg),
                                ));
                            }
                            RnOutput::Evaluate { round, params } => {
                                let (eval, secs) = learners[rn].load_and_evaluate(&params)?;
                                work.push_back(Work::Rn(
                                    rn,
                                    RnInput::Evaluated {
                                        round,
                                        metric_name: eval.metric_kind(),
                                        metric: eval.metric(),
                                        loss: eval.mean_loss(),
                                        secs,
                                    },
                                ));
                            }
                            RnOutput::RoundDone(m) => {
                                on_round(rn, &m);
                                metrics[rn].push(m);
                            }
                            RnOutput::Finished => {
                                finished += 1;
                                for s in 0..k {
                                    work.push_back(Work::Vn(
                                        (rn * k + s) as u32,
                                        VnInput::FromRn(ToVirtualNode::Stop),
                                    ));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(SimReport {
        metrics,
        virtual_secs: net.now().as_secs_f64(),
        messages: net.sent,
        lost: net.lost,
    })
}

#[allow(clippy::too_many_arguments)]
fn apply_vn(
    g: u32,
    out: Vec<VnOutput<u32>>,
    net: &mut Network<Wire>,
    tokens: &mut BTreeMap<u64, (u32, u64)>,
    next_token: &mut u64,
    wake: &mut [Option<Duration>],
    work: &mut VecDeque<Work>,
    k: usize,
    observer: Option<&dyn Observer<u32>>,
) {
    for o in out {
        match o {
            VnOutput::SendControl { to, bytes } => net.send(g, to, Wire::Control(bytes)),
            VnOutput::SendChunk { to, round, bytes } => {
                *next_token += 1;
                tokens.insert(*next_token, (g, round));
                net.send(
                    g,
                    to,
                    Wire::Chunk {
                        bytes,
                        token: *next_token,
                    },
                );
            }
            VnOutput::Reply { token, bytes } => {
                if let Some((sender, round)) = tokens.remove(&token) {
                    net.send(g, sender, Wire::Reply { round, bytes });
                }
            }
            VnOutput::Timer { at } => {
                // One pending wake-up per VN, moved earlier when needed; a stale later one only ticks idly.
                if wake[g as usize].is_none_or(|w| at < w) {
                    wake[g as usize] = Some(at);
                    net.timer(g, at, 0);
                }
            }
            VnOutput::ToRn(msg) => {
                let rn = g as usize / k;
                let vn = g as usize % k;
                work.push_back(Work::Rn(rn, RnInput::FromVn { vn, msg }));
            }
            VnOutput::Received { from, frame } => {
                let (rn, vn) = (g as usize / k, g as usize % k);
                if let Some(o) = observer {
                    o.chunk_received(rn, vn, &from, &frame);
                }
                work.push_back(Work::Rn(
                    rn,
                    RnInput::FromVn {
                        vn,
                        msg: FromVirtualNode::Received(frame),
                    },
                ));
            }
            VnOutput::Refused { from, what } => tracing::debug!(vn = g, from, ?what, "refused"),
        }
    }
}
