//! When each open round of a VN's overlay next has a timer due (its next sub-step boundary, its freeze, a
//! reservation or splice lock expiring, a retransmission), worked out after each change of that round's state.
//! Most inputs (every Cyclon message, walks relayed for rounds not open here, ticks for other timers) find
//! nothing due, and most of the rest find one round due: with this they visit only the rounds due, instead of
//! walking every open round's timers twice (to fire them, then to ask for the next wake-up).

use std::collections::BTreeMap;
use std::time::Duration;

use protocol::Round;

/// The open rounds' next due instants, as of their last change.
#[derive(Debug, Clone, Default)]
pub(super) struct NextTimer {
    /// Each open round's earliest due instant; rounds with none pending (frozen ones) are left out.
    by_round: BTreeMap<Round, Duration>,
    /// The state is being changed by an input: any round may be due until [`Self::settle_all`].
    stale: bool,
}

impl NextTimer {
    /// Whether nothing can be due at `now`, so the timers need not be looked at.
    pub(super) fn nothing_due(&self, now: Duration) -> bool {
        !self.stale && self.by_round.values().all(|&t| now < t)
    }

    /// The rounds that may have a timer due at `now`; `None` while stale (every open round may).
    pub(super) fn due(&self, now: Duration) -> Option<Vec<Round>> {
        (!self.stale).then(|| {
            self.by_round
                .iter()
                .filter(|&(_, &t)| t <= now)
                .map(|(r, _)| *r)
                .collect()
        })
    }

    /// An input is about to change the state of rounds it does not name.
    pub(super) fn changing(&mut self) {
        self.stale = true;
    }

    /// `round`'s state changed: its next due instant is `at` (`None`: nothing pending, or not open).
    pub(super) fn settle(&mut self, round: Round, at: Option<Duration>) {
        match at {
            Some(t) => self.by_round.insert(round, t),
            None => self.by_round.remove(&round),
        };
    }

    /// Every round's state may have changed: `rounds` are the open rounds' next due instants.
    pub(super) fn settle_all(&mut self, rounds: impl IntoIterator<Item = (Round, Duration)>) {
        self.by_round = rounds.into_iter().collect();
        self.stale = false;
    }

    /// The earliest due instant, if the state settled since it last changed.
    pub(super) fn settled(&self) -> Option<Option<Duration>> {
        (!self.stale).then(|| self.by_round.values().min().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn only_rounds_whose_instant_came_are_due_and_any_may_be_while_changing() {
        let mut t = NextTimer::default();
        assert!(t.nothing_due(Duration::ZERO), "no timer pending");
        t.settle_all([(Round(1), 10 * MS), (Round(2), 5 * MS)]);
        assert!(t.nothing_due(4 * MS));
        assert_eq!(t.due(7 * MS), Some(vec![Round(2)]));
        assert_eq!(t.settled(), Some(Some(5 * MS)));
        t.settle(Round(2), None);
        assert_eq!(t.settled(), Some(Some(10 * MS)));
        t.changing();
        assert!(!t.nothing_due(Duration::ZERO));
        assert_eq!(t.due(Duration::ZERO), None);
        assert_eq!(t.settled(), None);
        t.settle_all([]);
        assert_eq!(t.settled(), Some(None));
        assert!(t.nothing_due(Duration::MAX));
    }
}
