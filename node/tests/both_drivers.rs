//! One scenario, two drivers, one routing layer: 3 real nodes × 2 VNs, r = 2, 2 rounds of a tiny MLP, run by
//! the in-memory simulator (`node::sim`) and by real libp2p Swarms over the in-process memory transport
//! (`NodeBuilder`, `/memory/0`). Both drive the same engines through `node::engine::route_vn`/`route_rn`;
//! the test checks, for each driver, what that routing promises: every accepted copy reaches the RN (the
//! observer's count equals the RN's `copies_received`), each copy comes from another node's VN, the overlay
//! gives every VN its r neighbours, and every round finishes. Bounded: a few seconds, 120 s at most.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use libp2p::identity::Keypair;
use libp2p::{Multiaddr, PeerId};
use models::data::DatasetSpec;
use models::data::partition::Partition;
use models::nn::ModelSpec;
use models::train::{LocalWork, TrainConfig};
use node::engine::RoundMetrics;
use node::learner::LearningConfig;
use node::observe::Observer;
use node::peers::PeerList;
use node::sim::SimConfig;
use node::{NodeBuilder, NodeEvent, Timing};
use protocol::{ChunkFrame, Round};

const NODES: usize = 3;
const K: usize = 2;
const R: usize = 2;
const ROUNDS: u64 = 2;
const LIMIT: Duration = Duration::from_secs(120);

fn learning() -> LearningConfig {
    LearningConfig {
        dataset: DatasetSpec::default(),
        model: Some(ModelSpec::Mlp { hidden: vec![16] }),
        partition: Partition::Iid,
        nodes: NODES,
        train: TrainConfig {
            lr: 0.05,
            batch_size: 32,
            work: LocalWork::Steps(5),
            clip: None,
        },
        seed: 5,
        max_test_samples: Some(200),
    }
}

/// A VN as (node, index among its siblings).
type Vn = (usize, usize);

/// Every accepted copy, as (receiving VN, sending VN, round), the sender mapped by the harness.
struct Copies<I> {
    owner: Box<dyn Fn(&I) -> Vn + Send + Sync>,
    seen: Mutex<Vec<(Vn, Vn, Round)>>,
}

impl<I> Observer<I> for Copies<I> {
    fn chunk_received(&self, node: usize, vn: usize, from: &I, frame: &ChunkFrame) {
        let sender = (self.owner)(from);
        self.seen
            .lock()
            .unwrap()
            .push(((node, vn), sender, frame.round));
    }
}

/// The promises of the routing layer, whichever driver ran it.
fn check(
    driver: &str,
    exact_overlay: bool,
    metrics: &BTreeMap<usize, Vec<RoundMetrics>>,
    seen: &[(Vn, Vn, Round)],
) {
    assert_eq!(metrics.len(), NODES, "{driver}: every node reported");
    for (node, rounds) in metrics {
        assert_eq!(
            rounds.len() as u64,
            ROUNDS,
            "{driver}: node {node} finished every round"
        );
        for m in rounds {
            let observed = seen
                .iter()
                .filter(|((n, _), _, r)| n == node && *r == m.round)
                .count();
            assert_eq!(
                observed, m.copies_received as usize,
                "{driver}: node {node} round {}: each accepted copy reached the RN once",
                m.round
            );
            assert!(
                m.copies_received > 0,
                "{driver}: node {node} received copies"
            );
            // The simulator's seeded run gives every VN its r neighbours; on real time a VN of a 6-VN network
            // can end a round short (the overlay's documented deficiency on tiny networks), but the node
            // still has neighbours.
            let (got, full) = (m.neighbours as usize, K * R);
            assert!(
                got == full || (!exact_overlay && got >= K && got < full),
                "{driver}: node {node} round {}: {got} neighbours of {full}",
                m.round
            );
            assert!(
                m.copies_received <= m.neighbours,
                "{driver}: at most one copy per edge"
            );
        }
    }
    // Siblings may be neighbours (avoiding them would reveal them, DESIGN §5), but a VN is never its own.
    assert!(
        seen.iter().all(|(to, from, _)| to != from),
        "{driver}: a VN received its own chunk: {seen:?}"
    );
    let mut pairs: Vec<(Vn, Vn, Round)> = seen.to_vec();
    pairs.sort();
    let before = pairs.len();
    pairs.dedup();
    assert_eq!(
        before,
        pairs.len(),
        "{driver}: one copy per neighbour per round"
    );
}

#[test]
fn the_simulator_and_libp2p_drive_the_same_scenario_through_one_router() {
    let lc = learning();
    let (split, parts) = lc.load().unwrap();

    // Simulator: VN g belongs to node g / K.
    let learners = lc.learners(&split, &parts, 0..NODES).unwrap();
    let partition = Arc::new(lc.chunk_partition(&learners[0].model, K).unwrap());
    let obs = Copies::<u32> {
        owner: Box::new(|g| (*g as usize / K, *g as usize % K)),
        seen: Mutex::new(Vec::new()),
    };
    let cfg = SimConfig::new(K, R, ROUNDS, lc.seed);
    let report =
        node::sim::run_observed(&cfg, learners, partition.clone(), |_, _| {}, Some(&obs)).unwrap();
    let sim_metrics: BTreeMap<usize, Vec<RoundMetrics>> =
        report.metrics.into_iter().enumerate().collect();
    check("sim", true, &sim_metrics, &obs.seen.lock().unwrap());

    // libp2p over the memory transport.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (metrics, seen) = rt.block_on(async {
        let keys: Vec<Vec<Keypair>> = (0..NODES)
            .map(|_| (0..K).map(|_| Keypair::generate_ed25519()).collect())
            .collect();
        let owners: BTreeMap<PeerId, Vn> = keys
            .iter()
            .enumerate()
            .flat_map(|(n, ks)| {
                ks.iter()
                    .enumerate()
                    .map(move |(s, k)| (k.public().to_peer_id(), (n, s)))
            })
            .collect();
        let owners = Arc::new(owners);
        let o = owners.clone();
        let obs = Arc::new(Copies::<PeerId> {
            owner: Box::new(move |p| o[p]),
            seen: Mutex::new(Vec::new()),
        });
        let mut learners = lc.learners(&split, &parts, 0..NODES).unwrap().into_iter();
        let mut boot: Vec<(PeerId, Multiaddr)> = Vec::new();
        let mut running = Vec::new();
        for (i, ks) in keys.into_iter().enumerate() {
            let mut entries: Vec<(PeerId, Option<Multiaddr>)> =
                owners.keys().map(|p| (*p, None)).collect();
            for (p, a) in &boot {
                if let Some(x) = entries.iter_mut().find(|(q, _)| q == p) {
                    x.1 = Some(a.clone());
                }
            }
            let (h, ev) = NodeBuilder::new(ks, lc.clone(), i)
                .learner(learners.next().unwrap())
                .partition(partition.clone())
                .listen(vec!["/memory/0".parse().unwrap()])
                .peers(PeerList::from_entries(entries))
                .degree(R)
                .rounds(ROUNDS)
                .timing(Timing::loopback())
                .observer(obs.clone())
                .spawn()
                .await
                .unwrap();
            if i == 0 {
                boot = h
                    .addresses()
                    .iter()
                    .map(|a| (a.peer, a.addr.clone()))
                    .collect();
            }
            running.push((h, ev));
        }
        let mut metrics = BTreeMap::new();
        for (i, (h, mut ev)) in running.into_iter().enumerate() {
            let status = tokio::time::timeout(LIMIT, h.wait())
                .await
                .expect("bounded");
            assert!(status.error.is_none(), "node {i}: {:?}", status.error);
            let mut rounds = Vec::new();
            while let Ok(e) = ev.try_recv() {
                if let NodeEvent::RoundFinished(m) = e {
                    rounds.push(m);
                }
            }
            metrics.insert(i, rounds);
        }
        let seen = obs.seen.lock().unwrap().clone();
        (metrics, seen)
    });
    check("libp2p/memory", false, &metrics, &seen);
}
