//! A VN host (`node vn`): a process that runs virtual nodes for real nodes elsewhere (issue 13). It holds
//! the VNs' keys and listens for its real nodes on the RN↔VN link; a real node names one of its VNs and
//! sends the run's setup, the host builds that VN exactly as a node builds an in-process one
//! ([`super::vn_setup`]) and relays commands and reports. One host may serve VNs of several real nodes, so a
//! VN's address says nothing about which real node it belongs to.
//!
//! Each hosted VN answers to one real node (the link identity its entry names). When a real node's link
//! breaks (it crashed, stopped, or restarted), its VNs are stopped at once; a restarted node sets them up
//! again.

use std::sync::Arc;

use libp2p::identity::Keypair;
use libp2p::pnet::PreSharedKey;
use libp2p::{Multiaddr, PeerId};
use protocol::link::{LinkBody, LinkMessage};
use protocol::rnvn::{FromVirtualNode, ToVirtualNode};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::vn_setup::{VnPlace, VnSetup};
use crate::events::{EventSink, NodeEvent};
use crate::net::link::{LinkEvent, build_link_swarm, spawn_link};
use crate::net::vn_task::listen;
use crate::peers::PeerList;
use crate::{NodeError, Result};

/// One VN a host runs.
pub struct HostedVn {
    pub key: Keypair,
    pub listen: Multiaddr,
    pub announce: Option<Multiaddr>,
    /// The link identity of the real node this VN belongs to: only it may set the VN up and drive it.
    pub rn: PeerId,
}

/// A VN host's configuration (what `node vn --config` reads).
pub struct VnHost {
    /// Where the link listens for the real nodes.
    pub link_listen: Multiaddr,
    /// The host's link identity.
    pub link_key: Keypair,
    /// The network's peer list and key, as the real nodes have them.
    pub peers: PeerList,
    pub psk: Option<PreSharedKey>,
    pub vns: Vec<HostedVn>,
    /// Handshake timeout of the link and the VNs' connections.
    pub handshake: std::time::Duration,
    /// Research: watches every hosted VN (e.g. an [`crate::arrival_log::ArrivalLog`]).
    pub observer: Option<Arc<dyn crate::observe::Observer<PeerId>>>,
}

/// A hosted VN while it runs.
struct Running {
    rn: PeerId,
    slot: u32,
    commands: mpsc::Sender<ToVirtualNode>,
    task: JoinHandle<()>,
}

/// Reports from the hosted VNs, tagged with their position in [`VnHost::vns`].
const FROM_VNS_CAPACITY: usize = 1024;

impl VnHost {
    /// Binds the link and serves until `stop` turns true. Returns the link's bound address through `bound`
    /// once listening (for callers that asked for port 0).
    pub async fn run(
        mut self,
        mut stop: watch::Receiver<bool>,
        bound: Option<tokio::sync::oneshot::Sender<Multiaddr>>,
    ) -> Result<()> {
        let mut swarm = build_link_swarm(self.link_key.clone(), self.handshake)?;
        let addr = listen(&mut swarm, self.link_listen.clone()).await?;
        tracing::info!(%addr, peer = %self.link_key.public().to_peer_id(), "VN host listening for its nodes");
        if let Some(b) = bound {
            let _ = b.send(addr);
        }
        let (link, mut events) = spawn_link(swarm, protocol::chunk::MAX_CHUNK_FRAME_BYTES);
        for vn in &self.vns {
            link.allow(vn.rn, None).await;
        }
        let peers = Arc::new(std::mem::replace(
            &mut self.peers,
            PeerList::from_entries([]),
        ));
        let (to_host, mut from_vns) = mpsc::channel::<(usize, FromVirtualNode)>(FROM_VNS_CAPACITY);
        let (events_sink, mut vn_events) = EventSink::new(crate::events::EVENT_CAPACITY);
        #[allow(clippy::disallowed_methods)] // the shell's clock, as in the node builder
        let epoch = Instant::now();
        let mut running: Vec<Option<Running>> = self.vns.iter().map(|_| None).collect();
        let mut check = tokio::time::interval(std::time::Duration::from_secs(1));
        loop {
            tokio::select! {
                // As a bool: the watch's guard must not live in the select's output (it is not Send).
                _ = async { stop.wait_for(|s| *s).await.is_ok() } => break,
                ev = events.recv() => match ev {
                    None => return Err(NodeError::Network("the link task ended".into())),
                    Some(LinkEvent::Gone(rn)) => {
                        for (i, r) in running.iter_mut().enumerate() {
                            if r.as_ref().is_some_and(|r| r.rn == rn) {
                                tracing::warn!(vn = i, %rn, "the node's link broke: stopping its VN");
                                halt(r.take().expect("checked")).await;
                            }
                        }
                    }
                    Some(LinkEvent::Message { from, msg: LinkMessage { vn: slot, body, .. } }) => match body {
                        LinkBody::Setup(bytes) => {
                            let answer = match self.set_up(&bytes, from, slot, &peers, &mut running, &to_host, &events_sink, epoch).await {
                                Ok(addr) => LinkBody::Ready(addr.to_vec()),
                                Err(e) => {
                                    tracing::warn!(%from, slot, error = %e, "VN setup refused");
                                    LinkBody::Refused(e.to_string())
                                }
                            };
                            link.send(from, slot, answer).await;
                        }
                        LinkBody::ToVn(m) => {
                            let stop = matches!(m, ToVirtualNode::Stop);
                            forward(&running, from, slot, m).await;
                            if stop
                                && let Some(r) = running.iter_mut().find(|r| r.as_ref().is_some_and(|r| r.rn == from && r.slot == slot))
                            {
                                // The VN ends on Stop by itself; forget it so the node may set it up again.
                                *r = None;
                            }
                        }
                        other => tracing::debug!(%from, ?other, "unexpected link message to a VN host"),
                    },
                },
                Some((i, msg)) = from_vns.recv() => {
                    if let Some(r) = &running[i] {
                        link.send(r.rn, r.slot, LinkBody::FromVn(msg)).await;
                    }
                }
                Some(ev) = vn_events.recv() => match ev {
                    NodeEvent::PeerRefused { vn, peer, reason } => tracing::warn!(vn, %peer, %reason, "peer refused"),
                    NodeEvent::ConnectionFailed { vn, error } => tracing::debug!(vn, %error, "connection failed"),
                    other => tracing::debug!(?other, "VN event"),
                },
                _ = check.tick() => {
                    // A VN task that ended on its own (it should not): tell its node, which goes on without it.
                    for r in running.iter_mut() {
                        if r.as_ref().is_some_and(|r| r.task.is_finished()) {
                            let r = r.take().expect("checked");
                            link.send(r.rn, r.slot, LinkBody::Refused("the VN's task ended".into())).await;
                        }
                    }
                }
            }
        }
        for r in running.into_iter().flatten() {
            halt(r).await;
        }
        Ok(())
    }

    /// Starts hosted VN `setup.vn` for `rn`'s slot `slot`, replacing an earlier run of it by the same node
    /// (a restart whose broken link this host has not noticed yet).
    #[allow(clippy::too_many_arguments)]
    async fn set_up(
        &self,
        bytes: &[u8],
        rn: PeerId,
        slot: u32,
        peers: &Arc<PeerList>,
        running: &mut [Option<Running>],
        to_host: &mpsc::Sender<(usize, FromVirtualNode)>,
        events: &EventSink,
        epoch: Instant,
    ) -> Result<Multiaddr> {
        let setup = VnSetup::decode(bytes)?;
        let i = self
            .vns
            .iter()
            .position(|v| v.key.public().to_peer_id().to_string() == setup.vn)
            .ok_or_else(|| NodeError::Config(format!("this host has no VN {}", setup.vn)))?;
        let hosted = &self.vns[i];
        if hosted.rn != rn {
            return Err(NodeError::Config(format!(
                "VN {} belongs to another node",
                setup.vn
            )));
        }
        if let Some(old) = running[i].take() {
            halt(old).await;
        }
        let (task, commands, me) = setup
            .build(VnPlace {
                key: hosted.key.clone(),
                listen: hosted.listen.clone(),
                announce: hosted.announce.clone(),
                peers: peers.clone(),
                psk: self.psk,
                // Its reports reach the host tagged with its position here; the link adds the node's slot.
                index: i,
                node: 0,
                to_rn: to_host.clone(),
                events: events.clone(),
                epoch,
                observer: self.observer.clone(),
                restored_view: Vec::new(),
                view_board: None,
                own: Vec::new(),
                contact: None,
                // A VN host serves no metrics endpoint (yet): its VNs' traffic is in their node's metrics.
                telemetry: None,
            })
            .await?;
        let task = tokio::spawn(task.run());
        running[i] = Some(Running {
            rn,
            slot,
            commands,
            task,
        });
        tracing::info!(vn = i, peer = %me.peer, addr = %me.addr, %rn, slot, "hosting a VN");
        Ok(me.addr)
    }
}

async fn forward(running: &[Option<Running>], rn: PeerId, slot: u32, cmd: ToVirtualNode) {
    match running
        .iter()
        .flatten()
        .find(|r| r.rn == rn && r.slot == slot)
    {
        Some(r) => {
            let _ = r.commands.send(cmd).await;
        }
        None => tracing::debug!(%rn, slot, "command for a VN this host does not run"),
    }
}

/// Stops a hosted VN now: its node is gone, so nothing waits for a graceful end, and its listen address
/// must be free for a restart.
async fn halt(r: Running) {
    r.task.abort();
    let _ = r.task.await;
}
