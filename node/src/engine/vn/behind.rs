//! What peers showed of their progress (issue 15, catch-up), kept as evidence.
//!
//! A VN accepts messages up to [`MAX_FUTURE_ROUNDS`] ahead of the newest exchange its RN started. A node that
//! was paused, restarted from a checkpoint, or is just slow finds the network further on: every proposal walk
//! and chunk it gets is for a round it refuses, and without help it stays isolated for the rest of the run.
//! [`AheadWitnesses`] keeps, per authenticated peer, the latest exchange that peer showed for itself. It
//! decides nothing on its own (issue 44: k identities of one node are k "distinct peers"): [`CATCH_UP_WITNESSES`]
//! fresh peers beyond the VN's window make the VN probe, once its own exchanges show it cut off
//! (`catch_up.rs`). It also says when the VN runs ahead of most peers it hears
//! ([`AheadWitnesses::network_behind`]). The map is bounded at [`MAX_AHEAD_WITNESSES`] peers.

use std::collections::BTreeMap;
use std::time::Duration;

use protocol::Round;
pub use protocol::control::MAX_FUTURE_ROUNDS;

/// Distinct peers that must show a later exchange before a cut-off VN probes, and answers a probe needs at
/// least. Three: a hostile peer plus a confused one are not enough, while a node that is really behind hears
/// from many (every walk that starts at a peer, every reply and every neighbour's chunk).
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
    /// The last exchange the network was found at (by a probe), so that each later one is reported once.
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
    /// `from` showed that it is at exchange `at` (at least). Kept per peer (its largest claim, and when it
    /// was last heard); a new peer beyond [`MAX_AHEAD_WITNESSES`] is ignored until stale claims go.
    pub fn note(&mut self, now: Duration, from: &I, at: Round) {
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
            None => {}
        }
    }

    /// The largest fresh claim, if any.
    pub fn furthest(&self, now: Duration) -> Option<Round> {
        self.claims
            .values()
            .filter(|(_, seen)| now.saturating_sub(*seen) <= self.window)
            .map(|(r, _)| *r)
            .max()
    }

    /// Distinct peers with fresh claims beyond what a VN whose newest exchange is `newest` accepts: evidence
    /// that it may be behind (a probe decides).
    pub fn beyond(&self, now: Duration, newest: Round) -> usize {
        let beyond = newest + MAX_FUTURE_ROUNDS;
        self.claims
            .values()
            .filter(|(r, seen)| *r > beyond && now.saturating_sub(*seen) <= self.window)
            .count()
    }

    /// The network was found at `at` (a probe): later reports must go beyond it.
    pub fn adopt(&mut self, at: Round) {
        self.reported = Some(self.reported.map_or(at, |r| r.max(at)));
    }

    /// The latest exchange reported (the network is there or further), if any.
    pub fn reported(&self) -> Option<Round> {
        self.reported
    }

    /// Claims no longer fresh are dropped. Claims of peers well behind this VN are kept while fresh: they
    /// are what says that it runs ahead ([`AheadWitnesses::network_behind`]).
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
    fn claims_count_distinct_fresh_peers_beyond_the_window() {
        let mut w = AheadWitnesses::new(Duration::from_secs(10));
        let newest = Round(5);
        // Within what the VN accepts (5 + MAX_FUTURE_ROUNDS): not beyond.
        w.note(T, &9u32, Round(7));
        assert_eq!(w.beyond(T, newest), 0);
        // One peer claiming further and further: one witness, its largest claim kept.
        for r in 8..100 {
            w.note(T, &1u32, Round(r));
        }
        w.note(T, &1u32, Round(20));
        assert_eq!(w.beyond(T, newest), 1);
        assert_eq!(w.furthest(T), Some(Round(99)));
        w.note(T, &2u32, Round(20));
        w.note(T, &3u32, Round(30));
        assert_eq!(w.beyond(T, newest), 3);
        // Stale claims neither count nor are kept.
        let later = T + Duration::from_secs(11);
        assert_eq!(w.beyond(later, newest), 0);
        assert_eq!(w.furthest(later), None);
        w.expire(T);
        assert_eq!(w.len(), 4);
        w.expire(later);
        assert!(w.is_empty());
    }

    #[test]
    fn a_reported_exchange_only_grows() {
        let mut w = AheadWitnesses::<u32>::new(Duration::from_secs(10));
        assert_eq!(w.reported(), None);
        w.adopt(Round(20));
        w.adopt(Round(12));
        assert_eq!(w.reported(), Some(Round(20)));
    }

    /// Issue 15, a node running ahead: most peers heard lately two or more exchanges behind says the
    /// network is behind; one or two such peers, peers only one behind, or stale claims do not.
    #[test]
    fn the_network_is_behind_only_when_most_fresh_peers_are_two_behind() {
        let fresh = Duration::from_secs(1);
        let mut w = AheadWitnesses::new(Duration::from_secs(10));
        for p in 0..2u32 {
            w.note(T, &p, Round(8));
        }
        assert!(
            !w.network_behind(T, Round(10), fresh),
            "two peers are not enough"
        );
        w.note(T, &2, Round(8));
        assert!(
            w.network_behind(T, Round(10), fresh),
            "three of three, two behind"
        );
        assert!(
            !w.network_behind(T, Round(9), fresh),
            "one behind is in step"
        );
        // Two peers in step: three of five behind is still most.
        w.note(T, &3, Round(10));
        w.note(T, &4, Round(9));
        assert!(w.network_behind(T, Round(10), fresh));
        // Claims older than `fresh` do not count: only the two in step spoke lately.
        let later = T + Duration::from_millis(1500);
        for p in 3..5u32 {
            w.note(later, &p, Round(10));
        }
        assert!(
            !w.network_behind(later, Round(10), fresh),
            "two fresh voters"
        );
        w.note(later, &5, Round(10));
        assert!(
            !w.network_behind(later, Round(11), fresh),
            "fresh peers one behind"
        );
        assert!(w.network_behind(later, Round(12), fresh));
        w.note(T, &6, Round(10));
        assert!(
            !w.network_behind(T, Round(10), fresh),
            "three of seven is not most"
        );
    }

    #[test]
    fn the_witness_map_is_bounded() {
        let mut w = AheadWitnesses::new(Duration::from_secs(10));
        for p in 0..(MAX_AHEAD_WITNESSES as u32 + 50) {
            w.note(T, &p, Round(100));
        }
        assert_eq!(w.len(), MAX_AHEAD_WITNESSES);
    }
}
