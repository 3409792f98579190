//! Stream storm from listed peers against a real `node` process (the victim, node 0 of three).
//!
//! 1. One listed identity opens hundreds of chunk streams to the victim's first VN: half announce a 64 MiB
//!    frame (over the run's chunk frame: refused from the prefix, nothing allocated), half announce exactly the
//!    run's largest frame, send all of it but two bytes and stall.
//! 2. Sixteen more listed identities send well-formed chunks (right index, right length, finite) for every
//!    round the run has, to both of the victim's VNs, without any overlay edge.
//!
//! The victim's resident memory must stay within the bound the limits give (`node::net::limits`: per peer,
//! `MAX_CONNECTIONS_PER_PEER × CHUNK_STREAMS_PER_CONNECTION` chunk frames of the run's size, plus a margin for
//! the node's own working set), and its honest neighbours must still deliver: every round's copies received
//! match its confirmed neighbours (≥ 90%: over real time a 6-VN network can lose an edge after a freeze).

#![cfg(target_os = "linux")]
// Wall-clock pacing of a real process under attack; no engine reads it.
#![allow(clippy::disallowed_methods)]

mod common;

use std::io;
use std::time::{Duration, Instant};

use common::{ProcNet, wait_all};
use futures::{AsyncRead, AsyncWrite, AsyncWriteExt, StreamExt};
use libp2p::identity::Keypair;
use libp2p::request_response::{self, Codec, ProtocolSupport};
use libp2p::swarm::SwarmEvent;
use libp2p::{Multiaddr, PeerId, StreamProtocol, Swarm, noise, tcp, yamux};
use node::net::behaviour::Timeouts;
use node::net::limits::{CHUNK_STREAMS_PER_CONNECTION, MAX_CONNECTIONS_PER_PEER};
use protocol::{ChunkFrame, ChunkIndex, Round};

const ROUNDS: u64 = 8;
const TRICKLE_STREAMS: usize = 400;
const SYBILS: usize = 16;

/// A request that announces `announce` bytes, sends all but the last two at once, then stalls: each such
/// stream holds as much of a frame as the receiver lets it, for as long as the receiver lets it.
#[derive(Clone, Default)]
struct Trickle;

impl Codec for Trickle {
    type Protocol = StreamProtocol;
    type Request = u32;
    type Response = ();

    async fn read_request<T: AsyncRead + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        _: &mut T,
    ) -> io::Result<u32> {
        Err(io::ErrorKind::Unsupported.into())
    }

    async fn read_response<T: AsyncRead + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        _: &mut T,
    ) -> io::Result<()> {
        Ok(())
    }

    async fn write_request<T: AsyncWrite + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        announce: u32,
    ) -> io::Result<()> {
        io.write_all(&announce.to_le_bytes()).await?;
        let fill = (announce as usize).saturating_sub(2).min(1 << 20);
        io.write_all(&vec![0x5a; fill]).await?;
        io.flush().await?;
        std::future::pending().await
    }

    async fn write_response<T: AsyncWrite + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        _: &mut T,
        _: (),
    ) -> io::Result<()> {
        Ok(())
    }
}

fn trickler(key: Keypair) -> Swarm<request_response::Behaviour<Trickle>> {
    libp2p::SwarmBuilder::with_existing_identity(key)
        .with_tokio()
        .with_tcp(
            tcp::Config::default(),
            noise::Config::new,
            yamux::Config::default,
        )
        .unwrap()
        .with_behaviour(|_| {
            request_response::Behaviour::with_codec(
                Trickle,
                [(
                    StreamProtocol::new(protocol::names::CHUNK),
                    ProtocolSupport::Outbound,
                )],
                request_response::Config::default()
                    .with_request_timeout(Duration::from_secs(600))
                    .with_max_concurrent_streams(TRICKLE_STREAMS),
            )
        })
        .unwrap()
        .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(600)))
        .build()
}

/// Resident memory of process `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_storm_and_early_chunks_from_listed_peers_are_bounded_and_honest_copies_still_arrive()
 {
    let mut net = ProcNet::new(3, 2, ROUNDS, false);
    let attackers: Vec<Keypair> = (0..=SYBILS).map(|_| Keypair::generate_ed25519()).collect();
    net.extra_peers = attackers.iter().map(|k| k.public().to_peer_id()).collect();
    net.write_peer_list();
    for i in 0..3 {
        net.write_config(i, 2500);
    }
    // The run's chunk lengths, as the victim derives them from its config.
    let cfg = node::config::NodeConfig::load(&net.config_path(0)).unwrap();
    let (split, parts) = cfg.learning.load().unwrap();
    let learner = cfg
        .learning
        .learners(&split, &parts, 0..1)
        .unwrap()
        .remove(0);
    let partition = cfg.learning.chunk_partition(&learner.model, 2).unwrap();
    let lens = partition.chunk_lens();
    let max_frame = protocol::chunk::chunk_frame_bytes(*lens.iter().max().unwrap());

    let mut children: Vec<_> = (0..3).map(|i| net.spawn(i)).collect();
    let pid = children[0].id();
    let victim: Vec<(PeerId, Multiaddr)> = net.peer_ids[0]
        .iter()
        .zip(&net.ports[0])
        .map(|(p, port)| (*p, format!("/ip4/127.0.0.1/tcp/{port}").parse().unwrap()))
        .collect();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let baseline = rss(pid);

    // 1. The trickling streams, from the first attacker identity.
    let mut t = trickler(attackers[0].clone());
    for i in 0..TRICKLE_STREAMS {
        let announce = if i % 2 == 0 {
            protocol::chunk::MAX_CHUNK_FRAME_BYTES as u32
        } else {
            max_frame as u32
        };
        t.behaviour_mut().send_request_with_addresses(
            &victim[0].0,
            announce,
            vec![victim[0].1.clone()],
        );
    }
    let storm = tokio::spawn(async move {
        let mut failures = 0usize;
        loop {
            if let SwarmEvent::Behaviour(request_response::Event::OutboundFailure { .. }) =
                t.select_next_some().await
            {
                failures += 1;
            }
            if failures == usize::MAX {
                break;
            }
        }
    });

    // 2. Well-formed early chunks from the other identities, for every round, to both victim VNs.
    let mut sybils = Vec::new();
    for key in &attackers[1..] {
        let mut s =
            node::net::transport::build_swarm(key.clone(), None, Timeouts::default(), max_frame)
                .unwrap();
        for (peer, _) in &victim {
            s.behaviour_mut().allow.allow_peer(*peer);
        }
        for (peer, addr) in &victim {
            for round in 0..ROUNDS {
                for (index, &len) in lens.iter().enumerate() {
                    let frame = ChunkFrame {
                        round: Round(round),
                        chunk: ChunkIndex(index as u32),
                        values: vec![0.25; len],
                    };
                    s.behaviour_mut().chunk.send_request_with_addresses(
                        peer,
                        frame.encode().into(),
                        vec![addr.clone()],
                    );
                }
            }
        }
        sybils.push(tokio::spawn(async move {
            loop {
                s.select_next_some().await;
            }
        }));
    }

    // Watch the victim's memory until the run ends.
    let mut peak = baseline;
    let started = Instant::now();
    while children[0].try_wait().unwrap().is_none() {
        peak = peak.max(rss(pid));
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "run took too long"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ok = tokio::task::spawn_blocking(move || wait_all(&mut children, Duration::from_secs(60)))
        .await
        .unwrap();
    storm.abort();
    for s in sybils {
        s.abort();
    }
    assert!(ok, "every node exited successfully");

    // Chunk frames the attackers could make the victim hold at once, plus the node's own working set
    // growing through the run (measured well under 64 MiB for this model).
    let attackers_bound = (SYBILS + 1)
        * (MAX_CONNECTIONS_PER_PEER as usize)
        * CHUNK_STREAMS_PER_CONNECTION
        * max_frame;
    let bound = baseline as usize + attackers_bound + 64 * 1024 * 1024;
    eprintln!(
        "victim RSS: {:.1} MiB before the storm, peak {:.1} MiB (bound {:.1} MiB); chunk frame {max_frame} B",
        baseline as f64 / 1048576.0,
        peak as f64 / 1048576.0,
        bound as f64 / 1048576.0
    );
    assert!(
        peak as usize <= bound,
        "peak RSS {peak} over the bound {bound}"
    );

    let rounds = net.metrics(0);
    assert_eq!(rounds.len(), ROUNDS as usize, "{rounds:?}");
    let refused: u64 = rounds.iter().map(|r| r["refused"].as_u64().unwrap()).sum();
    assert!(refused > 0, "the early chunks were refused: {rounds:?}");
    let neighbours: u64 = rounds
        .iter()
        .map(|r| r["neighbours"].as_u64().unwrap())
        .sum();
    let copies: u64 = rounds
        .iter()
        .map(|r| r["copies_received"].as_u64().unwrap())
        .sum();
    eprintln!(
        "victim: {copies} copies from {neighbours} confirmed neighbours over {ROUNDS} rounds, {refused} refused"
    );
    assert!(
        neighbours >= ROUNDS,
        "the victim kept neighbours: {rounds:?}"
    );
    // Over real time a tiny network can lose an edge after the freeze; the storm must not cost more.
    assert!(
        copies * 10 >= neighbours * 9,
        "confirmed neighbours delivered: {rounds:?}"
    );
}
