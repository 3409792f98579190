//! Where every VN of a kit's network listens and what it announces. A node's own VNs take its port + s; a
//! VN host's hosted VNs take the ports after its link in PeerId order, which says nothing about their
//! nodes: in the HOSTS file's order, the VNs of one node would sit at the same offset on every host.

use std::net::IpAddr;

use libp2p::{Multiaddr, PeerId};

use super::hosts_file::{Placement, Plan};
use super::identities::Identities;

/// The kit's addresses.
pub struct Addresses {
    /// `announce[i][s]`: where peers dial node i's VN s.
    pub announce: Vec<Vec<Multiaddr>>,
    /// `listen[i][s]`: the socket node i's VN s binds, at its node or its host.
    pub listen: Vec<Vec<Multiaddr>>,
    /// `hosted[h]`: VN host h's VNs `(node, s)`, in the order of their ports.
    pub hosted: Vec<Vec<(usize, usize)>>,
}

impl Addresses {
    pub fn new(plan: &Plan, ids: &Identities) -> Self {
        let hosted: Vec<Vec<(usize, usize)>> = plan
            .vn_hosts
            .iter()
            .map(|h| {
                let mut vns = h.serves.clone();
                vns.sort_by_key(|&(i, s)| ids.vns[i][s]);
                vns
            })
            .collect();
        let (mut announce, mut listen) = (Vec::new(), Vec::new());
        for (i, n) in plan.nodes.iter().enumerate() {
            let (a, l): (Vec<_>, Vec<_>) = (0..n.vns)
                .map(|s| match &n.placement {
                    Placement::Here { port, listen_ip } => {
                        let p = port + s as u16;
                        (n.host.addr(p), bind(*listen_ip, p))
                    }
                    Placement::Hosted(at) => {
                        let h = at[s];
                        let j = hosted[h]
                            .iter()
                            .position(|&v| v == (i, s))
                            .expect("a hosted VN is in its host's list");
                        let p = plan.hosted_port(h, j);
                        let host = &plan.vn_hosts[h];
                        (host.host.addr(p), bind(host.listen_ip, p))
                    }
                })
                .unzip();
            announce.push(a);
            listen.push(l);
        }
        Self {
            announce,
            listen,
            hosted,
        }
    }

    /// VN host `h`'s link as a node's `[hosted]` table names it: its address and its link PeerId.
    pub fn link_of(plan: &Plan, ids: &Identities, h: usize) -> Multiaddr {
        plan.vn_hosts[h]
            .host
            .addr(plan.vn_hosts[h].port)
            .with(libp2p::multiaddr::Protocol::P2p(ids.host_links[h]))
    }

    /// The socket VN host `h`'s link binds.
    pub fn link_listen(plan: &Plan, h: usize) -> Multiaddr {
        bind(plan.vn_hosts[h].listen_ip, plan.vn_hosts[h].port)
    }

    /// The peer list's entries: every VN, with its address when its node is a bootstrap node.
    pub fn peer_entries(&self, plan: &Plan, ids: &Identities) -> Vec<(PeerId, Option<Multiaddr>)> {
        plan.nodes
            .iter()
            .enumerate()
            .flat_map(|(i, n)| {
                (0..n.vns).map(move |s| {
                    (
                        ids.vns[i][s],
                        n.bootstrap.then(|| self.announce[i][s].clone()),
                    )
                })
            })
            .collect()
    }
}

/// The socket address `ip:port` as a listen multiaddr.
fn bind(ip: IpAddr, port: u16) -> Multiaddr {
    let ma = match ip {
        IpAddr::V4(ip) => format!("/ip4/{ip}/tcp/{port}"),
        IpAddr::V6(ip) => format!("/ip6/{ip}/tcp/{port}"),
    };
    ma.parse().expect("an IP address and a port")
}
