//! Graph-homomorphic perturbations (GFL, ../shared/papers/privatized-graph-federated-learning.txt; issue 17)
//! on Shatter's chunks: `ghp:SIGMA` and its uncorrected baseline `random:SIGMA`.
//!
//! Each round every VN sends its chunk plus Laplace noise g (variance σ², fresh per round and VN) to every
//! neighbour. With `ghp`, the node's own term of that chunk is corrected by −(copies delivered)·g before
//! the per-parameter mean, so that the noise cancels in the network average: exactly on an r-regular overlay
//! where every copy arrives (all weights 1/(r + 1), the paper's uniform case, own term −r·g), approximately
//! where degrees differ (the mean's weights 1/(copies + 1) then differ between a sender and its receivers).
//! `random` adds the same noise without the correction. With k = 1 this is GHP on EL; with k > 1 the noise
//! cancels per chunk (Shatter + GHP, a combination no paper has measured).

use std::sync::Arc;

use models::aggregate::Aggregator;
use models::chunking::ChunkPartition;
use models::schemes::ghp::laplace_noise;
use protocol::{ChunkFrame, ChunkIndex, Round};
use rand_chacha::ChaCha12Rng;

use super::{AlgoError, Algorithm, Payload};

/// Shatter (or EL) with Laplace noise on every chunk sent, corrected in the own term (GHP) or not (random).
pub struct Perturbed {
    name: &'static str,
    sigma: f64,
    correct: bool,
    partition: Arc<ChunkPartition>,
    aggregator: Aggregator,
    rng: crate::secret::RoundStreams,
    /// This round's noise per VN (chunk order), and how many neighbours accepted that VN's copy.
    noise: Vec<Vec<f32>>,
    delivered: Vec<u32>,
}

impl Perturbed {
    /// `ghp:SIGMA` (`correct`) or `random:SIGMA` over `partition` (k = `partition.k()` VNs); σ is the noise's
    /// standard deviation; `rng` is the node's own stream.
    pub fn new(
        partition: Arc<ChunkPartition>,
        sigma: f64,
        correct: bool,
        rng: ChaCha12Rng,
    ) -> Result<Self, AlgoError> {
        if !(sigma.is_finite() && sigma >= 0.0) {
            return Err(AlgoError::Other(format!(
                "noise σ must be finite and ≥ 0, not {sigma}"
            )));
        }
        let k = partition.k();
        Ok(Self {
            name: if correct { "ghp" } else { "random" },
            sigma,
            correct,
            aggregator: Aggregator::new(partition.clone()),
            partition,
            rng: crate::secret::RoundStreams::new(rng),
            noise: vec![Vec::new(); k],
            delivered: vec![0; k],
        })
    }
}

impl Algorithm for Perturbed {
    fn name(&self) -> &str {
        self.name
    }

    fn virtual_nodes(&self) -> usize {
        self.partition.k()
    }

    fn chunk_lens(&self) -> Vec<usize> {
        self.partition.chunk_lens()
    }

    fn begin_round(&mut self, round: Round) {
        self.rng.begin(round);
        self.aggregator.reset();
        self.delivered.fill(0);
    }

    fn outgoing(
        &mut self,
        round: Round,
        _step: u32,
        params: &[f32],
    ) -> Result<Vec<(usize, Payload)>, AlgoError> {
        let chunks = self.partition.extract_all(params)?;
        let mut out = Vec::with_capacity(chunks.len());
        for (s, mut values) in chunks.into_iter().enumerate() {
            let g: Vec<f32> = laplace_noise(values.len(), self.sigma, &mut self.rng)
                .into_iter()
                .map(|n| n as f32)
                .collect();
            for (v, n) in values.iter_mut().zip(&g) {
                *v += n;
            }
            self.noise[s] = g;
            let frame = ChunkFrame {
                round,
                chunk: ChunkIndex::of(s),
                values,
            };
            out.push((s, Payload::Broadcast(frame)));
        }
        Ok(out)
    }

    fn delivered(&mut self, _step: u32, vn: usize, copies: u32) {
        if let Some(d) = self.delivered.get_mut(vn) {
            *d = copies;
        }
    }

    fn receive(&mut self, _step: u32, _vn: usize, frame: &ChunkFrame) -> Result<(), AlgoError> {
        Ok(self.aggregator.add(frame.chunk.get(), &frame.values)?)
    }

    /// The per-parameter mean of the own term and every copy received; GHP's own term is the local chunk
    /// minus (copies delivered)·g.
    fn combine(&mut self, _round: Round, _step: u32, local: &[f32]) -> Result<Vec<f32>, AlgoError> {
        let mut own = local.to_vec();
        if self.correct {
            for (s, g) in self.noise.iter().enumerate() {
                let c = self.delivered[s] as f32;
                if c == 0.0 || g.is_empty() {
                    continue;
                }
                for (&i, n) in self.partition.indices(s).iter().zip(g) {
                    own[i as usize] -= c * n;
                }
            }
        }
        Ok(self.aggregator.finish(&own)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// Three nodes on a triangle (2-regular, every copy delivered), k = 2: with GHP the network average
    /// after one exchange equals the noiseless one to float tolerance; without the correction it does not.
    fn network_average(correct: bool, sigma: f64) -> Vec<f32> {
        let p = Arc::new(ChunkPartition::new(&[6, 4], 2, 1).unwrap());
        let models: Vec<Vec<f32>> = (0..3)
            .map(|n| (0..10).map(|i| (n * 10 + i) as f32 / 7.0).collect())
            .collect();
        let mut algos: Vec<Perturbed> = (0..3)
            .map(|n| {
                Perturbed::new(p.clone(), sigma, correct, ChaCha12Rng::seed_from_u64(n)).unwrap()
            })
            .collect();
        let mut sent = Vec::new();
        for (a, m) in algos.iter_mut().zip(&models) {
            a.begin_round(Round(0));
            sent.push(a.outgoing(Round(0), 0, m).unwrap());
        }
        for (n, a) in algos.iter_mut().enumerate() {
            for (other, frames) in sent.iter().enumerate().filter(|(o, _)| *o != n) {
                for (vn, payload) in frames {
                    let Payload::Broadcast(f) = payload else {
                        unreachable!()
                    };
                    a.receive(0, *vn, f).unwrap();
                }
                let _ = other;
            }
            for vn in 0..2 {
                a.delivered(0, vn, 2);
            }
        }
        let next: Vec<Vec<f32>> = algos
            .iter_mut()
            .zip(&models)
            .map(|(a, m)| a.combine(Round(0), 0, m).unwrap())
            .collect();
        (0..10)
            .map(|i| next.iter().map(|m| m[i]).sum::<f32>() / 3.0)
            .collect()
    }

    #[test]
    fn ghp_noise_cancels_in_the_network_average_and_random_noise_does_not() {
        let clean = network_average(true, 0.0);
        let ghp = network_average(true, 1.0);
        let random = network_average(false, 1.0);
        let err = |v: &[f32]| {
            v.iter()
                .zip(&clean)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max)
        };
        assert!(err(&ghp) < 1e-5, "GHP: {}", err(&ghp));
        assert!(err(&random) > 0.05, "random: {}", err(&random));
    }
}
