//! A VN host (`node vn`): a process that runs virtual nodes for real nodes elsewhere (issue 13). It holds
//! the VNs' keys and listens for its real nodes on the RN↔VN link; a real node names one of its VNs and
//! sends the run's setup, the host builds that VN exactly as a node builds an in-process one
//! ([`super::vn_setup`]) and relays commands and reports. One host may serve VNs of several real nodes, so a
//! VN's address says nothing about which real node it belongs to.
//!
//! Each hosted VN answers to one real node (the link identity its entry names). When a real node's link
//! breaks (it crashed, stopped, or restarted), its VNs are stopped at once; a restarted node sets them up
//! again.
//!
//! The nodes a host serves (its tenants) must not exhaust or stall it for each other: what one can make the
//! host hold is bounded by [`VnHost::tenant_bytes`] (`net::link_limits`), and the host's loop never waits on
//! one tenant. A command for a VN whose queue is full is not waited for: that node's link is reset (its VNs
//! stop, it reconnects and sets them up again) with a warning naming it. Each VN's reports have a queue of
//! their own, and the loop takes one from each VN in turn, so a VN that reports faster than its node takes
//! them waits alone; the link itself resets a node that does not take what it is sent.

use std::pin::Pin;
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::{SelectAll, Stream};
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
use crate::net::link::{Link, LinkEvent, build_link_swarm, spawn_link};
use crate::net::link_limits::{HOST_REPORTS_PER_VN, LinkBounds};
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
    /// The most bytes one node can make this host hold (its link's messages, its VN's commands and reports:
    /// [`LinkBounds::for_tenant`]); a host serving n nodes holds at most n times this.
    /// [`crate::net::link_limits::DEFAULT_TENANT_BYTES`] unless the config says otherwise.
    pub tenant_bytes: usize,
}

/// A hosted VN while it runs.
struct Running {
    rn: PeerId,
    slot: u32,
    /// Which setup of the VN this is: reports of an earlier one, still queued, are not its node's any more.
    run: u64,
    commands: mpsc::Sender<ToVirtualNode>,
    task: JoinHandle<()>,
}

/// A hosted VN's reports: its position in [`VnHost::vns`], its run, the report.
type Reports = Pin<Box<dyn Stream<Item = (usize, u64, FromVirtualNode)> + Send>>;

/// Why a command did not reach its VN.
#[derive(Debug, PartialEq, Eq)]
enum Forward {
    Queued,
    /// The VN's queue is full: the VN does not keep up with its node.
    Full {
        vn: usize,
    },
    /// The node runs no such VN here (any more).
    NoVn,
}

impl VnHost {
    /// Binds the link and serves until `stop` turns true. Returns the link's bound address through `bound`
    /// once listening (for callers that asked for port 0).
    pub async fn run(
        mut self,
        mut stop: watch::Receiver<bool>,
        bound: Option<tokio::sync::oneshot::Sender<Multiaddr>>,
    ) -> Result<()> {
        let bounds = LinkBounds::for_tenant(self.tenant_bytes);
        let mut swarm = build_link_swarm(self.link_key.clone(), self.handshake, &bounds)?;
        let addr = listen(&mut swarm, self.link_listen.clone()).await?;
        tracing::info!(%addr, peer = %self.link_key.public().to_peer_id(), "VN host listening for its nodes");
        if let Some(b) = bound {
            let _ = b.send(addr);
        }
        let (link, mut events) = spawn_link(swarm, protocol::chunk::MAX_CHUNK_FRAME_BYTES, bounds);
        for vn in &self.vns {
            link.allow(vn.rn, None).await;
        }
        let peers = Arc::new(std::mem::replace(
            &mut self.peers,
            PeerList::from_entries([]),
        ));
        // One queue per hosted VN, taken in turn.
        let mut reports: SelectAll<Reports> = SelectAll::new();
        let mut runs = 0u64;
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
                    // `_held` keeps the message's bytes on its node's budget until it is handed on.
                    Some(LinkEvent::Message { from, msg: LinkMessage { vn: slot, body, .. }, held: _held }) => match body {
                        LinkBody::Setup(bytes) => {
                            runs += 1;
                            let answer = match self.set_up(&bytes, from, slot, runs, &bounds, &peers, &mut running, &mut reports, &events_sink, epoch).await {
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
                            match forward(&running, from, slot, m) {
                                Forward::Queued => {}
                                Forward::NoVn => tracing::debug!(%from, slot, "command for a VN this host does not run"),
                                Forward::Full { vn } => overloaded(&link, from, vn).await,
                            }
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
                Some((i, run, msg)) = reports.next() => {
                    // The link task takes the message at once, whatever the node does with it: a node that
                    // does not take what it is sent is reset there (`LinkBounds::unacked_bytes`).
                    if let Some(r) = running[i].as_ref().filter(|r| r.run == run) {
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
        run: u64,
        bounds: &LinkBounds,
        peers: &Arc<PeerList>,
        running: &mut [Option<Running>],
        reports: &mut SelectAll<Reports>,
        events: &EventSink,
        epoch: Instant,
    ) -> Result<Multiaddr> {
        let setup = VnSetup::decode(bytes)?;
        // Every copy the VN receives goes back to its node in one message.
        if !bounds.fits_chunk(setup.max_chunk_frame()) {
            return Err(NodeError::Config(format!(
                "the run's chunk frames ({} bytes) do not fit this host's link messages ({} bytes per node; \
                 raise the host's tenant_bytes)",
                setup.max_chunk_frame(),
                bounds.message_bytes
            )));
        }
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
        let (to_host, from_vn) = mpsc::channel(HOST_REPORTS_PER_VN);
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
                to_rn: to_host,
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
        reports.push(Box::pin(futures::stream::unfold(
            from_vn,
            move |mut rx| async move { rx.recv().await.map(|(_, m)| ((i, run, m), rx)) },
        )));
        running[i] = Some(Running {
            rn,
            slot,
            run,
            commands,
            task,
        });
        tracing::info!(vn = i, peer = %me.peer, addr = %me.addr, %rn, slot, "hosting a VN");
        Ok(me.addr)
    }
}

/// Queues `cmd` for `rn`'s VN of slot `slot`, without waiting.
fn forward(running: &[Option<Running>], rn: PeerId, slot: u32, cmd: ToVirtualNode) -> Forward {
    let Some((vn, r)) = running.iter().enumerate().find_map(|(i, r)| {
        r.as_ref()
            .filter(|r| r.rn == rn && r.slot == slot)
            .map(|r| (i, r))
    }) else {
        return Forward::NoVn;
    };
    match r.commands.try_send(cmd) {
        Ok(()) => Forward::Queued,
        Err(mpsc::error::TrySendError::Full(_)) => Forward::Full { vn },
        // The VN ended; the check tick tells its node.
        Err(mpsc::error::TrySendError::Closed(_)) => Forward::NoVn,
    }
}

/// `rn`'s VN `vn` does not keep up with its commands: its node's link is reset (the link reports it gone,
/// which stops its VNs here), rather than the host waiting and every other node with it.
async fn overloaded(link: &Link, rn: PeerId, vn: usize) {
    tracing::warn!(
        %rn,
        vn,
        "the node's VN does not keep up with its commands: resetting the node's link"
    );
    link.reset(rn).await;
}

/// Stops a hosted VN now: its node is gone, so nothing waits for a graceful end, and its listen address
/// must be free for a restart.
async fn halt(r: Running) {
    r.task.abort();
    let _ = r.task.await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::link_limits::HOST_COMMANDS_PER_VN;

    #[test]
    fn the_budget_counts_the_vns_real_command_queue() {
        assert_eq!(
            HOST_COMMANDS_PER_VN,
            super::super::vn_setup::VN_COMMAND_CAPACITY
        );
    }

    #[tokio::test]
    async fn a_vn_that_does_not_take_its_commands_is_reported_not_waited_for() {
        let rn = PeerId::random();
        // The VN never reads its queue.
        let (commands, _unread) = mpsc::channel(HOST_COMMANDS_PER_VN);
        let running = vec![
            None,
            Some(Running {
                rn,
                slot: 3,
                run: 1,
                commands,
                task: tokio::spawn(async {}),
            }),
        ];
        for _ in 0..HOST_COMMANDS_PER_VN {
            assert_eq!(
                forward(&running, rn, 3, ToVirtualNode::Stop),
                Forward::Queued
            );
        }
        // One more: the host's loop must not wait for this VN (every other node's VNs wait with it).
        let next = tokio::time::timeout(std::time::Duration::from_secs(1), async {
            forward(&running, rn, 3, ToVirtualNode::Stop)
        })
        .await
        .expect("the host's loop waited on one VN's full queue");
        assert_eq!(next, Forward::Full { vn: 1 });
        assert_eq!(
            forward(&running, PeerId::random(), 3, ToVirtualNode::Stop),
            Forward::NoVn
        );
    }
}
