//! The config files of a kit: each node's `node.toml`, each VN host's `host.toml`, and the same peer list in
//! every folder. Each config is checked by the parser that will read it (`config.rs`, `host_config.rs`) as
//! it is written, and the network-wide settings before anything is written: a mistake stops the kit, not n
//! processes on n machines. Configs are written anew on every run; keys never are (`identities.rs`).

use std::path::{Path, PathBuf};

use super::addresses::Addresses;
use super::hosts_file::{Placement, Plan};
use super::identities::{Identities, LINK_KEY, PSK_FILE, hosted_key};
use crate::config::NodeConfig;
use crate::peers::PeerList;
use crate::{NodeError, Result};

pub const NODE_CONFIG: &str = "node.toml";
pub const HOST_CONFIG: &str = "host.toml";
pub const PEER_LIST: &str = "peers.toml";

/// A TOML string holding `v`.
fn quote(v: impl std::fmt::Display) -> String {
    toml::Value::String(v.to_string()).to_string()
}

fn list(v: &[impl std::fmt::Display]) -> String {
    let items: Vec<String> = v.iter().map(quote).collect();
    format!("[{}]", items.join(", "))
}

/// Checks the network-wide settings (learning, timing, algorithm) with the node's own parser, for every
/// node, before a file is written; an error names the HOSTS file and the node.
pub fn check_settings(plan: &Plan, hosts: &Path, out: &Path) -> Result<()> {
    for i in 0..plan.nodes.len() {
        let text = format!(
            "key_dir = \"keys\"\nlisten = [\"/ip4/127.0.0.1/tcp/1\"]\n{}",
            settings(plan, i)?
        );
        let path = out.join(&plan.nodes[i].name).join(NODE_CONFIG);
        NodeConfig::parse(&path, &text).map_err(|e| {
            NodeError::file(
                hosts,
                format!("node[{i}]"),
                format!(
                    "the config it gives node {} is refused: {e}",
                    plan.nodes[i].name
                ),
            )
        })?;
    }
    Ok(())
}

/// Node `i`'s config but its keys and addresses: the settings every node shares, its metrics endpoint and
/// its share of the data. Top-level keys first, then the tables.
fn settings(plan: &Plan, i: usize) -> Result<String> {
    let n = &plan.nodes[i];
    let mut top = format!(
        "vns = {}\npeer_list = {}\ndegree = {}\nrounds = {}\nmetrics = \"metrics.jsonl\"\n",
        n.vns,
        quote(PEER_LIST),
        plan.degree,
        plan.rounds
    );
    if plan.psk {
        top += &format!("psk_file = {}\n", quote(PSK_FILE));
    }
    if let Some(m) = n.metrics_addr {
        top += &format!("metrics_addr = {}\n", quote(m));
    }
    if plan.checkpoints {
        top += "checkpoints = \"checkpoints\"\n";
    }
    if let Some(a) = plan.algorithm {
        top += &format!("algorithm = {}\n", quote(a));
    }
    if let Some(t) = plan.isolation_timeout_s {
        top += &format!("isolation_timeout_s = {t}\n");
    }
    let toml_err = |e: toml::ser::Error| NodeError::Config(format!("writing a node config: {e}"));
    let mut tables = format!(
        "\n[learning]\n{}nodes = {}\nindex = {i}\n",
        toml::to_string(&plan.learning).map_err(toml_err)?,
        plan.nodes.len()
    );
    if let Some(t) = &plan.timing {
        tables += &format!("\n[timing]\n{}", toml::to_string(t).map_err(toml_err)?);
    }
    Ok(top + &tables)
}

/// Writes the peer list into every folder; returns the folders.
pub fn write_peer_lists(out: &Path, plan: &Plan, list: &PeerList) -> Result<Vec<PathBuf>> {
    let text = list.to_toml();
    let folders: Vec<PathBuf> = plan
        .nodes
        .iter()
        .map(|n| &n.name)
        .chain(plan.vn_hosts.iter().map(|h| &h.name))
        .map(|name| out.join(name))
        .collect();
    for f in &folders {
        write(&f.join(PEER_LIST), &text)?;
    }
    Ok(folders)
}

/// Writes node `i`'s `node.toml` and checks it with the node's parser; returns its path.
pub fn write_node(
    out: &Path,
    plan: &Plan,
    ids: &Identities,
    addrs: &Addresses,
    i: usize,
) -> Result<PathBuf> {
    let n = &plan.nodes[i];
    let head = format!(
        "# Written by `node kit`: node {} ({} of {}). Run `node run --config {NODE_CONFIG}`.\n",
        n.name,
        i + 1,
        plan.nodes.len()
    );
    let text = match &n.placement {
        Placement::Here { .. } => format!(
            "{head}key_dir = \"keys\"\nlisten = {}\nannounce = {}\n{}",
            list(&addrs.listen[i]),
            list(&addrs.announce[i]),
            settings(plan, i)?
        ),
        Placement::Hosted(at) => {
            let vns: Vec<String> = at
                .iter()
                .enumerate()
                .map(|(s, &h)| {
                    format!(
                        "  {{ host = {}, peer = {} }},\n",
                        quote(Addresses::link_of(plan, ids, h)),
                        quote(ids.vns[i][s])
                    )
                })
                .collect();
            format!(
                "{head}{}\n[hosted]\nlink_key = {}\nvns = [\n{}]\n",
                settings(plan, i)?,
                quote(LINK_KEY),
                vns.concat()
            )
        }
    };
    let path = out.join(&n.name).join(NODE_CONFIG);
    write(&path, &text)?;
    NodeConfig::parse(&path, &text)?.builder()?;
    Ok(path)
}

/// Writes VN host `h`'s `host.toml` and loads it as `node vn` will (keys, peer list and pre-shared key
/// included); returns its path.
pub fn write_host(
    out: &Path,
    plan: &Plan,
    ids: &Identities,
    addrs: &Addresses,
    h: usize,
) -> Result<PathBuf> {
    let v = &plan.vn_hosts[h];
    let mut text = format!(
        "# Written by `node kit`: VN host {}. Run `node vn --config {HOST_CONFIG}`.\n\
         link_listen = {}\nlink_key = {}\npeer_list = {}\n",
        v.name,
        quote(Addresses::link_listen(plan, h)),
        quote(LINK_KEY),
        quote(PEER_LIST),
    );
    if plan.psk {
        text += &format!("psk_file = {}\n", quote(PSK_FILE));
    }
    if let Some(t) = &plan.timing {
        text += &format!("handshake_timeout_ms = {}\n", t.handshake_timeout_ms);
    }
    for &(i, s) in &addrs.hosted[h] {
        let node = &plan.nodes[i];
        let link = ids.node_links[i].expect("a hosted VN's node has a link identity");
        text += &format!(
            "\n[[vn]]\nkey = {}\nlisten = {}\nannounce = {}\nnode = {}\n",
            quote(hosted_key(&node.name, s)),
            quote(&addrs.listen[i][s]),
            quote(&addrs.announce[i][s]),
            quote(link),
        );
    }
    let path = out.join(&v.name).join(HOST_CONFIG);
    write(&path, &text)?;
    crate::host_config::load(&path)?;
    Ok(path)
}

/// Writes a file that is no secret (configs, the peer list, the deployment files), replacing what is there.
pub fn write(path: &Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| NodeError::io(dir, e))?;
    }
    std::fs::write(path, text).map_err(|e| NodeError::io(path, e))
}
