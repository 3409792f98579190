//! The kit's `README.md`: what to copy where, and the one command to start each folder.

use std::fmt::Write;

use super::configs::{HOST_CONFIG, NODE_CONFIG};
use super::containers::{COMPOSE, DOCKERFILE, IMAGE, NODE_UNIT, STATE_DIR, VN_UNIT};
use super::hosts_file::{Host, Placement, Plan};
use super::identities::PSK_FILE;

/// The README text for a kit of `plan`.
pub fn readme(plan: &Plan) -> String {
    let mut t = String::from(
        "# A Shatter network, written by `node kit`\n\n\
         Each folder is one machine's (or container's) whole setup: its keys, its config and the network's \
         peer list. Copy each folder to the machine it names, and only there: a folder holds private keys \
         (mode 0600), and this folder as a whole is every identity of the network. Run `node kit` again \
         after changing the HOSTS file: configs are rewritten, keys are kept.\n\n\
         | folder | machine | start it with |\n|---|---|---|\n",
    );
    for n in &plan.nodes {
        let what = match &n.placement {
            Placement::Here { port, .. } => {
                format!("TCP {}-{} open", port, u32::from(*port) + n.vns as u32 - 1)
            }
            Placement::Hosted(_) => "its VNs run at VN hosts".into(),
        };
        let _ = writeln!(
            t,
            "| `{}/` | {} ({what}) | `node run --config {NODE_CONFIG}` |",
            n.name, n.host
        );
    }
    for (h, v) in plan.vn_hosts.iter().enumerate() {
        let _ = writeln!(
            t,
            "| `{}/` | {} (TCP {}-{} open) | `node vn --config {HOST_CONFIG}` |",
            v.name,
            v.host,
            v.port,
            u32::from(v.port) + plan.vn_hosts[h].serves.len() as u32
        );
    }
    t += "\nRun each command in its folder's copy (paths in a config are relative to it). The nodes find \
          each other through the peer list's bootstrap entries: start those first. A node that reaches no \
          peer warns every round and stops after `isolation_timeout_s` (60 s by default).\n";
    if plan.psk {
        t += &format!(
            "\n`{PSK_FILE}` here is the network's pre-shared key; every folder has a copy. Keep it out of \
             anyone else's reach: whoever holds it can join the network.\n"
        );
    }
    t += &format!(
        "\n## On machines (systemd)\n\n\
         Install the `node` binary as `/usr/local/bin/node` (`cargo build --release -p node`), create a user \
         `shatter`, copy the folder to `{STATE_DIR}/<name>/` owned by that user, copy `{NODE_UNIT}` to \
         `/etc/systemd/system/` and run `systemctl enable --now shatter-node@<name>`.\n"
    );
    if !plan.vn_hosts.is_empty() {
        t += &format!(
            "VN hosts use `{VN_UNIT}` the same way: `systemctl enable --now shatter-vn@<name>`.\n"
        );
    }
    t += &format!(
        "\n## In containers (compose)\n\n\
         `{COMPOSE}` runs the whole network on one container engine, one service per folder. Build the image \
         from the repository (`docker build -t {IMAGE} -f {DOCKERFILE} <repository>`; `Dockerfile.dockerignore` \
         keeps `target/` out of the context), then `docker compose up` here. The services run as the user \
         that wrote this folder, so that they can read its keys. These files were written by the kit and \
         checked as text; no container engine ran them.\n"
    );
    let ips: Vec<&str> = plan
        .nodes
        .iter()
        .map(|n| (&n.name, &n.host))
        .chain(plan.vn_hosts.iter().map(|h| (&h.name, &h.host)))
        .filter(|(_, h)| matches!(h, Host::Ip(_)))
        .map(|(n, _)| n.as_str())
        .collect();
    if !ips.is_empty() {
        t += &format!(
            "\nIn compose, services reach each other by name: {} given by IP address in the HOSTS file, \
             which the compose network does not have. Give them host names there for compose.\n",
            ips.join(", ")
        );
    }
    t
}
