//! Linkability attack (LA; Shatter, PETS 2025, §6 "privacy attacks", as in the reference implementation):
//! guess **which** real node sent a chunk.
//!
//! The attacker completes the chunk into a model ([`super::complete`]) and computes its mean loss on the
//! training set of every other real node (an evaluation-only upper bound on the attacker's knowledge: the
//! paper gives it every node's data, the strongest version of the attack). A model trained on node `j`'s data
//! fits that data best, so the prediction is the node with the lowest mean loss. Success rate over attacked
//! chunks; chance is `1 / (n − 1)` with `n` real nodes (the attacker excludes itself).

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::data::Dataset;
use crate::nn::Model;
use crate::train::per_sample_losses;
use crate::{ModelsError, Result};

use super::mia::sample_indices;

/// Samples per candidate node the LA scores when the caller does not say. The mean loss over 200 samples
/// has a standard error of a few percent of the loss, small against the gap between a victim's own data
/// and others' data under non-IID partitions, and the audit cost is (n − 1) × this per chunk.
pub const DEFAULT_LA_MAX_PER_CANDIDATE: usize = 200;

/// The outcome of one linkability attack.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkResult {
    /// Position (in the candidate slice) of the candidate with the lowest mean loss; ties go to the lowest
    /// position, so the result is deterministic.
    pub prediction: usize,
    /// Mean loss of the completed model on each candidate's (sub-sampled) training set.
    pub mean_losses: Vec<f64>,
}

/// The prediction from mean losses: arg-min, first one on ties. Errors on no candidate or a NaN loss.
pub fn link_from_losses(mean_losses: &[f64]) -> Result<usize> {
    if mean_losses.is_empty() {
        return Err(ModelsError::Config(
            "linkability needs at least one candidate".into(),
        ));
    }
    if let Some(i) = mean_losses.iter().position(|l| l.is_nan()) {
        return Err(ModelsError::Config(format!(
            "linkability: mean loss of candidate {i} is NaN"
        )));
    }
    let mut best = 0;
    for (i, &l) in mean_losses.iter().enumerate() {
        if l < mean_losses[best] {
            best = i;
        }
    }
    Ok(best)
}

/// Runs the LA of `model` (holding the completed parameters) over `candidates` (the training sets of every
/// real node except the attacker), scoring at most `max_per_candidate` samples of each, sub-sampled with
/// `rng`. An empty candidate set is an error (it has no mean loss).
pub fn link<R: Rng + ?Sized>(
    model: &Model,
    candidates: &[&Dataset],
    max_per_candidate: usize,
    rng: &mut R,
) -> Result<LinkResult> {
    if max_per_candidate == 0 {
        return Err(ModelsError::Config(
            "linkability: max_per_candidate must be at least 1".into(),
        ));
    }
    let mut mean_losses = Vec::with_capacity(candidates.len());
    for (i, data) in candidates.iter().enumerate() {
        if data.is_empty() {
            return Err(ModelsError::Config(format!(
                "linkability: candidate {i} has no training samples"
            )));
        }
        let idx = sample_indices(data.len(), max_per_candidate, rng);
        let losses = per_sample_losses(model, &data.subset(&idx))?;
        mean_losses.push(losses.iter().map(|&l| l as f64).sum::<f64>() / losses.len() as f64);
    }
    let prediction = link_from_losses(&mean_losses)?;
    Ok(LinkResult {
        prediction,
        mean_losses,
    })
}

/// Success rate of a set of LA predictions against the harness's ground truth: the fraction of
/// `(predicted, true sender)` pairs that agree (0 for no attack).
pub fn success_rate(outcomes: &[(usize, usize)]) -> f64 {
    if outcomes.is_empty() {
        return 0.0;
    }
    outcomes.iter().filter(|(p, t)| p == t).count() as f64 / outcomes.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{Inputs, Targets};
    use crate::nn::{ModelSpec, TaskInfo};
    use candle_core::Device;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    /// Node `j`'s data: 2-D points all labelled `j`. A logistic-regression model whose bias favours class
    /// `v` has the lowest loss on node `v`'s data, so the LA must name `v`.
    fn node_data(label: u32, n: usize) -> Dataset {
        Dataset::new(
            Inputs::Dense {
                values: vec![0.5; 2 * n],
                sample_shape: vec![2],
            },
            Targets::Classes {
                labels: vec![label; n],
                num_classes: 4,
            },
            None,
        )
        .unwrap()
    }

    #[test]
    fn names_the_node_whose_data_the_model_fits() {
        let info = TaskInfo::Classification {
            sample_shape: vec![2],
            num_classes: 4,
        };
        let mut model =
            Model::new(&ModelSpec::Mlp { hidden: vec![] }, &info, 0, &Device::Cpu).unwrap();
        // Layout (name-sorted): out.bias [4], out.weight [4 x 2].
        assert_eq!(model.param_layout()[0], ("out.bias".to_string(), 4));
        let candidates: Vec<Dataset> = (0..4).map(|j| node_data(j, 300)).collect();
        let refs: Vec<&Dataset> = candidates.iter().collect();
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut outcomes = Vec::new();
        for victim in 0..4usize {
            let mut theta = vec![0.0f32; model.num_params()];
            theta[victim] = 3.0; // bias of class `victim`
            model.set_flat_params(&theta).unwrap();
            let r = link(&model, &refs, 50, &mut rng).unwrap();
            assert_eq!(r.mean_losses.len(), 4);
            outcomes.push((r.prediction, victim));
        }
        assert_eq!(success_rate(&outcomes), 1.0);
        assert_eq!(success_rate(&[(0, 1), (2, 2)]), 0.5);
    }

    #[test]
    fn ties_go_to_the_first_and_errors() {
        assert_eq!(link_from_losses(&[2.0, 1.0, 1.0, 3.0]).unwrap(), 1);
        assert!(link_from_losses(&[]).is_err());
        assert!(link_from_losses(&[1.0, f64::NAN]).is_err());
    }
}
