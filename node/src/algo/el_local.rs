//! Epidemic Learning's local variant (de Vos et al., NeurIPS 2023, "EL-Local"): every node pushes its whole
//! model to r peers drawn uniformly from its own Cyclon view — a directed graph, no overlay negotiation, so
//! in-degrees vary (binomial around r) — and averages per parameter what arrived plus its own model. The
//! exchange is the VN's push mode ([`Graph::Push`], `engine/vn/push.rs`): a receiver does not know who
//! will push to it, so its round ends at the exchange deadline with whatever arrived.

use std::sync::Arc;

use models::chunking::ChunkPartition;

use super::dpsgd::WholeModel;
use super::{AlgoError, Graph};

/// EL-Local over a one-chunk partition: the whole model over the push graph.
pub struct ElLocal;

impl ElLocal {
    #[allow(clippy::new_ret_no_self)] // EL-Local is D-PSGD's exchange over another graph
    pub fn new(partition: Arc<ChunkPartition>) -> Result<WholeModel, AlgoError> {
        WholeModel::over("el-local", "EL-Local", Graph::Push, partition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::{Algorithm, Payload};
    use protocol::Round;

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
