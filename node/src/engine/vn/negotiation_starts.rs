//! [`NegotiationStarts`]: when a VN starts negotiating the overlay of each round ahead, and with what sub-step.
//! Each VN starts at its own random offset (siblings told at the same instant do not start in step;
//! DESIGN §5), spaced so that negotiations run evenly phased, with sub-steps stretched by the control round
//! trips this VN measures (`round_trips.rs`).

use std::time::Duration;

use rand_chacha::ChaCha12Rng;

use super::round_trips::{INITIAL_STRETCH, RoundTrips};

/// A VN's negotiation schedule: its last start, and what paces the sub-steps.
#[derive(Debug)]
pub(crate) struct NegotiationStarts {
    /// Rounds negotiated ahead of the RN's round.
    lookahead: u64,
    /// Upper bound of the random delay before this VN starts negotiating a round (its own phase).
    start_jitter: Duration,
    /// When the last scheduled negotiation was due (before its jitter): the next one starts at least a
    /// spacing later.
    last_start: Option<Duration>,
    /// Control round trips the driver measured (`VnInput::ControlRoundTrip`). None in the simulator.
    round_trips: RoundTrips,
    /// A `Prepare` came: this VN is at the network's start, driven by a node's shell, which measures round
    /// trips (the simulator sends no `Prepare`). Until it has measured any, its overlays take the cold
    /// start's stretch, as its peers' that have (`RoundTrips::next_substep`).
    prepared: bool,
    /// No negotiation scheduled here is due before this (a lower bound: the earliest start handed out since
    /// the last look at the exchanges). Every input asks whether one is due; most find none, and need not
    /// walk the exchanges to learn it.
    earliest_due: Option<Duration>,
}

impl NegotiationStarts {
    pub(crate) fn new(lookahead: u64, start_jitter: Duration) -> Self {
        Self {
            lookahead,
            start_jitter,
            last_start: None,
            round_trips: RoundTrips::default(),
            prepared: false,
            earliest_due: None,
        }
    }

    /// A `Prepare` came (see the field).
    pub(crate) fn prepare(&mut self) {
        self.prepared = true;
    }

    pub(crate) fn record_round_trip(&mut self, rtt: Duration) {
        self.round_trips.record(rtt);
    }

    /// Least time between two negotiation starts.
    ///
    /// Started by the RN's rounds (`started`): the window W as the sub-steps now make it (`window_now`) over
    /// the lookahead L. Negotiations started together run their sub-steps in phase, so every proposal walk of
    /// all of them leaves at the same instants and the bursts delay each other past the sub-step (measured in
    /// one process: 1.9 of 4 neighbours when 9 rounds started at once). Starts W / L apart keep about L
    /// negotiations open, evenly phased, and cost nothing once running: rounds cannot come faster than one
    /// per W / L anyway.
    ///
    /// Scheduled by a `Prepare` (rounds 0 ..= lookahead, before any round has begun): the configured window
    /// (`window_configured`), stretched as for the network's start (`INITIAL_STRETCH`), over the lookahead —
    /// the same at every VN. Later starts follow the RN's rounds, so each VN's own stretch only slows them; a
    /// prepared batch follows nothing but this spacing, and scaled by each VN's stretch at that instant (some
    /// VNs had measured round trips, some not) the batch's last rounds started up to a window apart at
    /// different VNs (measured in the default run: round 12 started 1.76-2.73 s into the run with 0.96 s
    /// windows, and rounds 10-12 formed 3.69-3.88 of 4 neighbours against 3.94-4.00 for the others). The
    /// unstretched window packed the batch so densely that the load stretched rounds 6-10 to 2-3.6 s
    /// windows, and those rounds waited for them (mean round 0.16-0.21 s against 0.15 s).
    pub(crate) fn spacing(
        &self,
        started: bool,
        window_now: Duration,
        window_configured: Duration,
    ) -> Duration {
        match (self.lookahead, started) {
            (0, _) => Duration::ZERO,
            (l, true) => window_now / l as u32,
            (l, false) => window_configured * INITIAL_STRETCH / l as u32,
        }
    }

    /// When the next negotiation starts: at least `spacing` after the last one, not before `now`, plus this
    /// VN's own random offset.
    pub(crate) fn next_start(
        &mut self,
        now: Duration,
        spacing: Duration,
        rng: &mut ChaCha12Rng,
    ) -> Duration {
        let offset = self.start_jitter.mul_f64(rand::Rng::random::<f64>(rng));
        let base = self.last_start.map_or(now, |t| now.max(t + spacing));
        self.last_start = Some(base);
        let at = base + offset;
        self.earliest_due = Some(self.earliest_due.map_or(at, |e| e.min(at)));
        at
    }

    /// Whether a negotiation scheduled here may be due at `now` (if not, none is).
    pub(crate) fn maybe_due(&self, now: Duration) -> bool {
        self.earliest_due.is_some_and(|e| e <= now)
    }

    /// The exchanges were looked at: `earliest` is the first start still scheduled (`None`: none is).
    pub(crate) fn rest_due_from(&mut self, earliest: Option<Duration>) {
        self.earliest_due = earliest;
    }

    /// The sub-step of the overlays started from now on: the `configured` one, stretched by the round trips
    /// measured (`round_trips.rs`), and at the network's start (`cold_start`) by the cold start's stretch.
    pub(crate) fn substep(&mut self, configured: Duration, cold_start: bool) -> Duration {
        self.round_trips
            .next_substep(configured, cold_start, self.prepared)
    }

    /// The typical control round trip measured (for logs).
    pub(crate) fn typical_round_trip(&self) -> Option<Duration> {
        self.round_trips.typical()
    }
}
