//! The virtual-node (VN) role, sans-IO: Cyclon peer sampling, the per-round overlay, and chunk exchange.
//!
//! One [`VnEngine`] per VN identity. It takes raw bytes from peers (so every refusal is decoded, checked
//! and counted in one place), commands from its real node (RN), and time; it returns what to send, when to
//! wake it, and what to hand its RN. The libp2p shell and the in-memory simulator drive the same code.
//!
//! Round t at one VN:
//! 1. `StartRound(t)` (sent by the RN when it starts training round t): the VN makes sure the overlays of
//!    rounds t ..= t + `lookahead` are being negotiated, each started at a random offset in `[0, start_jitter]`
//!    drawn from the VN's own RNG (so siblings, told at the same instant, do not start in step; DESIGN §5).
//!    The overlay of round t was thus usually started `lookahead` rounds earlier and is frozen by the time
//!    the RN has trained: the round waits for its work, not for its negotiation.
//!    A fresh RN sends `Prepare(0)` in the tail of its warm-up: the same, without starting the round, so
//!    that round 0's overlay is negotiated before the round begins (its starts spaced alike at every VN,
//!    `prepare_spacing`).
//! 2. `Exchange(frame)`: the RN's chunk for t. Once the overlay of t is frozen, the VN waits a random delay
//!    in `[0, send_jitter]` drawn from its own RNG — so that sibling VNs, which get their chunks at the same
//!    instant, do not all send at once and link themselves by timing (DESIGN §5) — then sends the chunk to
//!    every confirmed neighbour, and the exchange deadline starts: `exchange_timeout` later the VN reports
//!    `Done` whatever is missing, so a crashed or slow neighbour costs at most its chunk, never the round.
//! 3. Chunks from peers: accepted only from confirmed neighbours of that round, once per neighbour, with a
//!    known chunk index, the right length and finite values within the model's range ([`crate::engine::ValueBounds`]);
//!    each accepted copy goes to the RN at once.
//!    Chunks that arrive before the round is frozen wait (bounded) until the freeze decides.
//!    A refusal for `NotNeighbour` tells the sender the edge is half-open; it stops counting it.
//!
//! # Per-edge exchanges (PDMM's Δz, one frame per neighbour)
//! Instead of `Exchange(frame)` the RN sends `PerEdge(t)`. Once the overlay of t is frozen the VN answers
//! `Edges { t, slots }`: its **edge slots**, the sorted neighbour list fixed at the freeze — with a static
//! graph ([`Graph::Static`]) the graph of exchange 0, so slot i is the same neighbour in every exchange of the
//! run. The RN computes one frame per slot and sends `PerEdgeFrames`; the VN sends frame i to the neighbour in
//! slot i. A VN whose [`VnConfig::edge_slots`] is set hands every accepted copy over as `ReceivedOnEdge { slot,
//! frame }`, so the RN can keep per-edge state without learning any identity (a slot is a position, not a
//! peer). At the end of a per-edge exchange the VN reports, per slot, whether the neighbour accepted our frame
//! (`DeliveredOnEdges`, just before `Done`), so that both ends of an edge can agree on whether the exchange
//! happened on it.
//!
//! # Churn (issue 15)
//! A peer whose connection closed and could not be dialled again is reported by the shell as
//! `VnInput::PeerGone`: the open exchanges stop waiting for its chunk and the overlays, frozen ones included,
//! stop counting it (`on_peer_gone`). A VN built [`VnEngine::with_round_probes`] also asks peers it can dial
//! which exchange they are at — as a resumed VN joins, and while running once three peers it hears
//! are beyond its window *and* its own latest exchange received no copy — and tells its RN `Behind` when the
//! lower median of the answers is beyond it (`start_probe`, `decide_probe`). What peers claim never moves a
//! node by itself: those peers may be one node's k identities (issue 44, `catch_up.rs`).
//!
//! An edge refused or dropped after the freeze **keeps its slot**: the slot count never changes within an
//! exchange (and with a static graph never in the run), the frame for a dropped slot is not sent, nothing is
//! received on it, and its delivery flag is false. The algorithm decides what a silent slot means (PDMM
//! leaves that edge's duals unchanged for the round at both ends).
//!
//! # Directed push (EL's local variant)
//! A VN in [`Graph::Push`] negotiates no overlay: when its RN starts a round it draws r peers
//! (the overlay degree) uniformly from its own Cyclon view and sends its chunk to them, and it accepts one
//! chunk per round from any allowed peer (early ones wait, bounded, until its RN starts that round). No
//! receiver knows its in-degree, so a push round ends at its deadline (`exchange_timeout` after sending),
//! with whatever arrived by then.

//!
//! # Layout: one dispatcher, one room per concern
//! [`VnEngine`] (this file) owns the composed parts and routes every input to them; each part owns its
//! state and decides from what it is given, as quinn-proto's `Pacer` and iroh-gossip's `Topic` do:
//! - `io.rs`: [`VnInput`], [`VnOutput`], [`RefusalKind`] — the vocabulary shared by the rooms;
//! - `config.rs`: [`VnConfig`], built once by [`VnConfig::new`] from [`VnTiming`] and [`VnRun`]; the
//!   exchange mode is the algorithm's [`Graph`];
//! - `exchange.rs`: one round's exchange as phase types (`Negotiation`, `Phase`) and the window of them;
//! - `edge_slots.rs`: per-edge exchange (slots, deliveries); `static_graph.rs`: the run's one graph;
//! - `negotiation_starts.rs`: when each overlay negotiation starts and its sub-step (with `round_trips.rs`);
//! - `send_schedule.rs`: when our chunk goes out ([`SendPace`], jitter);
//! - `push.rs`: directed push's targets;
//! - `catch_up.rs`: noticing the network is ahead (with `behind.rs`) and probing it; `round_answer.rs`: what
//!   a round query is answered;
//! - `chunk_check.rs`: what a received frame must be; `peer_limits.rs`: rates per peer;
//!   `claims.rs`: what an overlay message claims.

pub mod behind;
mod catch_up;
mod chunk_check;
mod claims;
mod config;
mod edge_slots;
mod exchange;
mod io;
mod negotiation_starts;
mod peer_limits;
mod push;
mod round_answer;
pub mod round_trips;
mod send_schedule;
mod static_graph;
mod suspects;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use protocol::Round;
use protocol::control::{ControlEnvelope, ControlMsg, CyclonMsg};
use protocol::rnvn::{FromVirtualNode, MAX_EDGE_SLOTS, ToVirtualNode};
use protocol::{ChunkFrame, ChunkReply, RefuseReason};
use sampling::{Protocol, Sampler, SamplerInput, SamplerOutput};

use self::catch_up::{CatchUp, ProbeDecision, Witnessed};
pub(crate) use self::chunk_check::ChunkCheck;
use self::claims::{overlay_claims, progress_shown};
use self::exchange::{Exchange, Exchanges, Negotiation, Own, Phase, micros};
use self::negotiation_starts::NegotiationStarts;
use self::peer_limits::PeerLimits;
use self::round_answer::RoundAnswer;
use self::send_schedule::SendSchedule;
use self::static_graph::StaticGraph;
use super::counters::Counters;
use crate::algo::Graph;

pub use self::catch_up::{JOIN_PROBE_SPREAD, PROBE_PEERS};
pub use self::config::{VnConfig, VnRun, VnTiming};
pub use self::exchange::MAX_PENDING_CHUNKS;
pub use self::io::{RefusalKind, ReplyToken, VnIdentity, VnInput, VnOutput};
pub use self::peer_limits::{
    CONTROL_BURST_PER_ROUND, CONTROL_PER_SUBSTEP_PER_ROUND, ROUND_QUERY_BURST, SHUFFLE_BURST,
};
pub use self::send_schedule::{PACE_MEMORY, SendPace};

// A chunk more than MAX_FUTURE_ROUNDS ahead of the newest round this VN's RN started is refused as `WrongRound`;
// exchange states older than the newest minus MAX_KEPT_ROUNDS are forgotten and their chunks are stale. One
// definition (protocol::control) for the overlay and the exchange.
pub use protocol::control::{MAX_FUTURE_ROUNDS, MAX_KEPT_ROUNDS, MAX_LOOKAHEAD};

/// One virtual node: the dispatcher over its rooms.
pub struct VnEngine<I> {
    me: I,
    cfg: VnConfig,
    sampler: Sampler<I>,
    /// This VN's own stream for its timing and choices: the join shuffle, negotiation offsets, send jitter and
    /// push targets (one stream, drawn in that order of events, so a seed gives one run).
    jitter_rng: rand_chacha::ChaCha12Rng,
    exchanges: Exchanges<I>,
    /// The newest round the RN started (overlays run up to `lookahead` rounds beyond it).
    newest: Option<Round>,
    starts: NegotiationStarts,
    sends: SendSchedule,
    allowed: Box<dyn Fn(&I) -> bool + Send>,
    counters: Counters,
    /// With [`Graph::Static`]: the run's one graph.
    static_graph: StaticGraph<I>,
    limits: PeerLimits<I>,
    chunks: ChunkCheck,
    catch_up: CatchUp<I>,
    round_answer: RoundAnswer,
    suspects: suspects::Suspects<I>,
}

impl<I: VnIdentity> VnEngine<I> {
    /// A VN with its own seeded RNG streams (`cyclon_rng`, `overlay_rng`: derive them from the run seed and
    /// this VN's identity, never shared with a sibling). `allowed` is the permission check: peers for whom it
    /// is false are never sent to, never gossiped, and what they send is dropped.
    pub fn new(
        me: I,
        cfg: VnConfig,
        cyclon_rng: rand_chacha::ChaCha12Rng,
        mut overlay_rng: rand_chacha::ChaCha12Rng,
        allowed: Box<dyn Fn(&I) -> bool + Send>,
    ) -> Result<Self, sampling::Error> {
        use rand::SeedableRng;
        if cfg.lookahead > MAX_LOOKAHEAD {
            return Err(sampling::Error::Config(format!(
                "overlay lookahead {} exceeds {MAX_LOOKAHEAD} rounds",
                cfg.lookahead
            )));
        }
        cfg.values.validate().map_err(sampling::Error::Config)?;
        let jitter_rng = rand_chacha::ChaCha12Rng::from_rng(&mut overlay_rng);
        // The overlay's key with fixed bits flipped, same stream: this VN's own, independent sequence.
        let mut key = overlay_rng.get_seed();
        for (b, c) in key.iter_mut().zip(b"shatter catch-up round probes 01") {
            *b ^= c;
        }
        let mut probe_rng = rand_chacha::ChaCha12Rng::from_seed(key);
        probe_rng.set_stream(overlay_rng.get_stream());
        let answer_rng = rand_chacha::ChaCha12Rng::from_rng(&mut probe_rng);
        let limits = PeerLimits::new(
            cfg.lookahead + 1,
            cfg.sampler.overlay.substep,
            cfg.sampler.cyclon.period,
        );
        let sampler = Sampler::new(me.clone(), cfg.sampler.clone(), cyclon_rng, overlay_rng)?;
        // A peer heard from within an exchange deadline and an overlay window is one still taking part.
        let ahead_window = cfg.exchange_timeout + cfg.sampler.overlay.deadline();
        Ok(Self {
            me,
            sampler,
            jitter_rng,
            exchanges: Exchanges::default(),
            newest: None,
            starts: NegotiationStarts::new(cfg.lookahead, cfg.start_jitter),
            sends: SendSchedule::new(cfg.send_jitter, cfg.send_pace),
            allowed,
            counters: Counters::default(),
            static_graph: StaticGraph::default(),
            limits,
            chunks: ChunkCheck::new(cfg.chunk_lens.clone(), cfg.values),
            catch_up: CatchUp::new(ahead_window, probe_rng),
            round_answer: RoundAnswer::new(cfg.sampler.overlay.deadline(), answer_rng),
            suspects: suspects::Suspects::new(),
            cfg,
        })
    }

    /// Turns on active catch-up: when this VN sees a peer beyond what it accepts (or at join, after a
    /// restart), it asks [`PROBE_PEERS`] peers drawn from `peers` and its Cyclon view which exchange they are
    /// at, and adopts the lower median of the answers if that is beyond its own window (`catch_up.rs`).
    /// `own`: this node's own VNs, never asked (they are exactly as far behind). `resumed_at`: the exchange
    /// a resumed node starts at; the VN counts it as its newest from the start, and probes as it joins.
    /// Drivers that do not call it (the simulator) never probe.
    pub fn with_round_probes(
        mut self,
        peers: Vec<I>,
        own: Vec<I>,
        resumed_at: Option<Round>,
    ) -> Self {
        let peers: Vec<I> = peers
            .into_iter()
            .filter(|p| *p != self.me && (self.allowed)(p))
            .collect();
        self.catch_up
            .enable_probes(peers, own, resumed_at.is_some());
        if let Some(at) = resumed_at {
            self.newest = Some(self.newest.map_or(at, |n| n.max(at)));
            self.round_answer.resumed_at(at);
        }
        self
    }

    /// The largest |v| a received chunk may carry now.
    pub fn value_limit(&self) -> f32 {
        self.chunks.value_limit()
    }

    pub fn id(&self) -> &I {
        &self.me
    }

    /// The current Cyclon view (for tests and metrics).
    pub fn view(&self) -> Vec<I> {
        self.sampler.view()
    }

    /// Confirmed neighbours of `round`, once frozen.
    pub fn neighbours(&self, round: Round) -> Option<Vec<I>> {
        self.sampler.neighbours(round)
    }

    /// The earliest time the driver must feed [`VnInput::Tick`] (quinn's `poll_timeout` contract: ask after
    /// every `handle`/`join`; `None` when nothing is pending).
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.sampler
            .poll_timeout()
            .into_iter()
            .chain(self.exchanges.iter().filter_map(|(_, x)| x.next_timer()))
            .chain(self.catch_up.deadline())
            .chain(self.catch_up.join_probe_at())
            .min()
    }

    /// Joins the network from bootstrap entries (those not allowed, and ourselves, are skipped). The entries
    /// are shuffled with this VN's own RNG before Cyclon keeps the first c: with a long peer list every VN,
    /// siblings included, starts from its own random sample instead of the same first entries (DESIGN §5).
    pub fn join(
        &mut self,
        now: Duration,
        bootstrap: impl IntoIterator<Item = I>,
    ) -> Vec<VnOutput<I>> {
        use rand::seq::SliceRandom;
        let mut entries: Vec<I> = bootstrap
            .into_iter()
            .filter(|p| *p != self.me && (self.allowed)(p))
            .collect();
        entries.shuffle(&mut self.jitter_rng);
        let mut out = Vec::new();
        self.sampler_input(now, SamplerInput::Join { bootstrap: entries }, &mut out);
        self.catch_up.joined(now);
        self.finish(now, &mut out);
        out
    }

    /// The Cyclon view with ages, for a checkpoint ([`VnEngine::join_restored`] takes it back).
    pub fn view_entries(&self) -> Vec<protocol::control::ViewEntry<I>> {
        self.sampler.cyclon().entries().to_vec()
    }

    /// Joins after a restart: the saved view first (entries no longer allowed are dropped), then the
    /// bootstrap entries fill what is left ([`VnEngine::join`]).
    pub fn join_restored(
        &mut self,
        now: Duration,
        saved: Vec<protocol::control::ViewEntry<I>>,
        bootstrap: impl IntoIterator<Item = I>,
    ) -> Vec<VnOutput<I>> {
        let saved = saved
            .into_iter()
            .filter(|e| (self.allowed)(&e.id))
            .collect();
        self.sampler.restore_view(now, saved);
        self.join(now, bootstrap)
    }

    /// Handles one input; returns what to do.
    pub fn handle(&mut self, now: Duration, input: VnInput<I>) -> Vec<VnOutput<I>> {
        let mut out = Vec::new();
        self.start_due_overlays(now, &mut out);
        match input {
            VnInput::FromRn(ToVirtualNode::StartRound(round)) => {
                self.on_rn_round(now, round, true, &mut out)
            }
            // Directed push draws its targets from the view when the round starts: nothing to prepare.
            VnInput::FromRn(ToVirtualNode::Prepare(round)) if !self.cfg.push() => {
                self.starts.prepare();
                self.on_rn_round(now, round, false, &mut out)
            }
            VnInput::FromRn(ToVirtualNode::Prepare(_)) => {}
            VnInput::FromRn(ToVirtualNode::Exchange(frame)) => {
                self.on_own_chunk(now, frame, &mut out)
            }
            VnInput::FromRn(ToVirtualNode::PerEdge(round)) => {
                self.on_per_edge(now, round, &mut out)
            }
            VnInput::FromRn(ToVirtualNode::PerEdgeFrames { round, frames }) => {
                self.on_per_edge_frames(now, round, frames, &mut out)
            }
            VnInput::FromRn(ToVirtualNode::Stop) => {}
            VnInput::Control { from, bytes } => {
                self.heard(now, &from, None, &mut out);
                self.on_control(now, from, bytes, &mut out)
            }
            VnInput::Chunk { from, bytes, token } => {
                self.on_chunk(now, from, bytes, token, &mut out)
            }
            VnInput::ChunkReply { from, round, bytes } => {
                self.heard(now, &from, None, &mut out);
                self.on_chunk_reply(now, from, round, bytes, &mut out)
            }
            VnInput::SendFailed { to } => {
                self.sampler_input(now, SamplerInput::SendFailed { to: to.clone() }, &mut out);
                // A neighbour we could not deliver to will not answer: stop waiting for it.
                for x in self.exchanges.values_mut() {
                    x.awaiting_reply.remove(&to);
                }
            }
            VnInput::PeerGone { peer } => self.on_peer_gone(now, peer, &mut out),
            VnInput::RoundQuery { from, bytes, token } => {
                self.heard(now, &from, None, &mut out);
                self.on_round_query(now, from, bytes, token, &mut out)
            }
            VnInput::RoundAnswer { from, bytes } => {
                self.heard(now, &from, None, &mut out);
                self.counters.received(bytes.len());
                if let Err(e) = self.catch_up.answer(from.clone(), &bytes) {
                    self.refused(from, RefusalKind::Malformed(e), &mut out);
                }
            }
            VnInput::RoundQueryFailed { to } => self.catch_up.no_answer(&to),
            VnInput::ControlRoundTrip { rtt } => self.starts.record_round_trip(rtt),
            VnInput::Tick => self.sampler_input(now, SamplerInput::Tick, &mut out),
        }
        if self.catch_up.take_join_probe(now) {
            self.start_probe(now, true, &mut out);
        }
        self.decide_probe(now, &mut out);
        self.finish(now, &mut out);
        out
    }

    /// The RN is in `round` (`started`) or about to start it: schedule the overlays of
    /// `round ..= round + lookahead` not scheduled yet, each at this VN's own random offset.
    fn on_rn_round(
        &mut self,
        now: Duration,
        round: Round,
        started: bool,
        out: &mut Vec<VnOutput<I>>,
    ) {
        if self.newest.is_some_and(|n| round + MAX_KEPT_ROUNDS <= n) {
            return;
        }
        self.newest = Some(self.newest.map_or(round, |n| n.max(round)));
        self.round_answer.started(now, round);
        self.catch_up.expire(now);
        match self.cfg.graph {
            Graph::Push => {
                self.push_round(now, round, out);
                self.forget_old_rounds(out);
            }
            Graph::Static if round > Round::ZERO => {
                self.static_round(now, round, started, out);
                self.forget_old_rounds(out);
            }
            Graph::Static | Graph::PerRound => {
                self.schedule_overlays(now, round, started);
                self.forget_old_rounds(out);
                self.start_due_overlays(now, out);
            }
        }
    }

    /// Schedules the negotiations of `round ..= round + lookahead` (exchange 0 alone with a static graph).
    fn schedule_overlays(&mut self, now: Duration, round: Round, started: bool) {
        self.pace_overlays(now);
        let spacing = self.starts.spacing(
            started,
            self.sampler.overlay().deadline(),
            self.cfg.sampler.overlay.deadline(),
        );
        let ahead_max = if self.cfg.static_graph() {
            0
        } else {
            self.cfg.lookahead
        };
        for ahead in 0..=ahead_max {
            let u = round + ahead;
            if self.cfg.last_round.is_some_and(|last| u > last) {
                break;
            }
            if self.cfg.skip.contains(&u) {
                continue;
            }
            let x = self.exchanges.entry(u);
            if ahead == 0 && started {
                x.rn_started.get_or_insert(now);
            }
            if x.negotiation_scheduled() {
                continue;
            }
            x.negotiation =
                Negotiation::Due(self.starts.next_start(now, spacing, &mut self.jitter_rng));
        }
    }

    /// A static graph's exchange after the first: nothing to negotiate, it uses the graph of exchange 0 (once
    /// that froze).
    fn static_round(
        &mut self,
        now: Duration,
        round: Round,
        started: bool,
        out: &mut Vec<VnOutput<I>>,
    ) {
        if self.cfg.skip.contains(&Round::ZERO) {
            self.static_graph.never_joined();
        }
        if self.cfg.skip.contains(&round) {
            // Sat out: no exchange this round (its RN starts it only to keep the VNs' cadence).
            return;
        }
        let x = self.exchanges.entry(round);
        if started {
            x.rn_started.get_or_insert(now);
        }
        if !x.frozen()
            && let Some(n) = self.static_graph.neighbours()
        {
            let n = n.iter().cloned().collect();
            self.on_frozen(now, round, n, out);
        }
    }

    /// Directed push: the round's targets, r peers drawn uniformly from the Cyclon view as it is now, stand in
    /// for a frozen overlay (early chunks held for the round are decided, our chunk goes out once it is there).
    fn push_round(&mut self, now: Duration, round: Round, out: &mut Vec<VnOutput<I>>) {
        if self.cfg.skip.contains(&round) || self.cfg.last_round.is_some_and(|last| round > last) {
            return;
        }
        if self.exchanges.get(&round).is_some_and(|x| x.frozen()) {
            return;
        }
        let view: Vec<I> = self
            .sampler
            .view()
            .into_iter()
            .filter(|p| *p != self.me && (self.allowed)(p))
            .collect();
        let targets =
            push::draw_targets(&view, self.cfg.sampler.overlay.degree, &mut self.jitter_rng);
        self.exchanges.entry(round).negotiation = Negotiation::Started;
        self.on_frozen(now, round, targets, out);
    }

    /// The sub-step of the overlays started from now on: the configured one, stretched by the round trips
    /// measured (`negotiation_starts.rs`). A stretched window also spaces the starts further apart, so a busy
    /// network gets fewer negotiations per second, not only longer ones. Negotiations already running with a
    /// longer sub-step take the shorter one for the sub-steps they have still to come
    /// (`OverlayBuilder::shorten_running`): those a node started under its first rounds' load otherwise kept
    /// their long windows, and the run's last rounds waited for them.
    fn pace_overlays(&mut self, now: Duration) {
        // The network's start: every VN opens its first negotiations (and connections) at once.
        let cold_start = self.newest.is_none_or(|n| n == Round::ZERO);
        let substep = self
            .starts
            .substep(self.cfg.sampler.overlay.substep, cold_start);
        if substep != self.sampler.overlay().config().substep {
            tracing::debug!(?substep, rtt = ?self.starts.typical_round_trip(), "overlay sub-step stretched");
        }
        self.sampler.set_substep(substep);
        self.sampler.shorten_running(now, substep);
    }

    /// Starts the negotiations whose time has come.
    fn start_due_overlays(&mut self, now: Duration, out: &mut Vec<VnOutput<I>>) {
        if !self.starts.maybe_due(now) {
            return;
        }
        let due = self
            .exchanges
            .rounds_where(|_, x| matches!(x.negotiation, Negotiation::Due(t) if t <= now));
        let later = self
            .exchanges
            .iter()
            .filter_map(|(_, x)| match x.negotiation {
                Negotiation::Due(t) if t > now => Some(t),
                _ => None,
            })
            .min();
        self.starts.rest_due_from(later);
        if !due.is_empty() {
            self.pace_overlays(now);
        }
        for round in due {
            if let Some(x) = self.exchanges.get_mut(&round) {
                x.negotiation = Negotiation::Started;
            }
            self.sampler_input(now, SamplerInput::StartRound { round }, out);
        }
    }

    fn on_own_chunk(&mut self, now: Duration, frame: ChunkFrame, out: &mut Vec<VnOutput<I>>) {
        let round = frame.round;
        self.on_rn_round(now, round, true, out);
        self.chunks.note_own(std::slice::from_ref(&frame));
        let Some(x) = self.exchanges.get_mut(&round) else {
            return;
        };
        if matches!(x.own, Own::PerEdge(_)) {
            tracing::error!(%round, "a broadcast chunk for a per-edge round is ignored");
            return;
        }
        x.exchange_asked.get_or_insert(now);
        x.own = Own::Broadcast(Arc::new(frame.encode()));
        self.send_own_chunk(now, round, out);
    }

    /// The RN's exchange `round` is per-edge: report the slots once the round's neighbours are known.
    fn on_per_edge(&mut self, now: Duration, round: Round, out: &mut Vec<VnOutput<I>>) {
        self.on_rn_round(now, round, true, out);
        let Some(x) = self.exchanges.get_mut(&round) else {
            return;
        };
        x.edges.ask();
        x.exchange_asked.get_or_insert(now);
        self.report_edges(round, out);
    }

    /// Tells the RN the edge slots of a per-edge round, once asked and frozen.
    fn report_edges(&mut self, round: Round, out: &mut Vec<VnOutput<I>>) {
        if let Some(slots) = self
            .exchanges
            .get_mut(&round)
            .and_then(|x| x.edges.report())
        {
            out.push(VnOutput::ToRn(FromVirtualNode::Edges { round, slots }));
        }
    }

    /// The RN's frames of per-edge exchange `round`, one per reported slot. Frames that do not match the
    /// slots (an RN bug) send nothing: the round still ends, by its deadline or when every copy came in.
    fn on_per_edge_frames(
        &mut self,
        now: Duration,
        round: Round,
        frames: Vec<ChunkFrame>,
        out: &mut Vec<VnOutput<I>>,
    ) {
        let Some(x) = self.exchanges.get(&round) else {
            return;
        };
        let slots = x.edges.count();
        let fits = x.edges.reported()
            && matches!(x.own, Own::Nothing)
            && frames.len() == slots
            && frames.iter().all(|f| f.round == round);
        if !fits {
            tracing::error!(%round, frames = frames.len(), slots, "per-edge frames do not match the slots");
        }
        if fits {
            self.chunks.note_own(&frames);
        }
        let Some(x) = self.exchanges.get_mut(&round) else {
            return;
        };
        if !matches!(x.own, Own::Nothing) {
            return;
        }
        // Unfitting frames send nothing (no slot gets a frame) but still open the round's deadline.
        let frames = if fits { frames } else { Vec::new() };
        x.own = Own::PerEdge(frames.iter().map(|f| Arc::new(f.encode())).collect());
        self.send_own_chunk(now, round, out);
    }

    /// Schedules our chunk of `round` once both the chunk and the frozen neighbour set are there.
    fn send_own_chunk(&mut self, now: Duration, round: Round, out: &mut Vec<VnOutput<I>>) {
        let Some(x) = self.exchanges.get_mut(&round) else {
            return;
        };
        if matches!(x.own, Own::Nothing) || !x.frozen() || x.phase != Phase::Waiting {
            return;
        }
        x.phase = Phase::SendAt(self.sends.send_at(x.rn_started, now, &mut self.jitter_rng));
        self.send_due(now, out);
    }

    /// Sends the chunks whose send time has come.
    fn send_due(&mut self, now: Duration, out: &mut Vec<VnOutput<I>>) {
        if !self.sends.maybe_due(now) {
            return;
        }
        // A round the network has left behind (catch-up): nobody will send us its chunk any more, so the
        // round ends with what it has instead of waiting out the deadline.
        let network_at = self.catch_up.reported();
        let mut collecting = Vec::new();
        for (&round, x) in self.exchanges.iter_mut() {
            if !matches!(x.phase, Phase::SendAt(t) if t <= now) {
                continue;
            }
            let Some(neighbours) = &x.neighbours else {
                continue;
            };
            // Broadcast: our chunk to every neighbour. Per edge: frame i to slot i, if that edge still stands.
            let sends: Vec<(I, Arc<Vec<u8>>)> = match (&x.own, x.edges.slots()) {
                (Own::Broadcast(own), _) => neighbours
                    .iter()
                    .map(|n| (n.clone(), own.clone()))
                    .collect(),
                (Own::PerEdge(frames), Some(slots)) => slots
                    .iter()
                    .zip(frames)
                    .filter(|(n, _)| neighbours.contains(*n))
                    .map(|(n, f)| (n.clone(), f.clone()))
                    .collect(),
                _ => continue,
            };
            let left_behind = network_at.is_some_and(|at| at > round + MAX_FUTURE_ROUNDS);
            let deadline = if left_behind {
                now
            } else {
                now + self.cfg.exchange_timeout
            };
            x.cut_short = left_behind;
            collecting.push((round, deadline));
            for (n, bytes) in sends {
                if !(self.allowed)(&n) {
                    continue;
                }
                x.awaiting_reply.insert(n.clone());
                self.counters.sent_chunk(bytes.len());
                out.push(VnOutput::SendChunk {
                    to: n,
                    round,
                    bytes,
                });
            }
        }
        for (round, deadline) in collecting {
            self.exchanges.start_collecting(round, deadline);
        }
        // Sends that could not go out yet stay scheduled, and are looked at again from their time.
        let rest = self
            .exchanges
            .iter()
            .filter_map(|(_, x)| match x.phase {
                Phase::SendAt(t) => Some(t),
                _ => None,
            })
            .min();
        self.sends.rest_due_from(rest);
    }

    fn on_control(&mut self, now: Duration, from: I, bytes: Vec<u8>, out: &mut Vec<VnOutput<I>>) {
        self.counters.received(bytes.len());
        if !(self.allowed)(&from) {
            self.refused(from, RefusalKind::NotAllowed, out);
            return;
        }
        // `from` is the connection's authenticated peer: limited before any decoding work is spent on it.
        if !self.limits.control(&from, now) {
            self.refused(from, RefusalKind::RateLimited, out);
            return;
        }
        let env: ControlEnvelope<I> = match protocol::codec::decode_control(&bytes)
            .and_then(|e: ControlEnvelope<I>| e.validate().map(|_| e))
        {
            Ok(e) => e,
            Err(e) => {
                self.refused(from, RefusalKind::Malformed(e.to_string()), out);
                return;
            }
        };
        if env.sender != from {
            self.refused(
                from,
                RefusalKind::Malformed("claimed sender is not the connection's peer".into()),
                out,
            );
            return;
        }
        // The sender's own claim carries its dial address, which the connection alone may not.
        let (from, msg) = (env.sender, env.msg);
        match msg {
            ControlMsg::Cyclon(m) => {
                if matches!(m, CyclonMsg::ShuffleRequest { .. }) && !self.limits.shuffle(&from, now)
                {
                    self.refused(from, RefusalKind::RateLimited, out);
                    return;
                }
                // Gossip about peers that are not on the list is dropped entry by entry: they never enter a view.
                let msg = ControlMsg::Cyclon(self.filter_cyclon(m));
                self.sampler_input(now, SamplerInput::Message { from, msg }, out);
            }
            ControlMsg::Overlay(m) => {
                let listed = overlay_claims(&m)
                    .into_iter()
                    .flatten()
                    .all(|c| (self.allowed)(c));
                if !listed {
                    self.refused(from, RefusalKind::NotAllowed, out);
                    return;
                }
                if let Some(behind) = progress_shown(&m, &from) {
                    self.note_ahead(now, &from, m.round() - (self.cfg.lookahead + behind), out);
                }
                let msg = ControlMsg::Overlay(m);
                self.sampler_input(now, SamplerInput::Message { from, msg }, out);
            }
        }
    }

    /// `from` (authenticated, allowed) showed that the network is at exchange `at` at least (capped at the
    /// run's last exchange). Evidence only: enough distinct peers beyond what this VN accepts start a probe
    /// if this VN is cut off ([`Self::probe_if_cut_off`]); what they claim never moves the node by itself
    /// (issue 44: they may all be one node's identities).
    fn note_ahead(&mut self, now: Duration, from: &I, at: Round, out: &mut Vec<VnOutput<I>>) {
        let at = self.cfg.last_round.map_or(at, |last| at.min(last));
        let newest = self.newest.unwrap_or(Round::ZERO);
        if self.catch_up.witness(now, from, at, newest) == Witnessed::Probe {
            self.probe_if_cut_off(now, out);
        }
    }

    /// Starts a probe (evidence while running) when this VN's newest exchange received no copy: a VN whose
    /// neighbours' copies arrive is in step with them, whatever other peers claim, and a fresh VN that has
    /// not exchanged yet is behind no one (`CatchUp::isolated`).
    fn probe_if_cut_off(&mut self, now: Duration, out: &mut Vec<VnOutput<I>>) {
        if self.catch_up.isolated() {
            self.start_probe(now, false, out);
        }
    }

    /// A probe found the network at exchange `exchange`: tell the RN to rejoin `margin` exchanges further
    /// (`CatchUp::decide` chooses the margin: past the median for a resumed node, whose first round back is
    /// slow; at it for a running one).
    fn report_behind(
        &mut self,
        now: Duration,
        exchange: Round,
        margin: u64,
        out: &mut Vec<VnOutput<I>>,
    ) {
        self.catch_up.adopt(exchange);
        let join = exchange + margin;
        let join = self.cfg.last_round.map_or(join, |last| join.min(last));
        out.push(VnOutput::ToRn(FromVirtualNode::Behind { exchange: join }));
        // Exchanges the network has left: their neighbours are done with them and will send nothing more, so
        // they end now with what they got (the RN then catches up at once, not after `exchange_timeout`).
        for (_, x) in self.exchanges.before_mut(exchange - MAX_FUTURE_ROUNDS) {
            if let Phase::Collecting { deadline } = &mut x.phase {
                *deadline = now;
                x.cut_short = true;
            }
        }
    }

    /// Starts a catch-up probe if the catch-up allows one now (`CatchUp::start_probe`), and asks its peers.
    fn start_probe(&mut self, now: Duration, at_join: bool, out: &mut Vec<VnOutput<I>>) {
        let asked = self.catch_up.start_probe(
            now,
            &self.me,
            self.sampler.view(),
            &*self.allowed,
            self.cfg.exchange_timeout,
            at_join,
        );
        for to in asked {
            self.counters.sent(0);
            out.push(VnOutput::SendRoundQuery { to });
        }
    }

    /// `from` asks which exchange we are at: the newest exchange our RN started, as [`RoundAnswer`] shows it
    /// (after this VN's own lag, so that siblings do not switch together). Unlisted, over its rate, or with a
    /// body: counted, not answered (the driver drops the request).
    fn on_round_query(
        &mut self,
        now: Duration,
        from: I,
        bytes: Vec<u8>,
        token: ReplyToken,
        out: &mut Vec<VnOutput<I>>,
    ) {
        self.counters.received(bytes.len());
        if !(self.allowed)(&from) {
            self.refused(from, RefusalKind::NotAllowed, out);
            return;
        }
        if !self.limits.round_query(&from, now) {
            self.refused(from, RefusalKind::RateLimited, out);
            return;
        }
        if !bytes.is_empty() {
            self.refused(
                from,
                RefusalKind::Malformed("round query with a body".into()),
                out,
            );
            return;
        }
        let bytes = protocol::codec::encode_control(&self.round_answer.at(now))
            .expect("an Option<Round> is ≤ 10 bytes");
        self.counters.sent(bytes.len());
        out.push(VnOutput::ReplyRound { token, bytes });
    }

    /// Acts on a finished probe (`CatchUp::decide`): tells the RN where to rejoin, or that a resumed node
    /// starts where it is.
    fn decide_probe(&mut self, now: Duration, out: &mut Vec<VnOutput<I>>) {
        let newest = self.newest.unwrap_or(Round::ZERO);
        let margin = self.cfg.lookahead.min(MAX_FUTURE_ROUNDS);
        match self
            .catch_up
            .decide(now, newest, self.cfg.last_round, margin)
        {
            Some(ProbeDecision::Behind { at, margin }) => self.report_behind(now, at, margin, out),
            // `Behind` naming this VN's own exchange: the RN (waiting for this before its first round back)
            // starts at the round it resumed at, skipping nothing.
            Some(ProbeDecision::StartHere) => {
                out.push(VnOutput::ToRn(FromVirtualNode::Behind { exchange: newest }))
            }
            Some(ProbeDecision::Confirm) => self.start_probe(now, true, out),
            None => {}
        }
    }

    /// `peer` spoke: a suspect that withheld everything in a round while alive is shunned now
    /// (`suspects.rs`).
    fn heard(
        &mut self,
        now: Duration,
        peer: &I,
        chunk_round: Option<Round>,
        out: &mut Vec<VnOutput<I>>,
    ) {
        if let Some(round) = self.suspects.heard(now, peer, chunk_round) {
            tracing::debug!(
                ?round,
                "a neighbour that sent nothing by the deadline speaks again: shunned"
            );
            let input = SamplerInput::Withheld {
                round,
                peer: peer.clone(),
            };
            self.sampler_input(now, input, out);
        }
    }

    /// `peer`'s connection closed and it could not be dialled again: it is treated as a send failure
    /// (Cyclon drops it; overlays still negotiating drop their links with it), and every open exchange whose
    /// frozen neighbours hold it stops waiting for it — its chunk counts as missed, the round averages over
    /// what arrived — instead of waiting out the exchange deadline, round after round, for the overlays
    /// frozen before it went (with a lookahead of L, up to L of them). The overlay stops counting those
    /// edges too, so a chunk it sends after all is refused as `NotNeighbour` and its end drops the edge.
    fn on_peer_gone(&mut self, now: Duration, peer: I, out: &mut Vec<VnOutput<I>>) {
        self.suspects.gone(&peer);
        let open = self.exchanges.rounds_where(|_, x| {
            !x.done() && x.neighbours.as_ref().is_some_and(|n| n.contains(&peer))
        });
        tracing::debug!(?open, "peer gone: its open exchanges stop waiting for it");
        // First the exchanges, which keep counting the edge: the drops below reach `forget_edge`.
        for round in &open {
            if let Some(x) = self.exchanges.get_mut(round) {
                x.lose_edge(&peer);
            }
        }
        self.sampler_input(now, SamplerInput::SendFailed { to: peer.clone() }, out);
        if self.cfg.static_graph() {
            // Gone for the run's graph too (a node restarted with a static graph runs without edges).
            self.drop_static_edge(&peer);
        }
        for round in open {
            if self.sampler.is_neighbour(round, &peer) {
                let input = SamplerInput::EdgeRefused {
                    round,
                    peer: peer.clone(),
                };
                self.sampler_input(now, input, out);
            }
        }
        self.catch_up.no_answer(&peer);
    }

    fn filter_cyclon(&self, m: CyclonMsg<I>) -> CyclonMsg<I> {
        let keep = |entries: Vec<protocol::control::ViewEntry<I>>| {
            entries
                .into_iter()
                .filter(|e| (self.allowed)(&e.id))
                .collect()
        };
        match m {
            CyclonMsg::ShuffleRequest { entries } => CyclonMsg::ShuffleRequest {
                entries: keep(entries),
            },
            CyclonMsg::ShuffleReply { entries } => CyclonMsg::ShuffleReply {
                entries: keep(entries),
            },
        }
    }

    fn on_chunk(
        &mut self,
        now: Duration,
        from: I,
        bytes: Arc<Vec<u8>>,
        token: ReplyToken,
        out: &mut Vec<VnOutput<I>>,
    ) {
        self.counters.received(bytes.len());
        if !(self.allowed)(&from) {
            // The shell drops unlisted peers before this; refuse anyway, never accept.
            self.refuse(from, token, RefuseReason::NotNeighbour, out);
            return;
        }
        let frame = match ChunkFrame::decode(&bytes) {
            Ok(f) => f,
            Err(e) => {
                self.heard(now, &from, None, out);
                self.refused(from, RefusalKind::Malformed(e.to_string()), out);
                self.reply(token, ChunkReply::Refused(RefuseReason::BadChunk), out);
                return;
            }
        };
        self.heard(now, &from, Some(frame.round), out);
        if let Err(reason) = self.chunks.check(&frame) {
            if matches!(reason, RefuseReason::NonFinite | RefuseReason::OutOfRange) {
                self.spent_on_poison(frame.round, &from);
            }
            self.refuse(from, token, reason, out);
            return;
        }
        let round = frame.round;
        let newest = self.newest.unwrap_or(Round::ZERO);
        let too_old = round < newest - (MAX_KEPT_ROUNDS - 1)
            || self.exchanges.get(&round).is_some_and(|x| x.done());
        let too_new = round > newest + MAX_FUTURE_ROUNDS;
        // A chunk is a peer saying which round it is in: a vote for where the network is — from a peer we
        // know (in our view, or linked in that round), not from any listed peer that sends frames unasked
        // (a storm of early chunks from sybils must not fast-forward its victim; tests/stream_storm.rs).
        if self.sampler.cyclon().contains(&from) || self.knows_link(round, &from) {
            self.note_ahead(now, &from, round, out);
        }
        if too_old || too_new {
            self.refuse(from, token, RefuseReason::WrongRound, out);
            return;
        }
        // Directed push: any allowed peer may have drawn us.
        let linked = self.cfg.push() || self.knows_link(round, &from);
        let x = self.exchanges.entry(round);
        if x.heard_from(&from) {
            self.refuse(from, token, RefuseReason::Duplicate, out);
            return;
        }
        if !x.frozen() {
            // Not frozen here yet. An honest sender froze first with an edge to us, and an edge exists at both
            // ends before either counts it: a sender with no link in this round's overlay is not a
            // neighbour, and holding its chunk would only let it take a slot an honest early chunk needs.
            if !linked {
                self.refuse(from, token, RefuseReason::NotNeighbour, out);
                return;
            }
            if !self.exchanges.hold(round, from.clone(), frame, token) {
                self.refuse(from, token, RefuseReason::WrongRound, out);
            }
            return;
        }
        self.decide_chunk(now, from, frame, token, out);
    }

    /// A confirmed neighbour of a frozen, open round sent its chunk of the round with values we refuse: that
    /// was its one chunk for the round (a second one is a `Duplicate`), so the round stops waiting for it.
    /// Otherwise one poisoning neighbour would hold every victim's round until `exchange_timeout` (issue 14:
    /// what a peer sends must not slow the run, let alone end it).
    fn spent_on_poison(&mut self, round: Round, from: &I) {
        let is_neighbour = self.counts_edge(round, from);
        if let Some(x) = self.exchanges.get_mut(&round)
            && !x.done()
            && x.frozen()
            && is_neighbour
        {
            x.received_from.insert(from.clone());
        }
    }

    /// Accepts or refuses a chunk of a frozen round.
    fn decide_chunk(
        &mut self,
        now: Duration,
        from: I,
        frame: ChunkFrame,
        token: ReplyToken,
        out: &mut Vec<VnOutput<I>>,
    ) {
        let round = frame.round;
        // Ask the overlay, not our frozen copy: an edge dropped after the freeze is no longer counted.
        let counted = self.cfg.push() || self.counts_edge(round, &from);
        let edge_slots = self.cfg.edge_slots;
        let Some(x) = self.exchanges.get_mut(&round) else {
            self.refuse(from, token, RefuseReason::WrongRound, out);
            return;
        };
        if x.done() {
            self.refuse(from, token, RefuseReason::WrongRound, out);
            return;
        }
        // The sender's edge slot, for an RN with per-edge state; every counted neighbour has one (the slots
        // are the neighbours at the freeze, and edges are only dropped after it).
        let slot = x.edges.slot_of(&from);
        if !counted || (edge_slots && slot.is_none()) {
            self.refuse(from, token, RefuseReason::NotNeighbour, out);
            return;
        }
        x.received_from.insert(from.clone());
        x.summary.received += 1;
        x.last_copy_at = Some(x.last_copy_at.map_or(now, |t| t.max(now)));
        self.reply(token, ChunkReply::Accepted, out);
        let slot = if edge_slots { slot } else { None };
        out.push(VnOutput::Received { from, slot, frame });
    }

    fn refuse(
        &mut self,
        from: I,
        token: ReplyToken,
        reason: RefuseReason,
        out: &mut Vec<VnOutput<I>>,
    ) {
        self.refused(from, RefusalKind::Chunk(reason), out);
        self.reply(token, ChunkReply::Refused(reason), out);
    }

    /// Counts a refusal under its reason and surfaces it to the driver: every refusal goes through here, so
    /// the round summary's total and its per-reason counts always agree.
    fn refused(&mut self, from: I, what: RefusalKind, out: &mut Vec<VnOutput<I>>) {
        self.counters.refused(|by| match &what {
            RefusalKind::Malformed(_) => by.malformed = by.malformed.saturating_add(1),
            RefusalKind::NotAllowed => by.not_allowed = by.not_allowed.saturating_add(1),
            RefusalKind::Chunk(reason) => by.add_chunk(*reason),
            RefusalKind::RateLimited => by.rate_limited = by.rate_limited.saturating_add(1),
        });
        out.push(VnOutput::Refused { from, what });
    }

    fn reply(&mut self, token: ReplyToken, reply: ChunkReply, out: &mut Vec<VnOutput<I>>) {
        let bytes = protocol::codec::encode_control(&reply).expect("a chunk reply is two bytes");
        self.counters.sent(bytes.len());
        out.push(VnOutput::Reply { token, bytes });
    }

    fn on_chunk_reply(
        &mut self,
        now: Duration,
        from: I,
        round: Round,
        bytes: Vec<u8>,
        out: &mut Vec<VnOutput<I>>,
    ) {
        self.counters.received(bytes.len());
        let Some(x) = self.exchanges.get_mut(&round) else {
            return;
        };
        if !x.awaiting_reply.remove(&from) {
            return;
        }
        match protocol::codec::decode_control::<ChunkReply>(&bytes) {
            Ok(ChunkReply::Accepted) => {
                // A per-edge exchange already reported (`DeliveredOnEdges` said false for this slot): tell
                // the RN now, or its per-edge state would disagree with the neighbour's for good (PDMM).
                if x.done()
                    && x.edges.asked()
                    && let Some(slot) = x.edges.slot_of(&from)
                {
                    out.push(VnOutput::ToRn(FromVirtualNode::LateDeliveredOnEdge {
                        round,
                        slot,
                    }));
                }
                x.summary.delivered += 1;
                x.accepted_by.insert(from.clone());
                x.edges.delivered(from);
            }
            Ok(ChunkReply::Refused(RefuseReason::NotNeighbour)) if self.cfg.push() => {}
            Ok(ChunkReply::Refused(RefuseReason::NotNeighbour)) => {
                // Half-open edge: the other end does not count it, so neither do we from now on.
                if self.cfg.static_graph() && round > Round::ZERO {
                    self.drop_static_edge(&from);
                } else {
                    self.sampler_input(now, SamplerInput::EdgeRefused { round, peer: from }, out);
                }
            }
            Ok(ChunkReply::Refused(_)) => {}
            Err(e) => {
                self.refused(from, RefusalKind::Malformed(e.to_string()), out);
            }
        }
    }

    fn sampler_input(&mut self, now: Duration, input: SamplerInput<I>, out: &mut Vec<VnOutput<I>>) {
        let mut outputs = Vec::new();
        self.sampler.handle(now, input, &mut outputs);
        for output in outputs {
            match output {
                SamplerOutput::Send { to, msg } => self.send_control(to, msg, out),
                SamplerOutput::Frozen { round, neighbours } => {
                    self.on_frozen(now, round, neighbours, out)
                }
                SamplerOutput::EdgeDropped { round, peer } => {
                    if let Some(x) = self.exchanges.get_mut(&round) {
                        x.forget_edge(&peer);
                    }
                    if self.cfg.static_graph() && round == Round::ZERO {
                        self.drop_static_edge(&peer);
                    }
                }
                SamplerOutput::Invalid { from, protocol } => {
                    let what = match protocol {
                        Protocol::Cyclon => "cyclon message",
                        Protocol::Overlay => "overlay message",
                    };
                    self.refused(from, RefusalKind::Malformed(what.into()), out);
                }
                SamplerOutput::ShuffleTimedOut { .. } => {}
            }
        }
    }

    fn on_frozen(
        &mut self,
        now: Duration,
        round: Round,
        neighbours: Vec<I>,
        out: &mut Vec<VnOutput<I>>,
    ) {
        let static_graph = self.cfg.static_graph();
        if static_graph && round == Round::ZERO {
            self.static_graph.freeze(&neighbours);
        }
        let slots = if static_graph {
            self.static_graph.slots()
        } else {
            let sorted: BTreeSet<&I> = neighbours.iter().collect();
            sorted.into_iter().take(MAX_EDGE_SLOTS).cloned().collect()
        };
        // A round forgotten while its overlay was still open (the RN jumped ahead) stays forgotten.
        let Some(x) = self.exchanges.get_mut(&round) else {
            return;
        };
        x.summary.neighbours = neighbours.len() as u32;
        if let Some(asked) = x.exchange_asked {
            x.summary.overlay_wait_us = micros(now.saturating_sub(asked));
        }
        x.neighbours = Some(neighbours.into_iter().collect());
        x.edges.fix(slots);
        for (from, frame, token) in self.exchanges.take_held(round) {
            self.decide_chunk(now, from, frame, token, out);
        }
        self.report_edges(round, out);
        self.send_own_chunk(now, round, out);
        if static_graph && round == Round::ZERO {
            // Later exchanges the RN already started wait for this graph.
            let newest = self.newest;
            let waiting = self.exchanges.rounds_where(|u, x| {
                *u > Round::ZERO && !x.frozen() && newest.is_some_and(|n| *u <= n)
            });
            let graph: Vec<I> = self
                .static_graph
                .neighbours()
                .into_iter()
                .flatten()
                .cloned()
                .collect();
            for u in waiting {
                self.on_frozen(now, u, graph.clone(), out);
            }
        }
    }

    /// Whether this VN counts the edge to `peer` in `round`: the round's overlay, or with a static graph
    /// the graph of exchange 0.
    fn counts_edge(&self, round: Round, peer: &I) -> bool {
        if self.cfg.static_graph() && round > Round::ZERO {
            self.static_graph.contains(peer)
        } else {
            self.sampler.is_neighbour(round, peer)
        }
    }

    /// Whether `peer` may hold an edge to us in `round` before we froze it (see `on_chunk`).
    fn knows_link(&self, round: Round, peer: &I) -> bool {
        if self.cfg.static_graph() && round > Round::ZERO {
            self.counts_edge(round, peer)
        } else {
            self.sampler.has_link(round, peer)
        }
    }

    /// A static edge the other end no longer counts: gone for the rest of the run.
    fn drop_static_edge(&mut self, peer: &I) {
        self.static_graph.drop_edge(peer);
        for x in self.exchanges.values_mut().filter(|x| !x.done()) {
            x.forget_edge(peer);
        }
    }

    fn send_control(&mut self, to: I, msg: ControlMsg<I>, out: &mut Vec<VnOutput<I>>) {
        if !(self.allowed)(&to) {
            return;
        }
        let env = ControlEnvelope {
            sender: self.me.clone(),
            msg,
        };
        match protocol::codec::encode_control(&env) {
            Ok(bytes) => {
                self.counters.sent(bytes.len());
                out.push(VnOutput::SendControl { to, bytes });
            }
            // Our own messages are bounded by the same limits as the receiver's: this is a bug, not input.
            Err(e) => tracing::error!(error = %e, "control message over its limit was not sent"),
        }
    }

    /// How many rounds short of the lookahead this VN's started negotiations reach beyond its node's round.
    /// An overlay message for round m claims its sender is at exchange m − lookahead or later (`note_ahead`):
    /// exact when negotiations run the full lookahead ahead, but paced sub-steps space the starts further
    /// apart, and the last rounds of a run have nothing beyond them to negotiate, so peers in step then claim
    /// less. Peers on the same network lag about as this VN does: the hold compares their claims with its
    /// exchange less this lag.
    fn negotiation_lag(&self) -> u64 {
        if self.cfg.graph != Graph::PerRound {
            return 0;
        }
        let Some(newest) = self.newest else { return 0 };
        let furthest = self
            .exchanges
            .iter()
            .rev()
            .find(|(_, x)| x.negotiation == Negotiation::Started)
            .map_or(newest, |(u, _)| *u);
        let ahead = furthest.0.saturating_sub(newest.0);
        self.cfg.lookahead.saturating_sub(ahead)
    }

    /// Sends due chunks and reports finished rounds.
    fn finish(&mut self, now: Duration, out: &mut Vec<VnOutput<I>>) {
        self.send_due(now, out);
        // Peers heard within one overlay window: those in step speak to us every few sub-steps.
        // Only a collecting exchange can end, and most inputs find none.
        let rounds = self.exchanges.collecting();
        if rounds.is_empty() {
            return;
        }
        let fresh = self.sampler.overlay().deadline();
        let degree = self.cfg.sampler.overlay.degree;
        let push = self.cfg.push();
        // Complete exchanges short of partners only (below) need the lag: a walk over every exchange.
        let short = |x: &Exchange<I>| x.neighbours.as_ref().is_some_and(|n| n.len() < degree);
        let lag = if rounds.iter().any(|r| {
            self.exchanges
                .get(r)
                .is_some_and(|x| !push && x.all_in() && short(x))
        }) {
            self.negotiation_lag()
        } else {
            0
        };
        let mut cut_off = false;
        let mut withheld = Vec::new();
        let mut mute = Vec::new();
        for round in rounds {
            let Some(x) = self.exchanges.get_mut(&round) else {
                continue;
            };
            let Phase::Collecting { deadline } = x.phase else {
                continue;
            };
            // A push round's senders are not known in advance: it runs to its deadline.
            let all_in = !push && x.all_in();
            // Issue 15: an exchange the network is well behind (`HOLD_LEAD`) stays open until most peers
            // heard lately are within reach of it, or its deadline: a node that landed ahead, or whose
            // exchange had nobody to wait for, would otherwise run on alone (see `HOLD_LEAD`). Checked
            // after every input, the Cyclon ticks included.
            // Only an exchange short of partners is held: a node that ran ahead alone finds few or none (its
            // own siblings at most), while a VN in step with its r neighbours' chunks in has its evidence that
            // the network is where it is. The peers' claims are lower bounds that run several rounds low even
            // in step (each is the newest round a peer happened to talk to us about, less the lookahead):
            // without this, 5 of 20 rounds of a clean default run were held, up to 1 s each.
            let held = all_in && short(x) && self.catch_up.network_behind(now, round - lag, fresh);
            if (all_in && x.awaiting_reply.is_empty() && !held) || now >= deadline {
                // Neighbours that took the edge and our chunk and sent nothing by the deadline are shunned for
                // a window (issue 44: a node whose identities crowd a victim and withhold their chunks made it
                // wait out the exchange timeout every round they got in, until it fell behind the network). A
                // stopped or dead neighbour acknowledges nothing and is not shunned: it would find no
                // neighbours after a restart (`node/tests/resume_loopback.rs` failed so).
                // One that acknowledged nothing either is a suspect until it speaks again or is gone
                // (`suspects.rs`).
                if !push && !all_in && !x.cut_short {
                    withheld.extend(x.silent_neighbours().into_iter().map(|p| (round, p)));
                    mute.extend(x.mute_neighbours().into_iter().map(|p| (round, p)));
                }
                // A round complete before its deadline tells when the slowest neighbour's chunk came.
                if all_in && let (Some(start), Some(last)) = (x.rn_started, x.last_copy_at) {
                    self.sends.learn(start, last);
                }
                // Sends in flight hold their own reference; a finished round keeps no copy of the chunk.
                x.own = Own::Nothing;
                if x.edges.asked() {
                    out.push(VnOutput::ToRn(FromVirtualNode::DeliveredOnEdges {
                        round,
                        accepted: x.edges.accepted(),
                    }));
                }
                let mut summary = x.summary;
                self.counters.fill(&mut summary);
                out.push(VnOutput::ToRn(FromVirtualNode::Done(summary)));
                let copies = x.received_from.iter().any(|p| !self.catch_up.is_own(p));
                self.catch_up.exchange_done(round, copies);
                cut_off |= !copies;
                self.exchanges.end_collecting(round);
            }
        }
        for (round, peer) in withheld {
            if !self.catch_up.is_own(&peer) {
                self.sampler_input(now, SamplerInput::Withheld { round, peer }, out);
            }
        }
        for (round, peer) in mute {
            if !self.catch_up.is_own(&peer) {
                self.suspects.suspect(now, round, peer);
            }
        }
        // An exchange that got nothing, with peers beyond our window heard lately: ask where the network is.
        if cut_off
            && self
                .catch_up
                .evidence(now, self.newest.unwrap_or(Round::ZERO))
        {
            self.probe_if_cut_off(now, out);
        }
    }

    fn forget_old_rounds(&mut self, out: &mut Vec<VnOutput<I>>) {
        let Some(newest) = self.newest else { return };
        for (from, token) in self.exchanges.forget_before(newest - (MAX_KEPT_ROUNDS - 1)) {
            self.refuse(from, token, RefuseReason::WrongRound, out);
        }
    }

    /// Chunks held for rounds whose overlay is not frozen yet (each holds an unanswered reply token); at most
    /// [`MAX_PENDING_CHUNKS`]. For tests and metrics.
    pub fn pending_len(&self) -> usize {
        self.exchanges.held()
    }

    /// Rounds this VN keeps exchange state for.
    pub fn rounds_kept(&self) -> usize {
        self.exchanges.len()
    }

    /// Bounds and bookkeeping, for tests (run after every input): the pending count matches the chunks held
    /// and stays within [`MAX_PENDING_CHUNKS`]; only unfrozen rounds hold chunks; every kept round lies in
    /// the window `newest − (MAX_KEPT_ROUNDS − 1) ..= newest + max(lookahead, MAX_FUTURE_ROUNDS)`; and the
    /// sampler's own invariants hold.
    #[doc(hidden)]
    pub fn check_invariants(&self) -> Result<(), String> {
        let newest = self.newest.unwrap_or(Round::ZERO);
        self.exchanges.check_invariants(
            newest - (MAX_KEPT_ROUNDS - 1),
            newest + self.cfg.lookahead.max(MAX_FUTURE_ROUNDS),
        )?;
        self.sampler.check_invariants()
    }
}

#[cfg(test)]
mod tests;
