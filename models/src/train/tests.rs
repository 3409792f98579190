use candle_core::Device;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;
use crate::nn::{ModelSpec, TaskInfo};

/// `n` points in 2-D... `dim`-D from `classes` well separated Gaussian blobs.
fn blobs(n: usize, dim: usize, classes: usize, seed: u64) -> Dataset {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut values = Vec::with_capacity(n * dim);
    let mut labels = Vec::with_capacity(n);
    for i in 0..n {
        let c = i % classes;
        for d in 0..dim {
            let centre = if d % classes == c { 2.0 } else { -0.5 };
            values.push(centre + 0.3 * (rng.random::<f32>() - 0.5));
        }
        labels.push(c as u32);
    }
    Dataset::new(
        Inputs::Dense {
            values,
            sample_shape: vec![dim],
        },
        Targets::Classes {
            labels,
            num_classes: classes,
        },
        None,
    )
    .unwrap()
}

/// Tiny `C×S×S` images whose class is which quadrant is bright.
fn quadrant_images(n: usize, c: usize, side: usize, seed: u64) -> Dataset {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut values = Vec::with_capacity(n * c * side * side);
    let mut labels = Vec::with_capacity(n);
    let half = side / 2;
    for i in 0..n {
        let q = (i % 4) as u32;
        for _ in 0..c {
            for y in 0..side {
                for x in 0..side {
                    let quad = (y >= half) as u32 * 2 + (x >= half) as u32;
                    let base = if quad == q { 1.0 } else { 0.0 };
                    values.push(base + 0.1 * (rng.random::<f32>() - 0.5));
                }
            }
        }
        labels.push(q);
    }
    Dataset::new(
        Inputs::Dense {
            values,
            sample_shape: vec![c, side, side],
        },
        Targets::Classes {
            labels,
            num_classes: 4,
        },
        None,
    )
    .unwrap()
}

/// All ratings of a `users × items` matrix of rank 2 around 3.
fn low_rank_ratings(users: usize, items: usize, seed: u64) -> Dataset {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let u: Vec<[f32; 2]> = (0..users)
        .map(|_| [rng.random_range(-1.0..1.0), rng.random_range(-1.0..1.0)])
        .collect();
    let v: Vec<[f32; 2]> = (0..items)
        .map(|_| [rng.random_range(-1.0..1.0), rng.random_range(-1.0..1.0)])
        .collect();
    let mut pairs = Vec::new();
    let mut ratings = Vec::new();
    for (a, uu) in u.iter().enumerate() {
        for (b, vv) in v.iter().enumerate() {
            pairs.push([a as u32, b as u32]);
            ratings.push(3.0 + uu[0] * vv[0] + uu[1] * vv[1]);
        }
    }
    Dataset::new(
        Inputs::Pairs {
            pairs,
            num_users: users,
            num_items: items,
        },
        Targets::Ratings(ratings),
        None,
    )
    .unwrap()
}

fn model_for(spec: ModelSpec, data: &Dataset, seed: u64) -> Model {
    Model::new(&spec, &TaskInfo::of(data).unwrap(), seed, &Device::Cpu).unwrap()
}

fn sgd(lr: f64, batch_size: usize, work: LocalWork) -> TrainConfig {
    TrainConfig {
        lr,
        batch_size,
        work,
        clip: None,
    }
}

#[test]
fn mlp_learns_separable_blobs() {
    let data = blobs(120, 6, 3, 1);
    let mut m = model_for(ModelSpec::Mlp { hidden: vec![16] }, &data, 0);
    let before = evaluate(&m, &data).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let first = train_local(&mut m, &data, &sgd(0.1, 16, LocalWork::Epochs(1)), &mut rng).unwrap();
    assert_eq!(first.steps, 8); // ceil(120 / 16)
    assert_eq!(first.samples, 120);
    let last = train_local(
        &mut m,
        &data,
        &sgd(0.1, 16, LocalWork::Epochs(20)),
        &mut rng,
    )
    .unwrap();
    let after = evaluate(&m, &data).unwrap();
    assert!(last.mean_loss < first.mean_loss, "{first:?} -> {last:?}");
    assert!(
        after.mean_loss() < 0.1 * before.mean_loss(),
        "{before:?} -> {after:?}"
    );
    assert_eq!(after.metric_name(), "accuracy");
    assert!(after.higher_is_better());
    assert_eq!(after.metric(), 1.0, "{after:?}");
}

#[test]
fn lenet_overfits_tiny_images() {
    let data = quadrant_images(16, 1, 12, 2);
    let mut m = model_for(ModelSpec::LeNet, &data, 0);
    let before = evaluate(&m, &data).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    train_local(
        &mut m,
        &data,
        &sgd(0.05, 4, LocalWork::Epochs(25)),
        &mut rng,
    )
    .unwrap();
    let after = evaluate(&m, &data).unwrap();
    assert!(
        after.mean_loss() < 0.5 * before.mean_loss(),
        "{before:?} -> {after:?}"
    );
    assert!(after.metric() >= 0.9, "{after:?}");
}

#[test]
fn resnet8_overfits_tiny_images() {
    let data = quadrant_images(8, 3, 8, 3);
    let mut m = model_for(ModelSpec::ResNet8, &data, 0);
    let before = evaluate(&m, &data).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    train_local(&mut m, &data, &sgd(0.05, 4, LocalWork::Steps(30)), &mut rng).unwrap();
    let after = evaluate(&m, &data).unwrap();
    assert!(
        after.mean_loss() < 0.5 * before.mean_loss(),
        "{before:?} -> {after:?}"
    );
}

#[test]
fn mf_fits_a_low_rank_matrix() {
    let data = low_rank_ratings(12, 15, 4);
    let mut m = model_for(
        ModelSpec::MatrixFactorization {
            factors: 4,
            centred: true,
        },
        &data,
        0,
    );
    let before = evaluate(&m, &data).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    train_local(&mut m, &data, &sgd(0.1, 8, LocalWork::Epochs(60)), &mut rng).unwrap();
    let after = evaluate(&m, &data).unwrap();
    assert_eq!(after.metric_name(), "rmse");
    assert!(!after.higher_is_better());
    assert!(
        after.metric() < 0.5 * before.metric(),
        "{before:?} -> {after:?}"
    );
    assert!(after.metric() < 0.15, "{after:?}");
}

#[test]
fn evaluate_agrees_with_per_sample_losses() {
    // Sizes that are not a multiple of EVAL_BATCH, to cover the last partial batch.
    for (data, spec) in [
        (
            blobs(EVAL_BATCH + 37, 5, 3, 9),
            ModelSpec::Mlp { hidden: vec![8] },
        ),
        (
            low_rank_ratings(13, 17, 2),
            ModelSpec::MatrixFactorization {
                factors: 3,
                centred: true,
            },
        ),
    ] {
        let m = model_for(spec, &data, 4);
        let losses = per_sample_losses(&m, &data).unwrap();
        assert_eq!(losses.len(), data.len());
        assert!(losses.iter().all(|l| l.is_finite() && *l >= 0.0));
        let mean = losses.iter().map(|&l| l as f64).sum::<f64>() / losses.len() as f64;
        let eval = evaluate(&m, &data).unwrap();
        assert!((eval.mean_loss() - mean).abs() < 1e-9, "{eval:?} vs {mean}");
        assert_eq!(eval.samples(), data.len());
        if let Evaluation::Rating {
            rmse, mean_loss, ..
        } = eval
        {
            assert!((rmse - mean_loss.sqrt()).abs() < 1e-12);
        }
        // Per-sample losses of a subset are the matching entries (batching does not change them).
        let sub = data.subset(&[3, 0, 7]);
        let sub_losses = per_sample_losses(&m, &sub).unwrap();
        for (k, &i) in [3usize, 0, 7].iter().enumerate() {
            assert!((sub_losses[k] - losses[i]).abs() < 1e-5);
        }
    }
}

#[test]
fn per_sample_cross_entropy_matches_a_hand_computation() {
    let data = blobs(4, 2, 2, 0);
    let mut m = model_for(ModelSpec::Mlp { hidden: vec![] }, &data, 0);
    // Zero weights, bias (0, ln 3): logits (0, ln 3) for every sample → p = (1/4, 3/4).
    // Flat order: out.bias (2), out.weight (2x2).
    m.set_flat_params(&[0.0, 3f32.ln(), 0.0, 0.0, 0.0, 0.0])
        .unwrap();
    let losses = per_sample_losses(&m, &data).unwrap();
    for (l, &label) in losses.iter().zip(data.labels().unwrap()) {
        let expected = if label == 0 {
            4f32.ln()
        } else {
            (4f32 / 3.0).ln()
        };
        assert!((l - expected).abs() < 1e-5, "{l} vs {expected}");
    }
    let eval = evaluate(&m, &data).unwrap();
    assert_eq!(eval.metric(), 0.5); // predicts class 1 always; half the labels are 1
}

#[test]
fn steps_work_crosses_epochs_and_training_is_reproducible() {
    let data = blobs(10, 4, 2, 1);
    let run = || {
        let mut m = model_for(ModelSpec::Mlp { hidden: vec![8] }, &data, 0);
        let mut rng = ChaCha8Rng::seed_from_u64(77);
        let r = train_local(&mut m, &data, &sgd(0.05, 4, LocalWork::Steps(7)), &mut rng).unwrap();
        (r, m.flat_params().unwrap())
    };
    let (r1, p1) = run();
    let (r2, p2) = run();
    assert_eq!(r1.steps, 7);
    assert_eq!(r1.samples, 4 + 4 + 2 + 4 + 4 + 2 + 4);
    assert_eq!(r1, r2);
    assert_eq!(
        p1, p2,
        "same model seed and rng must give the same trained model"
    );

    let mut m = model_for(ModelSpec::Mlp { hidden: vec![8] }, &data, 0);
    let mut rng = ChaCha8Rng::seed_from_u64(78);
    train_local(&mut m, &data, &sgd(0.05, 4, LocalWork::Steps(7)), &mut rng).unwrap();
    assert_ne!(
        m.flat_params().unwrap(),
        p1,
        "another shuffle seed gives another trajectory"
    );
}

#[test]
fn empty_data_and_bad_configs() {
    let data = blobs(6, 3, 3, 0);
    let empty = data.subset(&[]);
    let mut m = model_for(ModelSpec::Mlp { hidden: vec![4] }, &data, 0);
    let before = m.flat_params().unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let r = train_local(&mut m, &empty, &sgd(0.1, 4, LocalWork::Epochs(3)), &mut rng).unwrap();
    assert_eq!(
        r,
        TrainReport {
            mean_loss: 0.0,
            steps: 0,
            samples: 0
        }
    );
    let r = train_local(&mut m, &data, &sgd(0.1, 4, LocalWork::Steps(0)), &mut rng).unwrap();
    assert_eq!(r.steps, 0);
    assert_eq!(m.flat_params().unwrap(), before);
    assert!(per_sample_losses(&m, &empty).unwrap().is_empty());
    assert!(matches!(evaluate(&m, &empty), Err(ModelsError::Config(_))));

    for cfg in [
        sgd(0.0, 4, LocalWork::Epochs(1)),
        sgd(f64::NAN, 4, LocalWork::Epochs(1)),
        sgd(0.1, 0, LocalWork::Epochs(1)),
    ] {
        assert!(matches!(
            train_local(&mut m, &data, &cfg, &mut rng),
            Err(ModelsError::Config(_))
        ));
    }
    // A dataset of another task.
    let other = blobs(6, 4, 3, 0);
    assert!(matches!(
        train_local(&mut m, &other, &sgd(0.1, 4, LocalWork::Epochs(1)), &mut rng),
        Err(ModelsError::Config(_))
    ));
    assert!(evaluate(&m, &other).is_err());
}

#[test]
fn divergence_is_reported_not_hidden() {
    let data = low_rank_ratings(5, 5, 0);
    let mut m = model_for(
        ModelSpec::MatrixFactorization {
            factors: 2,
            centred: true,
        },
        &data,
        0,
    );
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let err =
        train_local(&mut m, &data, &sgd(1e6, 5, LocalWork::Epochs(50)), &mut rng).unwrap_err();
    assert!(err.to_string().contains("training diverged"), "{err}");
    assert!(
        matches!(err, ModelsError::Diverged { .. }),
        "typed: {err:?}"
    );
}

#[test]
fn config_types_serialise() {
    let cfg = sgd(0.075, 32, LocalWork::Epochs(1));
    let json = serde_json::to_string(&cfg).unwrap();
    assert_eq!(serde_json::from_str::<TrainConfig>(&json).unwrap(), cfg);
}

/// `n` random ratings (0.5 to 5 stars) of few users and items, so that batches repeat users, items and even
/// whole pairs.
fn random_ratings(n: usize, users: usize, items: usize, seed: u64) -> Dataset {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let pairs = (0..n)
        .map(|_| {
            [
                rng.random_range(0..users as u32),
                rng.random_range(0..items as u32),
            ]
        })
        .collect();
    let ratings = (0..n)
        .map(|_| rng.random_range(1..=10) as f32 / 2.0)
        .collect();
    Dataset::new(
        Inputs::Pairs {
            pairs,
            num_users: users,
            num_items: items,
        },
        Targets::Ratings(ratings),
        None,
    )
    .unwrap()
}

/// What one training run leaves: its report, the parameters, and the next draw of its shuffle RNG (equal
/// draws: both runs consumed the RNG alike).
#[derive(Debug)]
struct Run {
    report: TrainReport,
    params: Vec<f32>,
    next_draw: u64,
}

/// Trains a fresh `spec` model (seed 0) on `data` with shuffle seed `seed`, through `train_local` (the sparse
/// MF step on the CPU) or through the autograd path.
fn mf_run(spec: &ModelSpec, data: &Dataset, cfg: &TrainConfig, autograd: bool) -> Run {
    let mut m = model_for(spec.clone(), data, 0);
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let report = if autograd {
        let steps = total_steps(data.len(), cfg);
        train_autograd(&mut m, data, cfg, steps, &mut rng).unwrap()
    } else {
        train_local(&mut m, data, cfg, &mut rng).unwrap()
    };
    Run {
        report,
        params: m.flat_params().unwrap(),
        next_draw: rng.random(),
    }
}

/// Asserts that the sparse MF step and the autograd path agree: same steps, samples, shuffles; mean loss and
/// every parameter within 1e-5 relative (plus 1e-7 absolute, for parameters near zero).
fn assert_mf_paths_agree(spec: &ModelSpec, data: &Dataset, cfg: &TrainConfig) {
    let sparse = mf_run(spec, data, cfg, false);
    let dense = mf_run(spec, data, cfg, true);
    assert_eq!(sparse.report.steps, dense.report.steps);
    assert_eq!(sparse.report.samples, dense.report.samples);
    assert_eq!(
        sparse.next_draw, dense.next_draw,
        "RNG consumed differently"
    );
    let (a, b) = (sparse.report.mean_loss, dense.report.mean_loss);
    assert!((a - b).abs() <= 1e-6 * a.abs().max(b.abs()), "{a} vs {b}");
    let untrained = model_for(spec.clone(), data, 0).flat_params().unwrap();
    assert_ne!(sparse.params, untrained, "training changed nothing");
    let mut worst = 0.0f32;
    for (k, (&x, &y)) in sparse.params.iter().zip(&dense.params).enumerate() {
        let tol = 1e-5 * x.abs().max(y.abs()) + 1e-7;
        assert!((x - y).abs() <= tol, "parameter {k}: {x} vs {y}");
        worst = worst.max((x - y).abs());
    }
    eprintln!(
        "{spec} {cfg:?}: {} steps, mean loss {a} vs {b}, largest parameter difference {worst:e}",
        sparse.report.steps
    );
}

#[test]
fn mf_sparse_step_matches_autograd_on_synthetic_ratings() {
    // 7 users x 11 items: a batch of 32 repeats users, items and pairs. 300 samples end each epoch on a
    // partial batch of 12.
    let data = random_ratings(300, 7, 11, 3);
    for spec in [
        ModelSpec::MatrixFactorization {
            factors: 5,
            centred: false,
        },
        ModelSpec::MatrixFactorization {
            factors: 3,
            centred: true,
        },
    ] {
        for cfg in [
            sgd(0.075, 32, LocalWork::Epochs(5)),
            sgd(0.02, 7, LocalWork::Steps(130)),
            sgd(0.05, 1, LocalWork::Steps(40)),
            sgd(0.05, 500, LocalWork::Epochs(3)),
        ] {
            assert_mf_paths_agree(&spec, &data, &cfg);
        }
    }
    // Wider rows than Candle's SIMD sum width (32): the forward dot products may round differently.
    let data = random_ratings(200, 9, 13, 4);
    assert_mf_paths_agree(
        &ModelSpec::MatrixFactorization {
            factors: 40,
            centred: true,
        },
        &data,
        &sgd(0.05, 16, LocalWork::Epochs(4)),
    );
}

/// One node's share of MovieLens ml-latest-small training ratings (by user over 8 nodes, as the testnet
/// deals ratings), or `None` when the shared data is absent.
fn movielens_node_share() -> Option<Dataset> {
    let root = crate::data::tests::shared_data()?;
    let split = crate::data::movielens::load(&root.join("movielens"), 42).unwrap();
    let parts = crate::data::partition::partition(
        &split.train,
        8,
        &crate::data::partition::Partition::ByUser,
        7,
    )
    .unwrap();
    // The node's share keeps the full user and item counts, so the model is the paper's 206,680 parameters.
    Some(split.train.subset(&parts[0]))
}

#[test]
fn mf_sparse_step_matches_autograd_on_movielens() {
    let Some(data) = movielens_node_share() else {
        return;
    };
    for spec in [
        ModelSpec::default_for(&TaskInfo::of(&data).unwrap()),
        ModelSpec::MatrixFactorization {
            factors: 20,
            centred: true,
        },
    ] {
        assert_mf_paths_agree(&spec, &data, &sgd(0.075, 32, LocalWork::Epochs(2)));
    }
}

/// Candle's per-sample losses of `model` on `data`, batch by batch: the path every non-MF model evaluates by.
fn candle_losses(model: &Model, data: &Dataset) -> Vec<f32> {
    let indices: Vec<usize> = (0..data.len()).collect();
    let mut losses = Vec::new();
    for idx in indices.chunks(EVAL_BATCH) {
        let batch = make_batch(data, idx, model.device()).unwrap();
        losses.extend(batch_losses(model, &batch).unwrap().0);
    }
    losses
}

#[test]
fn mf_evaluation_matches_candles_forward_pass() {
    // 300 samples: two full evaluation batches and a partial one; trained first, so the rows differ.
    let data = random_ratings(300, 7, 11, 5);
    for (factors, centred) in [(5, false), (3, true), (40, true)] {
        let spec = ModelSpec::MatrixFactorization { factors, centred };
        let mut m = model_for(spec.clone(), &data, 0);
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        train_local(&mut m, &data, &sgd(0.05, 16, LocalWork::Epochs(2)), &mut rng).unwrap();
        let fast = per_sample_losses(&m, &data).unwrap();
        let candle = candle_losses(&m, &data);
        assert_eq!(fast.len(), data.len());
        // Up to Candle's SIMD sums (rows of 32 factors or more), the same operations in the same order.
        let tol = if factors < 32 { 0.0 } else { 1e-5 };
        for (k, (&a, &b)) in fast.iter().zip(&candle).enumerate() {
            assert!(
                (a - b).abs() <= tol * a.abs().max(b.abs()),
                "{spec} sample {k}: {a} vs {b}"
            );
        }
        let Evaluation::Rating { rmse, samples, .. } = evaluate(&m, &data).unwrap() else {
            panic!("MF evaluates as a rating model");
        };
        let mean = candle.iter().map(|&l| l as f64).sum::<f64>() / candle.len() as f64;
        assert_eq!(samples, data.len());
        assert!((rmse - mean.sqrt()).abs() <= 1e-6 * rmse, "{rmse} vs {}", mean.sqrt());
    }
}

#[test]
fn mf_divergence_is_the_same_error_on_both_paths() {
    let data = low_rank_ratings(5, 5, 0);
    let spec = ModelSpec::MatrixFactorization {
        factors: 2,
        centred: true,
    };
    let cfg = sgd(1e6, 5, LocalWork::Epochs(50));
    let mut errors = Vec::new();
    let mut params = Vec::new();
    for autograd in [false, true] {
        let mut m = model_for(spec.clone(), &data, 0);
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let err = if autograd {
            let steps = total_steps(data.len(), &cfg);
            train_autograd(&mut m, &data, &cfg, steps, &mut rng).unwrap_err()
        } else {
            train_local(&mut m, &data, &cfg, &mut rng).unwrap_err()
        };
        errors.push(err.to_string());
        params.push(m.flat_params().unwrap());
    }
    assert!(errors[0].contains("diverged"), "{}", errors[0]);
    assert_eq!(errors[0], errors[1]);
    // The sparse path writes its diverged parameters back, as the autograd path leaves them.
    assert!(params[0].iter().any(|p| !p.is_finite()));
    assert_eq!(
        params[0].iter().map(|p| p.is_finite()).collect::<Vec<_>>(),
        params[1].iter().map(|p| p.is_finite()).collect::<Vec<_>>()
    );
}

/// Wall-clock time of one local epoch of one MovieLens node (batch 32, lr 0.075) on both paths. A measurement,
/// not a check: `cargo test -p models --release mf_epoch_time -- --ignored --nocapture`.
#[test]
#[ignore = "timing; run in release with --nocapture"]
#[allow(clippy::disallowed_methods)] // a wall-clock measurement, not an input to training
fn mf_epoch_time_on_a_movielens_node() {
    let Some(data) = movielens_node_share() else {
        return;
    };
    let spec = ModelSpec::default_for(&TaskInfo::of(&data).unwrap());
    let cfg = sgd(0.075, 32, LocalWork::Epochs(1));
    for autograd in [true, false] {
        let mut m = model_for(spec.clone(), &data, 0);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let reps = if autograd { 5 } else { 50 };
        let mut best = f64::INFINITY;
        let mut total = 0.0;
        for _ in 0..reps {
            let t = std::time::Instant::now();
            if autograd {
                let steps = total_steps(data.len(), &cfg);
                train_autograd(&mut m, &data, &cfg, steps, &mut rng).unwrap();
            } else {
                train_local(&mut m, &data, &cfg, &mut rng).unwrap();
            }
            let s = t.elapsed().as_secs_f64();
            best = best.min(s);
            total += s;
        }
        eprintln!(
            "{}: one epoch of {} ratings ({} steps): best {:.2} ms, mean {:.2} ms over {reps} ({:.0} samples/s)",
            if autograd { "autograd" } else { "sparse MF" },
            data.len(),
            data.len().div_ceil(32),
            best * 1e3,
            total / reps as f64 * 1e3,
            data.len() as f64 / best
        );
    }
}

/// Logistic regression's per-sample gradient, by hand (f64): flat order `out.bias` (C) then `out.weight`
/// (C × D, row-major), the model's name-sorted order. p = softmax(W x + b); ∂b = p − e_y; ∂W = (p − e_y) xᵀ.
fn logreg_grad(params: &[f32], x: &[f32], y: usize, classes: usize) -> Vec<f64> {
    let d = x.len();
    let (b, w) = params.split_at(classes);
    let z: Vec<f64> = (0..classes)
        .map(|c| b[c] as f64 + (0..d).map(|j| w[c * d + j] as f64 * x[j] as f64).sum::<f64>())
        .collect();
    let m = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = z.iter().map(|v| (v - m).exp()).collect();
    let s: f64 = e.iter().sum();
    let r: Vec<f64> = (0..classes)
        .map(|c| e[c] / s - if c == y { 1.0 } else { 0.0 })
        .collect();
    let mut g = r.clone();
    for rc in &r {
        g.extend(x.iter().map(|&xj| rc * xj as f64));
    }
    g
}

fn norm(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

#[test]
fn clipping_bounds_each_samples_gradient_as_computed_by_hand() {
    // Three samples, one of them scaled ×1000: its gradient is huge, the others' small.
    let (classes, dim) = (3, 4);
    let mut data = blobs(3, dim, classes, 11);
    if let Inputs::Dense { values, .. } = &data.inputs() {
        let mut v = values.to_vec();
        for x in &mut v[dim..2 * dim] {
            *x *= 1000.0;
        }
        data = Dataset::new(
            Inputs::Dense {
                values: v,
                sample_shape: vec![dim],
            },
            data.targets().clone(),
            None,
        )
        .unwrap();
    }
    let (xs, ys) = match (data.inputs(), data.targets()) {
        (Inputs::Dense { values, .. }, Targets::Classes { labels, .. }) => {
            (values.to_vec(), labels.to_vec())
        }
        _ => unreachable!(),
    };
    let lr = 0.1;
    let mut m = model_for(ModelSpec::Mlp { hidden: vec![] }, &data, 3);
    let before = m.flat_params().unwrap();
    let grads: Vec<Vec<f64>> = (0..3)
        .map(|i| logreg_grad(&before, &xs[i * dim..(i + 1) * dim], ys[i] as usize, classes))
        .collect();
    // A bound the two ordinary samples stay under and the scaled one exceeds a hundredfold.
    let bound = 1.5 * norm(&grads[0]).max(norm(&grads[2]));
    assert!(norm(&grads[1]) > 100.0 * bound, "{} vs B = {bound}", norm(&grads[1]));
    // By hand: clip each to norm ≤ B, average over the batch, one SGD step.
    let mut expected: Vec<f64> = before.iter().map(|&p| p as f64).collect();
    for g in &grads {
        let scale = (bound / norm(g)).min(1.0);
        for (e, gi) in expected.iter_mut().zip(g) {
            *e -= lr * scale * gi / 3.0;
        }
    }
    let cfg = TrainConfig {
        clip: Some(bound),
        ..sgd(lr, 3, LocalWork::Steps(1))
    };
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    train_local(&mut m, &data, &cfg, &mut rng).unwrap();
    let after = m.flat_params().unwrap();
    let err = after
        .iter()
        .zip(&expected)
        .map(|(&a, e)| (a as f64 - e).abs())
        .fold(0.0, f64::max);
    assert!(err < 1e-5, "max error to the hand computation {err}");

    // The huge sample alone moves the model by at most lr·B (unclipped it would move it by lr·‖g‖ > 100·lr·B).
    let alone = data.subset(&[1]);
    let mut m1 = model_for(ModelSpec::Mlp { hidden: vec![] }, &data, 3);
    train_local(&mut m1, &alone, &cfg, &mut rng).unwrap();
    let step: Vec<f64> = m1
        .flat_params()
        .unwrap()
        .iter()
        .zip(&before)
        .map(|(&a, &b)| a as f64 - b as f64)
        .collect();
    assert!(norm(&step) <= lr * bound * (1.0 + 1e-5), "{}", norm(&step));
    assert!(norm(&step) > 0.99 * lr * bound, "{}", norm(&step));
}

#[test]
fn clipping_off_is_todays_path_and_a_loose_bound_changes_nothing() {
    let data = blobs(50, 6, 3, 12);
    let spec = ModelSpec::Mlp { hidden: vec![8] };
    let run = |cfg: &TrainConfig| {
        let mut m = model_for(spec.clone(), &data, 4);
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let r = train_local(&mut m, &data, cfg, &mut rng).unwrap();
        (m.flat_params().unwrap(), r)
    };
    let plain = sgd(0.1, 8, LocalWork::Epochs(2));
    // A config written before the option (no `clip` key) is the unclipped path, bit for bit.
    let old: TrainConfig =
        serde_json::from_str(r#"{"lr":0.1,"batch_size":8,"work":{"Epochs":2}}"#).unwrap();
    assert_eq!(old, plain);
    assert!(!serde_json::to_string(&plain).unwrap().contains("clip"));
    let (p0, r0) = run(&plain);
    let (p1, r1) = run(&old);
    assert_eq!(p0, p1);
    assert_eq!(r0, r1);
    // A bound no gradient reaches: the per-sample path is the same SGD (to float rounding of the sums).
    let (p2, r2) = run(&TrainConfig {
        clip: Some(1e30),
        ..plain
    });
    assert_eq!((r2.steps, r2.samples), (r0.steps, r0.samples));
    assert!((r2.mean_loss - r0.mean_loss).abs() < 1e-5, "{r0:?} {r2:?}");
    let err = p0
        .iter()
        .zip(&p2)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(err < 1e-5, "{err}");
    // A tight bound does change the trajectory.
    let (p3, _) = run(&TrainConfig {
        clip: Some(1e-3),
        ..plain
    });
    assert_ne!(p0, p3);
}

#[test]
fn clipping_bound_must_be_positive_and_finite() {
    let data = blobs(10, 4, 2, 13);
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let mut m = model_for(ModelSpec::Mlp { hidden: vec![] }, &data, 0);
        let cfg = TrainConfig {
            clip: Some(bad),
            ..sgd(0.1, 4, LocalWork::Steps(1))
        };
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        assert!(train_local(&mut m, &data, &cfg, &mut rng).is_err(), "{bad}");
    }
}

#[test]
fn clipping_trains_mf_through_autograd() {
    let data = low_rank_ratings(6, 7, 14);
    let spec = ModelSpec::MatrixFactorization {
        factors: 3,
        centred: true,
    };
    let mut m = model_for(spec, &data, 0);
    let before = evaluate(&m, &data).unwrap();
    let cfg = TrainConfig {
        clip: Some(10.0),
        ..sgd(0.1, 8, LocalWork::Epochs(40))
    };
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    train_local(&mut m, &data, &cfg, &mut rng).unwrap();
    let after = evaluate(&m, &data).unwrap();
    assert!(after.metric() < before.metric(), "{before:?} -> {after:?}");
}
