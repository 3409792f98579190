//! The options, shared by the command line and `--scenario FILE.toml`: one struct parsed by clap and by serde,
//! every field optional so that "not given" is visible. Precedence: command line > scenario file > defaults
//! (the defaults live in `scenario.rs`, where options become [`crate::scenario::Settings`]).

use std::fmt;
use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use node::algo::AlgoSpec;
use serde::{Deserialize, Deserializer, Serialize};

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

/// `cargo run -p testnet -- [OPTIONS]`: run a local Shatter network and write a report.
///
/// Every option can also be given in a `--scenario FILE.toml` under the same name (snake_case, e.g.
/// `data_dir = "..."`, `vns = [1, 4, 8]`); the command line wins over the file.
#[derive(Parser, Debug, Clone, Default, Serialize, Deserialize)]
#[command(name = "testnet", version, about = "Run a local Shatter network (in-process, multi-process or simulated) with live progress, a report and plots", long_about = None)]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    /// TOML file with any of these options (command-line values override it).
    #[arg(long, value_name = "FILE.toml")]
    #[serde(skip)]
    pub scenario: Option<PathBuf>,

    /// inproc: one process, real libp2p on 127.0.0.1; procs: one `node` process per RN; sim: in-memory
    /// simulator. [default: inproc]
    #[arg(long, value_enum)]
    pub mode: Option<Mode>,

    /// Real nodes (RNs). [default: 8]
    #[arg(long, short = 'n')]
    pub nodes: Option<usize>,

    /// Virtual nodes per RN (k); a list sweeps k: `--vns 1,2,4,8`. [default: 4; `--algo el`: 1]
    #[arg(long, short = 'k', value_delimiter = ',', num_args = 1..)]
    #[serde(deserialize_with = "one_or_many")]
    pub vns: Option<Vec<usize>>,

    /// Overlay degree r: neighbours per VN per round. [default: 4]
    #[arg(long, short = 'r')]
    pub degree: Option<usize>,

    /// Rounds. [default: 20]
    #[arg(long)]
    pub rounds: Option<u64>,

    /// shatter | el | el-local | dpsgd | chunking:K | sparsify-random:F | muffliato:SIGMA | ghp:SIGMA |
    /// random:SIGMA | pdmm:SIGMA_Z[:THETA[:RHO[:MU]]] | admm:SIGMA_Z.
    /// Shatter, ghp and random run each --vns (ghp with k > 1 is Shatter + GHP); the others send through one
    /// VN per RN. [default: shatter, or el when --vns is 1]
    #[arg(long, value_name = "ALGO")]
    pub algo: Option<AlgoSpec>,

    /// synthetic | synthetic-images | synthetic-images-small | movielens | sent140 | cifar10 | mnist.
    /// [default: synthetic]
    #[arg(long)]
    pub dataset: Option<String>,

    /// Directory of a real dataset. [default: ../shared/data/<dataset>, e.g.
    /// ../shared/data/movielens/ml-latest-small]
    #[arg(long, value_name = "DIR")]
    #[serde(alias = "data-dir")]
    pub data_dir: Option<PathBuf>,

    /// mlp[:w1,w2,..] | lenet | resnet8 | resnet18 | mf[:factors] | mf-centred[:factors]. [default: mf for
    /// ratings, mlp otherwise]
    #[arg(long)]
    pub model: Option<String>,

    /// SGD learning rate. [default: 0.075 movielens, 0.005 sent140, 0.05 otherwise (paper §6)]
    #[arg(long)]
    pub lr: Option<f64>,

    /// Mini-batch size. [default: 32 (paper)]
    #[arg(long)]
    pub batch: Option<usize>,

    /// Local epochs per round. [default: 1 (paper)]
    #[arg(long, conflicts_with = "local_steps")]
    #[serde(alias = "local-epochs")]
    pub local_epochs: Option<usize>,

    /// Local SGD steps per round (instead of epochs).
    #[arg(long)]
    #[serde(alias = "local-steps")]
    pub local_steps: Option<usize>,

    /// Per-sample gradient clipping: every sample's gradient scaled to L2 norm ≤ B before the batch average
    /// (the bound GHP's DP accountant assumes; ghp runs then report ε in summary.json). [default: off]
    #[arg(long, value_name = "B")]
    pub clip: Option<f64>,

    /// iid | dirichlet[:alpha[,min]] | user. [default: user for movielens and sent140, iid otherwise]
    #[arg(long)]
    pub partition: Option<String>,

    /// Dirichlet concentration α (implies --partition dirichlet). [default: 0.1 (paper)]
    #[arg(long)]
    pub alpha: Option<f64>,

    /// Seed of the data, the initial model, the chunk partition and the simulator. [default: 1]
    #[arg(long)]
    pub seed: Option<u64>,

    /// Output directory. [default: target/testnet/<date>-<time>-<mode>-<dataset>]
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// Target test metric: the summary reports the first round whose mean over RNs reaches it (RMSE: at or
    /// below; accuracy: at or above). [default: 1.10 for movielens (the paper's EL figure), none otherwise]
    #[arg(long)]
    pub target: Option<f64>,

    /// Evaluate each round on at most this many test samples (a seeded subset). [default: all]
    #[arg(long)]
    #[serde(alias = "test-samples")]
    pub test_samples: Option<usize>,

    /// Protocol timing for inproc and procs. [default: auto]
    #[arg(long, value_enum)]
    pub timing: Option<TimingChoice>,

    /// Overlay sub-step in ms, overriding the timing's (must exceed a round trip; the overlay window is
    /// 5r + 4 sub-steps).
    #[arg(long, value_name = "MS")]
    #[serde(alias = "substep-ms")]
    pub substep_ms: Option<u64>,

    /// Upper bound of each VN's random delay before it sends its chunk, in ms (every mode; sim default
    /// 1000, the libp2p timings' own otherwise). Sibling VNs get their chunks at the same instant: a longer
    /// delay spreads their sends, at the cost of round time (`summary.json` → `linkage` with --audit).
    #[arg(long, value_name = "MS")]
    #[serde(alias = "send-jitter-ms")]
    pub send_jitter_ms: Option<u64>,

    /// The earliest each VN sends its chunk, in ms from its node's start of the round (every mode; default 0:
    /// off). About the slowest node's training time makes every VN send at about the same time, so chunk
    /// timing stops linking siblings without the round cost of a long --send-jitter-ms.
    #[arg(long, value_name = "MS")]
    #[serde(alias = "send-pace-ms")]
    pub send_pace_ms: Option<u64>,

    /// Each VN learns its send pace from when its neighbours' chunks come (the slowest neighbour's training,
    /// about); --send-pace-ms is then the floor.
    #[arg(long)]
    #[serde(default, alias = "send-pace-auto")]
    pub send_pace_auto: bool,

    /// Overlay walks name no origin and their answers go back along the path, so that no message shows a
    /// walk's first hop (costs overlay messages and, with short sub-steps, edges; see the README).
    #[arg(long)]
    #[serde(default, alias = "hide-walk-origin")]
    pub hide_walk_origin: bool,

    /// Rounds each VN negotiates its overlay ahead of its node's round (0 ..= 16), overriding the timing's.
    #[arg(long, value_name = "ROUNDS")]
    pub lookahead: Option<u64>,

    /// Warm-up before round 0 in ms, overriding the timing's: the VNs open their connections in its first
    /// half and negotiate round 0's overlay in its tail, so a warm-up shorter than that window makes round 0
    /// wait for the rest.
    #[arg(long, value_name = "MS")]
    #[serde(alias = "warmup-ms")]
    pub warmup_ms: Option<u64>,

    /// Value rule (issue 14): a VN refuses a chunk holding a value larger than this many times the largest
    /// |value| of its own latest chunk, clamped to [--value-floor, --value-ceiling].
    /// [default: 1000]
    #[arg(long, value_name = "X")]
    #[serde(alias = "value-ratio")]
    pub value_ratio: Option<f32>,

    /// Received values up to this magnitude are always accepted (also the bound before a VN's first own
    /// chunk). [default: 1000]
    #[arg(long, value_name = "V")]
    #[serde(alias = "value-floor")]
    pub value_floor: Option<f32>,

    /// Received values beyond this magnitude are always refused. [default: 1e6]
    #[arg(long, value_name = "V")]
    #[serde(alias = "value-ceiling")]
    pub value_ceiling: Option<f32>,

    /// Dropout rate (Appendix E): each round each node sits out with this probability (10% likelier after a
    /// round it missed) — no training, overlay or exchange. [default: 0]
    #[arg(long, value_name = "P")]
    pub dropout: Option<f64>,

    /// Procs mode: run the VNs in H VN host processes (`node vn`) instead of inside their nodes; each host
    /// serves a seeded random share of all nodes' VNs, and nodes reach theirs over the RN↔VN link. [default: 0]
    #[arg(long, value_name = "H")]
    #[serde(alias = "vn-hosts")]
    pub vn_hosts: Option<usize>,

    /// Procs mode: every node process (and VN host) listens on its own loopback IP (127.1.x.y, 127.2.x.y;
    /// Linux routes all of 127/8 to loopback), as machines of a real network would have their own addresses:
    /// the address-grouping attack in `summary.json` is then measured against distinct IPs.
    #[arg(long)]
    #[serde(default, alias = "own-ips")]
    pub own_ips: bool,

    /// Procs mode (root, Linux): every node process and VN host runs in a network namespace of its own that
    /// the run creates and deletes, joined to the others by veth pairs on a bridge in one more namespace, each
    /// with its own address in 10.77.0.0/16 — which exists only inside these namespaces (no route leads out).
    /// Peers then really connect from distinct source IPs: `summary.json` → `address_grouping.observed`
    /// (with --observe-timing) scores the source addresses the VNs saw.
    #[arg(long)]
    #[serde(default)]
    pub netns: bool,

    /// Procs mode with --netns and --observe-timing: capture every observer's packets with `tcpdump` inside
    /// its namespace and run the timing attack on packet arrival times (`summary.json` → `linkage_packets`).
    #[arg(long)]
    #[serde(default)]
    pub capture: bool,

    /// Procs mode: every node logs what reaches its VNs and when (`arrivals = "arrivals.log"`), and the
    /// network observer's timing attack runs on those logs after the run (`summary.json` → `linkage`, as
    /// --audit gives in sim and inproc).
    #[arg(long)]
    #[serde(default, alias = "observe-timing")]
    pub observe_timing: bool,

    /// Procs mode: once a node reports round ROUND done, SIGKILL ⌈FRACTION · n⌉ node processes (the last
    /// ones), e.g. 0.25@5. Their configs get a checkpoint directory.
    #[arg(long, value_name = "FRACTION@ROUND")]
    pub kill: Option<String>,

    /// Procs mode: restart the nodes --kill killed this many seconds later, with `node run --resume`.
    #[arg(long, value_name = "SECONDS")]
    #[serde(alias = "restart-after")]
    pub restart_after: Option<f64>,

    /// Procs mode: once a node reports round ROUND done, SIGSTOP ⌈FRACTION · n⌉ node processes (the last
    /// ones); SIGCONT them once another node reports round ROUND + ROUNDS done, e.g. 0.125@4:5.
    #[arg(long, value_name = "FRACTION@ROUND:ROUNDS")]
    pub pause: Option<String>,

    /// How in-process VNs connect (inproc): tcp (127.0.0.1) | memory (libp2p's in-process transport: no file
    /// descriptor per connection). [default: tcp]
    #[arg(long, value_enum)]
    pub transport: Option<TransportChoice>,

    /// The `node` binary for --mode procs. [default: next to this binary; built with cargo if absent]
    #[arg(long, value_name = "PATH")]
    #[serde(alias = "node-bin")]
    pub node_bin: Option<PathBuf>,

    /// Privacy audit (inproc and sim): every RN attacks chunks its VNs received (membership inference and
    /// linkability against the true sender, known only to the harness); results per round in metrics.jsonl,
    /// summary.json and audit_*.svg.
    #[arg(long)]
    pub audit: bool,

    /// Chunks each RN attacks per audited round (the first ones its VNs accept). [default: 8 (paper)]
    #[arg(long)]
    #[serde(alias = "audit-chunks")]
    pub audit_chunks: Option<usize>,

    /// Audit every this many rounds (rounds 0, n, 2n, …; the last round is always audited; n ≥ --rounds: the
    /// last round only). [default: 1]
    #[arg(long)]
    #[serde(alias = "audit-every")]
    pub audit_every: Option<u64>,

    /// Training samples of each other node the linkability attack scores per chunk. [default: 200]
    #[arg(long)]
    #[serde(alias = "audit-la-samples")]
    pub audit_la_samples: Option<usize>,

    /// Print one line per round instead of a progress bar, even on a terminal.
    #[arg(long)]
    #[serde(skip)]
    pub plain: bool,
}

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

impl Options {
    /// Fills every option not given here from `file`.
    pub fn or(self, file: Options) -> Options {
        Options {
            scenario: self.scenario.or(file.scenario),
            mode: self.mode.or(file.mode),
            nodes: self.nodes.or(file.nodes),
            vns: self.vns.or(file.vns),
            degree: self.degree.or(file.degree),
            rounds: self.rounds.or(file.rounds),
            algo: self.algo.or(file.algo),
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
            seed: self.seed.or(file.seed),
            out: self.out.or(file.out),
            target: self.target.or(file.target),
            test_samples: self.test_samples.or(file.test_samples),
            timing: self.timing.or(file.timing),
            substep_ms: self.substep_ms.or(file.substep_ms),
            send_jitter_ms: self.send_jitter_ms.or(file.send_jitter_ms),
            send_pace_ms: self.send_pace_ms.or(file.send_pace_ms),
            send_pace_auto: self.send_pace_auto || file.send_pace_auto,
            hide_walk_origin: self.hide_walk_origin || file.hide_walk_origin,
            lookahead: self.lookahead.or(file.lookahead),
            warmup_ms: self.warmup_ms.or(file.warmup_ms),
            value_ratio: self.value_ratio.or(file.value_ratio),
            value_floor: self.value_floor.or(file.value_floor),
            value_ceiling: self.value_ceiling.or(file.value_ceiling),
            dropout: self.dropout.or(file.dropout),
            kill: self.kill.or(file.kill),
            vn_hosts: self.vn_hosts.or(file.vn_hosts),
            own_ips: self.own_ips || file.own_ips,
            netns: self.netns || file.netns,
            capture: self.capture || file.capture,
            observe_timing: self.observe_timing || file.observe_timing,
            restart_after: self.restart_after.or(file.restart_after),
            pause: self.pause.or(file.pause),
            node_bin: self.node_bin.or(file.node_bin),
            transport: self.transport.or(file.transport),
            audit: self.audit || file.audit,
            audit_chunks: self.audit_chunks.or(file.audit_chunks),
            audit_every: self.audit_every.or(file.audit_every),
            audit_la_samples: self.audit_la_samples.or(file.audit_la_samples),
            plain: self.plain || file.plain,
        }
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
            anyhow::anyhow!(
                "scenario file {}{at}: {}\n  keys: mode, nodes, vns, degree, rounds, algo, dataset, data_dir, model, lr, batch, \
                 local_epochs, local_steps, clip, partition, alpha, seed, out, target, test_samples, timing, substep_ms, send_jitter_ms, send_pace_ms, send_pace_auto, hide_walk_origin, lookahead, warmup_ms, value_ratio, value_floor, value_ceiling, dropout, vn_hosts, own_ips, netns, capture, observe_timing, kill, restart_after, pause, transport, node_bin, audit, audit_chunks, audit_every, audit_la_samples",
                path.display(),
                e.message().trim_end()
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
