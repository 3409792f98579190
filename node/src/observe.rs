//! Hooks for research harnesses: the model each round starts from, and every chunk copy a node's virtual
//! nodes accept together with the neighbour VN that sent it. `testnet --audit` builds its privacy audit on
//! these.
//!
//! Nothing here is part of the protocol or reaches the round engine. The sender given to
//! [`Observer::chunk_received`] is what the receiving VN sees anyway (the connection's peer: a VN identity);
//! which real node owns that VN is exactly what Shatter hides, and only a harness that made every node's
//! keys (or, in the simulator, numbered the VNs) can map one to the other. The node never learns it.

use std::time::Duration;

use protocol::{ChunkFrame, Round};

/// What arrived at a VN, as a network observer on its link sees it: the kind of message and when, not the
/// content. The timing-linkage attack of `testnet --audit` is built on it (issue 13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// An overlay walk (a proposal or a splice request) for `round`; `first_hop`: the sender is the walk's
    /// origin (a walk that names its origin shows its first hop; one that hides it never counts as one).
    Walk { round: Round, first_hop: bool },
    /// Any other control message: the matching protocol's replies, Cyclon shuffles.
    Control,
    /// A chunk frame for `round` (an exchange number).
    Chunk { round: Round },
}

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

    /// Whether [`Observer::arrival`] is wanted (classifying every message costs a decode).
    fn wants_arrivals(&self) -> bool {
        false
    }

    /// A message from `from` arrived at VN `vn` of the node at `at` (the driver's clock), accepted or not.
    /// The simulator and the libp2p shell both report arrivals.
    fn arrival(&self, _node: usize, _vn: usize, _from: &I, _at: Duration, _what: Arrival) {}

    /// `from` opened a connection to VN `vn` of the node: `local` is the address it reached (the VN's listen
    /// address), `remote` the address it connects from (the source IP and port the VN's host sees). Only the
    /// libp2p shell reports connections, and only when [`Observer::wants_arrivals`] says yes.
    fn inbound_connection(
        &self,
        _node: usize,
        _vn: usize,
        _from: &I,
        _at: Duration,
        _local: &str,
        _remote: &str,
    ) {
    }
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

/// How an observer on the link classifies control bytes (a walk that names its origin shows its first hop:
/// the sender is the origin).
pub fn classify_control<I: serde::de::DeserializeOwned + PartialEq>(bytes: &[u8]) -> Arrival {
    use protocol::control::{ControlEnvelope, ControlMsg, OverlayMsg};
    match protocol::codec::decode_control::<ControlEnvelope<I>>(bytes) {
        Ok(ControlEnvelope {
            sender,
            msg:
                ControlMsg::Overlay(
                    OverlayMsg::Propose { round, origin, .. }
                    | OverlayMsg::SpliceRequest { round, origin, .. },
                ),
        }) => Arrival::Walk {
            round,
            first_hop: origin.is_some_and(|o| o == sender),
        },
        _ => Arrival::Control,
    }
}

/// How an observer on the link classifies a chunk frame: its round, from the header.
pub fn classify_chunk(bytes: &[u8]) -> Arrival {
    match ChunkFrame::decode(bytes) {
        Ok(f) => Arrival::Chunk { round: f.round },
        Err(_) => Arrival::Control,
    }
}

/// Two observers watching one node: every call goes to both, in order.
pub struct Tee<A, B>(pub A, pub B);

impl<I, A: Observer<I>, B: Observer<I>> Observer<I> for Tee<A, B> {
    fn wants_params(&self, node: usize, round: Round) -> bool {
        self.0.wants_params(node, round) || self.1.wants_params(node, round)
    }

    fn round_start(&self, node: usize, round: Round, params: &[f32]) {
        if self.0.wants_params(node, round) {
            self.0.round_start(node, round, params);
        }
        if self.1.wants_params(node, round) {
            self.1.round_start(node, round, params);
        }
    }

    fn chunk_received(&self, node: usize, vn: usize, from: &I, frame: &ChunkFrame) {
        self.0.chunk_received(node, vn, from, frame);
        self.1.chunk_received(node, vn, from, frame);
    }

    fn wants_arrivals(&self) -> bool {
        self.0.wants_arrivals() || self.1.wants_arrivals()
    }

    fn arrival(&self, node: usize, vn: usize, from: &I, at: Duration, what: Arrival) {
        if self.0.wants_arrivals() {
            self.0.arrival(node, vn, from, at, what);
        }
        if self.1.wants_arrivals() {
            self.1.arrival(node, vn, from, at, what);
        }
    }
}

/// An observer shared by reference or `Arc` is an observer (every call goes to the shared one).
macro_rules! shared_observer {
    ($($ty:ty),*) => {$(
        impl<I, T: Observer<I> + ?Sized> Observer<I> for $ty {
            fn wants_params(&self, node: usize, round: Round) -> bool {
                (**self).wants_params(node, round)
            }
            fn round_start(&self, node: usize, round: Round, params: &[f32]) {
                (**self).round_start(node, round, params)
            }
            fn chunk_received(&self, node: usize, vn: usize, from: &I, frame: &ChunkFrame) {
                (**self).chunk_received(node, vn, from, frame)
            }
            fn wants_arrivals(&self) -> bool {
                (**self).wants_arrivals()
            }
            fn arrival(&self, node: usize, vn: usize, from: &I, at: Duration, what: Arrival) {
                (**self).arrival(node, vn, from, at, what)
            }
        }
    )*};
}

shared_observer!(&T, std::sync::Arc<T>);
