//! Seeded weight initialisation.
//!
//! Candle's CPU random generator cannot be seeded, yet every node of a run must start from the bit-identical
//! model (DESIGN.md §3.2; the paper's nodes all start from the same θ₀). So models are built through a
//! `Recorder` backend that creates every variable as zeros (no Candle RNG draw at all) and remembers the
//! [`Init`] hint the layer asked for. `apply` then visits the variables in NAME-SORTED order (the `VarMap` is
//! a `HashMap`, DESIGN.md §3.6) and fills each one with values drawn from one ChaCha stream seeded by the run
//! seed, following that tensor's hint. Draws are computed in f64 and rounded to f32, so the result does not
//! depend on the platform.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::init::NormalOrUniform;
use candle_nn::var_builder::SimpleBackend;
use candle_nn::{Init, VarBuilder, VarMap};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

use crate::{ModelsError, Result};

/// He/Kaiming uniform by fan-in with the ReLU gain: bound `sqrt(6 / fan_in)`. For every weight that feeds a
/// ReLU (He et al. 2015).
pub const KAIMING_UNIFORM_RELU: Init = candle_nn::init::DEFAULT_KAIMING_UNIFORM;

/// Uniform `±1/sqrt(fan_in)`: PyTorch's default for `nn.Linear`/`nn.Conv2d` biases and a safe scale for the
/// classifier head, whose output is not followed by a ReLU.
pub fn fan_in_uniform(fan_in: usize) -> Init {
    let bound = 1.0 / (fan_in.max(1) as f64).sqrt();
    Init::Uniform {
        lo: -bound,
        up: bound,
    }
}

/// The hints recorded while a model is built: variable name → (shape, requested init). Ordered by name.
pub(crate) type Hints = Arc<Mutex<BTreeMap<String, (Shape, Init)>>>;

/// A `VarBuilder` backend that creates each variable in a [`VarMap`] as zeros and records the init hint.
struct Recorder {
    varmap: VarMap,
    hints: Hints,
}

impl SimpleBackend for Recorder {
    fn get(
        &self,
        s: Shape,
        name: &str,
        h: Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        // Zeros: creating the variable must not consume Candle's unseedable RNG.
        let t = self
            .varmap
            .get(s.clone(), name, Init::Const(0.0), dtype, dev)?;
        self.hints
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name.to_string())
            .or_insert((s, h));
        Ok(t)
    }

    fn get_unchecked(
        &self,
        name: &str,
        _dtype: DType,
        _dev: &Device,
    ) -> candle_core::Result<Tensor> {
        candle_core::bail!("variable {name} requested without a shape; models must give one")
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.varmap
            .data()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(name)
    }
}

/// A `VarBuilder` (f32) that records init hints into `hints` and creates zeroed variables in `varmap`.
pub(crate) fn recording_builder(
    varmap: &VarMap,
    hints: &Hints,
    device: &Device,
) -> VarBuilder<'static> {
    VarBuilder::from_backend(
        Box::new(Recorder {
            varmap: varmap.clone(),
            hints: hints.clone(),
        }),
        DType::F32,
        device.clone(),
    )
}

/// Draws the values of one tensor of `numel` elements and shape `shape` from `rng` according to `init`.
fn draw(init: &Init, shape: &Shape, rng: &mut ChaCha8Rng) -> Result<Vec<f32>> {
    let n = shape.elem_count();
    let uniform = |rng: &mut ChaCha8Rng, lo: f64, up: f64| -> Vec<f32> {
        (0..n)
            .map(|_| (lo + (up - lo) * rng.random::<f64>()) as f32)
            .collect()
    };
    let normal = |rng: &mut ChaCha8Rng, mean: f64, std: f64| -> Vec<f32> {
        (0..n)
            .map(|_| {
                let z: f64 = StandardNormal.sample(rng);
                (mean + std * z) as f32
            })
            .collect()
    };
    Ok(match *init {
        Init::Const(c) => vec![c as f32; n],
        Init::Uniform { lo, up } => {
            if !(lo.is_finite() && up.is_finite() && lo <= up) {
                return Err(ModelsError::Config(format!(
                    "uniform init bounds [{lo}, {up}] are not a finite interval"
                )));
            }
            uniform(rng, lo, up)
        }
        Init::Randn { mean, stdev } => normal(rng, mean, stdev),
        Init::Kaiming {
            dist,
            fan,
            non_linearity,
        } => {
            let fan = fan.for_shape(shape).max(1);
            let std = non_linearity.gain() / (fan as f64).sqrt();
            match dist {
                NormalOrUniform::Uniform => {
                    let bound = 3f64.sqrt() * std;
                    uniform(rng, -bound, bound)
                }
                NormalOrUniform::Normal => normal(rng, 0.0, std),
            }
        }
    })
}

/// Overwrites every variable of `varmap` listed in `hints`, in name-sorted order, with values drawn from a
/// ChaCha8 stream seeded by `seed`. Same seed and architecture → bit-identical variables on every machine.
pub(crate) fn apply(varmap: &VarMap, hints: &Hints, seed: u64, device: &Device) -> Result<()> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let hints = hints.lock().unwrap_or_else(PoisonError::into_inner);
    let vars = varmap.data().lock().unwrap_or_else(PoisonError::into_inner);
    for (name, (shape, init)) in hints.iter() {
        let var = vars.get(name).ok_or_else(|| {
            ModelsError::Config(format!(
                "variable {name} was recorded but is not in the model"
            ))
        })?;
        let values = draw(init, shape, &mut rng)?;
        var.set(&Tensor::from_vec(values, shape.clone(), device)?)?;
    }
    Ok(())
}

/// Adds `scale · N(0, 1)` noise, drawn from ChaCha8 seeded by `seed`, to `values` (a flat parameter vector,
/// name-sorted order). Used to give nodes slightly different starting points when a run wants that.
pub(crate) fn perturb(values: &mut [f32], seed: u64, scale: f32) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for v in values.iter_mut() {
        let z: f64 = StandardNormal.sample(&mut rng);
        *v += (scale as f64 * z) as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_follow_the_hint_and_the_seed() {
        let shape = Shape::from((64, 32));
        let mut a = ChaCha8Rng::seed_from_u64(7);
        let mut b = ChaCha8Rng::seed_from_u64(7);
        let x = draw(&KAIMING_UNIFORM_RELU, &shape, &mut a).unwrap();
        let y = draw(&KAIMING_UNIFORM_RELU, &shape, &mut b).unwrap();
        assert_eq!(x, y);
        let bound = (6.0f64 / 32.0).sqrt() as f32;
        assert!(x.iter().all(|v| v.abs() <= bound));
        // Not degenerate: the spread is a sizeable part of the bound.
        let max = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert!(max > 0.9 * bound, "{max} vs {bound}");

        let z = draw(&Init::Const(0.0), &shape, &mut a).unwrap();
        assert!(z.iter().all(|&v| v == 0.0));

        let n = draw(
            &Init::Randn {
                mean: 1.0,
                stdev: 0.1,
            },
            &Shape::from(10_000),
            &mut a,
        )
        .unwrap();
        let mean = n.iter().map(|&v| v as f64).sum::<f64>() / n.len() as f64;
        let var = n.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n.len() as f64;
        assert!((mean - 1.0).abs() < 0.01, "{mean}");
        assert!((var.sqrt() - 0.1).abs() < 0.01, "{var}");
    }

    #[test]
    fn bad_uniform_bounds_are_an_error() {
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let bad = Init::Uniform { lo: 1.0, up: 0.0 };
        assert!(draw(&bad, &Shape::from(3), &mut rng).is_err());
    }
}
