//! When a VN's overlay next has a timer due: the earliest sub-step boundary, freeze, reservation or splice-lock
//! expiry and retransmission over its open rounds, worked out once after each change of state. Most inputs
//! (every Cyclon message, walks relayed for rounds not open here, ticks for other timers) find nothing due, and
//! with this they skip the walk over every open round's timers instead of making it twice (to fire, then to
//! ask for the next wake-up).

use std::time::Duration;

/// The builder's next due instant, as of its last change.
#[derive(Debug, Clone, Default)]
pub(super) struct NextTimer {
    /// The earliest due instant over the open rounds; `None` when none is pending.
    at: Option<Duration>,
    /// The state is being changed by an input: `at` may be later than the truth until [`Self::set`].
    stale: bool,
}

impl NextTimer {
    /// Whether nothing can be due at `now`, so the timers need not be looked at.
    pub(super) fn nothing_due(&self, now: Duration) -> bool {
        !self.stale && self.at.is_none_or(|t| now < t)
    }

    /// An input is about to change the rounds' state.
    pub(super) fn changing(&mut self) {
        self.stale = true;
    }

    /// The state settled with `at` as its earliest due instant.
    pub(super) fn set(&mut self, at: Option<Duration>) {
        self.at = at;
        self.stale = false;
    }

    /// The earliest due instant, if the state settled since it last changed.
    pub(super) fn settled(&self) -> Option<Option<Duration>> {
        (!self.stale).then_some(self.at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn nothing_is_due_before_the_settled_instant_and_anything_may_be_while_changing() {
        let mut t = NextTimer::default();
        assert!(t.nothing_due(Duration::ZERO), "no timer pending");
        t.set(Some(10 * MS));
        assert!(t.nothing_due(9 * MS));
        assert!(!t.nothing_due(10 * MS));
        t.changing();
        assert!(!t.nothing_due(Duration::ZERO));
        assert_eq!(t.settled(), None);
        t.set(None);
        assert_eq!(t.settled(), Some(None));
        assert!(t.nothing_due(Duration::MAX));
    }
}
