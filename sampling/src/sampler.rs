//! [`Sampler`]: Cyclon peer sampling and the per-round overlay builder composed once, for every caller.
//!
//! A VN needs both state machines: Cyclon keeps its view of random other VNs, and the overlay builder sends
//! proposals to, and forwards walks through, that view. This type owns the two, feeds the builder the current
//! view, and merges their outputs into one stream; the node's VN engine and the overlay simulator both hold a
//! `Sampler`, so the overlay studies run exactly the composition the node runs.
//!
//! # Contract (after quinn-proto's `poll_timeout`)
//! * [`Sampler::handle`] takes one [`SamplerInput`] at local time `now` and appends [`SamplerOutput`]s.
//! * [`Sampler::poll_timeout`] is the earliest time at which the caller must feed [`SamplerInput::Tick`];
//!   ask it after every `handle`. There is no timer output: the deadline is always recomputed from state.
//! * Outputs come in a fixed order — Cyclon's before the builder's within one input — so a driver that sends
//!   them in order is deterministic.
//!
//! # Routing
//! | input | Cyclon | overlay builder |
//! |---|---|---|
//! | `Join` | joins with the bootstrap entries, starts shuffling | — |
//! | `StartRound` | — | starts negotiating the round |
//! | `Message(Cyclon)` / `Message(Overlay)` | handles it / — | — / handles it |
//! | `SendFailed` | drops the peer from the view | drops pending links with it |
//! | `EdgeRefused` | — | stops counting the edge |
//! | `Tick` | due shuffles, timeouts | due sub-steps, retransmissions, freezes |

use std::time::Duration;

use protocol::Round;
use protocol::control::ControlMsg;
use rand_chacha::ChaCha12Rng;

use crate::cyclon::{Cyclon, CyclonConfig, CyclonInput, CyclonOutput};
use crate::overlay::{OverlayBuilder, OverlayConfig, OverlayInput, OverlayOutput};
use crate::{Error, PeerId};

/// Parameters of both state machines.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SamplerConfig {
    pub cyclon: CyclonConfig,
    pub overlay: OverlayConfig,
}

/// What the caller feeds a [`Sampler`].
#[derive(Debug, Clone)]
pub enum SamplerInput<I> {
    /// Put these bootstrap entries into the Cyclon view and start shuffling (first shuffle jittered).
    Join { bootstrap: Vec<I> },
    /// Start negotiating the overlay of `round` now (local clock).
    StartRound { round: Round },
    /// A control message from the authenticated peer `from`.
    Message { from: I, msg: ControlMsg<I> },
    /// A send to `to` failed (dial failure, timeout, connection closed).
    SendFailed { to: I },
    /// `peer` refused our chunk for `round` because it does not count the edge (half-open): stop counting it.
    EdgeRefused { round: Round, peer: I },
    /// `peer`, a neighbour in `round`, sent no chunk by the exchange's deadline.
    Withheld { round: Round, peer: I },
    /// Time passed: due timers fire.
    Tick,
}

/// Which protocol a message belonged to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Cyclon,
    Overlay,
}

/// What a [`Sampler`] asks its caller to do, or tells it.
#[derive(Debug, Clone, PartialEq)]
pub enum SamplerOutput<I> {
    Send {
        to: I,
        msg: ControlMsg<I>,
    },
    /// Round `round`'s overlay is frozen; `neighbours` (sorted) is this VN's neighbour set.
    Frozen {
        round: Round,
        neighbours: Vec<I>,
    },
    /// After the freeze, `peer` left round `round`'s neighbour set (a `Drop` or a refusal).
    EdgeDropped {
        round: Round,
        peer: I,
    },
    /// A shuffle with `peer` got no answer (or its send failed); `peer` left the view.
    ShuffleTimedOut {
        peer: I,
    },
    /// A message failed validation and was ignored.
    Invalid {
        from: I,
        protocol: Protocol,
    },
}

/// One VN's peer sampling: a Cyclon view and the overlay negotiation of its open rounds.
#[derive(Debug, Clone)]
pub struct Sampler<I> {
    cyclon: Cyclon<I>,
    overlay: OverlayBuilder<I>,
    cyclon_out: Vec<CyclonOutput<I>>,
    overlay_out: Vec<OverlayOutput<I>>,
}

impl<I: PeerId> Sampler<I> {
    /// A sampler for `me`. The two RNGs are this identity's [`crate::vn_rng`] streams (`Cyclon`, `Overlay`):
    /// siblings never share one.
    pub fn new(
        me: I,
        cfg: SamplerConfig,
        cyclon_rng: ChaCha12Rng,
        overlay_rng: ChaCha12Rng,
    ) -> Result<Self, Error> {
        Ok(Self {
            cyclon: Cyclon::new(me.clone(), cfg.cyclon, cyclon_rng)?,
            overlay: OverlayBuilder::new(me, cfg.overlay, overlay_rng)?,
            cyclon_out: Vec::new(),
            overlay_out: Vec::new(),
        })
    }

    pub fn id(&self) -> &I {
        self.cyclon.id()
    }

    pub fn cyclon(&self) -> &Cyclon<I> {
        &self.cyclon
    }

    pub fn overlay(&self) -> &OverlayBuilder<I> {
        &self.overlay
    }

    /// Sub-steps of `substep` for the overlays started from now on ([`OverlayBuilder::set_substep`]).
    pub fn set_substep(&mut self, substep: std::time::Duration) {
        self.overlay.set_substep(substep);
    }

    /// Shortens the sub-steps still to come in running overlays ([`OverlayBuilder::shorten_running`]).
    pub fn shorten_running(&mut self, now: Duration, substep: Duration) {
        self.overlay.shorten_running(now, substep);
    }

    /// Restores a saved Cyclon view ([`Cyclon::restore`]); join afterwards to fill the rest.
    pub fn restore_view(&mut self, now: Duration, saved: Vec<protocol::control::ViewEntry<I>>) {
        self.cyclon.restore(now, saved);
    }

    /// The peers of the current Cyclon view.
    pub fn view(&self) -> Vec<I> {
        self.cyclon.peers()
    }

    /// Established neighbours of `round` (sorted), frozen or not; `None` if the round is unknown.
    pub fn neighbours(&self, round: Round) -> Option<Vec<I>> {
        self.overlay.neighbours(round)
    }

    /// Whether this VN counts the edge to `peer` in `round` (chunks travel only over counted edges).
    pub fn is_neighbour(&self, round: Round, peer: &I) -> bool {
        self.overlay.is_neighbour(round, peer)
    }

    /// Whether `round`'s overlay has any link (offered, committed or counted) with `peer`.
    pub fn has_link(&self, round: Round, peer: &I) -> bool {
        self.overlay.has_link(round, peer)
    }

    /// The earliest time the caller must feed [`SamplerInput::Tick`]; `None` when nothing is pending.
    pub fn poll_timeout(&self) -> Option<Duration> {
        match (self.cyclon.next_timeout(), self.overlay.next_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Feeds one input; appends what to do to `out` (Cyclon's outputs first).
    pub fn handle(
        &mut self,
        now: Duration,
        input: SamplerInput<I>,
        out: &mut Vec<SamplerOutput<I>>,
    ) {
        match input {
            SamplerInput::Join { bootstrap } => self.cyclon.join(now, bootstrap),
            SamplerInput::StartRound { round } => {
                self.overlay_input(now, OverlayInput::StartRound { round })
            }
            SamplerInput::Message {
                from,
                msg: ControlMsg::Cyclon(msg),
            } => self.cyclon.handle(
                now,
                CyclonInput::Message { from, msg },
                &mut self.cyclon_out,
            ),
            SamplerInput::Message {
                from,
                msg: ControlMsg::Overlay(msg),
            } => self.overlay_input(now, OverlayInput::Message { from, msg }),
            SamplerInput::SendFailed { to } => {
                let input = CyclonInput::SendFailed { to: to.clone() };
                self.cyclon.handle(now, input, &mut self.cyclon_out);
                self.overlay_input(now, OverlayInput::SendFailed { to });
            }
            SamplerInput::EdgeRefused { round, peer } => {
                self.overlay_input(now, OverlayInput::EdgeRefused { round, peer })
            }
            SamplerInput::Withheld { round, peer } => {
                self.overlay_input(now, OverlayInput::Withheld { round, peer })
            }
            SamplerInput::Tick => {
                self.cyclon
                    .handle(now, CyclonInput::Tick, &mut self.cyclon_out);
                self.overlay_input(now, OverlayInput::Tick);
            }
        }
        self.drain(out);
    }

    /// The overlay builder sees the view as it is after Cyclon handled the same input.
    fn overlay_input(&mut self, now: Duration, input: OverlayInput<I>) {
        self.overlay
            .handle(now, input, self.cyclon.peer_ids(), &mut self.overlay_out);
    }

    fn drain(&mut self, out: &mut Vec<SamplerOutput<I>>) {
        out.extend(self.cyclon_out.drain(..).map(|o| match o {
            CyclonOutput::Send { to, msg } => SamplerOutput::Send {
                to,
                msg: ControlMsg::Cyclon(msg),
            },
            CyclonOutput::ShuffleTimedOut { peer } => SamplerOutput::ShuffleTimedOut { peer },
            CyclonOutput::Invalid { from } => SamplerOutput::Invalid {
                from,
                protocol: Protocol::Cyclon,
            },
        }));
        out.extend(self.overlay_out.drain(..).map(|o| match o {
            OverlayOutput::Send { to, msg } => SamplerOutput::Send {
                to,
                msg: ControlMsg::Overlay(msg),
            },
            OverlayOutput::Frozen { round, neighbours } => {
                SamplerOutput::Frozen { round, neighbours }
            }
            OverlayOutput::EdgeDropped { round, peer } => {
                SamplerOutput::EdgeDropped { round, peer }
            }
            OverlayOutput::Invalid { from } => SamplerOutput::Invalid {
                from,
                protocol: Protocol::Overlay,
            },
        }));
    }

    /// Checks both state machines' invariants (see theirs); for tests and simulations, after every event.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.cyclon.check_invariants()?;
        self.overlay.check_invariants()
    }
}
