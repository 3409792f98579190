//! D-PSGD (Lian et al., NeurIPS 2017; the paper's App. B baseline): every node sends its whole model to its
//! r neighbours of one static r-regular graph — negotiated once, before round 0, by the same overlay protocol
//! — and averages with what it receives. On an r-regular graph the Metropolis–Hastings weights are all
//! 1/(r + 1): the per-parameter mean of the local model and the r copies, as EL's combine.

use std::sync::Arc;

use models::chunking::ChunkPartition;
use protocol::{ChunkFrame, Round};

use super::{AlgoError, Algorithm, Graph, Payload, Shatter};

/// The whole model through one VN, averaged per parameter with what arrived — EL's exchange over another
/// graph: one static r-regular graph negotiated before round 0 (D-PSGD), or a directed push to r peers of
/// the VN's own Cyclon view ([`super::ElLocal`], `Graph::Push`).
pub struct WholeModel {
    inner: Shatter,
    graph: Graph,
}

/// D-PSGD over a one-chunk partition.
pub type Dpsgd = WholeModel;

impl WholeModel {
    /// D-PSGD: the static graph.
    pub fn new(partition: Arc<ChunkPartition>) -> Result<Self, AlgoError> {
        Self::over("dpsgd", "D-PSGD", Graph::Static, partition)
    }

    /// The whole model named `name` (`label` in errors) over `graph`.
    pub(super) fn over(
        name: &'static str,
        label: &str,
        graph: Graph,
        partition: Arc<ChunkPartition>,
    ) -> Result<Self, AlgoError> {
        if partition.k() != 1 {
            return Err(AlgoError::Other(format!(
                "{label} sends the whole model: a partition of k = 1, not {}",
                partition.k()
            )));
        }
        Ok(Self {
            inner: Shatter::named(name, partition),
            graph,
        })
    }
}

impl Algorithm for WholeModel {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn virtual_nodes(&self) -> usize {
        1
    }
    fn chunk_lens(&self) -> Vec<usize> {
        self.inner.chunk_lens()
    }
    fn graph(&self) -> Graph {
        self.graph
    }
    fn begin_round(&mut self, round: Round) {
        self.inner.begin_round(round)
    }
    fn outgoing(
        &mut self,
        round: Round,
        step: u32,
        params: &[f32],
    ) -> Result<Vec<(usize, Payload)>, AlgoError> {
        self.inner.outgoing(round, step, params)
    }
    fn receive(&mut self, step: u32, vn: usize, frame: &ChunkFrame) -> Result<(), AlgoError> {
        self.inner.receive(step, vn, frame)
    }
    fn combine(&mut self, round: Round, step: u32, local: &[f32]) -> Result<Vec<f32>, AlgoError> {
        self.inner.combine(round, step, local)
    }
}
