//! Real VN Swarms in one test process (the node's own stack and behaviour over libp2p's in-process memory
//! transport), each driven by its own task, for the link tests.

use std::time::Duration;

use futures::StreamExt;
use libp2p::identity::Keypair;
use libp2p::swarm::SwarmEvent;
use libp2p::swarm::dial_opts::DialOpts;
use libp2p::{Multiaddr, PeerId};
use node::net::behaviour::Timeouts;
use node::net::transport::{VnSwarm, build_swarm};
use node::net::vn_task::listen;
use tokio::sync::mpsc;

/// How long any one step of a link test may take.
pub const LIMIT: Duration = Duration::from_secs(20);

/// Chunk frames the harness Swarms accept as requests (the links under test set their own caps).
const MAX_CHUNK_FRAME: usize = 1 << 16;

/// One Swarm, driven in a task; dials go in and established connections come out through channels (the
/// task owns the Swarm).
pub struct Vn {
    pub id: PeerId,
    pub addr: Multiaddr,
    pub stream: libp2p_stream::Control,
    /// Dials to start (the task owns the Swarm).
    pub dial: mpsc::UnboundedSender<(PeerId, Multiaddr)>,
    connected: mpsc::UnboundedReceiver<PeerId>,
}

impl Vn {
    /// Dials `to` and waits for the connection, so that the links find it up (as a VN's do, which dial
    /// before they send).
    pub async fn connect(&mut self, to: &Vn) {
        self.dial.send((to.id, to.addr.clone())).unwrap();
        tokio::time::timeout(LIMIT, async {
            while self.connected.recv().await != Some(to.id) {}
        })
        .await
        .expect("connected in time");
    }
}

/// A Swarm for `key` that allows `allow` at the connection level.
pub async fn vn(key: Keypair, allow: &[PeerId]) -> Vn {
    let mut swarm: VnSwarm =
        build_swarm(key.clone(), None, Timeouts::default(), MAX_CHUNK_FRAME).unwrap();
    for p in allow {
        swarm.behaviour_mut().allow.allow_peer(*p);
    }
    let addr = listen(&mut swarm, "/memory/0".parse().unwrap())
        .await
        .unwrap();
    let stream = swarm.behaviour().stream.new_control();
    let (dial, mut dials) = mpsc::unbounded_channel::<(PeerId, Multiaddr)>();
    let (up, connected) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                ev = swarm.select_next_some() => {
                    if let SwarmEvent::ConnectionEstablished { peer_id, .. } = ev {
                        let _ = up.send(peer_id);
                    }
                }
                Some((peer, addr)) = dials.recv() => {
                    let _ = swarm.dial(DialOpts::peer_id(peer).addresses(vec![addr]).build());
                }
            }
        }
    });
    Vn {
        id: key.public().to_peer_id(),
        addr,
        stream,
        dial,
        connected,
    }
}

/// `n` Swarms, each allowing all the others at the connection level.
pub async fn vns(n: usize) -> Vec<Vn> {
    let keys: Vec<Keypair> = (0..n).map(|_| Keypair::generate_ed25519()).collect();
    let peers: Vec<PeerId> = keys.iter().map(|k| k.public().to_peer_id()).collect();
    let mut out = Vec::new();
    for key in keys {
        out.push(vn(key, &peers).await);
    }
    out
}

/// Two Swarms allowing each other, the first connected to the second.
pub async fn connected_pair() -> Vec<Vn> {
    let mut v = vns(2).await;
    let (x, y) = v.split_at_mut(1);
    x[0].connect(&y[0]).await;
    v
}
