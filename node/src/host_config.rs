//! The `node vn --config FILE.toml` configuration: a VN host, running VNs for real nodes elsewhere (issue 13).
//! Relative paths are resolved against the config file's directory; every error names the file and field.
//!
//! ```toml
//! link_listen = "/ip4/0.0.0.0/tcp/7000"   # where the real nodes reach this host (their [hosted] entries)
//! link_key = "host/vn-0.key"              # the host's link identity (`node keygen --dir host --vns 1`)
//! peer_list = "peers.toml"                # the network's peer list, as the nodes have it
//! psk_file = "swarm.key"                  # optional, as the nodes have it
//! arrivals = "arrivals.log"               # optional, research: what arrives at the hosted VNs, when
//! tenant_bytes = 1073741824               # optional: the most one node can make this host hold (1 GiB)
//!
//! [[vn]]                                  # one per hosted VN, of any nodes
//! key = "node3/vn-2.key"                  # the VN's key (it never leaves this host)
//! listen = "/ip4/0.0.0.0/tcp/4101"
//! announce = "/ip4/192.0.2.9/tcp/4101"    # optional
//! node = "12D3KooW..."                    # the link PeerId of the node this VN belongs to
//! ```

use std::path::{Path, PathBuf};

use libp2p::{Multiaddr, PeerId};
use serde::Deserialize;

use crate::peers::PeerList;
use crate::{HostedVn, NodeError, Result, VnHost, keys};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    link_listen: String,
    link_key: PathBuf,
    peer_list: PathBuf,
    psk_file: Option<PathBuf>,
    handshake_timeout_ms: Option<u64>,
    /// Research: what arrives at the hosted VNs, when (`arrival_log.rs`).
    arrivals: Option<PathBuf>,
    /// What one node can make this host hold (`net::link_limits::LinkBounds::for_tenant`).
    tenant_bytes: Option<usize>,
    vn: Vec<RawVn>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVn {
    key: PathBuf,
    listen: String,
    announce: Option<String>,
    node: String,
}

/// Loads a VN host's config, its keys and the peer list.
pub fn load(path: &Path) -> Result<VnHost> {
    let text = std::fs::read_to_string(path).map_err(|e| NodeError::io(path, e))?;
    let raw: RawHost =
        toml::from_str(&text).map_err(|e| NodeError::file(path, "toml", e.message()))?;
    let rel = |p: &Path| crate::config::relative_to(path, p);
    let err = |field: &str, msg: String| NodeError::file(path, field, msg);
    let addr = |field: &str, a: &str| -> Result<Multiaddr> {
        a.parse()
            .map_err(|e| err(field, format!("'{a}' is not a multiaddr: {e}")))
    };
    if raw.vn.is_empty() {
        return Err(err("vn", "a host needs at least one [[vn]]".into()));
    }
    let tenant_bytes = raw
        .tenant_bytes
        .unwrap_or(crate::net::link_limits::DEFAULT_TENANT_BYTES);
    if tenant_bytes < crate::net::link_limits::MIN_TENANT_BYTES {
        return Err(err(
            "tenant_bytes",
            format!(
                "{tenant_bytes} is below {} (a node's setup must fit its link messages, 1/32 of this)",
                crate::net::link_limits::MIN_TENANT_BYTES
            ),
        ));
    }
    let peers = PeerList::load(&rel(&raw.peer_list))?;
    let mut vns = Vec::with_capacity(raw.vn.len());
    for (i, v) in raw.vn.iter().enumerate() {
        let key = keys::load_file(&rel(&v.key))?;
        let id = key.public().to_peer_id();
        if !peers.is_allowed(&id) {
            return Err(err(
                &format!("vn[{i}].key"),
                format!("VN {id} is not on the peer list: peers would refuse it"),
            ));
        }
        if vns
            .iter()
            .any(|h: &HostedVn| h.key.public().to_peer_id() == id)
        {
            return Err(err(
                &format!("vn[{i}].key"),
                format!("VN {id} is listed twice"),
            ));
        }
        let node: PeerId = v.node.parse().map_err(|e| {
            err(
                &format!("vn[{i}].node"),
                format!("'{}' is not a PeerId: {e}", v.node),
            )
        })?;
        // Issue 43: the host knows which node each VN answers to (`placement.rs`).
        let owners: Vec<PeerId> = vns.iter().map(|h: &HostedVn| h.rn).chain([node]).collect();
        if let Some((j, _)) = crate::placement::two_of_one_node(&owners) {
            return Err(err(
                &format!("vn[{i}].node"),
                format!(
                    "vn[{j}] already belongs to node {node}: {}; put this VN on another host",
                    crate::placement::ONE_VN_PER_NODE_PER_HOST
                ),
            ));
        }
        vns.push(HostedVn {
            key,
            listen: addr(&format!("vn[{i}].listen"), &v.listen)?,
            announce: v
                .announce
                .as_deref()
                .map(|a| addr(&format!("vn[{i}].announce"), a))
                .transpose()?,
            rn: node,
        });
    }
    Ok(VnHost {
        link_listen: addr("link_listen", &raw.link_listen)?,
        link_key: keys::load_file(&rel(&raw.link_key))?,
        peers,
        psk: raw
            .psk_file
            .as_deref()
            .map(|p| crate::net::transport::load_psk(&rel(p)))
            .transpose()?,
        vns,
        observer: match &raw.arrivals {
            Some(p) => Some(std::sync::Arc::new(crate::arrival_log::ArrivalLog::create(
                &rel(p),
            )?)),
            None => None,
        },
        handshake: std::time::Duration::from_millis(
            raw.handshake_timeout_ms
                .unwrap_or(crate::net::limits::HANDSHAKE_TIMEOUT.as_millis() as u64),
        ),
        tenant_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_config_loads_and_names_its_errors() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let vn = keys::generate(&d.join("node"), 1).unwrap().remove(0);
        keys::generate(&d.join("host"), 1).unwrap();
        let node = PeerId::random();
        let peers = PeerList::from_entries([(vn.public().to_peer_id(), None)]);
        std::fs::write(d.join("peers.toml"), peers.to_toml()).unwrap();
        let text = format!(
            "link_listen = \"/ip4/127.0.0.1/tcp/0\"\nlink_key = \"host/vn-0.key\"\npeer_list = \"peers.toml\"\n\
             [[vn]]\nkey = \"node/vn-0.key\"\nlisten = \"/ip4/127.0.0.1/tcp/0\"\nnode = \"{node}\"\n"
        );
        let path = d.join("host.toml");
        std::fs::write(&path, &text).unwrap();
        let h = load(&path).unwrap();
        assert_eq!(h.vns.len(), 1);
        assert_eq!(h.vns[0].rn, node);
        assert_eq!(h.vns[0].key.public().to_peer_id(), vn.public().to_peer_id());

        // Two VNs of one node on one host: refused, saying why.
        let vn1 = keys::generate(&d.join("node1"), 1).unwrap().remove(0);
        let two = PeerList::from_entries([
            (vn.public().to_peer_id(), None),
            (vn1.public().to_peer_id(), None),
        ]);
        std::fs::write(d.join("peers.toml"), two.to_toml()).unwrap();
        let second = format!(
            "{text}[[vn]]\nkey = \"node1/vn-0.key\"\nlisten = \"/ip4/127.0.0.1/tcp/0\"\nnode = \"{node}\"\n"
        );
        std::fs::write(&path, &second).unwrap();
        let e = load(&path).err().unwrap().to_string();
        assert!(
            e.contains("vn[1].node") && e.contains("at most one VN of each node"),
            "{e}"
        );
        let other = PeerId::random();
        std::fs::write(
            &path,
            second.replacen(&node.to_string(), &other.to_string(), 1),
        )
        .unwrap();
        assert_eq!(load(&path).unwrap().vns.len(), 2, "VNs of two nodes");
        std::fs::write(d.join("peers.toml"), peers.to_toml()).unwrap();

        std::fs::write(&path, text.replace(&node.to_string(), "nobody")).unwrap();
        let e = load(&path).err().unwrap().to_string();
        assert!(e.contains("host.toml") && e.contains("vn[0].node"), "{e}");
        // A VN the peer list does not know would be refused by every peer: caught here.
        std::fs::write(d.join("peers.toml"), PeerList::from_entries([]).to_toml()).unwrap();
        std::fs::write(&path, &text).unwrap();
        let e = load(&path).err().unwrap().to_string();
        assert!(e.contains("not on the peer list"), "{e}");
    }
}
