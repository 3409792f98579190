//! A VN host serving several nodes, some of them hostile, over real libp2p on 127.0.0.1: each hostile node
//! attacks the host over its own RN↔VN link while an honest node's VN on the same host runs its rounds.
//!
//! 1. Out of order: messages of 900 KB with sequence numbers 1, 2, … (0 never comes), one at a time.
//! 2. Stalled reads: a dozen messages announcing 1 MB (within the message bound), each sending 600 KB and
//!    stalling.
//! 3. A huge announced frame: one message announcing 512 MiB, sending 1,000 bytes and stalling.
//!
//! Each hostile link must be reset by the host (its connection closed) within a few seconds, having made the
//! host hold no more than its per-node budget (`node::net::link_limits`), and the honest node must complete
//! every round with its hosted VN. Bounded in time (about 10 s).

use std::io;
use std::time::Duration;

use futures::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, StreamExt};
use libp2p::identity::Keypair;
use libp2p::request_response::{self, Codec, ProtocolSupport};
use libp2p::swarm::SwarmEvent;
use libp2p::{Multiaddr, PeerId, StreamProtocol, Swarm, noise, tcp, yamux};
use models::data::DatasetSpec;
use models::data::partition::Partition;
use models::nn::ModelSpec;
use models::train::{LocalWork, TrainConfig};
use node::learner::LearningConfig;
use node::net::link_limits::{LinkBounds, MIN_TENANT_BYTES};
use node::peers::PeerList;
use node::{HostedVn, NodeBuilder, NodeEvent, RemoteVn, Timing, VnHost};
use protocol::link::{LinkBody, LinkMessage};
use tokio::sync::{oneshot, watch};

const LIMIT: Duration = Duration::from_secs(120);
/// How long after its attack a hostile link must be gone.
const RESET_WITHIN: Duration = Duration::from_secs(10);

/// Bytes a hostile stream writes: `bytes` (a frame, prefix included), then either the end of the request or,
/// with `stall`, nothing more for ever.
#[derive(Clone)]
struct Raw {
    bytes: Vec<u8>,
    stall: bool,
}

#[derive(Clone, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Protocol = StreamProtocol;
    type Request = Raw;
    type Response = ();

    async fn read_request<T: AsyncRead + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        _: &mut T,
    ) -> io::Result<Raw> {
        Err(io::ErrorKind::Unsupported.into())
    }

    /// The host's empty acknowledgement: sent once it has taken the message.
    async fn read_response<T: AsyncRead + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
    ) -> io::Result<()> {
        let mut prefix = [0u8; 4];
        io.read_exact(&mut prefix).await
    }

    async fn write_request<T: AsyncWrite + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        req: Raw,
    ) -> io::Result<()> {
        io.write_all(&req.bytes).await?;
        io.flush().await?;
        if req.stall {
            std::future::pending::<()>().await;
        }
        io.close().await
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

fn hostile(key: Keypair) -> Swarm<request_response::Behaviour<RawCodec>> {
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
                RawCodec,
                [(
                    StreamProtocol::new(protocol::names::RNVN),
                    ProtocolSupport::Outbound,
                )],
                request_response::Config::default()
                    .with_request_timeout(Duration::from_secs(600))
                    .with_max_concurrent_streams(64),
            )
        })
        .unwrap()
        .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(600)))
        .build()
}

fn framed(payload: &[u8]) -> Vec<u8> {
    let mut v = (payload.len() as u32).to_le_bytes().to_vec();
    v.extend_from_slice(payload);
    v
}

/// An out-of-order message: a setup of 900 KB (within the message bound) with sequence number `seq`.
fn out_of_order(seq: u64) -> Raw {
    let msg = LinkMessage {
        vn: 0,
        seq,
        body: LinkBody::Setup(vec![0; 900_000]),
    };
    Raw {
        bytes: framed(&msg.encode(1024).unwrap()),
        stall: false,
    }
}

/// A frame announcing `announce` bytes of which `send` are sent, then stalling.
fn stalled(announce: u32, send: usize) -> Raw {
    let mut bytes = announce.to_le_bytes().to_vec();
    bytes.resize(4 + send, 0x5a);
    Raw { bytes, stall: true }
}

/// Runs one attack: `requests` to the host, each only once the host acknowledged the last when `one_by_one`.
/// Returns how long after the first request the host closed the link, if it did within [`RESET_WITHIN`] of
/// the last.
async fn attack(
    key: Keypair,
    host: PeerId,
    addr: Multiaddr,
    requests: Vec<Raw>,
    one_by_one: bool,
) -> Option<Duration> {
    let mut s = hostile(key);
    #[allow(clippy::disallowed_methods)] // a test's clock
    let start = tokio::time::Instant::now();
    let mut queue = requests.into_iter();
    let mut send = |s: &mut Swarm<request_response::Behaviour<RawCodec>>| match queue.next() {
        Some(r) => {
            s.behaviour_mut()
                .send_request_with_addresses(&host, r, vec![addr.clone()]);
            true
        }
        None => false,
    };
    let mut sending = if one_by_one {
        send(&mut s)
    } else {
        while send(&mut s) {}
        false
    };
    #[allow(clippy::disallowed_methods)] // a test's clock
    let mut deadline = tokio::time::Instant::now() + RESET_WITHIN;
    loop {
        let ev = tokio::select! {
            ev = s.select_next_some() => ev,
            _ = tokio::time::sleep_until(deadline) => return None,
        };
        match ev {
            SwarmEvent::ConnectionClosed {
                num_established: 0, ..
            } => return Some(start.elapsed()),
            SwarmEvent::Behaviour(request_response::Event::Message { .. }) if sending => {
                sending = send(&mut s);
                #[allow(clippy::disallowed_methods)] // a test's clock
                let now = tokio::time::Instant::now();
                deadline = now + RESET_WITHIN;
            }
            _ => {}
        }
    }
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_nodes_on_a_shared_host_are_reset_while_an_honest_nodes_rounds_go_on() {
    let rounds = 6u64;
    // Node 0 runs its VN in-process, node 1 (honest) at the host; three hostile nodes each own a VN there.
    let vn_keys: Vec<Keypair> = (0..5).map(|_| Keypair::generate_ed25519()).collect();
    let ids: Vec<PeerId> = vn_keys.iter().map(|k| k.public().to_peer_id()).collect();
    let links: Vec<Keypair> = (0..4).map(|_| Keypair::generate_ed25519()).collect();
    let lc = learning(2);
    let (split, parts) = lc.load().unwrap();
    let mut learners = lc.learners(&split, &parts, 0..2).unwrap().into_iter();
    // Only the honest nodes' VNs run: the peer list is theirs.
    let everyone = || PeerList::from_entries(ids[..2].iter().map(|p| (*p, None)));

    let (h0, _ev0) = NodeBuilder::new(vec![vn_keys[0].clone()], lc.clone(), 0)
        .learner(learners.next().unwrap())
        .peers(everyone())
        .degree(1)
        .rounds(rounds)
        .timing(Timing::loopback())
        .spawn()
        .await
        .unwrap();
    let boot = h0.addresses()[0].clone();
    let listed = || {
        PeerList::from_entries(
            ids[..2]
                .iter()
                .map(|p| (*p, (*p == boot.peer).then(|| boot.addr.clone()))),
        )
    };

    let host_key = Keypair::generate_ed25519();
    let host_id = host_key.public().to_peer_id();
    let tenant_bytes = MIN_TENANT_BYTES;
    let bounds = LinkBounds::for_tenant(tenant_bytes);
    let host = VnHost {
        link_listen: localhost(),
        link_key: host_key,
        peers: listed(),
        psk: None,
        vns: (1..5)
            .map(|i| HostedVn {
                key: vn_keys[i].clone(),
                listen: localhost(),
                announce: None,
                rn: links[i - 1].public().to_peer_id(),
            })
            .collect(),
        handshake: Duration::from_secs(10),
        observer: None,
        tenant_bytes,
    };
    let (stop_tx, stop) = watch::channel(false);
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        if let Err(e) = host.run(stop, Some(tx)).await {
            panic!("VN host failed: {e}");
        }
    });
    let host_addr = tokio::time::timeout(LIMIT, rx).await.unwrap().unwrap();

    let (h1, mut ev1) = NodeBuilder::new(Vec::new(), lc.clone(), 1)
        .remote_vns(
            links[0].clone(),
            vec![RemoteVn {
                host: host_addr
                    .clone()
                    .with(libp2p::multiaddr::Protocol::P2p(host_id)),
                peer: ids[1],
            }],
        )
        .learner(learners.next().unwrap())
        .peers(listed())
        .degree(1)
        .rounds(rounds)
        .timing(Timing::loopback())
        .spawn()
        .await
        .unwrap();

    // The attacks, all at once, while the honest node runs its rounds.
    let m = bounds.message_bytes;
    assert!(
        out_of_order(1).bytes.len() < m && 1_000_004 < m,
        "the attacks stay within the message bound"
    );
    let attacks = [
        (
            "out of order",
            (1..=40).map(out_of_order).collect::<Vec<_>>(),
            true,
        ),
        (
            "stalled reads",
            (0..12).map(|_| stalled(1_000_000, 600_000)).collect(),
            false,
        ),
        (
            "huge announced frame",
            vec![stalled(512 << 20, 1000)],
            false,
        ),
    ];
    let mut running = Vec::new();
    for (i, (name, requests, one_by_one)) in attacks.into_iter().enumerate() {
        let key = links[i + 1].clone();
        let addr = host_addr.clone();
        running.push((
            name,
            tokio::spawn(attack(key, host_id, addr, requests, one_by_one)),
        ));
    }
    let mut kept = Vec::new();
    for (name, task) in running {
        match task.await.unwrap() {
            Some(after) => println!("{name}: the host reset the hostile link after {after:?}"),
            None => {
                println!("{name}: the host kept the hostile link");
                kept.push(name);
            }
        }
    }

    let s = tokio::time::timeout(LIMIT, h1.wait())
        .await
        .expect("finished in time");
    assert_eq!(s.error, None);
    assert_eq!(s.rounds_completed, rounds);
    let (mut copies, mut lost) = (0, 0);
    while let Ok(e) = ev1.try_recv() {
        match e {
            NodeEvent::RoundFinished(m) => copies += m.copies_received,
            NodeEvent::VnLost { .. } => lost += 1,
            _ => {}
        }
    }
    println!(
        "honest node: {} rounds, {copies} copies, {lost} VNs lost",
        s.rounds_completed
    );
    assert_eq!(lost, 0, "the honest node's hosted VN went on");
    assert!(copies > 0, "the honest node's hosted VN exchanged");
    let _ = tokio::time::timeout(LIMIT, h0.wait()).await;
    let _ = stop_tx.send(true);
    assert!(
        kept.is_empty(),
        "the host kept hostile links within {RESET_WITHIN:?} of their attack: {kept:?}"
    );
}
