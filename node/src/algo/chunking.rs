//! One chunk of K per round, no virtual nodes: the paper's chunking-only ablation (§6.5, `chunking:K`) and
//! random sparsification (§3, `sparsify-random:F` with K = 1/F).
//!
//! Each round a node picks one of the K chunks at random (its own seeded RNG) and sends it, through its one
//! VN, to the r neighbours of the round's overlay; receivers average per parameter what arrives (a parameter
//! nobody sent keeps its local value). The two differ in the partition:
//! - `chunking:K` cuts the model once, by the run's static seeded partition (as Shatter does, but every chunk
//!   leaves through the same identity, so a receiver knows all chunks it gets from one peer are that peer's);
//! - `sparsify-random:F` draws a fresh partition every round from (run seed, round), the same at every node,
//!   so a node shares a new random F of its parameters each round. Chunk lengths depend only on the model's
//!   tensor sizes and K, so a VN's length check holds in every round.

use std::sync::Arc;

use models::aggregate::Aggregator;
use models::chunking::ChunkPartition;
use protocol::{ChunkFrame, ChunkIndex, Round};
use rand::Rng;
use rand_chacha::ChaCha12Rng;

use super::{AlgoError, Algorithm, Payload};

/// Where a round's partition comes from.
enum Cut {
    /// The run's partition, every round.
    Static,
    /// A fresh partition per round from the run seed and the round.
    PerRound { seed: u64 },
}

/// One random chunk of K per round.
pub struct OneChunk {
    name: &'static str,
    cut: Cut,
    aggregator: Aggregator,
    rng: crate::secret::RoundStreams,
}

/// The stream (of the run seed) a round's partition is drawn from, apart from the static partition's.
const PER_ROUND_TAG: u64 = 0x5350_4152_5349_4659; // "SPARSIFY"

impl OneChunk {
    /// `chunking:K`: the static `partition` (K = `partition.k()`); `rng` picks the chunk each round (the
    /// node's own stream).
    pub fn chunking(partition: Arc<ChunkPartition>, rng: ChaCha12Rng) -> Self {
        Self {
            name: "chunking",
            cut: Cut::Static,
            aggregator: Aggregator::new(partition),
            rng: crate::secret::RoundStreams::new(rng),
        }
    }

    /// `sparsify-random:F`: a fresh partition of the model into K = `partition.k()` chunks every round,
    /// drawn from `seed` and the round (`partition` gives the model's tensor sizes and K).
    pub fn sparsify_random(partition: Arc<ChunkPartition>, seed: u64, rng: ChaCha12Rng) -> Self {
        Self {
            name: "sparsify-random",
            cut: Cut::PerRound { seed },
            aggregator: Aggregator::new(partition),
            rng: crate::secret::RoundStreams::new(rng),
        }
    }

    /// `sparsify-random`'s partition of `round` in a run seeded `seed`, over the run's `partition` (its tensor
    /// sizes and K): what every node cuts that round, and what the `--audit` harness reads a chunk index by.
    pub fn round_partition(partition: &ChunkPartition, seed: u64, round: Round) -> ChunkPartition {
        ChunkPartition::new(
            partition.tensor_sizes(),
            partition.k(),
            seed ^ PER_ROUND_TAG ^ round.get().wrapping_mul(0x9E37_79B9_7F4A_7C15),
        )
        .expect("the same sizes and K as the run's partition")
    }

    fn partition(&self) -> &Arc<ChunkPartition> {
        self.aggregator.partition()
    }
}

impl Algorithm for OneChunk {
    fn name(&self) -> &str {
        self.name
    }

    fn virtual_nodes(&self) -> usize {
        1
    }

    fn chunk_lens(&self) -> Vec<usize> {
        self.partition().chunk_lens()
    }

    fn begin_round(&mut self, round: Round) {
        self.rng.begin(round);
        if let Cut::PerRound { seed } = self.cut {
            let next = Self::round_partition(self.partition(), seed, round);
            self.aggregator = Aggregator::new(Arc::new(next));
        } else {
            self.aggregator.reset();
        }
    }

    fn outgoing(
        &mut self,
        round: Round,
        _step: u32,
        params: &[f32],
    ) -> Result<Vec<(usize, Payload)>, AlgoError> {
        let s = self.rng.random_range(0..self.partition().k());
        let values = self.partition().extract(s, params)?;
        let frame = ChunkFrame {
            round,
            chunk: ChunkIndex::of(s),
            values,
        };
        Ok(vec![(0, Payload::Broadcast(frame))])
    }

    fn receive(&mut self, _step: u32, _vn: usize, frame: &ChunkFrame) -> Result<(), AlgoError> {
        Ok(self.aggregator.add(frame.chunk.get(), &frame.values)?)
    }

    /// Per-parameter mean of the local value and every copy received (a parameter nobody sent keeps its value).
    fn combine(&mut self, _round: Round, _step: u32, local: &[f32]) -> Result<Vec<f32>, AlgoError> {
        Ok(self.aggregator.finish(local)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn rng(s: u64) -> ChaCha12Rng {
        ChaCha12Rng::seed_from_u64(s)
    }

    #[test]
    fn each_round_one_chunk_leaves_and_what_arrives_is_averaged() {
        let p = Arc::new(ChunkPartition::new(&[12, 4], 4, 3).unwrap());
        let mut a = OneChunk::chunking(p.clone(), rng(1));
        let local: Vec<f32> = (0..16).map(|i| i as f32).collect();
        let mut picked = std::collections::BTreeSet::new();
        for t in 0..20 {
            a.begin_round(Round(t));
            let out = a.outgoing(Round(t), 0, &local).unwrap();
            let [(0, Payload::Broadcast(f))] = &out[..] else {
                panic!("{out:?}")
            };
            assert_eq!(f.values, p.extract(f.chunk.get(), &local).unwrap());
            picked.insert(f.chunk.get());
        }
        assert_eq!(picked.len(), 4, "every chunk gets picked over 20 rounds");
        // A copy of chunk 2 of all zeros halves those parameters; the rest keep their value.
        a.begin_round(Round(20));
        a.receive(
            0,
            0,
            &ChunkFrame {
                round: Round(20),
                chunk: ChunkIndex(2),
                values: vec![0.0; p.chunk_len(2)],
            },
        )
        .unwrap();
        let next = a.combine(Round(20), 0, &local).unwrap();
        let ids = p.chunk_ids();
        for (i, (&n, &l)) in next.iter().zip(&local).enumerate() {
            let expect = if ids[i] == 2 { l / 2.0 } else { l };
            assert_eq!(n, expect, "parameter {i}");
        }
    }

    #[test]
    fn sparsification_draws_the_same_fresh_subset_at_every_node_each_round() {
        let p = Arc::new(ChunkPartition::new(&[40, 24], 8, 3).unwrap());
        let mut a = OneChunk::sparsify_random(p.clone(), 9, rng(1));
        let mut b = OneChunk::sparsify_random(p.clone(), 9, rng(2));
        let lens = a.chunk_lens();
        let mut cuts = Vec::new();
        for t in 0..3 {
            a.begin_round(Round(t));
            b.begin_round(Round(t));
            assert_eq!(
                a.partition(),
                b.partition(),
                "both nodes cut round {t} alike"
            );
            assert_eq!(a.chunk_lens(), lens, "lengths do not change between rounds");
            cuts.push(a.partition().indices(0).to_vec());
            assert_eq!(
                a.partition().as_ref(),
                &OneChunk::round_partition(&p, 9, Round(t)),
                "an observer can recompute round {t}'s cut"
            );
        }
        assert!(
            cuts[0] != cuts[1] && cuts[1] != cuts[2],
            "a new subset each round"
        );
        assert_ne!(a.partition().as_ref(), p.as_ref());
    }
}
