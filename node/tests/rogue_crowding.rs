//! A rogue listed node crowds a victim node over real libp2p (issue 44, item 2, the libp2p run beside the
//! simulator's `results/insider/`).
//!
//! Six honest `node` processes × 4 VNs, r = 4, 50 rounds on 127.0.0.1; a rogue node holds four more listed
//! identities (a node's k, as the honest ones) and, from the warm-up to the end, has each of them send each
//! of victim node 0's VNs, every 10 ms, for each of the next rounds, a proposal of its own that names
//! itself as the walk's origin and goes no further (`Propose { origin: Some(itself), ttl: 0 }`: the direct
//! proposal, the deviation that made a rogue 4.3 × an honest node's share in the simulator before the
//! defences). It confirms every `Accept` at once and withholds its chunks. What it gains is counted on its
//! own side: the victim acknowledges a commitment (`ConfirmAck`) only for an edge it counts.
//!
//! The goal: the rogue node is a victim VN's neighbour no more often than 1.5 × an honest node's expected
//! share, r·k/(V − 1) per VN and round, over the 50 rounds. Slow (the victim waits for each withheld chunk
//! until its exchange timeout, 1.5 s here), so ignored:
//!
//! ```text
//! cargo test -p node --test rogue_crowding -- --ignored --nocapture
//! ```
//!
//! It prints one JSON line with the figures (`results/insider/run-libp2p.sh` collects three runs).

#![cfg(target_os = "linux")]
// Wall-clock pacing of real processes; no engine reads it.
#![allow(clippy::disallowed_methods)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{ProcNet, wait_all};
use futures::StreamExt;
use libp2p::identity::Keypair;
use libp2p::swarm::SwarmEvent;
use libp2p::swarm::dial_opts::DialOpts;
use libp2p::{Multiaddr, PeerId};
use node::VnAddr;
use node::net::behaviour::Timeouts;
use node::net::control_link::{ControlLinks, LinkEvent};
use node::peers::PeerList;
use protocol::Round;
use protocol::control::{ControlEnvelope, ControlMsg, OverlayMsg, walk_nonce};
use rand::Rng;

const NODES: usize = 6;
const VNS: usize = 4;
const DEGREE: usize = 4;
const ROUNDS: u64 = 50;
const ROGUE_IDENTITIES: usize = VNS;
/// Rounds ahead of the victim's last finished one that the rogue proposes for.
const AHEAD: u64 = 4;
/// How often each identity pushes its proposals: well inside the victim's 100 ms sub-steps, so that one is
/// waiting whenever the victim takes a walk.
const PUSH_MS: u64 = 10;

/// Edges a victim acknowledged, by (victim VN, round): the rogue identities it counts.
type Gained = BTreeMap<(PeerId, u64), BTreeSet<PeerId>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "about two minutes: cargo test -p node --test rogue_crowding -- --ignored --nocapture"]
async fn a_rogue_node_proposing_itself_to_a_victim_gets_no_more_than_its_share() {
    let mut net = ProcNet::new(NODES, VNS, ROUNDS, false);
    let rogues: Vec<Keypair> = (0..ROGUE_IDENTITIES)
        .map(|_| Keypair::generate_ed25519())
        .collect();
    net.extra_peers = rogues.iter().map(|k| k.public().to_peer_id()).collect();
    net.write_peer_list();
    for i in 0..NODES {
        net.write_config(i, 2000);
        let path = net.config_path(i);
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("degree = 2", &format!("degree = {DEGREE}"))
            .replace("exchange_timeout_ms = 5000", "exchange_timeout_ms = 1500");
        std::fs::write(path, text).unwrap();
    }
    let victims: Vec<(PeerId, Multiaddr)> = net.peer_ids[0]
        .iter()
        .zip(&net.ports[0])
        .map(|(p, port)| (*p, format!("/ip4/127.0.0.1/tcp/{port}").parse().unwrap()))
        .collect();
    let peers = Arc::new(PeerList::load(&net.path().join("peers.toml")).unwrap());
    let victim_metrics = net.path().join("metrics0.jsonl");

    let mut children: Vec<_> = (0..NODES).map(|i| net.spawn_logged(i, &[])).collect();
    let started = Instant::now();

    // Edges the victim acknowledged: (victim VN, round) → rogue identities.
    let gained: Arc<Mutex<Gained>> = Arc::default();
    let mut rogue_tasks = Vec::new();
    for key in rogues {
        let me = key.public().to_peer_id();
        let mut swarm =
            node::net::transport::build_swarm(key, None, Timeouts::default(), 1 << 20).unwrap();
        swarm
            .listen_on("/ip4/127.0.0.1/tcp/0".parse().unwrap())
            .unwrap();
        let addr = loop {
            if let SwarmEvent::NewListenAddr { address, .. } = swarm.select_next_some().await {
                break address;
            }
        };
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
        let sender = VnAddr::new(me, addr);
        let origin = sender.clone();
        let envelope = move |msg| {
            protocol::codec::encode_control(&ControlEnvelope {
                sender: sender.clone(),
                msg: ControlMsg::Overlay(msg),
            })
            .unwrap()
        };
        let victims = victims.clone();
        let gained = gained.clone();
        let victim_metrics = victim_metrics.clone();
        rogue_tasks.push(tokio::spawn(async move {
            // The walk keys of its proposals, by nonce: an `Accept` is confirmed with the key.
            let mut keys: BTreeMap<u64, u64> = BTreeMap::new();
            let mut tick = tokio::time::interval(Duration::from_millis(PUSH_MS));
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        // Where the victim is: a rogue can ask any VN's round (`/shatter/round/1`); the
                        // test reads the victim's metrics instead, which says the same sooner.
                        let done = std::fs::read_to_string(&victim_metrics)
                            .map(|t| t.lines().count() as u64)
                            .unwrap_or(0);
                        for (peer, addr) in &victims {
                            if !swarm.is_connected(peer) {
                                let _ = swarm.dial(
                                    DialOpts::peer_id(*peer).addresses(vec![addr.clone()]).build(),
                                );
                            }
                            for round in done..(done + AHEAD).min(ROUNDS) {
                                let key: u64 = rand::rng().random();
                                let nonce = walk_nonce(key);
                                keys.insert(nonce, key);
                                let msg = OverlayMsg::Propose {
                                    round: Round(round),
                                    origin: Some(origin.clone()),
                                    nonce,
                                    ttl: 0,
                                };
                                links.send(*peer, envelope(msg), None, false);
                            }
                        }
                        if keys.len() > 100_000 {
                            keys.clear();
                        }
                    }
                    _ = swarm.select_next_some() => {}
                    ev = links.next() => match ev {
                        LinkEvent::Closed { peer, link, .. } => links.closed(peer, link),
                        LinkEvent::Message { peer, bytes } => {
                            let Ok(env) = protocol::codec::decode_control::<ControlEnvelope<VnAddr>>(&bytes)
                            else {
                                continue;
                            };
                            match env.msg {
                                ControlMsg::Overlay(OverlayMsg::Accept { round, nonce, .. }) => {
                                    if let Some(key) = keys.get(&nonce) {
                                        links.send(peer, envelope(OverlayMsg::Confirm { round, key: *key }), None, false);
                                    }
                                }
                                ControlMsg::Overlay(OverlayMsg::ConfirmAck { round, .. }) => {
                                    gained
                                        .lock()
                                        .unwrap()
                                        .entry((peer, round.get()))
                                        .or_default()
                                        .insert(me);
                                }
                                _ => {}
                            }
                        }
                        LinkEvent::RoundTrip(_) => {}
                    },
                }
            }
        }));
    }

    let ok = tokio::task::spawn_blocking(move || wait_all(&mut children, Duration::from_secs(600)))
        .await
        .unwrap();
    for t in rogue_tasks {
        t.abort();
    }
    if !ok {
        for i in 0..NODES {
            let log = net.log(i);
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            eprintln!("node {i}: {tail:#?}");
        }
    }
    assert!(
        ok,
        "every node exited successfully ({:.0} s)",
        started.elapsed().as_secs_f64()
    );
    // Rounds each node ran (a metrics line each) and skipped (a catch-up jump marks them).
    let ran: Vec<usize> = (0..NODES).map(|i| net.metrics(i).len()).collect();
    let skipped: Vec<u64> = (0..NODES)
        .map(|i| {
            net.metrics(i)
                .iter()
                .map(|r| r["skipped_rounds"].as_u64().unwrap_or(0))
                .sum()
        })
        .collect();
    let gained = gained.lock().unwrap();
    let edges: usize = gained.values().map(BTreeSet::len).sum();
    // Per victim VN and round, what the rogue node got, against an honest node's expected share: r · k over
    // the other VNs (the listed ones, the rogue's included, as the victim's sampler knows the network).
    let per_vn_round = edges as f64 / (VNS as f64 * ROUNDS as f64);
    let listed = NODES * VNS + ROGUE_IDENTITIES;
    let honest_share = (DEGREE * VNS) as f64 / (listed - 1) as f64;
    let most_crowded = victims
        .iter()
        .map(|(v, _)| {
            gained
                .iter()
                .filter(|((p, _), _)| p == v)
                .map(|(_, ids)| ids.len())
                .sum::<usize>() as f64
                / ROUNDS as f64
        })
        .fold(0.0, f64::max);
    let victim_neighbours: f64 = net
        .metrics(0)
        .iter()
        .map(|r| r["neighbours"].as_f64().unwrap())
        .sum::<f64>()
        / (VNS as f64 * ROUNDS as f64);
    println!(
        "{}",
        serde_json::json!({
            "nodes": NODES, "vns": VNS, "degree": DEGREE, "rounds": ROUNDS,
            "rogue_identities": ROGUE_IDENTITIES,
            "rogue_edges": edges,
            "rogue_per_victim_vn_round": per_vn_round,
            "rogue_most_crowded_victim_vn": most_crowded,
            "honest_node_expected_share": honest_share,
            "ratio": most_crowded / honest_share,
            "victim_neighbours_per_vn": victim_neighbours,
            "rounds_ran": ran, "rounds_skipped": skipped,
            "wall_s": started.elapsed().as_secs_f64(),
        })
    );
    assert!(
        skipped.iter().all(|&s| s == 0),
        "nodes skipped rounds: {skipped:?} (ran {ran:?})"
    );
    assert!(
        most_crowded <= 1.5 * honest_share,
        "the rogue node was a victim VN's neighbour {most_crowded:.3} times a round, over 1.5 × an honest \
         node's share ({honest_share:.3})"
    );
}
