//! The models, and [`Model`]: one network with its variables, built with seeded weights from a [`ModelSpec`]
//! and the [`TaskInfo`] of a dataset.
//!
//! Every architecture follows the Candle style: a `Config`, `new(&cfg, vb) -> Result<Self>` and
//! `impl candle_core::Module`. [`Model`] hides which one it is behind a boxed `Module` so that the node can
//! hold "the model" without generics, and owns the [`VarMap`] the flat parameter vector ([`crate::params`]) is
//! read from and written to.

pub mod init;
mod layers;
pub mod lenet;
pub mod mf;
pub mod mlp;
pub mod resnet;

use std::fmt;
use std::str::FromStr;

use candle_core::{Device, Module, Tensor, Var};
use candle_nn::VarMap;
use serde::{Deserialize, Serialize};

use crate::data::{Dataset, Inputs, Targets};
use crate::{ModelsError, Result};

/// Hidden layer widths of `mlp` when none are given.
pub const DEFAULT_MLP_HIDDEN: &[usize] = &[128];

/// Latent factors of `mf` when none are given: the paper's MovieLens model (20 factors, 206,680 parameters).
pub const DEFAULT_MF_FACTORS: usize = 20;

/// Which architecture to build. Text form (for CLIs and config files): `mlp` (hidden widths
/// [`DEFAULT_MLP_HIDDEN`]), `mlp:256,64` (explicit widths; `mlp:` is logistic regression), `lenet`, `resnet8`,
/// `resnet18`, `mf` ([`DEFAULT_MF_FACTORS`] factors), `mf:<factors>`, `mf-centred` or `mf-centred:<factors>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ModelSpec {
    /// ReLU multi-layer perceptron over flattened inputs (feature vectors, bag-of-words, small images).
    Mlp { hidden: Vec<usize> },
    /// LeNet-5-style CNN for `C×H×W` images.
    LeNet,
    /// Small residual network without normalisation (3 stages × 1 block, ~78k parameters).
    ResNet8,
    /// ResNet-18 without normalisation, the paper's CIFAR-10 model (~11.2M parameters).
    ResNet18,
    /// Bias-free matrix factorisation for (user, item) → rating, the paper's MovieLens model. `centred: false`
    /// (`mf`) is the reference implementation's model: raw dot product, embeddings uniform in ±0.05.
    /// `centred: true` (`mf-centred`) adds the mean training rating (a constant, not a parameter) and starts
    /// from N(0, 0.1²) embeddings: better centrally (see [`mf`]), but its initial model already predicts the
    /// mean.
    MatrixFactorization { factors: usize, centred: bool },
}

impl ModelSpec {
    /// The default model for a task: `mf` for ratings, `mlp` for classification.
    pub fn default_for(info: &TaskInfo) -> Self {
        match info {
            TaskInfo::Rating { .. } => ModelSpec::MatrixFactorization {
                factors: DEFAULT_MF_FACTORS,
                centred: false,
            },
            TaskInfo::Classification { .. } => ModelSpec::Mlp {
                hidden: DEFAULT_MLP_HIDDEN.to_vec(),
            },
        }
    }

    /// The short name: `mlp`, `lenet`, `resnet8`, `resnet18`, `mf` or `mf-centred`.
    pub fn name(&self) -> &'static str {
        match self {
            ModelSpec::Mlp { .. } => "mlp",
            ModelSpec::LeNet => "lenet",
            ModelSpec::ResNet8 => "resnet8",
            ModelSpec::ResNet18 => "resnet18",
            ModelSpec::MatrixFactorization { centred: false, .. } => "mf",
            ModelSpec::MatrixFactorization { centred: true, .. } => "mf-centred",
        }
    }
}

impl fmt::Display for ModelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelSpec::Mlp { hidden } if hidden.as_slice() == DEFAULT_MLP_HIDDEN => {
                f.write_str("mlp")
            }
            ModelSpec::Mlp { hidden } => {
                let widths: Vec<String> = hidden.iter().map(|h| h.to_string()).collect();
                write!(f, "mlp:{}", widths.join(","))
            }
            ModelSpec::MatrixFactorization { factors, .. } if *factors != DEFAULT_MF_FACTORS => {
                write!(f, "{}:{factors}", self.name())
            }
            other => f.write_str(other.name()),
        }
    }
}

impl FromStr for ModelSpec {
    type Err = ModelsError;

    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim().to_ascii_lowercase();
        let (name, arg) = match s.split_once(':') {
            Some((n, a)) => (n, Some(a)),
            None => (s.as_str(), None),
        };
        let bad = |why: &str| ModelsError::Config(format!("model {s:?}: {why}"));
        let parse_usize = |v: &str| -> Result<usize> {
            match v.trim().parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(bad(&format!("{v:?} is not a positive integer"))),
            }
        };
        match (name, arg) {
            ("mlp", None) => Ok(ModelSpec::Mlp {
                hidden: DEFAULT_MLP_HIDDEN.to_vec(),
            }),
            ("mlp", Some(a)) if a.trim().is_empty() => Ok(ModelSpec::Mlp { hidden: vec![] }),
            ("mlp", Some(a)) => Ok(ModelSpec::Mlp {
                hidden: a.split(',').map(parse_usize).collect::<Result<_>>()?,
            }),
            ("lenet", None) => Ok(ModelSpec::LeNet),
            ("resnet8", None) => Ok(ModelSpec::ResNet8),
            ("resnet18", None) => Ok(ModelSpec::ResNet18),
            ("mf" | "mf-centred", _) => Ok(ModelSpec::MatrixFactorization {
                factors: arg.map_or(Ok(DEFAULT_MF_FACTORS), parse_usize)?,
                centred: name == "mf-centred",
            }),
            ("lenet" | "resnet8" | "resnet18", Some(_)) => Err(bad("this model takes no argument")),
            _ => Err(bad(
                "unknown model; expected mlp[:w1,w2,..], lenet, resnet8, resnet18, mf[:factors] or mf-centred[:factors]",
            )),
        }
    }
}

/// What a model must know about its task: input shape and output kind. Derived from a dataset with
/// [`TaskInfo::of`]; every node of a run must build its model from the same `TaskInfo` (derive it from the
/// full training set, or ship it in the run configuration), or the models differ.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum TaskInfo {
    /// Dense inputs of `sample_shape`, labels in `0..num_classes`.
    Classification {
        sample_shape: Vec<usize>,
        num_classes: usize,
    },
    /// (user, item) pairs → real rating. `offset` is the constant the model adds to every prediction (not a
    /// parameter); [`TaskInfo::of`] sets it to the mean rating of the dataset.
    Rating {
        num_users: usize,
        num_items: usize,
        offset: f32,
    },
}

impl TaskInfo {
    /// The task of `data`. Dense inputs with class labels → classification; pairs with ratings → rating
    /// prediction (offset: the mean rating, 0 for an empty dataset). Other combinations have no model here.
    pub fn of(data: &Dataset) -> Result<Self> {
        match (data.inputs(), data.targets()) {
            (Inputs::Dense { sample_shape, .. }, Targets::Classes { num_classes, .. }) => {
                Ok(TaskInfo::Classification {
                    sample_shape: sample_shape.clone(),
                    num_classes: *num_classes,
                })
            }
            (
                Inputs::Pairs {
                    num_users,
                    num_items,
                    ..
                },
                Targets::Ratings(r),
            ) => {
                let offset = if r.is_empty() {
                    0.0
                } else {
                    (r.iter().map(|&v| v as f64).sum::<f64>() / r.len() as f64) as f32
                };
                Ok(TaskInfo::Rating {
                    num_users: *num_users,
                    num_items: *num_items,
                    offset,
                })
            }
            (Inputs::Dense { .. }, Targets::Ratings(_)) => Err(ModelsError::Config(
                "regression on dense features is not supported: no model for it".into(),
            )),
            (Inputs::Pairs { .. }, Targets::Classes { .. }) => Err(ModelsError::Config(
                "classification of (user, item) pairs is not supported: no model for it".into(),
            )),
        }
    }

    /// Checks that `data` fits a model built for this task: same input shape and classes, or same user and
    /// item counts. The rating offset is not compared.
    pub fn check(&self, data: &Dataset) -> Result<()> {
        let got = TaskInfo::of(data)?;
        let fits = match (self, &got) {
            (TaskInfo::Classification { .. }, TaskInfo::Classification { .. }) => *self == got,
            (
                TaskInfo::Rating {
                    num_users,
                    num_items,
                    ..
                },
                TaskInfo::Rating {
                    num_users: u,
                    num_items: i,
                    ..
                },
            ) => num_users == u && num_items == i,
            _ => false,
        };
        if fits {
            Ok(())
        } else {
            Err(ModelsError::Config(format!(
                "dataset ({}) does not fit the model's task ({})",
                got.describe(),
                self.describe()
            )))
        }
    }

    /// True for rating prediction (MSE loss, RMSE metric), false for classification.
    pub fn is_rating(&self) -> bool {
        matches!(self, TaskInfo::Rating { .. })
    }

    fn describe(&self) -> String {
        match self {
            TaskInfo::Classification {
                sample_shape,
                num_classes,
            } => format!("{num_classes}-class classification of {sample_shape:?} inputs"),
            TaskInfo::Rating {
                num_users,
                num_items,
                ..
            } => format!("ratings of {num_users} users x {num_items} items"),
        }
    }
}

/// A network with its variables, ready to train. Built only through [`Model::new`], so its weights are always
/// the seeded ones. `Send + Sync`: it can move to a blocking training thread.
pub struct Model {
    spec: ModelSpec,
    info: TaskInfo,
    device: Device,
    varmap: VarMap,
    /// All variables in name-sorted order: the order of the flat parameter vector.
    pub(crate) vars: Vec<(String, Var)>,
    pub(crate) num_params: usize,
    net: Box<dyn Module + Send + Sync>,
    /// The prediction offset of a matrix factorisation model, `None` for every other architecture: marks the
    /// model as MF for [`Model::mf_vars`].
    mf_offset: Option<f32>,
}

/// The variables of a matrix factorisation model and its (constant) offset: what the sparse SGD step
/// (`train/mf_sgd.rs`) needs to train it without Candle's autograd.
pub(crate) struct MfVars<'a> {
    /// `[num_users, factors]`.
    pub(crate) users: &'a Var,
    /// `[num_items, factors]`.
    pub(crate) items: &'a Var,
    /// Added to every prediction.
    pub(crate) offset: f32,
}

impl fmt::Debug for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Model")
            .field("spec", &self.spec)
            .field("info", &self.info)
            .field("device", &self.device)
            .field("num_params", &self.num_params)
            .finish_non_exhaustive()
    }
}

impl Model {
    /// Builds `spec` for `info` on `device` and initialises every variable from a ChaCha stream seeded by
    /// `seed` (see [`init`]): same seed, spec and task → bit-identical parameters on every node. A spec that
    /// does not fit the task (MF on images, LeNet on 1-D features, ...) is a [`ModelsError::Config`].
    pub fn new(spec: &ModelSpec, info: &TaskInfo, seed: u64, device: &Device) -> Result<Model> {
        let varmap = VarMap::new();
        let hints = init::Hints::default();
        let vb = init::recording_builder(&varmap, &hints, device);
        let mut mf_offset = None;
        let mismatch = |why: &str| {
            Err(ModelsError::Config(format!(
                "model {spec} does not fit the task ({}): {why}",
                info.describe()
            )))
        };
        let net: Box<dyn Module + Send + Sync> = match (spec, info) {
            (
                ModelSpec::Mlp { hidden },
                TaskInfo::Classification {
                    sample_shape,
                    num_classes,
                },
            ) => Box::new(mlp::Mlp::new(
                &mlp::Config {
                    input_dim: sample_shape.iter().product(),
                    hidden: hidden.clone(),
                    num_classes: *num_classes,
                },
                vb,
            )?),
            (
                ModelSpec::LeNet | ModelSpec::ResNet8 | ModelSpec::ResNet18,
                TaskInfo::Classification {
                    sample_shape,
                    num_classes,
                },
            ) => {
                let &[c, h, w] = sample_shape.as_slice() else {
                    return mismatch("it needs images of shape [channels, height, width]");
                };
                match spec {
                    ModelSpec::LeNet => Box::new(lenet::LeNet::new(
                        &lenet::Config {
                            in_channels: c,
                            height: h,
                            width: w,
                            num_classes: *num_classes,
                        },
                        vb,
                    )?),
                    _ => {
                        let cfg = if *spec == ModelSpec::ResNet8 {
                            resnet::Config::resnet8(c, *num_classes)
                        } else {
                            resnet::Config::resnet18(c, *num_classes)
                        };
                        if h < cfg.min_side() || w < cfg.min_side() {
                            return mismatch(&format!(
                                "images must be at least {0}x{0}",
                                cfg.min_side()
                            ));
                        }
                        Box::new(resnet::ResNet::new(&cfg, vb)?)
                    }
                }
            }
            (
                ModelSpec::MatrixFactorization { factors, centred },
                TaskInfo::Rating {
                    num_users,
                    num_items,
                    offset,
                },
            ) => {
                let net = mf::MatrixFactorization::new(
                    &mf::Config {
                        num_users: *num_users,
                        num_items: *num_items,
                        factors: *factors,
                        // The reference model predicts from 0; the centred one from the mean rating.
                        offset: if *centred { *offset } else { 0.0 },
                        init: if *centred {
                            mf::MfInit::CENTRED
                        } else {
                            mf::MfInit::REFERENCE
                        },
                    },
                    vb,
                )?;
                mf_offset = Some(net.offset());
                Box::new(net)
            }
            (ModelSpec::MatrixFactorization { .. }, TaskInfo::Classification { .. }) => {
                return mismatch("matrix factorisation needs (user, item) pairs with ratings");
            }
            (_, TaskInfo::Rating { .. }) => {
                return mismatch("rating prediction needs the matrix factorisation model (mf)");
            }
        };
        init::apply(&varmap, &hints, seed, device)?;
        let mut vars: Vec<(String, Var)> = varmap
            .data()
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        let num_params = vars.iter().map(|(_, v)| v.elem_count()).sum();
        Ok(Model {
            spec: spec.clone(),
            info: info.clone(),
            device: device.clone(),
            varmap,
            vars,
            num_params,
            net,
            mf_offset,
        })
    }

    pub fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    pub fn info(&self) -> &TaskInfo {
        &self.info
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The underlying variable store (e.g. to save a safetensors checkpoint).
    pub fn varmap(&self) -> &VarMap {
        &self.varmap
    }

    /// Runs the network: `[batch, ...sample_shape]` f32 → `[batch, classes]` logits, or `[batch, 2]` u32
    /// (user, item) → `[batch]` predicted ratings.
    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        Ok(self.net.forward(xs)?)
    }

    /// Adds `scale · N(0, 1)` noise, drawn from ChaCha8 seeded by `seed`, to every parameter (name-sorted
    /// order), e.g. to give each node its own starting point from a shared one.
    pub fn perturb(&mut self, seed: u64, scale: f32) -> Result<()> {
        if !scale.is_finite() {
            return Err(ModelsError::Config(format!(
                "perturbation scale {scale} is not finite"
            )));
        }
        let mut flat = self.flat_params()?;
        init::perturb(&mut flat, seed, scale);
        self.set_flat_params(&flat)
    }

    /// The trainable variables in name-sorted (flat vector) order.
    pub(crate) fn all_vars(&self) -> Vec<Var> {
        self.vars.iter().map(|(_, v)| v.clone()).collect()
    }

    /// The embeddings and offset of a matrix factorisation model; `None` for any other architecture.
    pub(crate) fn mf_vars(&self) -> Option<MfVars<'_>> {
        let offset = self.mf_offset?;
        let var = |name: &str| self.vars.iter().find_map(|(n, v)| (n == name).then_some(v));
        Some(MfVars {
            users: var(mf::USERS)?,
            items: var(mf::ITEMS)?,
            offset,
        })
    }
}

#[cfg(test)]
mod tests;
