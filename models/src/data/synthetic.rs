//! Synthetic classification tasks generated from a seed, so a fresh machine can run Shatter with no download.
//!
//! Two families, chosen by the rank of [`SyntheticConfig::sample_shape`]:
//! - **feature vectors** (`[F]`): a Gaussian mixture. Every class owns `modes_per_class` random prototypes
//!   (standard normal per feature); a sample is one of its class's prototypes plus `N(0, noise²)` per feature.
//!   The default (10 classes, 32 features, noise 1.5, 2 modes) is learnable far above chance by a linear model
//!   but not separable, and every sample carries its own noise that a network can memorise: models overfit
//!   small local datasets, so membership inference has a loss gap to find.
//! - **images** (`[C, H, W]`, a stand-in for CIFAR-10): every class owns a spatially smooth pattern per channel
//!   (a few Gaussian blobs plus an oriented sinusoidal grating); a sample is its class pattern circularly
//!   shifted by up to `max_shift` pixels, scaled by a contrast factor in [0.8, 1.2], plus `clutter` times a
//!   randomly shifted class-free pattern of the same kind, plus pixel noise. The shift makes convolutions
//!   (translation equivariance) pay off, as on real images; the clutter makes classes overlap. Values are
//!   roughly zero mean with a standard deviation of a few units, like standardised image inputs.
//!
//! Classes are balanced (sample `i` gets class `i mod C` before a seeded shuffle of the labels). Everything is
//! drawn from one ChaCha8 stream seeded with the `seed` argument: prototypes first, then train, then test
//! samples, so the same (config, seed) gives the same data bit for bit on every platform.

use rand::Rng;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;
use serde::{Deserialize, Serialize};

use super::{Dataset, Inputs, Split, Targets};
use crate::{ModelsError, Result};

/// Largest number of f32 values (train + test) a synthetic task may hold: 2^30 values = 4 GiB, far beyond any
/// experiment here, and a guard against a typo in a config file exhausting memory.
pub const MAX_SYNTHETIC_VALUES: usize = 1 << 30;

/// Parameters of a synthetic classification task. Unknown fields in a config file are rejected; missing
/// fields take the [`Default`] values.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SyntheticConfig {
    /// Number of classes (at least 2).
    pub num_classes: usize,
    /// Shape of one sample: `[F]` for feature vectors, `[C, H, W]` for images.
    pub sample_shape: Vec<usize>,
    /// Training samples (at least 1).
    pub train_samples: usize,
    /// Test samples.
    pub test_samples: usize,
    /// Standard deviation of the per-value Gaussian noise added to every sample (finite, >= 0).
    pub noise: f32,
    /// Prototypes per class for feature vectors (mixture components; at least 1). Unused for images.
    pub modes_per_class: usize,
    /// Largest circular shift, in pixels, applied to an image sample in each direction. Unused for vectors.
    pub max_shift: usize,
    /// Weight of the structured clutter added to every image: one of [`CLUTTER_PATTERNS`] class-free
    /// patterns, chosen and shifted at random per sample. Unlike pixel noise it does not average out over
    /// pixels, so classes overlap and a model must learn which structure matters. Unused for vectors.
    pub clutter: f32,
}

/// Number of class-free patterns images draw their clutter from.
pub const CLUTTER_PATTERNS: usize = 32;

impl Default for SyntheticConfig {
    /// 10 classes of 32 features, 4,000 train and 1,000 test samples: the size of a small federated benchmark,
    /// a few hundred samples per node for 10-20 nodes: small enough that local models overfit.
    fn default() -> Self {
        Self {
            num_classes: 10,
            sample_shape: vec![32],
            train_samples: 4000,
            test_samples: 1000,
            noise: 1.5,
            modes_per_class: 2,
            max_shift: 0,
            clutter: 0.0,
        }
    }
}

impl SyntheticConfig {
    /// An image task of `classes` classes of `channels × size × size` images, 5,000 train and 1,000 test
    /// samples; `images(3, 32, 10)` stands in for CIFAR-10 (ten times fewer samples, so it runs on a laptop).
    /// Shifts of up to `size / 8` pixels, pixel noise 1 and clutter 2 make it hard enough that a
    /// nearest-class-mean classifier stays around 70% (tests check it is far from both chance and 100%).
    pub fn images(channels: usize, size: usize, classes: usize) -> Self {
        Self {
            num_classes: classes,
            sample_shape: vec![channels, size, size],
            train_samples: 5000,
            test_samples: 1000,
            noise: 1.0,
            modes_per_class: 1,
            max_shift: size / 8,
            clutter: 2.0,
        }
    }

    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(ModelsError::Config(format!("synthetic data: {m}")));
        if self.num_classes < 2 {
            return bad(format!(
                "needs at least 2 classes, got {}",
                self.num_classes
            ));
        }
        if u32::try_from(self.num_classes).is_err() {
            return bad(format!(
                "{} classes do not fit u32 labels",
                self.num_classes
            ));
        }
        if !matches!(self.sample_shape.len(), 1 | 3) || self.sample_shape.contains(&0) {
            return bad(format!(
                "sample shape must be [features] or [channels, height, width] with no zero, got {:?}",
                self.sample_shape
            ));
        }
        if self.train_samples == 0 {
            return bad("needs at least 1 training sample".into());
        }
        if !(self.noise.is_finite() && self.noise >= 0.0) {
            return bad(format!("noise must be finite and >= 0, got {}", self.noise));
        }
        if !(self.clutter.is_finite() && self.clutter >= 0.0) {
            return bad(format!(
                "clutter must be finite and >= 0, got {}",
                self.clutter
            ));
        }
        if self.modes_per_class == 0 {
            return bad("modes_per_class must be at least 1".into());
        }
        let total = self
            .sample_shape
            .iter()
            .try_fold(1usize, |a, &b| a.checked_mul(b))
            .and_then(|stride| {
                stride.checked_mul(self.train_samples.checked_add(self.test_samples)?)
            })
            .filter(|&t| t <= MAX_SYNTHETIC_VALUES);
        if total.is_none() {
            return bad(format!(
                "{} + {} samples of shape {:?} exceed {MAX_SYNTHETIC_VALUES} values",
                self.train_samples, self.test_samples, self.sample_shape
            ));
        }
        Ok(())
    }
}

/// Generates the train and test sets of `cfg` from `seed`. Errors only on an impossible configuration.
pub fn generate(cfg: &SyntheticConfig, seed: u64) -> Result<Split> {
    cfg.validate()?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let generator: Box<dyn SampleGen> = match cfg.sample_shape.as_slice() {
        [f] => Box::new(Mixture::new(cfg, *f, &mut rng)),
        [c, h, w] => Box::new(Patterns::new(cfg, [*c, *h, *w], &mut rng)),
        _ => unreachable!("validated above"),
    };
    let train = make_set(cfg, cfg.train_samples, generator.as_ref(), &mut rng)?;
    let test = make_set(cfg, cfg.test_samples, generator.as_ref(), &mut rng)?;
    Ok(Split { train, test })
}

fn make_set(
    cfg: &SyntheticConfig,
    n: usize,
    generator: &dyn SampleGen,
    rng: &mut ChaCha8Rng,
) -> Result<Dataset> {
    let stride: usize = cfg.sample_shape.iter().product();
    let mut labels: Vec<u32> = (0..n).map(|i| (i % cfg.num_classes) as u32).collect();
    labels.shuffle(rng);
    let mut values = vec![0.0f32; n * stride];
    for (&label, out) in labels.iter().zip(values.chunks_exact_mut(stride)) {
        generator.sample(label as usize, out, rng);
    }
    Dataset::new(
        Inputs::Dense {
            values,
            sample_shape: cfg.sample_shape.clone(),
        },
        Targets::Classes {
            labels,
            num_classes: cfg.num_classes,
        },
        None,
    )
}

fn normal(rng: &mut ChaCha8Rng) -> f32 {
    rng.sample(StandardNormal)
}

trait SampleGen {
    /// Writes one sample of class `class` into `out` (length = product of the sample shape).
    fn sample(&self, class: usize, out: &mut [f32], rng: &mut ChaCha8Rng);
}

/// Gaussian mixture over feature vectors.
struct Mixture {
    /// `num_classes * modes` prototypes of `features` values each, class-major.
    prototypes: Vec<Vec<f32>>,
    modes: usize,
    noise: f32,
}

impl Mixture {
    fn new(cfg: &SyntheticConfig, features: usize, rng: &mut ChaCha8Rng) -> Self {
        let prototypes = (0..cfg.num_classes * cfg.modes_per_class)
            .map(|_| (0..features).map(|_| normal(rng)).collect())
            .collect();
        Self {
            prototypes,
            modes: cfg.modes_per_class,
            noise: cfg.noise,
        }
    }
}

impl SampleGen for Mixture {
    fn sample(&self, class: usize, out: &mut [f32], rng: &mut ChaCha8Rng) {
        let mode = rng.random_range(0..self.modes);
        let proto = &self.prototypes[class * self.modes + mode];
        for (o, &p) in out.iter_mut().zip(proto) {
            *o = p + self.noise * normal(rng);
        }
    }
}

/// Class-specific smooth image patterns.
struct Patterns {
    shape: [usize; 3],
    /// One `C*H*W` pattern per class.
    patterns: Vec<Vec<f32>>,
    /// Class-free patterns for clutter (empty when `clutter_weight` is 0).
    clutter: Vec<Vec<f32>>,
    clutter_weight: f32,
    noise: f32,
    max_shift: usize,
}

impl Patterns {
    /// Gaussian blobs per channel and one grating per class; see the module documentation.
    const BLOBS_PER_CHANNEL: usize = 3;

    fn new(cfg: &SyntheticConfig, shape: [usize; 3], rng: &mut ChaCha8Rng) -> Self {
        let patterns = (0..cfg.num_classes)
            .map(|_| Self::pattern(shape, rng))
            .collect();
        let clutter = if cfg.clutter > 0.0 {
            (0..CLUTTER_PATTERNS)
                .map(|_| Self::pattern(shape, rng))
                .collect()
        } else {
            Vec::new()
        };
        Self {
            shape,
            patterns,
            clutter,
            clutter_weight: cfg.clutter,
            noise: cfg.noise,
            max_shift: cfg.max_shift,
        }
    }

    fn pattern(shape: [usize; 3], rng: &mut ChaCha8Rng) -> Vec<f32> {
        let [c, h, w] = shape;
        let mut p = vec![0.0f32; c * h * w];
        // The grating is shared by the channels of a pattern (like an object's texture), with a per-channel
        // amplitude (like its colour).
        let theta = rng.random_range(0.0..std::f32::consts::PI);
        let freq = rng.random_range(0.5..2.5) * std::f32::consts::TAU / h.max(w) as f32;
        let phase = rng.random_range(0.0..std::f32::consts::TAU);
        let (ct, st) = (theta.cos(), theta.sin());
        for ch in 0..c {
            let amp = rng.random_range(-0.8f32..0.8);
            let plane = &mut p[ch * h * w..(ch + 1) * h * w];
            for y in 0..h {
                for x in 0..w {
                    plane[y * w + x] = amp * (freq * (ct * x as f32 + st * y as f32) + phase).sin();
                }
            }
            for _ in 0..Self::BLOBS_PER_CHANNEL {
                let cy = rng.random_range(0.0..h as f32);
                let cx = rng.random_range(0.0..w as f32);
                let sigma = rng.random_range(0.08..0.25) * h.max(w) as f32;
                let a = rng.random_range(-1.5f32..1.5);
                for y in 0..h {
                    for x in 0..w {
                        let r2 = (y as f32 - cy).powi(2) + (x as f32 - cx).powi(2);
                        plane[y * w + x] += a * (-r2 / (2.0 * sigma * sigma)).exp();
                    }
                }
            }
        }
        p
    }
}

impl SampleGen for Patterns {
    fn sample(&self, class: usize, out: &mut [f32], rng: &mut ChaCha8Rng) {
        let [c, h, w] = self.shape;
        let shift = |rng: &mut ChaCha8Rng, n: usize| {
            let m = self.max_shift.min(n - 1) as i64;
            rng.random_range(-m..=m).rem_euclid(n as i64) as usize
        };
        let dy = shift(rng, h);
        let dx = shift(rng, w);
        let contrast = rng.random_range(0.8f32..1.2);
        let pattern = &self.patterns[class];
        for ch in 0..c {
            for y in 0..h {
                let sy = (y + dy) % h;
                for x in 0..w {
                    let sx = (x + dx) % w;
                    out[(ch * h + y) * w + x] =
                        contrast * pattern[(ch * h + sy) * w + sx] + self.noise * normal(rng);
                }
            }
        }
        if !self.clutter.is_empty() {
            let other = &self.clutter[rng.random_range(0..self.clutter.len())];
            let (cy, cx) = (rng.random_range(0..h), rng.random_range(0..w));
            for ch in 0..c {
                for y in 0..h {
                    let sy = (y + cy) % h;
                    for x in 0..w {
                        out[(ch * h + y) * w + x] +=
                            self.clutter_weight * other[(ch * h + sy) * w + (x + cx) % w];
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dense(d: &Dataset) -> (&[f32], usize) {
        match d.inputs() {
            Inputs::Dense {
                values,
                sample_shape,
            } => (values, sample_shape.iter().product()),
            Inputs::Pairs { .. } => panic!("dense expected"),
        }
    }

    /// Test accuracy of a nearest-class-mean classifier fitted on the train set: a crude learner, so if it
    /// beats chance by far the data has real class structure.
    fn nearest_mean_accuracy(split: &Split) -> f64 {
        let c = split.train.num_classes().unwrap();
        let (xs, stride) = dense(&split.train);
        let mut means = vec![vec![0.0f64; stride]; c];
        let mut counts = vec![0usize; c];
        for (x, &l) in xs.chunks_exact(stride).zip(split.train.labels().unwrap()) {
            counts[l as usize] += 1;
            for (m, &v) in means[l as usize].iter_mut().zip(x) {
                *m += v as f64;
            }
        }
        for (m, &n) in means.iter_mut().zip(&counts) {
            m.iter_mut().for_each(|v| *v /= n as f64);
        }
        let (xt, _) = dense(&split.test);
        let labels = split.test.labels().unwrap();
        let correct = xt
            .chunks_exact(stride)
            .zip(labels)
            .filter(|(x, l)| {
                let best = (0..c)
                    .min_by(|&a, &b| {
                        let da: f64 = x
                            .iter()
                            .zip(&means[a])
                            .map(|(&v, m)| (v as f64 - m).powi(2))
                            .sum();
                        let db: f64 = x
                            .iter()
                            .zip(&means[b])
                            .map(|(&v, m)| (v as f64 - m).powi(2))
                            .sum();
                        da.total_cmp(&db)
                    })
                    .unwrap();
                best == **l as usize
            })
            .count();
        correct as f64 / labels.len() as f64
    }

    #[test]
    fn default_task_has_learnable_structure_and_balanced_classes() {
        let split = generate(&SyntheticConfig::default(), 1).unwrap();
        assert_eq!(split.train.len(), 4000);
        assert_eq!(split.test.len(), 1000);
        assert_eq!(split.train.sample_shape().unwrap(), &[32]);
        let mut counts = [0usize; 10];
        split
            .train
            .labels()
            .unwrap()
            .iter()
            .for_each(|&l| counts[l as usize] += 1);
        assert!(counts.iter().all(|&n| n == 400), "{counts:?}");
        let acc = nearest_mean_accuracy(&split);
        // Chance is 10%. The mixture has 2 modes per class, so a single class mean is a poor fit, yet far
        // better than chance: the structure is real, and not trivially separable.
        assert!(acc > 0.4, "accuracy {acc}");
        assert!(acc < 0.999, "accuracy {acc}");
    }

    #[test]
    fn image_task_has_learnable_structure() {
        let cfg = SyntheticConfig {
            train_samples: 500,
            test_samples: 200,
            ..SyntheticConfig::images(3, 16, 10)
        };
        let split = generate(&cfg, 3).unwrap();
        assert_eq!(split.train.sample_shape().unwrap(), &[3, 16, 16]);
        let (xs, _) = dense(&split.train);
        assert!(xs.iter().all(|v| v.is_finite()));
        let mean = xs.iter().map(|&v| v as f64).sum::<f64>() / xs.len() as f64;
        let std =
            (xs.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / xs.len() as f64).sqrt();
        assert!(
            mean.abs() < 0.5 && (0.5..4.0).contains(&std),
            "mean {mean} std {std}"
        );
        // Chance is 10%; shifts and clutter keep a nearest-mean classifier well below 100%.
        let acc = nearest_mean_accuracy(&split);
        assert!(acc > 0.4 && acc < 0.95, "accuracy {acc}");
    }

    #[test]
    fn deterministic_per_seed() {
        let cfg = SyntheticConfig {
            train_samples: 50,
            test_samples: 10,
            ..SyntheticConfig::default()
        };
        assert_eq!(generate(&cfg, 5).unwrap(), generate(&cfg, 5).unwrap());
        assert_ne!(generate(&cfg, 5).unwrap(), generate(&cfg, 6).unwrap());
        let img = SyntheticConfig {
            train_samples: 20,
            test_samples: 5,
            ..SyntheticConfig::images(1, 8, 3)
        };
        assert_eq!(generate(&img, 5).unwrap(), generate(&img, 5).unwrap());
    }

    #[test]
    fn rejects_impossible_configs() {
        for cfg in [
            SyntheticConfig {
                num_classes: 1,
                ..Default::default()
            },
            SyntheticConfig {
                sample_shape: vec![2, 2],
                ..Default::default()
            },
            SyntheticConfig {
                sample_shape: vec![0],
                ..Default::default()
            },
            SyntheticConfig {
                train_samples: 0,
                ..Default::default()
            },
            SyntheticConfig {
                noise: f32::NAN,
                ..Default::default()
            },
            SyntheticConfig {
                modes_per_class: 0,
                ..Default::default()
            },
            SyntheticConfig {
                clutter: -1.0,
                ..Default::default()
            },
            SyntheticConfig {
                train_samples: usize::MAX,
                ..Default::default()
            },
        ] {
            assert!(
                matches!(generate(&cfg, 0), Err(ModelsError::Config(_))),
                "{cfg:?}"
            );
        }
    }

    #[test]
    fn config_from_partial_json_uses_defaults() {
        let cfg: SyntheticConfig = serde_json::from_str(r#"{"num_classes": 4}"#).unwrap();
        assert_eq!(
            cfg,
            SyntheticConfig {
                num_classes: 4,
                ..Default::default()
            }
        );
        assert!(serde_json::from_str::<SyntheticConfig>(r#"{"classes": 4}"#).is_err());
    }
}
