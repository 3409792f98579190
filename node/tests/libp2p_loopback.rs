//! Real libp2p over 127.0.0.1: complete rounds, permissioning (peer list, pre-shared key), and a node killed
//! mid-run. Every test is bounded in time.

use std::time::Duration;

use libp2p::identity::Keypair;
use libp2p::pnet::PreSharedKey;
use libp2p::{Multiaddr, PeerId};
use models::data::DatasetSpec;
use models::data::partition::Partition;
use models::nn::ModelSpec;
use models::train::{LocalWork, TrainConfig};
use node::learner::LearningConfig;
use node::peers::PeerList;
use node::{NodeBuilder, NodeEvent, NodeHandle, Timing};
use tokio::sync::mpsc;

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

struct Spec {
    listed: bool,
    psk: Option<PreSharedKey>,
}

/// `n` listed nodes without a pre-shared key.
fn listed(n: usize) -> Vec<Spec> {
    (0..n)
        .map(|_| Spec {
            listed: true,
            psk: None,
        })
        .collect()
}

struct Running {
    handles: Vec<NodeHandle>,
    events: Vec<mpsc::Receiver<NodeEvent>>,
    ids: Vec<Vec<PeerId>>,
}

/// Spawns one node per spec, k VNs each. Node 0 starts first; the others bootstrap from its addresses, as a
/// real deployment's peer list would give them. Unlisted nodes believe everyone is allowed.
async fn spawn(specs: &[Spec], k: usize, degree: usize, rounds: u64) -> Running {
    spawn_with(specs, k, degree, rounds, None).await
}

/// [`spawn`] with a named algorithm (`None`: the default for k).
async fn spawn_with(
    specs: &[Spec],
    k: usize,
    degree: usize,
    rounds: u64,
    algorithm: Option<node::algo::AlgoSpec>,
) -> Running {
    let keys: Vec<Vec<Keypair>> = specs
        .iter()
        .map(|_| (0..k).map(|_| Keypair::generate_ed25519()).collect())
        .collect();
    let ids: Vec<Vec<PeerId>> = keys
        .iter()
        .map(|ks| ks.iter().map(|k| k.public().to_peer_id()).collect())
        .collect();
    let lc = learning(specs.len());
    let (split, parts) = lc.load().unwrap();
    let mut learners = lc
        .learners(&split, &parts, 0..specs.len())
        .unwrap()
        .into_iter();
    let mut handles = Vec::new();
    let mut events = Vec::new();
    let mut boot: Vec<(PeerId, Multiaddr)> = Vec::new();
    for (i, (spec, ks)) in specs.iter().zip(keys).enumerate() {
        let entries = |all: bool| -> PeerList {
            let mut e: Vec<(PeerId, Option<Multiaddr>)> = ids
                .iter()
                .zip(specs)
                .filter(|(_, s)| all || s.listed)
                .flat_map(|(v, _)| v.iter().map(|p| (*p, None)))
                .collect();
            for (p, a) in &boot {
                if let Some(x) = e.iter_mut().find(|(q, _)| q == p) {
                    x.1 = Some(a.clone());
                }
            }
            PeerList::from_entries(e)
        };
        let mut builder = NodeBuilder::new(ks, lc.clone(), i);
        if let Some(a) = algorithm {
            builder = builder.algorithm(a);
        }
        let (h, ev) = builder
            .learner(learners.next().unwrap())
            .peers(entries(!spec.listed))
            .psk(spec.psk)
            .degree(degree)
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
    Running {
        handles,
        events,
        ids,
    }
}

fn drain(rx: &mut mpsc::Receiver<NodeEvent>) -> Vec<NodeEvent> {
    let mut v = Vec::new();
    while let Ok(e) = rx.try_recv() {
        v.push(e);
    }
    v
}

/// Waits for the node's first finished round.
async fn first_round(rx: &mut mpsc::Receiver<NodeEvent>) {
    loop {
        match tokio::time::timeout(LIMIT, rx.recv())
            .await
            .expect("a round in time")
        {
            Some(NodeEvent::RoundFinished(_)) => return,
            Some(_) => {}
            None => panic!("the node ended before its first round"),
        }
    }
}

fn rounds_of(events: &[NodeEvent]) -> Vec<node::engine::RoundMetrics> {
    events
        .iter()
        .filter_map(|e| match e {
            NodeEvent::RoundFinished(m) => Some(m.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_two_vns_complete_three_rounds() {
    let specs = listed(3);
    let mut net = spawn(&specs, 2, 2, 3).await;
    for h in &net.handles {
        let s = tokio::time::timeout(LIMIT, h.wait())
            .await
            .expect("finished in time");
        assert_eq!(s.error, None);
        assert_eq!(s.rounds_completed, 3);
    }
    for rx in &mut net.events {
        let rounds = rounds_of(&drain(rx));
        assert_eq!(rounds.len(), 3);
        let copies: u32 = rounds.iter().map(|m| m.copies_received).sum();
        assert!(copies > 0, "chunks crossed the network: {rounds:?}");
        // A 6-VN overlay can leave a VN short in a round; most rounds must still exchange.
        assert!(
            rounds
                .iter()
                .filter(|m| m.chunk_bytes_sent > 0 && m.neighbours > 0)
                .count()
                >= 2,
            "{rounds:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_absent_from_the_peer_list_is_refused_and_never_receives_a_chunk() {
    let mut specs: Vec<Spec> = (0..3)
        .map(|_| Spec {
            listed: true,
            psk: None,
        })
        .collect();
    specs.push(Spec {
        listed: false,
        psk: None,
    });
    let mut net = spawn(&specs, 2, 2, 3).await;
    for h in &net.handles {
        let s = tokio::time::timeout(LIMIT, h.wait())
            .await
            .expect("finished in time");
        assert_eq!(s.rounds_completed, 3, "{:?}", s.error);
    }
    let intruder = net.ids[3].clone();
    let intruder_events = drain(&mut net.events[3]);
    let got: u32 = rounds_of(&intruder_events)
        .iter()
        .map(|m| m.copies_received)
        .sum();
    assert_eq!(got, 0, "the unlisted node received no chunk");
    let mut refused_intruder = false;
    for rx in &mut net.events[..3] {
        for e in drain(rx) {
            match e {
                NodeEvent::PeerRefused { peer, .. } if intruder.contains(&peer) => {
                    refused_intruder = true
                }
                NodeEvent::RoundFinished(m) => assert!(m.copies_received <= m.neighbours),
                _ => {}
            }
        }
    }
    assert!(
        refused_intruder,
        "listed nodes reported refusing the intruder"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_pre_shared_key_is_refused() {
    let psk = PreSharedKey::new([7; 32]);
    let wrong = PreSharedKey::new([8; 32]);
    let specs = vec![
        Spec {
            listed: true,
            psk: Some(psk),
        },
        Spec {
            listed: true,
            psk: Some(psk),
        },
        Spec {
            listed: true,
            psk: Some(psk),
        },
        // Listed, but without the network's key: it must not get in.
        Spec {
            listed: true,
            psk: Some(wrong),
        },
    ];
    let mut net = spawn(&specs, 2, 2, 2).await;
    for h in &net.handles {
        let s = tokio::time::timeout(LIMIT, h.wait())
            .await
            .expect("finished in time");
        assert_eq!(s.rounds_completed, 2, "{:?}", s.error);
    }
    let outsider = rounds_of(&drain(&mut net.events[3]));
    assert_eq!(
        outsider.iter().map(|m| m.copies_received).sum::<u32>(),
        0,
        "wrong key: no chunk"
    );
    assert_eq!(
        outsider.iter().map(|m| m.neighbours).sum::<u32>(),
        0,
        "wrong key: no neighbour"
    );
    let mut insiders_copies = 0;
    let mut failed_handshakes = 0;
    for rx in &mut net.events[..3] {
        for e in drain(rx) {
            match e {
                NodeEvent::RoundFinished(m) => insiders_copies += m.copies_received,
                NodeEvent::ConnectionFailed { .. } => failed_handshakes += 1,
                _ => {}
            }
        }
    }
    assert!(
        insiders_copies > 0,
        "nodes sharing the key exchanged chunks"
    );
    assert!(
        failed_handshakes > 0,
        "the wrong key failed at the handshake"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_mid_run_delays_its_neighbours_by_at_most_the_deadline() {
    let specs = listed(4);
    let rounds = 4;
    let mut net = spawn(&specs, 2, 2, rounds).await;
    // Kill node 3 as soon as it finished its first round: it disappears mid-run with its VNs.
    first_round(&mut net.events[3]).await;
    net.handles[3].stop();
    let t = Timing::loopback();
    let overlay = (5 * 2 + 4) as f64 * t.substep_ms as f64 / 1000.0;
    let bound = overlay + t.exchange_timeout_ms as f64 / 1000.0 + 3.0;
    for (i, h) in net.handles[..3].iter().enumerate() {
        let s = tokio::time::timeout(LIMIT, h.wait())
            .await
            .expect("finished in time");
        assert_eq!(s.rounds_completed, rounds, "node {i}: {:?}", s.error);
        for m in rounds_of(&drain(&mut net.events[i])) {
            assert!(
                m.round_secs <= bound + m.train_secs + m.eval_secs,
                "node {i} round {} took {:.2}s > {bound:.2}s",
                m.round,
                m.round_secs
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_virtual_node_is_reported_and_its_node_completes_every_round() {
    let specs = listed(3);
    let rounds = 4;
    let mut net = spawn(&specs, 2, 2, rounds).await;
    first_round(&mut net.events[0]).await;
    net.handles[0].crash_virtual_node(1);
    for (i, h) in net.handles.iter().enumerate() {
        let s = tokio::time::timeout(LIMIT, h.wait())
            .await
            .expect("finished in time: nobody waits for the lost VN");
        assert_eq!(s.rounds_completed, rounds, "node {i}: {:?}", s.error);
        assert_eq!(s.error, None);
    }
    let events = drain(&mut net.events[0]);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, NodeEvent::VnLost { vn: 1, .. })),
        "the loss was reported: {events:?}"
    );
    // Once the crash is behind it, node 0 shares through its one remaining VN: at most r copies per round.
    for m in rounds_of(&events).iter().filter(|m| m.round.get() >= 2) {
        assert!(m.copies_received <= 2, "{m:?}");
    }
}

/// What a connected peer learns through identify: only the announced address, never the listen addresses
/// (a VN listening on 0.0.0.0 would otherwise name every interface of its host). Loopback only: the VN listens
/// on 127.0.0.1 and announces the same port by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identify_tells_peers_only_the_announced_address() {
    use libp2p::futures::StreamExt;
    use libp2p::identify;
    use libp2p::swarm::SwarmEvent;
    use node::net::behaviour::{Timeouts, VnBehaviourEvent};

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen: Multiaddr = format!("/ip4/127.0.0.1/tcp/{port}").parse().unwrap();
    let announced: Multiaddr = format!("/dns4/localhost/tcp/{port}").parse().unwrap();
    let observer_key = Keypair::generate_ed25519();
    let observer = observer_key.public().to_peer_id();
    let node_key = Keypair::generate_ed25519();
    let node_peer = node_key.public().to_peer_id();
    let lc = learning(1);
    let (split, parts) = lc.load().unwrap();
    let learner = lc.learners(&split, &parts, 0..1).unwrap().remove(0);
    let (h, _events) = NodeBuilder::new(vec![node_key], lc, 0)
        .learner(learner)
        .listen(vec![listen.clone()])
        .announce(vec![announced.clone()])
        .peers(PeerList::from_entries(vec![
            (observer, None),
            (node_peer, None),
        ]))
        .degree(1)
        .rounds(1)
        .timing(Timing::loopback())
        .spawn()
        .await
        .unwrap();
    let mut o =
        node::net::transport::build_swarm(observer_key, None, Timeouts::default(), 1024).unwrap();
    o.behaviour_mut().allow.allow_peer(node_peer);
    o.dial(listen).unwrap();
    let told =
        tokio::time::timeout(LIMIT, async {
            loop {
                if let SwarmEvent::Behaviour(VnBehaviourEvent::Identify(
                    identify::Event::Received { peer_id, info, .. },
                )) = o.select_next_some().await
                    && peer_id == node_peer
                {
                    break info.listen_addrs;
                }
            }
        })
        .await
        .expect("identify in time");
    assert_eq!(told, vec![announced]);
    h.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_sparsification_runs_over_libp2p_with_one_vn_per_node() {
    let specs = listed(3);
    let algo = "sparsify-random:0.25".parse().unwrap();
    let mut net = spawn_with(&specs, 1, 2, 3, Some(algo)).await;
    for h in &net.handles {
        let s = tokio::time::timeout(LIMIT, h.wait())
            .await
            .expect("finished in time");
        assert_eq!((s.rounds_completed, s.error), (3, None));
    }
    for rx in &mut net.events {
        let rounds = rounds_of(&drain(rx));
        let copies: u32 = rounds.iter().map(|m| m.copies_received).sum();
        assert!(copies > 0, "chunks crossed the network: {rounds:?}");
        // One chunk of four per neighbour: a frame of d/4 values (and its length prefix), not of d.
        let lc = learning(3);
        let (split, parts) = lc.load().unwrap();
        let d = lc.learners(&split, &parts, 0..1).unwrap()[0]
            .model
            .num_params();
        let frame = |values: usize| (protocol::chunk::chunk_frame_bytes(values) + 4) as u64;
        for m in rounds.iter().filter(|m| m.neighbours > 0) {
            let per = m.chunk_bytes_sent / m.neighbours as u64;
            assert!(
                per >= frame(d / 4) && per <= frame(d.div_ceil(4)),
                "{per} B for d = {d}: {m:?}"
            );
        }
    }
}
