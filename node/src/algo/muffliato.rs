//! Muffliato (Cyffers et al., NeurIPS 2022; the paper's §6.1 baseline): each round a node adds Gaussian noise
//! of standard deviation σ to its trained model, then runs [`GOSSIP_STEPS`] gossip-averaging steps, each over
//! a fresh random r-regular overlay (the topology refreshed at every step). A step sends the node's current
//! model to its neighbours and replaces it by the per-parameter mean of itself and what arrived; the noise
//! is added once, before the first step, to the node's own copy too (what it later averages is the noisy
//! model), so an attacker only ever sees noisy or already-mixed models.

use std::sync::Arc;

use models::aggregate::Aggregator;
use models::chunking::ChunkPartition;
use protocol::{ChunkFrame, ChunkIndex, Round};
use rand_chacha::ChaCha12Rng;
use rand_distr::{Distribution, Normal};

use super::{AlgoError, Algorithm, Payload};

/// Gossip-averaging steps per round (paper §6.1).
pub const GOSSIP_STEPS: u32 = 10;

/// Muffliato with noise σ, one VN.
pub struct Muffliato {
    sigma: f32,
    aggregator: Aggregator,
    rng: crate::secret::RoundStreams,
    /// The model this step started from (after the noise at step 0): what the received copies average with.
    local: Vec<f32>,
}

impl Muffliato {
    /// Over a one-chunk `partition`; `rng` is the node's own stream (the noise).
    pub fn new(
        partition: Arc<ChunkPartition>,
        sigma: f32,
        rng: ChaCha12Rng,
    ) -> Result<Self, AlgoError> {
        if partition.k() != 1 {
            return Err(AlgoError::Other(format!(
                "Muffliato sends the whole model: a partition of k = 1, not {}",
                partition.k()
            )));
        }
        if !(sigma.is_finite() && sigma >= 0.0) {
            return Err(AlgoError::Other(format!(
                "Muffliato's σ must be finite and ≥ 0, not {sigma}"
            )));
        }
        Ok(Self {
            sigma,
            aggregator: Aggregator::new(partition),
            rng: crate::secret::RoundStreams::new(rng),
            local: Vec::new(),
        })
    }
}

impl Algorithm for Muffliato {
    fn name(&self) -> &str {
        "muffliato"
    }

    fn virtual_nodes(&self) -> usize {
        1
    }

    fn chunk_lens(&self) -> Vec<usize> {
        vec![self.aggregator.partition().d()]
    }

    fn steps(&self) -> u32 {
        GOSSIP_STEPS
    }

    fn begin_round(&mut self, round: Round) {
        self.rng.begin(round);
        self.aggregator.reset();
    }

    fn outgoing(
        &mut self,
        round: Round,
        step: u32,
        params: &[f32],
    ) -> Result<Vec<(usize, Payload)>, AlgoError> {
        self.local.clear();
        self.local.extend_from_slice(params);
        if step == 0 && self.sigma > 0.0 {
            let noise = Normal::new(0.0f32, self.sigma).expect("σ checked at construction");
            for v in &mut self.local {
                *v += noise.sample(&mut self.rng);
            }
        }
        let frame = ChunkFrame {
            round,
            chunk: ChunkIndex(0),
            values: self.local.clone(),
        };
        Ok(vec![(0, Payload::Broadcast(frame))])
    }

    fn receive(&mut self, _step: u32, _vn: usize, frame: &ChunkFrame) -> Result<(), AlgoError> {
        Ok(self.aggregator.add(frame.chunk.get(), &frame.values)?)
    }

    /// The mean of this step's (noisy) model and what arrived; the next step starts from it.
    fn combine(
        &mut self,
        _round: Round,
        _step: u32,
        _local: &[f32],
    ) -> Result<Vec<f32>, AlgoError> {
        let next = self.aggregator.finish(&self.local)?;
        self.aggregator.reset();
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn noise_once_then_every_step_averages_with_what_arrived() {
        let p = Arc::new(ChunkPartition::new(&[3, 2], 1, 1).unwrap());
        let mut m = Muffliato::new(p.clone(), 0.5, ChaCha12Rng::seed_from_u64(4)).unwrap();
        let model = vec![1.0f32; 5];
        m.begin_round(Round(0));
        let out = m.outgoing(Round(0), 0, &model).unwrap();
        let [(0, Payload::Broadcast(f))] = &out[..] else {
            panic!("{out:?}")
        };
        assert!(
            f.values.iter().all(|v| *v != 1.0),
            "noise on every parameter"
        );
        let noisy = f.values.clone();
        m.receive(
            0,
            0,
            &ChunkFrame {
                round: Round(0),
                chunk: ChunkIndex(0),
                values: vec![3.0; 5],
            },
        )
        .unwrap();
        // The combine averages with the noisy model, not the engine's noiseless one.
        let next = m.combine(Round(0), 0, &model).unwrap();
        for (n, v) in next.iter().zip(&noisy) {
            assert!((n - (v + 3.0) / 2.0).abs() < 1e-6);
        }
        // Step 1: no new noise; nothing received keeps the model.
        let out = m.outgoing(Round(0), 1, &next).unwrap();
        let [(0, Payload::Broadcast(f))] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!(f.values, next);
        assert_eq!(m.combine(Round(0), 1, &next).unwrap(), next);
        assert!(Muffliato::new(p, f32::NAN, ChaCha12Rng::seed_from_u64(4)).is_err());
    }
}
