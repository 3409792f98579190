//! `--mode inproc`: every RN and VN in this process, one libp2p Swarm per VN on 127.0.0.1 (or, with
//! `--transport memory`, on libp2p's in-process memory transport: no socket per connection), as
//! a growing network does: node 0 starts first, and every later node's peer list carries the addresses of all
//! nodes already up (each VN joins from its own random sample of them). One multi-threaded tokio runtime;
//! training runs on its blocking pool.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use libp2p::identity::Keypair;
use libp2p::{Multiaddr, PeerId};
use models::chunking::ChunkPartition;
use node::learner::Learner;
use node::peers::PeerList;
use node::{NodeBuilder, NodeEvent};
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

async fn run_async(
    s: &Settings,
    setting: Setting,
    learners: Vec<Learner>,
    partition: Arc<ChunkPartition>,
    audit: Option<AuditPlan>,
    progress: &mut Progress,
) -> anyhow::Result<RunOutput> {
    let (n, k) = (s.nodes, setting.vns);
    // Every VN of the network lives in this process and holds a socket per peer it talks to.
    let vns = (n * k) as u64;
    let need = node::limits::open_files_needed(vns, vns, true);
    let limit = node::limits::raise_open_files_limit();
    let memory = s.transport == TransportChoice::Memory;
    if let Some(limit) = limit.filter(|l| *l < need && !memory) {
        eprintln!(
            "warning: {vns} in-process virtual nodes may need about {need} open files but this process may \
             open {limit} (ulimit -n): dials will fail with \"Too many open files\" and the overlay will \
             not fully form. Use --transport memory (no sockets), --mode procs (one process per node) or \
             --mode sim, or raise the hard limit."
        );
    }
    let listen: Multiaddr = if memory {
        "/memory/0"
    } else {
        "/ip4/127.0.0.1/tcp/0"
    }
    .parse()
    .expect("valid multiaddr");
    // Wall-clock time of the run, reported beside the rounds; no engine reads it.
    #[allow(clippy::disallowed_methods)]
    let t0 = Instant::now();
    let cpu0 = crate::cpu::process_cpu_seconds();
    // Fresh random identities, as `node keygen` makes them: VN keys are never derived from a seed (keys.rs).
    let keys: Vec<Vec<Keypair>> = (0..n)
        .map(|_| (0..k).map(|_| Keypair::generate_ed25519()).collect())
        .collect();
    let ids: Vec<PeerId> = keys
        .iter()
        .flatten()
        .map(|k| k.public().to_peer_id())
        .collect();
    let mut boot: BTreeMap<PeerId, Multiaddr> = BTreeMap::new();
    // The audit's ground truth: which node owns each VN identity. The harness made the keys; no node sees this.
    // With the audit, every node is also a network observer attacking sibling linkage by timing.
    let observers = match audit {
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
    };
    let observer: Option<Arc<dyn node::observe::Observer<PeerId>>> = observers
        .as_ref()
        .map(|(a, l)| Arc::new(node::observe::Tee(a.clone(), l.clone())) as _);
    let mut handles = Vec::with_capacity(n);
    let (tx, mut rx) = mpsc::channel::<(usize, NodeEvent)>(EVENT_BUFFER);
    let mut per_node_spawn = Duration::ZERO;
    for (i, (ks, learner)) in keys.into_iter().zip(learners).enumerate() {
        let peers = PeerList::from_entries(ids.iter().map(|p| (*p, boot.get(p).cloned())));
        // Nodes start their rounds a warm-up after they spawn. Spawning hundreds of swarms takes seconds, so
        // early nodes wait longer: every node starts round 0 at about the same time, once all are up.
        let mut timing = s.timing.clone();
        let expected_end = per_node_spawn.mul_f64(n as f64 * 1.5);
        timing.warmup_ms += expected_end.saturating_sub(t0.elapsed()).as_millis() as u64;
        let mut builder = NodeBuilder::new(ks, s.learning.clone(), i);
        if let Some(o) = &observer {
            builder = builder.observer(o.clone());
        }
        let (h, mut events) = builder
            .learner(learner)
            .partition(partition.clone())
            .peers(peers)
            .degree(s.degree)
            .rounds(s.rounds)
            .timing(timing)
            .value_bounds(s.values)
            .algorithm(setting.algo)
            .dropout(s.dropout)
            .listen(vec![listen.clone()])
            .spawn()
            .await
            .map_err(|e| anyhow::anyhow!("starting node {i}: {e}"))?;
        boot.extend(h.addresses().iter().map(|a| (a.peer, a.addr.clone())));
        if i == 0 {
            per_node_spawn = t0.elapsed();
        }
        let tx = tx.clone();
        tokio::spawn(async move {
            while let Some(ev) = events.recv().await {
                let last = matches!(ev, NodeEvent::Finished);
                if tx.send((i, ev)).await.is_err() || last {
                    break;
                }
            }
        });
        handles.push(h);
    }
    drop(tx);
    let spawn_secs = t0.elapsed().as_secs_f64();

    let mut metrics = vec![Vec::new(); n];
    let mut errors = Vec::new();
    let mut finished = vec![false; n];
    let mut refused = 0u64;
    let mut interrupted = false;
    // When every node had finished its first round, and the CPU time then: the rounds after it are the
    // network's steady state, without the warm-up and round 0's cold start.
    let mut after_first_round: Option<(Instant, Option<f64>)> = None;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                None => break,
                Some((i, NodeEvent::RoundFinished(m))) => {
                    progress.on_round(i, &m);
                    metrics[i].push(m);
                    if after_first_round.is_none() && metrics.iter().all(|m| !m.is_empty()) {
                        #[allow(clippy::disallowed_methods)]
                        let now = Instant::now();
                        after_first_round = Some((now, crate::cpu::process_cpu_seconds()));
                    }
                }
                Some((i, NodeEvent::Error(e))) => {
                    progress.note(&format!("node {i}: error: {e}"));
                    errors.push(format!("node {i}: {e}"));
                }
                Some((_, NodeEvent::PeerRefused { .. })) => refused += 1,
                Some((_, NodeEvent::ConnectionFailed { .. })) => {}
                Some((i, NodeEvent::VnLost { vn, reason })) => {
                    progress.note(&format!("node {i}: virtual node {vn} lost ({reason})"));
                    errors.push(format!("node {i}: virtual node {vn} lost: {reason}"));
                }
                Some((i, NodeEvent::Finished)) => {
                    finished[i] = true;
                    if finished.iter().all(|f| *f) {
                        break;
                    }
                }
            },
            _ = &mut ctrl_c, if !interrupted => {
                interrupted = true;
                progress.note("interrupted: stopping every node; the report covers the rounds completed");
                for h in &handles {
                    h.stop();
                }
            }
        }
    }
    for h in &handles {
        h.stop();
    }
    let mut extra = BTreeMap::new();
    extra.insert("spawn_seconds".into(), json!(spawn_secs));
    extra.insert(
        "transport".into(),
        json!(if memory { "memory" } else { "tcp" }),
    );
    extra.insert("peers_refused".into(), json!(refused));
    let wall_secs = t0.elapsed().as_secs_f64();
    // The whole network's CPU (`crate::cpu`): over the run, and over the rounds after every node's first.
    // Cores busy near the machine's count means the rounds wait on the cores, not on the protocol's timing.
    let cpu_end = crate::cpu::process_cpu_seconds();
    if let (Some(start), Some(end)) = (cpu0, cpu_end) {
        extra.insert("cpu_seconds".into(), json!(end - start));
        extra.insert("cores_busy".into(), json!((end - start) / wall_secs));
    }
    if let Some((at, Some(start))) = after_first_round
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
        metrics,
        wall_secs,
        peak_rss_bytes: crate::rss::peak_rss_bytes(),
        extra,
        errors,
        interrupted,
        audit: observers.map(|(a, _)| a.finish()),
    })
}
