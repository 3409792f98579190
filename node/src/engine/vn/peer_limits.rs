//! [`PeerLimits`]: how much each authenticated peer may make a VN handle, per kind of message. Checked before
//! any decoding work is spent on the message; over its rate a message is dropped and counted.

use std::time::Duration;

use crate::engine::rate::{PerPeer, Rate};

/// Control messages one peer may send a VN per overlay sub-step, per round being negotiated (the VN negotiates
/// `lookahead + 1` at once). An honest peer sends a handful per sub-step and round: its own proposals, walks it
/// forwards through us, the replies of the matching protocol; 16 is several times that, so only a peer that
/// floods is limited. Over the limit, messages are dropped and counted.
pub const CONTROL_PER_SUBSTEP_PER_ROUND: f64 = 16.0;

/// Control messages one peer may send at once, per round being negotiated (a burst at a sub-step boundary).
pub const CONTROL_BURST_PER_ROUND: f64 = 64.0;

/// Cyclon shuffle requests one peer may send a VN at once. An honest peer sends one when we are the oldest
/// entry of its view — at most once per Cyclon period — so more is a peer pushing its entries into our view
/// (each accepted request replaces up to `shuffle_len` of our entries).
pub const SHUFFLE_BURST: f64 = 4.0;

/// Round queries one peer may send a VN at once; then one per Cyclon period. An honest VN asks a peer once
/// per probe, and probes at most once per exchange deadline.
pub const ROUND_QUERY_BURST: f64 = 4.0;

/// One token bucket per peer for each kind of message a VN rate-limits.
#[derive(Debug)]
pub(crate) struct PeerLimits<I> {
    control: PerPeer<I>,
    shuffle: PerPeer<I>,
    round_query: PerPeer<I>,
}

impl<I: Eq + std::hash::Hash + Clone> PeerLimits<I> {
    /// Limits for a VN negotiating `open_rounds` overlays at once with sub-steps of `substep`, whose Cyclon
    /// shuffles every `cyclon_period`.
    pub(crate) fn new(open_rounds: u64, substep: Duration, cyclon_period: Duration) -> Self {
        let open_rounds = open_rounds as f64;
        Self {
            control: PerPeer::new(Rate {
                burst: CONTROL_BURST_PER_ROUND * open_rounds,
                per_period: CONTROL_PER_SUBSTEP_PER_ROUND * open_rounds,
                period: substep,
            }),
            shuffle: PerPeer::new(Rate {
                burst: SHUFFLE_BURST,
                per_period: 1.0,
                period: cyclon_period,
            }),
            round_query: PerPeer::new(Rate {
                burst: ROUND_QUERY_BURST,
                per_period: 1.0,
                period: cyclon_period,
            }),
        }
    }

    /// Whether `from` may send one more control message now.
    pub(crate) fn control(&mut self, from: &I, now: Duration) -> bool {
        self.control.allow(from, now)
    }

    /// Whether `from` may send one more Cyclon shuffle request now (on top of its control message).
    pub(crate) fn shuffle(&mut self, from: &I, now: Duration) -> bool {
        self.shuffle.allow(from, now)
    }

    /// Whether `from` may ask one more round query now.
    pub(crate) fn round_query(&mut self, from: &I, now: Duration) -> bool {
        self.round_query.allow(from, now)
    }
}
