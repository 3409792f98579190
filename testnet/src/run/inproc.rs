//! `--mode inproc`: every RN and VN in this process, one libp2p Swarm per VN on 127.0.0.1 (or, with
//! `--transport memory`, on libp2p's in-process memory transport: no socket per connection), as
//! a growing network does: node 0 starts first, and every later node's peer list carries the addresses of all
//! nodes already up (each VN joins from its own random sample of them). One multi-threaded tokio runtime;
//! training runs on its blocking pool.

use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use libp2p::identity::Keypair;
use libp2p::{Multiaddr, PeerId};
use models::chunking::ChunkPartition;
use node::engine::RoundMetrics;
use node::learner::Learner;
use node::peers::PeerList;
use node::{NodeBuilder, NodeEvent, NodeHandle};
use serde_json::json;
use tokio::sync::mpsc;

use crate::RunOutput;
use crate::audit::AuditPlan;
use crate::cli::TransportChoice;
use crate::progress::Progress;
use crate::scenario::{Setting, Settings};

/// Events buffered between the nodes' streams and the progress display: a round of 100 RNs fits.
const EVENT_BUFFER: usize = 4096;

pub fn run(
    s: &Settings,
    setting: Setting,
    learners: Vec<Learner>,
    partition: Arc<ChunkPartition>,
    audit: Option<AuditPlan>,
    progress: &mut Progress,
) -> anyhow::Result<RunOutput> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(run_async(s, setting, learners, partition, audit, progress))
}

/// The network's run, in order: the open-files limit is checked (and raised), the clock started, the VN keys
/// generated, the audit's observers set up, the nodes started one after the other, their events collected
/// until every node has finished (or Ctrl-C), the nodes stopped, and the report assembled.
async fn run_async(
    s: &Settings,
    setting: Setting,
    learners: Vec<Learner>,
    partition: Arc<ChunkPartition>,
    audit: Option<AuditPlan>,
    progress: &mut Progress,
) -> anyhow::Result<RunOutput> {
    let (n, k) = (s.nodes, setting.vns);
    let memory = s.transport == TransportChoice::Memory;
    check_open_files(n * k, memory);
    let clock = Clock::start();
    let keys = generate_keys(n, k);
    let ids: Vec<PeerId> = keys
        .iter()
        .flatten()
        .map(|k| k.public().to_peer_id())
        .collect();
    let observers = observers(audit, &ids, k)?;
    let audit_observer: Option<Arc<dyn node::observe::Observer<PeerId>>> = observers
        .as_ref()
        .map(|(a, l)| Arc::new(node::observe::Tee(a.clone(), l.clone())) as _);
    let telemetry = progress.live_mut().map(|live| {
        // `--ui`: the overlay as the testnet sees it (it made every key), and every node's metrics.
        let index: HashMap<PeerId, u32> = ids
            .iter()
            .enumerate()
            .map(|(g, p)| (*p, g as u32))
            .collect();
        let overlay = Arc::new(crate::live::OverlayRecorder::new(
            n,
            k,
            move |p: &PeerId| index.get(p).copied(),
        ));
        live.overlay = Some(overlay.clone());
        let telemetry = node::telemetry::Telemetry::new(live.registry.clone()).with_label("k", k);
        (overlay, telemetry)
    });
    let (overlay, telemetry) = telemetry.unzip();
    let observer = match (audit_observer, overlay) {
        (Some(a), Some(o)) => Some(Arc::new(node::observe::Tee(a, o)) as _),
        (Some(a), None) => Some(a),
        (None, Some(o)) => Some(o as _),
        (None, None) => None,
    };
    let common = Common {
        s,
        setting,
        partition,
        observer,
        listen: listen_address(memory),
        telemetry,
    };
    let (handles, rx) = start_nodes(&common, keys, learners, &ids, clock.t0).await?;
    let spawn_secs = clock.t0.elapsed().as_secs_f64();
    let reported = Reported::collect(n, rx, &handles, progress).await;
    for h in &handles {
        h.stop();
    }
    report(reported, clock, spawn_secs, memory, observers)
}

/// Warns when this process may not open enough files: every VN of the network lives in this process and
/// holds a socket per peer it talks to. Raises the soft limit to the hard one first.
fn check_open_files(vns: usize, memory: bool) {
    let vns = vns as u64;
    let need = node::limits::open_files_needed(vns, vns, true);
    let limit = node::limits::raise_open_files_limit();
    if let Some(limit) = limit.filter(|l| *l < need && !memory) {
        eprintln!(
            "warning: {vns} in-process virtual nodes may need about {need} open files but this process may \
             open {limit} (ulimit -n): dials will fail with \"Too many open files\" and the overlay will \
             not fully form. Use --transport memory (no sockets), --mode procs (one process per node) or \
             --mode sim, or raise the hard limit."
        );
    }
}

/// Where every VN listens: a fresh port on loopback, or on libp2p's in-process memory transport.
fn listen_address(memory: bool) -> Multiaddr {
    if memory {
        "/memory/0"
    } else {
        "/ip4/127.0.0.1/tcp/0"
    }
    .parse()
    .expect("valid multiaddr")
}

/// When the run started, by the wall clock and by this process's CPU time.
struct Clock {
    t0: Instant,
    cpu0: Option<f64>,
}

impl Clock {
    fn start() -> Self {
        // Wall-clock time of the run, reported beside the rounds; no engine reads it.
        #[allow(clippy::disallowed_methods)]
        let t0 = Instant::now();
        Self {
            t0,
            cpu0: crate::cpu::process_cpu_seconds(),
        }
    }
}

/// Node i's VN keys, `keys[i]`.
fn generate_keys(n: usize, k: usize) -> Vec<Vec<Keypair>> {
    // Fresh random identities, as `node keygen` makes them: VN keys are never derived from a seed (keys.rs).
    (0..n)
        .map(|_| (0..k).map(|_| Keypair::generate_ed25519()).collect())
        .collect()
}

/// The audit's observer and the timing attack's recorder.
type Observers = (
    Arc<crate::audit::AuditObserver<PeerId>>,
    Arc<crate::linkage::LinkageRecorder<PeerId>>,
);

/// With `--audit`, the observers every node feeds (`ids` in node order, `k` per node); else none.
fn observers(
    audit: Option<AuditPlan>,
    ids: &[PeerId],
    k: usize,
) -> anyhow::Result<Option<Observers>> {
    // The audit's ground truth: which node owns each VN identity. The harness made the keys; no node sees this.
    // With the audit, every node is also a network observer attacking sibling linkage by timing.
    Ok(match audit {
        Some(plan) => {
            let owner: Arc<HashMap<PeerId, usize>> =
                Arc::new(ids.iter().enumerate().map(|(g, p)| (*p, g / k)).collect());
            let o = owner.clone();
            let audit = Arc::new(plan.threaded(move |p: &PeerId| o.get(p).copied())?);
            let linkage = Arc::new(crate::linkage::LinkageRecorder::new(
                k,
                move |p: &PeerId| owner.get(p).copied(),
            ));
            Some((audit, linkage))
        }
        None => None,
    })
}

/// What every node of the run is built with.
struct Common<'a> {
    s: &'a Settings,
    setting: Setting,
    partition: Arc<ChunkPartition>,
    observer: Option<Arc<dyn node::observe::Observer<PeerId>>>,
    listen: Multiaddr,
    /// `--ui`: where every node registers its Prometheus metrics (under its `node` label).
    telemetry: Option<node::telemetry::Telemetry>,
}

impl Common<'_> {
    /// Builds node `i` from its keys, learner, peer list and timing, and spawns it.
    async fn spawn(
        &self,
        i: usize,
        keys: Vec<Keypair>,
        learner: Learner,
        peers: PeerList,
        timing: node::Timing,
    ) -> anyhow::Result<(NodeHandle, mpsc::Receiver<NodeEvent>)> {
        let s = self.s;
        let mut builder = NodeBuilder::new(keys, s.learning.clone(), i);
        if let Some(o) = &self.observer {
            builder = builder.observer(o.clone());
        }
        if let Some(t) = &self.telemetry {
            builder = builder.telemetry(t.clone().with_label("node", i));
        }
        builder
            .learner(learner)
            .partition(self.partition.clone())
            .peers(peers)
            .degree(s.degree)
            .rounds(s.rounds)
            .timing(timing)
            .value_bounds(s.values)
            .algorithm(self.setting.algo)
            .dropout(s.dropout)
            .listen(vec![self.listen.clone()])
            .spawn()
            .await
            .map_err(|e| anyhow::anyhow!("starting node {i}: {e}"))
    }
}

/// Starts the nodes one after the other, as a growing network does: each node's peer list carries the
/// addresses of every VN already up. Returns their handles and one stream of all their events, tagged with
/// the node's index.
async fn start_nodes(
    common: &Common<'_>,
    keys: Vec<Vec<Keypair>>,
    learners: Vec<Learner>,
    ids: &[PeerId],
    t0: Instant,
) -> anyhow::Result<(Vec<NodeHandle>, mpsc::Receiver<(usize, NodeEvent)>)> {
    let n = common.s.nodes;
    let mut boot: BTreeMap<PeerId, Multiaddr> = BTreeMap::new();
    let mut handles = Vec::with_capacity(n);
    let (tx, rx) = mpsc::channel::<(usize, NodeEvent)>(EVENT_BUFFER);
    let mut per_node_spawn = Duration::ZERO;
    for (i, (ks, learner)) in keys.into_iter().zip(learners).enumerate() {
        let peers = PeerList::from_entries(ids.iter().map(|p| (*p, boot.get(p).cloned())));
        // Nodes start their rounds a warm-up after they spawn. Spawning hundreds of swarms takes seconds, so
        // early nodes wait longer: every node starts round 0 at about the same time, once all are up.
        let mut timing = common.s.timing.clone();
        let expected_end = per_node_spawn.mul_f64(n as f64 * 1.5);
        timing.warmup_ms += expected_end.saturating_sub(t0.elapsed()).as_millis() as u64;
        let (h, events) = common.spawn(i, ks, learner, peers, timing).await?;
        boot.extend(h.addresses().iter().map(|a| (a.peer, a.addr.clone())));
        if i == 0 {
            per_node_spawn = t0.elapsed();
        }
        forward_events(i, events, tx.clone());
        handles.push(h);
    }
    drop(tx);
    Ok((handles, rx))
}

/// Forwards node `i`'s events to the run's stream, tagged with `i`, until the node finishes.
fn forward_events(
    i: usize,
    mut events: mpsc::Receiver<NodeEvent>,
    tx: mpsc::Sender<(usize, NodeEvent)>,
) {
    tokio::spawn(async move {
        while let Some(ev) = events.recv().await {
            let last = matches!(ev, NodeEvent::Finished);
            if tx.send((i, ev)).await.is_err() || last {
                break;
            }
        }
    });
}

/// What the nodes reported while the run lasted.
struct Reported {
    metrics: Vec<Vec<RoundMetrics>>,
    errors: Vec<String>,
    finished: Vec<bool>,
    refused: u64,
    interrupted: bool,
    /// When every node had finished its first round, and the CPU time then: the rounds after it are the
    /// network's steady state, without the warm-up and round 0's cold start.
    after_first_round: Option<(Instant, Option<f64>)>,
}

impl Reported {
    /// Collects the `n` nodes' events until every node has finished or all streams have ended; Ctrl-C stops
    /// every node, and the collection then covers the rounds completed.
    async fn collect(
        n: usize,
        mut rx: mpsc::Receiver<(usize, NodeEvent)>,
        handles: &[NodeHandle],
        progress: &mut Progress,
    ) -> Self {
        let mut r = Self {
            metrics: vec![Vec::new(); n],
            errors: Vec::new(),
            finished: vec![false; n],
            refused: 0,
            interrupted: false,
            after_first_round: None,
        };
        let ctrl_c = tokio::signal::ctrl_c();
        tokio::pin!(ctrl_c);
        loop {
            tokio::select! {
                ev = rx.recv() => match ev {
                    None => break,
                    Some((i, ev)) => {
                        if r.on_event(i, ev, progress).is_break() {
                            break;
                        }
                    }
                },
                _ = &mut ctrl_c, if !r.interrupted => {
                    r.interrupted = true;
                    progress.note("interrupted: stopping every node; the report covers the rounds completed");
                    for h in handles {
                        h.stop();
                    }
                }
            }
        }
        r
    }

    /// Records one event of node `i`; breaks once every node has finished.
    fn on_event(&mut self, i: usize, ev: NodeEvent, progress: &mut Progress) -> ControlFlow<()> {
        match ev {
            NodeEvent::RoundFinished(m) => {
                progress.on_round(i, &m);
                self.metrics[i].push(m);
                if self.after_first_round.is_none() && self.metrics.iter().all(|m| !m.is_empty()) {
                    #[allow(clippy::disallowed_methods)]
                    let now = Instant::now();
                    self.after_first_round = Some((now, crate::cpu::process_cpu_seconds()));
                }
            }
            NodeEvent::Error(e) => {
                progress.note(&format!("node {i}: error: {e}"));
                self.errors.push(format!("node {i}: {e}"));
            }
            NodeEvent::PeerRefused { .. } => self.refused += 1,
            NodeEvent::ConnectionFailed { .. } => {}
            // The node trains on and counts it in its metrics; shown, not an error of the run.
            NodeEvent::WriteFailed { file, path, error } => {
                progress.note(&format!(
                    "node {i}: {file:?} write failed ({}: {error}); training goes on",
                    path.display()
                ));
            }
            NodeEvent::VnLost { vn, reason } => {
                progress.note(&format!("node {i}: virtual node {vn} lost ({reason})"));
                self.errors
                    .push(format!("node {i}: virtual node {vn} lost: {reason}"));
            }
            NodeEvent::Finished => {
                self.finished[i] = true;
                if self.finished.iter().all(|f| *f) {
                    return ControlFlow::Break(());
                }
            }
        }
        ControlFlow::Continue(())
    }
}

/// The run's output: the nodes' rounds and errors, with the set-up time, the transport, the peers refused,
/// the CPU the network used and (with the audit) the attacks' reports.
fn report(
    reported: Reported,
    clock: Clock,
    spawn_secs: f64,
    memory: bool,
    observers: Option<Observers>,
) -> anyhow::Result<RunOutput> {
    let mut extra = BTreeMap::new();
    extra.insert("spawn_seconds".into(), json!(spawn_secs));
    extra.insert(
        "transport".into(),
        json!(if memory { "memory" } else { "tcp" }),
    );
    extra.insert("peers_refused".into(), json!(reported.refused));
    let wall_secs = clock.t0.elapsed().as_secs_f64();
    // The whole network's CPU (`crate::cpu`): over the run, and over the rounds after every node's first.
    // Cores busy near the machine's count means the rounds wait on the cores, not on the protocol's timing.
    let cpu_end = crate::cpu::process_cpu_seconds();
    if let (Some(start), Some(end)) = (clock.cpu0, cpu_end) {
        extra.insert("cpu_seconds".into(), json!(end - start));
        extra.insert("cores_busy".into(), json!((end - start) / wall_secs));
    }
    if let Some((at, Some(start))) = reported.after_first_round
        && let Some(end) = cpu_end
    {
        let secs = at.elapsed().as_secs_f64();
        if secs > 0.0 {
            extra.insert(
                "cores_busy_after_round0".into(),
                json!((end - start) / secs),
            );
        }
    }
    if let Some((_, l)) = &observers {
        extra.insert("linkage".into(), serde_json::to_value(l.finish())?);
    }
    Ok(RunOutput {
        metrics: reported.metrics,
        wall_secs,
        peak_rss_bytes: crate::rss::peak_rss_bytes(),
        extra,
        errors: reported.errors,
        interrupted: reported.interrupted,
        audit: observers.map(|(a, _)| a.finish()),
    })
}
