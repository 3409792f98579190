//! The `node run --config FILE.toml` configuration. Relative paths are resolved against the config file's
//! directory. Every error names the file, the field and what is wrong.
//!
//! ```toml
//! key_dir = "keys"                      # from `node keygen --dir keys --vns 4`
//! vns = 4                               # k: virtual nodes (keys vn-0.key .. vn-3.key)
//! listen = ["/ip4/0.0.0.0/tcp/4001", "/ip4/0.0.0.0/tcp/4002", "/ip4/0.0.0.0/tcp/4003", "/ip4/0.0.0.0/tcp/4004"]
//! announce = ["/ip4/192.0.2.7/tcp/4001", "/ip4/192.0.2.7/tcp/4002", "/ip4/192.0.2.7/tcp/4003", "/ip4/192.0.2.7/tcp/4004"]
//!                                       # optional; a name works too: "/dns4/node-a.example/tcp/4001"
//! peer_list = "peers.toml"
//! psk_file = "swarm.key"                # optional: closes the network to holders of the key
//! degree = 8                            # r (paper: 8)
//! rounds = 100
//! metrics = "metrics.jsonl"             # optional: one JSON line per round (appended, never truncated)
//! checkpoints = "checkpoints"           # optional: a checkpoint every round, for `node run --resume`
//! metrics_addr = "127.0.0.1:9464"       # optional: serve Prometheus/OpenMetrics at http://ADDR/metrics
//!                                       #   (off by default; keep it on localhost or a private network)
//! algorithm = "shatter"                 # optional: shatter | el | el-local | dpsgd | chunking:K |
//!                                       #   sparsify-random:F | muffliato:SIGMA | ghp:SIGMA | random:SIGMA
//! dropout = 0.0                         # optional, experiments: the rate at which this node sits rounds out
//!                                       #   (default: el with vns = 1, shatter with more)
//! arrivals = "arrivals.log"             # optional, research: what arrives at the VNs, when (`arrival_log.rs`)
//! isolation_timeout_s = 60              # optional: reaching no peer outside this node this long stops it
//!                                       #   with an error (0: wait for ever; every round alone is warned of)
//!
//! [learning]
//! dataset = "movielens"                 # synthetic | synthetic-images | movielens | sent140 | cifar10 | mnist
//! data_dir = "../shared/data/movielens/ml-latest-small"
//! model = "mf"                          # optional: mlp[:w,..] | lenet | resnet8 | resnet18 | mf[:factors] | mf-centred[:factors]
//! partition = "user"                    # iid | dirichlet[:alpha[,min]] | user
//! nodes = 100                           # real nodes the data is split across
//! index = 0                             # this node's share
//! lr = 0.075
//! batch = 32
//! local_epochs = 1                      # or local_steps = N
//! clip = 1.0                            # optional: per-sample gradient clipping to L2 norm ≤ clip (GHP's B)
//! seed = 1                              # the same on every node: initial model and chunk partition
//! device = "cpu"                        # optional: cpu | cuda[:N] | metal[:N]; a GPU whose backend is not
//!                                       #   compiled in (features cuda, metal) or that does not start falls
//!                                       #   back to the CPU with a warning (absent: the first GPU compiled
//!                                       #   in and present, else the CPU)
//!
//! [timing]                              # optional, see `Timing`
//! substep_ms = 200
//!
//! [hosted]                              # optional: the VNs run in VN hosts (`node vn`), not here; key_dir
//! link_key = "keys/link.key"            #   and listen are then unused. The link identity (`node keygen --vns 1`)
//! vns = [                               #   and, in VN order, each VN's host (its link address) and PeerId
//!   { host = "/ip4/192.0.2.9/tcp/7000/p2p/12D3KooW...", peer = "12D3KooW..." },
//! ]
//!
//! [values]                              # optional: the bound on received values (`ValueBounds`)
//! ratio = 1000                          # |v| up to ratio × the largest |v| of the VN's own chunk,
//! floor = 1000                          #   never less than floor,
//! ceiling = 1e6                         #   never more than ceiling
//! ```

use std::path::{Path, PathBuf};

use libp2p::Multiaddr;
use libp2p::multiaddr::Protocol;
use models::data::DatasetSpec;
use models::data::partition::Partition;
use models::device::DeviceSpec;
use models::nn::ModelSpec;
use models::train::{LocalWork, TrainConfig};
use serde::Deserialize;

use crate::algo::AlgoSpec;
use crate::engine::ValueBounds;
use crate::learner::LearningConfig;
use crate::peers::PeerList;
use crate::{NodeBuilder, NodeError, RemoteVn, Result, Timing, keys};
use libp2p::PeerId;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    key_dir: Option<PathBuf>,
    vns: usize,
    #[serde(default)]
    listen: Vec<String>,
    #[serde(default)]
    announce: Vec<String>,
    peer_list: PathBuf,
    psk_file: Option<PathBuf>,
    degree: usize,
    rounds: u64,
    metrics: Option<PathBuf>,
    metrics_addr: Option<std::net::SocketAddr>,
    checkpoints: Option<PathBuf>,
    /// Checked by serde (`AlgoSpec`'s parser), so a bad name is reported with this field.
    algorithm: Option<AlgoSpec>,
    #[serde(default)]
    dropout: f64,
    learning: RawLearning,
    #[serde(default)]
    timing: Timing,
    #[serde(default)]
    values: ValueBounds,
    hosted: Option<RawHosted>,
    arrivals: Option<PathBuf>,
    isolation_timeout_s: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHosted {
    link_key: PathBuf,
    vns: Vec<RawRemoteVn>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRemoteVn {
    host: String,
    peer: String,
}

/// VNs run by VN hosts (`[hosted]`).
#[derive(Debug, Clone)]
pub struct HostedVns {
    /// The node's link identity (a key file).
    pub link_key: PathBuf,
    /// VN s's host and PeerId.
    pub vns: Vec<RemoteVn>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLearning {
    dataset: String,
    data_dir: Option<PathBuf>,
    model: Option<String>,
    #[serde(default = "default_partition")]
    partition: String,
    nodes: usize,
    index: usize,
    lr: f64,
    #[serde(default = "default_batch")]
    batch: usize,
    local_epochs: Option<usize>,
    local_steps: Option<usize>,
    clip: Option<f64>,
    seed: u64,
    max_test_samples: Option<usize>,
    device: Option<String>,
}

fn default_partition() -> String {
    "iid".into()
}

/// Paper: batch 32 for every task.
fn default_batch() -> usize {
    32
}

/// A checked node configuration.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The VN keys' directory (unused, and empty, when the VNs are hosted).
    pub key_dir: PathBuf,
    /// VNs run by VN hosts instead of in this process.
    pub hosted: Option<HostedVns>,
    /// Research: log what arrives at the VNs here (`arrival_log.rs`), for the timing-linkage attack.
    pub arrivals: Option<PathBuf>,
    pub vns: usize,
    pub listen: Vec<Multiaddr>,
    pub announce: Vec<Multiaddr>,
    pub peer_list: PathBuf,
    pub psk_file: Option<PathBuf>,
    pub degree: usize,
    pub rounds: u64,
    pub metrics: Option<PathBuf>,
    /// Where `node run` serves its Prometheus metrics (`crate::telemetry`); `None`: nowhere (the default).
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Checkpoint directory (`NodeBuilder::checkpoint_dir`): one checkpoint per round, the last one kept.
    pub checkpoints: Option<PathBuf>,
    /// `None`: EL with one VN, Shatter with more.
    pub algorithm: Option<AlgoSpec>,
    /// Dropout rate for experiments (`NodeBuilder::dropout`).
    pub dropout: f64,
    pub learning: LearningConfig,
    pub index: usize,
    /// `[learning] device`: where this node trains (`None`: the best device compiled in and present).
    pub device: Option<DeviceSpec>,
    pub timing: Timing,
    pub values: ValueBounds,
    /// Reaching no peer outside the node this long stops it (`NodeBuilder::isolation_timeout`); `None`:
    /// never (`isolation_timeout_s = 0`).
    pub isolation_timeout: Option<std::time::Duration>,
}

impl NodeConfig {
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| NodeError::io(path, e))?;
        Self::parse(path, &text)
    }

    /// Parses config text; `path` names the file in errors and anchors relative paths.
    pub fn parse(path: &Path, text: &str) -> Result<Self> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let field = e
                .span()
                .map(|s| locate(text, s.start))
                .unwrap_or_else(|| "toml".into());
            NodeError::file(path, field, e.message())
        })?;
        let file = ConfigFile(path);
        file.check_run(&raw)?;
        let hosted = raw
            .hosted
            .as_ref()
            .map(|h| file.hosted(h, raw.vns))
            .transpose()?;
        let key_dir = match (&raw.key_dir, &hosted) {
            (Some(d), _) => file.rel(d),
            (None, Some(_)) => PathBuf::new(),
            (None, None) => {
                return Err(file.err("key_dir", "missing (or give [hosted] VNs)".into()));
            }
        };
        let (listen, announce) = file.addresses(&raw, hosted.is_some())?;
        let index = raw.learning.index;
        let device = raw
            .learning
            .device
            .as_deref()
            .map(str::parse::<DeviceSpec>)
            .transpose()
            .map_err(|e| file.err("learning.device", e.to_string()))?;
        let learning = file.learning(raw.learning)?;
        Ok(NodeConfig {
            key_dir,
            hosted,
            arrivals: raw.arrivals.as_deref().map(|p| file.rel(p)),
            vns: raw.vns,
            listen,
            announce,
            peer_list: file.rel(&raw.peer_list),
            psk_file: raw.psk_file.as_deref().map(|p| file.rel(p)),
            degree: raw.degree,
            rounds: raw.rounds,
            metrics: raw.metrics.as_deref().map(|p| file.rel(p)),
            metrics_addr: raw.metrics_addr,
            checkpoints: raw.checkpoints.as_deref().map(|p| file.rel(p)),
            learning,
            index,
            device,
            timing: raw.timing,
            algorithm: raw.algorithm,
            dropout: raw.dropout,
            values: raw.values,
            isolation_timeout: match raw.isolation_timeout_s {
                None => Some(crate::DEFAULT_ISOLATION_TIMEOUT),
                Some(0) => None,
                Some(s) => Some(std::time::Duration::from_secs(s)),
            },
        })
    }

    /// Loads keys, peer list and pre-shared key, and returns a builder ready to spawn.
    pub fn builder(&self) -> Result<NodeBuilder> {
        let keys = match &self.hosted {
            Some(_) => Vec::new(),
            None => keys::load(&self.key_dir, self.vns)?,
        };
        let peers = PeerList::load(&self.peer_list)?;
        let ids: Vec<PeerId> = match &self.hosted {
            Some(h) => h.vns.iter().map(|v| v.peer).collect(),
            None => keys.iter().map(|k| k.public().to_peer_id()).collect(),
        };
        for (s, id) in ids.into_iter().enumerate() {
            if !peers.is_allowed(&id) {
                return Err(NodeError::file(
                    &self.peer_list,
                    "peer",
                    format!(
                        "this node's VN {s} ({id}) is not on the peer list: add it, or peers will refuse it"
                    ),
                ));
            }
        }
        let psk = self
            .psk_file
            .as_deref()
            .map(crate::net::transport::load_psk)
            .transpose()?;
        let mut builder = NodeBuilder::new(keys, self.learning.clone(), self.index);
        if let Some(h) = &self.hosted {
            builder = builder.remote_vns(keys::load_file(&h.link_key)?, h.vns.clone());
        }
        if let Some(p) = &self.arrivals {
            builder = builder.observer(std::sync::Arc::new(
                crate::arrival_log::ArrivalLog::create(p)?,
            ));
        }
        if let Some(a) = self.algorithm {
            builder = builder.algorithm(a);
        }
        if let Some(d) = self.device {
            builder = builder.device(d);
        }
        Ok(builder
            .listen(self.listen.clone())
            .announce(self.announce.clone())
            .peers(peers)
            .psk(psk)
            .degree(self.degree)
            .rounds(self.rounds)
            .timing(self.timing.clone())
            .value_bounds(self.values)
            .dropout(self.dropout)
            .isolation_timeout(self.isolation_timeout)
            .metrics_file(self.metrics.clone())
            .checkpoint_dir(self.checkpoints.clone()))
    }
}

/// The config file being parsed: its errors name it and the field, its relative paths are anchored at it.
struct ConfigFile<'a>(&'a Path);

impl ConfigFile<'_> {
    fn err(&self, field: &str, msg: String) -> NodeError {
        NodeError::file(self.0, field, msg)
    }

    fn rel(&self, p: &Path) -> PathBuf {
        relative_to(self.0, p)
    }

    /// The run's shape: at least one VN, one neighbour and one round; valid value bounds, timing and
    /// dropout rate.
    fn check_run(&self, raw: &RawConfig) -> Result<()> {
        if raw.vns == 0 {
            return Err(self.err("vns", "must be at least 1".into()));
        }
        raw.values.validate().map_err(|e| self.err("values", e))?;
        raw.timing.validate().map_err(|e| self.err("timing", e))?;
        if !(0.0..=1.0).contains(&raw.dropout) {
            return Err(self.err(
                "dropout",
                format!("{} is not a rate in [0, 1]", raw.dropout),
            ));
        }
        if raw.degree == 0 {
            return Err(self.err("degree", "must be at least 1".into()));
        }
        if raw.rounds == 0 {
            return Err(self.err("rounds", "must be at least 1".into()));
        }
        Ok(())
    }

    /// Multiaddrs of `field`, each error naming its entry.
    fn addrs(&self, field: &str, v: &[String]) -> Result<Vec<Multiaddr>> {
        v.iter()
            .enumerate()
            .map(|(i, a)| {
                a.parse().map_err(|e| {
                    self.err(
                        &format!("{field}[{i}]"),
                        format!("'{a}' is not a multiaddr: {e}"),
                    )
                })
            })
            .collect()
    }

    /// Where the VNs listen (1 address, or one per VN, unless they are hosted) and what they announce
    /// (none, or one per VN).
    fn addresses(&self, raw: &RawConfig, hosted: bool) -> Result<(Vec<Multiaddr>, Vec<Multiaddr>)> {
        let listen = self.addrs("listen", &raw.listen)?;
        if !(hosted || listen.len() == 1 || listen.len() == raw.vns) {
            return Err(self.err(
                "listen",
                format!(
                    "{} addresses for {} virtual nodes: give 1 or {}",
                    listen.len(),
                    raw.vns,
                    raw.vns
                ),
            ));
        }
        // A name is resolved when dialled; a socket binds an address of this host.
        if let Some((i, a)) = listen.iter().enumerate().find(|(_, a)| {
            a.iter().any(|p| {
                matches!(
                    p,
                    Protocol::Dns(_) | Protocol::Dns4(_) | Protocol::Dns6(_) | Protocol::Dnsaddr(_)
                )
            })
        }) {
            return Err(self.err(
                &format!("listen[{i}]"),
                format!(
                    "'{a}': listen on an IP address of this host (/ip4/0.0.0.0/tcp/PORT for all of them); \
                     a DNS name belongs in `announce` and the peer list"
                ),
            ));
        }
        let announce = self.addrs("announce", &raw.announce)?;
        for (i, a) in announce.iter().enumerate() {
            crate::peers::check_addr(a, None)
                .map_err(|why| self.err(&format!("announce[{i}]"), format!("'{a}': {why}")))?;
        }
        if !(announce.is_empty() || announce.len() == raw.vns) {
            return Err(self.err(
                "announce",
                format!("{} addresses for {} virtual nodes", announce.len(), raw.vns),
            ));
        }
        Ok((listen, announce))
    }

    /// `[hosted]`: one VN host address and PeerId per VN, and the link's key.
    fn hosted(&self, h: &RawHosted, vns: usize) -> Result<HostedVns> {
        if h.vns.len() != vns {
            return Err(self.err(
                "hosted.vns",
                format!("{} hosted VNs for vns = {vns}", h.vns.len()),
            ));
        }
        let vns = h
            .vns
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let host: Multiaddr = v.host.parse().map_err(|e| {
                    self.err(
                        &format!("hosted.vns[{i}].host"),
                        format!("'{}' is not a multiaddr: {e}", v.host),
                    )
                })?;
                let peer = v.peer.parse().map_err(|e| {
                    self.err(
                        &format!("hosted.vns[{i}].peer"),
                        format!("'{}' is not a PeerId: {e}", v.peer),
                    )
                })?;
                let r = RemoteVn { host, peer };
                r.host_peer()
                    .map_err(|e| self.err(&format!("hosted.vns[{i}].host"), e.to_string()))?;
                Ok(r)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(HostedVns {
            link_key: self.rel(&h.link_key),
            vns,
        })
    }

    /// `[learning]`: the data set, model, partition and training of this node's share.
    fn learning(&self, l: RawLearning) -> Result<LearningConfig> {
        let dataset: DatasetSpec = match &l.data_dir {
            Some(d) => format!("{}:{}", l.dataset, self.rel(d).display()).parse(),
            None => l.dataset.parse(),
        }
        .map_err(|e: models::ModelsError| self.err("learning.dataset", e.to_string()))?;
        let model = l
            .model
            .as_deref()
            .map(str::parse::<ModelSpec>)
            .transpose()
            .map_err(|e| self.err("learning.model", e.to_string()))?;
        let partition: Partition = l
            .partition
            .parse()
            .map_err(|e: models::ModelsError| self.err("learning.partition", e.to_string()))?;
        if l.nodes == 0 || l.index >= l.nodes {
            return Err(self.err(
                "learning.index",
                format!("index {} must be below nodes = {}", l.index, l.nodes),
            ));
        }
        Ok(LearningConfig {
            dataset,
            model,
            partition,
            nodes: l.nodes,
            train: self.training(&l)?,
            seed: l.seed,
            max_test_samples: l.max_test_samples,
        })
    }

    /// The local training: learning rate, batch, local work (one epoch by default, as in the paper) and
    /// clipping.
    fn training(&self, l: &RawLearning) -> Result<TrainConfig> {
        if !(l.lr.is_finite() && l.lr > 0.0) {
            return Err(self.err(
                "learning.lr",
                format!("{} is not a positive learning rate", l.lr),
            ));
        }
        if l.batch == 0 {
            return Err(self.err("learning.batch", "must be at least 1".into()));
        }
        let work = match (l.local_epochs, l.local_steps) {
            (Some(_), Some(_)) => {
                return Err(self.err(
                    "learning.local_steps",
                    "give local_epochs or local_steps, not both".into(),
                ));
            }
            (Some(0), _) | (_, Some(0)) => {
                return Err(self.err("learning.local_epochs", "must be at least 1".into()));
            }
            (Some(e), None) => LocalWork::Epochs(e),
            (None, Some(s)) => LocalWork::Steps(s),
            // Paper: one local epoch per round.
            (None, None) => LocalWork::Epochs(1),
        };
        if let Some(b) = l.clip
            && !(b.is_finite() && b > 0.0)
        {
            return Err(self.err(
                "learning.clip",
                format!("must be positive and finite, got {b}"),
            ));
        }
        Ok(TrainConfig {
            lr: l.lr,
            batch_size: l.batch,
            work,
            clip: l.clip,
        })
    }
}

/// `p` as a config file at `config` means it: relative paths are relative to the file's directory.
pub(crate) fn relative_to(config: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        config.parent().unwrap_or(Path::new(".")).join(p)
    }
}

/// "line L, column C" of a byte offset, for TOML errors.
pub(crate) fn locate(text: &str, offset: usize) -> String {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!("line {line}, column {col}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
key_dir = "keys"
vns = 2
listen = ["/ip4/127.0.0.1/tcp/0"]
peer_list = "peers.toml"
degree = 2
rounds = 3
[learning]
dataset = "synthetic"
nodes = 4
index = 1
lr = 0.05
local_steps = 10
seed = 9
"#;

    #[test]
    fn parses_and_resolves_relative_paths() {
        let c = NodeConfig::parse(Path::new("/etc/shatter/node.toml"), GOOD).unwrap();
        assert_eq!(c.key_dir, Path::new("/etc/shatter/keys"));
        assert_eq!(c.peer_list, Path::new("/etc/shatter/peers.toml"));
        assert_eq!(c.learning.train.work, LocalWork::Steps(10));
        assert_eq!(c.learning.train.batch_size, 32);
        assert_eq!(c.index, 1);
        assert_eq!(c.timing, Timing::default());
        assert_eq!(c.algorithm, None);
        assert_eq!(c.learning.train.clip, None);
        assert_eq!(c.isolation_timeout, Some(crate::DEFAULT_ISOLATION_TIMEOUT));
        assert_eq!(c.metrics_addr, None, "no metrics endpoint unless asked for");
    }

    #[test]
    fn metrics_addr_is_a_socket_address() {
        let p = Path::new("node.toml");
        let with = |line: &str| GOOD.replacen("degree", &format!("{line}\ndegree"), 1);
        let c = NodeConfig::parse(p, &with("metrics_addr = \"127.0.0.1:9464\"")).unwrap();
        assert_eq!(c.metrics_addr, Some("127.0.0.1:9464".parse().unwrap()));
        let e = NodeConfig::parse(p, &with("metrics_addr = \"localhost\""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("socket address"), "{e}");
    }

    #[test]
    fn isolation_timeout_in_seconds_and_zero_waits_for_ever_and_announce_takes_names() {
        let p = Path::new("node.toml");
        let with = |line: &str| GOOD.replacen("degree", &format!("{line}\ndegree"), 1);
        let c = NodeConfig::parse(p, &with("isolation_timeout_s = 5")).unwrap();
        assert_eq!(c.isolation_timeout, Some(std::time::Duration::from_secs(5)));
        let c = NodeConfig::parse(p, &with("isolation_timeout_s = 0")).unwrap();
        assert_eq!(c.isolation_timeout, None);
        let e = NodeConfig::parse(p, &with("isolation_timeout_s = -1"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("node.toml: line"), "{e}");
        let c = NodeConfig::parse(
            p,
            &with(
                "announce = [\"/dns4/node-a.example/tcp/4001\", \"/dns6/node-a.example/tcp/4002\"]",
            ),
        )
        .unwrap();
        assert_eq!(c.announce[1].to_string(), "/dns6/node-a.example/tcp/4002");
    }

    #[test]
    fn the_device_is_named_in_learning_and_a_bad_one_is_reported_there() {
        let p = Path::new("node.toml");
        assert_eq!(NodeConfig::parse(p, GOOD).unwrap().device, None);
        let with = |d: &str| GOOD.replace("seed = 9", &format!("seed = 9\ndevice = \"{d}\""));
        for (text, spec) in [
            ("cpu", DeviceSpec::Cpu),
            ("cuda:1", DeviceSpec::Cuda(1)),
            ("metal", DeviceSpec::Metal(0)),
        ] {
            assert_eq!(
                NodeConfig::parse(p, &with(text)).unwrap().device,
                Some(spec)
            );
        }
        let e = NodeConfig::parse(p, &with("gpu")).unwrap_err().to_string();
        assert!(
            e.contains("learning.device") && e.contains("cuda[:N]"),
            "{e}"
        );
    }

    #[test]
    fn clip_sets_per_sample_clipping_and_must_be_positive() {
        let p = Path::new("node.toml");
        let c = NodeConfig::parse(p, &GOOD.replace("seed = 9", "seed = 9\nclip = 1.5")).unwrap();
        assert_eq!(c.learning.train.clip, Some(1.5));
        for bad in ["0.0", "-1.0", "inf"] {
            let e = NodeConfig::parse(
                p,
                &GOOD.replace("seed = 9", &format!("seed = 9\nclip = {bad}")),
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains("learning.clip"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_algorithm_is_named_and_a_bad_name_is_reported_where_it_is() {
        let p = Path::new("node.toml");
        let with = |a: &str| GOOD.replacen("degree", &format!("algorithm = \"{a}\"\ndegree"), 1);
        let c = NodeConfig::parse(p, &with("chunking:8")).unwrap();
        assert_eq!(c.algorithm, Some(AlgoSpec::Chunking { chunks: 8 }));
        let e = NodeConfig::parse(p, &with("chunking:1"))
            .unwrap_err()
            .to_string();
        // serde reports the value's place: the line of `algorithm = ...`.
        assert!(
            e.contains("node.toml: line 6") && e.contains("K ≥ 2"),
            "{e}"
        );
    }

    #[test]
    fn errors_name_the_file_the_field_and_the_problem() {
        let p = Path::new("node.toml");
        let cases = [
            (GOOD.replace("index = 1", "index = 4"), "learning.index"),
            (GOOD.replace("lr = 0.05", "lr = -1.0"), "learning.lr"),
            (GOOD.replace("\"synthetic\"", "\"imagenet\""), "learning.dataset"),
            (GOOD.replace("vns = 2", "vns = 3\nbogus = 1"), "bogus"),
            (GOOD.replace("listen = [\"/ip4/127.0.0.1/tcp/0\"]", "listen = [\"tcp:0\"]"), "listen[0]"),
            (GOOD.replace("listen = [\"/ip4/127.0.0.1/tcp/0\"]", "listen = [\"/ip4/127.0.0.1/tcp/0\", \"/ip4/127.0.0.1/tcp/0\", \"/ip4/127.0.0.1/tcp/0\"]"), "listen"),
            (GOOD.replace("local_steps = 10", "local_steps = 10\nlocal_epochs = 1"), "learning.local_steps"),
            (GOOD.replace("degree = 2", "degree = \"two\""), "line 6"),
            (format!("{GOOD}[timing]\ncyclon_shuffle_len = 21\n"), "timing"),
            (format!("{GOOD}[timing]\ncyclon_shuffle_len = 0\n"), "timing"),
            (GOOD.replace("listen = [\"/ip4/127.0.0.1/tcp/0\"]", "listen = [\"/dns4/localhost/tcp/4001\"]"), "listen[0]"),
            (GOOD.replace("vns = 2", "vns = 2\nannounce = [\"/dns4/a.example/tcp/1\", \"/dns4/a.example\"]"), "announce[1]"),
        ];
        for (text, field) in cases {
            let e = NodeConfig::parse(p, &text).unwrap_err().to_string();
            assert!(
                e.starts_with("node.toml: ") && e.contains(field),
                "{field}: {e}"
            );
        }
    }
}
