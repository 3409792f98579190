//! Peers by round, kept by round and by peer: the neighbours of the rounds a VN froze lately, and the peers
//! linked in its open rounds. The repeat cap ([`super::OverlayConfig::repeat_cap`]) asks, per view entry and
//! per sub-step, in how many recent rounds one peer was (or is) linked, and the by-peer index answers that from
//! the few rounds that peer was in instead of a walk over every round's peers.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

use protocol::Round;

/// Each remembered round's neighbours (at its freeze), and the same facts by peer.
#[derive(Debug, Clone)]
pub(super) struct NeighbourHistory<I> {
    by_round: BTreeMap<Round, Vec<I>>,
    /// For each peer, the remembered rounds whose peers include it, in order: always the transpose of
    /// `by_round`. A short vector: a peer is in a few dozen rounds at most, and the open rounds' index changes
    /// with every link made or dropped. Hashed: peers come and go with every link, which rebalanced a tree
    /// of a few hundred peers each time, and the map is only looked up, never walked.
    by_peer: HashMap<I, Vec<Round>>,
}

impl<I> Default for NeighbourHistory<I> {
    fn default() -> Self {
        Self {
            by_round: BTreeMap::new(),
            by_peer: HashMap::new(),
        }
    }
}

impl<I: Ord + Hash + Clone> NeighbourHistory<I> {
    /// Remembers `peers` as `round`'s (replacing what was remembered for it). Only the peers that come or go
    /// are re-indexed: a round's peers change by one link at a time.
    pub(super) fn insert(&mut self, round: Round, mut peers: Vec<I>) {
        peers.sort();
        peers.dedup();
        let old = self.by_round.remove(&round).unwrap_or_default();
        let (mut i, mut j) = (0, 0);
        while i < old.len() || j < peers.len() {
            match (old.get(i), peers.get(j)) {
                (Some(o), Some(p)) if o == p => (i, j) = (i + 1, j + 1),
                (Some(o), Some(p)) if o < p => {
                    self.unindex_one(round, o);
                    i += 1;
                }
                (Some(o), None) => {
                    self.unindex_one(round, o);
                    i += 1;
                }
                (_, Some(p)) => {
                    let rounds = self.by_peer.entry(p.clone()).or_default();
                    if let Err(at) = rounds.binary_search(&round) {
                        rounds.insert(at, round);
                    }
                    j += 1;
                }
                (None, None) => unreachable!("the loop runs while either has one"),
            }
        }
        // A round with no peers is remembered as none (`holds` reads a missing round as empty).
        if !peers.is_empty() {
            self.by_round.insert(round, peers);
        }
    }

    /// Whether `peers` (in order) are what is remembered for `round` (none remembered: no peers).
    pub(super) fn holds<'a>(&self, round: Round, peers: impl Iterator<Item = &'a I>) -> bool
    where
        I: 'a,
    {
        let kept = self.by_round.get(&round).map_or(&[][..], Vec::as_slice);
        kept.iter().eq(peers)
    }

    /// Forgets `round`.
    pub(super) fn remove(&mut self, round: Round) {
        if let Some(old) = self.by_round.remove(&round) {
            self.unindex(round, &old);
        }
    }

    /// The rounds remembered, with their peers.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&Round, &Vec<I>)> {
        self.by_round.iter()
    }

    /// Forgets the rounds before `keep`.
    pub(super) fn forget_before(&mut self, keep: Round) {
        let kept = self.by_round.split_off(&keep);
        let gone = std::mem::replace(&mut self.by_round, kept);
        for (round, neighbours) in gone {
            self.unindex(round, &neighbours);
        }
    }

    /// The remembered rounds in which `peer` was a neighbour, in order.
    pub(super) fn rounds_of<'a>(&'a self, peer: &I) -> impl Iterator<Item = Round> + 'a {
        self.by_peer.get(peer).into_iter().flatten().copied()
    }

    fn unindex(&mut self, round: Round, peers: &[I]) {
        for p in peers {
            self.unindex_one(round, p);
        }
    }

    fn unindex_one(&mut self, round: Round, peer: &I) {
        if let Some(rounds) = self.by_peer.get_mut(peer) {
            if let Ok(at) = rounds.binary_search(&round) {
                rounds.remove(at);
            }
            if rounds.is_empty() {
                self.by_peer.remove(peer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_by_peer_index_follows_inserts_replacements_and_forgetting() {
        let mut h = NeighbourHistory::default();
        h.insert(Round(1), vec![5u32, 7]);
        h.insert(Round(2), vec![7]);
        h.insert(Round(3), vec![5]);
        h.insert(Round(4), vec![9, 5, 9]);
        h.insert(Round(4), vec![]);
        assert!(
            !h.by_peer.contains_key(&9),
            "a peer gone from its only round"
        );
        assert_eq!(h.rounds_of(&5).collect::<Vec<_>>(), [Round(1), Round(3)]);
        assert_eq!(h.rounds_of(&7).collect::<Vec<_>>(), [Round(1), Round(2)]);
        // A round remembered again replaces its old neighbours.
        h.insert(Round(2), vec![5]);
        assert_eq!(h.rounds_of(&7).collect::<Vec<_>>(), [Round(1)]);
        assert_eq!(
            h.rounds_of(&5).collect::<Vec<_>>(),
            [Round(1), Round(2), Round(3)]
        );
        assert!(h.holds(Round(2), [5].iter()) && !h.holds(Round(2), [5, 7].iter()));
        assert!(
            h.holds(Round(9), [].iter()),
            "a round never remembered has no peers"
        );
        h.forget_before(Round(2));
        assert_eq!(h.rounds_of(&7).count(), 0);
        assert!(!h.by_peer.contains_key(&7), "no empty entry is kept");
        assert_eq!(h.rounds_of(&5).collect::<Vec<_>>(), [Round(2), Round(3)]);
        h.remove(Round(3));
        assert_eq!(h.rounds_of(&5).collect::<Vec<_>>(), [Round(2)]);
        assert_eq!(h.iter().count(), 1);
    }
}
