//! Messages between a real node (RN) and one of its virtual nodes (VN) when the VN runs outside the RN's
//! process (`node vn` hosts them; `link.rs` is their encoding there) or, in-process, over channels as the same values.
//!
//! The RN hands VN s its chunk for round t and later collects everything the VN received. Bulk values travel
//! as [`ChunkFrame`]s on the RN↔VN connection, which is private to the operator: nothing here ever reaches
//! another node, so it may name the RN freely.

use serde::{Deserialize, Serialize};

use crate::{ChunkFrame, RefuseReason, Round};

/// Most edge slots one VN reports for one exchange, and so most frames in one [`ToVirtualNode::PerEdgeFrames`]
/// or flags in one [`FromVirtualNode::DeliveredOnEdges`]. A slot is a confirmed neighbour, and overlays have
/// a handful (r ≤ 16 in every configuration of this project): 256 bounds what a per-edge exchange may ask an
/// RN to compute, and is far above any honest degree.
pub const MAX_EDGE_SLOTS: usize = 256;

/// RN → VN.
#[derive(Debug, Clone, PartialEq)]
pub enum ToVirtualNode {
    /// The RN started exchange `round` (it is training it now): negotiate the overlays of
    /// `round ..= round + lookahead` not negotiated yet. The send pace counts from this message.
    StartRound(Round),
    /// The RN will start exchange `round` (its first) when its warm-up ends: negotiate the overlays of
    /// `round ..= round + lookahead` now, as `StartRound` would, so that the first round does not wait a
    /// whole overlay window for its own. The round itself has not begun (its send pace counts from
    /// `StartRound`).
    Prepare(Round),
    /// Start exchanging `chunk` for its round: send it to every confirmed neighbour of that round.
    Exchange(ChunkFrame),
    /// Exchange `round` sends one frame per neighbour (per-edge payloads, e.g. PDMM's Δz): report the edge
    /// slots with [`FromVirtualNode::Edges`] once the round's neighbours are known; the frames follow as
    /// [`ToVirtualNode::PerEdgeFrames`].
    PerEdge(Round),
    /// The frames of per-edge exchange `round`, `frames[i]` for edge slot i (as many as the VN reported).
    PerEdgeFrames {
        round: Round,
        frames: Vec<ChunkFrame>,
    },
    /// Leave the network.
    Stop,
}

/// VN → RN.
#[derive(Debug, Clone, PartialEq)]
pub enum FromVirtualNode {
    /// One copy received from a neighbour in `round` (the frame carries round and chunk index).
    Received(ChunkFrame),
    /// One copy received from the neighbour in edge slot `slot` (VNs that report slots: those of an
    /// algorithm with per-edge state). A slot is a position in the VN's sorted neighbour list — of the round,
    /// or with a static graph of the graph negotiated once, so stable for the run — never an identity.
    ReceivedOnEdge { slot: u32, frame: ChunkFrame },
    /// Per-edge exchange `round` has `slots` edge slots (≤ [`MAX_EDGE_SLOTS`]); the answer to
    /// [`ToVirtualNode::PerEdge`].
    Edges { round: Round, slots: u32 },
    /// Per-edge exchange `round` is over: `accepted[i]` says whether the neighbour in slot i accepted our
    /// frame (false for a slot whose edge was dropped, whose frame was refused or whose answer did not come
    /// back before the round ended). Sent just before that round's `Done`.
    DeliveredOnEdges { round: Round, accepted: Vec<bool> },
    /// The neighbour in edge slot `slot` accepted our frame of per-edge exchange `round` after that exchange
    /// had ended (its answer outlasted the deadline, so `DeliveredOnEdges` said false for the slot). The RN
    /// can still count the frame as delivered: PDMM adds the increment to its mirror of that neighbour's dual.
    LateDeliveredOnEdge { round: Round, slot: u32 },
    /// The exchange of `round` is over at this VN: all copies it will hand over for the round have been sent.
    Done(RoundSummary),
    /// Several distinct peers showed this VN messages of exchange `exchange` or later, beyond what it
    /// accepts from its own round (the node fell behind: paused, restarted, slow). The RN may adopt the
    /// network's round instead of staying isolated (issue 15, catch-up).
    Behind { exchange: Round },
}

/// What a VN reports at the end of a round's exchange. Counts only: nothing identifies the neighbours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RoundSummary {
    pub round: Round,
    /// Confirmed neighbours in the round's overlay. An edge its other end dropped or refused after the
    /// freeze is not counted (unless its copy came): no copy was going to cross it either way.
    pub neighbours: u32,
    /// Copies received and accepted.
    pub received: u32,
    /// Copies sent that the neighbour accepted.
    pub delivered: u32,
    /// Messages refused (malformed, not allowed, wrong round, bad chunk, non-finite, out of range, duplicate,
    /// not a neighbour, over the sender's rate): the sum of `refused_by_reason`.
    pub refused: u32,
    /// `refused`, by reason.
    pub refused_by_reason: RefusalCounts,
    /// Bytes of chunk frames sent (payload + length prefix), the part the cost model 4·d·r describes.
    pub chunk_bytes_sent: u64,
    /// Payload bytes sent and received on the wire for the round (chunks and control).
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub messages_sent: u64,
    pub messages_received: u64,
    /// How long the round's exchange waited at this VN for the round's overlay to freeze, in microseconds:
    /// from the RN's request to exchange (its chunk, or its request for the edge slots) to the freeze, 0
    /// when the overlay was frozen first (the aim of negotiating overlays ahead). The rest of the exchange
    /// is the chunks' transfer and the neighbours' own pace.
    pub overlay_wait_us: u64,
}

/// Refusals counted by reason: one named counter per reason (a fixed set, so the count stays a few bytes per
/// round and adding them up is a handful of additions). Which reason dominates tells an operator what is
/// wrong: `malformed` or `not_allowed` a broken or foreign peer, `wrong_round`/`not_neighbour` timing or
/// overlay trouble, `non_finite`/`out_of_range` a faulty or hostile neighbour poisoning values (issue 14).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RefusalCounts {
    /// Bytes that did not decode or broke a protocol limit (control messages, chunk frames, replies).
    pub malformed: u32,
    /// A sender, or an identity a message vouches for, not on the peer list.
    pub not_allowed: u32,
    /// [`RefuseReason::NotNeighbour`].
    pub not_neighbour: u32,
    /// [`RefuseReason::WrongRound`].
    pub wrong_round: u32,
    /// [`RefuseReason::BadChunk`] (unknown index or wrong length; undecodable frames count as `malformed`).
    pub bad_chunk: u32,
    /// [`RefuseReason::NonFinite`].
    pub non_finite: u32,
    /// [`RefuseReason::OutOfRange`].
    pub out_of_range: u32,
    /// [`RefuseReason::Duplicate`].
    pub duplicate: u32,
    /// A control message over its sender's rate limit (dropped unread).
    pub rate_limited: u32,
}

impl RefusalCounts {
    /// Counts one chunk refused for `reason`.
    pub fn add_chunk(&mut self, reason: RefuseReason) {
        let c = match reason {
            RefuseReason::NotNeighbour => &mut self.not_neighbour,
            RefuseReason::WrongRound => &mut self.wrong_round,
            RefuseReason::BadChunk => &mut self.bad_chunk,
            RefuseReason::NonFinite => &mut self.non_finite,
            RefuseReason::OutOfRange => &mut self.out_of_range,
            RefuseReason::Duplicate => &mut self.duplicate,
        };
        *c = c.saturating_add(1);
    }

    /// Adds `other`'s counts to these (saturating: a count never wraps to a small number).
    pub fn add(&mut self, other: &Self) {
        let Self {
            malformed,
            not_allowed,
            not_neighbour,
            wrong_round,
            bad_chunk,
            non_finite,
            out_of_range,
            duplicate,
            rate_limited,
        } = *other;
        self.malformed = self.malformed.saturating_add(malformed);
        self.not_allowed = self.not_allowed.saturating_add(not_allowed);
        self.not_neighbour = self.not_neighbour.saturating_add(not_neighbour);
        self.wrong_round = self.wrong_round.saturating_add(wrong_round);
        self.bad_chunk = self.bad_chunk.saturating_add(bad_chunk);
        self.non_finite = self.non_finite.saturating_add(non_finite);
        self.out_of_range = self.out_of_range.saturating_add(out_of_range);
        self.duplicate = self.duplicate.saturating_add(duplicate);
        self.rate_limited = self.rate_limited.saturating_add(rate_limited);
    }

    /// All reasons together.
    pub fn total(&self) -> u64 {
        let Self {
            malformed,
            not_allowed,
            not_neighbour,
            wrong_round,
            bad_chunk,
            non_finite,
            out_of_range,
            duplicate,
            rate_limited,
        } = *self;
        [
            malformed,
            not_allowed,
            not_neighbour,
            wrong_round,
            bad_chunk,
            non_finite,
            out_of_range,
            duplicate,
            rate_limited,
        ]
        .iter()
        .map(|&c| c as u64)
        .sum()
    }

    /// Nothing refused (metrics leave the field out then, so an honest run's output does not change).
    pub fn is_zero(&self) -> bool {
        *self == Self::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_add_up_by_reason() {
        let mut a = RefusalCounts::default();
        assert!(a.is_zero());
        a.add_chunk(RefuseReason::OutOfRange);
        a.add_chunk(RefuseReason::OutOfRange);
        a.add_chunk(RefuseReason::NonFinite);
        a.malformed += 1;
        let mut b = RefusalCounts {
            duplicate: u32::MAX,
            ..RefusalCounts::default()
        };
        b.add(&a);
        assert_eq!((b.out_of_range, b.non_finite, b.malformed), (2, 1, 1));
        assert_eq!(a.total(), 4);
        b.add(&RefusalCounts {
            duplicate: 1,
            ..RefusalCounts::default()
        });
        assert_eq!(b.duplicate, u32::MAX, "saturates");
    }
}
