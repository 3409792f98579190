//! The kit's ways to run its folders: `compose.yaml` (the whole network on one container engine, one service
//! per node and VN host), a multi-stage `Dockerfile` for the `node` binary, and systemd unit templates for
//! machines (`shatter-node@.service`, and `shatter-vn@.service` when there are VN hosts). These are
//! templates written as text; no container engine or systemd runs them here (the tests parse them).
//!
//! In compose, each service is named after its node or host, and the host name the HOSTS file gives it
//! (when a name) is an alias on the network: the peer list's `/dns4/NAME/` addresses resolve to the services.

use std::path::Path;

use super::configs::{HOST_CONFIG, NODE_CONFIG, write};
use super::hosts_file::{Host, Plan};
use crate::Result;

pub const COMPOSE: &str = "compose.yaml";
pub const DOCKERFILE: &str = "Dockerfile";
/// BuildKit reads `<Dockerfile>.dockerignore` beside the Dockerfile: the repository's `target/` (gigabytes)
/// stays out of the build context.
pub const DOCKERIGNORE: &str = "Dockerfile.dockerignore";
pub const NODE_UNIT: &str = "shatter-node@.service";
pub const VN_UNIT: &str = "shatter-vn@.service";
/// The image compose runs (built from the Dockerfile).
pub const IMAGE: &str = "shatter-node";
/// Where a folder goes, in a container and on a machine (`/var/lib/shatter/<name>/` there).
pub const STATE_DIR: &str = "/var/lib/shatter";

/// A YAML double-quoted scalar: JSON's string syntax is YAML's.
fn y(v: &str) -> String {
    serde_json::Value::String(v.into()).to_string()
}

/// Writes compose.yaml, the Dockerfile and its ignore file, and the unit templates into `out`. `owner` is
/// the `uid:gid` the services run as: the kit's folders and keys are its user's, and only theirs.
pub fn write_all(out: &Path, plan: &Plan, owner: Option<&str>) -> Result<()> {
    write(&out.join(COMPOSE), &compose(plan, owner))?;
    write(&out.join(DOCKERFILE), DOCKERFILE_TEXT)?;
    write(
        &out.join(DOCKERIGNORE),
        "target\n**/target\n.git\nfuzz/corpus\n",
    )?;
    write(
        &out.join(NODE_UNIT),
        &unit(plan, "node", "run", NODE_CONFIG),
    )?;
    if !plan.vn_hosts.is_empty() {
        write(
            &out.join(VN_UNIT),
            &unit(plan, "VN host", "vn", HOST_CONFIG),
        )?;
    }
    Ok(())
}

/// compose.yaml: one service per node and VN host, its folder bind-mounted at `/var/lib/shatter`.
pub fn compose(plan: &Plan, owner: Option<&str>) -> String {
    let mut text = format!(
        "# Written by `node kit`: the whole network on one container engine. Build the image first, from the\n\
         # repository: docker build -t {IMAGE} -f {DOCKERFILE} <repository>   (this folder's Dockerfile)\n\
         # then: docker compose up\n\
         name: shatter\n\
         services:\n"
    );
    let data = plan
        .learning
        .data_dir
        .as_ref()
        .map(|d| d.display().to_string());
    let mut service = |name: &str, host: &Host, cmd: &str, config: &str| {
        text += &format!("  {name}:\n    image: {}\n", y(IMAGE));
        text += &format!(
            "    command: [{}, \"--config\", {}]\n",
            y(cmd),
            y(&format!("{STATE_DIR}/{config}"))
        );
        if let Some(o) = owner {
            text += &format!("    user: {}\n", y(o));
        }
        text += &format!("    working_dir: {}\n    volumes:\n", y(STATE_DIR));
        text += &format!("      - {}\n", y(&format!("./{name}:{STATE_DIR}")));
        if let Some(d) = &data {
            text += &format!("      - {}\n", y(&format!("{d}:{d}:ro")));
        }
        text += "    restart: \"on-failure\"\n    networks:\n";
        match host {
            Host::Name(alias) if alias != name => {
                text += &format!("      shatter:\n        aliases: [{}]\n", y(alias))
            }
            _ => text += "      shatter: {}\n",
        }
    };
    for n in &plan.nodes {
        service(&n.name, &n.host, "run", NODE_CONFIG);
    }
    for h in &plan.vn_hosts {
        service(&h.name, &h.host, "vn", HOST_CONFIG);
    }
    text += "networks:\n  shatter: {}\n";
    text
}

/// A systemd unit template: instance `%i` is a folder under /var/lib/shatter.
fn unit(plan: &Plan, what: &str, cmd: &str, config: &str) -> String {
    // A resumed node continues from its last checkpoint; without checkpoints `--resume` is refused.
    let resume = if cmd == "run" && plan.checkpoints {
        " --resume"
    } else {
        ""
    };
    format!(
        "# Written by `node kit`: a Shatter {what}. Copy its folder to {STATE_DIR}/<name>/ (owned by the user\n\
         # `shatter`), this file to /etc/systemd/system/, then: systemctl enable --now {}<name>\n\
         [Unit]\n\
         Description=Shatter {what} %i\n\
         After=network-online.target time-sync.target\n\
         Wants=network-online.target\n\
         \n\
         [Service]\n\
         User=shatter\n\
         WorkingDirectory={STATE_DIR}/%i\n\
         ExecStart=/usr/local/bin/node {cmd} --config {STATE_DIR}/%i/{config}{resume}\n\
         Restart=on-failure\n\
         RestartSec=10\n\
         NoNewPrivileges=true\n\
         ProtectSystem=strict\n\
         ProtectHome=true\n\
         PrivateTmp=true\n\
         ReadWritePaths={STATE_DIR}/%i\n\
         \n\
         [Install]\n\
         WantedBy=multi-user.target\n",
        if cmd == "run" {
            "shatter-node@"
        } else {
            "shatter-vn@"
        },
    )
}

/// Multi-stage: the release `node` binary built in the Rust image, run as a user of its own in a slim one.
const DOCKERFILE_TEXT: &str = "\
# Written by `node kit`. Build from the repository's root (the build context), with this folder's
# Dockerfile: docker build -t shatter-node -f Dockerfile <repository>
FROM rust:1.89-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p node

FROM debian:bookworm-slim
RUN useradd --system --uid 10001 --home-dir /var/lib/shatter --create-home shatter
COPY --from=build /src/target/release/node /usr/local/bin/node
USER shatter
WORKDIR /var/lib/shatter
ENTRYPOINT [\"/usr/local/bin/node\"]
CMD [\"--help\"]
";
