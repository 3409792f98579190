//! [`VnConfig`]: one VN's timing, sizes and mode, built in one place ([`VnConfig::new`]) from the protocol's
//! timing ([`VnTiming`]) and what the run fixes ([`VnRun`]), by the simulator and the libp2p side alike.
//! The exchange mode is the algorithm's [`Graph`]: per-round overlay, static graph, or directed push.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use protocol::Round;
use sampling::SamplerConfig;

use super::send_schedule::SendPace;
use crate::algo::Graph;
use crate::engine::values::ValueBounds;

/// The protocol's timing as a VN runs it, in one unit: what a node's [`crate::Timing`] (milliseconds, a
/// config file; [`crate::Timing::vn_timing`]) and the simulator's [`crate::sim::SimConfig`] both give.
#[derive(Debug, Clone)]
pub struct VnTiming {
    /// Cyclon and overlay parameters (the overlay's `network_size`, if unset, is the run's).
    pub sampler: SamplerConfig,
    /// How long after sending its chunk a VN waits for its neighbours' chunks before reporting the round done.
    pub exchange_timeout: Duration,
    /// Upper bound of the random delay before a VN sends its chunk (unlinkability of siblings by timing).
    pub send_jitter: Duration,
    /// The earliest a VN sends its chunk, counted from its RN's start of the round.
    pub send_pace: SendPace,
    /// Rounds negotiated ahead of the RN's round (0: each overlay starts with its own round;
    /// ≤ `MAX_LOOKAHEAD`). With the overlay window W and rounds of length T, rounds stop waiting for the
    /// overlay once `lookahead` ≥ W / T.
    pub lookahead: u64,
}

/// What a run fixes for each of its VNs.
#[derive(Debug, Clone, Default)]
pub struct VnRun {
    /// VNs in the network where known (a node's peer list; walks in a smaller network than their hop budget
    /// are shorter, `OverlayConfig::walk_ttl`).
    pub network_size: Option<usize>,
    /// Exchanges in the run (rounds × the algorithm's steps); 0: not known.
    pub exchanges: u64,
    /// Length of each chunk index of the static partition (`len()` = k).
    pub chunk_lens: Arc<Vec<usize>>,
    /// The graph the algorithm exchanges over: a fresh overlay per exchange, one for the run, or directed
    /// push (no overlay).
    pub graph: Graph,
    /// Hand every accepted copy to the RN with its edge slot (`FromVirtualNode::ReceivedOnEdge`): for
    /// algorithms with per-edge state ([`crate::algo::Algorithm::per_edge`]).
    pub edge_slots: bool,
    /// Exchanges this VN's RN sits out (dropout).
    pub skip: Arc<BTreeSet<Round>>,
    /// The bound on received values.
    pub values: ValueBounds,
}

/// Timing, sizes and mode of one VN.
#[derive(Debug, Clone)]
pub struct VnConfig {
    /// Cyclon and overlay parameters.
    pub sampler: SamplerConfig,
    /// How long after sending its chunk a VN waits for its neighbours' chunks before reporting the round done.
    pub exchange_timeout: Duration,
    /// Upper bound of the random delay before a VN sends its chunk (unlinkability of siblings by timing).
    pub send_jitter: Duration,
    /// The earliest a VN sends its chunk, counted from its RN's start of the round (then the jitter).
    pub send_pace: SendPace,
    /// Rounds negotiated ahead of the RN's round (see [`VnTiming::lookahead`]).
    pub lookahead: u64,
    /// The run's last exchange, if known: no overlay beyond it is negotiated (its messages would be wasted).
    pub last_round: Option<Round>,
    /// The graph this VN exchanges over ([`Graph`]): with [`Graph::Static`] the lookahead is unused and an
    /// edge refused later is dropped for the rest of the run; with [`Graph::Push`] nothing is negotiated.
    pub graph: Graph,
    /// Hand copies to the RN with their edge slot (see [`VnRun::edge_slots`]).
    pub edge_slots: bool,
    /// Exchanges this VN stays out of (its RN sits those rounds out: dropout): no overlay is negotiated for
    /// them, so no neighbour waits for a chunk that will not come.
    pub skip: Arc<BTreeSet<Round>>,
    /// Upper bound of the random delay before this VN starts negotiating a round (its own phase; must stay
    /// well inside the overlay's `grace`, which absorbs start skew).
    pub start_jitter: Duration,
    /// Length of each chunk index of the static partition (`chunk_lens.len()` = k). Chunks of another length
    /// for their index are refused.
    pub chunk_lens: Arc<Vec<usize>>,
    /// The bound on received values.
    pub values: ValueBounds,
}

impl VnConfig {
    /// The one way a VN's configuration is made: the run's `timing`, and what the `run` fixes.
    pub fn new(timing: &VnTiming, run: VnRun) -> Self {
        let mut sampler = timing.sampler.clone();
        sampler.overlay.network_size = sampler.overlay.network_size.or(run.network_size);
        Self {
            // Each VN's own phase within one sub-step: far inside the overlay's grace of four.
            start_jitter: sampler.overlay.substep,
            sampler,
            exchange_timeout: timing.exchange_timeout,
            send_jitter: timing.send_jitter,
            send_pace: timing.send_pace,
            lookahead: timing.lookahead,
            last_round: run.exchanges.checked_sub(1).map(Round),
            graph: run.graph,
            edge_slots: run.edge_slots,
            skip: run.skip,
            chunk_lens: run.chunk_lens,
            values: run.values,
        }
    }

    pub(crate) fn static_graph(&self) -> bool {
        self.graph == Graph::Static
    }

    pub(crate) fn push(&self) -> bool {
        self.graph == Graph::Push
    }
}
