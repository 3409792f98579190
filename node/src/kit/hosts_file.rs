//! The HOSTS file `node kit` reads: a whole network in one file, checked before any file is written. Every
//! error names the HOSTS file, the field and what is wrong; unknown fields are refused.
//!
//! ```toml
//! rounds = 100
//! degree = 4                        # r
//! vns = 4                           # optional: k of every node that does not say (default 8)
//! psk = true                        # optional: close the network with a pre-shared key (default false)
//! metrics_addr = "0.0.0.0:9464"     # optional: every node serves Prometheus metrics there
//! algorithm = "shatter"             # optional, as in node.toml
//! isolation_timeout_s = 60          # optional, as in node.toml
//! checkpoints = true                # optional: a checkpoint every round, and `--resume` in the units
//! bootstrap = ["alice"]             # optional: the nodes whose VNs the peer list gives addresses
//!                                   #   (default: the first node)
//!
//! [learning]                        # node.toml's [learning] without `nodes` and `index` (the kit sets
//! dataset = "synthetic"             #   them: the number of [[node]]s, and each node's place among them)
//! lr = 0.05
//! seed = 1
//!
//! [timing]                          # optional, node.toml's [timing]
//!
//! [[node]]
//! name = "alice"                    # its folder, compose service and unit instance: a host-name label
//! host = "alice.example.org"        # where peers reach it: an IP address or a DNS name
//! port = 4001                       # VN s listens on port + s
//! vns = 4                           # optional: this node's k
//! listen_ip = "0.0.0.0"             # optional: the address its sockets bind (default 0.0.0.0, :: for IPv6)
//! metrics_addr = "0.0.0.0:9465"     # optional: this node's, instead of the network's
//!
//! [[node]]
//! name = "bob"
//! host = "192.0.2.7"
//! vn_hosts = ["h1", "h2", "h3", "h4"]   # optional: VN s runs at VN host vn_hosts[s]; no port then
//!
//! [[vn_host]]
//! name = "h1"
//! host = "h1.example.org"
//! port = 7000                       # the link nodes reach it on; its m hosted VNs listen on port + 1 ..= port + m
//! listen_ip = "0.0.0.0"             # optional
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use libp2p::Multiaddr;
use serde::{Deserialize, Serialize};

use crate::algo::AlgoSpec;
use crate::{NodeError, Result, Timing};

/// k of a node when neither it nor the network says: `node keygen`'s default.
const DEFAULT_VNS: usize = 8;

/// Names the kit writes files under in its output: a node or VN host of that name would collide.
const RESERVED_NAMES: [&str; 1] = ["dockerfile"];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHosts {
    rounds: u64,
    degree: usize,
    vns: Option<usize>,
    #[serde(default)]
    psk: bool,
    metrics_addr: Option<SocketAddr>,
    algorithm: Option<AlgoSpec>,
    isolation_timeout_s: Option<u64>,
    #[serde(default)]
    checkpoints: bool,
    bootstrap: Option<Vec<String>>,
    learning: Learning,
    timing: Option<Timing>,
    #[serde(default)]
    node: Vec<RawNode>,
    #[serde(default)]
    vn_host: Vec<RawVnHost>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNode {
    name: String,
    host: String,
    port: Option<u16>,
    vns: Option<usize>,
    listen_ip: Option<IpAddr>,
    metrics_addr: Option<SocketAddr>,
    vn_hosts: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVnHost {
    name: String,
    host: String,
    port: u16,
    listen_ip: Option<IpAddr>,
}

/// `[learning]`: node.toml's table without `nodes` and `index`, written into every node's config as given
/// (a relative `data_dir` made absolute against the HOSTS file's directory); the node's own parser checks it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Learning {
    pub dataset: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    pub lr: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_epochs: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_steps: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clip: Option<f64>,
    pub seed: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_test_samples: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
}

/// Where peers reach a machine: an IP address, or a DNS name resolved when dialled.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Host {
    Ip(IpAddr),
    /// Lower case, without a final dot: two spellings of one name are one host.
    Name(String),
}

impl Host {
    fn parse(text: &str) -> std::result::Result<Self, String> {
        if let Ok(ip) = text.parse::<IpAddr>() {
            return Ok(Host::Ip(ip));
        }
        crate::peers::check_host_name(text)?;
        Ok(Host::Name(
            text.strip_suffix('.').unwrap_or(text).to_ascii_lowercase(),
        ))
    }

    /// The address peers dial for `port` here; a name as `/dns4/` (its IPv4 addresses).
    pub fn addr(&self, port: u16) -> Multiaddr {
        let text = match self {
            Host::Ip(IpAddr::V4(ip)) => format!("/ip4/{ip}/tcp/{port}"),
            Host::Ip(IpAddr::V6(ip)) => format!("/ip6/{ip}/tcp/{port}"),
            Host::Name(name) => format!("/dns4/{name}/tcp/{port}"),
        };
        text.parse().expect("a checked host and a port")
    }

    /// What a socket binds when nothing else is said: every address of the host's family.
    fn any(&self) -> IpAddr {
        match self {
            Host::Ip(IpAddr::V6(_)) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            _ => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Ip(ip) => write!(f, "{ip}"),
            Host::Name(n) => f.write_str(n),
        }
    }
}

/// Where a node's VNs run.
#[derive(Debug, Clone)]
pub enum Placement {
    /// In its own process: VN s listens on `listen_ip`, port `port + s`.
    Here { port: u16, listen_ip: IpAddr },
    /// VN s at VN host `hosts[s]` (an index into [`Plan::vn_hosts`]).
    Hosted(Vec<usize>),
}

/// One `[[node]]`, checked.
#[derive(Debug, Clone)]
pub struct NodePlan {
    pub name: String,
    pub host: Host,
    pub vns: usize,
    pub placement: Placement,
    pub metrics_addr: Option<SocketAddr>,
    /// Its VNs are the peer list's bootstrap entries.
    pub bootstrap: bool,
}

/// One `[[vn_host]]`, checked.
#[derive(Debug, Clone)]
pub struct VnHostPlan {
    pub name: String,
    pub host: Host,
    /// The link's port; the hosted VNs listen on the ports after it.
    pub port: u16,
    pub listen_ip: IpAddr,
    /// The VNs it runs, `(node, s)`, in the HOSTS file's order.
    pub serves: Vec<(usize, usize)>,
}

/// The network a HOSTS file describes, checked: names, hosts, ports and the placement of hosted VNs.
#[derive(Debug, Clone)]
pub struct Plan {
    pub rounds: u64,
    pub degree: usize,
    pub psk: bool,
    pub algorithm: Option<AlgoSpec>,
    pub isolation_timeout_s: Option<u64>,
    pub checkpoints: bool,
    pub learning: Learning,
    pub timing: Option<Timing>,
    pub nodes: Vec<NodePlan>,
    pub vn_hosts: Vec<VnHostPlan>,
}

impl Plan {
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| NodeError::io(path, e))?;
        Self::parse(path, &text)
    }

    /// Parses HOSTS text; `path` names the file in errors and anchors a relative `data_dir`.
    pub fn parse(path: &Path, text: &str) -> Result<Self> {
        let raw: RawHosts = toml::from_str(text).map_err(|e| {
            let at = e
                .span()
                .map(|s| crate::config::locate(text, s.start))
                .unwrap_or_else(|| "toml".into());
            NodeError::file(path, at, e.message())
        })?;
        let err = |field: String, msg: String| NodeError::file(path, field, msg);
        if raw.node.is_empty() {
            return Err(err(
                "node".into(),
                "a network needs at least one [[node]]".into(),
            ));
        }
        if raw.rounds == 0 {
            return Err(err("rounds".into(), "must be at least 1".into()));
        }
        let default_vns = raw.vns.unwrap_or(DEFAULT_VNS);
        let names = Names::check(&raw).map_err(|(f, m)| err(f, m))?;
        let mut vn_hosts = raw
            .vn_host
            .iter()
            .enumerate()
            .map(|(h, v)| {
                let host =
                    Host::parse(&v.host).map_err(|m| err(format!("vn_host[{h}].host"), m))?;
                if v.port == 0 {
                    return Err(err(format!("vn_host[{h}].port"), "must not be 0".into()));
                }
                Ok(VnHostPlan {
                    name: v.name.clone(),
                    listen_ip: v.listen_ip.unwrap_or_else(|| host.any()),
                    host,
                    port: v.port,
                    serves: Vec::new(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let bootstrap = match &raw.bootstrap {
            None => vec![raw.node[0].name.clone()],
            Some(b) if b.is_empty() => {
                return Err(err(
                    "bootstrap".into(),
                    "name at least one node: joining VNs need an address to start from".into(),
                ));
            }
            Some(b) => b.clone(),
        };
        for (j, b) in bootstrap.iter().enumerate() {
            if !raw.node.iter().any(|n| n.name.eq_ignore_ascii_case(b)) {
                return Err(err(
                    format!("bootstrap[{j}]"),
                    format!("no [[node]] is named '{b}'"),
                ));
            }
        }
        let mut nodes = Vec::with_capacity(raw.node.len());
        for (i, n) in raw.node.iter().enumerate() {
            let field = |f: &str| format!("node[{i}].{f}");
            let host = Host::parse(&n.host).map_err(|m| err(field("host"), m))?;
            let vns = n.vns.unwrap_or(default_vns);
            if vns == 0 {
                return Err(err(field("vns"), "must be at least 1".into()));
            }
            let placement = match (&n.vn_hosts, n.port) {
                (Some(hs), port) => {
                    if port.is_some() || n.listen_ip.is_some() {
                        return Err(err(
                            field(if port.is_some() { "port" } else { "listen_ip" }),
                            format!(
                                "node {}'s VNs run at its vn_hosts and listen there: give no port or listen_ip",
                                n.name
                            ),
                        ));
                    }
                    if hs.len() != vns {
                        return Err(err(
                            field("vn_hosts"),
                            format!(
                                "{} VN hosts for node {}'s {vns} VNs: name one per VN",
                                hs.len(),
                                n.name
                            ),
                        ));
                    }
                    let at = hs
                        .iter()
                        .map(|h| {
                            names.vn_host(h).ok_or_else(|| {
                                err(field("vn_hosts"), format!("no [[vn_host]] is named '{h}'"))
                            })
                        })
                        .collect::<Result<Vec<_>>>()?;
                    for (s, &h) in at.iter().enumerate() {
                        vn_hosts[h].serves.push((i, s));
                    }
                    Placement::Hosted(at)
                }
                (None, None) => {
                    return Err(err(
                        field("port"),
                        format!(
                            "node {} needs a port (its VN s listens on port + s), or vn_hosts",
                            n.name
                        ),
                    ));
                }
                (None, Some(0)) => return Err(err(field("port"), "must not be 0".into())),
                (None, Some(port)) => Placement::Here {
                    port,
                    listen_ip: n.listen_ip.unwrap_or_else(|| host.any()),
                },
            };
            nodes.push(NodePlan {
                name: n.name.clone(),
                host,
                vns,
                placement,
                metrics_addr: n.metrics_addr.or(raw.metrics_addr),
                bootstrap: bootstrap.iter().any(|b| b.eq_ignore_ascii_case(&n.name)),
            });
        }
        check_one_vn_per_node(&nodes, &vn_hosts).map_err(|(f, m)| err(f, m))?;
        check_ports(&nodes, &vn_hosts).map_err(|(f, m)| err(f, m))?;
        let total: usize = nodes.iter().map(|n| n.vns).sum();
        if raw.degree == 0 || raw.degree >= total {
            return Err(err(
                "degree".into(),
                format!(
                    "{} neighbours per VN need more VNs than that in the network (it has {total})",
                    raw.degree
                ),
            ));
        }
        let mut learning = raw.learning;
        if let Some(d) = &learning.data_dir {
            let d = crate::config::relative_to(path, d);
            learning.data_dir = Some(std::path::absolute(&d).unwrap_or(d));
        }
        Ok(Plan {
            rounds: raw.rounds,
            degree: raw.degree,
            psk: raw.psk,
            algorithm: raw.algorithm,
            isolation_timeout_s: raw.isolation_timeout_s,
            checkpoints: raw.checkpoints,
            learning,
            timing: raw.timing,
            nodes,
            vn_hosts,
        })
    }

    /// The port VN host `h`'s `j`-th hosted VN listens on (`addresses.rs` says which VN is `j`-th).
    pub fn hosted_port(&self, h: usize, j: usize) -> u16 {
        self.vn_hosts[h].port + 1 + j as u16
    }
}

/// The names of the nodes and VN hosts: each a host-name label (it names a folder, a compose service and a
/// unit instance), none twice.
struct Names {
    vn_hosts: BTreeMap<String, usize>,
}

impl Names {
    fn check(raw: &RawHosts) -> std::result::Result<Self, (String, String)> {
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        let all = raw
            .node
            .iter()
            .enumerate()
            .map(|(i, n)| (format!("node[{i}].name"), &n.name))
            .chain(
                raw.vn_host
                    .iter()
                    .enumerate()
                    .map(|(h, v)| (format!("vn_host[{h}].name"), &v.name)),
            );
        for (field, name) in all {
            check_name(name).map_err(|m| (field.clone(), m))?;
            if let Some(first) = seen.insert(name.to_ascii_lowercase(), field.clone()) {
                return Err((
                    field,
                    format!("'{name}' is also {first}: names are folders, one each"),
                ));
            }
        }
        Ok(Self {
            vn_hosts: raw
                .vn_host
                .iter()
                .enumerate()
                .map(|(h, v)| (v.name.to_ascii_lowercase(), h))
                .collect(),
        })
    }

    fn vn_host(&self, name: &str) -> Option<usize> {
        self.vn_hosts.get(&name.to_ascii_lowercase()).copied()
    }
}

/// A node or VN host name: one host-name label (letters, digits, '-' and '_', starting with a letter or
/// digit), so that it can name a folder, a compose service and a systemd unit instance.
fn check_name(name: &str) -> std::result::Result<(), String> {
    crate::peers::check_host_name(name)?;
    if name.contains('.') {
        return Err(format!(
            "'{name}' is not a host name label: no '.' (it names a folder and a compose service)"
        ));
    }
    if name.starts_with('_') {
        return Err(format!(
            "'{name}' starts with '_': begin with a letter or digit"
        ));
    }
    if RESERVED_NAMES.contains(&name.to_ascii_lowercase().as_str()) {
        return Err(format!(
            "'{name}' is a file the kit writes: choose another name"
        ));
    }
    Ok(())
}

/// Issue 43's rule (`crate::placement`): no VN host runs two VNs of one node.
fn check_one_vn_per_node(
    nodes: &[NodePlan],
    vn_hosts: &[VnHostPlan],
) -> std::result::Result<(), (String, String)> {
    for h in vn_hosts {
        let owners: Vec<usize> = h.serves.iter().map(|&(i, _)| i).collect();
        if let Some((a, b)) = crate::placement::two_of_one_node(&owners) {
            let (i, s) = h.serves[a];
            let t = h.serves[b].1;
            return Err((
                format!("node[{i}].vn_hosts"),
                format!(
                    "node {}'s VN {s} and VN {t} are both placed on VN host {}: {}; give each VN of a node \
                     another VN host",
                    nodes[i].name,
                    h.name,
                    crate::placement::ONE_VN_PER_NODE_PER_HOST
                ),
            ));
        }
    }
    Ok(())
}

/// No port taken twice on one host: the VNs' ports, the VN hosts' links and hosted VNs, the metrics
/// endpoints. A host is its address or name as written (two names of one machine are not known to be one).
fn check_ports<'a>(
    nodes: &'a [NodePlan],
    vn_hosts: &'a [VnHostPlan],
) -> std::result::Result<(), (String, String)> {
    let mut taken: BTreeMap<(&'a Host, u32), String> = BTreeMap::new();
    let mut take = |field: String, h: &'a Host, port: u32, who: String| {
        if port > u32::from(u16::MAX) {
            return Err((field, format!("{who} would need port {port}, beyond 65535")));
        }
        match taken.get(&(h, port)) {
            Some(first) => Err((
                field,
                format!("port {port} on host {h} is taken twice: by {first} and by {who}"),
            )),
            None => {
                taken.insert((h, port), who);
                Ok(())
            }
        }
    };
    for (i, n) in nodes.iter().enumerate() {
        if let Placement::Here { port, .. } = n.placement {
            for s in 0..n.vns {
                let who = format!("node {}'s VN {s}", n.name);
                take(
                    format!("node[{i}].port"),
                    &n.host,
                    u32::from(port) + s as u32,
                    who,
                )?;
            }
        }
        if let Some(m) = n.metrics_addr {
            let who = format!("node {}'s metrics_addr", n.name);
            take(
                format!("node[{i}].metrics_addr"),
                &n.host,
                u32::from(m.port()),
                who,
            )?;
        }
    }
    for (h, v) in vn_hosts.iter().enumerate() {
        let field = format!("vn_host[{h}].port");
        take(
            field.clone(),
            &v.host,
            u32::from(v.port),
            format!("VN host {}'s link", v.name),
        )?;
        for j in 0..v.serves.len() {
            let who = format!("VN host {}'s hosted VN {j}", v.name);
            take(
                field.clone(),
                &v.host,
                u32::from(v.port) + 1 + j as u32,
                who,
            )?;
        }
    }
    Ok(())
}
