//! Each VN on a thread and runtime of its own (`Timing::vn_threads`, the default): the threads exist while
//! the nodes run, one per VN, named after their node and VN, and none outlives its node, whether the node
//! finished its rounds or was stopped. A test binary of its own: it counts the process's threads by name.

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

/// Names of this process's threads that run a VN (`vn-<node>-<vn>`).
fn vn_threads() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/proc/self/task")
        .expect("Linux /proc")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .filter(|n| n.starts_with("vn-"))
        .collect();
    names.sort();
    names
}

/// Polls until `want` VN threads are left, or the limit passes; returns the last count's names.
async fn settle(want: usize) -> Vec<String> {
    let mut names = vn_threads();
    for _ in 0..100 {
        if names.len() == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        names = vn_threads();
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_vn_runs_on_its_own_thread_and_none_outlives_its_node() {
    let (n, k) = (3, 2);
    let keys: Vec<Vec<Keypair>> = (0..n)
        .map(|_| (0..k).map(|_| Keypair::generate_ed25519()).collect())
        .collect();
    let ids: Vec<PeerId> = keys
        .iter()
        .flatten()
        .map(|k| k.public().to_peer_id())
        .collect();
    let lc = LearningConfig {
        dataset: DatasetSpec::default(),
        model: Some(ModelSpec::Mlp { hidden: vec![16] }),
        partition: Partition::Iid,
        nodes: n,
        train: TrainConfig {
            lr: 0.05,
            batch_size: 32,
            work: LocalWork::Epochs(1),
            clip: None,
        },
        seed: 3,
        max_test_samples: Some(200),
    };
    let (split, parts) = lc.load().unwrap();
    let mut learners = lc.learners(&split, &parts, 0..n).unwrap().into_iter();
    assert!(Timing::loopback().vn_threads, "the default");
    let (mut handles, mut events) = (Vec::new(), Vec::new());
    let mut boot: Vec<(PeerId, Multiaddr)> = Vec::new();
    for (i, ks) in keys.into_iter().enumerate() {
        let list = PeerList::from_entries(ids.iter().map(|p| {
            (
                *p,
                boot.iter().find(|(q, _)| q == p).map(|(_, a)| a.clone()),
            )
        }));
        // Node 2 runs long: it is stopped, not finished.
        let rounds = if i == 2 { 1000 } else { 3 };
        let (h, ev) = NodeBuilder::new(ks, lc.clone(), i)
            .learner(learners.next().unwrap())
            .peers(list)
            .degree(2)
            .rounds(rounds)
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
    let want: Vec<String> = (0..n)
        .flat_map(|i| (0..k).map(move |s| format!("vn-{i}-{s}")))
        .collect();
    assert_eq!(
        settle(n * k).await,
        want,
        "one thread per VN while they run"
    );
    for h in &handles[..2] {
        let s = tokio::time::timeout(LIMIT, h.wait())
            .await
            .expect("finished in time");
        assert_eq!((s.rounds_completed, s.error), (3, None));
    }
    // Node 2 is stopped; the finished nodes' VN threads are gone already or going.
    handles[2].stop();
    let _ = tokio::time::timeout(LIMIT, handles[2].wait()).await;
    assert_eq!(
        settle(0).await,
        Vec::<String>::new(),
        "no VN thread outlives its node"
    );
    let rounds = std::iter::from_fn(|| events[0].try_recv().ok())
        .filter(|e| matches!(e, NodeEvent::RoundFinished(_)))
        .count();
    assert_eq!(rounds, 3);
}
