//! Shatter (PETS 2025, §4): the model cut into k chunks by a static seeded partition, chunk s sent by VN s
//! to its neighbours in the round's overlay, every received copy averaged per parameter with the local value.

use std::sync::Arc;

use models::aggregate::Aggregator;
use models::chunking::ChunkPartition;
use protocol::Round;
use protocol::{ChunkFrame, ChunkIndex};

use super::{AlgoError, Algorithm, Payload};

/// Shatter with `partition.k()` virtual nodes.
pub struct Shatter {
    name: &'static str,
    partition: Arc<ChunkPartition>,
    aggregator: Aggregator,
}

impl Shatter {
    /// Shatter over the static `partition` (k = `partition.k()` VNs).
    pub fn new(partition: Arc<ChunkPartition>) -> Self {
        Self::named("shatter", partition)
    }

    pub(super) fn named(name: &'static str, partition: Arc<ChunkPartition>) -> Self {
        Self {
            name,
            aggregator: Aggregator::new(partition.clone()),
            partition,
        }
    }
}

impl Algorithm for Shatter {
    fn name(&self) -> &str {
        self.name
    }

    fn virtual_nodes(&self) -> usize {
        self.partition.k()
    }

    fn chunk_lens(&self) -> Vec<usize> {
        self.partition.chunk_lens()
    }

    fn begin_round(&mut self, _round: Round) {
        self.aggregator.reset();
    }

    fn outgoing(
        &mut self,
        round: Round,
        _step: u32,
        params: &[f32],
    ) -> Result<Vec<(usize, Payload)>, AlgoError> {
        // One pass over the parameters cuts all k chunks (k passes would touch the model k times).
        let chunks = self.partition.extract_all(params)?;
        Ok(chunks
            .into_iter()
            .enumerate()
            .map(|(s, values)| {
                let frame = ChunkFrame {
                    round,
                    chunk: ChunkIndex::of(s),
                    values,
                };
                (s, Payload::Broadcast(frame))
            })
            .collect())
    }

    fn receive(&mut self, _step: u32, _vn: usize, frame: &ChunkFrame) -> Result<(), AlgoError> {
        Ok(self.aggregator.add(frame.chunk.get(), &frame.values)?)
    }

    /// Per-parameter mean of the local value and every received copy (equal weights; a parameter never
    /// received keeps its local value).
    fn combine(&mut self, _round: Round, _step: u32, local: &[f32]) -> Result<Vec<f32>, AlgoError> {
        Ok(self.aggregator.finish(local)?)
    }
}
