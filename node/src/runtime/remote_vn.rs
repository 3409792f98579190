//! The real node's side of VNs hosted elsewhere (`node vn`): each remote VN is a proxy task that looks to
//! the RN task exactly like an in-process VN task — it takes [`ToVirtualNode`] commands and hands back
//! `FromVirtualNode` reports — and carries both over the RN↔VN link. A proxy ends when its host's link
//! breaks, which the RN task sees as a lost VN (the rounds go on without it), as for an in-process VN whose
//! task ended.

use std::collections::HashMap;
use std::time::Duration;

use libp2p::identity::Keypair;
use libp2p::multiaddr::Protocol;
use libp2p::{Multiaddr, PeerId};
use protocol::link::{LinkBody, LinkMessage};
use protocol::rnvn::{FromVirtualNode, ToVirtualNode};
use tokio::sync::mpsc;

use super::vn_setup::{VN_COMMAND_CAPACITY, VnSetup};
use crate::net::link::{Link, LinkEvent, build_link_swarm, spawn_link};
use crate::net::link_limits::LinkBounds;
use crate::{NodeError, Result, VnAddr};

/// One VN of this node run by a VN host.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteVn {
    /// The host's link address, ending in `/p2p/<host link PeerId>`.
    pub host: Multiaddr,
    /// The VN's PeerId (the host holds its key).
    pub peer: PeerId,
}

impl RemoteVn {
    /// The host's link PeerId, from the address's `/p2p/` suffix.
    pub fn host_peer(&self) -> Result<PeerId> {
        match self.host.iter().last() {
            Some(Protocol::P2p(p)) => Ok(p),
            _ => Err(NodeError::Config(format!(
                "VN host address {} must end in /p2p/<the host's link PeerId>",
                self.host
            ))),
        }
    }
}

/// How long a node waits for its VN hosts at start (they may start after it), retrying the setup: this
/// many link handshake timeouts (a minute by default).
const SETUP_HANDSHAKES: u32 = 6;
const SETUP_RETRY: Duration = Duration::from_millis(500);

enum ProxyIn {
    Msg(LinkBody),
    Gone,
}

/// A started remote VN: its command channel, its address, and the proxy to spawn with the VN tasks.
pub(super) struct Proxy {
    pub(super) commands: mpsc::Sender<ToVirtualNode>,
    pub(super) addr: VnAddr,
    pub(super) task: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
}

/// Connects to the hosts of `remotes` with the link identity `link_key`, sets each VN up with `setups[s]`
/// and returns one proxy per VN (in slot order) and the link's byte counter. `to_rn` gets the VNs' reports
/// tagged with their slot.
pub(super) async fn start(
    link_key: Keypair,
    remotes: &[RemoteVn],
    setups: Vec<VnSetup>,
    handshake: Duration,
    to_rn: mpsc::Sender<(usize, FromVirtualNode)>,
) -> Result<(Vec<Proxy>, std::sync::Arc<crate::net::link::LinkStats>)> {
    let max_frame = setups
        .iter()
        .map(VnSetup::max_chunk_frame)
        .max()
        .unwrap_or(0);
    let bounds = LinkBounds::for_run(max_frame);
    let (link, mut events) = spawn_link(
        build_link_swarm(link_key, handshake, &bounds)?,
        max_frame,
        bounds,
    );
    let mut hosts = Vec::with_capacity(remotes.len());
    for r in remotes {
        let host = r.host_peer()?;
        link.allow(host, Some(r.host.clone())).await;
        hosts.push(host);
    }
    // The router: link events to the proxy of their (host, slot); a broken link to every proxy on it.
    let mut inboxes: HashMap<(PeerId, u32), mpsc::Sender<ProxyIn>> = HashMap::new();
    let mut receivers = Vec::with_capacity(remotes.len());
    for (s, host) in hosts.iter().enumerate() {
        let (tx, rx) = mpsc::channel(1024);
        inboxes.insert((*host, s as u32), tx);
        receivers.push(rx);
    }
    tokio::spawn(async move {
        while let Some(ev) = events.recv().await {
            match ev {
                // The message's bytes count against the host's budget until routed (`held` dropped).
                LinkEvent::Message {
                    from,
                    msg: LinkMessage { vn, body, .. },
                    held: _held,
                } => match inboxes.get(&(from, vn)) {
                    Some(tx) => {
                        let _ = tx.send(ProxyIn::Msg(body)).await;
                    }
                    None => tracing::debug!(%from, vn, "link message for no VN of this node"),
                },
                LinkEvent::Gone(peer) => {
                    for ((h, _), tx) in &inboxes {
                        if *h == peer {
                            let _ = tx.send(ProxyIn::Gone).await;
                        }
                    }
                }
            }
            if inboxes.values().all(|tx| tx.is_closed()) {
                return;
            }
        }
    });
    let mut proxies = Vec::with_capacity(remotes.len());
    for ((s, setup), mut inbox) in setups.into_iter().enumerate().zip(receivers) {
        let (host, peer) = (hosts[s], remotes[s].peer);
        let addr = set_up(
            &link,
            host,
            s as u32,
            &setup,
            &mut inbox,
            handshake * SETUP_HANDSHAKES,
        )
        .await?;
        let (tx, commands) = mpsc::channel(VN_COMMAND_CAPACITY);
        proxies.push(Proxy {
            commands: tx,
            addr: VnAddr::new(peer, addr),
            task: Box::pin(relay(link.clone(), host, s, commands, inbox, to_rn.clone())),
        });
    }
    // The setups are not the rounds' traffic.
    let stats = link.stats();
    stats.take();
    Ok((proxies, stats))
}

/// Sends the setup of slot `s` until the host answers (it may not be up yet), within `deadline`.
async fn set_up(
    link: &Link,
    host: PeerId,
    s: u32,
    setup: &VnSetup,
    inbox: &mut mpsc::Receiver<ProxyIn>,
    deadline: Duration,
) -> Result<Multiaddr> {
    let bytes = setup.encode()?;
    let attempt = async {
        loop {
            if !link.send(host, s, LinkBody::Setup(bytes.clone())).await {
                return Err(NodeError::Stopped);
            }
            loop {
                match inbox.recv().await {
                    Some(ProxyIn::Msg(LinkBody::Ready(a))) => {
                        return Multiaddr::try_from(a).map_err(|e| {
                            NodeError::Network(format!("VN host {host} sent a bad address: {e}"))
                        });
                    }
                    Some(ProxyIn::Msg(LinkBody::Refused(why))) => {
                        return Err(NodeError::Config(format!(
                            "VN host {host} refused VN {}: {why}",
                            setup.vn
                        )));
                    }
                    Some(ProxyIn::Msg(_)) => {}
                    Some(ProxyIn::Gone) => break,
                    None => return Err(NodeError::Stopped),
                }
            }
            tokio::time::sleep(SETUP_RETRY).await;
        }
    };
    tokio::time::timeout(deadline, attempt)
        .await
        .map_err(|_| {
            NodeError::Network(format!(
                "VN host {host} did not set up VN {} within {deadline:?} (is `node vn` running there, and does \
                 its config name this node's link identity for the VN?)",
                setup.vn
            ))
        })?
}

/// The proxy: commands to the host, reports to the RN, until the RN stops the VN or the link breaks.
async fn relay(
    link: Link,
    host: PeerId,
    s: usize,
    mut commands: mpsc::Receiver<ToVirtualNode>,
    mut inbox: mpsc::Receiver<ProxyIn>,
    to_rn: mpsc::Sender<(usize, FromVirtualNode)>,
) {
    loop {
        tokio::select! {
            cmd = commands.recv() => {
                let (body, stop) = match cmd {
                    Some(ToVirtualNode::Stop) | None => {
                        (LinkBody::ToVn(ToVirtualNode::Stop), true)
                    }
                    Some(m) => (LinkBody::ToVn(m), false),
                };
                if !link.send(host, s as u32, body).await || stop {
                    return;
                }
            }
            msg = inbox.recv() => match msg {
                Some(ProxyIn::Msg(LinkBody::FromVn(m))) => {
                    if to_rn.send((s, m)).await.is_err() {
                        return;
                    }
                }
                Some(ProxyIn::Msg(LinkBody::Refused(why))) => {
                    tracing::warn!(vn = s, %host, %why, "the VN host lost this VN");
                    return;
                }
                Some(ProxyIn::Msg(_)) => {}
                Some(ProxyIn::Gone) | None => {
                    tracing::warn!(vn = s, %host, "the link to the VN host broke");
                    return;
                }
            }
        }
    }
}
