//! [`SendSchedule`]: when a VN sends its chunk of a round. Sibling VNs get their chunks from their RN at the
//! same instant; each waits for the round's pace and then its own random delay, so that chunk timing ties
//! neither siblings together (DESIGN §5, §7) nor a VN to its node's training speed (issue 13).

use std::collections::VecDeque;
use std::time::Duration;

use rand_chacha::ChaCha12Rng;

/// Rounds the automatic send pace remembers: its pace is the largest of their estimates.
pub const PACE_MEMORY: usize = 4;

/// The earliest a VN sends its chunk, counted from its RN's start of the round (then the jitter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendPace {
    /// A fixed pace: set near the slowest node's training time, every VN sends at about the same time
    /// whatever its own node's speed, so chunk arrival times stop telling siblings apart — at no round cost,
    /// since a round waits for its slowest neighbour's chunk anyway. Zero: send as soon as chunk and overlay
    /// are there.
    Fixed(Duration),
    /// Learnt from the network, never below `floor`: after each round, how long after our node's round start
    /// the last neighbour's chunk came, less the send jitter (the slowest neighbour's training, about); the
    /// pace used is the largest of the last [`PACE_MEMORY`] such estimates. No operator setting to get
    /// wrong, and it follows a network that slows down or speeds up.
    Auto { floor: Duration },
}

impl Default for SendPace {
    fn default() -> Self {
        SendPace::Fixed(Duration::ZERO)
    }
}

impl SendPace {
    /// The pace from a node config's two settings (`send_pace_ms`, `send_pace_auto`): with `auto`, the
    /// fixed pace is the floor.
    pub fn from_settings(pace: Duration, auto: bool) -> Self {
        if auto {
            SendPace::Auto { floor: pace }
        } else {
            SendPace::Fixed(pace)
        }
    }
}

/// A VN's send timing and what the automatic pace has learnt.
#[derive(Debug, Clone)]
pub(crate) struct SendSchedule {
    /// Upper bound of the random delay before a VN sends its chunk.
    jitter: Duration,
    pace: SendPace,
    /// The automatic pace's latest estimates.
    estimates: VecDeque<Duration>,
    /// No scheduled send is due before this (a lower bound: the earliest send time handed out since the
    /// exchanges were last looked at). Every input asks whether a send is due; most find none.
    earliest_pending: Option<Duration>,
}

impl SendSchedule {
    pub(crate) fn new(jitter: Duration, pace: SendPace) -> Self {
        Self {
            jitter,
            pace,
            estimates: VecDeque::with_capacity(PACE_MEMORY),
            earliest_pending: None,
        }
    }

    /// Whether a send scheduled here may be due at `now` (if not, none is).
    pub(crate) fn maybe_due(&self, now: Duration) -> bool {
        self.earliest_pending.is_some_and(|e| e <= now)
    }

    /// The exchanges were looked at: `earliest` is the first send still scheduled (`None`: none is).
    pub(crate) fn rest_due_from(&mut self, earliest: Option<Duration>) {
        self.earliest_pending = earliest;
    }

    /// When our chunk of a round goes out, decided once chunk and neighbours are there (`now`): the round's
    /// start (`rn_started`, if known) plus the pace, not before now, plus this VN's own jitter.
    pub(crate) fn send_at(
        &mut self,
        rn_started: Option<Duration>,
        now: Duration,
        rng: &mut ChaCha12Rng,
    ) -> Duration {
        let jitter = self.jitter.mul_f64(rand::Rng::random::<f64>(rng));
        let pace = match self.pace {
            SendPace::Fixed(pace) => pace,
            SendPace::Auto { floor } => self
                .estimates
                .iter()
                .copied()
                .max()
                .unwrap_or_default()
                .max(floor),
        };
        let earliest = rn_started.map_or(now, |started| (started + pace).max(now));
        let at = earliest + jitter;
        self.earliest_pending = Some(self.earliest_pending.map_or(at, |e| e.min(at)));
        at
    }

    /// A round complete before its deadline: its last neighbour's copy came `last_copy` into a round that
    /// started at `started`. The automatic pace learns from it; a fixed one ignores it.
    pub(crate) fn learn(&mut self, started: Duration, last_copy: Duration) {
        if !matches!(self.pace, SendPace::Auto { .. }) {
            return;
        }
        if self.estimates.len() == PACE_MEMORY {
            self.estimates.pop_front();
        }
        self.estimates.push_back(
            last_copy
                .saturating_sub(started)
                .saturating_sub(self.jitter),
        );
    }
}
