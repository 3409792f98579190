//! Optimisation-based gradient inversion ("Deep Leakage from Gradients", DLG; Zhu, Liu, Han 2019), restricted
//! to the coordinates an attacker holds.
//!
//! The attacker looks for a dummy input x̂ and dummy soft label ŷ whose gradient matches the observed one on
//! the held coordinates H: minimise `D(x̂, ŷ) = Σ_{i∈H} (∇θ L(x̂, ŷ)[i] − g[i])²` by Adam, where
//! `L = −Σ softmax(ŷ)·log_softmax(f_θ₀(x̂))`. Differentiating D needs the gradient **of a gradient**.
//!
//! Candle 0.11 and second-order gradients: `Tensor::backward` detaches every intermediate gradient
//! (`candle-core/src/backprop.rs`: "we just call `.detach` to avoid computing the backprop graph of the
//! backprop itself. This would be an issue for second order derivatives but these are out of scope at the
//! moment"), so by default `D.backward()` has no path to x̂ and DLG is impossible. The same file keeps the
//! graph when the environment variable `CANDLE_GRAD_DO_NOT_DETACH` is set (non-empty, not "0"); it is read
//! once per thread, so it must be in the environment when the process starts (setting it from Rust 2024 is
//! `unsafe`). In that mode the backward formulas of matmul, ReLU, softmax / log-softmax and the reductions are
//! themselves differentiable, and the second derivative matches finite differences (checked by the `gia`
//! example and the test below when the variable is set). [`dlg_invert`] checks for the missing gradient on
//! its first step and returns a clear error instead of silently not moving.

use candle_core::{DType, Tensor, Var};
use candle_nn::optim::{AdamW, Optimizer, ParamsAdamW};
use rand::Rng;
use rand_distr::StandardNormal;
use serde::{Deserialize, Serialize};

use crate::nn::{Model, TaskInfo};
use crate::{ModelsError, Result};

use super::gia::HeldGradient;

/// The environment variable that makes Candle keep the graph of gradients (second-order gradients).
pub const SECOND_ORDER_ENV: &str = "CANDLE_GRAD_DO_NOT_DETACH";

/// True when the process was started with [`SECOND_ORDER_ENV`] set the way Candle reads it.
pub fn second_order_enabled() -> bool {
    std::env::var(SECOND_ORDER_ENV).is_ok_and(|s| !s.is_empty() && s != "0")
}

/// DLG settings.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct DlgConfig {
    /// Samples reconstructed at once (the batch size of the observed update).
    pub batch: usize,
    /// Adam steps.
    pub iterations: usize,
    /// Adam learning rate on the dummy input and label.
    pub lr: f64,
}

impl Default for DlgConfig {
    /// One sample, 300 Adam steps at 0.1: enough to converge on an MLP with the full gradient.
    fn default() -> Self {
        Self {
            batch: 1,
            iterations: 300,
            lr: 0.1,
        }
    }
}

/// What [`dlg_invert`] found.
#[derive(Clone, Debug, PartialEq)]
pub struct DlgResult {
    /// `batch × sample` reconstructed inputs, row-major.
    pub inputs: Vec<f32>,
    /// Arg-max of each dummy label.
    pub labels: Vec<u32>,
    /// Gradient distance D at the start and at the end, relative to `Σ g²` over the held coordinates.
    pub initial_distance: f64,
    pub final_distance: f64,
}

/// Runs DLG against `model` (holding the common start θ₀) for the observed held gradient `target` (the
/// gradient of the mean cross-entropy over the batch). Dummy inputs start from N(0, 1) drawn with `rng`.
///
/// Errors: not a dense classification model; `target` not of length d or holding nothing; Candle not in
/// second-order mode (see the module documentation).
pub fn dlg_invert<R: Rng + ?Sized>(
    model: &Model,
    target: &HeldGradient,
    cfg: &DlgConfig,
    rng: &mut R,
) -> Result<DlgResult> {
    let TaskInfo::Classification {
        sample_shape,
        num_classes,
    } = model.info()
    else {
        return Err(ModelsError::Config(
            "DLG reconstructs dense inputs of a classification model".into(),
        ));
    };
    if target.len() != model.num_params() {
        return Err(ModelsError::ParamLength {
            expected: model.num_params(),
            got: target.len(),
        });
    }
    if cfg.batch == 0 || cfg.iterations == 0 || !(cfg.lr.is_finite() && cfg.lr > 0.0) {
        return Err(ModelsError::Config(format!(
            "DLG: bad configuration {cfg:?}"
        )));
    }
    let dev = model.device();
    let (held_idx, held_val): (Vec<u32>, Vec<f32>) = (0..target.len())
        .filter_map(|i| target.get(i).map(|v| (i as u32, v)))
        .unzip();
    if held_idx.is_empty() {
        return Err(ModelsError::Config("DLG: no coordinate is held".into()));
    }
    let norm = held_val
        .iter()
        .map(|&v| (v as f64).powi(2))
        .sum::<f64>()
        .max(1e-30);
    let held_idx = Tensor::from_vec(held_idx, target.held_count(), dev)?;
    let held_val = Tensor::from_vec(held_val, target.held_count(), dev)?;

    let stride: usize = sample_shape.iter().product();
    let mut shape = vec![cfg.batch];
    shape.extend_from_slice(sample_shape);
    let init: Vec<f32> = (0..cfg.batch * stride)
        .map(|_| rng.sample::<f32, _>(StandardNormal))
        .collect();
    let x = Var::from_vec(init, shape, dev)?;
    let y_init: Vec<f32> = (0..cfg.batch * num_classes)
        .map(|_| rng.sample::<f32, _>(StandardNormal))
        .collect();
    let y = Var::from_vec(y_init, (cfg.batch, *num_classes), dev)?;
    let mut opt = AdamW::new(
        vec![x.clone(), y.clone()],
        ParamsAdamW {
            lr: cfg.lr,
            weight_decay: 0.0,
            ..Default::default()
        },
    )?;
    let vars = model.all_vars();
    let mut initial = f64::NAN;
    let mut last = f64::NAN;
    for it in 0..cfg.iterations {
        let out = model.forward(x.as_tensor())?;
        let logp = candle_nn::ops::log_softmax(&out, 1)?;
        let p = candle_nn::ops::softmax(y.as_tensor(), 1)?;
        let loss = ((p * logp)?.sum_all()? / -(cfg.batch as f64))?;
        let grads = loss.backward()?;
        let mut parts = Vec::with_capacity(vars.len());
        for v in &vars {
            parts.push(match grads.get(v.as_tensor()) {
                Some(g) => g.flatten_all()?,
                None => Tensor::zeros(v.elem_count(), DType::F32, dev)?,
            });
        }
        let flat = Tensor::cat(&parts, 0)?;
        let dist = (flat.index_select(&held_idx, 0)? - &held_val)?
            .sqr()?
            .sum_all()?;
        let d = dist.to_scalar::<f32>()? as f64 / norm;
        if it == 0 {
            initial = d;
        }
        last = d;
        let dgrads = dist.backward()?;
        if it == 0 && dgrads.get(x.as_tensor()).is_none() {
            return Err(ModelsError::Config(format!(
                "DLG needs second-order gradients: start the process with {SECOND_ORDER_ENV}=1 \
                 (Candle detaches gradients otherwise)"
            )));
        }
        opt.step(&dgrads)?;
    }
    let labels = y.as_tensor().argmax(1)?.to_vec1::<u32>()?;
    Ok(DlgResult {
        inputs: x.as_tensor().flatten_all()?.to_vec1::<f32>()?,
        labels,
        initial_distance: initial,
        final_distance: last,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::ModelSpec;
    use candle_core::Device;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    /// Without second-order mode DLG must refuse rather than return its random start. (With the variable
    /// set, `cargo test` runs the other branch: the distance must fall.)
    #[test]
    fn refuses_without_second_order_or_reduces_the_distance() {
        let info = TaskInfo::Classification {
            sample_shape: vec![6],
            num_classes: 3,
        };
        let model =
            Model::new(&ModelSpec::Mlp { hidden: vec![8] }, &info, 1, &Device::Cpu).unwrap();
        let target = HeldGradient::full(vec![0.01; model.num_params()]);
        let cfg = DlgConfig {
            iterations: 50,
            ..Default::default()
        };
        let r = dlg_invert(&model, &target, &cfg, &mut ChaCha8Rng::seed_from_u64(1));
        if second_order_enabled() {
            let r = r.unwrap();
            assert!(r.final_distance < r.initial_distance, "{r:?}");
        } else {
            assert!(matches!(r, Err(ModelsError::Config(m)) if m.contains(SECOND_ORDER_ENV)));
        }
    }
}
