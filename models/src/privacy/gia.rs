//! Gradient inversion (GIA) of a leading fully connected layer, from the coordinates an attacker holds.
//!
//! **Update.** All nodes of a round start local training from a common model θ₀ (the attacker knows it: it is
//! the average everyone was sent, or the attacker's own copy when it is the same). After local SGD with
//! learning rate η the sender has θ₁; the *pseudo-gradient* `(θ₀ − θ₁) / η` is exactly the gradient after one
//! step, and the sum of the step gradients after several ([`pseudo_gradient`]). Under Shatter the attacker
//! receives only chunk `s` of θ₁, so it knows the pseudo-gradient on the index set `P_s` and nothing else
//! ([`HeldGradient`]).
//!
//! **Analytic inversion** (Phong et al. 2017; Geiping et al. 2020, §3; the paper's GIA on a model with a
//! leading FC layer). For a first layer `z = W x + b` and one sample, `∂L/∂W[i, j] = δᵢ·x[j]` and
//! `∂L/∂b[i] = δᵢ` with `δᵢ = ∂L/∂zᵢ`, so every row with `δᵢ ≠ 0` gives the input exactly:
//! `x[j] = ∂L/∂W[i, j] / ∂L/∂b[i]`. With held coordinates only, input `j` is recoverable from row `i` iff the
//! attacker holds **both** `b[i]` and `W[i, j]`. [`invert_fc`] combines every usable row by least squares,
//! `x̂[j] = Σᵢ gb[i]·gW[i, j] / Σᵢ gb[i]²` over the rows `i` that hold both (exact for one sample, since every
//! ratio is the same; for a batch, where `∂L/∂W[i] = (1/B) Σₙ δₙᵢ xₙ`, a gradient-weighted mix of the batch's
//! inputs). Inputs no usable row covers are **unknown**: the reconstruction marks them, and
//! [`Reconstruction::filled`] fills them with the mean of the recovered inputs (something the attacker can
//! compute; it knows nothing better). With k chunks a given (bias, weight) pair is held with probability about
//! 1/k², so coverage falls quickly with k.

use serde::{Deserialize, Serialize};

use crate::chunking::ChunkPartition;
use crate::nn::{Model, ModelSpec};
use crate::{ModelsError, Result};

/// Rows whose bias gradient is below this fraction of the largest one are not used: a ReLU-inactive row has
/// δ = 0 exactly, and a nearly-zero δ divides the f32 round-off of `(θ₀ − θ₁)/η` by almost nothing.
pub const MIN_RELATIVE_BIAS_GRAD: f32 = 1e-4;

/// Where a fully connected layer (weight `[out_dim, in_dim]` row-major, bias `[out_dim]`) lies in the flat
/// parameter vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FcLayer {
    pub weight_offset: usize,
    pub bias_offset: usize,
    pub out_dim: usize,
    pub in_dim: usize,
}

impl FcLayer {
    /// The layer whose variables are `<prefix>.weight` and `<prefix>.bias` in `model`'s flat layout.
    pub fn find(model: &Model, prefix: &str) -> Result<Self> {
        let (mut offset, mut weight, mut bias) = (0, None, None);
        for (name, n) in model.param_layout() {
            if name == format!("{prefix}.weight") {
                weight = Some((offset, n));
            } else if name == format!("{prefix}.bias") {
                bias = Some((offset, n));
            }
            offset += n;
        }
        let (Some((weight_offset, wn)), Some((bias_offset, out_dim))) = (weight, bias) else {
            return Err(ModelsError::Config(format!(
                "model has no fully connected layer {prefix:?} (weight and bias)"
            )));
        };
        if out_dim == 0 || wn % out_dim != 0 {
            return Err(ModelsError::Config(format!(
                "layer {prefix:?}: weight of {wn} values does not fit a bias of {out_dim}"
            )));
        }
        Ok(Self {
            weight_offset,
            bias_offset,
            out_dim,
            in_dim: wn / out_dim,
        })
    }

    /// The layer that sees the raw input: `hidden.0` of an MLP (`out` for logistic regression). Other
    /// architectures start with a convolution, which this attack does not invert.
    pub fn first_of(model: &Model) -> Result<Self> {
        match model.spec() {
            ModelSpec::Mlp { hidden } if hidden.is_empty() => Self::find(model, "out"),
            ModelSpec::Mlp { .. } => Self::find(model, "hidden.0"),
            other => Err(ModelsError::Config(format!(
                "model {other} does not start with a fully connected layer"
            ))),
        }
    }

    fn weight_index(&self, row: usize, col: usize) -> usize {
        self.weight_offset + row * self.in_dim + col
    }
}

/// `(θ₀ − θ₁) / η`: the gradient of one SGD step, the sum of the gradients of several. Errors on different
/// lengths or a learning rate that is not positive and finite.
pub fn pseudo_gradient(theta0: &[f32], theta1: &[f32], lr: f32) -> Result<Vec<f32>> {
    if theta0.len() != theta1.len() {
        return Err(ModelsError::ParamLength {
            expected: theta0.len(),
            got: theta1.len(),
        });
    }
    check_lr(lr)?;
    Ok(theta0
        .iter()
        .zip(theta1)
        .map(|(&a, &b)| (a - b) / lr)
        .collect())
}

fn check_lr(lr: f32) -> Result<()> {
    if lr.is_finite() && lr > 0.0 {
        Ok(())
    } else {
        Err(ModelsError::Config(format!(
            "learning rate must be positive and finite, got {lr}"
        )))
    }
}

/// A (pseudo-)gradient known only on some coordinates: what an attacker holding one chunk knows.
#[derive(Clone, Debug, PartialEq)]
pub struct HeldGradient {
    /// Length d; coordinates not held are 0 and must not be read.
    values: Vec<f32>,
    held: Vec<bool>,
}

impl HeldGradient {
    /// Every coordinate known (EL, k = 1: the whole model is received).
    pub fn full(grad: Vec<f32>) -> Self {
        let held = vec![true; grad.len()];
        Self { values: grad, held }
    }

    /// `grad` restricted to chunk `chunk` of `partition`.
    pub fn restrict(grad: &[f32], partition: &ChunkPartition, chunk: usize) -> Result<Self> {
        let values = partition.extract(chunk, grad)?;
        Self::from_chunk_gradient(partition, chunk, &values)
    }

    /// The pseudo-gradient on chunk `chunk` from the common start `theta0` (length d) and the received chunk
    /// values of the sender's trained model `theta1_chunk` (in [`ChunkPartition::indices`] order).
    pub fn from_chunk(
        theta0: &[f32],
        partition: &ChunkPartition,
        chunk: usize,
        theta1_chunk: &[f32],
        lr: f32,
    ) -> Result<Self> {
        check_lr(lr)?;
        let start = partition.extract(chunk, theta0)?;
        if theta1_chunk.len() != start.len() {
            return Err(ModelsError::ChunkLength {
                index: chunk,
                expected: start.len(),
                got: theta1_chunk.len(),
            });
        }
        let g: Vec<f32> = start
            .iter()
            .zip(theta1_chunk)
            .map(|(&a, &b)| (a - b) / lr)
            .collect();
        Self::from_chunk_gradient(partition, chunk, &g)
    }

    /// The pseudo-gradient held on arbitrary coordinates (a subset not cut by the run's partition, e.g.
    /// sparsification's): `(θ₀[indices[i]] − theta1_values[i]) / lr`. Errors: lengths that differ, a
    /// coordinate not below `theta0.len()`, or a bad learning rate.
    pub fn from_coordinates(
        theta0: &[f32],
        indices: &[u32],
        theta1_values: &[f32],
        lr: f32,
    ) -> Result<Self> {
        check_lr(lr)?;
        if indices.len() != theta1_values.len() {
            return Err(ModelsError::ChunkLength {
                index: 0,
                expected: indices.len(),
                got: theta1_values.len(),
            });
        }
        let mut values = vec![0.0; theta0.len()];
        let mut held = vec![false; theta0.len()];
        for (&i, &b) in indices.iter().zip(theta1_values) {
            let i = i as usize;
            let Some(&a) = theta0.get(i) else {
                return Err(ModelsError::Config(format!(
                    "held gradient: coordinate {i} outside a model of {}",
                    theta0.len()
                )));
            };
            values[i] = (a - b) / lr;
            held[i] = true;
        }
        Ok(Self { values, held })
    }

    fn from_chunk_gradient(partition: &ChunkPartition, chunk: usize, g: &[f32]) -> Result<Self> {
        partition.check_chunk(chunk)?;
        let idx = partition.indices(chunk);
        if g.len() != idx.len() {
            return Err(ModelsError::ChunkLength {
                index: chunk,
                expected: idx.len(),
                got: g.len(),
            });
        }
        let mut values = vec![0.0; partition.d()];
        let mut held = vec![false; partition.d()];
        for (&i, &v) in idx.iter().zip(g) {
            values[i as usize] = v;
            held[i as usize] = true;
        }
        Ok(Self { values, held })
    }

    /// d.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Number of coordinates held.
    pub fn held_count(&self) -> usize {
        self.held.iter().filter(|&&h| h).count()
    }

    /// The value at `i` if held.
    pub fn get(&self, i: usize) -> Option<f32> {
        self.held.get(i).and_then(|&h| h.then(|| self.values[i]))
    }
}

/// An input reconstructed by [`invert_fc`].
#[derive(Clone, Debug, PartialEq)]
pub struct Reconstruction {
    /// The reconstructed input (length `in_dim`); 0 where unknown.
    pub values: Vec<f32>,
    /// Which inputs some usable row recovered.
    pub known: Vec<bool>,
    /// Rows whose bias gradient was held and usable.
    pub rows_used: usize,
}

impl Reconstruction {
    /// Fraction of inputs recovered.
    pub fn coverage(&self) -> f64 {
        if self.known.is_empty() {
            return 0.0;
        }
        self.known.iter().filter(|&&k| k).count() as f64 / self.known.len() as f64
    }

    /// The reconstruction with unknown inputs set to the mean of the known ones (0 if none is known): the
    /// attacker's best neutral guess.
    pub fn filled(&self) -> Vec<f32> {
        let (sum, n) = self
            .values
            .iter()
            .zip(&self.known)
            .filter(|(_, k)| **k)
            .fold((0.0f64, 0usize), |(s, n), (&v, _)| (s + v as f64, n + 1));
        let mean = if n == 0 { 0.0 } else { (sum / n as f64) as f32 };
        self.values
            .iter()
            .zip(&self.known)
            .map(|(&v, &k)| if k { v } else { mean })
            .collect()
    }
}

/// Analytic inversion of `layer` from the held gradient (see the module documentation for the exact rule).
/// Errors if `grad` does not cover the layer's coordinates.
pub fn invert_fc(layer: &FcLayer, grad: &HeldGradient) -> Result<Reconstruction> {
    let end =
        (layer.weight_offset + layer.out_dim * layer.in_dim).max(layer.bias_offset + layer.out_dim);
    if grad.len() < end {
        return Err(ModelsError::ParamLength {
            expected: end,
            got: grad.len(),
        });
    }
    let rows = usable_rows(layer, grad);
    let mut num = vec![0.0f64; layer.in_dim];
    let mut den = vec![0.0f64; layer.in_dim];
    for &(i, gb) in &rows {
        let gb = gb as f64;
        for j in 0..layer.in_dim {
            if let Some(gw) = grad.get(layer.weight_index(i, j)) {
                num[j] += gb * gw as f64;
                den[j] += gb * gb;
            }
        }
    }
    let known: Vec<bool> = den.iter().map(|&d| d > 0.0).collect();
    let values = num
        .iter()
        .zip(&den)
        .map(|(&n, &d)| if d > 0.0 { (n / d) as f32 } else { 0.0 })
        .collect();
    Ok(Reconstruction {
        values,
        known,
        rows_used: rows.len(),
    })
}

/// One reconstruction per usable row (`x̂[j] = gW[i, j] / gb[i]` on the held entries of the row), strongest
/// bias gradient first, at most `max_rows`. For a batch, a row that only one sample activated gives that
/// sample exactly; the attacker does not know which rows those are, so it keeps them all as candidates.
pub fn fc_row_candidates(
    layer: &FcLayer,
    grad: &HeldGradient,
    max_rows: usize,
) -> Result<Vec<Reconstruction>> {
    // Same bounds check as `invert_fc`.
    let end =
        (layer.weight_offset + layer.out_dim * layer.in_dim).max(layer.bias_offset + layer.out_dim);
    if grad.len() < end {
        return Err(ModelsError::ParamLength {
            expected: end,
            got: grad.len(),
        });
    }
    let mut rows = usable_rows(layer, grad);
    rows.sort_by(|a, b| b.1.abs().total_cmp(&a.1.abs()).then(a.0.cmp(&b.0)));
    rows.truncate(max_rows);
    Ok(rows
        .into_iter()
        .map(|(i, gb)| {
            let mut values = vec![0.0; layer.in_dim];
            let mut known = vec![false; layer.in_dim];
            for j in 0..layer.in_dim {
                if let Some(gw) = grad.get(layer.weight_index(i, j)) {
                    values[j] = gw / gb;
                    known[j] = true;
                }
            }
            Reconstruction {
                values,
                known,
                rows_used: 1,
            }
        })
        .collect())
}

/// Rows whose bias gradient is held and at least [`MIN_RELATIVE_BIAS_GRAD`] of the largest held one.
fn usable_rows(layer: &FcLayer, grad: &HeldGradient) -> Vec<(usize, f32)> {
    let held: Vec<(usize, f32)> = (0..layer.out_dim)
        .filter_map(|i| grad.get(layer.bias_offset + i).map(|g| (i, g)))
        .filter(|(_, g)| g.is_finite())
        .collect();
    let max = held.iter().map(|(_, g)| g.abs()).fold(0.0f32, f32::max);
    if max == 0.0 {
        return Vec::new();
    }
    held.into_iter()
        .filter(|(_, g)| g.abs() >= MIN_RELATIVE_BIAS_GRAD * max)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gradient_held_on_named_coordinates_matches_the_chunk_one() {
        let p = ChunkPartition::new(&[6, 4], 2, 3).unwrap();
        let theta0: Vec<f32> = (0..10).map(|i| i as f32).collect();
        let theta1: Vec<f32> = theta0.iter().map(|v| v - 0.5).collect();
        let chunk = p.extract(1, &theta1).unwrap();
        let by_chunk = HeldGradient::from_chunk(&theta0, &p, 1, &chunk, 0.25).unwrap();
        let named = HeldGradient::from_coordinates(&theta0, p.indices(1), &chunk, 0.25).unwrap();
        assert_eq!(by_chunk, named);
        assert!(HeldGradient::from_coordinates(&theta0, &[10], &[1.0], 0.25).is_err());
        assert!(HeldGradient::from_coordinates(&theta0, &[1], &[1.0], 0.0).is_err());
    }
    use crate::data::{Dataset, Inputs, Targets};
    use crate::nn::TaskInfo;
    use crate::train::{LocalWork, TrainConfig, train_local};
    use candle_core::Device;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn setup(batch: usize) -> (Model, Dataset, Vec<f32>, Vec<f32>, f32) {
        let dim = 48;
        let info = TaskInfo::Classification {
            sample_shape: vec![3, 4, 4],
            num_classes: 5,
        };
        let mut model = Model::new(
            &ModelSpec::Mlp { hidden: vec![32] },
            &info,
            11,
            &Device::Cpu,
        )
        .unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let values: Vec<f32> = (0..batch * dim)
            .map(|_| rng.random_range(-2.0..2.0))
            .collect();
        let data = Dataset::new(
            Inputs::Dense {
                values,
                sample_shape: vec![3, 4, 4],
            },
            Targets::Classes {
                labels: (0..batch as u32).map(|i| i % 5).collect(),
                num_classes: 5,
            },
            None,
        )
        .unwrap();
        let lr = 0.01f32;
        let theta0 = model.flat_params().unwrap();
        let cfg = TrainConfig {
            lr: lr as f64,
            batch_size: batch,
            work: LocalWork::Steps(1),
            clip: None,
        };
        train_local(&mut model, &data, &cfg, &mut rng).unwrap();
        let theta1 = model.flat_params().unwrap();
        (model, data, theta0, theta1, lr)
    }

    fn sample(data: &Dataset, n: usize) -> Vec<f32> {
        let Inputs::Dense { values, .. } = data.inputs() else {
            unreachable!()
        };
        values[n * 48..(n + 1) * 48].to_vec()
    }

    #[test]
    fn analytic_inversion_is_exact_for_one_sample_with_the_whole_update() {
        let (model, data, theta0, theta1, lr) = setup(1);
        let layer = FcLayer::first_of(&model).unwrap();
        assert_eq!((layer.out_dim, layer.in_dim), (32, 48));
        let g = HeldGradient::full(pseudo_gradient(&theta0, &theta1, lr).unwrap());
        let r = invert_fc(&layer, &g).unwrap();
        assert_eq!(r.coverage(), 1.0);
        assert!(r.rows_used > 0);
        let x = sample(&data, 0);
        for (a, b) in r.values.iter().zip(&x) {
            // Only the f32 round-off of (θ₀ − θ₁)/η remains.
            assert!((a - b).abs() < 2e-3 * (1.0 + b.abs()), "{a} vs {b}");
        }
        // Every single usable row is exact as well.
        for c in fc_row_candidates(&layer, &g, 5).unwrap() {
            assert_eq!(c.coverage(), 1.0);
            for (a, b) in c.values.iter().zip(&x) {
                assert!((a - b).abs() < 2e-3 * (1.0 + b.abs()));
            }
        }
    }

    #[test]
    #[allow(clippy::needless_range_loop)] // j indexes four parallel arrays
    fn chunk_restriction_recovers_only_held_pairs_and_those_exactly() {
        let (model, data, theta0, theta1, lr) = setup(1);
        let layer = FcLayer::first_of(&model).unwrap();
        let sizes: Vec<usize> = model.param_layout().iter().map(|(_, n)| *n).collect();
        let x = sample(&data, 0);
        let mut last_cov = 1.0;
        for k in [2, 4, 8] {
            let p = ChunkPartition::new(&sizes, k, 3).unwrap();
            let g = HeldGradient::from_chunk(&theta0, &p, 0, &p.extract(0, &theta1).unwrap(), lr)
                .unwrap();
            assert_eq!(g.held_count(), p.chunk_len(0));
            let r = invert_fc(&layer, &g).unwrap();
            for j in 0..layer.in_dim {
                // Known iff some row holds both its bias and W[i, j] (and its bias gradient is usable).
                let pair_held = (0..layer.out_dim).any(|i| {
                    p.chunk_of(layer.bias_offset + i) == Some(0)
                        && p.chunk_of(layer.weight_index(i, j)) == Some(0)
                        && g.get(layer.bias_offset + i).unwrap().abs() > 0.0
                });
                assert_eq!(r.known[j], pair_held, "k={k} j={j}");
                if r.known[j] {
                    assert!((r.values[j] - x[j]).abs() < 2e-3 * (1.0 + x[j].abs()));
                } else {
                    assert_eq!(r.values[j], 0.0);
                }
            }
            assert!(r.coverage() <= last_cov, "k={k}: {}", r.coverage());
            last_cov = r.coverage();
        }
        // 32 rows, a (bias, weight) pair held with probability 1/64 at k = 8: most inputs are unknown.
        assert!(last_cov < 0.6, "{last_cov}");
    }

    #[test]
    fn errors() {
        assert!(pseudo_gradient(&[1.0], &[1.0, 2.0], 0.1).is_err());
        assert!(pseudo_gradient(&[1.0], &[1.0], 0.0).is_err());
        let (model, ..) = setup(1);
        assert!(FcLayer::find(&model, "nope").is_err());
        let layer = FcLayer::first_of(&model).unwrap();
        assert!(invert_fc(&layer, &HeldGradient::full(vec![0.0; 10])).is_err());
    }
}
