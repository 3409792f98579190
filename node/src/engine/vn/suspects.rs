//! Neighbours that went silent without a word: a frozen neighbour that neither sent its chunk nor
//! acknowledged ours by the exchange's deadline (issue 44).
//!
//! A neighbour that acknowledged our chunk and sent none withheld it, and is shunned at the deadline
//! (`Exchange::silent_neighbours`). One that acknowledged nothing may be a stopped or crashed node, which must
//! not be shunned (it would find no neighbours after its restart), or a rogue that takes edges and withholds
//! everything, ours included, to make the victim wait out its deadline round after round. The two part ways
//! afterwards: a dead peer's connection closes, or goes silent until the ping gives up
//! (`VnInput::PeerGone`), while a rogue that wants to crowd the victim again must keep talking to it. So a
//! silent neighbour becomes a suspect at the deadline, and a suspect that speaks again within
//! [`SUSPECT_WINDOW`] — anything but its late chunk for that round, which clears it — is shunned for the
//! round it withheld. `PeerGone` clears it.
//!
//! The cost for honest peers: a node that stalls past a whole exchange deadline (a process stopped for
//! seconds, then continued before its peers' pings gave up) and speaks before its overdue chunk goes out is
//! shunned by the neighbours it was late for, for the overlay's repeat window: it loses those few as
//! neighbours for a while, nothing more.

use std::collections::BTreeMap;
use std::time::Duration;

use protocol::Round;

/// How long after the deadline a suspect's words still count against it: beyond the time a dead peer takes
/// to be declared gone (pings every second, `peer_silence_ms` 6 s by default), so that `PeerGone` clears a
/// dead one first.
pub(crate) const SUSPECT_WINDOW: Duration = Duration::from_secs(30);

/// Most suspects held at once; the oldest goes first (a coalition of identities, several times over).
pub(crate) const MAX_SUSPECTS: usize = 64;

/// The suspects: each peer with the round it was silent in, and when that round's deadline passed.
#[derive(Debug)]
pub(crate) struct Suspects<I> {
    by_peer: BTreeMap<I, (Round, Duration)>,
}

impl<I: Ord + Clone> Suspects<I> {
    pub(crate) fn new() -> Self {
        Self {
            by_peer: BTreeMap::new(),
        }
    }

    /// `peer` neither sent its chunk for `round` nor acknowledged ours by the deadline, at `now`.
    pub(crate) fn suspect(&mut self, now: Duration, round: Round, peer: I) {
        // The earliest silent round stands: a later one would move its window on.
        self.by_peer.entry(peer).or_insert((round, now));
        if self.by_peer.len() > MAX_SUSPECTS {
            let oldest = self
                .by_peer
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(p, _)| p.clone())
                .expect("non-empty");
            self.by_peer.remove(&oldest);
        }
    }

    /// `peer` spoke at `now` (a control message, a round query or answer, a chunk reply, or a chunk for
    /// `chunk_round`). Returns the round it withheld if that convicts it; a late chunk for that round (or an
    /// earlier one) clears it instead.
    pub(crate) fn heard(
        &mut self,
        now: Duration,
        peer: &I,
        chunk_round: Option<Round>,
    ) -> Option<Round> {
        let &(round, since) = self.by_peer.get(peer)?;
        self.by_peer.remove(peer);
        if now.saturating_sub(since) > SUSPECT_WINDOW {
            return None;
        }
        match chunk_round {
            Some(r) if r <= round => None,
            _ => Some(round),
        }
    }

    /// `peer`'s connection closed for good: it was dead, not withholding.
    pub(crate) fn gone(&mut self, peer: &I) {
        self.by_peer.remove(peer);
    }

    #[cfg(test)]
    pub(crate) fn contains(&self, peer: &I) -> bool {
        self.by_peer.contains_key(peer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(100);

    #[test]
    fn a_suspect_that_speaks_within_the_window_is_convicted_once() {
        let mut s = Suspects::new();
        s.suspect(T, Round(4), 9u32);
        assert_eq!(
            s.heard(T + Duration::from_secs(1), &9, None),
            Some(Round(4))
        );
        assert_eq!(s.heard(T + Duration::from_secs(2), &9, None), None, "once");
        assert_eq!(s.heard(T, &8, None), None, "not a suspect");
    }

    #[test]
    fn a_late_chunk_a_gone_peer_and_time_clear_a_suspect() {
        let mut s = Suspects::new();
        s.suspect(T, Round(4), 9u32);
        assert_eq!(s.heard(T, &9, Some(Round(4))), None, "its late chunk");
        s.suspect(T, Round(4), 9);
        assert_eq!(
            s.heard(T, &9, Some(Round(5))),
            Some(Round(4)),
            "a later round's chunk is not the one it owed"
        );
        s.suspect(T, Round(4), 9);
        s.gone(&9);
        assert_eq!(s.heard(T, &9, None), None);
        s.suspect(T, Round(4), 9);
        assert_eq!(s.heard(T + SUSPECT_WINDOW * 2, &9, None), None, "too late");
    }

    #[test]
    fn suspects_are_bounded_the_oldest_going_first() {
        let mut s = Suspects::new();
        for p in 0..=MAX_SUSPECTS as u32 {
            s.suspect(T + Duration::from_millis(p as u64), Round(1), p);
        }
        assert!(!s.contains(&0));
        assert!(s.contains(&1) && s.contains(&(MAX_SUSPECTS as u32)));
    }
}
