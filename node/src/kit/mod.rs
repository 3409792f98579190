//! `node kit HOSTS.toml --out DIR`: a whole permissioned network's setup from one file describing its hosts
//! (issue 46). One folder per node and VN host with its keys, config, the shared peer list and pre-shared
//! key, plus `compose.yaml`, a `Dockerfile`, systemd unit templates and a README saying what goes where.
//!
//! - `hosts_file.rs`: the HOSTS file's schema and checks (names, hosts, ports, one VN of a node per host).
//! - `identities.rs`: keys made once and kept, the pre-shared key and its copies.
//! - `addresses.rs`: where each VN listens and what it announces.
//! - `configs.rs`: `node.toml`, `host.toml` and `peers.toml`, each checked by the parser that reads it.
//! - `containers.rs`: compose, Dockerfile, systemd units; `guide.rs`: the README.

mod addresses;
mod configs;
mod containers;
mod guide;
mod hosts_file;
mod identities;

use std::path::{Path, PathBuf};

use hosts_file::Plan;

use crate::peers::PeerList;
use crate::{NodeError, Result};

/// What a kit run wrote.
#[derive(Debug)]
pub struct Kit {
    /// Each node's config, in the HOSTS file's order.
    pub node_configs: Vec<PathBuf>,
    /// Each VN host's config.
    pub host_configs: Vec<PathBuf>,
    /// Key files made by this run.
    pub keys_made: usize,
    /// Key files found in `out` and kept.
    pub keys_kept: usize,
}

/// Reads the HOSTS file at `hosts` and writes the network's kit into `out` (created if missing). Everything
/// the HOSTS file says is checked before anything is written; keys already in `out` are kept.
pub fn build(hosts: &Path, out: &Path) -> Result<Kit> {
    let plan = Plan::load(hosts)?;
    configs::check_settings(&plan, hosts, out)?;
    std::fs::create_dir_all(out).map_err(|e| NodeError::io(out, e))?;
    let ids = identities::Identities::ensure(&plan, out)?;
    let addrs = addresses::Addresses::new(&plan, &ids);
    // In PeerId order (`PeerList`), as `node peer-list` writes it: the list does not say which VNs are
    // siblings.
    let list = PeerList::from_entries(addrs.peer_entries(&plan, &ids));
    let folders = configs::write_peer_lists(out, &plan, &list)?;
    if plan.psk {
        identities::share_psk(out, &folders)?;
    }
    let node_configs = (0..plan.nodes.len())
        .map(|i| configs::write_node(out, &plan, &ids, &addrs, i))
        .collect::<Result<Vec<_>>>()?;
    let host_configs = (0..plan.vn_hosts.len())
        .map(|h| configs::write_host(out, &plan, &ids, &addrs, h))
        .collect::<Result<Vec<_>>>()?;
    containers::write_all(out, &plan, owner(out).as_deref())?;
    configs::write(&out.join("README.md"), &guide::readme(&plan))?;
    Ok(Kit {
        node_configs,
        host_configs,
        keys_made: ids.made,
        keys_kept: ids.kept,
    })
}

/// `uid:gid` of `dir`'s owner, for the containers to read its keys.
fn owner(dir: &Path) -> Option<String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(dir)
            .ok()
            .map(|m| format!("{}:{}", m.uid(), m.gid()))
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        None
    }
}

#[cfg(test)]
mod tests;
