//! Embedding a Shatter node in your own program: three nodes with two virtual nodes each, in one process,
//! over real libp2p on 127.0.0.1, training a small MLP on synthetic data for three rounds.
//!
//! `cargo run -p node --example embed`

use libp2p::identity::Keypair;
use libp2p::{Multiaddr, PeerId};
use models::data::DatasetSpec;
use models::data::partition::Partition;
use models::nn::ModelSpec;
use models::train::{LocalWork, TrainConfig};
use node::learner::LearningConfig;
use node::peers::PeerList;
use node::{NodeBuilder, NodeEvent, Timing};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (nodes, vns) = (3, 2);
    // What every node agrees on: the task, the initial model (seeded) and the chunk partition (seeded).
    let learning = LearningConfig {
        dataset: DatasetSpec::default(),
        model: Some(ModelSpec::Mlp { hidden: vec![32] }),
        partition: Partition::Iid,
        nodes,
        train: TrainConfig {
            lr: 0.05,
            batch_size: 32,
            work: LocalWork::Epochs(1),
            clip: None,
        },
        seed: 1,
        max_test_samples: Some(500),
    };
    // Each node has its own virtual-node keys; the peer list allows all of them.
    let keys: Vec<Vec<Keypair>> = (0..nodes)
        .map(|_| (0..vns).map(|_| Keypair::generate_ed25519()).collect())
        .collect();
    let ids: Vec<PeerId> = keys
        .iter()
        .flatten()
        .map(|k| k.public().to_peer_id())
        .collect();

    let mut handles = Vec::new();
    let mut bootstrap: Vec<(PeerId, Multiaddr)> = Vec::new();
    for (i, ks) in keys.into_iter().enumerate() {
        // Node 0 starts alone; the others learn its addresses from the peer list, as in a real deployment.
        let peers = PeerList::from_entries(ids.iter().map(|p| {
            (
                *p,
                bootstrap
                    .iter()
                    .find(|(q, _)| q == p)
                    .map(|(_, a)| a.clone()),
            )
        }));
        let (handle, mut events) = NodeBuilder::new(ks, learning.clone(), i)
            .peers(peers)
            .degree(2)
            .rounds(3)
            .timing(Timing::loopback())
            .spawn()
            .await?;
        if i == 0 {
            bootstrap = handle
                .addresses()
                .iter()
                .map(|a| (a.peer, a.addr.clone()))
                .collect();
        }
        tokio::spawn(async move {
            while let Some(ev) = events.recv().await {
                if let NodeEvent::RoundFinished(m) = ev {
                    println!(
                        "node {i} round {}: {} = {:.3}, {} copies received, {} bytes sent",
                        m.round, m.metric_name, m.test_metric, m.copies_received, m.bytes_sent
                    );
                }
            }
        });
        handles.push(handle);
    }
    for h in &handles {
        let status = h.wait().await;
        if let Some(e) = status.error {
            anyhow::bail!(e);
        }
    }
    println!("all {nodes} nodes finished");
    Ok(())
}
