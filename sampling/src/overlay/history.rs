//! Peers by round, kept by round and by peer: the neighbours of the rounds a VN froze lately, and the peers
//! linked in its open rounds. The repeat cap ([`super::OverlayConfig::repeat_cap`]) asks, per view entry and
//! per sub-step, in how many recent rounds one peer was (or is) linked, and the by-peer index answers that from
//! the few rounds that peer was in instead of a walk over every round's peers.

use std::collections::{BTreeMap, BTreeSet};

use protocol::Round;

/// Each remembered round's neighbours (at its freeze), and the same facts by peer.
#[derive(Debug, Clone)]
pub(super) struct NeighbourHistory<I> {
    by_round: BTreeMap<Round, Vec<I>>,
    /// For each peer, the remembered rounds whose neighbours include it: always the transpose of `by_round`.
    by_peer: BTreeMap<I, BTreeSet<Round>>,
}

impl<I> Default for NeighbourHistory<I> {
    fn default() -> Self {
        Self {
            by_round: BTreeMap::new(),
            by_peer: BTreeMap::new(),
        }
    }
}

impl<I: Ord + Clone> NeighbourHistory<I> {
    /// Remembers `neighbours` as `round`'s (replacing what was remembered for it).
    pub(super) fn insert(&mut self, round: Round, neighbours: Vec<I>) {
        if let Some(old) = self.by_round.remove(&round) {
            self.unindex(round, &old);
        }
        for p in &neighbours {
            self.by_peer.entry(p.clone()).or_default().insert(round);
        }
        self.by_round.insert(round, neighbours);
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

    fn unindex(&mut self, round: Round, neighbours: &[I]) {
        for p in neighbours {
            if let Some(rounds) = self.by_peer.get_mut(p) {
                rounds.remove(&round);
                if rounds.is_empty() {
                    self.by_peer.remove(p);
                }
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
