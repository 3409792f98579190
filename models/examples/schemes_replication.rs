//! Replications for the schemes of issue 17 (`models::schemes`), written under `results/`:
//!
//! ```text
//! cargo run --release -p models --example schemes_replication
//! ```
//!
//! 1. `results/ghp-synthetic/`: the GFL paper's synthetic regression (§V-A, eqs. 53–59): P = 10 federated
//!    units of K = 100 agents with N = 100 two-dimensional samples each, L = 11 agents sampled per unit per
//!    iteration, E ∈ [1, 10] local epochs of step μ/E and mini-batches B ∈ [5, 10] per agent, μ = 0.7,
//!    ρ = 0.1. Server graph: a random 4-regular graph with uniform weights 1/5 (the paper names none).
//!    For σ² ∈ {0.001, 0.01, 0.1, 1, 2, 10}: non-private GFL, GHP and the random-perturbation baseline, on the
//!    same data, graph and agent sampling per seed (only the noise differs). Steady-state centroid MSD
//!    ‖w_c − w°‖² (eq. 58) and average MSD (1/P)Σ‖w_p − w°‖² (eq. 59) = mean over the last quarter of the
//!    iterations; mean ± standard deviation over the seeds. Each unit's ψ_p goes through the hierarchical
//!    mode's client-to-server secure aggregation (eq. 48, `models::schemes::masking`): every agent has an
//!    X25519 key, the L sampled agents send pairwise-masked fixed-point models, the server unmasks their
//!    mean; the run fails if that mean differs from the plain agent average by more than 2^−32.
//!    Our choices where the paper gives no value: agent covariances Q·diag(λ)·Qᵀ with λ ~ U[0.1, 0.5] and a
//!    random rotation Q, noise variances σ_v² ~ U[0.1, 0.5], w* ~ N(0, I).
//! 2. `results/pdmm-least-squares/`: A/PDMM least squares as in notes-pdmm.md §6 (60-node random geometric
//!    graph in the unit cube, radius √(2 ln n / n), 5 unknowns, 4 rows per node, ρ = 0.4, exact w-step): max
//!    error to the centralised solution per iteration, PDMM (θ = 1) with σ_Z² ∈ {0, 1, 10⁴} against ADMM
//!    (θ = ½), per seed.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Parser;
use models::schemes::{
    CombinationMatrix, FixedPoint, Graph, LeastSquares, MaskingPublic, MaskingSecret,
    PairwiseMasks, PdmmConfig, PdmmNetwork, Perturbation, centralised_least_squares,
    linalg::Cholesky, network_round, rgg_connectivity_radius, unmask_mean,
};
use plotters::prelude::*;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha12Rng;
use rand_distr::{Distribution, StandardNormal};

#[derive(Parser, Debug)]
struct Args {
    /// Folder that receives `ghp-synthetic/` and `pdmm-least-squares/`.
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// Seeds (data, graph, sampling and noise all derive from the seed).
    #[arg(long, default_value_t = 5)]
    seeds: u64,
    /// GFL iterations per run.
    #[arg(long, default_value_t = 2000)]
    iters: usize,
    /// PDMM iterations per run.
    #[arg(long, default_value_t = 2000)]
    pdmm_iters: usize,
}

const P: usize = 10;
const K: usize = 100;
const N: usize = 100;
const M: usize = 2;
const L: usize = 11;
const MU: f64 = 0.7;
const RHO: f64 = 0.1;
const DEGREE: usize = 4;
const SIGMA2: [f64; 6] = [0.001, 0.01, 0.1, 1.0, 2.0, 10.0];
const MU_SWEEP: [f64; 3] = [0.1, 0.5, 1.0];

fn normal<R: Rng>(rng: &mut R) -> f64 {
    StandardNormal.sample(rng)
}

/// One agent: samples (u, d), its epochs and batch size.
struct Agent {
    u: Vec<[f64; M]>,
    d: Vec<f64>,
    epochs: usize,
    batch: usize,
}

struct Task {
    agents: Vec<Vec<Agent>>,
    /// `masks[p][k]`: agent k of unit p's pair keys with the other agents of its unit.
    masks: Vec<Vec<PairwiseMasks>>,
    w_opt: [f64; M],
    a: CombinationMatrix,
}

fn make_task(seed: u64) -> Result<Task> {
    let mut rng = ChaCha12Rng::seed_from_u64(seed);
    let w_star = [normal(&mut rng), normal(&mut rng)];
    let mut agents = Vec::with_capacity(P);
    let (mut r_u, mut r_ud) = ([0.0; M * M], [0.0; M]);
    for _ in 0..P {
        let mut unit = Vec::with_capacity(K);
        for _ in 0..K {
            let angle = rng.random_range(0.0..std::f64::consts::PI);
            let (c, s) = (angle.cos(), angle.sin());
            let l = [
                rng.random_range(0.1..0.5f64).sqrt(),
                rng.random_range(0.1..0.5f64).sqrt(),
            ];
            let sv = rng.random_range(0.1..0.5f64).sqrt();
            let mut u = Vec::with_capacity(N);
            let mut d = Vec::with_capacity(N);
            for _ in 0..N {
                let (z0, z1) = (l[0] * normal(&mut rng), l[1] * normal(&mut rng));
                let x = [c * z0 - s * z1, s * z0 + c * z1];
                let y = x[0] * w_star[0] + x[1] * w_star[1] + sv * normal(&mut rng);
                for i in 0..M {
                    for j in 0..M {
                        r_u[i * M + j] += x[i] * x[j];
                    }
                    r_ud[i] += x[i] * y;
                }
                u.push(x);
                d.push(y);
            }
            unit.push(Agent {
                u,
                d,
                epochs: rng.random_range(1..=10),
                batch: rng.random_range(5..=10),
            });
        }
        agents.push(unit);
    }
    // Eq. 55 (every agent has N samples, so the nested averages are one average).
    let total = (P * K * N) as f64;
    let mut lhs = r_u.map(|x| x / total);
    for i in 0..M {
        lhs[i * M + i] += RHO;
    }
    let w = Cholesky::new(&lhs, M)?.solve(&r_ud.map(|x| x / total));
    let g = Graph::random_regular(P, DEGREE, &mut rng)?;
    let mut masks = Vec::with_capacity(P);
    for _ in 0..P {
        let secrets: Vec<MaskingSecret> =
            (0..K).map(|_| MaskingSecret::from_rng(&mut rng)).collect();
        let directory: Vec<(usize, MaskingPublic)> =
            secrets.iter().enumerate().map(|(k, s)| (k, s.public())).collect();
        masks.push(
            (0..K)
                .map(|k| PairwiseMasks::new(k, &secrets[k], &directory))
                .collect::<models::Result<Vec<_>>>()?,
        );
    }
    Ok(Task {
        agents,
        masks,
        w_opt: [w[0], w[1]],
        a: CombinationMatrix::uniform_regular(&g)?,
    })
}

/// One GFL run; returns per-iteration (centroid MSD, average MSD).
fn run_gfl(
    task: &Task,
    mode: Perturbation,
    mu: f64,
    seed: u64,
    iters: usize,
) -> Result<Vec<(f64, f64)>> {
    // Same sampling stream for every mode of a seed; the noise has its own stream.
    let mut sampling = ChaCha12Rng::seed_from_u64(seed.wrapping_mul(7919).wrapping_add(1));
    let mut noise = ChaCha12Rng::seed_from_u64(seed.wrapping_mul(7919).wrapping_add(2));
    let mut w: Vec<Vec<f64>> = vec![vec![0.0; M]; P];
    let mut out = Vec::with_capacity(iters);
    let fp = FixedPoint::new(32, L as u32)?;
    for iter in 0..iters {
        let mut psis = Vec::with_capacity(P);
        for (p, unit) in task.agents.iter().enumerate() {
            let mut psi = [0.0; M];
            let cohort: Vec<usize> = sample(&mut sampling, K, L).into_vec();
            let mut masked = Vec::with_capacity(L);
            for &k in &cohort {
                let agent = &unit[k];
                let mut wk = [w[p][0], w[p][1]];
                let step = mu / agent.epochs as f64;
                for _ in 0..agent.epochs {
                    let mut g = [2.0 * RHO * wk[0], 2.0 * RHO * wk[1]];
                    for _ in 0..agent.batch {
                        let n = sampling.random_range(0..N);
                        let (x, y) = (agent.u[n], agent.d[n]);
                        let e = y - x[0] * wk[0] - x[1] * wk[1];
                        g[0] -= 2.0 * e * x[0] / agent.batch as f64;
                        g[1] -= 2.0 * e * x[1] / agent.batch as f64;
                    }
                    wk[0] -= step * g[0];
                    wk[1] -= step * g[1];
                }
                psi[0] += wk[0] / L as f64;
                psi[1] += wk[1] / L as f64;
                masked.push(task.masks[p][k].mask(iter as u64, &cohort, &wk, &fp)?);
            }
            // What the server learns: the cohort's mean, through the masks (eq. 48).
            let unmasked = unmask_mean(&masked, &fp)?;
            let off = (0..M).map(|j| (unmasked[j] - psi[j]).abs()).fold(0.0, f64::max);
            anyhow::ensure!(
                off <= fp.resolution(),
                "unit {p}, iteration {iter}: the masked mean is {off} off the agents' average"
            );
            psis.push(unmasked);
        }
        w = network_round(&psis, &task.a, mode, &mut noise)?;
        let c = models::schemes::centroid(&w);
        let msd_c = (c[0] - task.w_opt[0]).powi(2) + (c[1] - task.w_opt[1]).powi(2);
        let msd_avg = w
            .iter()
            .map(|wp| (wp[0] - task.w_opt[0]).powi(2) + (wp[1] - task.w_opt[1]).powi(2))
            .sum::<f64>()
            / P as f64;
        out.push((msd_c, msd_avg));
    }
    Ok(out)
}

fn mean_std(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let m = xs.iter().sum::<f64>() / n;
    let v = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (m, v.sqrt())
}

fn steady(curve: &[(f64, f64)]) -> (f64, f64) {
    let tail = &curve[curve.len() * 3 / 4..];
    let n = tail.len() as f64;
    (
        tail.iter().map(|x| x.0).sum::<f64>() / n,
        tail.iter().map(|x| x.1).sum::<f64>() / n,
    )
}

fn ghp_synthetic(args: &Args, dir: &Path) -> Result<()> {
    // Built once per seed (every agent's key agreements with its unit are the costly part).
    let tasks: Vec<Task> = (0..args.seeds).map(make_task).collect::<Result<_>>()?;
    fs::create_dir_all(dir)?;
    let mut csv = String::from("sigma2,mode,seed,msd_centroid,msd_avg\n");
    // [sigma index][mode] -> per-seed (centroid, avg); mode 0 = none (same for every σ²), 1 = ghp, 2 = random.
    let mut table: Vec<[Vec<(f64, f64)>; 3]> =
        (0..SIGMA2.len()).map(|_| Default::default()).collect();
    let mut fig2: Vec<[Vec<(f64, f64)>; 3]> = Vec::new();
    for seed in 0..args.seeds {
        let task = &tasks[seed as usize];
        let none = run_gfl(task, Perturbation::None, MU, seed, args.iters)?;
        let s_none = steady(&none);
        writeln!(csv, "0,none,{seed},{:.6e},{:.6e}", s_none.0, s_none.1)?;
        for (k, &s2) in SIGMA2.iter().enumerate() {
            let sigma = s2.sqrt();
            let ghp = run_gfl(task, Perturbation::Ghp { sigma }, MU, seed, args.iters)?;
            let rnd = run_gfl(task, Perturbation::Random { sigma }, MU, seed, args.iters)?;
            let (sg, sr) = (steady(&ghp), steady(&rnd));
            writeln!(csv, "{s2},ghp,{seed},{:.6e},{:.6e}", sg.0, sg.1)?;
            writeln!(csv, "{s2},random,{seed},{:.6e},{:.6e}", sr.0, sr.1)?;
            table[k][0].push(s_none);
            table[k][1].push(sg);
            table[k][2].push(sr);
            if s2 == 0.1 {
                fig2.push([none.clone(), ghp, rnd]);
            }
        }
        eprintln!("seed {seed} done");
    }
    fs::write(dir.join("sweep.csv"), csv)?;

    // Figure 2 (σ² = 0.1): centroid MSD per iteration, mean over seeds, every 10th iteration.
    let mut curves = String::from(
        "iter,none_centroid,ghp_centroid,random_centroid,none_avg,ghp_avg,random_avg\n",
    );
    for t in (0..args.iters).step_by(10) {
        let m = |mode: usize, f: fn(&(f64, f64)) -> f64| {
            fig2.iter().map(|runs| f(&runs[mode][t])).sum::<f64>() / fig2.len() as f64
        };
        writeln!(
            curves,
            "{},{:.6e},{:.6e},{:.6e},{:.6e},{:.6e},{:.6e}",
            t + 1,
            m(0, |x| x.0),
            m(1, |x| x.0),
            m(2, |x| x.0),
            m(0, |x| x.1),
            m(1, |x| x.1),
            m(2, |x| x.1)
        )?;
    }
    fs::write(dir.join("curves_sigma2_0.1.csv"), curves)?;

    let mut md = format!(
        "Steady-state MSD (mean of the last quarter of {} iterations), mean ± std over {} seeds.\n\n\
         | σ² | centroid MSD: non-private | GHP | random | average MSD: non-private | GHP | random |\n\
         |---|---|---|---|---|---|---|\n",
        args.iters, args.seeds
    );
    let mut series: [Vec<(f64, f64)>; 6] = Default::default();
    for (k, &s2) in SIGMA2.iter().enumerate() {
        let cell = |mode: usize, avg: bool| {
            let xs: Vec<f64> = table[k][mode]
                .iter()
                .map(|x| if avg { x.1 } else { x.0 })
                .collect();
            mean_std(&xs)
        };
        let f = |(m, s): (f64, f64)| format!("{m:.3e} ± {s:.1e}");
        writeln!(
            md,
            "| {s2} | {} | {} | {} | {} | {} | {} |",
            f(cell(0, false)),
            f(cell(1, false)),
            f(cell(2, false)),
            f(cell(0, true)),
            f(cell(1, true)),
            f(cell(2, true))
        )?;
        for mode in 0..3 {
            series[mode].push((s2.log10(), cell(mode, false).0.log10()));
            series[3 + mode].push((s2.log10(), cell(mode, true).0.log10()));
        }
    }
    // Figure 4: σ² = 0.1, step size μ varied (the random baseline carries an O(1/μ) noise term, GHP not).
    write!(
        md,
        "\nσ² = 0.1, step size μ varied (GFL Fig. 4): steady-state centroid MSD, mean ± std over {} seeds.\n\n\
         | μ | non-private | GHP | random |\n|---|---|---|---|\n",
        args.seeds
    )?;
    let mut mu_csv = String::from("mu,mode,seed,msd_centroid,msd_avg\n");
    for mu in MU_SWEEP {
        let mut cells: [Vec<f64>; 3] = Default::default();
        for seed in 0..args.seeds {
            let task = &tasks[seed as usize];
            let sigma = 0.1f64.sqrt();
            let modes = [
                Perturbation::None,
                Perturbation::Ghp { sigma },
                Perturbation::Random { sigma },
            ];
            for (k, mode) in modes.into_iter().enumerate() {
                let s = steady(&run_gfl(task, mode, mu, seed, args.iters)?);
                writeln!(
                    mu_csv,
                    "{mu},{},{seed},{:.6e},{:.6e}",
                    ["none", "ghp", "random"][k],
                    s.0,
                    s.1
                )?;
                cells[k].push(s.0);
            }
        }
        let f = |xs: &[f64]| {
            let (m, s) = mean_std(xs);
            format!("{m:.3e} ± {s:.1e}")
        };
        writeln!(
            md,
            "| {mu} | {} | {} | {} |",
            f(&cells[0]),
            f(&cells[1]),
            f(&cells[2])
        )?;
    }
    fs::write(dir.join("mu_sweep.csv"), mu_csv)?;
    fs::write(dir.join("summary.md"), &md)?;
    print!("{md}");
    plot_sweep(&dir.join("msd_vs_sigma2.svg"), &series)?;
    Ok(())
}

fn plot_sweep(path: &Path, series: &[Vec<(f64, f64)>; 6]) -> Result<()> {
    let ys = series.iter().flatten().map(|p| p.1);
    let (lo, hi) = ys.fold((f64::MAX, f64::MIN), |(a, b), y| (a.min(y), b.max(y)));
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "GFL synthetic regression: steady-state MSD vs noise",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(-3.2f64..1.2, (lo - 0.3)..(hi + 0.3))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .x_desc("log10 σ²")
        .y_desc("log10 MSD")
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let names = [
        "centroid, non-private",
        "centroid, GHP",
        "centroid, random",
        "average, non-private",
        "average, GHP",
        "average, random",
    ];
    let colours = [BLUE, GREEN, RED];
    for (k, s) in series.iter().enumerate() {
        let style = ShapeStyle::from(colours[k % 3]).stroke_width(if k < 3 { 3 } else { 1 });
        chart
            .draw_series(LineSeries::new(s.clone(), style))
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .label(names[k])
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}

fn pdmm_least_squares(args: &Args, dir: &Path) -> Result<()> {
    fs::create_dir_all(dir)?;
    let runs: [(&str, PdmmConfig, f64); 5] = [
        ("pdmm_sz0", PdmmConfig::pdmm(0.4), 0.0),
        ("pdmm_sz1", PdmmConfig::pdmm(0.4), 1.0),
        ("pdmm_sz1e4", PdmmConfig::pdmm(0.4), 1e4),
        ("admm_sz0", PdmmConfig::admm(0.4), 0.0),
        ("admm_sz1", PdmmConfig::admm(0.4), 1.0),
    ];
    let mut csv = String::from("seed,iter");
    for r in &runs {
        write!(csv, ",{}", r.0)?;
    }
    csv.push('\n');
    let mut md = String::from(
        "Max over nodes of ‖w_i − w*‖ (w* = centralised least squares), exact w-step, ρ = 0.4.\n\n\
         | seed | |E| | run | t=200 | t=500 | t=1000 | t=2000 | first t < 1e-6 |\n|---|---|---|---|---|---|---|---|\n",
    );
    for seed in 0..args.seeds.min(3) {
        let mut rng = ChaCha12Rng::seed_from_u64(1000 + seed);
        let (g, _) =
            Graph::random_geometric_connected(60, 3, rgg_connectivity_radius(60), 100, &mut rng)?;
        let w_star: Vec<f64> = (0..5).map(|_| normal(&mut rng)).collect();
        let parts: Vec<LeastSquares> = (0..60)
            .map(|_| {
                let a: Vec<f64> = (0..20).map(|_| normal(&mut rng)).collect();
                let b = a
                    .chunks(5)
                    .map(|r| {
                        r.iter().zip(&w_star).map(|(x, y)| x * y).sum::<f64>()
                            + 0.1 * normal(&mut rng)
                    })
                    .collect();
                LeastSquares::new(a, b, 5)
            })
            .collect::<Result<_, _>>()?;
        let target = centralised_least_squares(&parts)?;
        let mut errs: Vec<Vec<f64>> = Vec::new();
        for (name, cfg, sz) in runs {
            let mut net = PdmmNetwork::new(&g, &[0.0; 5], cfg, sz, &mut rng)?;
            let mut e = Vec::with_capacity(args.pdmm_iters);
            for _ in 0..args.pdmm_iters {
                net.round(|i, node| node.w_step_exact(|l, q| parts[i].prox(l, q)))?;
                e.push(net.max_error(&target));
            }
            let at = |t: usize| e.get(t - 1).map_or("-".into(), |x| format!("{x:.1e}"));
            let first = e
                .iter()
                .position(|&x| x < 1e-6)
                .map_or("-".into(), |t| (t + 1).to_string());
            writeln!(
                md,
                "| {seed} | {} | {name} | {} | {} | {} | {} | {first} |",
                g.num_edges(),
                at(200),
                at(500),
                at(1000),
                at(2000)
            )?;
            errs.push(e);
        }
        for t in 0..args.pdmm_iters {
            write!(csv, "{seed},{}", t + 1)?;
            for e in &errs {
                write!(csv, ",{:.6e}", e[t])?;
            }
            csv.push('\n');
        }
    }
    fs::write(dir.join("convergence.csv"), csv)?;
    fs::write(dir.join("summary.md"), &md)?;
    print!("{md}");
    Ok(())
}

fn main() -> Result<()> {
    let args = Args::parse();
    ghp_synthetic(&args, &args.out.join("ghp-synthetic")).context("GHP synthetic regression")?;
    pdmm_least_squares(&args, &args.out.join("pdmm-least-squares"))
        .context("PDMM least squares")?;
    Ok(())
}
