//! The RN↔VN link's libp2p shell, the same on both ends: a real node whose VNs run in VN hosts dials them,
//! a VN host (`node vn`) accepts its real nodes. The link is its own Swarm with its own identity (never a
//! VN's: the link must not tie a VN to its RN), noise-authenticated and encrypted, open only to the peers
//! the config names (allow-list), carrying [`protocol::link::LinkMessage`]s as request-response requests
//! with empty acknowledgements.
//!
//! [`spawn_link`] runs the Swarm in a task: messages to send go in through a [`Link`] handle, messages
//! received come out in sequence order (substreams may complete out of order), and a peer whose link
//! broke — connection closed, a message lost or malformed, the reorder buffer over its bound — is reported
//! [`LinkEvent::Gone`] once, with its sequence state reset, so a reconnecting peer starts afresh.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use libp2p::allow_block_list::{self, AllowedPeers};
use libp2p::identity::Keypair;
use libp2p::request_response::{self, ProtocolSupport};
use libp2p::swarm::{NetworkBehaviour, SwarmEvent};
use libp2p::{Multiaddr, PeerId, StreamProtocol, Swarm};
use protocol::link::{LinkBody, LinkMessage};
use tokio::sync::mpsc;

use super::codec::FrameCodec;
use crate::{NodeError, Result};

/// The link codec's bound on one message: a per-edge batch of large chunks fits; memory still follows the
/// bytes that arrive (`FrameCodec`), and only allow-listed peers get this far.
pub const MAX_LINK_FRAME: usize = 1 << 30;

/// Messages received ahead of a missing one. Far above what a round puts in flight (k·r copies plus a
/// report per VN); a peer that gets this far ahead has lost a message and the link is reset.
const MAX_REORDER: usize = 4096;

/// Streams in flight per link connection: a round of k = 16, r = 16 hands over 256 copies at once.
const LINK_STREAMS: usize = 2048;

/// yamux streams at once on a link connection: yamux's default.
const LINK_YAMUX_STREAMS: usize = 512;

/// How long a link message may take (a chunk of ResNet-18 at k = 1 is 45 MB).
const LINK_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// When every handle is dropped, how long the task goes on delivering what is still in flight (a node's last
/// `Stop`s to its VNs) before it closes the link.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// A link is held for the whole run, however long training keeps it quiet.
const LINK_IDLE: Duration = Duration::from_secs(24 * 3600);

#[derive(NetworkBehaviour)]
pub struct LinkBehaviour {
    pub allow: allow_block_list::Behaviour<AllowedPeers>,
    pub link: request_response::Behaviour<FrameCodec>,
}

/// A Swarm for a link identity. Must be called inside a tokio runtime.
pub fn build_link_swarm(key: Keypair, handshake: Duration) -> Result<Swarm<LinkBehaviour>> {
    // yamux's own default: a round hands hundreds of copies over at once, and only allow-listed peers
    // (the node's own hosts) reach the link.
    let t = super::transport::transport(&key, None, handshake, LINK_YAMUX_STREAMS)?;
    let link = request_response::Behaviour::with_codec(
        FrameCodec::new(MAX_LINK_FRAME, 0),
        [(
            StreamProtocol::new(protocol::names::RNVN),
            ProtocolSupport::Full,
        )],
        request_response::Config::default()
            .with_request_timeout(LINK_REQUEST_TIMEOUT)
            .with_max_concurrent_streams(LINK_STREAMS),
    );
    Ok(libp2p::SwarmBuilder::with_existing_identity(key)
        .with_tokio()
        .with_other_transport(|_| t)
        .map_err(|e| NodeError::Network(format!("link transport: {e}")))?
        .with_behaviour(|_| LinkBehaviour {
            allow: allow_block_list::Behaviour::default(),
            link,
        })
        .map_err(|e| NodeError::Network(format!("link behaviour: {e}")))?
        .with_swarm_config(|c| c.with_idle_connection_timeout(LINK_IDLE))
        .build())
}

/// What the link task reports.
#[derive(Debug)]
pub enum LinkEvent {
    /// A message from `from`, in the order `from` sent it.
    Message { from: PeerId, msg: LinkMessage },
    /// The link with `peer` broke (or could not be made); anything in flight is lost.
    Gone(PeerId),
}

enum LinkCmd {
    Send {
        to: PeerId,
        vn: u32,
        body: LinkBody,
    },
    Allow {
        peer: PeerId,
        addr: Option<Multiaddr>,
    },
}

/// A handle to send on the link.
#[derive(Clone)]
pub struct Link {
    cmds: mpsc::Sender<LinkCmd>,
    stats: Arc<LinkStats>,
}

/// Bytes of link messages sent and received (as encoded, without libp2p's framing and encryption).
#[derive(Debug, Default)]
pub struct LinkStats {
    bytes: AtomicU64,
}

impl LinkStats {
    fn add(&self, n: usize) {
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// The bytes counted since the last call (a round's, when called once per round).
    pub fn take(&self) -> u64 {
        self.bytes.swap(0, Ordering::Relaxed)
    }
}

impl Link {
    /// Queues `body` for the VN of slot `vn` at `to`. Returns false when the link task has ended.
    pub async fn send(&self, to: PeerId, vn: u32, body: LinkBody) -> bool {
        self.cmds.send(LinkCmd::Send { to, vn, body }).await.is_ok()
    }

    /// The link's byte counter.
    pub fn stats(&self) -> Arc<LinkStats> {
        self.stats.clone()
    }

    /// Admits `peer` (and, to dial it, its address).
    pub async fn allow(&self, peer: PeerId, addr: Option<Multiaddr>) -> bool {
        self.cmds.send(LinkCmd::Allow { peer, addr }).await.is_ok()
    }
}

/// Per-peer sequence state.
#[derive(Default)]
struct Sequences {
    next_out: u64,
    next_in: u64,
    early: BTreeMap<u64, LinkMessage>,
}

/// Runs `swarm` in a task; `max_chunk_frame` bounds the chunk frames inside messages. The task ends when
/// every [`Link`] handle is dropped or the event receiver is.
pub fn spawn_link(
    mut swarm: Swarm<LinkBehaviour>,
    max_chunk_frame: usize,
) -> (Link, mpsc::Receiver<LinkEvent>) {
    let (cmd_tx, mut cmds) = mpsc::channel::<LinkCmd>(256);
    let (ev_tx, ev_rx) = mpsc::channel::<LinkEvent>(4096);
    let stats = Arc::new(LinkStats::default());
    let counted = stats.clone();
    tokio::spawn(async move {
        let mut peers: HashMap<PeerId, Sequences> = HashMap::new();
        // Requests sent and not yet acknowledged (or failed), and when the handles were all dropped.
        let mut in_flight = 0usize;
        let mut closing: Option<tokio::time::Instant> = None;
        loop {
            if let Some(since) = closing
                && (in_flight == 0 || since.elapsed() >= CLOSE_GRACE)
            {
                return;
            }
            tokio::select! {
                cmd = cmds.recv(), if closing.is_none() => match cmd {
                    None => {
                        // The shell's clock, for the grace period only.
                        #[allow(clippy::disallowed_methods)]
                        let now = tokio::time::Instant::now();
                        closing = Some(now);
                    }
                    Some(LinkCmd::Allow { peer, addr }) => {
                        swarm.behaviour_mut().allow.allow_peer(peer);
                        if let Some(a) = addr {
                            swarm.add_peer_address(peer, a);
                        }
                    }
                    Some(LinkCmd::Send { to, vn, body }) => {
                        let seq = peers.entry(to).or_default();
                        let msg = LinkMessage { vn, seq: seq.next_out, body };
                        seq.next_out += 1;
                        match msg.encode(max_chunk_frame) {
                            Ok(bytes) => {
                                counted.add(bytes.len());
                                in_flight += 1;
                                swarm.behaviour_mut().link.send_request(&to, bytes);
                            }
                            // Over a limit: a bug at this end, but the peer must not wait for the lost
                            // sequence number.
                            Err(e) => {
                                tracing::error!(peer = %to, error = %e, "link message not encodable");
                                if gone(&mut swarm, &mut peers, to, &ev_tx).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                },
                _ = tokio::time::sleep(CLOSE_GRACE), if closing.is_some() => {}
                ev = swarm.select_next_some() => {
                    let sent = match ev {
                        SwarmEvent::Behaviour(LinkBehaviourEvent::Link(e)) => {
                            if matches!(
                                e,
                                request_response::Event::Message {
                                    message: request_response::Message::Response { .. },
                                    ..
                                } | request_response::Event::OutboundFailure { .. }
                            ) {
                                in_flight = in_flight.saturating_sub(1);
                            }
                            if let request_response::Event::Message {
                                message: request_response::Message::Request { request, .. },
                                ..
                            } = &e
                            {
                                counted.add(request.len());
                            }
                            handle(&mut swarm, &mut peers, e, max_chunk_frame, &ev_tx).await
                        }
                        SwarmEvent::ConnectionClosed { peer_id, num_established: 0, .. } => {
                            gone(&mut swarm, &mut peers, peer_id, &ev_tx).await
                        }
                        SwarmEvent::OutgoingConnectionError { peer_id: Some(p), error, .. } => {
                            tracing::debug!(peer = %p, %error, "link dial failed");
                            Ok(())
                        }
                        _ => Ok(()),
                    };
                    if sent.is_err() {
                        return;
                    }
                }
            }
        }
    });
    (
        Link {
            cmds: cmd_tx,
            stats,
        },
        ev_rx,
    )
}

type Sent = std::result::Result<(), mpsc::error::SendError<LinkEvent>>;

async fn handle(
    swarm: &mut Swarm<LinkBehaviour>,
    peers: &mut HashMap<PeerId, Sequences>,
    e: request_response::Event<Vec<u8>, Vec<u8>>,
    max_chunk_frame: usize,
    ev_tx: &mpsc::Sender<LinkEvent>,
) -> Sent {
    match e {
        request_response::Event::Message {
            peer,
            message:
                request_response::Message::Request {
                    request, channel, ..
                },
            ..
        } => {
            let _ = swarm
                .behaviour_mut()
                .link
                .send_response(channel, Vec::new());
            let msg = match LinkMessage::decode(&request, max_chunk_frame) {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(%peer, error = %e, "malformed link message: resetting the link");
                    return gone(swarm, peers, peer, ev_tx).await;
                }
            };
            let seq = peers.entry(peer).or_default();
            if msg.seq < seq.next_in {
                tracing::warn!(%peer, seq = msg.seq, "repeated link message: resetting the link");
                return gone(swarm, peers, peer, ev_tx).await;
            }
            seq.early.insert(msg.seq, msg);
            if seq.early.len() > MAX_REORDER {
                tracing::warn!(%peer, "link messages lost: resetting the link");
                return gone(swarm, peers, peer, ev_tx).await;
            }
            while let Some(m) = seq.early.remove(&seq.next_in) {
                seq.next_in += 1;
                ev_tx
                    .send(LinkEvent::Message { from: peer, msg: m })
                    .await?;
            }
            Ok(())
        }
        request_response::Event::OutboundFailure { peer, error, .. } => {
            tracing::debug!(%peer, %error, "link message lost");
            gone(swarm, peers, peer, ev_tx).await
        }
        request_response::Event::InboundFailure { peer, error, .. } => {
            tracing::debug!(%peer, %error, "inbound link message lost");
            gone(swarm, peers, peer, ev_tx).await
        }
        _ => Ok(()),
    }
}

/// Resets `peer`'s link (closing its connections, so the other end notices too) and reports it once.
async fn gone(
    swarm: &mut Swarm<LinkBehaviour>,
    peers: &mut HashMap<PeerId, Sequences>,
    peer: PeerId,
    ev_tx: &mpsc::Sender<LinkEvent>,
) -> Sent {
    let had = peers.remove(&peer).is_some();
    let _ = swarm.disconnect_peer_id(peer);
    if had {
        ev_tx.send(LinkEvent::Gone(peer)).await?;
    }
    Ok(())
}
