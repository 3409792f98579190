//! Gradient inversion under Shatter: how much of a training image an honest-but-curious node recovers from
//! **one chunk** of another node's model update, for k = 1 (EL: the whole model) against k = 2, 4, 8, 16.
//!
//! ```text
//! cargo run --release -p models --example gia -- --out out/gia
//! ```
//!
//! Setup (Shatter, PETS 2025, §6 GIA; seeds fixed): synthetic 3×32×32 images (`SyntheticConfig::images`, the
//! CIFAR-10 stand-in), an MLP whose first layer is fully connected (hidden width `--hidden`), a common start
//! θ₀, one local SGD step at `--lr` on ONE sample (and, reported separately, on a batch of `--batch`). The
//! attacker holds chunk 0 of the static partition of θ₁ and knows θ₀, so it knows the pseudo-gradient
//! (θ₀ − θ₁)/η on that chunk's coordinates only. Attacks:
//! - analytic inversion of the first FC layer (`privacy::invert_fc`; unknown pixels = mean of recovered);
//! - DLG gradient matching on the held coordinates (`privacy::dlg_invert`), which needs Candle's second-order
//!   mode: the example re-runs itself with `CANDLE_GRAD_DO_NOT_DETACH=1` unless `--no-dlg`.
//!
//! Metrics: PSNR (dB) and SSIM (11×11 Gaussian window, σ 1.5) on [0, 1] images, both images mapped by the
//! true image's range. For a batch, each true image is scored against the best-matching reconstruction
//! (analytic: the per-row candidates of the 64 strongest rows; DLG: the batch's dummies), an oracle matching
//! that flatters the attacker. Writes `single.png`, `batch.png` and `results.json` under `--out`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;
use models::chunking::ChunkPartition;
use models::data::{Dataset, Inputs, SyntheticConfig, synthetic};
use models::nn::{Model, ModelSpec, TaskInfo};
use models::privacy::dlg::SECOND_ORDER_ENV;
use models::privacy::{
    DlgConfig, FcLayer, HeldGradient, dlg_invert, fc_row_candidates, invert_fc, psnr,
    second_order_enabled, ssim, to_unit_range, write_png_grid,
};
use models::train::{LocalWork, TrainConfig, train_local};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// Row candidates the batch attack keeps (the strongest bias gradients).
const BATCH_ROW_CANDIDATES: usize = 64;

#[derive(Parser, Debug)]
#[command(about = "Gradient inversion from one chunk of a model update, k = 1 vs Shatter's k")]
struct Args {
    /// Output directory for image grids and results.json.
    #[arg(long, default_value = "out/gia")]
    out: PathBuf,
    /// Numbers of chunks to compare (1 = EL).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16")]
    ks: Vec<usize>,
    /// Width of the MLP's first (fully connected) layer.
    #[arg(long, default_value_t = 128)]
    hidden: usize,
    /// Learning rate of the local step (paper, CIFAR-10: 0.05).
    #[arg(long, default_value_t = 0.05)]
    lr: f32,
    /// Batch size of the batch experiment.
    #[arg(long, default_value_t = 4)]
    batch: usize,
    /// Adam steps of DLG.
    #[arg(long, default_value_t = 300)]
    dlg_iters: usize,
    /// Skip DLG (no second-order mode needed).
    #[arg(long)]
    no_dlg: bool,
    /// Seed of data, model, partition and DLG start.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

#[derive(Serialize, Clone, Copy, Debug)]
struct Score {
    psnr: f64,
    ssim: f64,
}

#[derive(Serialize, Debug)]
struct Row {
    k: usize,
    /// Fraction of the first layer's parameters held.
    held_fraction: f64,
    /// Fraction of pixels the analytic attack recovered (single sample).
    coverage: f64,
    single_analytic: Score,
    single_dlg: Option<Score>,
    batch_analytic: Score,
    batch_dlg: Option<Score>,
}

const SHAPE: [usize; 3] = [3, 32, 32];
/// Pixels per image pixel in the saved grids.
const GRID_SCALE: usize = 3;

fn score(truth: &[f32], recon: &[f32]) -> Result<Score> {
    let (t, r) = to_unit_range(truth, recon);
    Ok(Score {
        psnr: psnr(&t, &r)?,
        ssim: ssim(&t, &r, SHAPE)?,
    })
}

/// For every true image, the best-PSNR reconstruction among `candidates`; returns the mean score and the
/// chosen reconstructions.
fn best_match(truths: &[Vec<f32>], candidates: &[Vec<f32>]) -> Result<(Score, Vec<Vec<f32>>)> {
    let (mut p, mut s, mut chosen) = (0.0, 0.0, Vec::new());
    for t in truths {
        let mut best: Option<(Score, &Vec<f32>)> = None;
        for c in candidates {
            let sc = score(t, c)?;
            if best.is_none_or(|(b, _)| sc.psnr > b.psnr) {
                best = Some((sc, c));
            }
        }
        let (sc, c) = best.context("no candidate")?;
        p += sc.psnr;
        s += sc.ssim;
        chosen.push(to_unit_range(t, c).1);
    }
    let n = truths.len() as f64;
    Ok((
        Score {
            psnr: p / n,
            ssim: s / n,
        },
        chosen,
    ))
}

fn images(data: &Dataset) -> Vec<Vec<f32>> {
    let Inputs::Dense { values, .. } = data.inputs() else {
        unreachable!("synthetic images are dense")
    };
    values
        .chunks(SHAPE.iter().product())
        .map(<[f32]>::to_vec)
        .collect()
}

/// θ₀ and θ₁ after one SGD step on all of `data` (one batch).
fn one_step(
    spec: &ModelSpec,
    info: &TaskInfo,
    data: &Dataset,
    args: &Args,
) -> Result<(Vec<f32>, Vec<f32>)> {
    let mut model = Model::new(spec, info, args.seed, &candle_core::Device::Cpu)?;
    let theta0 = model.flat_params()?;
    let cfg = TrainConfig {
        lr: args.lr as f64,
        batch_size: data.len(),
        work: LocalWork::Steps(1),
        clip: None,
    };
    train_local(
        &mut model,
        data,
        &cfg,
        &mut ChaCha8Rng::seed_from_u64(args.seed),
    )?;
    Ok((theta0, model.flat_params()?))
}

fn main() -> Result<()> {
    let args = Args::parse();
    if !args.no_dlg && !second_order_enabled() {
        // Candle reads the variable once per thread at first use; setting it from Rust 2024 is unsafe, so
        // re-run this program with it in the environment.
        eprintln!(
            "re-running with {SECOND_ORDER_ENV}=1 (DLG needs second-order gradients; --no-dlg skips it)"
        );
        let status = std::process::Command::new(std::env::current_exe()?)
            .args(std::env::args_os().skip(1))
            .env(SECOND_ORDER_ENV, "1")
            .status()?;
        std::process::exit(status.code().unwrap_or(1));
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;

    let split = synthetic::generate(
        &SyntheticConfig {
            train_samples: args.batch.max(1) + 1,
            test_samples: 0,
            ..SyntheticConfig::images(SHAPE[0], SHAPE[1], 10)
        },
        args.seed,
    )?;
    let info = TaskInfo::of(&split.train)?;
    let spec = ModelSpec::Mlp {
        hidden: vec![args.hidden],
    };
    let start = Model::new(&spec, &info, args.seed, &candle_core::Device::Cpu)?;
    let layer = FcLayer::first_of(&start)?;
    let sizes: Vec<usize> = start.param_layout().iter().map(|(_, n)| *n).collect();
    println!(
        "model mlp:{} d={} first layer {}x{}, lr {}, one local step; attacker holds chunk 0 of k",
        args.hidden,
        start.num_params(),
        layer.out_dim,
        layer.in_dim,
        args.lr
    );

    let single = split.train.subset(&[0]);
    let batch = split.train.subset(&(1..=args.batch).collect::<Vec<_>>());
    let single_truth = images(&single).remove(0);
    let batch_truth = images(&batch);
    let (s0, s1) = one_step(&spec, &info, &single, &args)?;
    let (b0, b1) = one_step(&spec, &info, &batch, &args)?;

    let mut rows = Vec::new();
    let mut single_grid = vec![to_unit_range(&single_truth, &single_truth).0];
    let mut dlg_grid = vec![single_grid[0].clone()];
    let mut batch_grid: Vec<Vec<f32>> = batch_truth.iter().map(|t| to_unit_range(t, t).0).collect();
    for &k in &args.ks {
        let p = ChunkPartition::new(&sizes, k, args.seed)?;
        let held = |t0: &[f32], t1: &[f32]| -> Result<HeldGradient> {
            Ok(HeldGradient::from_chunk(
                t0,
                &p,
                0,
                &p.extract(0, t1)?,
                args.lr,
            )?)
        };
        let gs = held(&s0, &s1)?;
        let gb = held(&b0, &b1)?;
        let first_layer = (layer.bias_offset..layer.bias_offset + layer.out_dim)
            .chain(layer.weight_offset..layer.weight_offset + layer.out_dim * layer.in_dim);
        let total = layer.out_dim * (layer.in_dim + 1);
        let held_fraction =
            first_layer.filter(|&i| p.chunk_of(i) == Some(0)).count() as f64 / total as f64;

        let rec = invert_fc(&layer, &gs)?;
        let single_analytic = score(&single_truth, &rec.filled())?;
        single_grid.push(to_unit_range(&single_truth, &rec.filled()).1);

        let cands: Vec<Vec<f32>> = fc_row_candidates(&layer, &gb, BATCH_ROW_CANDIDATES)?
            .iter()
            .map(|c| c.filled())
            .collect();
        let (batch_analytic, chosen) = if cands.is_empty() {
            // No usable row: the attacker has nothing but a flat guess.
            best_match(&batch_truth, &[vec![0.0; layer.in_dim]])?
        } else {
            best_match(&batch_truth, &cands)?
        };
        batch_grid.extend(chosen);

        let (mut single_dlg, mut batch_dlg) = (None, None);
        if !args.no_dlg {
            let mut rng = ChaCha8Rng::seed_from_u64(args.seed ^ 0xd19);
            let cfg = DlgConfig {
                batch: 1,
                iterations: args.dlg_iters,
                ..Default::default()
            };
            let r = dlg_invert(&start, &gs, &cfg, &mut rng)?;
            single_dlg = Some(score(&single_truth, &r.inputs)?);
            dlg_grid.push(to_unit_range(&single_truth, &r.inputs).1);
            let cfg = DlgConfig {
                batch: args.batch,
                ..cfg
            };
            let r = dlg_invert(&start, &gb, &cfg, &mut rng)?;
            let dummies: Vec<Vec<f32>> =
                r.inputs.chunks(layer.in_dim).map(<[f32]>::to_vec).collect();
            batch_dlg = Some(best_match(&batch_truth, &dummies)?.0);
        }
        rows.push(Row {
            k,
            held_fraction,
            coverage: rec.coverage(),
            single_analytic,
            single_dlg,
            batch_analytic,
            batch_dlg,
        });
    }

    let f = |s: Option<Score>| {
        s.map_or("      -        -".to_string(), |s| {
            format!("{:7.2} {:8.3}", s.psnr.min(999.99), s.ssim)
        })
    };
    println!();
    println!(
        "{:>3} {:>6} {:>8} | {:>16} | {:>16} | {:>16} | {:>16}",
        "k",
        "held",
        "coverage",
        "1 sample: FC inv",
        "1 sample: DLG",
        format!("batch {}: FC inv", args.batch),
        format!("batch {}: DLG", args.batch)
    );
    println!(
        "{:>3} {:>6} {:>8} | {:>16} | {:>16} | {:>16} | {:>16}",
        "", "", "", "PSNR    SSIM", "PSNR    SSIM", "PSNR    SSIM", "PSNR    SSIM"
    );
    for r in &rows {
        println!(
            "{:>3} {:>6.3} {:>8.3} | {} | {} | {} | {}",
            r.k,
            r.held_fraction,
            r.coverage,
            f(Some(r.single_analytic)),
            f(r.single_dlg),
            f(Some(r.batch_analytic)),
            f(r.batch_dlg)
        );
    }

    let cols = args.ks.len() + 1;
    let mut grid = single_grid;
    if !args.no_dlg {
        grid.extend(dlg_grid);
    }
    write_png_grid(&args.out.join("single.png"), &grid, SHAPE, cols, GRID_SCALE)?;
    write_png_grid(
        &args.out.join("batch.png"),
        &batch_grid,
        SHAPE,
        args.batch,
        GRID_SCALE,
    )?;
    let json = serde_json::json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "model": format!("mlp:{}", args.hidden),
        "d": start.num_params(),
        "lr": args.lr,
        "batch": args.batch,
        "dlg_iterations": if args.no_dlg { None } else { Some(args.dlg_iters) },
        "seed": args.seed,
        "rows": rows,
    });
    std::fs::write(
        args.out.join("results.json"),
        serde_json::to_string_pretty(&json)?,
    )?;
    println!(
        "\nsingle.png: row 1 = truth, FC inversion for k = {:?}{}; batch.png: row 1 = truths, then per k the \
         best-matching row candidate. Results in {}",
        args.ks,
        if args.no_dlg {
            ""
        } else {
            "; row 2 = truth, DLG"
        },
        args.out.join("results.json").display()
    );
    Ok(())
}
