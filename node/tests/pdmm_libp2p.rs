//! PDMM over real libp2p on 127.0.0.1 (issue 17): per-neighbour frames over a static graph, one VN per node,
//! every round completes and every Δz frame crosses. Bounded in time.

use std::time::Duration;

use libp2p::identity::Keypair;
use libp2p::{Multiaddr, PeerId};
use models::data::DatasetSpec;
use models::data::partition::Partition;
use models::nn::ModelSpec;
use models::train::{LocalWork, TrainConfig};
use node::learner::LearningConfig;
use node::peers::PeerList;
use node::{NodeBuilder, NodeEvent, Timing};

const LIMIT: Duration = Duration::from_secs(120);
const NODES: usize = 4;
const ROUNDS: u64 = 4;

fn learning() -> LearningConfig {
    LearningConfig {
        dataset: DatasetSpec::default(),
        model: Some(ModelSpec::Mlp { hidden: vec![8] }),
        partition: Partition::Iid,
        nodes: NODES,
        train: TrainConfig {
            lr: 0.05,
            batch_size: 32,
            work: LocalWork::Steps(4),
            clip: None,
        },
        seed: 5,
        max_test_samples: Some(100),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pdmm_runs_over_libp2p_with_one_frame_per_neighbour() {
    let keys: Vec<Keypair> = (0..NODES).map(|_| Keypair::generate_ed25519()).collect();
    let ids: Vec<PeerId> = keys.iter().map(|k| k.public().to_peer_id()).collect();
    let lc = learning();
    let (split, parts) = lc.load().unwrap();
    let learners = lc.learners(&split, &parts, 0..NODES).unwrap();
    let d = learners[0].model.num_params();
    let mut handles = Vec::new();
    let mut events = Vec::new();
    let mut boot: Vec<(PeerId, Multiaddr)> = Vec::new();
    for (i, (key, learner)) in keys.into_iter().zip(learners).enumerate() {
        let entries: Vec<(PeerId, Option<Multiaddr>)> = ids
            .iter()
            .map(|p| {
                (
                    *p,
                    boot.iter().find(|(q, _)| q == p).map(|(_, a)| a.clone()),
                )
            })
            .collect();
        let (h, ev) = NodeBuilder::new(vec![key], lc.clone(), i)
            .algorithm("pdmm:0.01".parse().unwrap())
            .learner(learner)
            .peers(PeerList::from_entries(entries))
            .degree(2)
            .rounds(ROUNDS)
            .timing(Timing::loopback())
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
        handles.push(h);
        events.push(ev);
    }
    for h in &handles {
        let s = tokio::time::timeout(LIMIT, h.wait())
            .await
            .expect("finished in time");
        assert_eq!((s.rounds_completed, s.error), (ROUNDS, None));
    }
    let frame = (protocol::chunk::chunk_frame_bytes(d) + 4) as u64;
    let mut exchanged = 0;
    for rx in &mut events {
        let mut rounds = Vec::new();
        while let Ok(e) = rx.try_recv() {
            if let NodeEvent::RoundFinished(m) = e {
                rounds.push(m);
            }
        }
        assert_eq!(rounds.len() as u64, ROUNDS);
        let static_degree = rounds[0].neighbours;
        for m in &rounds {
            assert_eq!(m.neighbours, static_degree, "one static graph: {m:?}");
            assert_eq!(m.refused, 0, "{m:?}");
            // One whole-model frame (y(0), then Δz) per neighbour.
            assert_eq!(m.chunk_bytes_sent, frame * m.neighbours as u64, "{m:?}");
            // Synchronous PDMM: every neighbour's frame arrives in its round (loopback, no faults).
            assert_eq!(m.copies_received, m.neighbours, "{m:?}");
            // Our frames' acceptances come back too — except possibly in the last round, where a neighbour
            // that finished stops its swarm before its answer is flushed (harmless: no round follows).
            if m.round.get() + 1 < ROUNDS {
                assert_eq!(m.copies_delivered, m.neighbours, "{m:?}");
            }
            exchanged += m.copies_received;
        }
    }
    assert!(exchanged > 0, "frames crossed the network");
}
