//! Noticing that this node fell behind the network (issue 15, catch-up).
//!
//! A VN accepts messages up to [`MAX_FUTURE_ROUNDS`] ahead of the newest exchange its RN started. A node that
//! was paused, restarted from a checkpoint, or is just slow finds the network further on: every proposal walk
//! and chunk it gets is for a round it refuses, and without help it stays isolated for the rest of the run.
//! [`AheadWitnesses`] keeps, per authenticated peer, the latest exchange that peer showed for itself, and says
//! "the network is at exchange X" when
//! - at least [`CATCH_UP_WITNESSES`] distinct peers each showed X or later, beyond what this VN accepts, and
//! - those ahead are a majority of the peers heard from around this VN's round.
//!
//! The first rule stops one hostile or confused peer from fast-forwarding a node; the second stops a minority
//! that is ahead — a node that has just caught up and landed a round or two ahead, or a coalition of liars
//! smaller than the honest peers a VN hears from — from pulling nodes that are in step with the rest after
//! it (measured in procs mode without it: a restarted pair's jump made the other six nodes skip 8 rounds
//! after them). A coalition that is most of what a VN hears can still fast-forward it, at the cost of rounds
//! (never of the model, and never past the run's last round, which the caller caps); since sibling VNs are
//! unlinkable by design, the witnesses may be the VNs of fewer real nodes. The map is bounded at
//! [`MAX_AHEAD_WITNESSES`] peers.

use std::collections::BTreeMap;
use std::time::Duration;

use protocol::Round;
pub use protocol::control::MAX_FUTURE_ROUNDS;

/// Distinct peers that must show a later exchange before a VN reports it. Three: a hostile peer plus a
/// confused one are not enough, while a node that is really behind hears from many (every walk that starts
/// at a peer, every reply and every neighbour's chunk).
pub const CATCH_UP_WITNESSES: usize = 3;

/// How far ahead of most of its peers a VN's exchange must be for the VN to hold it open
/// ([`AheadWitnesses::network_behind`], `VnEngine::finish`). A node that caught up and landed ahead, or whose
/// exchanges had no partners, ran on at training speed: its overlays for later rounds were then negotiated
/// rounds before the others negotiated them, found no partners again, and it ran further ahead for the rest
/// of the run (measured in procs mode: 14-33 rounds ahead, alone, its final accuracy 0.81-0.85 against
/// 0.87-0.90). Two: one round ahead is ordinary skew (the others are finishing the round it starts), and
/// two is where a round's overlay is negotiated a whole window apart once a round lasts half a window.
pub const HOLD_LEAD: u64 = 2;

/// Peers whose latest claim is kept. More senders than this (a view of c = 20 plus the overlay's partners)
/// are ignored until old claims are dropped; the bound only limits memory.
pub const MAX_AHEAD_WITNESSES: usize = 64;

/// The latest exchange each peer showed for itself, and when.
#[derive(Debug)]
pub struct AheadWitnesses<I> {
    claims: BTreeMap<I, (Round, Duration)>,
    /// A claim older than this no longer votes: a peer that went quiet (it left our view, crashed, or the
    /// network moved on without us) says nothing about where the network is now.
    window: Duration,
    /// The last exchange reported, so that each later one is reported once.
    reported: Option<Round>,
}

impl<I> AheadWitnesses<I> {
    /// Claims vote for `window` after they were made.
    pub fn new(window: Duration) -> Self {
        Self {
            claims: BTreeMap::new(),
            window,
            reported: None,
        }
    }
}

impl<I: Ord + Clone> AheadWitnesses<I> {
    /// `from` showed that it is at exchange `at` (at least) while this VN's newest exchange is `newest`.
    /// Returns the exchange to report to the RN when the network is found ahead (see the module docs) at an
    /// exchange later than anything reported before.
    pub fn note(&mut self, now: Duration, from: &I, at: Round, newest: Round) -> Option<Round> {
        let window = self.window;
        let fresh = |seen: Duration| now.saturating_sub(seen) <= window;
        if self.claims.len() >= MAX_AHEAD_WITNESSES {
            self.claims.retain(|_, (_, seen)| fresh(*seen));
        }
        let full = self.claims.len() >= MAX_AHEAD_WITNESSES;
        match self.claims.get_mut(from) {
            // A peer's round only grows; an older claim seen later still says it is alive.
            Some((r, seen)) => {
                *r = (*r).max(at);
                *seen = now;
            }
            None if !full => {
                self.claims.insert(from.clone(), (at, now));
            }
            None => return None,
        }
        let beyond = newest + MAX_FUTURE_ROUNDS;
        if at <= beyond {
            return None;
        }
        // Peers well behind this VN say nothing about whether it is behind: they do not vote.
        let around = newest - MAX_FUTURE_ROUNDS;
        let mut ahead: Vec<Round> = Vec::new();
        let mut voters = 0;
        for (r, _) in self
            .claims
            .values()
            .filter(|(r, seen)| *r >= around && fresh(*seen))
        {
            voters += 1;
            if *r > beyond {
                ahead.push(*r);
            }
        }
        if ahead.len() < CATCH_UP_WITNESSES || 2 * ahead.len() <= voters {
            return None;
        }
        // The W-th largest claim: W distinct peers each showed this exchange or a later one.
        ahead.sort_unstable_by(|a, b| b.cmp(a));
        let at = ahead[CATCH_UP_WITNESSES - 1];
        if self.reported.is_some_and(|r| r >= at) {
            return None;
        }
        self.reported = Some(at);
        Some(at)
    }

    /// Fresh claims beyond what a VN whose newest exchange is `newest` accepts: evidence that it may be
    /// behind even when the majority rule holds it back (the peers it hears are mostly as far behind).
    pub fn beyond(&self, now: Duration, newest: Round) -> usize {
        let beyond = newest + MAX_FUTURE_ROUNDS;
        self.claims
            .values()
            .filter(|(r, seen)| *r > beyond && now.saturating_sub(*seen) <= self.window)
            .count()
    }

    /// The network was found at `at` another way (an active probe): later reports must go beyond it.
    pub fn adopt(&mut self, at: Round) {
        self.reported = Some(self.reported.map_or(at, |r| r.max(at)));
    }

    /// The latest exchange reported (the network is there or further), if any.
    pub fn reported(&self) -> Option<Round> {
        self.reported
    }

    /// Claims no longer fresh are dropped. Claims of peers well behind this VN are kept while fresh: they
    /// do not vote on whether it is behind (`note` counts only peers around its round), but they are what
    /// says that it runs ahead ([`AheadWitnesses::network_behind`]).
    pub fn expire(&mut self, now: Duration) {
        let window = self.window;
        self.claims
            .retain(|_, (_, seen)| now.saturating_sub(*seen) <= window);
    }

    /// Whether the network is behind `exchange`: at least [`CATCH_UP_WITNESSES`] peers showed an exchange
    /// within `fresh` of `now`, and most of them are [`HOLD_LEAD`] or more exchanges behind it. Claims are
    /// lower bounds (an overlay message says its sender is at least its round minus the lookahead), and they
    /// run several rounds low in step too (each is the newest round a peer happened to mention, and paced
    /// negotiations open fewer rounds ahead): the engine asks only for exchanges short of partners, and
    /// subtracts its own negotiation lag from `exchange` (`VnEngine::finish`).
    pub fn network_behind(&self, now: Duration, exchange: Round, fresh: Duration) -> bool {
        let (mut voters, mut behind) = (0usize, 0usize);
        for (r, seen) in self.claims.values() {
            if now.saturating_sub(*seen) > fresh {
                continue;
            }
            voters += 1;
            if *r + HOLD_LEAD <= exchange {
                behind += 1;
            }
        }
        voters >= CATCH_UP_WITNESSES && 2 * behind > voters
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

    const T: Duration = Duration::from_secs(100);

    #[test]
    fn one_peer_cannot_fast_forward_a_node_but_three_agreeing_ones_can() {
        let mut w = AheadWitnesses::new(Duration::from_secs(10));
        let newest = Round(5);
        // Within what the VN accepts: no evidence (the peer votes "in step").
        assert_eq!(w.note(T, &9u32, Round(7), newest), None);
        assert_eq!(w.len(), 1);
        // One peer claiming far ahead, repeatedly: never enough.
        for r in 8..100 {
            assert_eq!(w.note(T, &1u32, Round(r), newest), None);
        }
        assert_eq!(w.note(T, &2u32, Round(20), newest), None);
        // The third witness (3 of 4 voters): the network is where three peers agree it is at least (20), not
        // where the loudest one says (99).
        assert_eq!(w.note(T, &3u32, Round(30), newest), Some(Round(20)));
        // Reported once.
        assert_eq!(w.note(T, &3u32, Round(31), newest), None);
        // Later agreement is reported again.
        assert_eq!(w.note(T, &2u32, Round(25), newest), Some(Round(25)));
        // Claims are dropped once stale.
        w.expire(T);
        assert_eq!(w.len(), 4);
        w.expire(T + Duration::from_secs(11));
        assert!(w.is_empty());
    }

    /// Issue 15, a node running ahead: most peers heard lately two or more exchanges behind says the
    /// network is behind; one or two such peers, peers only one behind, or stale claims do not.
    #[test]
    fn the_network_is_behind_only_when_most_fresh_peers_are_two_behind() {
        let fresh = Duration::from_secs(1);
        let mut w = AheadWitnesses::new(Duration::from_secs(10));
        for p in 0..2u32 {
            w.note(T, &p, Round(8), Round(10));
        }
        assert!(
            !w.network_behind(T, Round(10), fresh),
            "two peers are not enough"
        );
        w.note(T, &2, Round(8), Round(10));
        assert!(
            w.network_behind(T, Round(10), fresh),
            "three of three, two behind"
        );
        assert!(
            !w.network_behind(T, Round(9), fresh),
            "one behind is in step"
        );
        // Two peers in step: three of five behind is still most.
        w.note(T, &3, Round(10), Round(10));
        w.note(T, &4, Round(9), Round(10));
        assert!(w.network_behind(T, Round(10), fresh));
        // Claims older than `fresh` do not count: only the two in step spoke lately.
        let later = T + Duration::from_millis(1500);
        for p in 3..5u32 {
            w.note(later, &p, Round(10), Round(10));
        }
        assert!(
            !w.network_behind(later, Round(10), fresh),
            "two fresh voters"
        );
        w.note(later, &5, Round(10), Round(10));
        assert!(
            !w.network_behind(later, Round(11), fresh),
            "fresh peers one behind"
        );
        assert!(w.network_behind(later, Round(12), fresh));
        w.note(T, &6, Round(10), Round(10));
        assert!(
            !w.network_behind(T, Round(10), fresh),
            "three of seven is not most"
        );
    }

    #[test]
    fn a_minority_ahead_does_not_pull_a_node_that_is_in_step_with_the_rest() {
        let mut w = AheadWitnesses::new(Duration::from_secs(10));
        let newest = Round(8);
        for p in 0..6u32 {
            w.note(T, &p, Round(9), newest);
        }
        // Four peers (say the VNs of two nodes that just caught up and landed ahead) at 11: a minority of
        // the ten heard from.
        for p in 10..14u32 {
            assert_eq!(w.note(T, &p, Round(11), newest), None);
        }
        // Peers well behind do not vote either way.
        let mut lone = AheadWitnesses::new(Duration::from_secs(10));
        for p in 0..6u32 {
            lone.note(T, &p, Round(1), newest);
        }
        for p in 10..12u32 {
            assert_eq!(lone.note(T, &p, Round(20), newest), None);
        }
        assert_eq!(lone.note(T, &12, Round(20), newest), Some(Round(20)));
    }

    #[test]
    fn peers_gone_quiet_no_longer_vote() {
        let mut w = AheadWitnesses::new(Duration::from_secs(10));
        // Six peers in step at first, then silent (the network moved on; they are out of our view).
        for p in 0..6u32 {
            w.note(T, &p, Round(3), Round(3));
        }
        let later = T + Duration::from_secs(60);
        assert_eq!(w.note(later, &10, Round(20), Round(3)), None);
        assert_eq!(w.note(later, &11, Round(20), Round(3)), None);
        assert_eq!(
            w.note(later, &12, Round(20), Round(3)),
            Some(Round(20)),
            "three of three fresh voters"
        );
    }

    #[test]
    fn the_witness_map_is_bounded() {
        let mut w = AheadWitnesses::new(Duration::from_secs(10));
        for p in 0..(MAX_AHEAD_WITNESSES as u32 + 50) {
            w.note(T, &p, Round(100), Round(0));
        }
        assert_eq!(w.len(), MAX_AHEAD_WITNESSES);
    }
}
