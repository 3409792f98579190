//! A rogue listed node claims false progress against real `node` processes (issue 44, item 1).
//!
//! Four honest nodes × 2 VNs run 12 rounds; a rogue node holds five more listed identities and, from the
//! first instants of the warm-up to the end of the run, has each of them tell every honest VN that it is at
//! the last possible round (`Drop { round: u64::MAX }` on the control protocol, as the rogue did).
//! On the code before the fix this test fails: node 0 ran round 11 alone (it jumped to the run's last round
//! at once, as every node did). Now every honest node runs every round, none skips one, and they still
//! exchange copies.

#![cfg(target_os = "linux")]
// Wall-clock pacing of real processes; no engine reads it.
#![allow(clippy::disallowed_methods)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{ProcNet, wait_all};
use futures::StreamExt;
use libp2p::identity::Keypair;
use libp2p::swarm::dial_opts::DialOpts;
use libp2p::{Multiaddr, PeerId};
use node::VnAddr;
use node::net::behaviour::Timeouts;
use node::net::control_link::ControlLinks;
use node::peers::PeerList;
use protocol::Round;
use protocol::control::{ControlEnvelope, ControlMsg, OverlayMsg};

const NODES: usize = 4;
const ROUNDS: u64 = 12;
const ROGUE_IDENTITIES: usize = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rogue_nodes_identities_claiming_the_last_round_make_no_node_skip() {
    let mut net = ProcNet::new(NODES, 2, ROUNDS, false);
    let rogues: Vec<Keypair> = (0..ROGUE_IDENTITIES)
        .map(|_| Keypair::generate_ed25519())
        .collect();
    net.extra_peers = rogues.iter().map(|k| k.public().to_peer_id()).collect();
    net.write_peer_list();
    for i in 0..NODES {
        net.write_config(i, 2000);
    }
    let victims: Vec<(PeerId, Multiaddr)> = net
        .peer_ids
        .iter()
        .zip(&net.ports)
        .flat_map(|(ids, ports)| ids.iter().copied().zip(ports.iter().copied()))
        .map(|(p, port)| (p, format!("/ip4/127.0.0.1/tcp/{port}").parse().unwrap()))
        .collect();
    let peers = Arc::new(PeerList::load(&net.path().join("peers.toml")).unwrap());

    let mut children: Vec<_> = (0..NODES).map(|i| net.spawn(i)).collect();
    let started = Instant::now();

    // Each rogue identity: a VN swarm of its own, dialling every honest VN and sending its claim every
    // 100 ms until the run ends.
    let mut rogue_tasks = Vec::new();
    for key in rogues {
        let me = key.public().to_peer_id();
        let mut swarm =
            node::net::transport::build_swarm(key, None, Timeouts::default(), 1 << 20).unwrap();
        for (peer, _) in &victims {
            swarm.behaviour_mut().allow.allow_peer(*peer);
        }
        let mut links = ControlLinks::new(
            swarm.behaviour().stream.new_control(),
            peers.clone(),
            tokio::time::Instant::now(),
            Duration::from_secs(2),
        )
        .unwrap();
        let claim = protocol::codec::encode_control(&ControlEnvelope {
            sender: VnAddr::new(me, "/ip4/127.0.0.1/tcp/9".parse().unwrap()),
            msg: ControlMsg::Overlay(OverlayMsg::Drop {
                round: Round(u64::MAX),
            }),
        })
        .unwrap();
        let victims = victims.clone();
        rogue_tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        for (peer, addr) in &victims {
                            if !swarm.is_connected(peer) {
                                let _ = swarm.dial(
                                    DialOpts::peer_id(*peer).addresses(vec![addr.clone()]).build(),
                                );
                            }
                            links.send(*peer, claim.clone(), None, false);
                        }
                    }
                    _ = swarm.select_next_some() => {}
                    ev = links.next() => {
                        if let node::net::control_link::LinkEvent::Closed { peer, link, .. } = ev {
                            links.closed(peer, link);
                        }
                    }
                }
            }
        }));
    }

    let ok = tokio::task::spawn_blocking(move || wait_all(&mut children, Duration::from_secs(150)))
        .await
        .unwrap();
    for t in rogue_tasks {
        t.abort();
    }
    assert!(
        ok,
        "every node exited successfully ({:.0} s)",
        started.elapsed().as_secs_f64()
    );
    for i in 0..NODES {
        let rounds = net.metrics(i);
        let numbers: Vec<u64> = rounds
            .iter()
            .map(|r| r["round"].as_u64().unwrap())
            .collect();
        assert_eq!(
            numbers,
            (0..ROUNDS).collect::<Vec<_>>(),
            "node {i} ran every round"
        );
        assert!(
            rounds
                .iter()
                .all(|r| r["skipped_rounds"].as_u64().unwrap_or(0) == 0),
            "node {i} skipped rounds: {rounds:?}"
        );
        let copies: u64 = rounds
            .iter()
            .map(|r| r["copies_received"].as_u64().unwrap())
            .sum();
        assert!(
            copies >= ROUNDS,
            "node {i} still exchanged: {copies} copies"
        );
    }
}
