//! Local training and evaluation: plain mini-batch SGD (the Shatter paper's experimental setup: SGD, batch
//! 32), cross-entropy for classification and MSE for ratings; evaluation by accuracy or RMSE; per-sample losses
//! for the privacy attacks.
//!
//! Batches are built from the dataset's flat vectors only when needed, so a node's data never lives on the
//! device as a whole.
//!
//! `train/mf_sgd.rs`: the exact sparse-row SGD step that trains matrix factorisation on the CPU, and its
//! per-sample squared errors without Candle's batches.

use candle_core::{D, DType, Device, Tensor};
use candle_nn::optim::{Optimizer, SGD};
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::data::{Dataset, Inputs, Targets};
use crate::nn::Model;
use crate::{ModelsError, Result};

mod mf_sgd;

/// Batch size of evaluation and per-sample losses: large enough to amortise per-batch overhead, small enough
/// that ResNet-18 activations (with im2col) stay in the low hundreds of MB on the CPU.
pub const EVAL_BATCH: usize = 128;

/// How much local work one round does (the paper's H: by default one local epoch; DESIGN.md §1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LocalWork {
    /// Full passes over the local data, reshuffled each time.
    Epochs(usize),
    /// A fixed number of mini-batch steps, reshuffling whenever the data is exhausted.
    Steps(usize),
}

/// Local SGD settings.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// Learning rate (paper: 0.05 CIFAR-10, 0.075 MovieLens, 0.005 Sent140).
    pub lr: f64,
    /// Mini-batch size (paper: 32). The last batch of an epoch may be smaller.
    pub batch_size: usize,
    pub work: LocalWork,
    /// Per-sample gradient clipping (DP-SGD style): every sample's gradient is scaled to L2 norm ≤ this bound
    /// before the batch's gradients are averaged, so the batch gradient has norm ≤ B whatever the loss — the
    /// bound B that GHP's DP accountant (`schemes::accountant`) assumes. `None` (the default, and what a
    /// config without the key gives): plain mini-batch SGD, unchanged. Costs one forward/backward pass per
    /// sample instead of per batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clip: Option<f64>,
}

impl TrainConfig {
    fn validate(&self) -> Result<()> {
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Err(ModelsError::Config(format!(
                "learning rate must be positive and finite, got {}",
                self.lr
            )));
        }
        if self.batch_size == 0 {
            return Err(ModelsError::Config("batch size must be at least 1".into()));
        }
        if let Some(b) = self.clip
            && !(b.is_finite() && b > 0.0)
        {
            return Err(ModelsError::Config(format!(
                "clipping bound must be positive and finite, got {b}"
            )));
        }
        Ok(())
    }
}

/// What one call of [`train_local`] did.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainReport {
    /// Mean training loss over all samples processed (each batch's loss weighted by its size); 0 when no step
    /// was taken.
    pub mean_loss: f64,
    /// SGD steps taken.
    pub steps: usize,
    /// Samples processed (with repetition across epochs).
    pub samples: usize,
}

/// Which test metric a task reports. Serialised as `"accuracy"` / `"rmse"` (the names in metrics files).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricKind {
    /// Classification accuracy in [0, 1]: higher is better.
    #[default]
    Accuracy,
    /// Root mean squared error of rating predictions: lower is better.
    Rmse,
}

impl MetricKind {
    /// `"accuracy"` or `"rmse"`.
    pub fn name(self) -> &'static str {
        match self {
            MetricKind::Accuracy => "accuracy",
            MetricKind::Rmse => "rmse",
        }
    }

    pub fn higher_is_better(self) -> bool {
        self == MetricKind::Accuracy
    }

    /// Whether `a` is a better value of this metric than `b`.
    pub fn better(self, a: f64, b: f64) -> bool {
        if self.higher_is_better() {
            a > b
        } else {
            a < b
        }
    }
}

impl std::fmt::Display for MetricKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The result of [`evaluate`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Evaluation {
    /// Classification: fraction of samples whose arg-max logit is the label; mean cross-entropy.
    Classification {
        accuracy: f64,
        mean_loss: f64,
        samples: usize,
    },
    /// Rating prediction: root mean squared error; mean squared error (the loss).
    Rating {
        rmse: f64,
        mean_loss: f64,
        samples: usize,
    },
}

impl Evaluation {
    /// Which metric [`Evaluation::metric`] is.
    pub fn metric_kind(&self) -> MetricKind {
        match self {
            Evaluation::Classification { .. } => MetricKind::Accuracy,
            Evaluation::Rating { .. } => MetricKind::Rmse,
        }
    }

    /// `"accuracy"` or `"rmse"`.
    pub fn metric_name(&self) -> &'static str {
        self.metric_kind().name()
    }

    /// Accuracy in [0, 1] or RMSE.
    pub fn metric(&self) -> f64 {
        match *self {
            Evaluation::Classification { accuracy, .. } => accuracy,
            Evaluation::Rating { rmse, .. } => rmse,
        }
    }

    /// True for accuracy, false for RMSE.
    pub fn higher_is_better(&self) -> bool {
        self.metric_kind().higher_is_better()
    }

    pub fn mean_loss(&self) -> f64 {
        match *self {
            Evaluation::Classification { mean_loss, .. } | Evaluation::Rating { mean_loss, .. } => {
                mean_loss
            }
        }
    }

    pub fn samples(&self) -> usize {
        match *self {
            Evaluation::Classification { samples, .. } | Evaluation::Rating { samples, .. } => {
                samples
            }
        }
    }
}

/// Inputs and targets of one batch, as tensors on the model's device.
struct Batch {
    inputs: Tensor,
    targets: Tensor,
}

fn make_batch(data: &Dataset, indices: &[usize], device: &Device) -> Result<Batch> {
    let b = indices.len();
    let inputs = match data.inputs() {
        Inputs::Dense {
            values,
            sample_shape,
        } => {
            let stride: usize = sample_shape.iter().product();
            let mut v = Vec::with_capacity(b * stride);
            for &i in indices {
                v.extend_from_slice(&values[i * stride..(i + 1) * stride]);
            }
            let mut shape = Vec::with_capacity(sample_shape.len() + 1);
            shape.push(b);
            shape.extend_from_slice(sample_shape);
            Tensor::from_vec(v, shape, device)?
        }
        Inputs::Pairs { pairs, .. } => {
            let v: Vec<u32> = indices.iter().flat_map(|&i| pairs[i]).collect();
            Tensor::from_vec(v, (b, 2), device)?
        }
    };
    let targets = match data.targets() {
        Targets::Classes { labels, .. } => {
            let v: Vec<u32> = indices.iter().map(|&i| labels[i]).collect();
            Tensor::from_vec(v, b, device)?
        }
        Targets::Ratings(r) => {
            let v: Vec<f32> = indices.iter().map(|&i| r[i]).collect();
            Tensor::from_vec(v, b, device)?
        }
    };
    Ok(Batch { inputs, targets })
}

/// Mean loss of a batch (a scalar tensor with gradient): cross-entropy on logits or MSE on ratings.
fn batch_loss(model: &Model, batch: &Batch) -> Result<Tensor> {
    let out = model.forward(&batch.inputs)?;
    Ok(if model.info().is_rating() {
        candle_nn::loss::mse(&out, &batch.targets)?
    } else {
        candle_nn::loss::cross_entropy(&out, &batch.targets)?
    })
}

/// Runs local SGD on `data`: shuffles with `rng` (so a node's training is reproducible from its seed), takes
/// mini-batches of `cfg.batch_size` and steps until `cfg.work` is done. An empty dataset or zero work gives a
/// zero-step report; a dataset that does not fit the model, or a bad config, is an error.
///
/// Matrix factorisation on the CPU takes a specialised exact SGD step (`train/mf_sgd.rs`) that touches only the
/// embedding rows of each batch; every other model, and MF on CUDA / Metal, goes through Candle's autograd.
/// Both give the same parameters (to float rounding), losses and shuffles. With `cfg.clip` set, every model
/// (MF included) takes the per-sample clipped step instead ([`train_clipped`]); the shuffle is the same.
pub fn train_local(
    model: &mut Model,
    data: &Dataset,
    cfg: &TrainConfig,
    rng: &mut ChaCha8Rng,
) -> Result<TrainReport> {
    cfg.validate()?;
    model.info().check(data)?;
    let total_steps = total_steps(data.len(), cfg);
    if total_steps == 0 {
        return Ok(TrainReport {
            mean_loss: 0.0,
            steps: 0,
            samples: 0,
        });
    }
    if let Some(bound) = cfg.clip {
        return train_clipped(model, data, cfg, bound, total_steps, rng);
    }
    if model.device().is_cpu()
        && let Some(mf) = model.mf_vars()
    {
        return mf_sgd::train(&mf, data, cfg, total_steps, rng);
    }
    train_autograd(model, data, cfg, total_steps, rng)
}

/// SGD steps that `cfg.work` asks for on `n` samples.
fn total_steps(n: usize, cfg: &TrainConfig) -> usize {
    match cfg.work {
        _ if n == 0 => 0,
        LocalWork::Epochs(e) => e * n.div_ceil(cfg.batch_size),
        LocalWork::Steps(s) => s,
    }
}

/// [`train_local`] through Candle's autograd and its SGD optimizer: any model, any device.
fn train_autograd(
    model: &mut Model,
    data: &Dataset,
    cfg: &TrainConfig,
    total_steps: usize,
    rng: &mut ChaCha8Rng,
) -> Result<TrainReport> {
    let mut opt = SGD::new(model.all_vars(), cfg.lr)?;
    let device = model.device().clone();
    run_batches(data.len(), cfg, total_steps, rng, |idx| {
        let batch = make_batch(data, idx, &device)?;
        let loss = batch_loss(model, &batch)?;
        opt.backward_step(&loss)?;
        Ok(loss.to_scalar::<f32>()?)
    })
}

/// [`train_local`] with per-sample gradient clipping: for each mini-batch, every sample's gradient (over all
/// parameters, one forward/backward pass per sample) is scaled to L2 norm ≤ `bound`, the clipped gradients
/// are averaged over the batch, and one SGD step of `cfg.lr` is taken with that average — so no sample moves
/// the model by more than `lr · bound / batch`, and a step by more than `lr · bound`. The reported loss is the
/// batch mean of the per-sample losses before the step, as in the unclipped path.
fn train_clipped(
    model: &mut Model,
    data: &Dataset,
    cfg: &TrainConfig,
    bound: f64,
    total_steps: usize,
    rng: &mut ChaCha8Rng,
) -> Result<TrainReport> {
    let vars = model.all_vars();
    let device = model.device().clone();
    run_batches(data.len(), cfg, total_steps, rng, |idx| {
        let mut sum: Vec<Option<Tensor>> = vec![None; vars.len()];
        let mut loss_sum = 0.0f64;
        for &i in idx {
            let batch = make_batch(data, &[i], &device)?;
            let loss = batch_loss(model, &batch)?;
            let l = loss.to_scalar::<f32>()? as f64;
            loss_sum += l;
            if !l.is_finite() {
                // run_batches reports the divergence; no step is taken on a non-finite gradient.
                return Ok(l as f32);
            }
            let grads = loss.backward()?;
            let per_var: Vec<Option<&Tensor>> = vars.iter().map(|v| grads.get(v)).collect();
            let mut sq = 0.0f64;
            for g in per_var.iter().flatten() {
                sq += g.sqr()?.sum_all()?.to_dtype(DType::F64)?.to_scalar::<f64>()?;
            }
            let norm = sq.sqrt();
            let scale = if norm > bound { bound / norm } else { 1.0 };
            for (acc, g) in sum.iter_mut().zip(per_var) {
                let Some(g) = g else { continue };
                let g = if scale < 1.0 { (g * scale)? } else { g.clone() };
                *acc = Some(match acc.take() {
                    Some(a) => (a + g)?,
                    None => g,
                });
            }
        }
        let step = cfg.lr / idx.len() as f64;
        for (v, g) in vars.iter().zip(sum) {
            if let Some(g) = g {
                v.set(&v.sub(&(g * step)?)?)?;
            }
        }
        Ok((loss_sum / idx.len() as f64) as f32)
    })
}

/// The loop shared by every SGD implementation, so that they shuffle, count and report alike: reshuffles
/// `0..n` with `rng` each epoch, calls `step` on each mini-batch of sample indices (it applies one SGD step and
/// returns the batch's mean loss before the step) until `total_steps` (> 0), and fails on a non-finite loss.
fn run_batches(
    n: usize,
    cfg: &TrainConfig,
    total_steps: usize,
    rng: &mut ChaCha8Rng,
    mut step: impl FnMut(&[usize]) -> Result<f32>,
) -> Result<TrainReport> {
    let mut report = TrainReport {
        mean_loss: 0.0,
        steps: 0,
        samples: 0,
    };
    let mut order: Vec<usize> = (0..n).collect();
    let mut loss_sum = 0.0f64;
    'outer: loop {
        order.shuffle(rng);
        for idx in order.chunks(cfg.batch_size) {
            let l = step(idx)? as f64;
            if !l.is_finite() {
                return Err(ModelsError::Diverged {
                    step: report.steps,
                    loss: l,
                    lr: cfg.lr,
                });
            }
            loss_sum += l * idx.len() as f64;
            report.steps += 1;
            report.samples += idx.len();
            if report.steps == total_steps {
                break 'outer;
            }
        }
    }
    report.mean_loss = loss_sum / report.samples as f64;
    Ok(report)
}

/// Per-sample losses of a batch (cross-entropy or squared error) and, for classification, the number of
/// correct predictions.
fn batch_losses(model: &Model, batch: &Batch) -> Result<(Vec<f32>, usize)> {
    let out = model.forward(&batch.inputs)?;
    if model.info().is_rating() {
        let se = (out - &batch.targets)?.sqr()?;
        Ok((se.to_vec1::<f32>()?, 0))
    } else {
        let logp = candle_nn::ops::log_softmax(&out, D::Minus1)?;
        let nll = logp
            .gather(&batch.targets.unsqueeze(1)?, 1)?
            .squeeze(1)?
            .neg()?;
        let pred = out.argmax(D::Minus1)?;
        let correct = pred
            .eq(&batch.targets)?
            .to_dtype(DType::U32)?
            .sum_all()?
            .to_scalar::<u32>()? as usize;
        Ok((nll.to_vec1::<f32>()?, correct))
    }
}

fn losses_and_correct(model: &Model, data: &Dataset) -> Result<(Vec<f32>, usize)> {
    model.info().check(data)?;
    if model.device().is_cpu()
        && let Some(mf) = model.mf_vars()
    {
        return Ok((mf_sgd::squared_errors(&mf, data)?, 0));
    }
    let indices: Vec<usize> = (0..data.len()).collect();
    let mut losses = Vec::with_capacity(data.len());
    let mut correct = 0;
    for idx in indices.chunks(EVAL_BATCH) {
        let batch = make_batch(data, idx, model.device())?;
        let (l, c) = batch_losses(model, &batch)?;
        losses.extend(l);
        correct += c;
    }
    Ok((losses, correct))
}

/// The loss of every sample of `data`, in order (cross-entropy, or squared error for ratings), without
/// changing the model. Membership-inference attacks threshold these.
pub fn per_sample_losses(model: &Model, data: &Dataset) -> Result<Vec<f32>> {
    Ok(losses_and_correct(model, data)?.0)
}

/// Accuracy (or RMSE) and mean loss of `model` on `data`. An empty dataset is an error: there is no metric.
pub fn evaluate(model: &Model, data: &Dataset) -> Result<Evaluation> {
    if data.is_empty() {
        return Err(ModelsError::Config(
            "cannot evaluate on an empty dataset".into(),
        ));
    }
    let (losses, correct) = losses_and_correct(model, data)?;
    let n = losses.len();
    let mean_loss = losses.iter().map(|&l| l as f64).sum::<f64>() / n as f64;
    Ok(if model.info().is_rating() {
        Evaluation::Rating {
            rmse: mean_loss.sqrt(),
            mean_loss,
            samples: n,
        }
    } else {
        Evaluation::Classification {
            accuracy: correct as f64 / n as f64,
            mean_loss,
            samples: n,
        }
    })
}

#[cfg(test)]
mod tests;
