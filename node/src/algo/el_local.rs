//! Epidemic Learning's local variant (de Vos et al., NeurIPS 2023, "EL-Local"): every node pushes its whole
//! model to r peers drawn uniformly from its own Cyclon view — a directed graph, no overlay negotiation, so
//! in-degrees vary (binomial around r) — and averages per parameter what arrived plus its own model. The
//! exchange is the VN's push mode ([`Graph::Push`], `VnEngine::with_push`): a receiver does not know who
//! will push to it, so its round ends at the exchange deadline with whatever arrived.

use std::sync::Arc;

use models::chunking::ChunkPartition;
use protocol::{ChunkFrame, Round};

use super::{AlgoError, Algorithm, Graph, Payload, Shatter};

/// EL-Local over a one-chunk partition.
pub struct ElLocal(Shatter);

impl ElLocal {
    pub fn new(partition: Arc<ChunkPartition>) -> Result<Self, AlgoError> {
        if partition.k() != 1 {
            return Err(AlgoError::Other(format!(
                "EL-Local sends the whole model: a partition of k = 1, not {}",
                partition.k()
            )));
        }
        Ok(Self(Shatter::named("el-local", partition)))
    }
}

impl Algorithm for ElLocal {
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
        Graph::Push
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

#[cfg(test)]
mod tests {
    use super::*;
    use models::chunking::ChunkPartition;

    /// The whole model out through one VN, in push mode; what arrives (any number of copies: in-degrees
    /// vary) is averaged per parameter with the own model.
    #[test]
    fn pushes_the_whole_model_and_averages_what_arrived() {
        let d = 6;
        let partition = Arc::new(ChunkPartition::new(&[d], 1, 7).unwrap());
        assert!(ElLocal::new(Arc::new(ChunkPartition::new(&[d], 2, 7).unwrap())).is_err());
        let mut a = ElLocal::new(partition).unwrap();
        assert_eq!(
            (a.name(), a.virtual_nodes(), a.graph()),
            ("el-local", 1, Graph::Push)
        );
        assert_eq!(a.chunk_lens(), vec![d]);
        let round = Round(3);
        a.begin_round(round);
        let own = vec![1.0f32; d];
        let out = a.outgoing(round, 0, &own).unwrap();
        let [(0, Payload::Broadcast(frame))] = out.as_slice() else {
            panic!("{out:?}")
        };
        assert_eq!(
            (frame.round, frame.values.as_slice()),
            (round, own.as_slice())
        );
        // Three copies arrive this round (in-degree 3), then none the next.
        for v in [2.0f32, 4.0, 5.0] {
            let mut f = frame.clone();
            f.values = vec![v; d];
            a.receive(0, 0, &f).unwrap();
        }
        assert_eq!(a.combine(round, 0, &own).unwrap(), vec![3.0; d]);
        a.begin_round(Round(4));
        assert_eq!(
            a.combine(Round(4), 0, &own).unwrap(),
            own,
            "no copy: the own model"
        );
    }
}
