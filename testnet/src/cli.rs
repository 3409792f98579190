//! The options, shared by the command line and `--scenario FILE.toml`: one struct parsed by clap and by serde,
//! every field optional so that "not given" is visible. Precedence: command line > scenario file > defaults
//! (the defaults live in `scenario.rs`, where options become [`crate::scenario::Settings`]).

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::bail;
use clap::{CommandFactory, Parser, ValueEnum};
use models::data::DatasetSpec;
use models::data::partition::Partition;
use models::device::DeviceSpec;
use models::nn::ModelSpec;
use node::algo::AlgoSpec;
use serde::{Deserialize, Deserializer, Serialize};

use crate::churn::{Kill, Pause};

/// How the network runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Every RN and VN in this process, real libp2p over 127.0.0.1.
    Inproc,
    /// Keys, peer list and configs on disk, one `node run` process per RN (the deployment path).
    Procs,
    /// The same round engine over the in-memory simulator (virtual clock; 1,000+ VNs).
    Sim,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Inproc => "inproc",
            Mode::Procs => "procs",
            Mode::Sim => "sim",
        })
    }
}

/// Protocol timing for the libp2p modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimingChoice {
    /// `loopback` for up to 64 VNs, `lan` up to 256, `crowded` above (hundreds of swarms on a few cores need
    /// the slack).
    Auto,
    /// `node::Timing::loopback()`: overlay sub-steps of at least 30 ms (each VN stretches its own to two of
    /// the round trips it measures) negotiated 12 rounds ahead, a 1.5 s warm-up, 5 s exchange timeout.
    Loopback,
    /// `node::Timing::default()`: 200 ms sub-steps negotiated 4 rounds ahead, 30 s exchange timeout, 5 s
    /// warm-up.
    Lan,
    /// `node::Timing::crowded()`: the LAN timing with 400 ms sub-steps, 1 round negotiated ahead, a Cyclon
    /// shuffle of one entry every 20 s and a 20 s warm-up, for hundreds of VNs on a few cores, where every
    /// new peer a VN talks to costs a handshake and a connection.
    Crowded,
}

/// How in-process VNs connect (`--mode inproc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportChoice {
    /// TCP on 127.0.0.1: every connection costs two file descriptors in this process.
    Tcp,
    /// libp2p's in-process memory transport (`/memory/<port>`): the same noise + yamux stack, no sockets.
    Memory,
}

/// `--dataset`: which data the nodes learn on. A real dataset's directory comes from `--data-dir` (default
/// under `../shared/data`, see [`DatasetName::spec`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DatasetName {
    /// Generated from the seed: 10 classes of 32 features (needs no files).
    Synthetic,
    /// Generated from the seed: 3×32×32 images of 10 classes, a CIFAR-10 stand-in.
    SyntheticImages,
    /// Generated from the seed: 1×16×16 images of 10 classes.
    SyntheticImagesSmall,
    /// MovieLens ml-latest-small ratings (matrix factorisation).
    Movielens,
    /// Sent140 (LEAF JSON).
    Sent140,
    /// CIFAR-10 binary batches.
    Cifar10,
    /// MNIST IDX files.
    Mnist,
}

impl DatasetName {
    /// The name as `--dataset` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            DatasetName::Synthetic => "synthetic",
            DatasetName::SyntheticImages => "synthetic-images",
            DatasetName::SyntheticImagesSmall => "synthetic-images-small",
            DatasetName::Movielens => "movielens",
            DatasetName::Sent140 => "sent140",
            DatasetName::Cifar10 => "cifar10",
            DatasetName::Mnist => "mnist",
        }
    }

    /// Generated from the seed: no directory to read.
    pub fn is_synthetic(self) -> bool {
        matches!(
            self,
            DatasetName::Synthetic
                | DatasetName::SyntheticImages
                | DatasetName::SyntheticImagesSmall
        )
    }

    /// The dataset with its directory (`dir`, or `models`' default under `../shared/data`).
    pub fn spec(self, dir: Option<&Path>) -> anyhow::Result<DatasetSpec> {
        let name = self.as_str();
        match dir {
            Some(_) if self.is_synthetic() => anyhow::bail!(
                "--dataset {name} is generated from the seed; --data-dir is only for real datasets"
            ),
            // `models` keeps the defaults (default directory, vocabulary) of the text form `name[:dir]`.
            Some(d) => format!("{name}:{}", d.display()).parse(),
            None => name.parse(),
        }
        .map_err(|e| anyhow::anyhow!("--dataset: {e}"))
    }
}

impl fmt::Display for DatasetName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Help headings: each option is listed under what it acts on (the run itself stays under clap's
/// "Options").
pub const NETWORK: &str = "Network";
pub const LEARNING: &str = "Learning";
pub const TIMING: &str = "Timing";
pub const ADVERSARY: &str = "Adversaries and audit";
pub const PROCESSES: &str = "Processes (--mode procs)";

/// `cargo run -p testnet -- [OPTIONS]`: run a local Shatter network and write a report.
///
/// Every option can also be given in a `--scenario FILE.toml` under the same name (snake_case, e.g.
/// `data_dir = "..."`, `vns = [1, 4, 8]`), as a top-level key (the help's groups are not TOML tables); the
/// command line wins over the file.
///
/// One flat struct on purpose: serde's `deny_unknown_fields` (a typo in a scenario file is an error) does not
/// work through `flatten`, so the groups are help headings (`help_heading` on each field, in field order) rather
/// than nested structs. Options that only some modes read are refused in the others
/// ([`Options::check_mode`]).
#[derive(Parser, Debug, Clone, Default, Serialize, Deserialize)]
#[command(name = "testnet", version, about = "Run a local Shatter network (in-process, multi-process or simulated) with live progress, a report and plots", long_about = None)]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    // ---- The run itself (clap's "Options" heading) ----
    /// TOML file with any of these options (command-line values override it).
    #[arg(long, value_name = "FILE.toml")]
    #[serde(skip)]
    pub scenario: Option<PathBuf>,

    /// inproc: one process, real libp2p on 127.0.0.1; procs: one `node` process per RN; sim: in-memory
    /// simulator. [default: inproc]
    #[arg(long, value_enum)]
    pub mode: Option<Mode>,

    /// Seed of the data, the initial model, the chunk partition and the simulator. [default: 1]
    #[arg(long)]
    pub seed: Option<u64>,

    /// Output directory. [default: target/testnet/<date>-<time>-<mode>-<dataset>]
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// Print one line per round instead of a progress bar, even on a terminal.
    #[arg(long)]
    #[serde(skip)]
    pub plain: bool,

    /// Serve a live view of the run at http://ADDR/ (progress, curves, bytes, the overlay; `/events` and
    /// `/metrics` too), kept up after the run until Ctrl-C. `testnet view DIR` serves a finished run.
    #[arg(long, value_name = "ADDR")]
    #[serde(skip)]
    pub ui: Option<std::net::SocketAddr>,

    // ---- Network: who takes part and what they send ----
    /// Real nodes (RNs). [default: 8]
    #[arg(long, short = 'n', help_heading = NETWORK)]
    pub nodes: Option<usize>,

    /// Virtual nodes per RN (k); a list sweeps k: `--vns 1,2,4,8`. [default: 4; `--algo el`: 1]
    #[arg(long, short = 'k', value_delimiter = ',', num_args = 1.., help_heading = NETWORK)]
    #[serde(deserialize_with = "one_or_many")]
    pub vns: Option<Vec<usize>>,

    /// Overlay degree r: neighbours per VN per round. [default: 4]
    #[arg(long, short = 'r', help_heading = NETWORK)]
    pub degree: Option<usize>,

    /// Rounds. [default: 20]
    #[arg(long, help_heading = NETWORK)]
    pub rounds: Option<u64>,

    /// shatter | el | el-local | dpsgd | chunking:K | sparsify-random:F | muffliato:SIGMA | ghp:SIGMA |
    /// random:SIGMA | pdmm:SIGMA_Z[:THETA[:RHO[:MU]]] | admm:SIGMA_Z.
    /// Shatter, ghp and random run each --vns (ghp with k > 1 is Shatter + GHP); the others send through one
    /// VN per RN. [default: shatter, or el when --vns is 1]
    #[arg(long, value_name = "ALGO", help_heading = NETWORK)]
    pub algo: Option<AlgoSpec>,

    /// Dropout rate (Appendix E): each round each node sits out with this probability (10% likelier after a
    /// round it missed) — no training, overlay or exchange. [default: 0]
    #[arg(long, value_name = "P", help_heading = NETWORK)]
    pub dropout: Option<f64>,

    /// How in-process VNs connect (inproc only): tcp (127.0.0.1) | memory (libp2p's in-process transport: no
    /// file descriptor per connection). [default: tcp]
    #[arg(long, value_enum, help_heading = NETWORK)]
    pub transport: Option<TransportChoice>,

    // ---- Learning: data, model and local training ----
    /// Which data. [default: synthetic]
    #[arg(long, value_enum, help_heading = LEARNING)]
    pub dataset: Option<DatasetName>,

    /// Directory of a real dataset. [default: ../shared/data/<dataset>, e.g.
    /// ../shared/data/movielens/ml-latest-small]
    #[arg(long, value_name = "DIR", help_heading = LEARNING)]
    #[serde(alias = "data-dir")]
    pub data_dir: Option<PathBuf>,

    /// mlp[:w1,w2,..] | lenet | resnet8 | resnet18 | mf[:factors] | mf-centred[:factors]. [default: mf for
    /// ratings, mlp otherwise]
    #[arg(long, value_name = "MODEL", help_heading = LEARNING)]
    #[serde(with = "text")]
    pub model: Option<ModelSpec>,

    /// SGD learning rate. [default: 0.075 movielens, 0.005 sent140, 0.05 otherwise (paper §6)]
    #[arg(long, help_heading = LEARNING)]
    pub lr: Option<f64>,

    /// Mini-batch size. [default: 32 (paper)]
    #[arg(long, help_heading = LEARNING)]
    pub batch: Option<usize>,

    /// Local epochs per round. [default: 1 (paper)]
    #[arg(long, conflicts_with = "local_steps", help_heading = LEARNING)]
    #[serde(alias = "local-epochs")]
    pub local_epochs: Option<usize>,

    /// Local SGD steps per round (instead of epochs).
    #[arg(long, help_heading = LEARNING)]
    #[serde(alias = "local-steps")]
    pub local_steps: Option<usize>,

    /// Per-sample gradient clipping: every sample's gradient scaled to L2 norm ≤ B before the batch average
    /// (the bound GHP's DP accountant assumes; ghp runs then report ε in summary.json). [default: off]
    #[arg(long, value_name = "B", help_heading = LEARNING)]
    pub clip: Option<f64>,

    /// iid | dirichlet[:alpha[,min]] | user. [default: user for movielens and sent140, iid otherwise]
    #[arg(long, value_name = "PARTITION", help_heading = LEARNING)]
    #[serde(with = "text")]
    pub partition: Option<Partition>,

    /// Dirichlet concentration α (implies --partition dirichlet). [default: 0.1 (paper)]
    #[arg(long, help_heading = LEARNING)]
    pub alpha: Option<f64>,

    /// Target test metric: the summary reports the first round whose mean over RNs reaches it (RMSE: at or
    /// below; accuracy: at or above). [default: 1.10 for movielens (the paper's EL figure), none otherwise]
    #[arg(long, help_heading = LEARNING)]
    pub target: Option<f64>,

    /// Evaluate each round on at most this many test samples (a seeded subset). [default: all]
    #[arg(long, help_heading = LEARNING)]
    #[serde(alias = "test-samples")]
    pub test_samples: Option<usize>,

    /// Where nodes train: cpu | cuda[:N] | metal[:N], one for every node or a comma list with one per node
    /// (`--device cuda:0,cuda:1,cpu,cpu`). A GPU this build or machine lacks falls back to the CPU with a
    /// warning. [default: the first GPU compiled in and present, else the CPU]
    #[arg(long, value_name = "DEVICE", value_delimiter = ',', num_args = 1.., help_heading = LEARNING)]
    #[serde(default, deserialize_with = "devices")]
    pub device: Option<Vec<DeviceSpec>>,

    // ---- Timing: when VNs negotiate and send ----
    /// Protocol timing (inproc and procs; sim runs on a virtual clock). [default: auto]
    #[arg(long, value_enum, help_heading = TIMING)]
    pub timing: Option<TimingChoice>,

    /// Overlay sub-step in ms, overriding the timing's (inproc and procs; must exceed a round trip; the
    /// overlay window is 5r + 4 sub-steps).
    #[arg(long, value_name = "MS", help_heading = TIMING)]
    #[serde(alias = "substep-ms")]
    pub substep_ms: Option<u64>,

    /// Rounds each VN negotiates its overlay ahead of its node's round (0 ..= 16), overriding the timing's
    /// (inproc and procs).
    #[arg(long, value_name = "ROUNDS", help_heading = TIMING)]
    pub lookahead: Option<u64>,

    /// Mean of each VN's random delay before what it sends leaves, in µs, overriding the timing's (inproc and
    /// procs; default 0: off). Every message and acknowledgement is held and released on the VN's own
    /// exponential schedule (measured against the packet attack in `results/linkage-packets/`).
    #[arg(long, value_name = "US", help_heading = TIMING)]
    #[serde(alias = "release-delay-us")]
    pub release_delay_us: Option<u64>,

    /// Run every VN on its node's shared runtime instead of a thread and runtime of its own (inproc and
    /// procs; measures what the own threads buy).
    #[arg(long, help_heading = TIMING)]
    #[serde(default, alias = "shared-vn-threads")]
    pub shared_vn_threads: bool,

    /// Chunks leave on a grid of slots of this many ms on the wall clock instead of the adaptive grid, each
    /// VN at an offset of its own in the slot's first tenth (inproc and procs; default: the adaptive grid).
    #[arg(long, value_name = "MS", help_heading = TIMING, conflicts_with = "no_chunk_slots")]
    #[serde(alias = "chunk-slot-ms")]
    pub chunk_slot_ms: Option<u64>,

    /// Chunks leave as soon as they are ready (after the send jitter) instead of on the shared grid of
    /// slots (inproc and procs; measures what the grid buys and costs).
    #[arg(long, help_heading = TIMING)]
    #[serde(default, alias = "no-chunk-slots")]
    pub no_chunk_slots: bool,

    /// Warm-up before round 0 in ms, overriding the timing's (inproc and procs): the VNs open their
    /// connections in its first half and negotiate round 0's overlay in its tail, so a warm-up shorter than
    /// that window makes round 0 wait for the rest.
    #[arg(long, value_name = "MS", help_heading = TIMING)]
    #[serde(alias = "warmup-ms")]
    pub warmup_ms: Option<u64>,

    /// Upper bound of each VN's random delay before it sends its chunk, in ms (sim, default 1000; inproc and
    /// procs only with --no-chunk-slots, where the chunk grid's offsets replace it). Sibling VNs get their
    /// chunks at the same instant: a longer delay spreads their sends, at the cost of round time
    /// (`summary.json` → `linkage` with --audit).
    #[arg(long, value_name = "MS", help_heading = TIMING)]
    #[serde(alias = "send-jitter-ms")]
    pub send_jitter_ms: Option<u64>,

    /// The earliest each VN sends its chunk, in ms from its node's start of the round (every mode; default 0:
    /// off). About the slowest node's training time makes every VN send at about the same time, so chunk
    /// timing stops linking siblings without the round cost of a long --send-jitter-ms.
    #[arg(long, value_name = "MS", help_heading = TIMING)]
    #[serde(alias = "send-pace-ms")]
    pub send_pace_ms: Option<u64>,

    /// Each VN learns its send pace from when its neighbours' chunks come (the slowest neighbour's training,
    /// about); --send-pace-ms is then the floor.
    #[arg(long, help_heading = TIMING)]
    #[serde(default, alias = "send-pace-auto")]
    pub send_pace_auto: bool,

    // ---- Adversaries and audit: defences against peers, and the attacks that measure them ----
    /// Value rule (issue 14): a VN refuses a chunk holding a value larger than this many times the largest
    /// |value| of its own latest chunk, clamped to [--value-floor, --value-ceiling].
    /// [default: 1000]
    #[arg(long, value_name = "X", help_heading = ADVERSARY)]
    #[serde(alias = "value-ratio")]
    pub value_ratio: Option<f32>,

    /// Received values up to this magnitude are always accepted (also the bound before a VN's first own
    /// chunk). [default: 1000]
    #[arg(long, value_name = "V", help_heading = ADVERSARY)]
    #[serde(alias = "value-floor")]
    pub value_floor: Option<f32>,

    /// Received values beyond this magnitude are always refused. [default: 1e6]
    #[arg(long, value_name = "V", help_heading = ADVERSARY)]
    #[serde(alias = "value-ceiling")]
    pub value_ceiling: Option<f32>,

    /// Overlay walks name no origin and their answers go back along the path, so that no message shows a
    /// walk's first hop (costs overlay messages and, with short sub-steps, edges; see `docs/privacy-attacks.md`, "Walks that hide their origin").
    #[arg(long, help_heading = ADVERSARY)]
    #[serde(default, alias = "hide-walk-origin")]
    pub hide_walk_origin: bool,

    /// Privacy audit (inproc and sim): every RN attacks chunks its VNs received (membership inference and
    /// linkability against the true sender, known only to the harness); results per round in metrics.jsonl,
    /// summary.json and audit_*.svg.
    #[arg(long, help_heading = ADVERSARY)]
    pub audit: bool,

    /// Chunks each RN attacks per audited round (the first ones its VNs accept). [default: 8 (paper)]
    #[arg(long, value_name = "N", help_heading = ADVERSARY)]
    #[serde(alias = "audit-chunks")]
    pub audit_chunks: Option<usize>,

    /// Audit every this many rounds (rounds 0, n, 2n, …; the last round is always audited; n ≥ --rounds: the
    /// last round only). [default: 1]
    #[arg(long, value_name = "ROUNDS", help_heading = ADVERSARY)]
    #[serde(alias = "audit-every")]
    pub audit_every: Option<u64>,

    /// Training samples of each other node the linkability attack scores per chunk. [default: 200]
    #[arg(long, value_name = "N", help_heading = ADVERSARY)]
    #[serde(alias = "audit-la-samples")]
    pub audit_la_samples: Option<usize>,

    // ---- Processes: only --mode procs runs node processes ----
    /// The `node` binary. [default: next to this binary; built with cargo if absent]
    #[arg(long, value_name = "PATH", help_heading = PROCESSES)]
    #[serde(alias = "node-bin")]
    pub node_bin: Option<PathBuf>,

    /// Run the VNs in H VN host processes (`node vn`) instead of inside their nodes; each host serves a seeded
    /// random share of all nodes' VNs, and nodes reach theirs over the RN↔VN link. [default: 0]
    #[arg(long, value_name = "H", help_heading = PROCESSES)]
    #[serde(alias = "vn-hosts")]
    pub vn_hosts: Option<usize>,

    /// Every node process (and VN host) listens on its own loopback IP (127.1.x.y, 127.2.x.y; Linux routes
    /// all of 127/8 to loopback), as machines of a real network would have their own addresses: the
    /// address-grouping attack in `summary.json` is then measured against distinct IPs.
    #[arg(long, help_heading = PROCESSES)]
    #[serde(default, alias = "own-ips")]
    pub own_ips: bool,

    /// (root, Linux) Every node process and VN host runs in a network namespace of its own that the run
    /// creates and deletes, joined to the others by veth pairs on a bridge in one more namespace, each with
    /// its own address in 10.77.0.0/16 — which exists only inside these namespaces (no route leads out).
    /// Peers then really connect from distinct source IPs: `summary.json` → `address_grouping.observed`
    /// (with --observe-timing) scores the source addresses the VNs saw.
    #[arg(long, help_heading = PROCESSES)]
    #[serde(default)]
    pub netns: bool,

    /// With --observe-timing (root, tcpdump): capture the packets every observer receives — with --netns a
    /// `tcpdump` inside each observer's namespace, else one on `lo` filtered to the run's ports — and run the
    /// timing attack on packet times (`summary.json` → `linkage_packets`: message timing, same-millisecond
    /// coincidence and cross-correlation over all packets, each feature's AUC and the best).
    #[arg(long, help_heading = PROCESSES)]
    #[serde(default)]
    pub capture: bool,

    /// Every node logs what reaches its VNs and when (`arrivals = "arrivals.log"`), and the network
    /// observer's timing attack runs on those logs after the run (`summary.json` → `linkage`, as --audit
    /// gives in sim and inproc).
    #[arg(long, help_heading = PROCESSES)]
    #[serde(default, alias = "observe-timing")]
    pub observe_timing: bool,

    /// Once a node reports round ROUND done, SIGKILL ⌈FRACTION · n⌉ node processes (the last ones), e.g.
    /// 0.25@5. Their configs get a checkpoint directory.
    #[arg(long, value_name = "FRACTION@ROUND", help_heading = PROCESSES)]
    pub kill: Option<Kill>,

    /// Restart the nodes --kill killed this many seconds later, with `node run --resume`.
    #[arg(long, value_name = "SECONDS", help_heading = PROCESSES)]
    #[serde(alias = "restart-after")]
    pub restart_after: Option<f64>,

    /// Once a node reports round ROUND done, SIGSTOP ⌈FRACTION · n⌉ node processes (the last ones); SIGCONT
    /// them once another node reports round ROUND + ROUNDS done, e.g. 0.125@4:5.
    #[arg(long, value_name = "FRACTION@ROUND:ROUNDS", help_heading = PROCESSES)]
    pub pause: Option<Pause>,
}

/// Mode lists of [`Options::check_mode`].
const PROCS: &[Mode] = &[Mode::Procs];
const LIBP2P: &[Mode] = &[Mode::Inproc, Mode::Procs];
const IN_HARNESS: &[Mode] = &[Mode::Inproc, Mode::Sim];
const INPROC: &[Mode] = &[Mode::Inproc];

/// Why a libp2p timing option means nothing to the simulator.
const VIRTUAL_CLOCK: &str = "the simulator runs the overlay on its own virtual clock";
/// Why a process option means nothing in one process.
const NO_PROCESSES: &str = "the other modes run no node processes";

/// `vns = 4` or `vns = [1, 4, 8]` in a scenario file.
fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<usize>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(usize),
        Many(Vec<usize>),
    }
    Ok(Some(match OneOrMany::deserialize(d)? {
        OneOrMany::One(k) => vec![k],
        OneOrMany::Many(v) => v,
    }))
}

/// `device = "cuda:0"`, `device = "cuda:0,cpu"` or `device = ["cuda:0", "cpu"]` in a scenario file.
fn devices<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<DeviceSpec>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    let names = match OneOrMany::deserialize(d)? {
        OneOrMany::One(list) => list.split(',').map(str::to_string).collect(),
        OneOrMany::Many(v) => v,
    };
    names
        .iter()
        .map(|n| n.parse().map_err(serde::de::Error::custom))
        .collect::<Result<_, _>>()
        .map(Some)
}

/// `model = "mlp:16"`, `partition = "dirichlet:0.1"`: a scenario file holds the command line's text form, parsed by
/// the same `FromStr` (whose error lists the valid forms).
mod text {
    use std::fmt::Display;
    use std::str::FromStr;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer, T: Display>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.collect_str(v),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
    where
        D: Deserializer<'de>,
        T: FromStr,
        T::Err: Display,
    {
        let text = String::deserialize(d)?;
        text.parse().map(Some).map_err(serde::de::Error::custom)
    }
}

/// Fields of [`Options`] a scenario file cannot set (and clap's own flags).
const NOT_IN_FILES: [&str; 5] = ["scenario", "plain", "ui", "help", "version"];

impl Options {
    /// Fills every option not given here from `file`.
    pub fn or(self, file: Options) -> Options {
        Options {
            scenario: self.scenario.or(file.scenario),
            mode: self.mode.or(file.mode),
            seed: self.seed.or(file.seed),
            out: self.out.or(file.out),
            plain: self.plain || file.plain,
            ui: self.ui,
            // Network.
            nodes: self.nodes.or(file.nodes),
            vns: self.vns.or(file.vns),
            degree: self.degree.or(file.degree),
            rounds: self.rounds.or(file.rounds),
            algo: self.algo.or(file.algo),
            dropout: self.dropout.or(file.dropout),
            transport: self.transport.or(file.transport),
            // Learning.
            dataset: self.dataset.or(file.dataset),
            data_dir: self.data_dir.or(file.data_dir),
            model: self.model.or(file.model),
            lr: self.lr.or(file.lr),
            batch: self.batch.or(file.batch),
            // Epochs and steps are one choice: a command-line value of either replaces the file's.
            local_epochs: if self.local_steps.is_some() {
                self.local_epochs
            } else {
                self.local_epochs.or(file.local_epochs)
            },
            local_steps: if self.local_epochs.is_some() {
                self.local_steps
            } else {
                self.local_steps.or(file.local_steps)
            },
            clip: self.clip.or(file.clip),
            partition: self.partition.or(file.partition),
            alpha: self.alpha.or(file.alpha),
            target: self.target.or(file.target),
            test_samples: self.test_samples.or(file.test_samples),
            device: self.device.or(file.device),
            // Timing.
            timing: self.timing.or(file.timing),
            substep_ms: self.substep_ms.or(file.substep_ms),
            lookahead: self.lookahead.or(file.lookahead),
            release_delay_us: self.release_delay_us.or(file.release_delay_us),
            shared_vn_threads: self.shared_vn_threads || file.shared_vn_threads,
            chunk_slot_ms: self.chunk_slot_ms.or(file.chunk_slot_ms),
            no_chunk_slots: self.no_chunk_slots || file.no_chunk_slots,
            warmup_ms: self.warmup_ms.or(file.warmup_ms),
            send_jitter_ms: self.send_jitter_ms.or(file.send_jitter_ms),
            send_pace_ms: self.send_pace_ms.or(file.send_pace_ms),
            send_pace_auto: self.send_pace_auto || file.send_pace_auto,
            // Adversaries and audit.
            value_ratio: self.value_ratio.or(file.value_ratio),
            value_floor: self.value_floor.or(file.value_floor),
            value_ceiling: self.value_ceiling.or(file.value_ceiling),
            hide_walk_origin: self.hide_walk_origin || file.hide_walk_origin,
            audit: self.audit || file.audit,
            audit_chunks: self.audit_chunks.or(file.audit_chunks),
            audit_every: self.audit_every.or(file.audit_every),
            audit_la_samples: self.audit_la_samples.or(file.audit_la_samples),
            // Processes.
            node_bin: self.node_bin.or(file.node_bin),
            vn_hosts: self.vn_hosts.or(file.vn_hosts),
            own_ips: self.own_ips || file.own_ips,
            netns: self.netns || file.netns,
            capture: self.capture || file.capture,
            observe_timing: self.observe_timing || file.observe_timing,
            kill: self.kill.or(file.kill),
            restart_after: self.restart_after.or(file.restart_after),
            pause: self.pause.or(file.pause),
        }
    }

    /// The options that only some modes read, each with whether it was given here, the modes that read it and
    /// why the others do not. Every other option applies to every mode.
    fn mode_bound(&self) -> [(&'static str, bool, &'static [Mode], &'static str); 22] {
        let harness =
            "the audit runs inside the harness, which cannot watch separate node processes";
        [
            (
                "--transport",
                self.transport.is_some(),
                INPROC,
                "only in-process VNs choose how they connect (node processes use TCP, the simulator no sockets)",
            ),
            ("--timing", self.timing.is_some(), LIBP2P, VIRTUAL_CLOCK),
            (
                "--substep-ms",
                self.substep_ms.is_some(),
                LIBP2P,
                VIRTUAL_CLOCK,
            ),
            (
                "--lookahead",
                self.lookahead.is_some(),
                LIBP2P,
                VIRTUAL_CLOCK,
            ),
            (
                "--release-delay-us",
                self.release_delay_us.is_some(),
                LIBP2P,
                VIRTUAL_CLOCK,
            ),
            (
                "--shared-vn-threads",
                self.shared_vn_threads,
                LIBP2P,
                VIRTUAL_CLOCK,
            ),
            (
                "--chunk-slot-ms",
                self.chunk_slot_ms.is_some(),
                LIBP2P,
                VIRTUAL_CLOCK,
            ),
            (
                "--no-chunk-slots",
                self.no_chunk_slots,
                LIBP2P,
                VIRTUAL_CLOCK,
            ),
            (
                "--warmup-ms",
                self.warmup_ms.is_some(),
                LIBP2P,
                VIRTUAL_CLOCK,
            ),
            ("--audit", self.audit, IN_HARNESS, harness),
            (
                "--audit-chunks",
                self.audit_chunks.is_some(),
                IN_HARNESS,
                harness,
            ),
            (
                "--audit-every",
                self.audit_every.is_some(),
                IN_HARNESS,
                harness,
            ),
            (
                "--audit-la-samples",
                self.audit_la_samples.is_some(),
                IN_HARNESS,
                harness,
            ),
            ("--node-bin", self.node_bin.is_some(), PROCS, NO_PROCESSES),
            ("--vn-hosts", self.vn_hosts.is_some(), PROCS, NO_PROCESSES),
            ("--own-ips", self.own_ips, PROCS, NO_PROCESSES),
            ("--netns", self.netns, PROCS, NO_PROCESSES),
            ("--capture", self.capture, PROCS, NO_PROCESSES),
            (
                "--observe-timing",
                self.observe_timing,
                PROCS,
                "it reads node processes' arrival logs (--audit observes in sim and inproc)",
            ),
            ("--kill", self.kill.is_some(), PROCS, NO_PROCESSES),
            (
                "--restart-after",
                self.restart_after.is_some(),
                PROCS,
                NO_PROCESSES,
            ),
            ("--pause", self.pause.is_some(), PROCS, NO_PROCESSES),
        ]
    }

    /// Refuses an option given for a mode that would ignore it, naming the option and the modes it applies to.
    pub fn check_mode(&self, mode: Mode) -> anyhow::Result<()> {
        for (flag, given, modes, why) in self.mode_bound() {
            if given && !modes.contains(&mode) {
                let names: Vec<String> = modes.iter().map(Mode::to_string).collect();
                bail!(
                    "{flag} applies only to --mode {}, not to --mode {mode}: {why}",
                    names.join(" or ")
                );
            }
        }
        // On a real network the chunk grid replaces the send jitter (`node::net::chunk_slots`): a jitter
        // given there would be silently ignored.
        if mode != Mode::Sim && self.send_jitter_ms.is_some() && !self.no_chunk_slots {
            bail!(
                "--send-jitter-ms is not applied with --mode {mode}: chunks leave on the shared grid of slots \
                 there (each VN at an offset of its own in place of the jitter); add --no-chunk-slots to send \
                 them after the jitter instead"
            );
        }
        Ok(())
    }

    /// The keys a scenario file may hold, under the help's headings ("run" for the run's own options). All
    /// are top-level keys: the headings group the help, not the file.
    pub fn scenario_keys() -> Vec<(String, Vec<String>)> {
        let cmd = Options::command();
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for arg in cmd.get_arguments() {
            let key = arg.get_id().as_str();
            if NOT_IN_FILES.contains(&key) {
                continue;
            }
            let heading = arg.get_help_heading().unwrap_or("run").to_lowercase();
            match groups.iter_mut().find(|(h, _)| *h == heading) {
                Some((_, keys)) => keys.push(key.to_string()),
                None => groups.push((heading, vec![key.to_string()])),
            }
        }
        groups
    }

    /// Reads a scenario file. Errors name the file and, for TOML errors, the line and column.
    pub fn from_file(path: &std::path::Path) -> anyhow::Result<Options> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("scenario file {}: {e}", path.display()))?;
        Self::from_toml(path, &text)
    }

    /// Parses scenario text; `path` names the file in errors and anchors its relative paths (`data_dir`,
    /// `out`, `node_bin` are relative to the file, like the node's config).
    pub fn from_toml(path: &std::path::Path, text: &str) -> anyhow::Result<Options> {
        let mut o: Options = toml::from_str(text).map_err(|e| {
            let at = e.span().map(|s| locate(text, s.start)).unwrap_or_default();
            let keys: Vec<String> = Options::scenario_keys()
                .into_iter()
                .map(|(heading, keys)| format!("    {heading}: {}", keys.join(", ")))
                .collect();
            anyhow::anyhow!(
                "scenario file {}{at}: {}\n  keys (all at top level, as the flags are named, in snake_case):\n{}",
                path.display(),
                e.message().trim_end(),
                keys.join("\n")
            )
        })?;
        let base = path.parent().unwrap_or(std::path::Path::new(""));
        let rel = |p: PathBuf| {
            if p.is_absolute() || base.as_os_str().is_empty() {
                p
            } else {
                base.join(p)
            }
        };
        o.data_dir = o.data_dir.map(rel);
        o.out = o.out.map(rel);
        o.node_bin = o.node_bin.map(rel);
        Ok(o)
    }
}

/// ", line L, column C" of a byte offset.
fn locate(text: &str, offset: usize) -> String {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!(", line {line}, column {col}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn scenario_keys_match_the_flags() {
        let o = Options::from_toml(
            Path::new("/s/x.toml"),
            "mode = \"sim\"\nnodes = 5\nvns = [1, 2]\ndata_dir = \"d\"\nlocal_steps = 3\nalgo = \"el\"\ntiming = \"lan\"\n",
        )
        .unwrap();
        assert_eq!(o.mode, Some(Mode::Sim));
        assert_eq!(o.vns, Some(vec![1, 2]));
        assert_eq!(o.data_dir.as_deref(), Some(Path::new("/s/d")));
        assert_eq!(o.algo, Some(AlgoSpec::El));
        let o = Options::from_toml(Path::new("x.toml"), "vns = 3").unwrap();
        assert_eq!(o.vns, Some(vec![3]));
    }

    #[test]
    fn devices_come_as_a_comma_list_or_a_scenario_string_or_array() {
        let o = Options::try_parse_from(["testnet", "--device", "cuda:1,cpu"]).unwrap();
        assert_eq!(o.device, Some(vec![DeviceSpec::Cuda(1), DeviceSpec::Cpu]));
        for (text, want) in [
            ("device = \"metal\"", vec![DeviceSpec::Metal(0)]),
            (
                "device = \"cuda:0,cpu\"",
                vec![DeviceSpec::Cuda(0), DeviceSpec::Cpu],
            ),
            (
                "device = [\"cpu\", \"cuda:2\"]",
                vec![DeviceSpec::Cpu, DeviceSpec::Cuda(2)],
            ),
        ] {
            let o = Options::from_toml(Path::new("d.toml"), text).unwrap();
            assert_eq!(o.device, Some(want), "{text}");
        }
        assert!(Options::try_parse_from(["testnet", "--device", "gpu"]).is_err());
        let e = Options::from_toml(Path::new("d.toml"), "device = \"gpu\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cuda[:N]"), "{e}");
    }

    #[test]
    fn scenario_errors_name_the_file_line_and_key() {
        let e = Options::from_toml(Path::new("bad.toml"), "nodes = 4\nnodez = 3\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("bad.toml") && e.contains("line 2") && e.contains("nodez"),
            "{e}"
        );
        let e = Options::from_toml(Path::new("bad.toml"), "nodes = \"four\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 1"), "{e}");
        let e = Options::from_toml(Path::new("bad.toml"), "mode = \"cloud\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cloud"), "{e}");
    }

    #[test]
    fn command_line_wins_and_epochs_replace_steps() {
        let cli = Options {
            nodes: Some(3),
            local_epochs: Some(2),
            ..Default::default()
        };
        let file = Options {
            nodes: Some(9),
            rounds: Some(7),
            local_steps: Some(5),
            ..Default::default()
        };
        let o = cli.or(file);
        assert_eq!(
            (o.nodes, o.rounds, o.local_epochs, o.local_steps),
            (Some(3), Some(7), Some(2), None)
        );
    }

    /// Every option that only some modes read, with arguments that parse.
    const MODE_BOUND: [&[&str]; 22] = [
        &["--transport", "memory"],
        &["--timing", "lan"],
        &["--substep-ms", "100"],
        &["--lookahead", "2"],
        &["--release-delay-us", "2000"],
        &["--shared-vn-threads"],
        &["--chunk-slot-ms", "40"],
        &["--no-chunk-slots"],
        &["--warmup-ms", "1000"],
        &["--audit"],
        &["--audit-chunks", "4"],
        &["--audit-every", "2"],
        &["--audit-la-samples", "50"],
        &["--node-bin", "node"],
        &["--vn-hosts", "2"],
        &["--own-ips"],
        &["--netns"],
        &["--capture"],
        &["--observe-timing"],
        &["--kill", "0.25@5"],
        &["--restart-after", "1"],
        &["--pause", "0.125@4:5"],
    ];

    fn parse(args: &[&str]) -> Options {
        Options::try_parse_from(std::iter::once("testnet").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn procs_only_options_are_refused_in_the_other_modes() {
        let procs_only = &MODE_BOUND[13..];
        assert_eq!(procs_only.len(), 9);
        for args in procs_only {
            let flag = args[0];
            for mode in ["sim", "inproc"] {
                let o = parse(&[&["--mode", mode], *args].concat());
                // Through `resolve`, as the binary does.
                let e = crate::scenario::Settings::resolve(o)
                    .unwrap_err()
                    .to_string();
                assert!(
                    e.starts_with(flag)
                        && e.contains("only to --mode procs")
                        && e.contains(&format!("not to --mode {mode}")),
                    "{e}"
                );
            }
            assert!(parse(args).check_mode(Mode::Procs).is_ok(), "{flag}");
        }
    }

    #[test]
    fn other_mode_bound_options_are_refused_where_they_would_be_ignored() {
        for (args, refused_in) in [
            (MODE_BOUND[0], &[Mode::Sim, Mode::Procs][..]),
            (MODE_BOUND[1], &[Mode::Sim]),
            (MODE_BOUND[2], &[Mode::Sim]),
            (MODE_BOUND[3], &[Mode::Sim]),
            (MODE_BOUND[4], &[Mode::Sim]),
            (MODE_BOUND[5], &[Mode::Sim]),
            (MODE_BOUND[6], &[Mode::Sim]),
            (MODE_BOUND[7], &[Mode::Sim]),
            (MODE_BOUND[8], &[Mode::Sim]),
            (MODE_BOUND[9], &[Mode::Procs]),
            (MODE_BOUND[10], &[Mode::Procs]),
            (MODE_BOUND[11], &[Mode::Procs]),
            (MODE_BOUND[12], &[Mode::Procs]),
        ] {
            let o = parse(args);
            for mode in [Mode::Inproc, Mode::Procs, Mode::Sim] {
                let r = o.check_mode(mode);
                if refused_in.contains(&mode) {
                    let e = r.unwrap_err().to_string();
                    assert!(
                        e.starts_with(args[0]) && e.contains(&format!("not to --mode {mode}")),
                        "{e}"
                    );
                } else {
                    assert!(r.is_ok(), "{} with --mode {mode}: {r:?}", args[0]);
                }
            }
        }
        // The send options and the value bounds act in every mode.
        let o = parse(&["--send-pace-ms", "5", "--send-pace-auto"]);
        for mode in [Mode::Inproc, Mode::Procs, Mode::Sim] {
            assert!(o.check_mode(mode).is_ok());
        }
        // The send jitter only where no chunk grid replaces it: the simulator, or with --no-chunk-slots.
        let jitter = parse(&["--send-jitter-ms", "5"]);
        assert!(jitter.check_mode(Mode::Sim).is_ok());
        for mode in [Mode::Inproc, Mode::Procs] {
            let e = jitter.check_mode(mode).unwrap_err().to_string();
            assert!(e.contains("--no-chunk-slots"), "{e}");
            assert!(
                parse(&["--send-jitter-ms", "5", "--no-chunk-slots"])
                    .check_mode(mode)
                    .is_ok()
            );
        }
    }

    #[test]
    fn every_mode_bound_option_is_checked_and_named_as_its_flag() {
        let table = Options::default().mode_bound();
        assert_eq!(table.len(), MODE_BOUND.len());
        for ((flag, given, ..), args) in table.iter().zip(MODE_BOUND) {
            assert_eq!(*flag, args[0]);
            assert!(!given, "{flag} given by default");
            let o = parse(args);
            let (.., given, _, _) = o
                .mode_bound()
                .into_iter()
                .find(|(f, ..)| f == flag)
                .unwrap();
            assert!(given, "{flag} given but not seen");
        }
    }

    #[test]
    fn typed_options_refuse_bad_values_at_parse_time_listing_the_valid_ones() {
        for (flag, bad, valid) in [
            ("--dataset", "imagenet", "sent140"),
            ("--model", "gpt", "resnet18"),
            ("--partition", "zipf", "dirichlet:<alpha>"),
            ("--kill", "0.25", "FRACTION@ROUND"),
            ("--kill", "1.5@2", "FRACTION in (0, 1)"),
            ("--pause", "0.5@3", "FRACTION@ROUND:ROUNDS"),
        ] {
            let e = Options::try_parse_from(["testnet", flag, bad]).unwrap_err();
            use clap::error::ErrorKind::{InvalidValue, ValueValidation};
            assert!(matches!(e.kind(), InvalidValue | ValueValidation), "{e}");
            let e = e.to_string();
            assert!(
                e.contains(flag) && e.contains(bad) && e.contains(valid),
                "{e}"
            );
            // The scenario file reads the same text with the same parser.
            let key = flag.trim_start_matches("--");
            let e = Options::from_toml(Path::new("s.toml"), &format!("{key} = \"{bad}\""))
                .unwrap_err()
                .to_string();
            assert!(e.contains("s.toml") && e.contains(valid), "{e}");
        }
        let o = parse(&[
            "--dataset",
            "synthetic-images-small",
            "--model",
            "mlp:16",
            "--partition",
            "dirichlet:0.5",
            "--kill",
            "0.25@5",
            "--pause",
            "0.125@4:5",
        ]);
        assert_eq!(o.dataset, Some(DatasetName::SyntheticImagesSmall));
        assert_eq!(o.model, Some(ModelSpec::Mlp { hidden: vec![16] }));
        assert_eq!(
            o.partition,
            Some(Partition::Dirichlet {
                alpha: 0.5,
                min_samples: 32
            })
        );
        assert_eq!(o.kill.map(|k| k.to_string()).as_deref(), Some("0.25@5"));
        assert_eq!(o.pause.map(|p| p.to_string()).as_deref(), Some("0.125@4:5"));
        let f = Options::from_toml(
            Path::new("s.toml"),
            "dataset = \"synthetic-images-small\"\nmodel = \"mlp:16\"\npartition = \"dirichlet:0.5\"\nkill = \"0.25@5\"\npause = \"0.125@4:5\"\n",
        )
        .unwrap();
        assert_eq!(
            (f.dataset, f.model, f.partition, f.kill, f.pause),
            (o.dataset, o.model, o.partition, o.kill, o.pause)
        );
    }

    #[test]
    fn dataset_names_are_spelled_alike_everywhere() {
        for d in DatasetName::value_variants() {
            let clap_name = d.to_possible_value().unwrap().get_name().to_string();
            assert_eq!(clap_name, d.as_str());
            let o = Options::from_toml(Path::new("s.toml"), &format!("dataset = \"{d}\"")).unwrap();
            assert_eq!(o.dataset, Some(*d));
            // `models` knows every name.
            assert_eq!(
                d.spec(None).unwrap().name(),
                d.as_str().split('-').next().unwrap()
            );
        }
    }

    #[test]
    fn scenario_files_stay_flat_and_strict() {
        // A group heading is not a table: the keys stay at top level.
        let e = Options::from_toml(Path::new("g.toml"), "[network]\nnodes = 4\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("g.toml") && e.contains("network"), "{e}");
        let e = Options::from_toml(Path::new("g.toml"), "rounds = 3\nvn_host = 2\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("vn_host"), "{e}");
        assert!(
            e.contains("processes (--mode procs): node_bin, vn_hosts"),
            "the key list, by group: {e}"
        );
        // Every key listed is one serde knows (a wrong type, not an unknown field).
        let keys: Vec<String> = Options::scenario_keys()
            .into_iter()
            .flat_map(|(_, k)| k)
            .collect();
        assert_eq!(keys.len(), 51, "53 flags less --scenario and --plain");
        for key in keys {
            let e = Options::from_toml(Path::new("k.toml"), &format!("{key} = {{}}"))
                .unwrap_err()
                .to_string();
            assert!(!e.contains("unknown field"), "{key}: {e}");
        }
    }

    #[test]
    fn help_lists_the_options_under_what_they_act_on() {
        let help = Options::command().render_long_help().to_string();
        let heading = |h: &str| {
            help.find(&format!("\n{h}:\n"))
                .unwrap_or_else(|| panic!("no heading {h:?} in the help:\n{help}"))
        };
        // Where an option's own line is: `  -n, --nodes <NODES>` or `      --audit` (descriptions are indented
        // further).
        let flag = |f: &str| {
            let mut at = 0;
            for line in help.split_inclusive('\n') {
                let indent = line.len() - line.trim_start().len();
                if indent <= 6 && line.split_whitespace().find(|w| w.starts_with("--")) == Some(f) {
                    return at;
                }
                at += line.len();
            }
            panic!("no option {f} in the help:\n{help}")
        };
        let headings = [NETWORK, LEARNING, TIMING, ADVERSARY, PROCESSES].map(heading);
        assert!(headings.is_sorted(), "{help}");
        // A few options of each group sit under their heading.
        for (group, flags) in [
            (0, &["--nodes", "--algo", "--transport"][..]),
            (1, &["--dataset", "--model", "--partition"]),
            (2, &["--timing", "--send-pace-ms"]),
            (3, &["--value-ratio", "--audit", "--audit-la-samples"]),
            (4, &["--node-bin", "--kill", "--pause"]),
        ] {
            let end = headings.get(group + 1).copied().unwrap_or(help.len());
            for f in flags {
                let i = flag(f);
                assert!(
                    i > headings[group] && i < end,
                    "{f} not under heading {group}:\n{help}"
                );
            }
        }
        // The run's own options stay first, under clap's heading.
        assert!(flag("--mode") < headings[0] && flag("--scenario") < headings[0]);
        // The bad-value errors name the valid datasets.
        assert!(help.contains("synthetic-images-small"), "{help}");
    }

    #[test]
    fn vns_list_parses() {
        let o = Options::try_parse_from(["testnet", "--vns", "1,2,4", "--mode", "sim"]).unwrap();
        assert_eq!(o.vns, Some(vec![1, 2, 4]));
        assert!(
            Options::try_parse_from(["testnet", "--local-epochs", "1", "--local-steps", "2"])
                .is_err()
        );
    }
}
