//! One real node's local learning: its model, its private training data, the test set, its training RNG.
//! Both drivers (libp2p and the simulator) train and evaluate through this, off the round engine.

use std::sync::Arc;
use std::time::Instant;

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

    /// Builds the learners of nodes `indices` from a loaded split.
    pub fn learners(
        &self,
        split: &Split,
        parts: &[Vec<usize>],
        indices: impl IntoIterator<Item = usize>,
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
        let device = models::device::best_device();
        indices
            .into_iter()
            .map(|i| {
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
}

/// What a training call returns.
#[derive(Debug, Clone)]
pub struct Trained {
    pub params: Vec<f32>,
    pub train_loss: f64,
    pub secs: f64,
}

impl Learner {
    /// Local training from the current model; returns the trained flat parameters.
    pub fn train(&mut self) -> Result<Trained> {
        // Wall-clock seconds of the work, reported in metrics; never an input to an engine.
        #[allow(clippy::disallowed_methods)]
        let t = Instant::now();
        let report = train_local(&mut self.model, &self.train, &self.train_cfg, &mut self.rng)?;
        let params = self.model.flat_params()?;
        Ok(Trained {
            params,
            train_loss: report.mean_loss,
            secs: t.elapsed().as_secs_f64(),
        })
    }

    /// Loads `params` into the model and evaluates it on the test set; returns the evaluation and its time.
    pub fn load_and_evaluate(&mut self, params: &[f32]) -> Result<(Evaluation, f64)> {
        // Wall-clock seconds of the work, reported in metrics; never an input to an engine.
        #[allow(clippy::disallowed_methods)]
        let t = Instant::now();
        self.model.set_flat_params(params)?;
        let eval = evaluate(&self.model, &self.test)?;
        Ok((eval, t.elapsed().as_secs_f64()))
    }
}
