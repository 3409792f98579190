//! The RN↔VN link's libp2p shell, the same on both ends: a real node whose VNs run in VN hosts dials them,
//! a VN host (`node vn`) accepts its real nodes. The link is its own Swarm with its own identity (never a
//! VN's: the link must not tie a VN to its RN), noise-authenticated and encrypted, open only to the peers
//! the config names (allow-list), carrying [`protocol::link::LinkMessage`]s as request-response requests
//! with empty acknowledgements.
//!
//! [`spawn_link`] runs the Swarm in a task: messages to send go in through a [`Link`] handle, messages
//! received come out in sequence order (substreams may complete out of order, `link_order.rs`), and a peer
//! whose link broke — connection closed, a message lost or malformed, a byte bound of `link_limits.rs`
//! passed — is reported [`LinkEvent::Gone`] once, with its sequence state reset, so a reconnecting peer
//! starts afresh. The task itself never waits on one peer or on the consumer: what a peer can make it hold
//! is bounded by its budgets instead.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use libp2p::allow_block_list::{self, AllowedPeers};
use libp2p::connection_limits::{self, ConnectionLimits};
use libp2p::identity::Keypair;
use libp2p::request_response::{self, OutboundRequestId, ProtocolSupport};
use libp2p::swarm::{NetworkBehaviour, SwarmEvent};
use libp2p::{Multiaddr, PeerId, StreamProtocol, Swarm};
use protocol::link::{LinkBody, LinkMessage};
use tokio::sync::mpsc;

use super::link_codec::{LinkCodec, REFUSED};
use super::link_limits::{
    LINK_CONNECTIONS_PER_PEER, LINK_PENDING_INCOMING, LINK_STREAMS, LINK_YAMUX_STREAMS, LinkBounds,
    MAX_REORDER_MESSAGES,
};
use super::link_order::LinkOrder;
use crate::{NodeError, Result};

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
    pub limits: connection_limits::Behaviour,
    pub link: request_response::Behaviour<LinkCodec>,
}

/// A Swarm for a link identity whose peers are held to `bounds` (`super::link_limits`). Must be called
/// inside a tokio runtime.
pub fn build_link_swarm(
    key: Keypair,
    handshake: Duration,
    bounds: &LinkBounds,
) -> Result<Swarm<LinkBehaviour>> {
    let t = super::transport::transport(&key, None, handshake, LINK_YAMUX_STREAMS)?;
    let link = request_response::Behaviour::with_codec(
        LinkCodec::new(bounds.message_bytes, bounds.reading_bytes),
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
            limits: connection_limits::Behaviour::new(
                ConnectionLimits::default()
                    .with_max_pending_incoming(Some(LINK_PENDING_INCOMING))
                    .with_max_established_per_peer(Some(LINK_CONNECTIONS_PER_PEER)),
            ),
            link,
        })
        .map_err(|e| NodeError::Network(format!("link behaviour: {e}")))?
        .with_swarm_config(|c| c.with_idle_connection_timeout(LINK_IDLE))
        .build())
}

/// What the link task reports.
#[derive(Debug)]
pub enum LinkEvent {
    /// A message from `from`, in the order `from` sent it. Its bytes count against `from`'s budget of bytes
    /// held ([`LinkBounds::held_bytes`]) until `held` is dropped: a consumer drops it once it has handed the
    /// message on.
    Message {
        from: PeerId,
        msg: LinkMessage,
        held: Held,
    },
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
    Reset(PeerId),
}

/// A delivered message's bytes, counted against its sender's budget until dropped.
#[derive(Debug)]
pub struct Held {
    taken: Arc<AtomicUsize>,
    bytes: usize,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.taken.fetch_sub(self.bytes, Ordering::Relaxed);
    }
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

    /// Resets `peer`'s link (it is reported [`LinkEvent::Gone`]); a peer that reconnects starts afresh.
    pub async fn reset(&self, peer: PeerId) -> bool {
        self.cmds.send(LinkCmd::Reset(peer)).await.is_ok()
    }
}

/// What the link task keeps per peer.
struct Peer {
    next_out: u64,
    order: LinkOrder<LinkMessage>,
    /// Bytes delivered and not yet dropped by the consumer ([`Held`]).
    taken: Arc<AtomicUsize>,
    /// Bytes sent and not yet acknowledged.
    unacked: usize,
}

impl Peer {
    fn new(bounds: &LinkBounds) -> Self {
        Self {
            next_out: 0,
            order: LinkOrder::new(MAX_REORDER_MESSAGES, bounds.held_bytes),
            taken: Arc::default(),
            unacked: 0,
        }
    }
}

/// The link task's state: its peers and the requests it sent that are not yet acknowledged.
struct State {
    bounds: LinkBounds,
    max_chunk_frame: usize,
    peers: HashMap<PeerId, Peer>,
    unacked: HashMap<OutboundRequestId, (PeerId, usize)>,
    /// Peers reset whose connections are still closing: what they still send is dropped.
    resetting: HashSet<PeerId>,
    events: mpsc::UnboundedSender<LinkEvent>,
}

/// Runs `swarm` in a task; `max_chunk_frame` bounds the chunk frames inside messages, `bounds` what each
/// peer can make this end hold (the same as the swarm's). The task never waits for the consumer of its
/// events: a peer whose messages the consumer does not take fast enough passes its budget of bytes held and
/// is reset, alone. It ends when every [`Link`] handle is dropped or the event receiver is.
pub fn spawn_link(
    mut swarm: Swarm<LinkBehaviour>,
    max_chunk_frame: usize,
    bounds: LinkBounds,
) -> (Link, mpsc::UnboundedReceiver<LinkEvent>) {
    let (cmd_tx, mut cmds) = mpsc::channel::<LinkCmd>(256);
    let (ev_tx, ev_rx) = mpsc::unbounded_channel::<LinkEvent>();
    let stats = Arc::new(LinkStats::default());
    let counted = stats.clone();
    tokio::spawn(async move {
        let mut st = State {
            bounds,
            max_chunk_frame,
            peers: HashMap::new(),
            unacked: HashMap::new(),
            resetting: HashSet::new(),
            events: ev_tx,
        };
        // When the handles were all dropped.
        let mut closing: Option<tokio::time::Instant> = None;
        loop {
            if st.events.is_closed() {
                return;
            }
            if let Some(since) = closing
                && (st.unacked.is_empty() || since.elapsed() >= CLOSE_GRACE)
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
                    Some(LinkCmd::Reset(peer)) => st.gone(&mut swarm, peer),
                    Some(LinkCmd::Send { to, vn, body }) => {
                        if let Some(n) = st.send(&mut swarm, to, vn, body) {
                            counted.add(n);
                        }
                    }
                },
                _ = tokio::time::sleep(CLOSE_GRACE), if closing.is_some() => {}
                ev = swarm.select_next_some() => match ev {
                    SwarmEvent::Behaviour(LinkBehaviourEvent::Link(e)) => {
                        if let request_response::Event::Message {
                            message: request_response::Message::Request { request, .. },
                            ..
                        } = &e
                        {
                            counted.add(request.len());
                        }
                        st.handle(&mut swarm, e);
                    }
                    SwarmEvent::ConnectionClosed { peer_id, num_established: 0, .. } => {
                        st.resetting.remove(&peer_id);
                        st.gone(&mut swarm, peer_id);
                    }
                    SwarmEvent::ConnectionEstablished { peer_id, num_established, .. }
                        if num_established.get() == 1 =>
                    {
                        st.resetting.remove(&peer_id);
                    }
                    SwarmEvent::OutgoingConnectionError { peer_id: Some(p), error, .. } => {
                        tracing::debug!(peer = %p, %error, "link dial failed");
                    }
                    _ => {}
                },
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

impl State {
    /// Sends `body` to `to`'s VN `vn`; the bytes sent, or none when the message could not go (and `to` was
    /// reset).
    fn send(
        &mut self,
        swarm: &mut Swarm<LinkBehaviour>,
        to: PeerId,
        vn: u32,
        body: LinkBody,
    ) -> Option<usize> {
        let bounds = self.bounds;
        let peer = self.peers.entry(to).or_insert_with(|| Peer::new(&bounds));
        let msg = LinkMessage {
            vn,
            seq: peer.next_out,
            body,
        };
        peer.next_out += 1;
        let bytes = match msg.encode(self.max_chunk_frame) {
            Ok(b) if b.len() <= bounds.message_bytes => b,
            // Over a limit: a bug at this end, but the peer must not wait for the lost sequence number.
            Ok(b) => {
                tracing::error!(peer = %to, bytes = b.len(), max = bounds.message_bytes, "link message over the bound");
                self.gone(swarm, to);
                return None;
            }
            Err(e) => {
                tracing::error!(peer = %to, error = %e, "link message not encodable");
                self.gone(swarm, to);
                return None;
            }
        };
        if peer.unacked + bytes.len() > bounds.unacked_bytes {
            tracing::warn!(
                peer = %to,
                unacked = peer.unacked,
                max = bounds.unacked_bytes,
                "link peer does not take what it is sent: resetting its link"
            );
            self.gone(swarm, to);
            return None;
        }
        peer.unacked += bytes.len();
        let n = bytes.len();
        let id = swarm.behaviour_mut().link.send_request(&to, bytes);
        self.unacked.insert(id, (to, n));
        Some(n)
    }

    /// An acknowledgement (or a failure) of request `id`: its bytes are no longer held for its peer.
    fn acknowledged(&mut self, id: OutboundRequestId) {
        if let Some((peer, n)) = self.unacked.remove(&id)
            && let Some(p) = self.peers.get_mut(&peer)
        {
            p.unacked = p.unacked.saturating_sub(n);
        }
    }

    fn handle(
        &mut self,
        swarm: &mut Swarm<LinkBehaviour>,
        e: request_response::Event<Vec<u8>, Vec<u8>>,
    ) {
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
                self.received(swarm, peer, request);
            }
            request_response::Event::Message {
                message: request_response::Message::Response { request_id, .. },
                ..
            } => self.acknowledged(request_id),
            request_response::Event::OutboundFailure {
                peer,
                error,
                request_id,
                ..
            } => {
                self.acknowledged(request_id);
                tracing::debug!(%peer, %error, "link message lost");
                self.gone(swarm, peer);
            }
            request_response::Event::InboundFailure { peer, error, .. } => {
                tracing::debug!(%peer, %error, "inbound link message lost: resetting the link");
                self.gone(swarm, peer);
            }
            _ => {}
        }
    }

    /// A message from `from`: into its sequence, and what is now in order out to the consumer.
    fn received(&mut self, swarm: &mut Swarm<LinkBehaviour>, from: PeerId, request: Vec<u8>) {
        // A reset peer's streams still arriving while its connections close (refused ones among them).
        if self.resetting.contains(&from) {
            return;
        }
        if request == REFUSED {
            tracing::warn!(
                peer = %from,
                max_message = self.bounds.message_bytes,
                max_reading = self.bounds.reading_bytes,
                "link message over the message bound or the connection's bytes being read: resetting the link"
            );
            return self.gone(swarm, from);
        }
        let msg = match LinkMessage::decode(&request, self.max_chunk_frame) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(peer = %from, error = %e, "malformed link message: resetting the link");
                return self.gone(swarm, from);
            }
        };
        let bounds = self.bounds;
        let peer = self.peers.entry(from).or_insert_with(|| Peer::new(&bounds));
        // Its bytes on the wire plus the event that carries it: a flood of tiny messages then reaches the
        // budget too, rather than queueing millions of events the budget would count as a few bytes each.
        let bytes = request.len() + std::mem::size_of::<LinkEvent>();
        let taken = peer.taken.load(Ordering::Relaxed);
        let held = taken + peer.order.held_bytes() + bytes;
        if held > bounds.held_bytes {
            tracing::warn!(
                peer = %from,
                held,
                max = bounds.held_bytes,
                "link messages held for the peer (out of order, or not yet taken) over its budget: resetting its link"
            );
            return self.gone(swarm, from);
        }
        if let Err(e) = peer.order.push(msg.seq, msg, bytes) {
            tracing::warn!(peer = %from, error = %e, "link messages out of sequence: resetting the link");
            return self.gone(swarm, from);
        }
        while let Some((msg, bytes)) = peer.order.pop() {
            peer.taken.fetch_add(bytes, Ordering::Relaxed);
            let held = Held {
                taken: peer.taken.clone(),
                bytes,
            };
            let _ = self.events.send(LinkEvent::Message { from, msg, held });
        }
    }

    /// Resets `peer`'s link (closing its connections, so the other end notices too) and reports it once.
    fn gone(&mut self, swarm: &mut Swarm<LinkBehaviour>, peer: PeerId) {
        let had = self.peers.remove(&peer).is_some();
        if swarm.disconnect_peer_id(peer).is_ok() {
            self.resetting.insert(peer);
        }
        if had {
            let _ = self.events.send(LinkEvent::Gone(peer));
        }
    }
}
