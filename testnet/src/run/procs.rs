//! `--mode procs`: the deployment path. Generates what an operator would (one key directory per RN with
//! `node::keys::generate`, one shared peer list, one `node.toml` per RN in the format of `node/src/config.rs`),
//! then launches one `node run --config node-<i>/node.toml` process per RN and reads the `RoundMetrics` JSON
//! line each prints per round on stdout. Everything it writes stays in `<out>/procs-k<k>/`, so the files
//! double as a worked example of a deployment.
//!
//! Children are killed when anything fails, on Ctrl-C, and when this process unwinds (`kill_on_drop`).
//! Peak memory: every child's `VmHWM`, polled while it runs; the summary gives the sum over children (the
//! network's footprint, comparable with inproc's single process) and `extra.peak_rss_bytes_max_process`.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use libp2p::{Multiaddr, PeerId};
use models::data::DatasetSpec;
use models::train::LocalWork;
use node::engine::RoundMetrics;
use node::peers::PeerList;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use super::netns::Netns;
use crate::RunOutput;
use crate::churn::ChurnPlan;
use crate::progress::Progress;
use crate::scenario::{Setting, Settings, data_dir};

/// How long node 0 may take to start listening before the others are launched (they bootstrap from it).
const NODE0_START_TIMEOUT: Duration = Duration::from_secs(60);
/// How often children's peak memory is sampled.
const RSS_POLL: Duration = Duration::from_millis(500);
/// Lines of a failed node's log quoted in the error.
const LOG_TAIL_LINES: usize = 15;

enum ChildEvent {
    Round(RoundMetrics),
    Listening,
    BadLine(String),
    StdoutClosed,
}

/// Runs `setting` as a deployment, in order: the node binary is found, the deployment written into a fresh
/// `procs-k<k>/`, the network namespaces made (with `--netns`), then in one tokio runtime the packet captures
/// start, the VN hosts and the nodes run, the hosts stop, the captures stop, and the attacks are scored on
/// what the run left.
pub fn run(
    s: &Settings,
    setting: Setting,
    out: &Path,
    progress: &mut Progress,
) -> anyhow::Result<RunOutput> {
    let bin = node_binary(s)?;
    let dir = fresh_dir(out, setting)?;
    let d = write_deployment(s, setting, &dir)?;
    let n = d.configs.len();
    // Declared before the runtime, so dropped after it: every child is gone before the namespaces are.
    let netns = namespaces(s, n + d.hosts.configs.len(), progress)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let captures = start_captures(s, &d, netns.as_ref()).await?;
        // VN hosts first: a node sets its VNs up there as it starts (and retries while they come up).
        let host_children =
            super::hosts::launch(&bin, &d.hosts.configs, netns.as_ref().map(|ns| (ns, n))).await?;
        let mut out = launch(
            setting,
            &bin,
            &d.configs,
            &s.churn,
            netns.as_ref(),
            progress,
        )
        .await;
        // The hosts go with the nodes (their logs complete) before the captures stop.
        let host_count = host_children.len();
        for mut c in host_children {
            let _ = c.start_kill();
            let _ = c.wait().await;
        }
        for c in captures {
            c.stop().await;
        }
        if let Ok(o) = &mut out {
            score_attacks(o, s, setting, &d, netns.as_ref(), host_count)?;
        }
        out
    })
}

/// Scores what the run left: with VN hosts the link's figures, with `--observe-timing` the timing attack,
/// always the address-grouping attack, and with `--capture` the packet-level attack.
fn score_attacks(
    o: &mut RunOutput,
    s: &Settings,
    setting: Setting,
    d: &Deployment,
    netns: Option<&Netns>,
    host_count: usize,
) -> anyhow::Result<()> {
    if host_count > 0 {
        link_figures(o, host_count, &d.hosts.host_of);
    }
    if s.observe_timing {
        o.extra.insert(
            "linkage".into(),
            serde_json::to_value(timing_attack(&d.configs, &d.hosts.configs, setting.vns)?)?,
        );
    }
    o.extra
        .insert("address_grouping".into(), address_grouping(s, d)?);
    if s.capture {
        let report = packet_attack(d, netns, setting.vns)?;
        o.extra
            .insert("linkage_packets".into(), serde_json::to_value(report)?);
    }
    Ok(())
}

/// `<out>/procs-k<k>/`, emptied of an earlier run's files.
fn fresh_dir(out: &Path, setting: Setting) -> anyhow::Result<PathBuf> {
    let dir = out.join(format!("procs-k{}", setting.vns));
    if dir.join("peers.toml").is_file() {
        // Our own files from an earlier run into the same --out: keys are never overwritten by `generate`.
        std::fs::remove_dir_all(&dir)
            .with_context(|| format!("removing the previous run's {}", dir.display()))?;
    }
    Ok(dir)
}

/// With `--netns`, one network namespace per process (`count`: the nodes, then the hosts); else none.
fn namespaces(s: &Settings, count: usize, progress: &Progress) -> anyhow::Result<Option<Netns>> {
    Ok(if s.netns {
        let ns = Netns::create(count)?;
        progress.note(&format!(
            "--netns: {} processes in namespaces {}…, addresses {}…",
            ns.count(),
            ns.name(0),
            ns.ip(0)
        ));
        Some(ns)
    } else {
        None
    })
}

/// With `--capture`: under `--netns` a packet capture in every observing process's namespace, into
/// `capture.pcap` in its directory; on loopback one capture of the run's VN ports on `lo`, into
/// [`Deployment::loopback_capture`], that every observer shares.
async fn start_captures(
    s: &Settings,
    d: &Deployment,
    netns: Option<&Netns>,
) -> anyhow::Result<Vec<super::capture::Capture>> {
    let mut captures = Vec::new();
    match (s.capture, netns) {
        (false, _) => {}
        (true, Some(ns)) => {
            for p in d.observers() {
                let file = d.process_dir(p).join("capture.pcap");
                captures.push(super::capture::start(ns, p, &file).await?);
            }
        }
        (true, None) => {
            let mut ports: Vec<u16> = d.listen.keys().map(|a| a.port()).collect();
            ports.sort_unstable();
            captures.push(super::capture::start_loopback(&ports, &d.loopback_capture()).await?);
        }
    }
    Ok(captures)
}

/// With VN hosts: how many, which VN each runs, and the RN↔VN link's bytes per RN per round.
fn link_figures(o: &mut RunOutput, host_count: usize, host_of: &[Vec<usize>]) {
    o.extra.insert("vn_hosts".into(), json!(host_count));
    o.extra.insert("vn_host_of".into(), json!(host_of));
    // RN↔VN traffic: a node hands its chunks to its VNs and takes back what they received,
    // (1 + r)·4d a round at full degree; with the VN↔VN 4·d·r, (2 + 1/r)× D-PSGD's 4·d·r.
    let rows: Vec<u64> = o
        .metrics
        .iter()
        .flat_map(|m| m.iter().filter(|m| !m.absent).map(|m| m.link_bytes))
        .collect();
    let mean = rows.iter().sum::<u64>() as f64 / rows.len().max(1) as f64;
    o.extra
        .insert("link_bytes_per_rn_per_round".into(), json!(mean));
}

/// The address-grouping attack on every VN.
fn address_grouping(s: &Settings, d: &Deployment) -> anyhow::Result<serde_json::Value> {
    let n = d.configs.len();
    // What any peer learns of every VN: the address it announces (Cyclon entries carry it), and,
    // from the arrival logs, the address it really connects from.
    let mut grouping = json!({
        "sibling_linkage_auc": crate::linkage::address_grouping_auc(&d.vn_ips),
        "distinct_ips": d.vn_ips.iter().flatten().collect::<std::collections::BTreeSet<_>>().len(),
        "own_ips": s.own_ips,
        "netns": s.netns,
    });
    if s.observe_timing {
        let logs: Vec<PathBuf> = (0..n + d.hosts.configs.len())
            .map(|p| d.process_dir(p).join("arrivals.log"))
            .collect();
        let refs: Vec<&Path> = logs.iter().map(PathBuf::as_path).collect();
        let (ips, seen) = crate::packets::observed_sources(&refs, &d.owner, n)?;
        grouping["observed"] = json!({
            "sibling_linkage_auc": crate::linkage::address_grouping_auc(&ips),
            "vns_seen": seen,
            "distinct_source_ips": ips.iter().flatten().collect::<std::collections::BTreeSet<_>>().len(),
        });
    }
    Ok(grouping)
}

/// The packet-level attack (`crate::packets`) on every observing process's arrival log and capture (its own
/// under `--netns`, the shared loopback capture otherwise).
fn packet_attack(
    d: &Deployment,
    netns: Option<&Netns>,
    k: usize,
) -> anyhow::Result<crate::packets::PacketLinkage> {
    let files: Vec<(usize, PathBuf, PathBuf)> = d
        .observers()
        .iter()
        .map(|&p| {
            let dir = d.process_dir(p);
            let capture = match netns {
                Some(_) => dir.join("capture.pcap"),
                None => d.loopback_capture(),
            };
            (p, dir.join("arrivals.log"), capture)
        })
        .collect();
    let obs: Vec<crate::packets::ObserverFiles<'_>> = files
        .iter()
        .map(|(p, a, c)| crate::packets::ObserverFiles {
            index: *p,
            ip: netns.map(|ns| ns.ip(*p)),
            vns: d.process_vns[*p].clone(),
            arrivals: a,
            capture: Some(c),
        })
        .collect();
    crate::packets::attack(&obs, &d.listen, &d.owner, k)
}

/// What `write_deployment` wrote, and what the attacks need to know of it.
pub struct Deployment {
    /// Node i's config.
    pub configs: Vec<PathBuf>,
    pub hosts: super::hosts::HostFiles,
    /// `vn_ips[i][s]`: the IP node i's VN s announces.
    pub vn_ips: Vec<Vec<String>>,
    /// Every VN's listen address.
    pub listen: HashMap<SocketAddrV4, PeerId>,
    /// Process p's VNs in the order it numbers them (nodes 0..n, then the hosts; a node whose VNs run at
    /// hosts has none).
    pub process_vns: Vec<Vec<PeerId>>,
    /// Each VN's node: ground truth for the attacks.
    pub owner: HashMap<PeerId, usize>,
}

impl Deployment {
    /// The processes whose VNs observe: the nodes, or the hosts when the VNs run there.
    fn observers(&self) -> Vec<usize> {
        let n = self.configs.len();
        if self.hosts.configs.is_empty() {
            (0..n).collect()
        } else {
            (n..n + self.hosts.configs.len()).collect()
        }
    }

    /// The loopback capture's file (`--capture` without `--netns`): in the deployment's directory.
    fn loopback_capture(&self) -> PathBuf {
        let node0 = self.process_dir(0);
        node0
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default()
            .join("capture-lo.pcap")
    }

    /// Process `p`'s directory (nodes 0..n, then the hosts): its config's.
    fn process_dir(&self, p: usize) -> PathBuf {
        let n = self.configs.len();
        let cfg = if p < n {
            &self.configs[p]
        } else {
            &self.hosts.configs[p - n]
        };
        cfg.parent().map(Path::to_path_buf).unwrap_or_default()
    }
}

/// Writes keys, the peer list, the node configs and (with `--vn-hosts`) the VN hosts' configs; returns the
/// node config paths and the hosts.
pub fn write_deployment(s: &Settings, setting: Setting, dir: &Path) -> anyhow::Result<Deployment> {
    let (n, k) = (s.nodes, setting.vns);
    let ids = generate_keys(dir, n, k)?;
    let (ports, link_ports) = free_ports(n * k, s.vn_hosts, s.learning.seed)?;
    let net = Addresses::new(s, n, k, ports)?;
    // Node 0's VNs are the bootstrap entries, as a real deployment names a few well-known peers.
    let peers = PeerList::from_entries(ids.iter().enumerate().flat_map(|(i, v)| {
        let net = &net;
        v.iter()
            .enumerate()
            .map(move |(s, p)| (*p, (i == 0).then(|| net.addr(i, s))))
    }));
    write(&dir.join("peers.toml"), &peers.to_toml())?;
    let hosts = write_hosts(s, dir, &ids, &net, &link_ports)?;
    let configs = write_node_configs(s, setting, dir, &net, &hosts)?;
    Ok(ground_truth(s, &ids, &net, configs, hosts))
}

/// Generates node i's `k` VN keys into `node-<i>/keys`, for every node; returns their identities.
fn generate_keys(dir: &Path, n: usize, k: usize) -> anyhow::Result<Vec<Vec<PeerId>>> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let keys = node::keys::generate(&dir.join(format!("node-{i}")).join("keys"), k)?;
        ids.push(
            keys.iter()
                .map(|k| k.public().to_peer_id())
                .collect::<Vec<_>>(),
        );
    }
    Ok(ids)
}

/// Free ports on 127.0.0.1: `vns` for the VNs, in a random order seeded by `seed`, and `links` for the VN
/// hosts' links.
fn free_ports(vns: usize, links: usize, seed: u64) -> anyhow::Result<(Vec<u16>, Vec<u16>)> {
    // Free ports: bind them all at once (so none repeats), then release them for the nodes.
    let listeners = (0..vns + links)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()
        .context("finding free ports on 127.0.0.1")?;
    let mut ports: Vec<u16> = listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<std::io::Result<_>>()?;
    drop(listeners);
    let link_ports = ports.split_off(vns);
    // The OS hands out ports in sequence: dealt in order, a node's VNs would get consecutive ports and a
    // peer could group siblings by port (DESIGN §7). Dealt in a seeded random order, ports say nothing.
    rand::seq::SliceRandom::shuffle(
        ports.as_mut_slice(),
        &mut sampling::derive_rng(seed, u64::MAX - 2),
    );
    Ok((ports, link_ports))
}

/// Where every VN runs and the address it listens on and announces.
struct Addresses {
    n: usize,
    k: usize,
    netns: bool,
    own_ips: bool,
    /// With `--vn-hosts`, `host_of[i][s]`: the host that runs node i's VN s.
    host_of: Option<Vec<Vec<usize>>>,
    /// Node i's VN s listens on port `ports[i * k + s]`.
    ports: Vec<u16>,
}

impl Addresses {
    fn new(s: &Settings, n: usize, k: usize, ports: Vec<u16>) -> anyhow::Result<Self> {
        Ok(Self {
            n,
            k,
            netns: s.netns,
            own_ips: s.own_ips,
            host_of: (s.vn_hosts > 0)
                .then(|| super::hosts::deal(n, k, s.vn_hosts, s.learning.seed))
                .transpose()?,
            ports,
        })
    }

    /// The IP node `i`'s VN `vn` listens on.
    fn ip(&self, i: usize, vn: usize) -> String {
        // With --vn-hosts, where each VN runs; with --netns, the address of the namespace it runs in (node i's
        // is namespace i, host h's n + h); with --own-ips, each process's own loopback address.
        match (&self.host_of, self.netns, self.own_ips) {
            (Some(h), true, _) => super::netns::ip(self.n + h[i][vn]).to_string(),
            (None, true, _) => super::netns::ip(i).to_string(),
            (_, false, false) => "127.0.0.1".into(),
            (Some(h), false, true) => own_ip(2, h[i][vn]),
            (None, false, true) => own_ip(1, i),
        }
    }

    /// The address node `i`'s VN `vn` listens on.
    fn addr(&self, i: usize, vn: usize) -> Multiaddr {
        format!(
            "/ip4/{}/tcp/{}",
            self.ip(i, vn),
            self.ports[i * self.k + vn]
        )
        .parse()
        .expect("valid multiaddr")
    }
}

/// With `--vn-hosts`, writes the hosts' configs, host h's link listening on `link_ports[h]`; else there are
/// none, and no node's config has a hosted-VN table.
fn write_hosts(
    s: &Settings,
    dir: &Path,
    ids: &[Vec<PeerId>],
    net: &Addresses,
    link_ports: &[u16],
) -> anyhow::Result<super::hosts::HostFiles> {
    let n = net.n;
    Ok(if let Some(host_of) = &net.host_of {
        let link: Vec<Multiaddr> = (0..s.vn_hosts)
            .map(|h| {
                let ip = match (s.netns, s.own_ips) {
                    (true, _) => super::netns::ip(n + h).to_string(),
                    (false, true) => own_ip(2, h),
                    (false, false) => "127.0.0.1".into(),
                };
                format!("/ip4/{ip}/tcp/{}", link_ports[h])
                    .parse()
                    .expect("valid multiaddr")
            })
            .collect();
        super::hosts::write(
            dir,
            ids,
            host_of,
            &link,
            &|i, vn| net.addr(i, vn),
            s.observe_timing,
        )?
    } else {
        super::hosts::HostFiles {
            configs: Vec::new(),
            hosted_tables: vec![String::new(); n],
            host_of: Vec::new(),
        }
    })
}

/// A TOML string holding `v`.
fn quote(v: &str) -> String {
    toml::Value::String(v.into()).to_string()
}

/// The `[learning]` table's fields that every node shares (its `index` is its own).
fn learning_table(s: &Settings, n: usize) -> String {
    let l = &s.learning;
    let dataset = match &l.dataset {
        DatasetSpec::Synthetic(_) => l.dataset.to_string(),
        other => other.name().to_string(),
    };
    let mut learning = format!("dataset = {}\n", quote(&dataset));
    if let Some(d) = data_dir(&l.dataset) {
        let abs = std::path::absolute(d).unwrap_or_else(|_| d.to_path_buf());
        learning += &format!("data_dir = {}\n", quote(&abs.display().to_string()));
    }
    if let Some(m) = &l.model {
        learning += &format!("model = {}\n", quote(&m.to_string()));
    }
    learning += &format!(
        "partition = {}\nnodes = {n}\nlr = {}\nbatch = {}\nseed = {}\n",
        quote(&l.partition.to_string()),
        l.train.lr,
        l.train.batch_size,
        l.seed
    );
    learning += &match l.train.work {
        LocalWork::Epochs(e) => format!("local_epochs = {e}\n"),
        LocalWork::Steps(st) => format!("local_steps = {st}\n"),
    };
    if let Some(b) = l.train.clip {
        learning += &format!("clip = {b}\n");
    }
    if let Some(m) = l.max_test_samples {
        learning += &format!("max_test_samples = {m}\n");
    }
    learning
}

/// Writes `node-<i>/node.toml` for every node, each checked with the node's own parser; returns their paths.
fn write_node_configs(
    s: &Settings,
    setting: Setting,
    dir: &Path,
    net: &Addresses,
    hosts: &super::hosts::HostFiles,
) -> anyhow::Result<Vec<PathBuf>> {
    let (n, k) = (net.n, net.k);
    let learning = learning_table(s, n);
    let t = &s.timing;
    // Every field, so a node runs with exactly the testnet's timing (not a default for what is left out).
    let timing = toml::to_string(t)?;
    let values = toml::to_string(&s.values)?;
    let mut configs = Vec::with_capacity(n);
    for i in 0..n {
        let listen: Vec<String> = (0..k).map(|s| quote(&net.addr(i, s).to_string())).collect();
        let text = format!(
            "# Generated by `testnet --mode procs`: node {i} of {n}. Run with `node run --config node.toml`.\n\
             key_dir = \"keys\"\nvns = {k}\nlisten = [{}]\npeer_list = \"../peers.toml\"\nalgorithm = \"{}\"\ndropout = {}\ndegree = {}\nrounds = {}\n\
             metrics = \"metrics.jsonl\"\n{}{}\n[learning]\nindex = {i}\n{}{learning}\n[timing]\n{timing}\n[values]\n{values}{}",
            listen.join(", "),
            setting.algo,
            s.dropout,
            s.degree,
            s.rounds,
            // A node that may be killed checkpoints every round, so that it can be restarted with --resume.
            if s.churn.kill.is_some() {
                "checkpoints = \"checkpoints\"\n"
            } else {
                ""
            },
            // Every node is a network observer too: it logs what reaches its VNs, for the timing attack.
            if s.observe_timing {
                "arrivals = \"arrivals.log\"\n"
            } else {
                ""
            },
            s.device_of(i)
                .map(|d| format!("device = {}\n", quote(&d.to_string())))
                .unwrap_or_default(),
            hosts.hosted_tables[i],
        );
        let p = dir.join(format!("node-{i}")).join("node.toml");
        write(&p, &text)?;
        // Check our own output with the node's parser: a mistake here should fail now, not in n processes.
        node::config::NodeConfig::parse(&p, &text)
            .map_err(|e| anyhow::anyhow!("generated config is invalid: {e}"))?;
        configs.push(p);
    }
    Ok(configs)
}

/// The deployment as the attacks see it: the configs and hosts written, with what each VN announces,
/// where it listens, which process runs it and which node owns it.
fn ground_truth(
    s: &Settings,
    ids: &[Vec<PeerId>],
    net: &Addresses,
    configs: Vec<PathBuf>,
    hosts: super::hosts::HostFiles,
) -> Deployment {
    let (n, k) = (net.n, net.k);
    let vn_ips = (0..n)
        .map(|i| (0..k).map(|vn| net.ip(i, vn)).collect())
        .collect();
    let listen = (0..n)
        .flat_map(|i| (0..k).map(move |s| (i, s)))
        .filter_map(|(i, s)| {
            crate::packets::socket_of(&net.addr(i, s).to_string()).map(|a| (a, ids[i][s]))
        })
        .collect();
    // A node runs its own VNs, or none (they are at the hosts); a host numbers its VNs in config order.
    let mut process_vns: Vec<Vec<PeerId>> = if net.host_of.is_some() {
        vec![Vec::new(); n]
    } else {
        ids.to_vec()
    };
    if let Some(h) = &net.host_of {
        for host in 0..s.vn_hosts {
            process_vns.push(
                (0..n)
                    .flat_map(|i| (0..k).map(move |s| (i, s)))
                    .filter(|&(i, s)| h[i][s] == host)
                    .map(|(i, s)| ids[i][s])
                    .collect(),
            );
        }
    }
    let owner = ids
        .iter()
        .enumerate()
        .flat_map(|(i, v)| v.iter().map(move |p| (*p, i)))
        .collect();
    Deployment {
        configs,
        hosts,
        vn_ips,
        listen,
        process_vns,
        owner,
    }
}

/// The network observer's timing attack (`testnet/src/linkage.rs`) on the arrival logs every node process
/// wrote (`arrivals = "arrivals.log"`): the same scoring as in sim and inproc, on the times each node's
/// libp2p shell saw. With VN hosts the VNs run there, and each host is an observer of the VNs it runs (the
/// nodes then see no arrivals). Ground truth (which VN is whose) comes from the deployment's key directories.
fn timing_attack(
    configs: &[PathBuf],
    hosts: &[PathBuf],
    k: usize,
) -> anyhow::Result<crate::linkage::LinkageReport> {
    use node::observe::Observer;
    let mut owner = std::collections::HashMap::new();
    for (i, cfg) in configs.iter().enumerate() {
        let dir = cfg.with_file_name("keys");
        for key in node::keys::load(&dir, k)? {
            owner.insert(key.public().to_peer_id(), i);
        }
    }
    let recorder =
        crate::linkage::LinkageRecorder::new(k, move |p: &libp2p::PeerId| owner.get(p).copied());
    for (i, cfg) in configs.iter().chain(hosts).enumerate() {
        let path = cfg.with_file_name("arrivals.log");
        if !path.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        for (at, vn, peer, what) in text
            .lines()
            .filter_map(node::arrival_log::ArrivalLog::parse)
        {
            recorder.arrival(i, vn, &peer, at, what);
        }
    }
    Ok(recorder.finish())
}

/// Process `i`'s own loopback address in block `block` (1: nodes, 2: VN hosts): Linux routes all of
/// 127.0.0.0/8 to the loopback interface, so every process can listen on its own IP without any setup.
fn own_ip(block: u8, i: usize) -> String {
    format!("127.{block}.{}.{}", i / 250, i % 250 + 1)
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Runs the deployment's node processes, in order: they are launched (node 0 first, listening before the
/// others start), then watched — rounds, failures, the churn scenario's kills, pauses and restarts, memory
/// samples, Ctrl-C — until every process has ended, then waited for; the report follows.
async fn launch(
    setting: Setting,
    bin: &Path,
    configs: &[PathBuf],
    churn: &ChurnPlan,
    netns: Option<&Netns>,
    progress: &mut Progress,
) -> anyhow::Result<RunOutput> {
    // Wall-clock time of the run, reported beside the rounds; no engine reads it.
    #[allow(clippy::disallowed_methods)]
    let t0 = Instant::now();
    let (tx, mut rx) = mpsc::channel::<(usize, u32, ChildEvent)>(4096);
    let nodes = Nodes::start(setting, bin, configs, netns, &tx, &mut rx).await?;
    // Kept (not dropped) while restarts may come: a restarted node sends on a clone.
    let tx = churn.restart_after.is_some().then_some(tx);
    let mut run = Supervisor::new(nodes, churn, tx);
    run.watch(&mut rx, progress).await?;
    run.nodes.wait_all().await;
    run.report(t0, progress)
}

/// What a node process sends the harness, tagged with the node and the process's life.
type ChildMsg = (usize, u32, ChildEvent);

/// The node processes of a run and what the harness keeps of each: the child, its pid (for signals and peak
/// memory), its log file, its life (a restart starts the next one; events of an earlier life are stale),
/// whether its stdout has closed, and its peak memory.
struct Nodes<'a> {
    bin: &'a Path,
    configs: &'a [PathBuf],
    netns: Option<&'a Netns>,
    children: Vec<Child>,
    pids: Vec<Option<u32>>,
    logs: Vec<PathBuf>,
    life: Vec<u32>,
    closed: Vec<bool>,
    peaks: Vec<u64>,
}

impl<'a> Nodes<'a> {
    /// Launches one `node run --config` process per config, in order, each logging to `node.log` beside its
    /// config and sending its events on `tx`.
    async fn start(
        setting: Setting,
        bin: &'a Path,
        configs: &'a [PathBuf],
        netns: Option<&'a Netns>,
        tx: &mpsc::Sender<ChildMsg>,
        rx: &mut mpsc::Receiver<ChildMsg>,
    ) -> anyhow::Result<Self> {
        let n = configs.len();
        let mut children: Vec<Child> = Vec::with_capacity(n);
        let mut logs = Vec::with_capacity(n);
        for (i, cfg) in configs.iter().enumerate() {
            let log = cfg.with_file_name("node.log");
            let child =
                spawn_node(bin, cfg, &log, i, 0, false, netns, tx.clone()).with_context(|| {
                    format!("starting {} run --config {}", bin.display(), cfg.display())
                })?;
            children.push(child);
            logs.push(log);
            if i == 0 {
                // The others bootstrap from node 0: wait until all its VNs listen.
                node0_listening(setting.vns, &mut children[0], &logs[0], rx).await?;
            }
        }
        Ok(Self {
            bin,
            configs,
            netns,
            pids: children.iter().map(|c| c.id()).collect(),
            children,
            logs,
            life: vec![0u32; n],
            closed: vec![false; n],
            peaks: vec![0u64; n],
        })
    }

    /// Whether every node's stdout has closed: no process is left to hear from.
    fn all_closed(&self) -> bool {
        self.closed.iter().all(|c| *c)
    }

    /// Samples every running child's peak memory into `peaks`.
    fn sample(&mut self) {
        for (p, peak) in self.pids.iter().zip(self.peaks.iter_mut()) {
            if let Some(v) = p.and_then(crate::rss::peak_rss_of) {
                *peak = (*peak).max(v);
            }
        }
    }

    /// Starts node `i` again with `--resume`, in its next life, logging to `node.<life>.log`.
    fn restart(&mut self, i: usize, tx: mpsc::Sender<ChildMsg>) -> anyhow::Result<()> {
        self.life[i] += 1;
        let log_path = self.configs[i].with_file_name(format!("node.{}.log", self.life[i]));
        self.children[i] = spawn_node(
            self.bin,
            &self.configs[i],
            &log_path,
            i,
            self.life[i],
            true,
            self.netns,
            tx,
        )
        .with_context(|| format!("restarting node {i}"))?;
        self.pids[i] = self.children[i].id();
        self.logs[i] = log_path;
        self.closed[i] = false;
        Ok(())
    }

    /// Sends every child SIGKILL.
    fn kill_all(&mut self) {
        for c in self.children.iter_mut() {
            let _ = c.start_kill();
        }
    }

    /// Sends every child SIGCONT, then SIGKILL.
    fn continue_and_kill_all(&mut self) {
        for (c, pid) in self.children.iter_mut().zip(&self.pids) {
            // A stopped process would not die of SIGKILL until continued? It does; continue it anyway
            // so that its pipes close in order.
            signal(*pid, "-CONT");
            let _ = c.start_kill();
        }
    }

    /// Waits for every child to exit.
    async fn wait_all(&mut self) {
        for c in self.children.iter_mut() {
            let _ = c.wait().await;
        }
    }
}

/// Waits until node 0's `vns` VNs all listen; fails, quoting its log, if it exits first or takes longer
/// than [`NODE0_START_TIMEOUT`].
async fn node0_listening(
    vns: usize,
    child: &mut Child,
    log: &Path,
    rx: &mut mpsc::Receiver<ChildMsg>,
) -> anyhow::Result<()> {
    let mut listening = 0;
    // A real deadline for child processes to start listening.
    #[allow(clippy::disallowed_methods)]
    let deadline = tokio::time::Instant::now() + NODE0_START_TIMEOUT;
    while listening < vns {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some((0, _, ChildEvent::Listening))) => listening += 1,
            Ok(Some((0, _, ChildEvent::StdoutClosed))) | Ok(None) => {
                let status = child.wait().await.ok();
                bail!(
                    "node 0 exited before listening ({status:?}):\n{}",
                    tail(log)
                );
            }
            Ok(Some(_)) => {}
            Err(_) => bail!(
                "node 0 did not listen within {NODE0_START_TIMEOUT:?}:\n{}",
                tail(log)
            ),
        }
    }
    Ok(())
}

/// The running network, watched: the node processes, the rounds they report, the errors, and what the churn
/// scenario does to them and when.
struct Supervisor<'a> {
    nodes: Nodes<'a>,
    churn: &'a ChurnPlan,
    /// Present while restarts may come: each restarted node sends on a clone.
    tx: Option<mpsc::Sender<ChildMsg>>,
    metrics: Vec<Vec<RoundMetrics>>,
    errors: Vec<String>,
    /// Stopped by Ctrl-C, or by a node's failure: the churn scenario does nothing more.
    interrupted: bool,
    /// What the churn scenario did to each node, and when.
    log: ChurnLog,
    /// When each killed node is to be restarted.
    restart_due: Vec<Option<tokio::time::Instant>>,
    /// The newest round any node reported: where the network is.
    newest_round: u64,
}

impl<'a> Supervisor<'a> {
    fn new(nodes: Nodes<'a>, churn: &'a ChurnPlan, tx: Option<mpsc::Sender<ChildMsg>>) -> Self {
        let n = nodes.children.len();
        Self {
            nodes,
            churn,
            tx,
            metrics: vec![Vec::new(); n],
            errors: Vec::new(),
            interrupted: false,
            log: ChurnLog::new(n),
            restart_due: vec![None; n],
            newest_round: 0,
        }
    }

    /// Handles the nodes' events, due restarts, memory samples and Ctrl-C until every process has ended
    /// and no restart is due.
    async fn watch(
        &mut self,
        rx: &mut mpsc::Receiver<ChildMsg>,
        progress: &mut Progress,
    ) -> anyhow::Result<()> {
        let mut poll = tokio::time::interval(RSS_POLL);
        let ctrl_c = tokio::signal::ctrl_c();
        tokio::pin!(ctrl_c);
        while !self.nodes.all_closed() || self.restart_due.iter().any(Option::is_some) {
            let next_restart = self.restart_due.iter().flatten().min().copied();
            tokio::select! {
                ev = rx.recv() => {
                    // When the harness saw it: the churn report's wall-clock timings (no engine reads them).
                    #[allow(clippy::disallowed_methods)]
                    let seen = tokio::time::Instant::now();
                    match ev {
                        None => break,
                        Some((i, l, _)) if l != self.nodes.life[i] => {}
                        Some((i, _, ev)) => self.on_event(i, ev, seen, progress).await?,
                    }
                },
                _ = async { tokio::time::sleep_until(next_restart.expect("guarded")).await }, if next_restart.is_some() => {
                    self.restart_when_due(progress)?;
                }
                _ = poll.tick() => self.nodes.sample(),
                _ = &mut ctrl_c, if !self.interrupted => self.interrupt(progress),
            }
        }
        Ok(())
    }

    /// One event of node `i`'s current life, seen at `seen`.
    async fn on_event(
        &mut self,
        i: usize,
        ev: ChildEvent,
        seen: tokio::time::Instant,
        progress: &mut Progress,
    ) -> anyhow::Result<()> {
        match ev {
            ChildEvent::Round(m) => self.on_round(i, m, seen, progress),
            ChildEvent::BadLine(l) => progress.note(&format!("node {i}: unexpected output: {l}")),
            ChildEvent::Listening => self.log.on_listening(i, seen),
            ChildEvent::StdoutClosed => self.on_closed(i, progress).await?,
        }
        Ok(())
    }

    /// Records node `i`'s round; unless interrupted, the churn scenario then acts on the round reached.
    fn on_round(
        &mut self,
        i: usize,
        m: RoundMetrics,
        seen: tokio::time::Instant,
        progress: &mut Progress,
    ) {
        progress.on_round(i, &m);
        self.newest_round = self.newest_round.max(m.round.get());
        let round = m.round.get();
        self.log.on_round(i, round, m.copies_received, seen);
        self.metrics[i].push(m);
        if self.interrupted {
            return;
        }
        self.kill_when_due(round, progress);
        self.pause_when_due(round, progress);
        self.continue_when_due(i, round, seen, progress);
    }

    /// `--kill`: the first time a node reports the round, SIGKILLs the victims; with `--restart-after`,
    /// schedules their restarts.
    fn kill_when_due(&mut self, round: u64, progress: &Progress) {
        let Some(k) = self
            .churn
            .kill
            .filter(|k| round >= k.round && self.log.killed.is_empty())
        else {
            return;
        };
        let victims = ChurnPlan::victims(k.fraction, self.nodes.children.len());
        progress.note(&format!(
            "churn: SIGKILL nodes {victims:?} after round {round}"
        ));
        for &v in &victims {
            let _ = self.nodes.children[v].start_kill();
            self.log.killed_at[v] = Some(round);
            if let Some(after) = self.churn.restart_after {
                // A real delay before restarting real processes.
                #[allow(clippy::disallowed_methods)]
                let at = tokio::time::Instant::now() + after;
                self.restart_due[v] = Some(at);
            }
        }
        self.log.killed = victims;
    }

    /// `--pause`: the first time a node reports the round, SIGSTOPs the victims.
    fn pause_when_due(&mut self, round: u64, progress: &Progress) {
        let Some(p) = self
            .churn
            .pause
            .filter(|p| round >= p.round && self.log.paused.is_empty())
        else {
            return;
        };
        let victims = ChurnPlan::victims(p.fraction, self.nodes.children.len());
        progress.note(&format!(
            "churn: SIGSTOP nodes {victims:?} after round {round}"
        ));
        for &v in &victims {
            signal(self.nodes.pids[v], "-STOP");
            self.log.paused_at[v] = Some(round);
        }
        self.log.paused = victims;
    }

    /// `--pause`: once a node that is not paused reports the pause's last round, SIGCONTs the paused nodes
    /// (each once).
    fn continue_when_due(
        &mut self,
        i: usize,
        round: u64,
        seen: tokio::time::Instant,
        progress: &Progress,
    ) {
        if let Some(p) = self.churn.pause
            && !self.log.paused.contains(&i)
            && round >= p.round + p.rounds
        {
            for &v in &self.log.paused {
                if self.log.continued_at[v].is_none() {
                    progress.note(&format!("churn: SIGCONT node {v} after round {round}"));
                    signal(self.nodes.pids[v], "-CONT");
                    self.log.continued_at[v] = Some(round);
                    self.log.continued_time[v] = Some(seen);
                }
            }
        }
    }

    /// Node `i`'s stdout closed: waits for its process. A failure that neither the churn scenario nor
    /// Ctrl-C caused is an error of the run.
    async fn on_closed(&mut self, i: usize, progress: &Progress) -> anyhow::Result<()> {
        self.nodes.closed[i] = true;
        self.nodes.sample();
        let status = self.nodes.children[i].wait().await?;
        let expected = self.log.killed_at[i].is_some() && self.log.restarted_at[i].is_none();
        if !status.success() && !self.interrupted && !expected {
            let log = &self.nodes.logs[i];
            let msg = format!(
                "node {i} failed ({status}); the end of {}:\n{}",
                log.display(),
                tail(log)
            );
            progress.note(&msg);
            self.errors.push(msg);
            // One node down makes the others' rounds slow and meaningless: stop the network.
            self.nodes.kill_all();
            self.restart_due.iter_mut().for_each(|d| *d = None);
            self.interrupted = true;
        }
        Ok(())
    }

    /// Restarts every node whose time has come, resuming from its checkpoints.
    fn restart_when_due(&mut self, progress: &Progress) -> anyhow::Result<()> {
        // The harness's wall clock, against the restart times it set.
        #[allow(clippy::disallowed_methods)]
        let now = tokio::time::Instant::now();
        for i in 0..self.restart_due.len() {
            if self.restart_due[i].is_some_and(|d| d <= now) {
                self.restart_due[i] = None;
                let tx = self.tx.clone().expect("kept for restarts");
                progress.note(&format!(
                    "churn: restarting node {i} with --resume (network at round {})",
                    self.newest_round
                ));
                self.nodes.restart(i, tx)?;
                self.log.restarted_at[i] = Some(self.newest_round);
                self.log.restarted_time[i] = Some(now);
            }
        }
        Ok(())
    }

    /// Ctrl-C: stops every node process (and every restart to come).
    fn interrupt(&mut self, progress: &Progress) {
        self.interrupted = true;
        progress.note(
            "interrupted: stopping every node process; the report covers the rounds completed",
        );
        self.restart_due.iter_mut().for_each(|d| *d = None);
        self.nodes.continue_and_kill_all();
    }

    /// The run's output once every process has ended: the rounds, peak memory, each node's final metric,
    /// where the deployment is, and the churn scenario's outcome; fails if a node failed.
    fn report(self, t0: Instant, progress: &Progress) -> anyhow::Result<RunOutput> {
        let Self {
            nodes,
            churn,
            metrics,
            errors,
            interrupted,
            log,
            ..
        } = self;
        let mut extra = BTreeMap::new();
        extra.insert(
            "peak_rss_bytes_max_process".into(),
            json!(nodes.peaks.iter().max()),
        );
        extra.insert("peak_rss_is".into(), json!("sum over node processes"));
        extra.insert("node_binary".into(), json!(nodes.bin.display().to_string()));
        // Each node's own last metric (the summary's final metric is their mean): churn runs compare the
        // victims with the others, and with the same nodes of a clean run.
        extra.insert(
            "final_metric_per_node".into(),
            json!(
                metrics
                    .iter()
                    .map(|m| m.last().map(|m| m.test_metric))
                    .collect::<Vec<_>>()
            ),
        );
        extra.insert(
            "deployment_dir".into(),
            json!(
                nodes.configs[0]
                    .parent()
                    .and_then(Path::parent)
                    .map(|p| p.display().to_string())
            ),
        );
        if !churn.is_empty() {
            let report = log.report(&metrics, nodes.configs);
            progress.note(&format!("churn: {report}"));
            extra.insert("churn".into(), report);
        }
        if !errors.is_empty() {
            bail!("{}", errors.join("\n"));
        }
        Ok(RunOutput {
            metrics,
            wall_secs: t0.elapsed().as_secs_f64(),
            peak_rss_bytes: Some(nodes.peaks.iter().sum()),
            extra,
            errors,
            interrupted,
            audit: None,
        })
    }
}

/// Sends a signal (`-STOP`, `-CONT`) to a child with `kill(1)`: the harness needs no signal crate for two
/// signals, and a failure (the process is gone) only means there is nothing left to pause.
fn signal(pid: Option<u32>, sig: &str) {
    if let Some(pid) = pid {
        let _ = std::process::Command::new("kill")
            .arg(sig)
            .arg(pid.to_string())
            .status();
    }
}

/// What the churn scenario did, node by node (rounds are the network's newest round reported at the time).
struct ChurnLog {
    killed: Vec<usize>,
    killed_at: Vec<Option<u64>>,
    restarted_at: Vec<Option<u64>>,
    /// When the harness restarted each killed node (spawned `node run --resume`), and when the restarted
    /// process first said a VN listens (data loaded, checkpoint restored, Swarm bound) with the others'
    /// newest round then.
    restarted_time: Vec<Option<tokio::time::Instant>>,
    listening: Vec<Option<(tokio::time::Instant, u64)>>,
    paused: Vec<usize>,
    paused_at: Vec<Option<u64>>,
    continued_at: Vec<Option<u64>>,
    continued_time: Vec<Option<tokio::time::Instant>>,
    /// Each node's last round reported.
    last: Vec<Option<u64>>,
    /// The newest round any node that is not a victim reported: where the network is.
    others_newest: u64,
    /// For each victim, per round it reported: how many rounds the others' newest was ahead of it then, the
    /// copies it received, and when the harness saw the report.
    lags: Vec<Vec<(u64, i64, u32, tokio::time::Instant)>>,
}

/// When a victim came back, counted from an event (the restart command, the restarted process listening,
/// SIGCONT): seconds and the network's rounds (the others' newest reported round) since then.
fn since(
    from: Option<(tokio::time::Instant, u64)>,
    to: Option<(tokio::time::Instant, u64)>,
) -> serde_json::Value {
    match (from, to) {
        (Some((t0, r0)), Some((t1, r1))) => json!({
            "secs": t1.saturating_duration_since(t0).as_secs_f64(),
            "network_rounds": r1 as i64 - r0 as i64,
        }),
        _ => serde_json::Value::Null,
    }
}

impl ChurnLog {
    fn new(n: usize) -> Self {
        Self {
            killed: Vec::new(),
            killed_at: vec![None; n],
            restarted_at: vec![None; n],
            restarted_time: vec![None; n],
            listening: vec![None; n],
            paused: Vec::new(),
            paused_at: vec![None; n],
            continued_at: vec![None; n],
            continued_time: vec![None; n],
            last: vec![None; n],
            others_newest: 0,
            lags: vec![Vec::new(); n],
        }
    }

    fn is_victim(&self, i: usize) -> bool {
        self.killed.contains(&i) || self.paused.contains(&i)
    }

    fn on_round(&mut self, i: usize, round: u64, copies: u32, at: tokio::time::Instant) {
        self.last[i] = Some(round);
        if self.is_victim(i) {
            self.lags[i].push((round, self.others_newest as i64 - round as i64, copies, at));
        } else {
            self.others_newest = self.others_newest.max(round);
        }
    }

    /// A VN of node `i` listens: the first time after a restart, the process is up.
    fn on_listening(&mut self, i: usize, at: tokio::time::Instant) {
        if self.restarted_time[i].is_some() && self.listening[i].is_none() {
            self.listening[i] = Some((at, self.others_newest));
        }
    }

    /// The first round a victim reported after the network's round `from` in step with the others (at
    /// most one round behind the newest they reported) and with copies received: it is back in the network.
    /// With when it was seen and the others' newest round then.
    fn rejoined(&self, i: usize, from: u64) -> Option<(u64, tokio::time::Instant, u64)> {
        self.lags[i]
            .iter()
            .find(|(r, lag, copies, _)| *r > from && *lag <= 1 && *copies > 0)
            .map(|(r, lag, _, at)| (*r, *at, (*r as i64 + lag) as u64))
    }

    /// The first round a victim reported after the network's round `from`, when it was seen and the
    /// others' newest round then.
    fn first_after(&self, i: usize, from: u64) -> Option<(tokio::time::Instant, u64)> {
        self.lags[i]
            .iter()
            .find(|(r, ..)| *r > from)
            .map(|(r, lag, _, at)| (*at, (*r as i64 + lag) as u64))
    }

    /// The scenario's outcome: for each victim when it was hit, when it came back, the first round after
    /// that in which it received copies again (rejoined) — as its own round and as the time and the
    /// network's rounds since the restart command, since its process listened, or since SIGCONT — its
    /// last round and its final metric; for the others the rounds they completed, their slowest round and
    /// their final metric; for killed nodes, the metrics file checked against what the node printed (lines
    /// lost, lines duplicated).
    fn report(&self, metrics: &[Vec<RoundMetrics>], configs: &[PathBuf]) -> serde_json::Value {
        let victims: Vec<serde_json::Value> = self
            .killed
            .iter()
            .map(|&i| self.killed_report(i, metrics, configs))
            .collect();
        let paused: Vec<serde_json::Value> = self
            .paused
            .iter()
            .map(|&i| self.paused_report(i, metrics))
            .collect();
        let others: Vec<serde_json::Value> = (0..metrics.len())
            .filter(|i| !self.killed.contains(i) && !self.paused.contains(i))
            .map(|i| other_report(i, metrics))
            .collect();
        json!({ "killed": victims, "paused": paused, "others": others })
    }

    /// Killed node `i`: when it was killed and restarted, how it came back, and its metrics file checked
    /// against what it printed.
    fn killed_report(
        &self,
        i: usize,
        metrics: &[Vec<RoundMetrics>],
        configs: &[PathBuf],
    ) -> serde_json::Value {
        let back = self.restarted_at[i];
        let file = file_rounds(&configs[i].with_file_name("metrics.jsonl"), i);
        let printed: Vec<u64> = metrics[i].iter().map(|m| m.round.get()).collect();
        let lost = printed.iter().filter(|r| !file.contains(r)).count();
        let mut dedup = file.clone();
        dedup.sort_unstable();
        dedup.dedup();
        let rejoin = back.and_then(|b| self.rejoined(i, b));
        let restart = self.restarted_time[i].zip(back);
        let first = back.and_then(|b| self.first_after(i, b));
        let in_step = rejoin.map(|(_, at, net)| (at, net));
        json!({
            "node": i,
            "killed_after_round": self.killed_at[i],
            "restarted_when_network_at": back,
            "first_round_after_restart": back.and_then(|_| metrics[i].iter().find(|m| m.resumed).map(|m| m.round.get())),
            "skipped_rounds": metrics[i].iter().map(|m| m.skipped_rounds).sum::<u64>(),
            "rounds_behind_the_others_per_round": self.lags[i].iter().map(|(r, lag, ..)| [*r as i64, *lag]).collect::<Vec<_>>(),
            "rejoined_at_round": rejoin.map(|(r, ..)| r),
            "rejoin_rounds": back.zip(rejoin).map(|(b, (r, ..))| r.saturating_sub(b)),
            "restart": {
                "listening_since_restart": since(restart, self.listening[i]),
                "first_round_reported_since_restart": since(restart, first),
                "first_round_reported_since_listening": since(self.listening[i], first),
                "in_step_since_restart": since(restart, in_step),
                "in_step_since_listening": since(self.listening[i], in_step),
            },
            "last_round": printed.last(),
            "final_metric": metrics[i].last().map(|m| m.test_metric),
            "metrics_file_lines": file.len(),
            "metrics_lines_lost": lost,
            "metrics_lines_duplicated": file.len() - dedup.len(),
        })
    }

    /// Paused node `i`: when it was paused and continued, and how it caught up.
    fn paused_report(&self, i: usize, metrics: &[Vec<RoundMetrics>]) -> serde_json::Value {
        let cont = self.continued_at[i];
        let rejoin = cont.and_then(|c| self.rejoined(i, c));
        json!({
            "node": i,
            "paused_after_round": self.paused_at[i],
            "continued_when_network_at": cont,
            "skipped_rounds": metrics[i].iter().map(|m| m.skipped_rounds).sum::<u64>(),
            "rounds_behind_the_others_per_round": self.lags[i].iter().map(|(r, lag, ..)| [*r as i64, *lag]).collect::<Vec<_>>(),
            "rejoined_at_round": rejoin.map(|(r, ..)| r),
            "rejoin_rounds": cont.zip(rejoin).map(|(c, (r, ..))| r.saturating_sub(c)),
            "in_step_since_continue": since(self.continued_time[i].zip(cont), rejoin.map(|(_, at, net)| (at, net))),
            "last_round": metrics[i].last().map(|m| m.round.get()),
            "final_metric": metrics[i].last().map(|m| m.test_metric),
        })
    }
}

/// Node `i`, neither killed nor paused: the rounds it completed or skipped, its slowest round and exchange,
/// and its final metric.
fn other_report(i: usize, metrics: &[Vec<RoundMetrics>]) -> serde_json::Value {
    let slowest = metrics[i].iter().map(|m| m.round_secs).fold(0.0, f64::max);
    let exchange = metrics[i]
        .iter()
        .map(|m| m.exchange_secs)
        .fold(0.0, f64::max);
    json!({
        "node": i,
        "rounds_completed": metrics[i].len(),
        "skipped_rounds": metrics[i].iter().map(|m| m.skipped_rounds).sum::<u64>(),
        "slowest_round_secs": slowest,
        "slowest_exchange_secs": exchange,
        "final_metric": metrics[i].last().map(|m| m.test_metric),
    })
}

/// The rounds node `node` has lines for in a metrics file (in file order, repeats kept).
fn file_rounds(path: &Path, node: usize) -> Vec<u64> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["node"].as_u64() == Some(node as u64))
        .filter_map(|v| v["round"].as_u64())
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn spawn_node(
    bin: &Path,
    cfg: &Path,
    log: &Path,
    i: usize,
    life: u32,
    resume: bool,
    netns: Option<&Netns>,
    tx: mpsc::Sender<(usize, u32, ChildEvent)>,
) -> anyhow::Result<Child> {
    // With --netns, node i runs in namespace i.
    let mut cmd = match netns {
        Some(ns) => ns.command(i, bin),
        None => Command::new(bin),
    };
    cmd.arg("run").arg("--config").arg(cfg);
    if resume {
        cmd.arg("--resume");
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("NO_COLOR", "1")
        .kill_on_drop(true);
    if std::env::var_os("RUST_LOG").is_none() {
        cmd.env("RUST_LOG", "info,libp2p=warn");
    }
    let mut child = cmd.spawn()?;
    let stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    let mut file =
        std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let etx = tx.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(l)) = lines.next_line().await {
            let _ = writeln!(file, "{l}");
            if l.contains("virtual node listening") {
                let _ = etx.send((i, life, ChildEvent::Listening)).await;
            }
        }
    });
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(l)) = lines.next_line().await {
            let ev = match serde_json::from_str::<RoundMetrics>(&l) {
                Ok(m) => ChildEvent::Round(m),
                Err(_) => ChildEvent::BadLine(l),
            };
            if tx.send((i, life, ev)).await.is_err() {
                return;
            }
        }
        let _ = tx.send((i, life, ChildEvent::StdoutClosed)).await;
    });
    Ok(child)
}

/// The last lines of a node's log.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..]
        .iter()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `node` binary: `--node-bin`, else next to this executable (or one directory up, for test binaries in
/// `target/<profile>/deps`), else built with `cargo build -p node` in the same profile.
pub fn node_binary(s: &Settings) -> anyhow::Result<PathBuf> {
    if let Some(p) = &s.node_bin {
        if p.is_file() {
            return Ok(p.clone());
        }
        bail!("--node-bin {}: no such file", p.display());
    }
    let exe = std::env::current_exe().context("locating this executable")?;
    let name = format!("node{}", std::env::consts::EXE_SUFFIX);
    let candidates = |exe: &Path| -> Vec<PathBuf> {
        let dir = exe.parent().unwrap_or(Path::new("."));
        vec![dir.join(&name), dir.parent().unwrap_or(dir).join(&name)]
    };
    if let Some(p) = candidates(&exe).into_iter().find(|p| p.is_file()) {
        return Ok(p);
    }
    let release = !cfg!(debug_assertions);
    let command = format!(
        "cargo build{} -p node",
        if release { " --release" } else { "" }
    );
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf);
    let Some(ws) = workspace.filter(|w| w.join("Cargo.toml").is_file()) else {
        bail!(
            "the node binary is not next to {} and this is not a source checkout: run `{command}` and pass --node-bin PATH",
            exe.display()
        );
    };
    eprintln!("building the node binary: {command} (in {})", ws.display());
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = std::process::Command::new(cargo);
    cmd.current_dir(&ws).args(["build", "-p", "node"]);
    if release {
        cmd.arg("--release");
    }
    let status = cmd
        .status()
        .with_context(|| format!("running `{command}`"))?;
    if !status.success() {
        bail!(
            "`{command}` failed ({status}); fix the build, or pass an existing binary with --node-bin PATH"
        );
    }
    candidates(&exe).into_iter().find(|p| p.is_file()).ok_or_else(|| {
        anyhow::anyhow!("`{command}` succeeded but no node binary is next to {}: pass --node-bin PATH (e.g. target/debug/node)", exe.display())
    })
}
