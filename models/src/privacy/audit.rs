//! The privacy audit of one received chunk, as the testnet `--audit` harness runs it: an honest-but-curious
//! real node completes a chunk its virtual nodes received, then runs the MIA against the true sender and the
//! LA over all other real nodes (Shatter, PETS 2025, §6: each node attacks up to 8 received chunks).
//!
//! The ground truth (who sent the chunk, hence whose training set are the members, and which candidate is
//! right) comes from the harness, never from the node: [`Auditor`] lives outside the node and is handed the
//! victim's data by the harness.
//!
//! Determinism: every draw (MIA sets, LA sub-samples) comes from the caller's RNG; seed it from (run seed,
//! round, attacker, chunk) and an audit is reproducible regardless of the order audits run in.

use std::sync::Arc;

use candle_core::Device;
use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::chunking::ChunkPartition;
use crate::data::Dataset;
use crate::nn::{Model, ModelSpec, TaskInfo};
use crate::{ModelsError, Result};

use super::completion::{Fill, complete_at_into, complete_into};
use super::linkability::{DEFAULT_LA_MAX_PER_CANDIDATE, LinkResult, link};
use super::mia::{MiaConfig, MiaResult, loss_mia};

/// How chunks are attacked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditConfig {
    /// What fills the coordinates outside the chunk (default: the attacker's own previous-round model).
    pub fill: Fill,
    /// Member / non-member sets of the MIA (default: balanced, 500 per side).
    pub mia: MiaConfig,
    /// Samples of each candidate's training set the LA scores (default 200).
    pub la_max_per_candidate: usize,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            fill: Fill::OwnModel,
            mia: MiaConfig::default(),
            la_max_per_candidate: DEFAULT_LA_MAX_PER_CANDIDATE,
        }
    }
}

/// The result of attacking one chunk.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChunkAudit {
    pub chunk: usize,
    pub mia: MiaResult,
    /// `la.prediction` indexes the candidate slice given to [`Auditor::audit_chunk`]; compare it with
    /// [`la_truth_index`] of the true sender.
    pub la: LinkResult,
}

/// What the harness knows about a chunk and the node never does: whose it is, and the data to score it on.
#[derive(Clone, Copy, Debug)]
pub struct AuditTarget<'a> {
    /// The true sender's training set (MIA members).
    pub victim_train: &'a Dataset,
    /// The non-member pool, e.g. [`super::nonmembers_for`]`(victim_train, &test)`.
    pub nonmembers: &'a Dataset,
    /// The training sets of every real node except the attacker, in a fixed order (LA candidates; with all
    /// nodes in id order, the right answer is [`la_truth_index`]`(attacker, victim)`).
    pub candidates: &'a [&'a Dataset],
}

/// Attacks chunks with one scratch model (built once, its parameters overwritten per chunk).
#[derive(Debug)]
pub struct Auditor {
    model: Model,
    partition: Arc<ChunkPartition>,
    cfg: AuditConfig,
    completed: Vec<f32>,
}

impl Auditor {
    /// An auditor for models of `spec` on `info` cut by `partition` (the run's static partition: the same one
    /// the nodes use). Errors if the partition's d is not the model's.
    pub fn new(
        spec: &ModelSpec,
        info: &TaskInfo,
        partition: Arc<ChunkPartition>,
        cfg: AuditConfig,
        device: &Device,
    ) -> Result<Self> {
        // The seed is irrelevant: every audit overwrites all parameters.
        let model = Model::new(spec, info, 0, device)?;
        if partition.d() != model.num_params() {
            return Err(ModelsError::ParamLength {
                expected: model.num_params(),
                got: partition.d(),
            });
        }
        if cfg.la_max_per_candidate == 0 || cfg.mia.max_per_side == 0 {
            return Err(ModelsError::Config(
                "audit: sample caps must be at least 1".into(),
            ));
        }
        Ok(Self {
            model,
            partition,
            cfg,
            completed: Vec::new(),
        })
    }

    pub fn config(&self) -> &AuditConfig {
        &self.cfg
    }

    /// Attacks one received chunk.
    ///
    /// - `attacker_prev`: the attacker's own parameters of the previous round (length d), the completion base.
    /// - `chunk`, `values`: the chunk index and the values the attacker's VN received (indices order).
    /// - `target`: the harness's ground truth and evaluation data (see [`AuditTarget`]).
    pub fn audit_chunk<R: Rng + ?Sized>(
        &mut self,
        attacker_prev: &[f32],
        chunk: usize,
        values: &[f32],
        target: &AuditTarget<'_>,
        rng: &mut R,
    ) -> Result<ChunkAudit> {
        complete_into(
            attacker_prev,
            &self.partition,
            chunk,
            values,
            self.cfg.fill,
            &mut self.completed,
        )?;
        self.attack_completed(chunk, target, rng)
    }

    /// Attacks values received for an arbitrary set of coordinates (`values[i]` is coordinate
    /// `indices[i]`): a subset not cut by the run's partition, such as sparsification's per-round subset or
    /// a top-k choice. `chunk` is only carried into the result (the index the frame named).
    pub fn audit_coordinates<R: Rng + ?Sized>(
        &mut self,
        attacker_prev: &[f32],
        chunk: usize,
        indices: &[u32],
        values: &[f32],
        target: &AuditTarget<'_>,
        rng: &mut R,
    ) -> Result<ChunkAudit> {
        if attacker_prev.len() != self.partition.d() {
            return Err(ModelsError::ParamLength {
                expected: self.partition.d(),
                got: attacker_prev.len(),
            });
        }
        complete_at_into(
            attacker_prev,
            indices,
            values,
            self.cfg.fill,
            &mut self.completed,
        )?;
        self.attack_completed(chunk, target, rng)
    }

    /// The MIA and the LA on the completed model in `self.completed`.
    fn attack_completed<R: Rng + ?Sized>(
        &mut self,
        chunk: usize,
        target: &AuditTarget<'_>,
        rng: &mut R,
    ) -> Result<ChunkAudit> {
        self.model.set_flat_params(&self.completed)?;
        let mia = loss_mia(
            &self.model,
            target.victim_train,
            target.nonmembers,
            &self.cfg.mia,
            rng,
        )?;
        let la = link(
            &self.model,
            target.candidates,
            self.cfg.la_max_per_candidate,
            rng,
        )?;
        Ok(ChunkAudit { chunk, mia, la })
    }
}

/// Position of real node `victim` in the LA candidate list of `attacker` when the candidates are all real
/// nodes in id order with the attacker left out. `None` if `victim == attacker` (a node never attacks its
/// own chunks).
pub fn la_truth_index(attacker: usize, victim: usize) -> Option<usize> {
    match victim.cmp(&attacker) {
        std::cmp::Ordering::Less => Some(victim),
        std::cmp::Ordering::Equal => None,
        std::cmp::Ordering::Greater => Some(victim - 1),
    }
}

/// Aggregate of the audits of a round (or a run).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditSummary {
    /// Chunks attacked.
    pub chunks: usize,
    pub mia_auc_mean: f64,
    pub mia_auc_median: f64,
    /// Fraction of arg-min LA predictions naming the true sender.
    pub la_success: f64,
    /// Fraction of assignment LA predictions ([`super::link_by_assignment`]: the round's chunks matched
    /// jointly, at most one per index per node) naming the true sender.
    pub la_assignment_success: f64,
    /// What a random guess would achieve: `1 / (n − 1)`.
    pub la_chance: f64,
}

/// Summarises per-chunk AUCs and `(predicted, true)` LA pairs (arg-min and assignment) of a network of
/// `num_nodes` real nodes. With no chunk the statistics are NaN (serialised as `null` by serde_json): "not
/// measured", not zero.
pub fn summarize(
    aucs: &[f64],
    la: &[(usize, usize)],
    la_assignment: &[(usize, usize)],
    num_nodes: usize,
) -> AuditSummary {
    let rate = |pairs: &[(usize, usize)]| {
        if pairs.is_empty() {
            f64::NAN
        } else {
            super::linkability::success_rate(pairs)
        }
    };
    let nan = f64::NAN;
    AuditSummary {
        chunks: aucs.len(),
        mia_auc_mean: if aucs.is_empty() {
            nan
        } else {
            aucs.iter().sum::<f64>() / aucs.len() as f64
        },
        mia_auc_median: median(aucs).unwrap_or(nan),
        la_success: rate(la),
        la_assignment_success: rate(la_assignment),
        la_chance: if num_nodes > 1 {
            1.0 / (num_nodes - 1) as f64
        } else {
            nan
        },
    }
}

/// Median (mean of the two middle values for an even count); `None` when empty. NaNs sort last.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{Inputs, Targets};
    use crate::train::{LocalWork, TrainConfig, train_local};
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn truth_index_and_summary() {
        assert_eq!(la_truth_index(2, 0), Some(0));
        assert_eq!(la_truth_index(2, 2), None);
        assert_eq!(la_truth_index(2, 5), Some(4));
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        let s = summarize(&[0.5, 0.7, 0.9], &[(1, 1), (0, 2)], &[(1, 1), (2, 2)], 5);
        assert_eq!(s.chunks, 3);
        assert!((s.mia_auc_mean - 0.7).abs() < 1e-12);
        assert_eq!(s.mia_auc_median, 0.7);
        assert_eq!(s.la_success, 0.5);
        assert_eq!(s.la_assignment_success, 1.0);
        assert_eq!(s.la_chance, 0.25);
        assert!(summarize(&[], &[], &[], 1).mia_auc_mean.is_nan());
        assert!(summarize(&[], &[], &[], 1).la_assignment_success.is_nan());
    }

    /// `n` random feature vectors with random labels: pure memorisation, so an overfit model separates its
    /// own training samples from fresh ones.
    fn noise_data(n: usize, rng: &mut ChaCha8Rng) -> Dataset {
        use rand::Rng;
        Dataset::new(
            Inputs::Dense {
                values: (0..n * 16).map(|_| rng.random_range(-1.0..1.0)).collect(),
                sample_shape: vec![16],
            },
            Targets::Classes {
                labels: (0..n).map(|_| rng.random_range(0..4)).collect(),
                num_classes: 4,
            },
            None,
        )
        .unwrap()
    }

    /// End to end on a constructed case: node 1 overfits its data; attacking its full model (k = 1) gives a
    /// high AUC and links it, while one chunk of 8 completed with another node's model is much weaker.
    #[test]
    fn audit_of_a_memorising_victim() {
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let info = TaskInfo::Classification {
            sample_shape: vec![16],
            num_classes: 4,
        };
        let spec = ModelSpec::Mlp { hidden: vec![64] };
        let data: Vec<Dataset> = (0..3).map(|_| noise_data(60, &mut rng)).collect();
        let test = noise_data(200, &mut rng);
        let cfg = TrainConfig {
            lr: 0.1,
            batch_size: 20,
            work: LocalWork::Epochs(150),
            clip: None,
        };
        let mut models = Vec::new();
        for d in &data {
            let mut m = Model::new(&spec, &info, 7, &Device::Cpu).unwrap();
            train_local(&mut m, d, &cfg, &mut rng).unwrap();
            models.push(m.flat_params().unwrap());
        }
        let sizes: Vec<usize> = Model::new(&spec, &info, 7, &Device::Cpu)
            .unwrap()
            .param_layout()
            .iter()
            .map(|(_, n)| *n)
            .collect();
        // Attacker 0, victim 1; candidates are nodes 1 and 2.
        let candidates = [&data[1], &data[2]];
        let truth = la_truth_index(0, 1).unwrap();
        let target = AuditTarget {
            victim_train: &data[1],
            nonmembers: &test,
            candidates: &candidates,
        };
        let full = Arc::new(ChunkPartition::new(&sizes, 1, 9).unwrap());
        let mut auditor =
            Auditor::new(&spec, &info, full, AuditConfig::default(), &Device::Cpu).unwrap();
        let a = auditor
            .audit_chunk(&models[0], 0, &models[1], &target, &mut rng)
            .unwrap();
        assert_eq!(a.mia.members, 60);
        assert_eq!(a.mia.nonmembers, 60);
        assert!(a.mia.auc > 0.9, "k=1 AUC {}", a.mia.auc);
        assert_eq!(a.la.prediction, truth);

        let p8 = Arc::new(ChunkPartition::new(&sizes, 8, 9).unwrap());
        let mut auditor8 = Auditor::new(
            &spec,
            &info,
            p8.clone(),
            AuditConfig::default(),
            &Device::Cpu,
        )
        .unwrap();
        let mut aucs = Vec::new();
        for s in 0..8 {
            let chunk = p8.extract(s, &models[1]).unwrap();
            let a = auditor8
                .audit_chunk(&models[0], s, &chunk, &target, &mut rng)
                .unwrap();
            aucs.push(a.mia.auc);
        }
        let mean = aucs.iter().sum::<f64>() / 8.0;
        assert!(mean < 0.75, "k=8 mean AUC {mean} ({aucs:?})");
    }
}
