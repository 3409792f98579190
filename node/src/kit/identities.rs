//! The kit's identities and shared secrets: every VN's key, the link identities of hosted nodes and of VN
//! hosts, and the pre-shared key. A key already in the output is read, never replaced: a kit written again,
//! or extended with nodes, keeps every identity it made before (keys are private files,
//! `private_file.rs`).
//!
//! Where each key lives, relative to the kit's folder: node `N`'s VN s at `N/keys/vn-<s>.key`; with hosted
//! VNs, node `N`'s link identity at `N/link/vn-0.key` and its VN s at its host `H`'s `H/keys/N-vn-<s>.key`
//! (the key goes where the VN runs, never to its node); host `H`'s link identity at `H/link/vn-0.key`.

use std::path::{Path, PathBuf};

use libp2p::PeerId;

use super::hosts_file::{Placement, Plan};
use crate::{NodeError, Result, keys};

/// A link identity's key file in its owner's folder (`node keygen --dir link --vns 1` makes the same).
pub const LINK_KEY: &str = "link/vn-0.key";
/// The pre-shared key's name, in the kit's folder (the network's copy) and in every node and host folder.
pub const PSK_FILE: &str = "swarm.key";

/// Node `node`'s hosted VN `s`'s key, relative to its host's folder.
pub fn hosted_key(node: &str, s: usize) -> String {
    format!("keys/{node}-vn-{s}.key")
}

/// The identities of a kit's network.
pub struct Identities {
    /// `vns[i][s]`: node i's VN s.
    pub vns: Vec<Vec<PeerId>>,
    /// Node i's link identity, when its VNs are hosted.
    pub node_links: Vec<Option<PeerId>>,
    /// VN host h's link identity.
    pub host_links: Vec<PeerId>,
    /// Key files made now.
    pub made: usize,
    /// Key files found in the output and kept.
    pub kept: usize,
}

impl Identities {
    /// Reads every key the plan needs from `out`, making those that are missing.
    pub fn ensure(plan: &Plan, out: &Path) -> Result<Self> {
        let mut ids = Identities {
            vns: Vec::with_capacity(plan.nodes.len()),
            node_links: Vec::with_capacity(plan.nodes.len()),
            host_links: Vec::with_capacity(plan.vn_hosts.len()),
            made: 0,
            kept: 0,
        };
        for n in &plan.nodes {
            let dir = out.join(&n.name);
            let (vns, link) = match &n.placement {
                Placement::Here { .. } => {
                    let vns = (0..n.vns)
                        .map(|s| ids.key(&keys::key_path(&dir.join("keys"), s)))
                        .collect::<Result<_>>()?;
                    (vns, None)
                }
                Placement::Hosted(at) => {
                    let vns = at
                        .iter()
                        .enumerate()
                        .map(|(s, &h)| {
                            let host = out.join(&plan.vn_hosts[h].name);
                            ids.key(&host.join(hosted_key(&n.name, s)))
                        })
                        .collect::<Result<_>>()?;
                    (vns, Some(ids.key(&dir.join(LINK_KEY))?))
                }
            };
            ids.vns.push(vns);
            ids.node_links.push(link);
        }
        for h in &plan.vn_hosts {
            let link = ids.key(&out.join(&h.name).join(LINK_KEY))?;
            ids.host_links.push(link);
        }
        Ok(ids)
    }

    fn key(&mut self, path: &Path) -> Result<PeerId> {
        let (key, made) = keys::ensure_file(path)?;
        if made {
            self.made += 1;
        } else {
            self.kept += 1;
        }
        Ok(key.public().to_peer_id())
    }
}

/// The network's pre-shared key at `out/swarm.key` (made when missing), copied into each of `folders`. A
/// copy already there is kept when it is the same key and refused when it is another: a folder holding
/// another network's key is not overwritten.
pub fn share_psk(out: &Path, folders: &[PathBuf]) -> Result<()> {
    let network = out.join(PSK_FILE);
    if !network.exists() {
        crate::psk::generate(&network)?;
    }
    let key = std::fs::read(&network).map_err(|e| NodeError::io(&network, e))?;
    for f in folders {
        let copy = f.join(PSK_FILE);
        match std::fs::read(&copy) {
            Ok(held) if held == key => {}
            Ok(_) => {
                return Err(NodeError::file(
                    &copy,
                    "psk",
                    format!(
                        "another key than the network's {}: refusing to overwrite a key (remove it to take \
                         the network's)",
                        network.display()
                    ),
                ));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                crate::private_file::create_new(&copy, &key).map_err(|e| NodeError::io(&copy, e))?
            }
            Err(e) => return Err(NodeError::io(&copy, e)),
        }
    }
    Ok(())
}
