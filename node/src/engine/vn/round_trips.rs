//! [`RoundTrips`]: the control round trips one VN measured, and the overlay sub-step they call for.
//!
//! The overlay protocol is timed in sub-steps that must each hold a round trip (a proposal's walk, its
//! acceptance and the commitment). A fixed sub-step fails in one direction: when the machines or the network
//! are busier than it was chosen for, replies miss their sub-steps, rounds freeze short, short VNs propose
//! more, and the extra messages make everyone busier still: the overlay collapsed (0.28 of 4 neighbours on a
//! two-core machine with 40 ms sub-steps, control round trips at a median of 0.9 s) instead of slowing down.
//! Stretching the sub-step of the rounds a VN starts to a multiple of the round trips it measured closes that
//! loop the other way, as TCP's retransmission timer does: slower rounds send fewer messages per second, the
//! queues drain, and the sub-step comes back down to the configured floor when the round trips do. Coming
//! down, it also shortens the sub-steps still to come in the negotiations already running
//! (`sampling::OverlayBuilder::shorten_running`), which would otherwise keep the windows of the load they
//! started under.
//!
//! Each VN measures and decides for itself (its own schedule, DESIGN §5). The driver measures: the engine
//! reads no clock. A peer that answers late on purpose can only move a high percentile of the samples it is
//! part of, and the stretch is capped.

use std::collections::VecDeque;
use std::time::Duration;

/// Round trips kept: about the control messages of one or two sub-steps of a busy VN, so that the estimate
/// follows load within a round.
pub const SAMPLES: usize = 64;

/// Sub-step length in round trips (of the [`PERCENTILE`] one). A reply is due within its sub-step, and the
/// round trips measured under load are mostly queueing behind bursts (chunk exchanges, a neighbour's busy
/// event loop) rather than the hop itself. With 4, loaded round trips of 10-20 ms stretched 40 ms sub-steps
/// to 50-90 ms, the overlay window with them, and rounds, which cannot come faster than a window over the
/// lookahead, followed: with 2 (and the warm-up's connections, `net::preconnect`, and round 0 negotiated in
/// the warm-up), the default release run went from 0.22-0.38 s to 0.14-0.18 s per round and the MovieLens
/// bench at k = 2 from 0.20-0.22 s to 0.16-0.17 s, at 3.96-3.98 of 4 neighbours (interleaved runs;
/// results/round-speed).
/// The collapse the stretch guards against comes at round trips of a sub-step and more, which 2 still
/// answers.
pub const SUBSTEP_PER_ROUND_TRIP: u32 = 2;

/// Which round trip of the recent ones sets the pace, in percent: high enough that most replies fit, low
/// enough that a minority of slow (or hostile) peers does not set it.
pub const PERCENTILE: usize = 75;

/// The longest sub-step, in multiples of the configured one: a bound on how far a busy network (or peers
/// that answer late on purpose) can slow this VN's negotiations.
pub const MAX_STRETCH: u32 = 8;

/// The first round's sub-step, in multiples of the configured one, easing down from there. Before its first
/// rounds a VN has measured only the quiet network of the warm-up, and every VN then opens `lookahead + 1`
/// negotiations at once (and most of its connections): started at the floor, they were the ones that failed
/// (measured: round 0..4 at 1.5-2.7 of 4 neighbours, then 4.0). That was 4 while every control message was its
/// own stream; on long-lived control streams 2 holds the first rounds (3.98-3.99 of 4 neighbours in the default
/// release run, 3 runs, against 3.91-3.96 with 4) and halves round 0 (1.8 s against 3.5 s). With 1, rounds 1-6
/// spiked to 1-2.8 s and the runs formed 3.82-3.95.
pub const INITIAL_STRETCH: u32 = 2;

/// How much the sub-step shrinks at each pacing decision once the round trips allow it, in percent. The
/// engine decides when its node starts a round and when due negotiations start, so about twice a round.
pub const EASE_PERCENT: u32 = 10;

/// Recent control round trips of one VN.
#[derive(Debug, Clone, Default)]
pub struct RoundTrips {
    recent: VecDeque<Duration>,
    /// The sub-step last chosen.
    substep: Option<Duration>,
}

impl RoundTrips {
    /// One control message's round trip: from its send to its acknowledgement.
    pub fn record(&mut self, rtt: Duration) {
        if self.recent.len() == SAMPLES {
            self.recent.pop_front();
        }
        self.recent.push_back(rtt);
    }

    /// The [`PERCENTILE`] round trip of the recent ones; `None` before any.
    pub fn typical(&self) -> Option<Duration> {
        if self.recent.is_empty() {
            return None;
        }
        let mut v: Vec<Duration> = self.recent.iter().copied().collect();
        let i = (v.len() - 1) * PERCENTILE / 100;
        Some(*v.select_nth_unstable(i).1)
    }

    /// The sub-step for a round started now: [`SUBSTEP_PER_ROUND_TRIP`] typical round trips, at least the
    /// configured `floor` and at most [`MAX_STRETCH`] times it. It rises at once when the round trips do and
    /// comes down by [`EASE_PERCENT`] per decision when they fall (a direct map from round trips to
    /// sub-steps oscillates: slow rounds drain the queues, the next rounds go back to the floor and fill them
    /// again), from [`INITIAL_STRETCH`] at the first round if it is the network's start (`cold_start`; a VN
    /// that resumes into a running network starts from what it measured: stretched, its first rounds took
    /// so long that the network ran ahead of it again). A driver that measures nothing (the simulator) gets
    /// the floor: without round trips there is no pacing. `measuring`: the driver measures round trips, so a
    /// VN at the network's start that has none yet (its warm-up brought no control message back in time)
    /// takes the cold start's stretch too. At the floor it froze its first overlays at half the window of
    /// its peers that had measured, and their proposals that came later failed: in 512-VN runs (crowded
    /// timing, 400 ms floor) round 0 ended 25-27 s into the run and formed 7.09-7.88 of 8 neighbours.
    pub fn next_substep(&mut self, floor: Duration, cold_start: bool, measuring: bool) -> Duration {
        let Some(rtt) = self.typical() else {
            return if cold_start && measuring {
                floor * INITIAL_STRETCH
            } else {
                floor
            };
        };
        let target = (rtt * SUBSTEP_PER_ROUND_TRIP).clamp(floor, floor * MAX_STRETCH);
        let eased = self.substep.map_or(
            if cold_start {
                floor * INITIAL_STRETCH
            } else {
                floor
            },
            |s| s * (100 - EASE_PERCENT) / 100,
        );
        let next = target.max(eased).max(floor);
        self.substep = Some(next);
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLOOR: Duration = Duration::from_millis(40);

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn filled(rtt: Duration) -> RoundTrips {
        let mut t = RoundTrips::default();
        for _ in 0..SAMPLES {
            t.record(rtt);
        }
        t
    }

    #[test]
    fn a_driver_that_measures_nothing_gets_the_configured_substep() {
        let mut t = RoundTrips::default();
        for _ in 0..10 {
            assert_eq!(t.next_substep(FLOOR, true, false), FLOOR);
        }
    }

    /// A node at the network's start with no round trip yet: the cold start's stretch, as its peers that
    /// measured one get; once running (not the start), the floor.
    #[test]
    fn a_measuring_vn_with_no_round_trip_yet_starts_stretched() {
        let mut t = RoundTrips::default();
        assert_eq!(t.next_substep(FLOOR, true, true), FLOOR * INITIAL_STRETCH);
        assert_eq!(t.next_substep(FLOOR, false, true), FLOOR);
        assert_eq!(
            filled(ms(1)).next_substep(FLOOR, true, true),
            FLOOR * INITIAL_STRETCH,
            "the same as with a quiet round trip measured"
        );
    }

    #[test]
    fn the_first_rounds_start_stretched_and_ease_down_to_the_floor_on_a_quiet_network() {
        let mut t = filled(Duration::from_micros(900));
        let mut seen = vec![t.next_substep(FLOOR, true, true)];
        assert_eq!(seen[0], FLOOR * INITIAL_STRETCH);
        while *seen.last().unwrap() > FLOOR {
            seen.push(t.next_substep(FLOOR, true, true));
            assert!(seen.len() < 50, "never reached the floor: {seen:?}");
        }
        assert!(seen.windows(2).all(|w| w[1] < w[0]), "{seen:?}");
        assert_eq!(t.next_substep(FLOOR, true, true), FLOOR);
    }

    #[test]
    fn a_vn_resuming_into_a_running_network_starts_from_what_it_measured() {
        let mut t = filled(ms(1));
        assert_eq!(t.next_substep(FLOOR, false, true), FLOOR);
        let mut t = filled(ms(30));
        assert_eq!(
            t.next_substep(FLOOR, false, true),
            ms(30) * SUBSTEP_PER_ROUND_TRIP
        );
    }

    #[test]
    fn slow_replies_stretch_the_substep_at_once_and_it_eases_back_when_they_are_fast_again() {
        let mut t = filled(ms(1));
        while t.next_substep(FLOOR, true, true) > FLOOR {}
        for _ in 0..SAMPLES {
            t.record(ms(60));
        }
        assert_eq!(t.next_substep(FLOOR, true, true), ms(120));
        for _ in 0..SAMPLES {
            t.record(ms(1));
        }
        assert_eq!(t.next_substep(FLOOR, true, true), ms(108));
        assert_eq!(
            t.next_substep(FLOOR, true, true),
            Duration::from_micros(97_200)
        );
    }

    #[test]
    fn a_minority_of_late_peers_does_not_set_the_pace_and_the_stretch_is_capped() {
        let mut t = RoundTrips::default();
        for i in 0..SAMPLES {
            // One reply in five from a peer that holds its acknowledgements for ten seconds.
            t.record(if i % 5 == 0 { ms(10_000) } else { ms(2) });
        }
        assert_eq!(t.typical(), Some(ms(2)));
        let mut t = filled(ms(10_000));
        assert_eq!(t.next_substep(FLOOR, true, true), FLOOR * MAX_STRETCH);
    }

    #[test]
    fn only_the_recent_samples_count() {
        let mut t = filled(ms(500));
        for _ in 0..SAMPLES {
            t.record(ms(20));
        }
        assert_eq!(t.typical(), Some(ms(20)));
    }
}
