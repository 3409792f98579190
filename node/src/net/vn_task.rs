//! One virtual node on the network: a tokio task owning the VN's Swarm and its [`VnEngine`], translating
//! swarm events into engine inputs and engine outputs into requests, responses and timers.
//!
//! By default each VN runs on a thread and runtime of its own ([`VnTask::run`]). With a release delay
//! (`Timing::release_delay_us`, off by default) what the engine sends (control messages, chunks, replies,
//! round queries and answers) is held and released on the VN's own random schedule ([`super::release`],
//! [`VnTask::release`]); what stays in the process (the RN's messages, timers) is carried out at once.
//!
//! Permissioning happens in two places: libp2p's allow-list closes connections with unlisted peers, and,
//! since that only happens after the handshake, every request from an unlisted peer is dropped here before
//! the engine sees it (admission is the first successful exchange, not `ConnectionEstablished`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use libp2p::request_response::{self, OutboundRequestId, ResponseChannel};
use libp2p::swarm::SwarmEvent;
use libp2p::swarm::dial_opts::{DialOpts, PeerCondition};
use libp2p::{Multiaddr, PeerId, Swarm, identify, ping};
use protocol::ChunkFrame;
use protocol::Round;
use protocol::rnvn::{FromVirtualNode, ToVirtualNode};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::behaviour::VnBehaviourEvent;
use super::chunk_link::{ChunkEvent, ChunkLinks};
use super::chunk_slots::{ChunkSlots, GridNote};
use super::contact::VnContact;
use super::control_link::{Closed, ControlLinks, LinkEvent};
use super::liveness::Liveness;
use super::preconnect::Preconnect;
use super::release::Held;
use super::transport::VnSwarm;
use crate::VnAddr;
use crate::engine::rate::{Rate, TokenBucket};
use crate::engine::{RefusalKind, ReplyToken, VnDriver, VnEngine, VnInput, VnOutput, route_vn};
use crate::events::{EventSink, NodeEvent};
use crate::observe::Observer;
use crate::peers::PeerList;

/// Refusal events one VN emits: a burst, then one per second. Each becomes a warning line in the `node`
/// binary, and a flood of refusals must not become a flood of lines (or fill the embedder's event queue);
/// every refusal is still counted in the round metrics, and the next event says how many were not reported.
const REFUSAL_EVENTS: Rate = Rate {
    burst: 20.0,
    per_period: 1.0,
    period: Duration::from_secs(1),
};

/// Rate-limited refusal and connection-failure events of one VN.
pub(crate) struct RefusalLog {
    events: EventSink,
    bucket: TokenBucket,
    suppressed: u64,
}

impl RefusalLog {
    pub(crate) fn new(events: EventSink) -> Self {
        Self {
            events,
            bucket: REFUSAL_EVENTS.bucket(Duration::ZERO),
            suppressed: 0,
        }
    }

    /// Emits `ev` (a refusal or connection failure at time `now`) unless over the rate.
    fn report(&mut self, now: Duration, mut ev: NodeEvent) {
        if !REFUSAL_EVENTS.take(&mut self.bucket, now) {
            self.suppressed += 1;
            return;
        }
        if self.suppressed > 0 {
            let note = format!(" ({} more refusals not reported)", self.suppressed);
            match &mut ev {
                NodeEvent::PeerRefused { reason, .. } => reason.push_str(&note),
                NodeEvent::ConnectionFailed { error, .. } => error.push_str(&note),
                _ => {}
            }
            self.suppressed = 0;
        }
        self.events.send(ev);
    }
}

/// Pending inbound chunk requests awaiting the engine's verdict. Bounded by the engine's own limits (it
/// answers or holds at most `MAX_PENDING_CHUNKS` beyond the ones it decides at once).
pub type Channels = BTreeMap<u64, ResponseChannel<Vec<u8>>>;

/// Chunks received on chunk streams awaiting the engine's verdict, as [`Channels`] are for requests: each
/// holds its reader's next read until answered.
pub type StreamReplies = BTreeMap<u64, oneshot::Sender<Vec<u8>>>;

/// The VN's Swarm as the engine's driver (a [`SwarmPort`] over the task's fields, so that the engine can be
/// borrowed beside it); with `hold`, sends are collected there instead of made.
macro_rules! swarm_port {
    ($task:ident, $channels:expr, $addrs:expr, $wake:expr, $hold:expr) => {
        SwarmPort {
            index: $task.index,
            node: $task.node,
            swarm: &mut $task.swarm,
            channels: $channels,
            round_channels: &mut $task.round_channels,
            addrs: $addrs,
            wake: $wake,
            links: &mut $task.links,
            chunks: &mut $task.chunks,
            chunk_replies: &mut $task.chunk_replies,
            epoch: $task.epoch,
            log: &mut $task.log,
            observer: $task.observer.as_deref(),
            to_rn: Vec::new(),
            hold: $hold,
        }
    };
}

pub struct VnTask {
    pub index: usize,
    /// libp2p's swarm metrics of this VN (connections, identify, ping), where its node serves metrics.
    pub swarm_metrics: Option<libp2p::metrics::Metrics>,
    pub swarm: VnSwarm,
    pub engine: VnEngine<VnAddr>,
    pub bootstrap: Vec<VnAddr>,
    pub peers: Arc<PeerList>,
    pub commands: mpsc::Receiver<ToVirtualNode>,
    pub to_rn: mpsc::Sender<(usize, FromVirtualNode)>,
    /// Refusal and connection-failure events, rate-limited.
    pub(crate) log: RefusalLog,
    pub epoch: Instant,
    /// The real node's index and the harness's observer, if any.
    pub node: usize,
    pub observer: Option<Arc<dyn Observer<PeerId>>>,
    /// A view saved by a checkpoint, restored before joining (`node run --resume`); usually empty.
    pub restored_view: Vec<protocol::control::ViewEntry<VnAddr>>,
    /// Where this VN publishes its view after each exchange, for the RN's checkpoints.
    pub view_board: Option<crate::checkpoint::ViewBoard>,
    /// Inbound round queries awaiting the engine's answer (it answers at once or never: what is left after
    /// an input's outputs are carried out is dropped, which closes the stream unanswered).
    pub round_channels: Channels,
    /// Peers whose last connection closed with an error and that we are dialling again: if that fails they
    /// are gone (`VnInput::PeerGone`).
    pub redialing: HashSet<PeerId>,
    /// Control messages to and from peers, over one stream per peer and direction; their acknowledgements'
    /// round trips go to the engine (`VnInput::ControlRoundTrip`).
    pub links: ControlLinks,
    /// Chunks to and from peers, over one stream per peer and direction.
    pub chunks: ChunkLinks,
    /// Received chunks on those streams awaiting the engine's verdict.
    pub chunk_replies: StreamReplies,
    /// Chunks whose streams were all dropped unread, sent again as requests: each request's peer and round.
    pub chunk_requests: HashMap<OutboundRequestId, (PeerId, Round)>,
    /// Connections to open during the warm-up (`preconnect.rs`); empty for a resumed VN.
    pub preconnect: Preconnect,
    /// Sends held until the VN's own random release times (`release.rs`).
    pub release: Held<Deferred>,
    /// Run on a thread and runtime of the VN's own ([`VnTask::run`]).
    pub own_thread: bool,
    /// Chunks sent in slots of a grid every node shares, if on (`chunk_slots.rs`, [`ChunkSlots`]).
    pub chunk_slots: ChunkSlots<Deferred>,
    /// What this VN reaches, for its RN (`contact.rs`); none in a VN host, whose node is elsewhere.
    pub contact: Option<VnContact>,
    /// When each connection last answered a ping: silent ones are closed and their peers gone
    /// (`liveness.rs`).
    pub liveness: Liveness,
    /// Inputs found together (several peers falling silent at once), handed to the engine one per turn.
    pub queued: std::collections::VecDeque<VnInput<VnAddr>>,
}

/// A send the engine asked for, held until its release time.
#[derive(Debug)]
pub enum Deferred {
    Control {
        to: VnAddr,
        bytes: Vec<u8>,
    },
    Chunk {
        to: VnAddr,
        round: Round,
        bytes: Arc<Vec<u8>>,
    },
    Reply {
        token: ReplyToken,
        bytes: Vec<u8>,
    },
    RoundQuery {
        to: VnAddr,
    },
    ReplyRound {
        token: ReplyToken,
        bytes: Vec<u8>,
    },
}

impl VnTask {
    /// Runs the VN until its RN stops it. With `own_thread`, on a thread with a single-threaded runtime of its
    /// own: its timers, its links' tasks and the connections it accepts or dials are polled there (tasks spawned
    /// from it land on it), so that the wake-up in which a process serves one VN never serves a sibling (a
    /// multi-threaded runtime polls whatever is ready, and one node's VNs all are when its process gets the
    /// CPU back). Dropping the returned future stops the VN, as it does the task run here.
    pub async fn run(self) {
        if !self.own_thread {
            return self.run_here().await;
        }
        let (done_tx, done_rx) = oneshot::channel::<()>();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let name = format!("vn-{}-{}", self.node, self.index);
        let spawned = std::thread::Builder::new().name(name).spawn(move || {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt.block_on(async move {
                    tokio::select! {
                        () = self.run_here() => {}
                        // The caller dropped its future (the node stops): the VN stops with it.
                        _ = stop_rx => {}
                    }
                }),
                Err(e) => tracing::warn!(%e, "no runtime for a VN's own thread"),
            }
            let _ = done_tx.send(());
        });
        if let Err(e) = spawned {
            tracing::warn!(%e, "no thread for a VN");
            return;
        }
        // Held until the VN ends: dropping it (this future dropped) tells the thread to stop.
        let _stop = stop_tx;
        let _ = done_rx.await;
    }

    async fn run_here(mut self) {
        // Accepting streams starts here, on the runtime the VN runs on.
        self.links.start();
        self.chunks.start();
        let mut channels: Channels = BTreeMap::new();
        let mut next_token = 0u64;
        let mut addrs: HashMap<PeerId, Multiaddr> = self
            .bootstrap
            .iter()
            .map(|a| (a.peer, a.addr.clone()))
            .collect();
        let mut wake: Option<Instant> = None;

        let now = self.epoch.elapsed();
        let saved = std::mem::take(&mut self.restored_view);
        let out = self
            .engine
            .join_restored(now, saved, self.bootstrap.clone());
        if !self.apply(out, &mut channels, &addrs, &mut wake).await {
            return;
        }
        self.close_unanswered_queries();

        loop {
            if let Some(input) = self.queued.pop_front() {
                let out = self.engine.handle(self.epoch.elapsed(), input);
                if !self.apply(out, &mut channels, &addrs, &mut wake).await {
                    return;
                }
                self.close_unanswered_queries();
                continue;
            }
            let sleep = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            // Checked on every turn as well as by its timer: with pongs coming every second on each live
            // connection the loop turns often, and a check costs a pass over the connections.
            if self.liveness.due(self.epoch.elapsed()) {
                self.close_silent(&addrs);
                continue;
            }
            let check = self.liveness.next_check(self.epoch.elapsed());
            let epoch = self.epoch;
            let liveness_due = async move {
                match check {
                    Some(at) => tokio::time::sleep_until(epoch + at).await,
                    None => std::future::pending().await,
                }
            };
            let input = tokio::select! {
                cmd = self.commands.recv() => match cmd {
                    Some(ToVirtualNode::Stop) | None => {
                        // What is still held goes now: the last round's chunks and replies are owed.
                        let mut held = self.release.take_all();
                        held.extend(self.chunk_slots.held.take_all());
                        self.send_released(held, &mut channels, &addrs, &mut wake);
                        return;
                    }
                    // The rounds begin: the warm-up's remaining dials are dropped (they dial on demand).
                    Some(msg @ (ToVirtualNode::StartRound(_) | ToVirtualNode::Prepare(_))) => {
                        self.preconnect.abandon();
                        VnInput::FromRn(msg)
                    }
                    Some(msg) => VnInput::FromRn(msg),
                },
                _ = sleep => { wake = None; VnInput::Tick }
                _ = release_due(&self.release, self.epoch) => {
                    let due = self.release.take_due(self.epoch.elapsed());
                    self.send_released(due, &mut channels, &addrs, &mut wake);
                    continue;
                }
                _ = release_due(&self.chunk_slots.held, self.epoch) => {
                    let due = self.chunk_slots.held.take_due(self.epoch.elapsed());
                    self.send_released(due, &mut channels, &addrs, &mut wake);
                    continue;
                }
                _ = preconnect_due(&self.preconnect, self.epoch) => {
                    self.dial_due(&addrs);
                    continue;
                }
                () = liveness_due => {
                    self.close_silent(&addrs);
                    continue;
                }
                ev = self.links.next() => match self.on_link_event(ev, &addrs) {
                    Some(input) => input,
                    None => continue,
                },
                ev = self.chunks.next() => match self.on_chunk_event(ev, &mut next_token, &addrs) {
                    Some(input) => input,
                    None => continue,
                },
                ev = self.swarm.select_next_some() => {
                    if let Some(m) = &self.swarm_metrics {
                        record_swarm_event(m, &ev);
                    }
                    match &ev {
                        SwarmEvent::ConnectionEstablished { peer_id, .. }
                        | SwarmEvent::OutgoingConnectionError { peer_id: Some(peer_id), .. } => {
                            self.preconnect.ended(peer_id)
                        }
                        _ => {}
                    }
                    self.note_contact(&ev);
                    match self.on_swarm_event(ev, &mut channels, &mut next_token, &mut addrs) {
                        Some(input) => input,
                        None => continue,
                    }
                }
            };
            let now = self.epoch.elapsed();
            let out = self.engine.handle(now, input);
            if !self.apply(out, &mut channels, &addrs, &mut wake).await {
                return;
            }
            self.close_unanswered_queries();
        }
    }

    /// Closes the connections that answered no ping for the peer silence; a peer left with none that
    /// answers is gone for the engine, once (a closed connection is not dialled again: the next message to
    /// the peer dials it, and a dial to a vanished peer fails within the handshake timeout).
    fn close_silent(&mut self, addrs: &HashMap<PeerId, Multiaddr>) {
        for s in self.liveness.take_silent(self.epoch.elapsed()) {
            tracing::debug!(vn = self.index, peer = %s.peer, gone = s.peer_gone, silent_for = ?s.silent_for, "connection silent; closing it");
            self.swarm.close_connection(s.connection);
            if s.peer_gone && self.peers.is_allowed(&s.peer) {
                self.redialing.remove(&s.peer);
                self.queued.push_back(VnInput::PeerGone {
                    peer: Self::addr_of(s.peer, addrs),
                });
            }
        }
    }

    /// Queries the engine did not answer (unlisted, over the rate, malformed) close unanswered; those whose
    /// answer is held stay open for it.
    fn close_unanswered_queries(&mut self) {
        if self.round_channels.is_empty() {
            return;
        }
        let held: std::collections::BTreeSet<ReplyToken> = self
            .release
            .iter()
            .filter_map(|d| match d {
                Deferred::ReplyRound { token, .. } => Some(*token),
                _ => None,
            })
            .collect();
        self.round_channels.retain(|t, _| held.contains(t));
    }

    /// Carries out held sends whose time has come.
    fn send_released(
        &mut self,
        sends: Vec<Deferred>,
        channels: &mut Channels,
        addrs: &HashMap<PeerId, Multiaddr>,
        wake: &mut Option<Instant>,
    ) {
        if sends.is_empty() {
            return;
        }
        let mut port = swarm_port!(self, channels, addrs, wake, None);
        for d in sends {
            match d {
                Deferred::Control { to, bytes } => port.send_control(to, bytes),
                Deferred::Chunk { to, round, bytes } => port.send_chunk(to, round, bytes),
                Deferred::Reply { token, bytes } => port.reply(token, bytes),
                Deferred::RoundQuery { to } => port.send_round_query(to),
                Deferred::ReplyRound { token, bytes } => port.reply_round(token, bytes),
            }
        }
    }

    /// Starts the next warm-up dial whose time has come, one at a time (`Preconnect::dialling`): a peer
    /// already connected or being dialled is skipped for the next; a failed dial only ends the wait, the rounds
    /// dial on demand.
    fn dial_due(&mut self, addrs: &HashMap<PeerId, Multiaddr>) {
        while let Some(to) = self.preconnect.take_due(self.epoch.elapsed()) {
            let opts = DialOpts::peer_id(to.peer)
                .condition(PeerCondition::DisconnectedAndNotDialing)
                .addresses(dial_addrs(&to, addrs))
                .build();
            if self.swarm.dial(opts).is_ok() {
                self.preconnect.dialling(to.peer);
                return;
            }
        }
    }

    /// Tells the RN's contact board (if any) of connections with listed peers and of failed dials.
    fn note_contact(&mut self, ev: &SwarmEvent<VnBehaviourEvent>) {
        let Some(c) = self.contact.as_mut() else {
            return;
        };
        match ev {
            SwarmEvent::ConnectionEstablished { peer_id, .. } if self.peers.is_allowed(peer_id) => {
                c.established(*peer_id)
            }
            SwarmEvent::ConnectionClosed {
                peer_id,
                num_established: 0,
                ..
            } => c.closed(peer_id),
            SwarmEvent::OutgoingConnectionError {
                peer_id: Some(peer_id),
                error,
                ..
            } if self.peers.is_allowed(peer_id) => c.dial_failed(*peer_id, &dial_error_text(error)),
            _ => {}
        }
    }

    /// The VnAddr of a peer that contacted us: its known listen address if we have one.
    fn addr_of(peer: PeerId, addrs: &HashMap<PeerId, Multiaddr>) -> VnAddr {
        VnAddr::new(
            peer,
            addrs.get(&peer).cloned().unwrap_or_else(Multiaddr::empty),
        )
    }

    /// Tells a harness observing arrivals (a network observer's view: kind and time) about one.
    fn observe_arrival(&self, from: &PeerId, what: impl FnOnce() -> crate::observe::Arrival) {
        if let Some(o) = self.observer.as_deref().filter(|o| o.wants_arrivals()) {
            o.arrival(self.node, self.index, from, self.epoch.elapsed(), what());
        }
    }

    fn refuse_unlisted(&mut self, peer: PeerId) -> bool {
        if self.peers.is_allowed(&peer) {
            return false;
        }
        self.log.report(
            self.epoch.elapsed(),
            NodeEvent::PeerRefused {
                vn: self.index,
                peer,
                reason: "not on the peer list".into(),
            },
        );
        true
    }

    /// A chunk link's event as an engine input, if it is one.
    fn on_chunk_event(
        &mut self,
        ev: ChunkEvent,
        next_token: &mut u64,
        addrs: &HashMap<PeerId, Multiaddr>,
    ) -> Option<VnInput<VnAddr>> {
        match ev {
            ChunkEvent::Chunk {
                peer,
                bytes,
                note,
                reply,
            } => {
                if self.refuse_unlisted(peer) {
                    return None; // dropping `reply` closes the stream: nothing is answered
                }
                self.chunk_slots.hear(GridNote::from_bytes(note));
                self.chunks.set_note(self.chunk_slots.note().to_bytes());
                self.observe_arrival(&peer, || crate::observe::classify_chunk(&bytes));
                *next_token += 1;
                self.chunk_replies.insert(*next_token, reply);
                Some(VnInput::Chunk {
                    from: Self::addr_of(peer, addrs),
                    bytes: Arc::new(bytes),
                    token: *next_token,
                })
            }
            ChunkEvent::Reply { peer, round, bytes } => Some(VnInput::ChunkReply {
                from: Self::addr_of(peer, addrs),
                round,
                bytes,
            }),
            ChunkEvent::Failed {
                peer,
                round,
                retry: Some(bytes),
                ..
            } => {
                // The peer's accept queue dropped every stream: request-response's handler drops none.
                tracing::debug!(vn = self.index, %peer, %round, "chunk streams refused; sending as a request");
                let to = Self::addr_of(peer, addrs);
                let id = self
                    .swarm
                    .behaviour_mut()
                    .chunk
                    .send_request_with_addresses(&peer, bytes, dial_addrs(&to, addrs));
                self.chunk_requests.insert(id, (peer, round));
                None
            }
            ChunkEvent::Failed {
                peer,
                round,
                unreachable,
                retry: None,
            } => {
                tracing::debug!(vn = self.index, %peer, %round, unreachable, "chunk not delivered");
                let to = Self::addr_of(peer, addrs);
                Some(if unreachable {
                    VnInput::PeerGone { peer: to }
                } else {
                    VnInput::SendFailed { to }
                })
            }
            ChunkEvent::Closed { .. } => None,
        }
    }

    /// A control link's event as an engine input, if it is one.
    fn on_link_event(
        &mut self,
        ev: LinkEvent,
        addrs: &HashMap<PeerId, Multiaddr>,
    ) -> Option<VnInput<VnAddr>> {
        match ev {
            LinkEvent::Message { peer, bytes } => {
                if self.refuse_unlisted(peer) {
                    return None;
                }
                self.observe_arrival(&peer, || crate::observe::classify_control::<VnAddr>(&bytes));
                Some(VnInput::Control {
                    from: Self::addr_of(peer, addrs),
                    bytes,
                })
            }
            // The acknowledgement of a message: its round trip paces the overlay's sub-steps.
            LinkEvent::RoundTrip(rtt) => Some(VnInput::ControlRoundTrip { rtt }),
            LinkEvent::Closed { peer, link, why } => {
                self.links.closed(peer, link);
                let to = Self::addr_of(peer, addrs);
                match why {
                    // Dialled and not reached: gone, as a failed dial of a request was.
                    Closed::Unreachable => Some(VnInput::PeerGone { peer: to }),
                    // A late or lost acknowledgement alone never ends a link (a busy peer is not a gone one:
                    // counting late acknowledgements as failures once drained Cyclon views in an overloaded
                    // network); a stream that failed or was closed under us is a failed send, and so is one
                    // that did not open, or take a write, within the control timeout: a peer that slow is
                    // of no use to the overlay (and a vanished one looks exactly like it until its
                    // connection falls silent, `liveness.rs`).
                    Closed::Broken | Closed::Slow => Some(VnInput::SendFailed { to }),
                    Closed::Idle => None,
                }
            }
        }
    }

    /// Turns one Swarm event into engine input, by what it concerns: chunk requests, round queries, what
    /// identify learnt, connections.
    fn on_swarm_event(
        &mut self,
        ev: SwarmEvent<VnBehaviourEvent>,
        channels: &mut Channels,
        next_token: &mut u64,
        addrs: &mut HashMap<PeerId, Multiaddr>,
    ) -> Option<VnInput<VnAddr>> {
        match ev {
            SwarmEvent::Behaviour(VnBehaviourEvent::Chunk(e)) => {
                self.on_chunk_request(e, channels, next_token, addrs)
            }
            SwarmEvent::Behaviour(VnBehaviourEvent::Round(e)) => {
                self.on_round_query(e, next_token, addrs)
            }
            SwarmEvent::Behaviour(VnBehaviourEvent::Identify(identify::Event::Received {
                peer_id,
                info,
                ..
            })) => {
                if self.peers.is_allowed(&peer_id)
                    && let Some(a) = info.listen_addrs.first()
                {
                    addrs.entry(peer_id).or_insert_with(|| a.clone());
                }
                None
            }
            SwarmEvent::Behaviour(VnBehaviourEvent::Ping(ping::Event {
                connection,
                result,
                ..
            })) => {
                match result {
                    Ok(rtt) => {
                        tracing::trace!(vn = self.index, ?connection, ?rtt, "pong");
                        self.liveness.answered(connection, self.epoch.elapsed())
                    }
                    // libp2p reports only its second failure in a row; the silence rule has usually closed
                    // the connection by then.
                    Err(e) => {
                        tracing::debug!(vn = self.index, %e, "ping failed; closing the connection");
                        self.swarm.close_connection(connection);
                    }
                }
                None
            }
            other => self.on_connection_event(other, addrs),
        }
    }

    /// A chunk sent as a request (after its streams were refused), its answer, or its failure.
    fn on_chunk_request(
        &mut self,
        ev: request_response::Event<Arc<Vec<u8>>, Vec<u8>>,
        channels: &mut Channels,
        next_token: &mut u64,
        addrs: &mut HashMap<PeerId, Multiaddr>,
    ) -> Option<VnInput<VnAddr>> {
        use request_response::{Event, Message};
        match ev {
            Event::Message { peer, message, .. } => match message {
                Message::Request {
                    request, channel, ..
                } => {
                    if self.refuse_unlisted(peer) {
                        return None; // dropping the channel closes the stream: nothing is answered
                    }
                    self.observe_arrival(&peer, || crate::observe::classify_chunk(&request));
                    *next_token += 1;
                    channels.insert(*next_token, channel);
                    Some(VnInput::Chunk {
                        from: Self::addr_of(peer, addrs),
                        bytes: request,
                        token: *next_token,
                    })
                }
                // A chunk sent as a request after its streams were refused.
                Message::Response {
                    request_id,
                    response,
                } => {
                    let (_, round) = self.chunk_requests.remove(&request_id)?;
                    Some(VnInput::ChunkReply {
                        from: Self::addr_of(peer, addrs),
                        round,
                        bytes: response,
                    })
                }
            },
            Event::OutboundFailure {
                peer,
                request_id,
                error,
                ..
            } => {
                self.chunk_requests.remove(&request_id)?;
                tracing::debug!(vn = self.index, %peer, %error, "chunk not delivered");
                let to = Self::addr_of(peer, addrs);
                Some(match error {
                    request_response::OutboundFailure::DialFailure => {
                        VnInput::PeerGone { peer: to }
                    }
                    _ => VnInput::SendFailed { to },
                })
            }
            _ => None,
        }
    }

    /// A peer asks which exchange we are at, answers our probe, or failed to.
    fn on_round_query(
        &mut self,
        ev: request_response::Event<Vec<u8>, Vec<u8>>,
        next_token: &mut u64,
        addrs: &mut HashMap<PeerId, Multiaddr>,
    ) -> Option<VnInput<VnAddr>> {
        use request_response::{Event, Message};
        match ev {
            Event::Message { peer, message, .. } => match message {
                Message::Request {
                    request, channel, ..
                } => {
                    if self.refuse_unlisted(peer) {
                        return None;
                    }
                    *next_token += 1;
                    self.round_channels.insert(*next_token, channel);
                    Some(VnInput::RoundQuery {
                        from: Self::addr_of(peer, addrs),
                        bytes: request,
                        token: *next_token,
                    })
                }
                Message::Response { response, .. } => Some(VnInput::RoundAnswer {
                    from: Self::addr_of(peer, addrs),
                    bytes: response,
                }),
            },
            Event::OutboundFailure { peer, error, .. } => {
                tracing::debug!(vn = self.index, %peer, %error, "round query not answered");
                Some(VnInput::RoundQueryFailed {
                    to: Self::addr_of(peer, addrs),
                })
            }
            _ => None,
        }
    }

    /// Connections: a listed peer's lost connection is dialled again at once (and gone if that fails), an
    /// unlisted one is reported, failures are logged and reported to the embedder.
    fn on_connection_event(
        &mut self,
        ev: SwarmEvent<VnBehaviourEvent>,
        addrs: &mut HashMap<PeerId, Multiaddr>,
    ) -> Option<VnInput<VnAddr>> {
        match &ev {
            SwarmEvent::ConnectionEstablished {
                peer_id,
                connection_id,
                ..
            } => self
                .liveness
                .established(*connection_id, *peer_id, self.epoch.elapsed()),
            SwarmEvent::ConnectionClosed { connection_id, .. } => {
                self.liveness.closed(*connection_id)
            }
            _ => {}
        }
        match ev {
            SwarmEvent::ConnectionClosed {
                peer_id,
                num_established: 0,
                cause: Some(cause),
                ..
            } if self.peers.is_allowed(&peer_id) => {
                // Closed by an error (a SIGKILLed peer's kernel resets its sockets): dial it again at once.
                // If that fails too, it is gone, and its neighbours stop waiting for its chunks.
                tracing::debug!(vn = self.index, peer = %peer_id, %cause, "connection lost; dialling again");
                let to = Self::addr_of(peer_id, addrs);
                let opts = DialOpts::peer_id(peer_id)
                    .addresses(dial_addrs(&to, addrs))
                    .condition(PeerCondition::DisconnectedAndNotDialing)
                    .build();
                if self.swarm.dial(opts).is_ok() {
                    self.redialing.insert(peer_id);
                }
                None
            }
            SwarmEvent::ConnectionEstablished {
                peer_id, endpoint, ..
            } if self.peers.is_allowed(&peer_id) => {
                self.redialing.remove(&peer_id);
                // A network observer notes where a peer connects from (its source address and port).
                if let libp2p::core::ConnectedPoint::Listener {
                    local_addr,
                    send_back_addr,
                } = &endpoint
                    && let Some(o) = self.observer.as_deref().filter(|o| o.wants_arrivals())
                {
                    o.inbound_connection(
                        self.node,
                        self.index,
                        &peer_id,
                        self.epoch.elapsed(),
                        &local_addr.to_string(),
                        &send_back_addr.to_string(),
                    );
                }
                None
            }
            SwarmEvent::ConnectionEstablished { peer_id, .. }
                if !self.peers.is_allowed(&peer_id) =>
            {
                // The allow-list closes it; tell the embedder once.
                self.log.report(
                    self.epoch.elapsed(),
                    NodeEvent::PeerRefused {
                        vn: self.index,
                        peer: peer_id,
                        reason: "not on the peer list".into(),
                    },
                );
                None
            }
            SwarmEvent::OutgoingConnectionError { peer_id, error, .. } => {
                tracing::debug!(vn = self.index, peer = ?peer_id, %error, "dial failed");
                let peer = peer_id.filter(|p| self.redialing.remove(p))?;
                Some(VnInput::PeerGone {
                    peer: Self::addr_of(peer, addrs),
                })
            }
            SwarmEvent::IncomingConnectionError {
                error,
                send_back_addr,
                peer_id,
                ..
            } => {
                tracing::debug!(vn = self.index, %send_back_addr, %error, "incoming connection failed");
                match peer_id {
                    // The allow-list denies an unlisted peer right after the handshake, when its identity is known.
                    Some(peer) if !self.peers.is_allowed(&peer) => self.log.report(
                        self.epoch.elapsed(),
                        NodeEvent::PeerRefused {
                            vn: self.index,
                            peer,
                            reason: "not on the peer list".into(),
                        },
                    ),
                    // A wrong pre-shared key fails before any identity is known.
                    _ => self.log.report(
                        self.epoch.elapsed(),
                        NodeEvent::ConnectionFailed {
                            vn: self.index,
                            error: error.to_string(),
                        },
                    ),
                }
                None
            }
            _ => None,
        }
    }

    /// Carries out engine outputs through the shared router. Returns false when the RN is gone (the node is
    /// stopping).
    async fn apply(
        &mut self,
        out: Vec<VnOutput<VnAddr>>,
        channels: &mut Channels,
        addrs: &HashMap<PeerId, Multiaddr>,
        wake: &mut Option<Instant>,
    ) -> bool {
        let mut held = Vec::new();
        let hold = (self.release.delays() || self.chunk_slots.on()).then_some(&mut held);
        let mut port = swarm_port!(self, channels, addrs, wake, hold);
        route_vn(&self.engine, out, &mut port);
        let msgs = std::mem::take(&mut port.to_rn);
        let now = self.epoch.elapsed();
        if self.chunk_slots.on() {
            let (chunks, rest): (Vec<_>, Vec<_>) = held
                .into_iter()
                .partition(|d| matches!(d, Deferred::Chunk { .. }));
            // The shared slot grid is the wall clock's: every node reads the same one.
            #[allow(clippy::disallowed_methods)]
            let wall = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            // Each round's chunks at its own departure (one batch holds one round but for a catch-up).
            let mut by_round: Vec<(Round, Vec<Deferred>)> = Vec::new();
            for c in chunks {
                let Deferred::Chunk { round, .. } = &c else {
                    unreachable!("partitioned")
                };
                match by_round.iter_mut().find(|(r, _)| r == round) {
                    Some((_, v)) => v.push(c),
                    None => by_round.push((*round, vec![c])),
                }
            }
            for (round, chunks) in by_round {
                let before = self.chunk_slots.period();
                let at = self.chunk_slots.release_at(now, wall, round);
                self.chunks.set_note(self.chunk_slots.note().to_bytes());
                if self.chunk_slots.period() != before {
                    tracing::debug!(vn = self.index, %round, period = ?self.chunk_slots.period(), "chunk grid");
                }
                self.chunk_slots.held.hold_at(at, chunks);
            }
            held = rest;
            if !self.release.delays() {
                self.send_released(held, channels, addrs, wake);
                held = Vec::new();
            }
        }
        self.release.hold(now, held);
        // Published before the RN hears of the exchange's end, so its checkpoint of the round has it.
        if let Some(board) = &self.view_board
            && msgs.iter().any(|m| matches!(m, FromVirtualNode::Done(_)))
            && let Ok(mut views) = board.lock()
            && let Some(v) = views.get_mut(self.index)
        {
            *v = self.engine.view_entries();
        }
        // The RN channel is bounded: a busy RN slows its VNs down rather than growing a queue.
        for msg in msgs {
            if self.to_rn.send((self.index, msg)).await.is_err() {
                return false;
            }
        }
        true
    }
}

/// One VN's engine outputs on its Swarm. Messages for the RN are collected and sent (awaiting the bounded
/// channel) once the outputs are routed.
struct SwarmPort<'a> {
    index: usize,
    node: usize,
    swarm: &'a mut VnSwarm,
    channels: &'a mut Channels,
    round_channels: &'a mut Channels,
    addrs: &'a HashMap<PeerId, Multiaddr>,
    wake: &'a mut Option<Instant>,
    links: &'a mut ControlLinks,
    chunks: &'a mut ChunkLinks,
    chunk_replies: &'a mut StreamReplies,
    epoch: Instant,
    log: &'a mut RefusalLog,
    observer: Option<&'a dyn Observer<PeerId>>,
    to_rn: Vec<FromVirtualNode>,
    /// Where sends go to be held (the VN's release schedule), if they are; else they are made at once.
    hold: Option<&'a mut Vec<Deferred>>,
}

impl SwarmPort<'_> {
    /// Whether a connection to `to` is up; if not, starts a dial to it (the stream behaviours dial by peer id
    /// alone: the addresses come from here; a dial already under way is not started twice).
    fn connect(&mut self, to: &VnAddr) -> bool {
        let connected = self.swarm.is_connected(&to.peer);
        if !connected {
            let opts = DialOpts::peer_id(to.peer)
                .addresses(dial_addrs(to, self.addrs))
                .condition(PeerCondition::DisconnectedAndNotDialing)
                .build();
            let _ = self.swarm.dial(opts);
        }
        connected
    }
}

impl VnDriver<VnAddr> for SwarmPort<'_> {
    fn send_control(&mut self, to: VnAddr, bytes: Vec<u8>) {
        if let Some(h) = self.hold.as_deref_mut() {
            return h.push(Deferred::Control { to, bytes });
        }
        // Only a message over a connection that is already up measures the network's round trip; one that
        // dials first also waits for a handshake, a one-time cost that must not stretch the sub-steps.
        let connected = self.connect(&to);
        let sent = connected.then(|| self.epoch.elapsed());
        self.links.send(to.peer, bytes, sent, !connected);
    }

    fn send_chunk(&mut self, to: VnAddr, round: Round, bytes: Arc<Vec<u8>>) {
        if let Some(h) = self.hold.as_deref_mut() {
            return h.push(Deferred::Chunk { to, round, bytes });
        }
        let connected = self.connect(&to);
        self.chunks.send(to.peer, round, bytes, !connected);
    }

    fn reply(&mut self, token: ReplyToken, bytes: Vec<u8>) {
        if let Some(h) = self.hold.as_deref_mut() {
            return h.push(Deferred::Reply { token, bytes });
        }
        if let Some(reply) = self.chunk_replies.remove(&token) {
            // Fails only if the reader is gone (its stream closed): nothing to do then.
            let _ = reply.send(bytes);
        } else if let Some(ch) = self.channels.remove(&token) {
            // Fails only if the requester gave up (timeout, closed): nothing to do then.
            let _ = self.swarm.behaviour_mut().chunk.send_response(ch, bytes);
        }
    }

    fn to_rn(&mut self, msg: FromVirtualNode) {
        self.to_rn.push(msg);
    }

    fn send_round_query(&mut self, to: VnAddr) {
        if let Some(h) = self.hold.as_deref_mut() {
            return h.push(Deferred::RoundQuery { to });
        }
        let a = dial_addrs(&to, self.addrs);
        self.swarm
            .behaviour_mut()
            .round
            .send_request_with_addresses(&to.peer, Vec::new(), a);
    }

    fn reply_round(&mut self, token: ReplyToken, bytes: Vec<u8>) {
        if let Some(h) = self.hold.as_deref_mut() {
            return h.push(Deferred::ReplyRound { token, bytes });
        }
        if let Some(ch) = self.round_channels.remove(&token) {
            let _ = self.swarm.behaviour_mut().round.send_response(ch, bytes);
        }
    }

    fn observe_copy(&mut self, from: &VnAddr, frame: &ChunkFrame) {
        if let Some(o) = self.observer {
            o.chunk_received(self.node, self.index, &from.peer, frame);
        }
    }

    fn refused(&mut self, from: VnAddr, what: RefusalKind) {
        tracing::debug!(vn = self.index, peer = %from.peer, ?what, "refused");
        if !matches!(what, RefusalKind::Chunk(_)) {
            self.log.report(
                self.epoch.elapsed(),
                NodeEvent::PeerRefused {
                    vn: self.index,
                    peer: from.peer,
                    reason: format!("{what:?}"),
                },
            );
        }
    }

    fn set_timer(&mut self, at: Duration) {
        *self.wake = Some(self.epoch + at);
    }
}

/// Resolves when the next held send is due; never if none is held.
async fn release_due(held: &Held<Deferred>, epoch: Instant) {
    match held.next_at() {
        Some(at) => tokio::time::sleep_until(epoch + at).await,
        None => std::future::pending().await,
    }
}

/// Resolves when the next warm-up dial is due; never if none is left.
async fn preconnect_due(plan: &Preconnect, epoch: Instant) {
    match plan.next_at() {
        Some(at) => tokio::time::sleep_until(epoch + at).await,
        None => std::future::pending().await,
    }
}

/// Addresses to dial `to` at if no connection exists: the one it announced, else one learned by identify.
fn dial_addrs(to: &VnAddr, addrs: &HashMap<PeerId, Multiaddr>) -> Vec<Multiaddr> {
    let mut v = Vec::with_capacity(2);
    if !to.addr.is_empty() {
        v.push(to.addr.clone());
    }
    if let Some(a) = addrs.get(&to.peer)
        && *a != to.addr
    {
        v.push(a.clone());
    }
    v
}

/// A failed dial as an operator reads it: each address tried with the innermost cause of its failure
/// (libp2p's own text repeats every layer of the transport stack's error around it).
fn dial_error_text(error: &libp2p::swarm::DialError) -> String {
    match error {
        libp2p::swarm::DialError::Transport(tried) => tried
            .iter()
            .map(|(addr, e)| {
                let mut cause: &dyn std::error::Error = e;
                while let Some(inner) = cause.source() {
                    cause = inner;
                }
                format!("{addr}: {cause}")
            })
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

/// How long to wait for a Swarm's first listen address.
pub const LISTEN_TIMEOUT: Duration = Duration::from_secs(10);

/// Starts listening on `addr` and returns the first concrete address the swarm reports.
pub async fn listen<B: libp2p::swarm::NetworkBehaviour>(
    swarm: &mut Swarm<B>,
    addr: Multiaddr,
) -> crate::Result<Multiaddr> {
    swarm
        .listen_on(addr.clone())
        .map_err(|e| crate::NodeError::Network(format!("cannot listen on {addr}: {e}")))?;
    let wait = async {
        loop {
            match swarm.select_next_some().await {
                SwarmEvent::NewListenAddr { address, .. } => return Ok(address),
                SwarmEvent::ListenerError { error, .. }
                | SwarmEvent::ListenerClosed {
                    reason: Err(error), ..
                } => {
                    return Err(crate::NodeError::Network(format!(
                        "cannot listen on {addr}: {error}"
                    )));
                }
                _ => {}
            }
        }
    };
    tokio::time::timeout(LISTEN_TIMEOUT, wait)
        .await
        .map_err(|_| {
            crate::NodeError::Network(format!(
                "no listen address for {addr} within {LISTEN_TIMEOUT:?}"
            ))
        })?
}

/// Counts one Swarm event, and what identify and ping report, in libp2p's metrics.
fn record_swarm_event(m: &libp2p::metrics::Metrics, ev: &SwarmEvent<VnBehaviourEvent>) {
    use libp2p::metrics::Recorder;
    m.record(ev);
    match ev {
        SwarmEvent::Behaviour(VnBehaviourEvent::Identify(e)) => m.record(e),
        SwarmEvent::Behaviour(VnBehaviourEvent::Ping(e)) => m.record(e),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_of_refusals_becomes_a_few_events_that_say_how_many_were_not_reported() {
        let (sink, mut rx) = EventSink::new(1024);
        let mut log = RefusalLog::new(sink);
        let refusal = || NodeEvent::PeerRefused {
            vn: 0,
            peer: PeerId::random(),
            reason: "RateLimited".into(),
        };
        for _ in 0..1000 {
            log.report(Duration::ZERO, refusal());
        }
        let mut got = Vec::new();
        while let Ok(ev) = rx.try_recv() {
            got.push(ev);
        }
        assert_eq!(got.len(), REFUSAL_EVENTS.burst as usize);
        log.report(Duration::from_secs(1), refusal());
        match rx.try_recv() {
            Ok(NodeEvent::PeerRefused { reason, .. }) => {
                assert!(
                    reason.contains("980 more refusals not reported"),
                    "{reason}"
                )
            }
            other => panic!("{other:?}"),
        }
    }
}
