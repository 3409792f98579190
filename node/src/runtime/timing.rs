//! [`Timing`]: the protocol's real-network timing, as a node config or a builder sets it.

use std::time::Duration;

use sampling::{CyclonConfig, OverlayConfig, SamplerConfig};
use serde::{Deserialize, Serialize};

use crate::engine::{SendPace, VnTiming};

/// Rounds negotiated ahead on loopback (see `Timing::loopback`); the node simulator uses it too.
pub const LOOPBACK_LOOKAHEAD: u64 = 12;

/// The default of [`Timing::release_delay_us`] (every timing): off. In the default procs network the VNs'
/// own threads ([`Timing::vn_threads`]) took the same-millisecond attack from 0.93-0.98 to 0.51-0.54 alone;
/// delays of mean 4 ms on top read the same (0.52-0.54) at a longer round, and delays alone made it worse
/// (0.99-1.00: a node process that waits for the CPU releases what fell due meanwhile together), so they stay
/// an option (`results/linkage-packets/`, 2026-11-29).
pub const DEFAULT_RELEASE_DELAY_US: u64 = 0;

/// The longest [`Timing::release_delay_us`] accepted: a mean of one second.
pub const MAX_RELEASE_DELAY_US: u64 = 1_000_000;

/// Protocol timing on a real network. The defaults suit a LAN or the Internet with rounds of seconds to
/// minutes; tests shorten them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Timing {
    /// Time between two Cyclon shuffles of one VN (DESIGN §5: ≥ 4 shuffles per round).
    pub cyclon_period_ms: u64,
    /// View entries one Cyclon shuffle swaps (1 ..= the view's 20; DESIGN §5: 8). Each entry a VN learns is
    /// a peer its walks and shuffles may then contact, so this and the period set how many distinct peers a
    /// VN talks to over a run, hence its connections ([`Timing::crowded`]).
    pub cyclon_shuffle_len: usize,
    /// A shuffle without reply after this long removes its target.
    pub shuffle_timeout_ms: u64,
    /// One overlay sub-step; must exceed a round trip. The overlay takes (4r + r + 4) sub-steps. This is the
    /// floor: a VN whose control messages come back late stretches the sub-steps of the rounds it starts, up
    /// to 8× (`node::engine::vn::round_trips`).
    pub substep_ms: u64,
    /// Rounds whose overlay a VN negotiates ahead of its node's round (0 ..= `protocol::control::MAX_LOOKAHEAD`):
    /// rounds stop waiting for the overlay once this is at least the overlay window / the round's work.
    pub overlay_lookahead: u64,
    /// How long a VN waits for its neighbours' chunks after sending its own.
    pub exchange_timeout_ms: u64,
    /// Upper bound of each VN's random delay before sending its chunk, so sibling VNs do not all send at the
    /// instant their node finishes training (DESIGN §5). Not applied while `chunk_slots` is on (the default):
    /// the grid's offsets replace it.
    pub send_jitter_ms: u64,
    /// The earliest each VN sends its chunk, counted from its node's start of the round (`VnConfig::send_pace`, [`SendPace`]):
    /// about the slowest node's training time makes chunk timing say nothing about siblings. 0: off.
    pub send_pace_ms: u64,
    /// Learn the pace from when neighbours' chunks come ([`SendPace::Auto`]); `send_pace_ms` is then
    /// its floor.
    pub send_pace_auto: bool,
    /// Mean of each VN's random delay before what it sends leaves, in µs (0: off): every message of every kind,
    /// held after the engine produced it and released on the VN's own exponential schedule, drawn from its own
    /// key (`net::release`), so that sibling VNs woken together do not send within the same millisecond. It is
    /// paid on every hop a round waits for (a chunk and its reply, an overlay walk's hops).
    pub release_delay_us: u64,
    /// Each VN runs on a thread and runtime of its own (`net::vn_task`), so that one wake-up of its process
    /// never serves two siblings: what links siblings by same-millisecond packets otherwise (ROC-AUC 0.93-0.98
    /// in the default procs network against 0.51-0.54 with it, `results/linkage-packets/`).
    pub vn_threads: bool,
    /// Chunks leave on a grid of slots on the wall clock, shared by every node, each VN at an offset of its
    /// own in the slot's first tenth (`net::chunk_slots`), so that when a chunk leaves says nothing about when
    /// its node finished training: chunk timing linked siblings at ROC-AUC 0.69-0.79 in the default procs
    /// network without it (`results/linkage-packets/`). On by default; the VN's send jitter
    /// (`send_jitter_ms`) is then not applied, the grid's offsets take its place.
    pub chunk_slots: bool,
    /// The grid's period if fixed, in ms; 0 (the default): each VN adapts it to the work between two of its
    /// chunks, on a ladder of periods every node shares (`net::chunk_slots`).
    pub chunk_slot_ms: u64,
    /// Start overlay walks that name no origin, their answers relayed back along the path, so that no message shows
    /// its first hop (`sampling::OverlayConfig::hide_origin`; issue 13). It costs answers as many hops as the walk
    /// took: about 1.4-1.8× the overlay messages, and more VNs short of r edges unless sub-steps are several round
    /// trips long (`docs/privacy-attacks.md`, "Walks that hide their origin", has the figures).
    pub hide_walk_origin: bool,
    /// Gossip before round 0, so views are mixed (and peers are up) when the first overlay is built.
    pub warmup_ms: u64,
    /// A socket that has not completed its handshake (pre-shared key, noise, yamux) this long after it was
    /// accepted or dialled is closed (`node::net::limits`).
    pub handshake_timeout_ms: u64,
    /// A connection that has answered no ping for this long is closed, and a peer left with no connection
    /// that answers is treated as gone: the rounds stop waiting for its chunks (`net::liveness`). A peer
    /// that vanishes without a reset (power cut, partition) is noticed at most this + 1 s after its last
    /// answer. At least `net::liveness::MIN_PEER_SILENCE` (3 s).
    pub peer_silence_ms: u64,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            cyclon_period_ms: 1000,
            cyclon_shuffle_len: CyclonConfig::default().shuffle_len,
            shuffle_timeout_ms: 2000,
            substep_ms: 200,
            // Window 4.8 s at r = 4: rounds down to ~1.2 s do not wait for it.
            overlay_lookahead: 4,
            exchange_timeout_ms: 30_000,
            send_jitter_ms: 1000,
            send_pace_ms: 0,
            send_pace_auto: false,
            release_delay_us: DEFAULT_RELEASE_DELAY_US,
            vn_threads: true,
            chunk_slots: true,
            chunk_slot_ms: 0,
            hide_walk_origin: false,
            warmup_ms: 5000,
            handshake_timeout_ms: crate::net::limits::HANDSHAKE_TIMEOUT.as_millis() as u64,
            peer_silence_ms: crate::net::liveness::DEFAULT_PEER_SILENCE.as_millis() as u64,
        }
    }
}

impl Timing {
    /// Short timing for loopback tests and local testnets.
    pub fn loopback() -> Self {
        Self {
            cyclon_period_ms: 250,
            shuffle_timeout_ms: 500,
            // A loopback round trip is well under a millisecond, but with every node of a testnet training on
            // the same few cores a VN's event loop can wait tens of milliseconds for a core. This is the floor
            // of the sub-step: each VN stretches its own to two of the round trips it measures
            // (`node::engine::vn::round_trips`), and a busy run does. The window (5r + 4 sub-steps,
            // `OverlayConfig::deadline`) is 0.72 s at r = 4 and its grace of 4 sub-steps covers the skew of
            // round starts, which the rounds themselves keep within an exchange. The floor matters most for
            // round 0, whose overlay is negotiated from scratch at twice the floor (`INITIAL_STRETCH`): 30 ms
            // against 40 took round 0 from 1.04-1.16 s to 0.59-0.66 s and the default release run's mean round
            // from 0.143-0.150 s (6 runs) to 0.107-0.148 s (8 runs), at 3.98-4.00 of 4 neighbours in both; at
            // MovieLens k = 2 from 0.130-0.138 s (7 runs) to 0.122-0.124 s (4 runs), 3.97-3.99 neighbours
            // (2026-11-26, 2 cores, `target/release/testnet --plain [--dataset movielens ...] --substep-ms
            // 30|40`). 20 ms gave round 0 in 0.21-0.27 s but spikes of 0.5-0.9 s in the first rounds of the
            // default run, and 3.95-3.96 neighbours at MovieLens.
            substep_ms: 30,
            // Rounds down to W / L (0.06 s at r = 4, 0.11 s at r = 8) do not wait for the overlay. Each open
            // negotiation adds its walks to the control traffic, and a VN's event loop that falls behind makes
            // replies miss their sub-step, rounds freeze short and short VNs propose more. With fixed
            // sub-steps the overlay collapsed past the cores' capacity instead of slowing down (a slower
            // two-core machine: 0.28 of 4 neighbours in the default release run, control round trips at a
            // median of 0.9 s); the sub-steps are now paced by the round trips each VN measures
            // (`node::engine::vn::round_trips`: 3.92 there), which also spaces the negotiations further apart.
            // Measured on a faster two-core machine before the pacing (results/round-speed, `cargo bench -p
            // testnet --bench rounds`): release, 12 gives 0.098 s rounds at MovieLens k = 2 with 3.98 of 4
            // neighbours (16: 0.08 s there, but k = 4 saturates: 3.81 neighbours, 0.21 s). Debug builds used
            // 4 while the workspace crates were built at opt-level 0-1 (they handled messages several times
            // slower); the dev profile now optimises them (the workspace `Cargo.toml`), and `cargo run -p
            // testnet` with 12 ran its mean round at 0.149 s against 0.294 s with 4 (one run each, 40 ms
            // floor).
            overlay_lookahead: LOOPBACK_LOOKAHEAD,
            exchange_timeout_ms: 5000,
            // Sibling VNs get their chunks at the same instant: each waits its own random delay up to this
            // before sending (DESIGN §5). It is paid once per round, so it stays a fraction of a fast round.
            send_jitter_ms: 20,
            // Connections in its first half (`net::preconnect::SPREAD_FRACTION`), round 0's overlay in its
            // tail (`prepare_lead`): 3 s holds both at r <= 4 (a stretched window of 1.47 s), so round 0 waits
            // for no negotiation. With 1.5 s the tail was cut to 0.75 s, round 0 waited the other 0.72 s, and
            // in the default run the first rounds' negotiations overlapped the last handshakes (connections
            // were still being set up 2 s into the run, both cores busy): rounds 1-8 took 0.2-1.9 s each. The
            // default release run (`target/release/testnet --plain --warmup-ms 1500|3000`, 8 runs each,
            // interleaved, 2026-11-27): mean round 0.155-0.331 s -> 0.096-0.169 s, wall 4.9-8.3 s ->
            // 5.0-6.5 s. At MovieLens k = 2 the rounds after round 0 did not change and the run's wall time
            // grew by about 0.8 s: there round 0's time only moves into the warm-up.
            warmup_ms: 3000,
            ..Self::default()
        }
    }

    /// Timing for hundreds of VNs sharing a few cores (`testnet --timing crowded`, what `--timing auto` picks
    /// above 256 VNs): the LAN timing with 400 ms sub-steps, one round negotiated ahead instead of four, a
    /// Cyclon shuffle every 20 s that swaps one view entry instead of eight every second, and a 20 s warm-up.
    ///
    /// Why, measured with 512 VNs in one process on two cores (`testnet --nodes 64 --vns 8 --degree 8 --rounds 5
    /// --transport memory`, `results/round-speed/README.md`, "In-process scale"): the cores and the memory go to
    /// connections, a noise handshake and about 110 KB (both ends) for each pair of VNs that ever spoke. With the
    /// LAN timing 48,000 connections were open by the end of round 0 (every VN negotiated rounds 0 to 4 at once,
    /// with no connection yet), and the overlay formed 0.2-0.6 of 8 neighbours in round 0 and
    /// 2.9-3.6 over five rounds. One round ahead lets the sub-steps, paced by the round trips each VN
    /// measures, stretch with the load instead of five negotiations running past it; the 20 s warm-up (its
    /// dials and round 0's negotiation, `prepare_lead`: 10 s) and the 400 ms sub-steps do the same for round
    /// 0, negotiated while every connection is new. Those gave 7.68 of 8 neighbours, but 9.7-10.1 GiB: views
    /// that swapped 8 entries per shuffle every 5 s had shown each VN most of the network within the run,
    /// and its walks and shuffles went to whatever its view held (88,000-94,000 connections, of 130,816
    /// pairs). A view that changes by one entry every 20 s keeps the walks on peers already connected: 7.89
    /// of 8 in 2.98 GiB with rounds of 50 s instead of 97 (7.96-7.97 in 2.50-2.55 GiB once connection handlers
    /// were boxed, `net::boxed`). In the overlay simulator (`overlay_report --substep-ms 400 --warmup-ms
    /// 20000 --cyclon-period-ms 8900 --shuffle-len 1`, about two one-entry shuffles per round as here) each
    /// VN contacts 60 peers over five rounds against 299 with the old shuffles (`--cyclon-period-ms 1250`,
    /// eight entries about 15 times a round), at 0.3-0.7 % deficiency and the λ₂ of a uniform random graph.
    /// That is fewer shuffles per round than DESIGN §5's four: the rounds' graphs, not the views, are what
    /// must be random, and the report shows they are.
    /// What it trades: a VN's walks leave through the same few view entries for longer, so a peer in its view
    /// sees more of its first hops; the linkage audits were measured with the other timings, not this one.
    pub fn crowded() -> Self {
        Self {
            substep_ms: 400,
            cyclon_period_ms: 20_000,
            cyclon_shuffle_len: 1,
            overlay_lookahead: 1,
            warmup_ms: 20_000,
            ..Self::default()
        }
    }

    /// How long before the end of its warm-up an RN has its VNs negotiate the overlays of its first round
    /// (`ToVirtualNode::Prepare`), so that round 0 does not wait a whole overlay window for its own negotiation:
    /// that window at the network's start (sub-steps stretched by `round_trips::INITIAL_STRETCH`, plus the
    /// start offset), but not before the warm-up's connections are open (`net::preconnect`, its first half),
    /// which also leaves the views two or more Cyclon shuffles to mix. Negotiating while the handshakes ran
    /// made the control round trips spike and stretched the first rounds' sub-steps (measured in the default
    /// release run: rounds 1-5 of 0.5-1.8 s against 0.1 s).
    pub fn prepare_lead(&self, degree: usize) -> Duration {
        let substep = Duration::from_millis(self.substep_ms);
        let window = OverlayConfig::new(degree, substep).deadline()
            * crate::engine::vn::round_trips::INITIAL_STRETCH
            + substep;
        let after_dials = Duration::from_millis(self.warmup_ms)
            .mul_f64(1.0 - crate::net::preconnect::SPREAD_FRACTION);
        window.min(after_dials)
    }

    /// The Cyclon configuration this timing gives every VN.
    pub(crate) fn cyclon(&self) -> CyclonConfig {
        CyclonConfig {
            period: Duration::from_millis(self.cyclon_period_ms),
            shuffle_timeout: Duration::from_millis(self.shuffle_timeout_ms),
            shuffle_len: self.cyclon_shuffle_len,
            ..CyclonConfig::default()
        }
    }

    /// Refuses a timing no VN could start with: Cyclon settings outside their bounds (a shuffle length
    /// outside 1 ..= the view size, a zero period or shuffle timeout), a release delay over a second, or a
    /// peer silence so short that a late pong would close a live connection.
    pub fn validate(&self) -> Result<(), String> {
        let min_silence = crate::net::liveness::MIN_PEER_SILENCE.as_millis() as u64;
        if self.peer_silence_ms < min_silence {
            return Err(format!(
                "peer_silence_ms {} under {min_silence}",
                self.peer_silence_ms
            ));
        }
        if self.release_delay_us > MAX_RELEASE_DELAY_US {
            return Err(format!(
                "release_delay_us {} over {MAX_RELEASE_DELAY_US}",
                self.release_delay_us
            ));
        }
        self.cyclon().validate().map_err(|e| format!("cyclon: {e}"))
    }

    /// The chunk grid's period ([`Timing::chunk_slots`], [`Timing::chunk_slot_ms`]).
    pub fn chunk_slot_period(&self) -> crate::net::chunk_slots::Period {
        use crate::net::chunk_slots::Period;
        match (self.chunk_slots, self.chunk_slot_ms) {
            (false, _) => Period::Off,
            (true, 0) => Period::adaptive(),
            (true, ms) => Period::Fixed(Duration::from_millis(ms)),
        }
    }

    /// The mean of each VN's release delay ([`Timing::release_delay_us`]).
    pub fn release_delay(&self) -> Duration {
        Duration::from_micros(self.release_delay_us)
    }

    /// The timing every VN of a run takes from this one (its configuration is then made by
    /// [`VnConfig::new`](crate::engine::VnConfig::new), as the simulator's is), at overlay degree `degree`.
    pub fn vn_timing(&self, degree: usize) -> VnTiming {
        VnTiming {
            sampler: SamplerConfig {
                cyclon: self.cyclon(),
                overlay: OverlayConfig {
                    hide_origin: self.hide_walk_origin,
                    ..OverlayConfig::new(degree, Duration::from_millis(self.substep_ms))
                },
            },
            exchange_timeout: Duration::from_millis(self.exchange_timeout_ms),
            // The chunk grid's offsets replace the jitter: a jitter before the grid only spreads the
            // nodes' departures over more slots.
            send_jitter: if self.chunk_slots {
                Duration::ZERO
            } else {
                Duration::from_millis(self.send_jitter_ms)
            },
            send_pace: SendPace::from_settings(
                Duration::from_millis(self.send_pace_ms),
                self.send_pace_auto,
            ),
            lookahead: self.overlay_lookahead,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The loopback warm-up holds its dials and, after them, round 0's whole negotiation window at the
    /// overlay degrees of the default run and the MovieLens setting (r = 4), so round 0 does not wait for it.
    #[test]
    fn the_loopback_warmup_holds_its_dials_and_round_0s_window() {
        let t = Timing::loopback();
        for degree in [2, 4] {
            let substep = Duration::from_millis(t.substep_ms);
            let window = OverlayConfig::new(degree, substep).deadline()
                * crate::engine::vn::round_trips::INITIAL_STRETCH
                + substep;
            assert_eq!(t.prepare_lead(degree), window, "r = {degree}");
            let dials =
                Duration::from_millis(t.warmup_ms).mul_f64(crate::net::preconnect::SPREAD_FRACTION);
            assert!(
                dials + window <= Duration::from_millis(t.warmup_ms),
                "r = {degree}"
            );
        }
    }
}
