//! From [`Options`] to checked [`Settings`]: defaults, the learning configuration, and the errors a user must
//! see before anything starts (impossible graphs, a missing data directory, contradictory options, an option
//! the chosen mode would ignore). [`Settings::resolve`] takes the options group by group, as `--help` lists
//! them: `network`, `learning`, `timing`, `audit` and `value_bounds`, `processes`.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use models::data::partition::{DEFAULT_DIRICHLET_ALPHA, DEFAULT_MIN_SAMPLES, Partition};
use models::data::{DatasetSpec, Split};
use models::train::{LocalWork, TrainConfig};
use node::Timing;
use node::engine::ValueBounds;
use node::learner::LearningConfig;

use crate::churn::ChurnPlan;
use crate::cli::{DatasetName, Mode, Options, TimingChoice, TransportChoice};
use node::algo::AlgoSpec;

/// Default network: 8 RNs × 4 VNs, r = 4, 20 rounds on synthetic data. Small enough that a debug build
/// finishes in about two minutes on two cores (issue 5), large enough that the overlay is a real random graph
/// (32 VNs).
pub const DEFAULT_NODES: usize = 8;
pub const DEFAULT_VNS: usize = 4;
pub const DEFAULT_DEGREE: usize = 4;
pub const DEFAULT_ROUNDS: u64 = 20;
pub const DEFAULT_SEED: u64 = 1;
/// Test RMSE the paper's EL reaches on MovieLens (Shatter, PETS 2025, §6): the default target there.
pub const MOVIELENS_TARGET_RMSE: f64 = 1.10;
/// Chunks each RN attacks per audited round (Shatter, PETS 2025, §6).
pub const DEFAULT_AUDIT_CHUNKS: usize = 8;

/// Above this many VNs `--timing auto` picks the LAN timing: hundreds of swarms on a few cores cannot keep
/// 100 ms overlay sub-steps.
pub const AUTO_LOOPBACK_MAX_VNS: usize = 64;

/// Above this many VNs `--timing auto` picks the crowded timing (`node::Timing::crowded`): at 512 VNs on two cores
/// the LAN timing's overlay formed 2.9-3.6 of 8 neighbours, the crowded one 7.9 within 3 GiB
/// (`results/round-speed/README.md`, "In-process scale"). Networks of 65 to 256 VNs keep the LAN timing; they were
/// not measured with the crowded one.
pub const AUTO_LAN_MAX_VNS: usize = 256;

/// One run of the network: one algorithm with one value of k.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Setting {
    pub vns: usize,
    pub algo: AlgoSpec,
}

impl Setting {
    /// Shatter's k = 1 is Epidemic Learning on the same code path, and is named so.
    pub fn new(vns: usize, algo: Option<&AlgoSpec>) -> Self {
        let algo = match algo {
            Some(AlgoSpec::Shatter) | None => AlgoSpec::from_vns(vns),
            Some(a) => *a,
        };
        Self { vns, algo }
    }

    pub fn algo(&self) -> &AlgoSpec {
        &self.algo
    }

    /// Chunks of the model partition the algorithm cuts.
    pub fn chunks(&self) -> usize {
        self.algo.chunks(self.vns)
    }

    pub fn label(&self) -> String {
        format!("k={} {}", self.vns, self.algo)
    }
}

/// Everything a run needs, checked.
#[derive(Debug, Clone)]
pub struct Settings {
    pub mode: Mode,
    pub nodes: usize,
    /// One setting per value of `--vns`, run in this order.
    pub settings: Vec<Setting>,
    pub degree: usize,
    pub rounds: u64,
    pub learning: LearningConfig,
    /// `--device`: empty (the best device compiled in), one for every node, or one per node.
    pub devices: Vec<models::device::DeviceSpec>,
    pub out: PathBuf,
    pub target: Option<f64>,
    pub timing: Timing,
    pub timing_name: &'static str,
    /// The bound VNs put on received values (issue 14; `--value-ratio`, `--value-floor`, `--value-ceiling`).
    pub values: ValueBounds,
    /// `--dropout`: the rate at which nodes sit rounds out.
    pub dropout: f64,
    /// `--vn-hosts`: VN host processes (procs mode only; 0: VNs run inside their nodes).
    pub vn_hosts: usize,
    /// `--own-ips`: each process on its own loopback IP (procs mode only).
    pub own_ips: bool,
    /// `--netns`: each process in its own network namespace with its own address (procs mode only).
    pub netns: bool,
    /// `--capture`: packet captures (in the observers' namespaces, or on loopback), and the timing attack on them.
    pub capture: bool,
    /// `--observe-timing`: the timing attack on the nodes' arrival logs (procs mode only).
    pub observe_timing: bool,
    /// `--kill`, `--restart-after`, `--pause` (procs mode only).
    pub churn: ChurnPlan,
    /// `--send-jitter-ms` (the simulator's; the libp2p modes read it from `timing`).
    pub send_jitter: Option<std::time::Duration>,
    /// `--send-pace-ms` (the simulator's; the libp2p modes read it from `timing`).
    pub send_pace: Option<std::time::Duration>,
    /// `--send-pace-auto` (the simulator's; the libp2p modes read it from `timing`).
    pub send_pace_auto: bool,
    /// `--hide-walk-origin` (the simulator's; the libp2p modes read it from `timing`).
    pub hide_walk_origin: bool,
    pub node_bin: Option<PathBuf>,
    pub transport: TransportChoice,
    /// `--audit`: the privacy audit's settings.
    pub audit: Option<crate::audit::AuditSettings>,
    pub plain: bool,
    /// `--ui ADDR`: serve the live view there.
    pub ui: Option<std::net::SocketAddr>,
}

impl Settings {
    /// Reads the scenario file (if any), applies defaults and checks everything that can be checked without
    /// loading data.
    pub fn from_options(cli: Options) -> anyhow::Result<Settings> {
        let o = match &cli.scenario {
            Some(p) => cli.clone().or(Options::from_file(p)?),
            None => cli,
        };
        Self::resolve(o)
    }

    /// Applies defaults to already-merged options and checks them, one group of options (the help's
    /// headings) at a time.
    pub fn resolve(o: Options) -> anyhow::Result<Settings> {
        let mode = o.mode.unwrap_or(Mode::Inproc);
        o.check_mode(mode)?;
        let net = network(&o)?;
        let (learning, target) = learning(&o, net.nodes)?;
        let devices = o.device.clone().unwrap_or_default();
        if devices.len() > 1 && devices.len() != net.nodes {
            bail!(
                "--device names {} devices for {} nodes: give one for every node, or one per node",
                devices.len(),
                net.nodes
            );
        }
        let max_vns = net.nodes * net.vns.iter().max().copied().unwrap_or(1);
        let (timing, timing_name) = timing(&o, max_vns)?;
        let audit = audit(&o, net.nodes)?;
        let values = value_bounds(&o)?;
        let churn = processes(&o)?;
        let out = o.out.clone().unwrap_or_else(|| {
            Path::new("target").join("testnet").join(format!(
                "{}-{mode}-{}",
                timestamp(),
                learning.dataset.name()
            ))
        });
        Ok(Settings {
            mode,
            nodes: net.nodes,
            settings: net
                .vns
                .into_iter()
                .map(|vns| Setting::new(vns, o.algo.as_ref()))
                .collect(),
            degree: net.degree,
            rounds: net.rounds,
            learning,
            devices,
            out,
            target,
            timing,
            timing_name,
            values,
            dropout: net.dropout,
            vn_hosts: o.vn_hosts.unwrap_or(0),
            own_ips: o.own_ips,
            netns: o.netns,
            capture: o.capture,
            observe_timing: o.observe_timing,
            churn,
            send_jitter: o.send_jitter_ms.map(std::time::Duration::from_millis),
            send_pace: o.send_pace_ms.map(std::time::Duration::from_millis),
            send_pace_auto: o.send_pace_auto,
            hide_walk_origin: o.hide_walk_origin,
            node_bin: o.node_bin,
            transport: o.transport.unwrap_or(TransportChoice::Tcp),
            audit,
            plain: o.plain,
            ui: o.ui,
        })
    }

    /// The device `--device` names for node `i` (`None`: not given, the best one compiled in).
    pub fn device_of(&self, i: usize) -> Option<models::device::DeviceSpec> {
        match self.devices.as_slice() {
            [] => None,
            [one] => Some(*one),
            many => many.get(i).copied(),
        }
    }

    /// Loads the dataset once for the whole invocation, with a hint on where to get it when it is missing.
    pub fn load_data(&self) -> anyhow::Result<(Split, Vec<Vec<usize>>)> {
        let spec = &self.learning.dataset;
        if let Some(dir) = data_dir(spec)
            && !dir.is_dir()
        {
            bail!(
                "data directory {} does not exist.\n  {}\n  Pass the directory with --data-dir DIR (the default is under ../shared/data, relative to where you run testnet).",
                dir.display(),
                data_hint(spec)
            );
        }
        self.learning
            .load()
            .map_err(|e| anyhow::anyhow!("{e}"))
            .with_context(|| match data_dir(spec) {
                Some(dir) => format!(
                    "loading {} from {}\n  {}",
                    spec.name(),
                    dir.display(),
                    data_hint(spec)
                ),
                None => format!("generating {spec} data"),
            })
    }
}

/// The network options, checked: who takes part, for how long.
struct Network {
    nodes: usize,
    /// One value per setting of the sweep.
    vns: Vec<usize>,
    degree: usize,
    rounds: u64,
    dropout: f64,
}

fn network(o: &Options) -> anyhow::Result<Network> {
    let nodes = o.nodes.unwrap_or(DEFAULT_NODES);
    let degree = o.degree.unwrap_or(DEFAULT_DEGREE);
    let rounds = o.rounds.unwrap_or(DEFAULT_ROUNDS);
    let vns = vns(o)?;
    if nodes == 0 {
        bail!("--nodes must be at least 1");
    }
    if rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    if degree == 0 {
        bail!("--degree must be at least 1");
    }
    if vns.is_empty() {
        bail!("--vns needs at least one value");
    }
    let mut seen = std::collections::BTreeSet::new();
    for &k in &vns {
        if k == 0 {
            bail!("--vns: every value must be at least 1 (got 0)");
        }
        if !seen.insert(k) {
            bail!("--vns lists k = {k} twice");
        }
        check_graph(nodes, k, degree)?;
    }
    let dropout = o.dropout.unwrap_or(0.0);
    if !(0.0..=1.0).contains(&dropout) {
        bail!("--dropout {dropout} is not a rate in [0, 1]");
    }
    Ok(Network {
        nodes,
        vns,
        degree,
        rounds,
        dropout,
    })
}

/// The values of k to run: `--vns`, or the algorithm's one VN per node.
fn vns(o: &Options) -> anyhow::Result<Vec<usize>> {
    Ok(match (&o.algo, &o.vns) {
        (Some(a), Some(v)) if !a.uses_vns() && v != &[1] => {
            bail!(
                "--algo {a} is one virtual node per real node (k = 1), but --vns {v:?} was given: drop --vns, or use --algo shatter (a sweep that includes 1 compares EL with Shatter)"
            )
        }
        (Some(a), _) if !a.uses_vns() => vec![1],
        (_, Some(v)) => v.clone(),
        (_, None) => vec![DEFAULT_VNS],
    })
}

/// The learning options, checked: the learning configuration and the target metric.
fn learning(o: &Options, nodes: usize) -> anyhow::Result<(LearningConfig, Option<f64>)> {
    let dataset = o
        .dataset
        .unwrap_or(DatasetName::Synthetic)
        .spec(o.data_dir.as_deref())?;
    let partition = partition(o, &dataset)?;
    let train = train_config(o, &dataset)?;
    if o.test_samples == Some(0) {
        bail!("--test-samples must be at least 1");
    }
    let target = o
        .target
        .or(matches!(dataset, DatasetSpec::MovieLens { .. }).then_some(MOVIELENS_TARGET_RMSE));
    let learning = LearningConfig {
        dataset,
        model: o.model.clone(),
        partition,
        nodes,
        train,
        seed: o.seed.unwrap_or(DEFAULT_SEED),
        max_test_samples: o.test_samples,
    };
    Ok((learning, target))
}

/// `--partition` and `--alpha` on `dataset`.
fn partition(o: &Options, dataset: &DatasetSpec) -> anyhow::Result<Partition> {
    let ratings_or_users = matches!(
        dataset,
        DatasetSpec::MovieLens { .. } | DatasetSpec::Sent140 { .. }
    );
    let partition = match (&o.partition, o.alpha) {
        (Some(p), alpha) => {
            let mut part = p.clone();
            match (&mut part, alpha) {
                (Partition::Dirichlet { alpha: a, .. }, Some(x)) => *a = x,
                (_, Some(_)) => bail!(
                    "--alpha is the Dirichlet concentration; it needs --partition dirichlet, not {p}"
                ),
                _ => {}
            }
            part
        }
        (None, Some(alpha)) => Partition::Dirichlet {
            alpha,
            min_samples: DEFAULT_MIN_SAMPLES,
        },
        // Real per-user data is naturally non-IID; the paper splits MovieLens and Sent140 by user.
        (None, None) if ratings_or_users => Partition::ByUser,
        (None, None) => Partition::Iid,
    };
    if let Partition::Dirichlet { alpha, .. } = partition
        && !(alpha.is_finite() && alpha > 0.0)
    {
        bail!("--alpha must be a positive number (paper: {DEFAULT_DIRICHLET_ALPHA}), got {alpha}");
    }
    if matches!(partition, Partition::ByUser) && !ratings_or_users {
        bail!(
            "--partition user needs a dataset with users (movielens, sent140), not {}",
            dataset.name()
        );
    }
    Ok(partition)
}

/// Local training: learning rate (paper §6 per dataset), clipping, batch and local work.
fn train_config(o: &Options, dataset: &DatasetSpec) -> anyhow::Result<TrainConfig> {
    let lr = o.lr.unwrap_or(match dataset {
        DatasetSpec::MovieLens { .. } => 0.075,
        DatasetSpec::Sent140 { .. } => 0.005,
        _ => 0.05,
    });
    let clip = o.clip;
    if let Some(b) = clip
        && !(b.is_finite() && b > 0.0)
    {
        bail!("--clip must be a positive number, got {b}");
    }
    if !(lr.is_finite() && lr > 0.0) {
        bail!("--lr must be a positive number, got {lr}");
    }
    let batch = o.batch.unwrap_or(32);
    if batch == 0 {
        bail!("--batch must be at least 1");
    }
    let work = match (o.local_epochs, o.local_steps) {
        (Some(_), Some(_)) => bail!("give --local-epochs or --local-steps, not both"),
        (Some(0), _) => bail!("--local-epochs must be at least 1"),
        (_, Some(0)) => bail!("--local-steps must be at least 1"),
        (Some(e), None) => LocalWork::Epochs(e),
        (None, Some(s)) => LocalWork::Steps(s),
        (None, None) => LocalWork::Epochs(1),
    };
    Ok(TrainConfig {
        lr,
        batch_size: batch,
        work,
        clip,
    })
}

/// The timing options: a preset (`--timing`, or by network size) with the overrides applied. The simulator
/// reads only the send options, from [`Settings`].
fn timing(o: &Options, max_vns: usize) -> anyhow::Result<(Timing, &'static str)> {
    let (mut timing, name) = match o.timing.unwrap_or(TimingChoice::Auto) {
        TimingChoice::Loopback => (Timing::loopback(), "loopback"),
        TimingChoice::Lan => (Timing::default(), "lan"),
        TimingChoice::Auto if max_vns <= AUTO_LOOPBACK_MAX_VNS => (Timing::loopback(), "loopback"),
        TimingChoice::Crowded => (Timing::crowded(), "crowded"),
        TimingChoice::Auto if max_vns <= AUTO_LAN_MAX_VNS => (Timing::default(), "lan"),
        TimingChoice::Auto => (Timing::crowded(), "crowded"),
    };
    if let Some(ms) = o.substep_ms {
        if ms == 0 {
            bail!("--substep-ms must be at least 1");
        }
        timing.substep_ms = ms;
    }
    if let Some(ms) = o.send_pace_ms {
        timing.send_pace_ms = ms;
    }
    timing.send_pace_auto |= o.send_pace_auto;
    timing.hide_walk_origin |= o.hide_walk_origin;
    if let Some(ms) = o.send_jitter_ms {
        timing.send_jitter_ms = ms;
    }
    if let Some(l) = o.lookahead {
        let max = protocol::control::MAX_LOOKAHEAD;
        if l > max {
            bail!("--lookahead {l} exceeds {max} rounds");
        }
        timing.overlay_lookahead = l;
    }
    if let Some(ms) = o.warmup_ms {
        timing.warmup_ms = ms;
    }
    if let Some(us) = o.release_delay_us {
        timing.release_delay_us = us;
    }
    timing.vn_threads &= !o.shared_vn_threads;
    timing.chunk_slots &= !o.no_chunk_slots;
    if let Some(ms) = o.chunk_slot_ms {
        timing.chunk_slot_ms = ms;
    }
    timing
        .validate()
        .map_err(|e| anyhow::anyhow!("--release-delay-us: {e}"))?;
    Ok((timing, name))
}

/// The bound VNs put on received values (issue 14).
fn value_bounds(o: &Options) -> anyhow::Result<ValueBounds> {
    let defaults = ValueBounds::default();
    let values = ValueBounds {
        ratio: o.value_ratio.unwrap_or(defaults.ratio),
        floor: o.value_floor.unwrap_or(defaults.floor),
        ceiling: o.value_ceiling.unwrap_or(defaults.ceiling),
    };
    values
        .validate()
        .map_err(|e| anyhow::anyhow!("--value-ratio/--value-floor/--value-ceiling: {e}"))?;
    Ok(values)
}

/// `--audit` and its settings (the modes were checked by [`Options::check_mode`]).
fn audit(o: &Options, nodes: usize) -> anyhow::Result<Option<crate::audit::AuditSettings>> {
    let settings_given =
        o.audit_chunks.is_some() || o.audit_every.is_some() || o.audit_la_samples.is_some();
    if !o.audit {
        if settings_given {
            bail!("--audit-chunks, --audit-every and --audit-la-samples need --audit");
        }
        return Ok(None);
    }
    if nodes < 2 {
        bail!("--audit needs at least 2 nodes (an attacker and a victim)");
    }
    for (flag, zero) in [
        ("--audit-chunks", o.audit_chunks == Some(0)),
        ("--audit-every", o.audit_every == Some(0)),
        ("--audit-la-samples", o.audit_la_samples == Some(0)),
    ] {
        if zero {
            bail!("{flag} must be at least 1");
        }
    }
    Ok(Some(crate::audit::AuditSettings {
        chunks: o.audit_chunks.unwrap_or(DEFAULT_AUDIT_CHUNKS),
        every: o.audit_every.unwrap_or(1),
        la_samples: o
            .audit_la_samples
            .unwrap_or(models::privacy::linkability::DEFAULT_LA_MAX_PER_CANDIDATE),
    }))
}

/// The process options (procs mode; [`Options::check_mode`] refused them in the others): the churn plan.
fn processes(o: &Options) -> anyhow::Result<ChurnPlan> {
    if o.capture && !o.observe_timing {
        bail!(
            "--capture records packets for the timing attack on the arrival logs: use it with --observe-timing"
        );
    }
    ChurnPlan::new(o.kill, o.restart_after, o.pause)
}

/// The checks of an r-regular overlay on N = nodes·k VNs (DESIGN §5).
pub fn check_graph(nodes: usize, k: usize, degree: usize) -> anyhow::Result<()> {
    let n = nodes * k;
    if degree >= n {
        bail!(
            "degree r = {degree} needs more than {degree} virtual nodes, but {nodes} nodes × {k} VNs = {n}: a VN has at most {} others to connect to. Lower --degree or raise --nodes/--vns.",
            n.saturating_sub(1)
        );
    }
    if (n * degree) % 2 == 1 {
        bail!(
            "no {degree}-regular graph on {n} virtual nodes ({nodes} nodes × {k} VNs): N·r = {} is odd (every edge has two ends). Make --degree or the number of VNs even.",
            n * degree
        );
    }
    Ok(())
}

/// The directory of a real dataset.
pub fn data_dir(spec: &DatasetSpec) -> Option<&Path> {
    match spec {
        DatasetSpec::Synthetic(_) => None,
        DatasetSpec::MovieLens { dir }
        | DatasetSpec::Sent140 { dir, .. }
        | DatasetSpec::Cifar10 { dir, .. }
        | DatasetSpec::Mnist { dir } => Some(dir),
    }
}

/// What a dataset directory must hold and where to get it.
pub fn data_hint(spec: &DatasetSpec) -> &'static str {
    match spec {
        DatasetSpec::Synthetic(_) => "",
        DatasetSpec::MovieLens { .. } => {
            "MovieLens needs ratings.csv of ml-latest-small in that directory: curl -LO https://files.grouplens.org/datasets/movielens/ml-latest-small.zip && unzip ml-latest-small.zip, then --data-dir ml-latest-small"
        }
        DatasetSpec::Sent140 { .. } => {
            "Sent140 needs the LEAF JSON files train/*.json and test/*.json in that directory: generate them with LEAF (https://github.com/TalwalkarLab/leaf, data/sent140/preprocess.sh)"
        }
        DatasetSpec::Cifar10 { .. } => {
            "CIFAR-10 needs the binary batches data_batch_1.bin .. data_batch_5.bin and test_batch.bin in that directory: https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz (unpack it and pass cifar-10-batches-bin)"
        }
        DatasetSpec::Mnist { .. } => {
            "MNIST needs train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte (gunzipped) in that directory: https://ossci-datasets.s3.amazonaws.com/mnist/"
        }
    }
}

/// `YYYYMMDD-HHMMSS` (UTC) for default output directories, without a date crate.
pub fn timestamp() -> String {
    // The date names the default output directory.
    #[allow(clippy::disallowed_methods)]
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(o: Options) -> anyhow::Result<Settings> {
        Settings::resolve(o)
    }

    #[test]
    fn devices_are_one_for_all_or_one_per_node() {
        use models::device::DeviceSpec;
        let with = |d: Vec<DeviceSpec>| {
            resolve(Options {
                mode: Some(Mode::Sim),
                nodes: Some(3),
                device: Some(d),
                ..Default::default()
            })
        };
        let s = resolve(Options::default()).unwrap();
        assert_eq!(s.device_of(0), None);
        let s = with(vec![DeviceSpec::Cuda(1)]).unwrap();
        assert_eq!(s.device_of(2), Some(DeviceSpec::Cuda(1)));
        let s = with(vec![
            DeviceSpec::Cpu,
            DeviceSpec::Cuda(0),
            DeviceSpec::Metal(0),
        ])
        .unwrap();
        assert_eq!(s.device_of(1), Some(DeviceSpec::Cuda(0)));
        assert_eq!(s.device_of(2), Some(DeviceSpec::Metal(0)));
        let e = with(vec![DeviceSpec::Cpu, DeviceSpec::Cpu])
            .unwrap_err()
            .to_string();
        assert!(e.contains("2 devices for 3 nodes"), "{e}");
    }

    #[test]
    fn value_bounds_are_checked() {
        let sim = |ratio, floor, ceiling| {
            resolve(Options {
                mode: Some(Mode::Sim),
                value_ratio: ratio,
                value_floor: floor,
                value_ceiling: ceiling,
                ..Options::default()
            })
        };
        assert_eq!(
            sim(None, None, None).unwrap().values,
            ValueBounds::default()
        );
        let s = sim(Some(10.0), Some(1.0), Some(50.0)).unwrap();
        assert_eq!(
            s.values,
            ValueBounds {
                ratio: 10.0,
                floor: 1.0,
                ceiling: 50.0
            }
        );
        let e = sim(Some(0.5), None, None).unwrap_err().to_string();
        assert!(e.contains("--value-ratio"), "{e}");
        assert!(
            sim(None, Some(10.0), Some(5.0)).is_err(),
            "ceiling below floor"
        );
        // Every mode takes them (the libp2p node's VNs apply them too).
        let s = resolve(Options {
            value_ratio: Some(10.0),
            ..Options::default()
        })
        .unwrap();
        assert_eq!(s.values.ratio, 10.0);
    }

    #[test]
    fn clip_reaches_training_and_ghp_reports_the_accountants_epsilon() {
        assert_eq!(resolve(Options::default()).unwrap().learning.train.clip, None);
        let e = resolve(Options {
            clip: Some(0.0),
            ..Options::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("--clip"), "{e}");
        let ghp = AlgoSpec::Ghp { sigma: 0.5 };
        let s = resolve(Options {
            clip: Some(2.0),
            algo: Some(ghp),
            vns: Some(vec![1]),
            local_steps: Some(3),
            lr: Some(0.1),
            ..Options::default()
        })
        .unwrap();
        assert_eq!(s.learning.train.clip, Some(2.0));
        let parts = vec![vec![0; 100]; 4];
        let dp = crate::report::dp_accounting(&s, s.settings[0], &parts, 10).unwrap();
        // μ = lr · H = 0.1 · 3; ε(10) = √2 · 0.3 · 2 · 110 / 0.5.
        let want = std::f64::consts::SQRT_2 * 0.3 * 2.0 * 110.0 / 0.5;
        assert!((dp["mu_assumed"].as_f64().unwrap() - 0.3).abs() < 1e-12, "{dp}");
        assert!((dp["epsilon"].as_f64().unwrap() - want).abs() < 1e-9, "{dp}");
        assert_eq!(dp["epsilon_per_round"].as_array().unwrap().len(), 10);
        // Epochs: H is the largest share's batches per epoch (⌈100 / 32⌉ = 4 here).
        let s = resolve(Options {
            clip: Some(2.0),
            algo: Some(ghp),
            vns: Some(vec![1]),
            ..Options::default()
        })
        .unwrap();
        let dp = crate::report::dp_accounting(&s, s.settings[0], &parts, 1).unwrap();
        assert_eq!(dp["local_steps_per_round_max"], 4);
        // No clipping, or not GHP: no ε is claimed.
        let s = resolve(Options {
            algo: Some(ghp),
            vns: Some(vec![1]),
            ..Options::default()
        })
        .unwrap();
        assert!(crate::report::dp_accounting(&s, s.settings[0], &parts, 10).is_none());
        let s = resolve(Options {
            clip: Some(2.0),
            algo: Some(AlgoSpec::RandomNoise { sigma: 0.5 }),
            vns: Some(vec![1]),
            ..Options::default()
        })
        .unwrap();
        assert!(crate::report::dp_accounting(&s, s.settings[0], &parts, 10).is_none());
    }

    #[test]
    fn defaults_are_the_documented_network() {
        let s = resolve(Options::default()).unwrap();
        assert_eq!(
            (s.mode, s.nodes, s.degree, s.rounds),
            (Mode::Inproc, 8, 4, 20)
        );
        assert_eq!(s.settings, vec![Setting::new(4, None)]);
        assert_eq!(s.settings[0].algo(), &AlgoSpec::Shatter);
        assert_eq!(s.timing_name, "loopback");
        assert_eq!(s.learning.partition, Partition::Iid);
        assert!(s.out.starts_with("target/testnet"));
    }

    #[test]
    fn auto_timing_follows_the_number_of_vns() {
        let settings = |nodes, vns| {
            resolve(Options {
                nodes: Some(nodes),
                vns: Some(vec![vns]),
                degree: Some(8),
                ..Options::default()
            })
            .unwrap()
        };
        assert_eq!(settings(8, 8).timing_name, "loopback");
        assert_eq!(settings(16, 8).timing_name, "lan");
        assert_eq!(settings(32, 8).timing_name, "lan");
        let s = settings(64, 8);
        assert_eq!(s.timing_name, "crowded");
        assert_eq!(s.timing, node::Timing::crowded());
        assert_eq!(s.timing.overlay_lookahead, 1);
    }

    /// `--warmup-ms` (and the scenario key `warmup_ms`) replaces the chosen timing's warm-up, and nothing else.
    #[test]
    fn the_warmup_override_replaces_the_timings_warmup() {
        let toml = "timing = \"loopback\"\nwarmup_ms = 4500";
        let o = Options::from_toml(std::path::Path::new("x.toml"), toml).unwrap();
        let s = resolve(o).unwrap();
        assert_eq!(s.timing.warmup_ms, 4500);
        assert_eq!(
            node::Timing {
                warmup_ms: node::Timing::loopback().warmup_ms,
                ..s.timing
            },
            node::Timing::loopback()
        );
    }

    #[test]
    fn impossible_graphs_are_refused() {
        let e = resolve(Options {
            nodes: Some(2),
            vns: Some(vec![2]),
            degree: Some(4),
            ..Default::default()
        })
        .unwrap_err();
        assert!(
            e.to_string().contains("degree r = 4") && e.to_string().contains("= 4"),
            "{e}"
        );
        let e = resolve(Options {
            nodes: Some(3),
            vns: Some(vec![1]),
            degree: Some(1),
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("odd"), "{e}");
        // The sweep checks every k.
        let e = resolve(Options {
            nodes: Some(3),
            vns: Some(vec![2, 1]),
            degree: Some(3),
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("3 nodes × 1 VNs"), "{e}");
        assert!(
            resolve(Options {
                vns: Some(vec![4, 4]),
                ..Default::default()
            })
            .is_err()
        );
    }

    #[test]
    fn audit_options_are_checked() {
        let s = resolve(Options {
            audit: true,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            s.audit,
            Some(crate::audit::AuditSettings {
                chunks: 8,
                every: 1,
                la_samples: 200,
            })
        );
        for (o, needle) in [
            (
                Options {
                    audit_chunks: Some(4),
                    ..Default::default()
                },
                "need --audit",
            ),
            (
                Options {
                    audit: true,
                    mode: Some(Mode::Procs),
                    ..Default::default()
                },
                "--mode procs",
            ),
            (
                Options {
                    audit: true,
                    audit_every: Some(0),
                    ..Default::default()
                },
                "at least 1",
            ),
        ] {
            let e = resolve(o).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
        }
    }

    #[test]
    fn one_vn_algorithms_are_k_1_and_conflict_with_a_sweep() {
        for algo in [AlgoSpec::El, AlgoSpec::Dpsgd, AlgoSpec::Chunking { chunks: 8 }] {
            let s = resolve(Options {
                algo: Some(algo),
                ..Default::default()
            })
            .unwrap();
            assert_eq!(s.settings, vec![Setting::new(1, Some(&algo))]);
            assert_eq!(s.settings[0].algo(), &algo);
            assert!(
                resolve(Options {
                    algo: Some(algo),
                    vns: Some(vec![4]),
                    ..Default::default()
                })
                .is_err()
            );
        }
        // Shatter sweeps k, naming k = 1 EL.
        let s = resolve(Options {
            algo: Some(AlgoSpec::Shatter),
            vns: Some(vec![1, 4]),
            ..Default::default()
        })
        .unwrap();
        let names: Vec<String> = s.settings.iter().map(|x| x.label()).collect();
        assert_eq!(names, ["k=1 el", "k=4 shatter"]);
    }

    #[test]
    fn movielens_defaults_and_missing_data_hint() {
        let s = resolve(Options {
            dataset: Some(DatasetName::Movielens),
            data_dir: Some("/nonexistent/ml".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(s.learning.partition, Partition::ByUser);
        assert_eq!(s.learning.train.lr, 0.075);
        assert_eq!(s.target, Some(1.10));
        let e = s.load_data().unwrap_err().to_string();
        assert!(
            e.contains("/nonexistent/ml") && e.contains("ml-latest-small.zip"),
            "{e}"
        );
    }

    #[test]
    fn contradictions_are_refused() {
        assert!(
            resolve(Options {
                dataset: Some(DatasetName::Synthetic),
                data_dir: Some("x".into()),
                ..Default::default()
            })
            .is_err()
        );
        assert!(
            resolve(Options {
                partition: Some(Partition::Iid),
                alpha: Some(0.5),
                ..Default::default()
            })
            .is_err()
        );
        assert!(
            resolve(Options {
                partition: Some(Partition::ByUser),
                ..Default::default()
            })
            .is_err()
        );
        let s = resolve(Options {
            alpha: Some(0.5),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            s.learning.partition,
            Partition::Dirichlet {
                alpha: 0.5,
                min_samples: DEFAULT_MIN_SAMPLES
            }
        );
    }

    #[test]
    fn timestamps_look_right() {
        let t = timestamp();
        assert_eq!(t.len(), 15, "{t}");
        assert!(t.starts_with("20"), "{t}");
    }
}
