//! What an overlay message claims about parties other than its sender (they must be on the peer list), and what
//! it shows of its sender's own progress (a catch-up witness). Pure functions of the message.

use protocol::control::{MAX_FUTURE_ROUNDS, OverlayMsg};

/// The identities an overlay message claims about third parties (at most two), which must be on the peer
/// list. An array, not a `Vec`: it is asked of every overlay message.
pub(crate) fn overlay_claims<I>(m: &OverlayMsg<I>) -> [Option<&I>; 2] {
    match m {
        OverlayMsg::Propose { origin, .. } | OverlayMsg::SpliceRequest { origin, .. } => {
            [origin.as_ref(), None]
        }
        OverlayMsg::Accept { acceptor, .. } => [Some(acceptor), None],
        OverlayMsg::SpliceOffer {
            splitter, other, ..
        } => [Some(splitter), Some(other)],
        OverlayMsg::Handover { newcomer, .. } => [Some(newcomer), None],
        _ => [None, None],
    }
}

/// How far below a message's round its sender's own round negotiation is known to be, beyond the lookahead
/// (catch-up counts it as a witness of the network's progress), or `None` if the message says nothing about
/// the sender.
///
/// A node negotiates up to `lookahead` rounds ahead of its own, so a sender speaking for itself (its own
/// walk, its own answer, a reply) is at least that far. A walk another VN named as its origin speaks for that
/// origin, and counting its forwarders would let one node ahead of the others (or one liar) appear as many
/// witnesses. A walk or answer that hides its origin may come from a relay, which takes a message at most
/// `MAX_FUTURE_ROUNDS` ahead of its own newest round: that much lower is what it shows of itself.
pub(crate) fn progress_shown<I: PartialEq>(m: &OverlayMsg<I>, from: &I) -> Option<u64> {
    match m {
        OverlayMsg::Propose { origin, .. } | OverlayMsg::SpliceRequest { origin, .. } => {
            match origin {
                Some(o) if o == from => Some(0),
                Some(_) => None,
                None => Some(MAX_FUTURE_ROUNDS),
            }
        }
        OverlayMsg::Accept { acceptor: own, .. }
        | OverlayMsg::SpliceOffer { splitter: own, .. } => {
            Some(if own == from { 0 } else { MAX_FUTURE_ROUNDS })
        }
        OverlayMsg::Handover { .. } => None,
        _ => Some(0),
    }
}
