//! Hooks for research harnesses: the model each round starts from, and every chunk copy a node's virtual
//! nodes accept together with the neighbour VN that sent it. `testnet --audit` builds its privacy audit on
//! these.
//!
//! Nothing here is part of the protocol or reaches the round engine. The sender given to
//! [`Observer::chunk_received`] is what the receiving VN sees anyway (the connection's peer: a VN identity);
//! which real node owns that VN is exactly what Shatter hides, and only a harness that made every node's
//! keys (or, in the simulator, numbered the VNs) can map one to the other. The node never learns it.

use protocol::{ChunkFrame, Round};

/// Watches a node from outside. All methods default to doing nothing; `node` is the real node's index as the
/// driver numbers it (`NodeBuilder::new`'s `index`, or the simulator's node number).
///
/// Calls come from the node's tasks (several threads in the libp2p runtime, the caller's thread in the
/// simulator); they should return quickly or hand the work off.
pub trait Observer<I>: Send + Sync {
    /// Whether [`Observer::round_start`] wants the parameters for `round`: copying d floats per round costs,
    /// so say no for rounds that are not observed.
    fn wants_params(&self, _node: usize, _round: Round) -> bool {
        false
    }

    /// Local training of `round` is about to start from `params`: the node's model as the previous round
    /// left it (the aggregate of `round - 1`, or the shared initial model in round 0).
    fn round_start(&self, _node: usize, _round: Round, _params: &[f32]) {}

    /// Virtual node `vn` of the node accepted `frame` (a chunk of `frame.round`) from neighbour VN `from`.
    fn chunk_received(&self, _node: usize, _vn: usize, _from: &I, _frame: &ChunkFrame) {}
}

/// Calls `round_start` if the observer wants this round, fetching the parameters only then.
pub(crate) fn notify_round_start<I, E>(
    observer: Option<&dyn Observer<I>>,
    node: usize,
    round: Round,
    params: impl FnOnce() -> Result<Vec<f32>, E>,
) -> Result<(), E> {
    if let Some(o) = observer
        && o.wants_params(node, round)
    {
        o.round_start(node, round, &params()?);
    }
    Ok(())
}
