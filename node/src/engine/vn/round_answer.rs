//! [`RoundAnswer`]: what this VN answers a round query (`/shatter/round/1`, a catch-up probe's question): the
//! newest exchange its RN started, each new one shown only after a lag of this VN's own.
//!
//! Why the lag (issue 43): an RN starts a round at all its k VNs at one instant, so the newest exchange of k
//! sibling VNs changes at one instant. A listed peer polling VNs around a round boundary saw siblings switch
//! together and strangers at other instants, and could group VNs into nodes without watching a packet.
//! Each VN shows a new exchange after a delay drawn uniformly from `[0, the length of its last round]` with
//! its own RNG: siblings' visible switches are then independent draws over the next round, as strangers'
//! are, and an answer lags the truth by at most about one round, which catch-up does not notice (a node is
//! behind only beyond `MAX_FUTURE_ROUNDS`).

use std::collections::VecDeque;
use std::time::Duration;

use protocol::Round;
use rand::Rng;
use rand_chacha::ChaCha12Rng;

/// Exchanges waiting to be shown, at most: older ones are shown in order, so a burst of starts (a catch-up
/// jump, per-step exchanges) keeps only the newest few.
const MAX_PENDING: usize = 4;

/// The answer a VN gives, and the exchanges it will show next.
#[derive(Debug)]
pub(crate) struct RoundAnswer {
    shown: Option<Round>,
    /// Exchanges started and not shown yet, each with when it is shown (in order of both).
    pending: VecDeque<(Round, Duration)>,
    /// When the newest exchange started (the next lag is drawn up to the time since).
    last_start: Option<Duration>,
    /// The lag's bound before a round's length is known (the run's first exchange).
    first_lag: Duration,
    rng: ChaCha12Rng,
}

impl RoundAnswer {
    /// `first_lag`: the lag's bound for the first exchange. `rng`: this VN's own stream.
    pub(crate) fn new(first_lag: Duration, rng: ChaCha12Rng) -> Self {
        Self {
            shown: None,
            pending: VecDeque::new(),
            last_start: None,
            first_lag,
            rng,
        }
    }

    /// A resumed VN answers with the exchange it resumed at from the start.
    pub(crate) fn resumed_at(&mut self, exchange: Round) {
        self.shown = Some(self.shown.map_or(exchange, |s| s.max(exchange)));
    }

    /// The RN started (or prepared) `exchange` at `now`.
    pub(crate) fn started(&mut self, now: Duration, exchange: Round) {
        let newest = self.pending.back().map(|(r, _)| *r).or(self.shown);
        if newest.is_some_and(|n| exchange <= n) {
            return;
        }
        let bound = self
            .last_start
            .map_or(self.first_lag, |t| now.saturating_sub(t));
        self.last_start = Some(now);
        let mut at = now + bound.mul_f64(self.rng.random::<f64>());
        // Shown in order: never before the exchange started before it.
        if let Some((_, before)) = self.pending.back() {
            at = at.max(*before);
        }
        self.pending.push_back((exchange, at));
        while self.pending.len() > MAX_PENDING {
            self.shown = self.pending.pop_front().map(|(r, _)| r);
        }
    }

    /// The answer at `now`.
    pub(crate) fn at(&mut self, now: Duration) -> Option<Round> {
        while let Some(&(r, at)) = self.pending.front()
            && at <= now
        {
            self.shown = Some(r);
            self.pending.pop_front();
        }
        self.shown
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn answer(seed: u64) -> RoundAnswer {
        RoundAnswer::new(ms(100), ChaCha12Rng::seed_from_u64(seed))
    }

    /// The first instant (in ms, from `from` to `to`) at which `a` answers `round`.
    fn shows(a: &mut RoundAnswer, round: u64, from: u64, to: u64) -> Option<u64> {
        (from..=to).find(|t| a.at(ms(*t)) == Some(Round(round)))
    }

    #[test]
    fn a_new_exchange_is_shown_after_a_lag_within_the_last_round() {
        let mut a = answer(1);
        assert_eq!(a.at(Duration::ZERO), None);
        a.started(Duration::ZERO, Round(0));
        assert_eq!(a.at(ms(100)), Some(Round(0)), "within the first bound");
        a.started(ms(100), Round(1));
        // Rounds of 100 ms: round 1 shows within 100 ms of its start, never before.
        let shown = shows(&mut a, 1, 100, 200).expect("shown within one round");
        assert!((100..=200).contains(&shown));
        // Older or repeated starts change nothing.
        a.started(ms(300), Round(1));
        a.started(ms(300), Round(0));
        assert_eq!(a.at(ms(10_000)), Some(Round(1)));
    }

    /// Issue 43: VNs told of a round at one instant (siblings) show it at independent instants spread over
    /// the round, not together.
    #[test]
    fn siblings_told_at_one_instant_switch_at_different_instants() {
        let mut instants: Vec<u64> = (0..8u64)
            .map(|seed| {
                let mut a = answer(seed);
                a.started(Duration::ZERO, Round(0));
                a.started(ms(1000), Round(1));
                shows(&mut a, 1, 1000, 2000).unwrap()
            })
            .collect();
        instants.sort_unstable();
        instants.dedup();
        assert!(instants.len() >= 7, "{instants:?}");
        let spread = instants.last().unwrap() - instants.first().unwrap();
        assert!(spread >= 300, "spread over the round: {instants:?}");
    }

    #[test]
    fn exchanges_are_shown_in_order_and_the_queue_is_bounded() {
        let mut a = answer(3);
        for r in 0..20u64 {
            a.started(ms(r * 10), Round(r));
            assert!(a.pending.len() <= MAX_PENDING);
        }
        let mut last = None;
        for t in 0..2000u64 {
            let now = a.at(ms(t));
            assert!(now >= last, "never goes back: {last:?} then {now:?}");
            last = now;
        }
        assert_eq!(last, Some(Round(19)));
    }

    #[test]
    fn a_resumed_vn_answers_its_round_at_once() {
        let mut a = answer(4);
        a.resumed_at(Round(7));
        assert_eq!(a.at(Duration::ZERO), Some(Round(7)));
    }
}
