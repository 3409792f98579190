//! D-PSGD (Lian et al., NeurIPS 2017; the paper's App. B baseline): every node sends its whole model to its
//! r neighbours of one static r-regular graph — negotiated once, before round 0, by the same overlay protocol
//! — and averages with what it receives. On an r-regular graph the Metropolis–Hastings weights are all
//! 1/(r + 1): the per-parameter mean of the local model and the r copies, as EL's combine.

use std::sync::Arc;

use models::chunking::ChunkPartition;
use protocol::{ChunkFrame, Round};

use super::{AlgoError, Algorithm, Graph, Payload, Shatter};

/// D-PSGD over a one-chunk partition.
pub struct Dpsgd(Shatter);

impl Dpsgd {
    pub fn new(partition: Arc<ChunkPartition>) -> Result<Self, AlgoError> {
        if partition.k() != 1 {
            return Err(AlgoError::Other(format!(
                "D-PSGD sends the whole model: a partition of k = 1, not {}",
                partition.k()
            )));
        }
        Ok(Self(Shatter::named("dpsgd", partition)))
    }
}

impl Algorithm for Dpsgd {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn virtual_nodes(&self) -> usize {
        1
    }
    fn chunk_lens(&self) -> Vec<usize> {
        self.0.chunk_lens()
    }
    fn graph(&self) -> Graph {
        Graph::Static
    }
    fn begin_round(&mut self, round: Round) {
        self.0.begin_round(round)
    }
    fn outgoing(
        &mut self,
        round: Round,
        step: u32,
        params: &[f32],
    ) -> Result<Vec<(usize, Payload)>, AlgoError> {
        self.0.outgoing(round, step, params)
    }
    fn receive(&mut self, step: u32, vn: usize, frame: &ChunkFrame) -> Result<(), AlgoError> {
        self.0.receive(step, vn, frame)
    }
    fn combine(&mut self, round: Round, step: u32, local: &[f32]) -> Result<Vec<f32>, AlgoError> {
        self.0.combine(round, step, local)
    }
}
