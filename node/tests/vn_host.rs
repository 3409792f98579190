//! VNs hosted outside their real node's process (issue 13, `node vn`), over real libp2p on 127.0.0.1: two VN
//! hosts each serve VNs of two different nodes, the RN↔VN link carries rounds as in-process channels do, and
//! a host refuses a node that does not own the VN it names. Bounded in time.

use std::time::Duration;

use libp2p::identity::Keypair;
use libp2p::{Multiaddr, PeerId};
use models::data::DatasetSpec;
use models::data::partition::Partition;
use models::nn::ModelSpec;
use models::train::{LocalWork, TrainConfig};
use node::learner::LearningConfig;
use node::peers::PeerList;
use node::{HostedVn, NodeBuilder, NodeEvent, RemoteVn, Timing, VnHost};
use tokio::sync::{oneshot, watch};

const LIMIT: Duration = Duration::from_secs(120);

fn learning(nodes: usize) -> LearningConfig {
    LearningConfig {
        dataset: DatasetSpec::default(),
        model: Some(ModelSpec::Mlp { hidden: vec![16] }),
        partition: Partition::Iid,
        nodes,
        train: TrainConfig {
            lr: 0.05,
            batch_size: 32,
            work: LocalWork::Epochs(1),
            clip: None,
        },
        seed: 3,
        max_test_samples: Some(200),
    }
}

fn localhost() -> Multiaddr {
    "/ip4/127.0.0.1/tcp/0".parse().unwrap()
}

/// Starts a host for `vns` (key, owning node's link PeerId); returns its link address with `/p2p/`.
async fn start_host(
    vns: Vec<(Keypair, PeerId)>,
    peers: PeerList,
    stop: watch::Receiver<bool>,
) -> Multiaddr {
    let link_key = Keypair::generate_ed25519();
    let id = link_key.public().to_peer_id();
    let host = VnHost {
        link_listen: localhost(),
        link_key,
        peers,
        psk: None,
        vns: vns
            .into_iter()
            .map(|(key, rn)| HostedVn {
                key,
                listen: localhost(),
                announce: None,
                rn,
            })
            .collect(),
        handshake: Duration::from_secs(10),
        observer: None,
        tenant_bytes: node::net::link_limits::DEFAULT_TENANT_BYTES,
    };
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        if let Err(e) = host.run(stop, Some(tx)).await {
            panic!("VN host failed: {e}");
        }
    });
    let addr = tokio::time::timeout(LIMIT, rx).await.unwrap().unwrap();
    addr.with(libp2p::multiaddr::Protocol::P2p(id))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_whose_vns_run_in_shared_hosts_complete_their_rounds() {
    let (n, k, rounds) = (3usize, 2usize, 3u64);
    let vn_keys: Vec<Vec<Keypair>> = (0..n)
        .map(|_| (0..k).map(|_| Keypair::generate_ed25519()).collect())
        .collect();
    let ids: Vec<Vec<PeerId>> = vn_keys
        .iter()
        .map(|ks| ks.iter().map(|k| k.public().to_peer_id()).collect())
        .collect();
    let link_keys: Vec<Keypair> = (0..2).map(|_| Keypair::generate_ed25519()).collect();
    let links: Vec<PeerId> = link_keys.iter().map(|k| k.public().to_peer_id()).collect();
    let lc = learning(n);
    let (split, parts) = lc.load().unwrap();
    let mut learners = lc.learners(&split, &parts, 0..n).unwrap().into_iter();

    // Node 2 runs its VNs in-process and starts first: its addresses bootstrap everyone.
    let everyone = || PeerList::from_entries(ids.iter().flatten().map(|p| (*p, None)));
    let (h2, mut ev2) = NodeBuilder::new(vn_keys[2].clone(), lc.clone(), 2)
        .learner(learners.next_back().unwrap())
        .peers(everyone())
        .degree(2)
        .rounds(rounds)
        .timing(Timing::loopback())
        .spawn()
        .await
        .unwrap();
    let boot: Vec<(PeerId, Multiaddr)> = h2
        .addresses()
        .iter()
        .map(|a| (a.peer, a.addr.clone()))
        .collect();
    let listed = || {
        PeerList::from_entries(ids.iter().flatten().map(|p| {
            (
                *p,
                boot.iter().find(|(q, _)| q == p).map(|(_, a)| a.clone()),
            )
        }))
    };

    // Host A: node 0's VN 0 and node 1's VN 1; host B: node 0's VN 1 and node 1's VN 0.
    let (stop_tx, stop) = watch::channel(false);
    let host_a = start_host(
        vec![
            (vn_keys[0][0].clone(), links[0]),
            (vn_keys[1][1].clone(), links[1]),
        ],
        listed(),
        stop.clone(),
    )
    .await;
    let host_b = start_host(
        vec![
            (vn_keys[0][1].clone(), links[0]),
            (vn_keys[1][0].clone(), links[1]),
        ],
        listed(),
        stop.clone(),
    )
    .await;
    let hosts_of = |i: usize| -> Vec<RemoteVn> {
        let (first, second) = if i == 0 {
            (&host_a, &host_b)
        } else {
            (&host_b, &host_a)
        };
        vec![
            RemoteVn {
                host: first.clone(),
                peer: ids[i][0],
            },
            RemoteVn {
                host: second.clone(),
                peer: ids[i][1],
            },
        ]
    };
    let mut hosted = Vec::new();
    for i in 0..2 {
        let (h, ev) = NodeBuilder::new(Vec::new(), lc.clone(), i)
            .remote_vns(link_keys[i].clone(), hosts_of(i))
            .learner(learners.next().unwrap())
            .peers(listed())
            .degree(2)
            .rounds(rounds)
            .timing(Timing::loopback())
            .spawn()
            .await
            .unwrap();
        // The node knows its VNs by the addresses their hosts bound, not by anything of its own.
        assert_eq!(
            h.addresses().iter().map(|a| a.peer).collect::<Vec<_>>(),
            ids[i]
        );
        hosted.push((h, ev));
    }
    let s = tokio::time::timeout(LIMIT, h2.wait())
        .await
        .expect("finished in time");
    assert_eq!(s.rounds_completed, rounds, "{:?}", s.error);
    let mut from_hosted = 0;
    while let Ok(e) = ev2.try_recv() {
        if let NodeEvent::RoundFinished(m) = e {
            from_hosted += m.copies_received;
        }
    }
    assert!(
        from_hosted > 0,
        "the in-process node exchanged with hosted VNs"
    );
    for (h, mut ev) in hosted {
        let s = tokio::time::timeout(LIMIT, h.wait())
            .await
            .expect("finished in time");
        assert_eq!(s.error, None);
        assert_eq!(s.rounds_completed, rounds);
        let mut copies = 0;
        let mut lost = 0;
        while let Ok(e) = ev.try_recv() {
            match e {
                NodeEvent::RoundFinished(m) => copies += m.copies_received,
                NodeEvent::VnLost { .. } => lost += 1,
                _ => {}
            }
        }
        assert_eq!(lost, 0, "no hosted VN was lost");
        assert!(copies > 0, "chunks reached the node through its hosts");
    }
    let _ = stop_tx.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_refuses_a_node_that_does_not_own_the_vn() {
    let (vn, other_vn) = (Keypair::generate_ed25519(), Keypair::generate_ed25519());
    let (vn_id, other_id) = (vn.public().to_peer_id(), other_vn.public().to_peer_id());
    let owner = PeerId::random();
    // The intruder owns another VN on the same host, so the link admits it.
    let intruder = Keypair::generate_ed25519();
    let (_stop_tx, stop) = watch::channel(false);
    let peers = || PeerList::from_entries([(vn_id, None), (other_id, None)]);
    let host = start_host(
        vec![(vn, owner), (other_vn, intruder.public().to_peer_id())],
        peers(),
        stop,
    )
    .await;
    let lc = learning(2);
    let (split, parts) = lc.load().unwrap();
    let try_with = |link_key: Keypair, learner| {
        NodeBuilder::new(Vec::new(), lc.clone(), 0)
            .remote_vns(
                link_key,
                vec![RemoteVn {
                    host: host.clone(),
                    peer: vn_id,
                }],
            )
            .learner(learner)
            .peers(peers())
            .degree(1)
            .rounds(1)
            .timing(Timing {
                // The setup is retried for 6 handshake timeouts: 6 s here.
                handshake_timeout_ms: 1000,
                ..Timing::loopback()
            })
            .spawn()
    };
    let mut learners = lc.learners(&split, &parts, [0, 1]).unwrap().into_iter();
    let err = try_with(intruder, learners.next().unwrap())
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("belongs to another node"), "{err}");
    // An identity the host does not know is not even admitted on the link: the setup never gets an answer.
    let err = try_with(Keypair::generate_ed25519(), learners.next().unwrap())
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("did not set up VN"), "{err}");
}
