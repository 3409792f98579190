//! One real node's local learning: its model, its private training data, the test set, its training RNG.
//! Both drivers (libp2p and the simulator) train and evaluate through this, off the round engine.

use std::sync::Arc;
use std::time::Instant;

use models::ModelsError;
use models::chunking::ChunkPartition;
use models::data::partition::{Partition, partition};
use models::data::{Dataset, DatasetSpec, Split};
use models::nn::{Model, ModelSpec, TaskInfo};
use models::train::{Evaluation, TrainConfig, evaluate, train_local};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::{NodeError, Result};

/// What every node of a run agrees on about learning. The model initialisation and the chunk partition use
/// `seed` on every node (the paper's shared initial model and static partition); each node's training RNG is
/// derived from `seed` and its index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LearningConfig {
    pub dataset: DatasetSpec,
    /// `None`: the default for the dataset (MF for ratings, LeNet for images, MLP otherwise).
    pub model: Option<ModelSpec>,
    pub partition: Partition,
    /// Number of real nodes the training data is split across.
    pub nodes: usize,
    pub train: TrainConfig,
    pub seed: u64,
    /// Evaluate on at most this many test samples (a seeded subset), to keep evaluation cheap.
    pub max_test_samples: Option<usize>,
}

impl LearningConfig {
    /// Loads the dataset and splits its training part across `nodes`; returns the per-node index lists with
    /// the split.
    pub fn load(&self) -> Result<(Split, Vec<Vec<usize>>)> {
        let split = self.dataset.load(self.seed)?;
        let parts = partition(&split.train, self.nodes, &self.partition, self.seed)?;
        Ok((split, parts))
    }

    /// The model every node starts from.
    pub fn model_spec(&self, info: &TaskInfo) -> ModelSpec {
        self.model
            .clone()
            .unwrap_or_else(|| ModelSpec::default_for(info))
    }

    /// Builds the learners of nodes `indices` from a loaded split, on the best device compiled in and present
    /// ([`models::device::best_device`]).
    pub fn learners(
        &self,
        split: &Split,
        parts: &[Vec<usize>],
        indices: impl IntoIterator<Item = usize>,
    ) -> Result<Vec<Learner>> {
        let device = models::device::best_device();
        self.learners_with(split, parts, indices, |_| device.clone())
    }

    /// [`Self::learners`] with node `i`'s model on `device_of(i)`; a device that this build or machine lacks
    /// falls back to the CPU with a warning (each distinct device is opened once).
    pub fn learners_on(
        &self,
        split: &Split,
        parts: &[Vec<usize>],
        indices: impl IntoIterator<Item = usize>,
        device_of: impl Fn(usize) -> models::device::DeviceSpec,
    ) -> Result<Vec<Learner>> {
        let mut opened: std::collections::BTreeMap<String, models::device::Device> =
            std::collections::BTreeMap::new();
        self.learners_with(split, parts, indices, |i| {
            let spec = device_of(i);
            opened
                .entry(spec.to_string())
                .or_insert_with(|| spec.open())
                .clone()
        })
    }

    fn learners_with(
        &self,
        split: &Split,
        parts: &[Vec<usize>],
        indices: impl IntoIterator<Item = usize>,
        mut device_of: impl FnMut(usize) -> models::device::Device,
    ) -> Result<Vec<Learner>> {
        let info = TaskInfo::of(&split.train)?;
        let spec = self.model_spec(&info);
        let test = Arc::new(match self.max_test_samples {
            Some(m) if m < split.test.len() => {
                use rand::seq::SliceRandom;
                let mut idx: Vec<usize> = (0..split.test.len()).collect();
                idx.shuffle(&mut ChaCha8Rng::seed_from_u64(self.seed ^ 0x7e57));
                idx.truncate(m);
                idx.sort_unstable();
                split.test.subset(&idx)
            }
            _ => split.test.clone(),
        });
        indices
            .into_iter()
            .map(|i| {
                let device = device_of(i);
                let part = parts.get(i).ok_or_else(|| {
                    NodeError::Config(format!("node index {i} but only {} nodes", parts.len()))
                })?;
                Ok(Learner {
                    model: Model::new(&spec, &info, self.seed, &device)?,
                    train: split.train.subset(part),
                    test: test.clone(),
                    train_cfg: self.train,
                    rng: ChaCha8Rng::seed_from_u64(
                        self.seed
                            .wrapping_add(0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i as u64 + 1)),
                    ),
                    diverged: 0,
                })
            })
            .collect()
    }

    /// The static chunk partition for `k` chunks of `model`, identical on every node.
    pub fn chunk_partition(&self, model: &Model, k: usize) -> Result<ChunkPartition> {
        let sizes: Vec<usize> = model.param_layout().into_iter().map(|(_, n)| n).collect();
        Ok(ChunkPartition::new(&sizes, k, self.seed)?)
    }
}

/// One node's model and data.
pub struct Learner {
    pub model: Model,
    pub train: Dataset,
    pub test: Arc<Dataset>,
    pub train_cfg: TrainConfig,
    pub rng: ChaCha8Rng,
    /// Local trainings that diverged so far (each survived by restoring the model; see [`Learner::train`]).
    pub diverged: u64,
}

/// What a training call returns.
#[derive(Debug, Clone)]
pub struct Trained {
    /// The trained parameters, or the parameters from before training when it diverged.
    pub params: Vec<f32>,
    /// Mean loss of the round's steps; NaN when the training diverged (the round engine's sentinel:
    /// [`crate::engine::RnInput::Trained`]).
    pub train_loss: f64,
    pub secs: f64,
}

impl Trained {
    /// Whether this training diverged and `params` are the model from before it.
    pub fn diverged(&self) -> bool {
        !self.train_loss.is_finite()
    }
}

impl Learner {
    /// Local training from the current model; returns the trained flat parameters.
    ///
    /// A training that diverges (a non-finite loss: a learning rate too high, or a model that a hostile
    /// neighbour's values pushed far off) does not end the node (issue 14): the model goes back to the
    /// parameters it had before this call — the round's starting model, the last aggregate — and those are
    /// returned with a NaN loss, so the node takes part in the round with its last good model and the
    /// next round trains again (with a fresh shuffle). That costs one copy of the parameters per round
    /// (d floats, e.g. 45 MB for ResNet-18's 11.2 M; small beside the epoch of training it guards).
    /// Restoring to the step before the failing one would need a copy per step. Every divergence is
    /// counted in [`Learner::diverged`] and logged at `warn`, rate-limited to the 1st, 2nd, 4th, 8th, …
    /// occurrence (a node stuck on a bad model would otherwise log every round). Other errors still end
    /// the node: they are bugs or broken data, not something a peer can cause.
    pub fn train(&mut self) -> Result<Trained> {
        // Wall-clock seconds of the work, reported in metrics; never an input to an engine.
        #[allow(clippy::disallowed_methods)]
        let t = Instant::now();
        let before = self.model.flat_params()?;
        match train_local(&mut self.model, &self.train, &self.train_cfg, &mut self.rng) {
            Ok(report) => Ok(Trained {
                params: self.model.flat_params()?,
                train_loss: report.mean_loss,
                secs: t.elapsed().as_secs_f64(),
            }),
            Err(e @ ModelsError::Diverged { .. }) => {
                self.model.set_flat_params(&before)?;
                self.diverged += 1;
                if self.diverged.is_power_of_two() {
                    tracing::warn!(
                        error = %e,
                        times = self.diverged,
                        "local training diverged: continuing from the model before it"
                    );
                }
                Ok(Trained {
                    params: before,
                    train_loss: f64::NAN,
                    secs: t.elapsed().as_secs_f64(),
                })
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Loads `params` into the model and evaluates it on the test set; returns the evaluation and its time.
    pub fn load_and_evaluate(&mut self, params: &[f32]) -> Result<(Evaluation, f64)> {
        self.model.set_flat_params(params)?;
        self.evaluate()
    }

    /// Evaluates the current model on this node's test set (a round sat out: the model did not change).
    pub fn evaluate(&mut self) -> Result<(Evaluation, f64)> {
        // Wall-clock seconds of the work, reported in metrics; never an input to an engine.
        #[allow(clippy::disallowed_methods)]
        let t = Instant::now();
        let eval = evaluate(&self.model, &self.test)?;
        Ok((eval, t.elapsed().as_secs_f64()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use models::train::LocalWork;

    fn learner(lr: f64) -> Learner {
        let lc = LearningConfig {
            dataset: DatasetSpec::default(),
            model: Some(ModelSpec::Mlp { hidden: vec![8] }),
            partition: Partition::Iid,
            nodes: 4,
            train: TrainConfig {
                lr,
                batch_size: 32,
                work: LocalWork::Steps(20),
                clip: None,
            },
            seed: 3,
            max_test_samples: Some(100),
        };
        let (split, parts) = lc.load().unwrap();
        lc.learners(&split, &parts, [0]).unwrap().remove(0)
    }

    /// Issue 14: a training step that diverges does not end the node; it goes on from the model it had
    /// before the round's training, says so (NaN loss, the engine's sentinel), and trains again next time.
    #[test]
    fn a_diverging_training_continues_from_the_last_good_model() {
        let mut l = learner(1e9);
        let before = l.model.flat_params().unwrap();
        let t = l.train().expect("divergence is survived, not an error");
        assert!(t.diverged() && t.train_loss.is_nan());
        assert_eq!(
            t.params, before,
            "the round goes on with the model from before training"
        );
        assert_eq!(
            l.model.flat_params().unwrap(),
            before,
            "the model itself is restored"
        );
        assert_eq!(l.diverged, 1);
        assert!(
            l.train().unwrap().diverged(),
            "diverges again at this learning rate"
        );
        assert_eq!(l.diverged, 2);
        // With a sane learning rate the same node trains on from there.
        l.train_cfg.lr = 0.05;
        let t = l.train().unwrap();
        assert!(!t.diverged() && t.train_loss.is_finite());
        assert!(t.params.iter().all(|v| v.is_finite()) && t.params != before);
        assert_eq!(l.diverged, 2);
    }
}
