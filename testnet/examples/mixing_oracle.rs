//! Shatter's aggregation with the network taken out: the paper's EL-Oracle model (§4.2, "Dynamic topologies":
//! a coordinator draws a uniform random r-regular graph of VNs every round), run centrally, to find where an
//! accuracy gap between EL and Shatter comes from.
//!
//! Every real node is the simulator's (`node::learner::LearningConfig`, the same data split, initial model and
//! training RNGs as `testnet --mode sim` with the same options and seed); each round every node trains, then
//! the round's graph is drawn (Steger–Wormald, `sampling::uniform::random_regular`) and every node averages
//! per parameter its own value and every copy its VNs received, with equal weights (the paper's aggregation,
//! `models::aggregate`). The variants differ only in who meets whom and in how parameters are dealt to
//! chunks:
//!
//! - `el`: k = 1, one r-regular graph over the n nodes: every parameter is averaged over exactly r + 1 values.
//! - `shatter:K`: the paper's Shatter, one r-regular graph over all n·K VNs, the static seeded partition (as
//!   the engine's). VN s of node i meets VNs of any chunk index, so the copies of chunk s that node i receives
//!   vary from round to round and from chunk to chunk (0 to K·r; mean r).
//! - `aligned:K`: the same partition, but K separate r-regular graphs, one per chunk index: VN s only meets
//!   VNs s of other nodes, so every parameter is averaged over exactly r + 1 values (K independent ELs).
//! - `rows:K`: like `shatter:K`, but chunks hold whole embedding rows (rows dealt to chunks by the shared seed)
//!   instead of every row's factors spread over all chunks (matrix factorisation only).
//! - `selfr:K`: like `shatter:K` (one graph over all n·K VNs, the paper's partition), but the node's own value
//!   keeps EL's weight 1/(r + 1) whatever the number c of copies received, and the c copies share r/(r + 1)
//!   equally (c = 0: the own value). Not the paper's rule: a probe of whether the own value's weight is what
//!   differs (with equal weights it is 1/(c + 1), on average above 1/(r + 1) because c varies).
//!
//! Per round it writes the mean over nodes of the test metric (what `testnet` reports), the metric of the
//! nodes' mean model, the consensus distance (mean over nodes of ‖θ_i − θ̄‖² / d) and the mean self-weight
//! 1/(copies + 1) over parameters and nodes.
//!
//! ```sh
//! cargo run --release -p testnet --example mixing_oracle -- --dataset movielens \
//!     --data-dir ../shared/data/movielens/ml-latest-small --model mf --nodes 32 --degree 6 --rounds 30 \
//!     --local-epochs 10 --lr 0.075 --variants el,shatter:8,aligned:8 --seeds 3 --csv out/oracle.csv
//! ```

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Parser;
use models::nn::TaskInfo;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use testnet::cli::{Mode, Options};
use testnet::scenario::Settings;

#[derive(Parser, Debug)]
struct Args {
    /// `el`, `shatter:K`, `aligned:K`, `rows:K` (see the file's documentation).
    #[arg(long, value_delimiter = ',', default_value = "el,shatter:8,aligned:8")]
    variants: Vec<String>,
    /// Seeds per variant (1, 2, …).
    #[arg(long, default_value_t = 3)]
    seeds: u64,
    /// The first seed (runs seeds first-seed, first-seed + 1, …; to split a sweep over processes).
    #[arg(long, default_value_t = 1)]
    first_seed: u64,
    /// Per-round CSV (variant, seed, round, metric, mean-model metric, consensus distance, self weight).
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Evaluate every this many rounds (and in the last round).
    #[arg(long, default_value_t = 1)]
    eval_every: u64,
    /// The testnet options that set the data, model and learning (`--seed` and `--mode` are set here).
    #[command(flatten)]
    base: Options,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Variant {
    El,
    Shatter(usize),
    Aligned(usize),
    Rows(usize),
    SelfR(usize),
}

impl Variant {
    fn parse(s: &str) -> anyhow::Result<Self> {
        let k = |v: &str| -> anyhow::Result<usize> {
            let k: usize = v.parse().with_context(|| format!("k in {s}"))?;
            if k == 0 {
                bail!("k must be at least 1 in {s}");
            }
            Ok(k)
        };
        Ok(match s.split_once(':') {
            None if s == "el" => Variant::El,
            Some(("shatter", v)) => Variant::Shatter(k(v)?),
            Some(("aligned", v)) => Variant::Aligned(k(v)?),
            Some(("rows", v)) => Variant::Rows(k(v)?),
            Some(("selfr", v)) => Variant::SelfR(k(v)?),
            _ => bail!("unknown variant {s} (el, shatter:K, aligned:K, rows:K, selfr:K)"),
        })
    }

    fn k(self) -> usize {
        match self {
            Variant::El => 1,
            Variant::Shatter(k) | Variant::Aligned(k) | Variant::Rows(k) | Variant::SelfR(k) => k,
        }
    }
}

/// Per flat index its chunk: whole embedding rows dealt to `k` chunks (shuffled with `seed`, then round robin),
/// for a model whose tensors are `[rows, factors]` embeddings.
fn row_chunks(layout: &[(String, usize)], factors: usize, k: usize, seed: u64) -> Vec<u16> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut ids = Vec::new();
    for (_, n) in layout {
        let rows = n / factors;
        let mut order: Vec<usize> = (0..rows).collect();
        order.shuffle(&mut rng);
        let mut of_row = vec![0u16; rows];
        for (j, &row) in order.iter().enumerate() {
            of_row[row] = (j % k) as u16;
        }
        ids.extend((0..*n).map(|p| of_row[p / factors]));
    }
    ids
}

/// `neighbours[i][s]`: the (node, chunk) pairs whose chunk node i's VN s receives this round.
fn draw_round(
    variant: Variant,
    n: usize,
    r: usize,
    rng: &mut ChaCha8Rng,
) -> Vec<Vec<Vec<(usize, usize)>>> {
    let k = variant.k();
    let mut out = vec![vec![Vec::new(); k]; n];
    match variant {
        Variant::Aligned(_) => {
            // Drawn in chunk order, one graph per chunk index.
            let graphs: Vec<Vec<Vec<u32>>> = (0..k)
                .map(|_| sampling::uniform::random_regular(n, r, rng))
                .collect();
            for (i, slots) in out.iter_mut().enumerate() {
                for (s, (slot, g)) in slots.iter_mut().zip(&graphs).enumerate() {
                    slot.extend(g[i].iter().map(|&j| (j as usize, s)));
                }
            }
        }
        _ => {
            // VN v = i·k + s; a sibling neighbour hands its node its own chunk back, as in the engine.
            let g = sampling::uniform::random_regular(n * k, r, rng);
            for (v, adj) in g.iter().enumerate() {
                out[v / k][v % k].extend(adj.iter().map(|&w| (w as usize / k, w as usize % k)));
            }
        }
    }
    out
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let variants: Vec<Variant> = a
        .variants
        .iter()
        .map(|s| Variant::parse(s))
        .collect::<anyhow::Result<_>>()?;
    let mut csv = String::from(
        "variant,seed,round,metric,mean_model_metric,consensus_distance,self_weight\n",
    );
    let mut finals: Vec<(String, Vec<f64>, Vec<f64>)> = Vec::new();
    for (vi, &variant) in variants.iter().enumerate() {
        let name = &a.variants[vi];
        let (mut fin, mut fin_mean) = (Vec::new(), Vec::new());
        for seed in a.first_seed..a.first_seed + a.seeds {
            let s = Settings::resolve(Options {
                mode: Some(Mode::Sim),
                seed: Some(seed),
                plain: true,
                ..a.base.clone()
            })?;
            let (split, parts) = s.load_data()?;
            let n = s.nodes;
            let r = s.degree;
            let mut learners = s.learning.learners(&split, &parts, 0..n)?;
            let mut probe = s.learning.learners(&split, &parts, 0..1)?.remove(0);
            let layout = learners[0].model.param_layout();
            let d: usize = layout.iter().map(|(_, c)| c).sum();
            let k = variant.k();
            let chunk_of: Vec<u16> = match variant {
                Variant::Rows(k) => {
                    let TaskInfo::Rating { num_users, .. } = TaskInfo::of(&split.train)? else {
                        bail!("rows:K needs a rating dataset (matrix factorisation)");
                    };
                    let users = layout
                        .iter()
                        .find(|(name, _)| name == "users")
                        .context("no users embedding")?
                        .1;
                    row_chunks(&layout, users / num_users, k, seed)
                }
                _ => s
                    .learning
                    .chunk_partition(&learners[0].model, k)?
                    .chunk_ids(),
            };
            let mut members: Vec<Vec<u32>> = vec![Vec::new(); k];
            for (p, &id) in chunk_of.iter().enumerate() {
                members[usize::from(id)].push(p as u32);
            }
            // The oracle's graphs come from their own stream of the run seed.
            let mut graph_rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6f72_6163_6c65);
            for round in 0..s.rounds {
                let trained: Vec<Vec<f32>> = learners
                    .iter_mut()
                    .map(|l| Ok(l.train()?.params))
                    .collect::<anyhow::Result<_>>()?;
                let nb = draw_round(variant, n, r, &mut graph_rng);
                let mut next: Vec<Vec<f32>> = Vec::with_capacity(n);
                let mut self_weight = 0.0f64;
                for (i, own) in trained.iter().enumerate() {
                    // copies[s]: copies of chunk s received; sums per flat index.
                    let mut copies = vec![0u32; k];
                    let mut sums = vec![0.0f32; d];
                    for vn in &nb[i] {
                        for &(j, c) in vn {
                            copies[c] += 1;
                            for &p in &members[c] {
                                sums[p as usize] += trained[j][p as usize];
                            }
                        }
                    }
                    // Per chunk (own weight, weight of each copy).
                    let weights: Vec<(f32, f32)> = copies
                        .iter()
                        .map(|&c| match (variant, c) {
                            (_, 0) => (1.0, 0.0),
                            (Variant::SelfR(_), c) => {
                                (1.0 / (r + 1) as f32, r as f32 / ((r + 1) as f32 * c as f32))
                            }
                            (_, c) => (1.0 / (c + 1) as f32, 1.0 / (c + 1) as f32),
                        })
                        .collect();
                    let mut out = own.clone();
                    for (p, (o, &id)) in out.iter_mut().zip(&chunk_of).enumerate() {
                        let (w_own, w_copy) = weights[usize::from(id)];
                        self_weight += w_own as f64;
                        if w_own != 1.0 {
                            *o = if w_own == w_copy {
                                (*o + sums[p]) * w_own
                            } else {
                                *o * w_own + sums[p] * w_copy
                            };
                        }
                    }
                    next.push(out);
                }
                for (l, m) in learners.iter_mut().zip(&next) {
                    l.model.set_flat_params(m)?;
                }
                if !(round + 1 == s.rounds || round % a.eval_every.max(1) == 0) {
                    continue;
                }
                let mut mean = vec![0.0f64; d];
                for m in &next {
                    for (a, &v) in mean.iter_mut().zip(m) {
                        *a += v as f64 / n as f64;
                    }
                }
                let consensus = next
                    .iter()
                    .map(|m| {
                        m.iter()
                            .zip(&mean)
                            .map(|(&v, &a)| (v as f64 - a).powi(2))
                            .sum::<f64>()
                    })
                    .sum::<f64>()
                    / (n * d) as f64;
                let mut metric = 0.0;
                for (l, m) in learners.iter_mut().zip(&next) {
                    metric += l.load_and_evaluate(m)?.0.metric() / n as f64;
                }
                let mean32: Vec<f32> = mean.iter().map(|&v| v as f32).collect();
                let mean_metric = probe.load_and_evaluate(&mean32)?.0.metric();
                let sw = self_weight / (n * d) as f64;
                writeln!(
                    csv,
                    "{name},{seed},{round},{metric:.5},{mean_metric:.5},{consensus:.6e},{sw:.5}"
                )?;
                eprintln!(
                    "{name} seed {seed} round {round}: metric {metric:.4}, mean model {mean_metric:.4}, \
                     consensus {consensus:.3e}, self weight {sw:.4}"
                );
                if round + 1 == s.rounds {
                    fin.push(metric);
                    fin_mean.push(mean_metric);
                }
            }
        }
        finals.push((name.clone(), fin, fin_mean));
    }
    if let Some(path) = &a.csv {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, &csv).with_context(|| format!("writing {}", path.display()))?;
    }
    println!("| variant | final metric (mean over nodes) | metric of the mean model |");
    println!("|---|---|---|");
    for (name, fin, fin_mean) in &finals {
        let (m, sd) = spread(fin);
        let (mm, msd) = spread(fin_mean);
        println!("| {name} | {m:.3} ± {sd:.3} | {mm:.3} ± {msd:.3} |");
    }
    Ok(())
}

/// Mean and sample standard deviation.
fn spread(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = if v.len() > 1 {
        v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (mean, var.sqrt())
}
