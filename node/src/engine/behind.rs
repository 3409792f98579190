//! Noticing that this node fell behind the network (issue 15, catch-up).
//!
//! A VN accepts messages up to [`MAX_FUTURE_ROUNDS`] ahead of the newest exchange its RN started. A node that
//! was paused, restarted from a checkpoint, or is just slow finds the network further on: every proposal walk
//! and chunk it gets is for a round it refuses, and without help it stays isolated for the rest of the run.
//! [`AheadWitnesses`] collects that evidence per authenticated sender and says "the network is at exchange
//! X" once [`CATCH_UP_WITNESSES`] distinct peers each showed X or later. One hostile (or confused) peer can
//! therefore not fast-forward a node; a coalition of that many listed peers could, but only within the run
//! (the caller caps the claim at the last exchange) and at the cost of rounds, never of the model. The map is
//! bounded at [`MAX_AHEAD_WITNESSES`] peers.

use std::collections::BTreeMap;

use protocol::Round;
pub use protocol::control::MAX_FUTURE_ROUNDS;

/// Distinct peers that must show a later exchange before a VN reports it. Three: a hostile peer plus a
/// confused one are not enough, while a node that is really behind hears from many (every walk that passes
/// through it and every neighbour's chunk, from the whole view).
pub const CATCH_UP_WITNESSES: usize = 3;

/// Peers whose claims are kept. More senders than this (a view of c = 20 plus the overlay's walks) are
/// ignored until the RN moves on; the bound only limits memory.
pub const MAX_AHEAD_WITNESSES: usize = 64;

/// The latest exchange each peer showed beyond what this VN accepts.
#[derive(Debug)]
pub struct AheadWitnesses<I> {
    claims: BTreeMap<I, Round>,
    /// The last exchange reported, so that each later one is reported once.
    reported: Option<Round>,
}

impl<I> Default for AheadWitnesses<I> {
    fn default() -> Self {
        Self {
            claims: BTreeMap::new(),
            reported: None,
        }
    }
}

impl<I: Ord + Clone> AheadWitnesses<I> {
    /// `from` showed that it is at exchange `at` (at least) while this VN's newest exchange is `newest`.
    /// Returns the exchange to report to the RN when this claim makes [`CATCH_UP_WITNESSES`] peers agree the
    /// network is at it or later, and it is later than anything reported before.
    pub fn note(&mut self, from: &I, at: Round, newest: Round) -> Option<Round> {
        let beyond = newest + MAX_FUTURE_ROUNDS;
        if at <= beyond {
            return None;
        }
        let full = self.claims.len() >= MAX_AHEAD_WITNESSES;
        match self.claims.get_mut(from) {
            Some(r) => *r = (*r).max(at),
            None if !full => {
                self.claims.insert(from.clone(), at);
            }
            None => return None,
        }
        let mut agreed: Vec<Round> = self
            .claims
            .values()
            .copied()
            .filter(|r| *r > beyond)
            .collect();
        if agreed.len() < CATCH_UP_WITNESSES {
            return None;
        }
        // The W-th largest claim: W distinct peers each showed this exchange or a later one.
        agreed.sort_unstable_by(|a, b| b.cmp(a));
        let at = agreed[CATCH_UP_WITNESSES - 1];
        if self.reported.is_some_and(|r| r >= at) {
            return None;
        }
        self.reported = Some(at);
        Some(at)
    }

    /// The latest exchange reported (the network is there or further), if any.
    pub fn reported(&self) -> Option<Round> {
        self.reported
    }

    /// The RN moved on to `newest`: claims it now accepts are no evidence any more.
    pub fn moved_to(&mut self, newest: Round) {
        let beyond = newest + MAX_FUTURE_ROUNDS;
        self.claims.retain(|_, r| *r > beyond);
    }

    pub fn len(&self) -> usize {
        self.claims.len()
    }

    pub fn is_empty(&self) -> bool {
        self.claims.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_peer_cannot_fast_forward_a_node_but_three_agreeing_ones_can() {
        let mut w = AheadWitnesses::default();
        let newest = Round(5);
        // Within what the VN accepts: no evidence.
        assert_eq!(w.note(&1u32, Round(7), newest), None);
        assert!(w.is_empty());
        // One peer claiming far ahead, repeatedly: never enough.
        for r in 8..100 {
            assert_eq!(w.note(&1u32, Round(r), newest), None);
        }
        assert_eq!(w.note(&2u32, Round(20), newest), None);
        // The third witness: the network is where three peers agree it is at least (20), not where the
        // loudest one says (99).
        assert_eq!(w.note(&3u32, Round(30), newest), Some(Round(20)));
        // Reported once.
        assert_eq!(w.note(&3u32, Round(31), newest), None);
        // Later agreement is reported again.
        assert_eq!(w.note(&2u32, Round(25), newest), Some(Round(25)));
        // Once the RN moved on, the claims it now accepts no longer count; the loud peer's 99 still does.
        w.moved_to(Round(40));
        assert_eq!(w.len(), 1);
        w.moved_to(Round(97));
        assert!(w.is_empty());
    }

    #[test]
    fn the_witness_map_is_bounded() {
        let mut w = AheadWitnesses::default();
        for p in 0..(MAX_AHEAD_WITNESSES as u32 + 50) {
            w.note(&p, Round(100), Round(0));
        }
        assert_eq!(w.len(), MAX_AHEAD_WITNESSES);
    }
}
