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
//!    known chunk index, the right length and finite values within the model's range ([`ValueBounds`]);
//!    each accepted copy goes to the RN at once.
//!    Chunks that arrive before the round is frozen wait (bounded) until the freeze decides.
//!    A refusal for `NotNeighbour` tells the sender the edge is half-open; it stops counting it.
//!
//! # Per-edge exchanges (PDMM's Δz, one frame per neighbour)
//! Instead of `Exchange(frame)` the RN sends `PerEdge(t)`. Once the overlay of t is frozen the VN answers
//! `Edges { t, slots }`: its **edge slots**, the sorted neighbour list fixed at the freeze — with a static graph
//! the graph of exchange 0, so slot i is the same neighbour in every exchange of the run. The RN computes one
//! frame per slot and sends `PerEdgeFrames`; the VN sends frame i to the neighbour in slot i. A VN built
//! [`VnEngine::with_edge_slots`] hands every accepted copy over as `ReceivedOnEdge { slot, frame }`, so the
//! RN can keep per-edge state without learning any identity (a slot is a position, not a peer). At the end of
//! a per-edge exchange the VN reports, per slot, whether the neighbour accepted our frame
//! (`DeliveredOnEdges`, just before `Done`), so that both ends of an edge can agree on whether the exchange
//! happened on it.
//!
//! # Churn (issue 15)
//! A peer whose connection closed and could not be dialled again is reported by the shell as
//! `VnInput::PeerGone`: the open exchanges stop waiting for its chunk and the overlays, frozen ones included,
//! stop counting it (`on_peer_gone`). A VN built [`VnEngine::with_round_probes`] also asks peers which exchange
//! they are at — as a resumed VN joins, and while running once three peers it hears are beyond its window —
//! and tells its RN `Behind` when the lower median of the answers is beyond it (`start_probe`,
//! `decide_probe`); passive witnesses (`behind.rs`) still act on their own.
//!
//! An edge refused or dropped after the freeze **keeps its slot**: the slot count never changes within an
//! exchange (and with a static graph never in the run), the frame for a dropped slot is not sent, nothing is
//! received on it, and its delivery flag is false. The algorithm decides what a silent slot means (PDMM
//! leaves that edge's duals unchanged for the round at both ends).
//!
//! # Directed push (EL's local variant)
//! A VN built [`VnEngine::with_push`] negotiates no overlay: when its RN starts a round it draws r peers
//! (the overlay degree) uniformly from its own Cyclon view and sends its chunk to them, and it accepts one
//! chunk per round from any allowed peer (early ones wait, bounded, until its RN starts that round). No
//! receiver knows its in-degree, so a push round ends at its deadline (`exchange_timeout` after sending),
//! with whatever arrived by then.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use protocol::Round;
use protocol::control::{ControlEnvelope, ControlMsg, CyclonMsg, OverlayMsg};
use protocol::rnvn::{FromVirtualNode, MAX_EDGE_SLOTS, RoundSummary, ToVirtualNode};
use protocol::{ChunkFrame, ChunkReply, RefuseReason};
use sampling::{Protocol, Sampler, SamplerConfig, SamplerInput, SamplerOutput};
use serde::{Serialize, de::DeserializeOwned};

use super::behind::{AheadWitnesses, CATCH_UP_WITNESSES};
use super::round_trips::RoundTrips;
use super::counters::Counters;
use super::rate::{PerPeer, Rate};
use super::values::ValueBounds;

/// Chunks held for rounds whose overlay is not frozen yet, over all rounds. Only a peer with a link in that
/// round's overlay (at most one chunk per peer and round) is held, so a VN holds about r per round and rounds
/// run at most [`MAX_FUTURE_ROUNDS`] ahead; 64 covers r = 8 over several rounds with margin, and bounds what
/// early senders can make us hold (64 × the largest chunk) whatever the overlay's state.
pub const MAX_PENDING_CHUNKS: usize = 64;

/// Control messages one peer may send a VN per overlay sub-step, per round being negotiated (the VN negotiates
/// `lookahead + 1` at once). An honest peer sends a handful per sub-step and round: its own proposals, walks it
/// forwards through us, the replies of the matching protocol; 16 is several times that, so only a peer that
/// floods is limited. Over the limit, messages are dropped and counted.
pub const CONTROL_PER_SUBSTEP_PER_ROUND: f64 = 16.0;

/// Control messages one peer may send at once, per round being negotiated (a burst at a sub-step boundary).
pub const CONTROL_BURST_PER_ROUND: f64 = 64.0;

/// Cyclon shuffle requests one peer may send a VN at once. An honest peer sends one when we are the oldest
/// entry of its view — at most once per Cyclon period — so more is a peer pushing its entries into our view
/// (each accepted request replaces up to `shuffle_len` of our entries).
pub const SHUFFLE_BURST: f64 = 4.0;

/// Peers a VN asks at once which exchange they are at (a catch-up probe, [`VnEngine::with_round_probes`]).
/// Five distinct listed peers, chosen at random from the peer list without the VN's own node: the lower
/// median of their answers is where the network is unless most of them lie or are behind themselves.
pub const PROBE_PEERS: usize = 5;

/// Round queries one peer may send a VN at once; then one per Cyclon period. An honest VN asks a peer once
/// per probe, and probes at most once per exchange deadline.
pub const ROUND_QUERY_BURST: f64 = 4.0;

/// The sign bit of an f32: cleared, the bit pattern is the magnitude's.
const SIGN_BIT: u32 = 1 << 31;

// A chunk more than MAX_FUTURE_ROUNDS ahead of the newest round this VN's RN started is refused as `WrongRound`;
// exchange states older than the newest minus MAX_KEPT_ROUNDS are forgotten and their chunks are stale. One
// definition (protocol::control) for the overlay and the exchange.
pub use protocol::control::{MAX_FUTURE_ROUNDS, MAX_KEPT_ROUNDS, MAX_LOOKAHEAD};

/// Identity of a VN as the engine needs it: ordered (determinism), serialisable (Cyclon entries).
pub trait VnIdentity: sampling::PeerId + Serialize + DeserializeOwned + Send + 'static {}
impl<T: sampling::PeerId + Serialize + DeserializeOwned + Send + 'static> VnIdentity for T {}

/// Timing and sizes of one VN.
#[derive(Debug, Clone)]
pub struct VnConfig {
    /// Cyclon and overlay parameters.
    pub sampler: SamplerConfig,
    /// How long after sending its chunk a VN waits for its neighbours' chunks before reporting the round done.
    pub exchange_timeout: Duration,
    /// Upper bound of the random delay before a VN sends its chunk (unlinkability of siblings by timing).
    pub send_jitter: Duration,
    /// The earliest a VN sends its chunk, counted from its RN's start of the round (then the jitter): set
    /// near the slowest node's training time, every VN sends at about the same time whatever its own node's
    /// speed, so chunk arrival times stop telling siblings apart (issue 13) — at no round cost, since a
    /// round waits for its slowest neighbour's chunk anyway. Zero: send as soon as chunk and overlay are there.
    pub send_pace: Duration,
    /// Learn the pace from the network: after each round, how long after our node's round start the last
    /// neighbour's chunk came, less the send jitter (the slowest neighbour's training, about); the pace used
    /// is the largest of the last [`PACE_MEMORY`] such estimates, never below `send_pace`. No operator
    /// setting to get wrong, and it follows a network that slows down or speeds up.
    pub send_pace_auto: bool,
    /// Rounds negotiated ahead of the RN's round (0: each overlay starts with its own round;
    /// ≤ [`MAX_LOOKAHEAD`]). With the overlay window W and rounds of length T, rounds stop waiting for the
    /// overlay once `lookahead` ≥ W / T.
    pub lookahead: u64,
    /// The run's last round, if known: no overlay beyond it is negotiated (its messages would be wasted).
    pub last_round: Option<Round>,
    /// Negotiate one overlay, for exchange 0, and exchange over it in every later one (D-PSGD, PDMM): the
    /// lookahead is then unused. An edge refused later is dropped for the rest of the run.
    pub static_graph: bool,
    /// Exchanges this VN stays out of (its RN sits those rounds out: dropout): no overlay is negotiated for
    /// them, so no neighbour waits for a chunk that will not come.
    pub skip: Arc<BTreeSet<Round>>,
    /// Upper bound of the random delay before this VN starts negotiating a round (its own phase; must stay
    /// well inside the overlay's `grace`, which absorbs start skew).
    pub start_jitter: Duration,
    /// Length of each chunk index of the static partition (`chunk_lens.len()` = k). Chunks of another length
    /// for their index are refused.
    pub chunk_lens: Arc<Vec<usize>>,
}

/// The shell's handle for an inbound chunk request, to answer it later (a libp2p response channel).
pub type ReplyToken = u64;

/// What the driver feeds a [`VnEngine`].
#[derive(Debug)]
pub enum VnInput<I> {
    /// A command from this VN's RN.
    FromRn(ToVirtualNode),
    /// The RN started `round`: negotiate the overlays of `round ..= round + lookahead` (sent by the RN when it
    /// starts the round).
    StartRound(Round),
    /// The RN will start `round` (its first) when its warm-up ends: negotiate the overlays of
    /// `round ..= round + lookahead` now, as `StartRound` would, so that the first round does not wait a whole
    /// overlay window for its own. The round itself has not started (its send pace counts from `StartRound`).
    Prepare(Round),
    /// A control message from the authenticated peer `from`.
    Control { from: I, bytes: Vec<u8> },
    /// A chunk request from `from`, to be answered with a `Reply` carrying `token`.
    Chunk {
        from: I,
        bytes: Vec<u8>,
        token: ReplyToken,
    },
    /// `from`'s answer to a chunk we sent for `round`.
    ChunkReply {
        from: I,
        round: Round,
        bytes: Vec<u8>,
    },
    /// A message to `to` could not be delivered (dial failure, timeout, connection closed).
    SendFailed { to: I },
    /// `peer` is gone: its connection closed and it could not be dialled again (a crashed or killed node).
    /// Open exchanges stop waiting for its chunk (as for a missed one) and the overlays drop it; it comes
    /// back through Cyclon when it talks again.
    PeerGone { peer: I },
    /// `from` asks which exchange this VN is at (catch-up); answer with a `ReplyRound` carrying `token`.
    RoundQuery {
        from: I,
        bytes: Vec<u8>,
        token: ReplyToken,
    },
    /// `from`'s answer to our round query.
    RoundAnswer { from: I, bytes: Vec<u8> },
    /// Our round query to `to` got no answer (dial failure, timeout, closed).
    RoundQueryFailed { to: I },
    /// A control message we sent was acknowledged `rtt` after it left (as the driver measured it): paces
    /// the overlay's sub-steps (`round_trips.rs`). A driver that does not measure never sends it.
    ControlRoundTrip { rtt: Duration },
    /// Time passed: due timers fire.
    Tick,
}

/// What a [`VnEngine`] asks its driver to do, or tells it.
#[derive(Debug, Clone, PartialEq)]
pub enum VnOutput<I> {
    SendControl {
        to: I,
        bytes: Vec<u8>,
    },
    /// Send a chunk frame (encoded once, shared by all neighbours of the round).
    SendChunk {
        to: I,
        round: Round,
        bytes: Arc<Vec<u8>>,
    },
    Reply {
        token: ReplyToken,
        bytes: Vec<u8>,
    },
    /// Ask `to` which exchange it is at (an empty request); its answer comes back as `VnInput::RoundAnswer`.
    SendRoundQuery {
        to: I,
    },
    /// Answer the round query `token` with `bytes` (an encoded `Option<Round>`).
    ReplyRound {
        token: ReplyToken,
        bytes: Vec<u8>,
    },
    ToRn(FromVirtualNode),
    /// Hand an accepted chunk copy to the RN as `FromVirtualNode::Received(frame)`, or with a `slot` (VNs
    /// built [`VnEngine::with_edge_slots`]) as `FromVirtualNode::ReceivedOnEdge`. `from` (the neighbour VN
    /// that sent it) is for the driver's [`crate::observe::Observer`] only and never reaches the RN.
    Received {
        from: I,
        slot: Option<u32>,
        frame: ChunkFrame,
    },
    /// Something was refused; counted in the round summary, surfaced for logs and the event stream.
    Refused {
        from: I,
        what: RefusalKind,
    },
}

/// Kinds of refusal, for counting and logs.
#[derive(Debug, Clone, PartialEq)]
pub enum RefusalKind {
    /// Bytes that did not decode or broke a protocol limit.
    Malformed(String),
    /// A sender or a gossiped identity that is not on the peer list.
    NotAllowed,
    /// A chunk refused with this reason.
    Chunk(RefuseReason),
    /// A control message over its sender's rate (dropped unread).
    RateLimited,
}

#[derive(Debug)]
struct ExchangeRound<I> {
    /// The overlay of this round was started here (a round known only from early chunks is not).
    started: bool,
    /// When this VN starts the overlay of this round (scheduled, not started yet).
    start_at: Option<Duration>,
    own: Option<Arc<Vec<u8>>>,
    /// Per-edge exchange: our frame per edge slot (instead of `own`).
    own_per_edge: Option<Vec<Arc<Vec<u8>>>>,
    /// The RN asked for edge slots (`PerEdge`), and whether they were reported.
    per_edge: bool,
    edges_reported: bool,
    /// Edge slots, fixed at the freeze (see the module doc).
    slots: Option<Vec<I>>,
    /// Neighbours that accepted our frame this round.
    delivered_to: BTreeSet<I>,
    neighbours: Option<BTreeSet<I>>,
    /// When our chunk goes out (chunk and neighbour set known, jitter drawn); `deadline` is set once sent.
    send_at: Option<Duration>,
    /// When our RN started this round (its `StartRound`, or its chunk if that came first): `send_pace`
    /// counts from here.
    rn_started: Option<Duration>,
    /// When our RN asked for this round's exchange (its chunk, or its request for the edge slots): a freeze
    /// after it is reported as the round's overlay wait (`RoundSummary::overlay_wait_us`).
    exchange_asked: Option<Duration>,
    /// When the last neighbour's chunk of this round was accepted (the automatic pace learns from it).
    last_copy_at: Option<Duration>,
    /// Neighbours our chunk was sent to, and those whose reply is still outstanding.
    awaiting_reply: BTreeSet<I>,
    received_from: BTreeSet<I>,
    pending: Vec<(I, ChunkFrame, ReplyToken)>,
    deadline: Option<Duration>,
    done: bool,
    summary: RoundSummary,
}

impl<I: Ord> ExchangeRound<I> {
    /// After the freeze, `peer` stopped being a neighbour of this round: its end refused the edge
    /// (half-open: it never counted us) or dropped it. The exchange stops waiting for it, and the round's
    /// summary, if not yet reported, stops counting the edge, whose copies were never going to come either
    /// way. Counted, such an edge showed as a copy lost each way in the metrics (the default run: 0-4 of
    /// about 2,500 a run). A neighbour that went away stays counted: its copy was missed ([`Self::lose_edge`]).
    fn forget_edge(&mut self, peer: &I) {
        let removed = self.neighbours.as_mut().is_some_and(|n| n.remove(peer));
        if removed && !self.done && !self.received_from.contains(peer) {
            self.summary.neighbours = self.summary.neighbours.saturating_sub(1);
        }
        self.awaiting_reply.remove(peer);
    }

    /// `peer` went away (`on_peer_gone`): the exchange stops waiting for it, and the edge stays counted, since
    /// it stood and its copy was missed. Called before the overlay and the static graph drop the edge, so that
    /// [`Self::forget_edge`] then finds nothing to count off.
    fn lose_edge(&mut self, peer: &I) {
        if let Some(n) = self.neighbours.as_mut() {
            n.remove(peer);
        }
        self.awaiting_reply.remove(peer);
    }
}

// Derived Default would require `I: Default`.
impl<I> Default for ExchangeRound<I> {
    fn default() -> Self {
        Self {
            started: false,
            start_at: None,
            own: None,
            own_per_edge: None,
            per_edge: false,
            edges_reported: false,
            slots: None,
            delivered_to: BTreeSet::new(),
            neighbours: None,
            send_at: None,
            rn_started: None,
            exchange_asked: None,
            last_copy_at: None,
            awaiting_reply: BTreeSet::new(),
            received_from: BTreeSet::new(),
            pending: Vec::new(),
            deadline: None,
            done: false,
            summary: RoundSummary::default(),
        }
    }
}

/// One virtual node.
pub struct VnEngine<I> {
    me: I,
    cfg: VnConfig,
    sampler: Sampler<I>,
    jitter_rng: rand_chacha::ChaCha12Rng,
    rounds: BTreeMap<Round, ExchangeRound<I>>,
    /// The newest round the RN started (overlays run up to `lookahead` rounds beyond it).
    newest: Option<Round>,
    /// When the last scheduled negotiation was due (before its jitter): the next one starts at least
    /// `start_spacing()` later.
    last_start: Option<Duration>,
    pending_total: usize,
    allowed: Box<dyn Fn(&I) -> bool + Send>,
    counters: Counters,
    /// With `static_graph`: exchange 0's frozen neighbours, used by every later exchange.
    static_neighbours: Option<BTreeSet<I>>,
    /// With `static_graph`: exchange 0's frozen neighbours as edge slots, kept for the run even when an edge
    /// is dropped from `static_neighbours`.
    static_slots: Option<Vec<I>>,
    /// Hand copies to the RN with their edge slot ([`VnEngine::with_edge_slots`]).
    edge_slots: bool,
    /// Control messages per sender, and Cyclon shuffle requests per sender.
    control_rate: PerPeer<I>,
    shuffle_rate: PerPeer<I>,
    /// The bound on received values.
    bounds: ValueBounds,
    /// Largest |v| of the latest own chunk (the model's scale as this VN knows it); `None` before the first.
    own_scale: Option<f32>,
    /// Peers that showed exchanges beyond what this VN accepts (catch-up, `behind.rs`).
    ahead: AheadWitnesses<I>,
    /// The automatic send pace's latest estimates (`VnConfig::send_pace_auto`).
    pace_estimates: std::collections::VecDeque<Duration>,
    /// Active catch-up ([`VnEngine::with_round_probes`]): the peers a probe may ask (the peer list without
    /// this node's own VNs; empty: no probes), the probe in progress, when the last one started, and an RNG
    /// of its own (choosing whom to ask draws nothing from the streams the overlay and the jitter use).
    probe_peers: Vec<I>,
    probe_own: Vec<I>,
    probes_on: bool,
    probe: Option<Probe<I>>,
    last_probe: Option<Duration>,
    probe_at_join: bool,
    probe_rng: rand_chacha::ChaCha12Rng,
    round_query_rate: PerPeer<I>,
    /// Directed push ([`VnEngine::with_push`]): no overlay, r targets drawn from the Cyclon view.
    push: bool,
    /// Control round trips the driver measured (`VnInput::ControlRoundTrip`): they stretch the sub-steps of
    /// the overlays this VN starts when the network is busy (`round_trips.rs`). None in the simulator.
    round_trips: RoundTrips,
    /// A `Prepare` came: this VN is at the network's start, driven by a node's shell, which measures round
    /// trips (the simulator sends no `Prepare`). Until it has measured any, its overlays take the cold
    /// start's stretch, as its peers' that have (`RoundTrips::next_substep`).
    prepared: bool,
}

/// One catch-up probe: whom it asked, what they answered, when it gives up waiting.
#[derive(Debug)]
struct Probe<I> {
    /// Started as a resumed VN joined (rather than on evidence while running): see `decide_probe`.
    at_join: bool,
    waiting: BTreeSet<I>,
    answers: BTreeMap<I, Round>,
    deadline: Duration,
}

/// Rounds the automatic send pace remembers: its pace is the largest of their estimates.
pub const PACE_MEMORY: usize = 4;

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
        let jitter_rng = rand_chacha::ChaCha12Rng::from_rng(&mut overlay_rng);
        // The overlay's key with fixed bits flipped, same stream: this VN's own, independent sequence.
        let mut key = overlay_rng.get_seed();
        for (b, c) in key.iter_mut().zip(b"shatter catch-up round probes 01") {
            *b ^= c;
        }
        let mut probe_rng = rand_chacha::ChaCha12Rng::from_seed(key);
        probe_rng.set_stream(overlay_rng.get_stream());
        let round_query_rate = PerPeer::new(Rate {
            burst: ROUND_QUERY_BURST,
            per_period: 1.0,
            period: cfg.sampler.cyclon.period,
        });
        let open_rounds = (cfg.lookahead + 1) as f64;
        let control_rate = PerPeer::new(Rate {
            burst: CONTROL_BURST_PER_ROUND * open_rounds,
            per_period: CONTROL_PER_SUBSTEP_PER_ROUND * open_rounds,
            period: cfg.sampler.overlay.substep,
        });
        let shuffle_rate = PerPeer::new(Rate {
            burst: SHUFFLE_BURST,
            per_period: 1.0,
            period: cfg.sampler.cyclon.period,
        });
        let sampler = Sampler::new(me.clone(), cfg.sampler.clone(), cyclon_rng, overlay_rng)?;
        // A peer heard from within an exchange deadline and an overlay window is one still taking part.
        let ahead_window = cfg.exchange_timeout + cfg.sampler.overlay.deadline();
        Ok(Self {
            me,
            cfg,
            sampler,
            jitter_rng,
            rounds: BTreeMap::new(),
            newest: None,
            last_start: None,
            pending_total: 0,
            allowed,
            counters: Counters::default(),
            static_neighbours: None,
            static_slots: None,
            edge_slots: false,
            control_rate,
            shuffle_rate,
            bounds: ValueBounds::default(),
            own_scale: None,
            ahead: AheadWitnesses::new(ahead_window),
            pace_estimates: std::collections::VecDeque::with_capacity(PACE_MEMORY),
            probe_peers: Vec::new(),
            probe_own: Vec::new(),
            probes_on: false,
            probe: None,
            last_probe: None,
            probe_at_join: false,
            probe_rng,
            round_query_rate,
            push: false,
            round_trips: RoundTrips::default(),
            prepared: false,
        })
    }

    /// Turns on active catch-up: when this VN sees a peer beyond what it accepts (or at join, after a
    /// restart), it asks [`PROBE_PEERS`] peers drawn from `peers` and its Cyclon view which exchange they are
    /// at, and adopts the lower median of the answers if that is beyond its own window (`decide_probe`).
    /// `own`: this node's own VNs, never asked (they are exactly as far behind). `resumed_at`: the exchange
    /// a resumed node starts at; the VN counts it as its newest from the start, and probes as it joins.
    /// A setter, as [`VnEngine::with_value_bounds`]: drivers that do not set it (the simulator) never probe.
    pub fn with_round_probes(
        mut self,
        peers: Vec<I>,
        own: Vec<I>,
        resumed_at: Option<Round>,
    ) -> Self {
        let mut peers: Vec<I> = peers
            .into_iter()
            .filter(|p| *p != self.me && (self.allowed)(p))
            .collect();
        peers.sort();
        peers.dedup();
        self.probe_peers = peers;
        self.probe_own = own;
        self.probe_own.sort();
        self.probes_on = true;
        if let Some(at) = resumed_at {
            self.newest = Some(self.newest.map_or(at, |n| n.max(at)));
            self.probe_at_join = true;
        }
        self
    }

    /// Sets the bound on received values (default [`ValueBounds::default`]). A setter rather than a
    /// [`VnConfig`] field so that the drivers that build a `VnConfig` need not change to keep the default.
    pub fn with_value_bounds(mut self, bounds: ValueBounds) -> Result<Self, sampling::Error> {
        bounds.validate().map_err(sampling::Error::Config)?;
        self.bounds = bounds;
        Ok(self)
    }

    /// Hands every accepted copy to the RN with its edge slot (`FromVirtualNode::ReceivedOnEdge`): for
    /// algorithms with per-edge state ([`crate::algo::Algorithm::per_edge`]). A setter, as
    /// [`VnEngine::with_value_bounds`], so that drivers without per-edge algorithms need not change.
    pub fn with_edge_slots(mut self, on: bool) -> Self {
        self.edge_slots = on;
        self
    }

    /// Directed push (EL's local variant, see the module doc): no overlay is negotiated; each round this VN
    /// sends to r peers drawn from its own Cyclon view (r = the overlay degree) and accepts from any allowed
    /// peer. A setter, as [`VnEngine::with_edge_slots`].
    pub fn with_push(mut self, on: bool) -> Self {
        self.push = on;
        self
    }

    /// The largest |v| a received chunk may carry now.
    pub fn value_limit(&self) -> f32 {
        self.bounds.limit(self.own_scale)
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
            .chain(
                self.rounds
                    .values()
                    .filter(|r| !r.done)
                    .filter_map(|r| r.deadline.or(r.send_at).or(r.start_at)),
            )
            .chain(self.probe.as_ref().map(|p| p.deadline))
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
        if std::mem::take(&mut self.probe_at_join) {
            self.start_probe(now, &mut out);
            if let Some(p) = self.probe.as_mut() {
                p.at_join = true;
            }
        }
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
        let saved = saved.into_iter().filter(|e| (self.allowed)(&e.id)).collect();
        self.sampler.restore_view(now, saved);
        self.join(now, bootstrap)
    }

    /// Handles one input; returns what to do.
    pub fn handle(&mut self, now: Duration, input: VnInput<I>) -> Vec<VnOutput<I>> {
        let mut out = Vec::new();
        self.start_due_overlays(now, &mut out);
        match input {
            VnInput::StartRound(round) => self.on_rn_round(now, round, true, &mut out),
            // Directed push draws its targets from the view when the round starts: nothing to prepare.
            VnInput::Prepare(round) if !self.push => {
                self.prepared = true;
                self.on_rn_round(now, round, false, &mut out)
            }
            VnInput::Prepare(_) => {}
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
            VnInput::Control { from, bytes } => self.on_control(now, from, bytes, &mut out),
            VnInput::Chunk { from, bytes, token } => {
                self.on_chunk(now, from, bytes, token, &mut out)
            }
            VnInput::ChunkReply { from, round, bytes } => {
                self.on_chunk_reply(now, from, round, bytes, &mut out)
            }
            VnInput::SendFailed { to } => {
                self.sampler_input(now, SamplerInput::SendFailed { to: to.clone() }, &mut out);
                // A neighbour we could not deliver to will not answer: stop waiting for it.
                for r in self.rounds.values_mut() {
                    r.awaiting_reply.remove(&to);
                }
            }
            VnInput::PeerGone { peer } => self.on_peer_gone(now, peer, &mut out),
            VnInput::RoundQuery { from, bytes, token } => {
                self.on_round_query(now, from, bytes, token, &mut out)
            }
            VnInput::RoundAnswer { from, bytes } => {
                self.on_round_answer(now, from, bytes, &mut out)
            }
            VnInput::RoundQueryFailed { to } => {
                if let Some(p) = self.probe.as_mut() {
                    p.waiting.remove(&to);
                }
            }
            VnInput::ControlRoundTrip { rtt } => self.round_trips.record(rtt),
            VnInput::Tick => self.sampler_input(now, SamplerInput::Tick, &mut out),
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
        self.ahead.expire(now);
        if self.push {
            self.push_round(now, round, out);
            self.forget_old_rounds(out);
            return;
        }
        if self.cfg.static_graph && round > Round::ZERO {
            // A node that sat out exchange 0 never joined the graph: it has no edges for the run (rather than
            // waiting for ever for a graph it did not negotiate).
            if self.static_neighbours.is_none() && self.cfg.skip.contains(&Round::ZERO) {
                self.static_neighbours = Some(BTreeSet::new());
            }
            if self.cfg.skip.contains(&round) {
                // Sat out: no exchange this round (its RN starts it only to keep the VNs' cadence).
                self.forget_old_rounds(out);
                return;
            }
            // Nothing to negotiate: the exchange uses the graph of exchange 0 (once that froze).
            let r = self.rounds.entry(round).or_default();
            r.summary.round = round;
            if started {
                r.rn_started.get_or_insert(now);
            }
            if r.neighbours.is_none()
                && let Some(n) = self.static_neighbours.clone()
            {
                self.on_frozen(now, round, n.into_iter().collect(), out);
            }
            self.forget_old_rounds(out);
            return;
        }
        self.pace_overlays(now);
        let spacing = if started {
            self.start_spacing()
        } else {
            self.prepare_spacing()
        };
        let ahead_max = if self.cfg.static_graph {
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
            let r = self.rounds.entry(u).or_default();
            r.summary.round = u;
            if ahead == 0 && started {
                r.rn_started.get_or_insert(now);
            }
            if r.started || r.start_at.is_some() {
                continue;
            }
            let offset = self
                .cfg
                .start_jitter
                .mul_f64(rand::Rng::random::<f64>(&mut self.jitter_rng));
            let base = self.last_start.map_or(now, |t| now.max(t + spacing));
            self.last_start = Some(base);
            r.start_at = Some(base + offset);
        }
        self.forget_old_rounds(out);
        self.start_due_overlays(now, out);
    }

    /// Directed push: the round's targets, r peers drawn uniformly from the Cyclon view as it is now, stand in
    /// for a frozen overlay (early chunks held for the round are decided, our chunk goes out once it is there).
    fn push_round(&mut self, now: Duration, round: Round, out: &mut Vec<VnOutput<I>>) {
        if self.cfg.skip.contains(&round) || self.cfg.last_round.is_some_and(|last| round > last) {
            return;
        }
        if self
            .rounds
            .get(&round)
            .is_some_and(|r| r.neighbours.is_some())
        {
            return;
        }
        let view: Vec<I> = self
            .sampler
            .view()
            .into_iter()
            .filter(|p| *p != self.me && (self.allowed)(p))
            .collect();
        let fanout = self.cfg.sampler.overlay.degree.min(view.len());
        let targets: Vec<I> = rand::seq::index::sample(&mut self.jitter_rng, view.len(), fanout)
            .into_iter()
            .map(|i| view[i].clone())
            .collect();
        let r = self.rounds.entry(round).or_default();
        r.summary.round = round;
        r.started = true;
        self.on_frozen(now, round, targets, out);
    }

    /// Least time between two negotiation starts: the window W over the lookahead L. Negotiations started
    /// together run their sub-steps in phase, so every proposal walk of all of them leaves at the same
    /// instants and the bursts delay each other past the sub-step (measured in one process: 1.9 of 4
    /// neighbours when 9 rounds started at once). Starts W / L apart keep about L negotiations open, evenly
    /// phased, and cost nothing once running: rounds cannot come faster than one per W / L anyway.
    fn start_spacing(&self) -> Duration {
        match self.cfg.lookahead {
            0 => Duration::ZERO,
            l => self.sampler.overlay().deadline() / l as u32,
        }
    }

    /// Spacing of the starts a `Prepare` schedules (rounds 0 ..= lookahead, before any round has begun): the
    /// configured window, stretched as for the network's start (`INITIAL_STRETCH`), over the lookahead — the
    /// same at every VN. Later starts follow the RN's rounds, so each VN's own stretch (`start_spacing`)
    /// only slows them; a prepared batch follows nothing but this spacing, and scaled by each VN's stretch at
    /// that instant (some VNs had measured round trips, some not) the batch's last rounds started up to a
    /// window apart at different VNs (measured in the default run: round 12 started 1.76-2.73 s into the run
    /// with 0.96 s windows, and rounds 10-12 formed 3.69-3.88 of 4 neighbours against 3.94-4.00 for the
    /// others). The unstretched window packed the batch so densely that the load stretched rounds 6-10 to
    /// 2-3.6 s windows, and those rounds waited for them (mean round 0.16-0.21 s against 0.15 s).
    fn prepare_spacing(&self) -> Duration {
        match self.cfg.lookahead {
            0 => Duration::ZERO,
            l => self.cfg.sampler.overlay.deadline() * super::round_trips::INITIAL_STRETCH / l as u32,
        }
    }

    /// The sub-step of the overlays started from now on: the configured one, stretched by the round trips
    /// measured (`round_trips.rs`). A stretched window also spaces the starts further apart, so a busy
    /// network gets fewer negotiations per second, not only longer ones. Negotiations already running with a
    /// longer sub-step take the shorter one for the sub-steps they have still to come
    /// (`OverlayBuilder::shorten_running`): those a node started under its first rounds' load otherwise kept
    /// their long windows, and the run's last rounds waited for them.
    fn pace_overlays(&mut self, now: Duration) {
        // The network's start: every VN opens its first negotiations (and connections) at once.
        let cold_start = self.newest.is_none_or(|n| n == Round::ZERO);
        let substep = self.round_trips.next_substep(
            self.cfg.sampler.overlay.substep,
            cold_start,
            self.prepared,
        );
        if substep != self.sampler.overlay().config().substep {
            tracing::debug!(?substep, rtt = ?self.round_trips.typical(), "overlay sub-step stretched");
        }
        self.sampler.set_substep(substep);
        self.sampler.shorten_running(now, substep);
    }

    /// Starts the negotiations whose time has come.
    fn start_due_overlays(&mut self, now: Duration, out: &mut Vec<VnOutput<I>>) {
        let due: Vec<Round> = self
            .rounds
            .iter()
            .filter(|(_, r)| r.start_at.is_some_and(|t| t <= now))
            .map(|(&u, _)| u)
            .collect();
        if !due.is_empty() {
            self.pace_overlays(now);
        }
        for round in due {
            let r = self.rounds.get_mut(&round).expect("listed");
            r.start_at = None;
            r.started = true;
            self.sampler_input(now, SamplerInput::StartRound { round }, out);
        }
    }

    fn on_own_chunk(&mut self, now: Duration, frame: ChunkFrame, out: &mut Vec<VnOutput<I>>) {
        let round = frame.round;
        self.on_rn_round(now, round, true, out);
        self.note_own_scale(std::slice::from_ref(&frame));
        let Some(r) = self.rounds.get_mut(&round) else {
            return;
        };
        if r.own_per_edge.is_some() {
            tracing::error!(%round, "a broadcast chunk for a per-edge round is ignored");
            return;
        }
        r.exchange_asked.get_or_insert(now);
        r.own = Some(Arc::new(frame.encode()));
        self.send_own_chunk(now, round, out);
    }

    /// One pass over our own frames per round: the scale received chunks are held to. A non-finite own
    /// value (an RN bug; training that diverges is restored before it gets here) leaves the old scale.
    fn note_own_scale(&mut self, frames: &[ChunkFrame]) {
        let values = || frames.iter().flat_map(|f| f.values.iter());
        let scale = values().fold(0.0f32, |m, v| m.max(v.abs()));
        if !frames.is_empty() && scale.is_finite() && values().all(|v| v.is_finite()) {
            self.own_scale = Some(scale);
        }
    }

    /// The RN's exchange `round` is per-edge: report the slots once the round's neighbours are known.
    fn on_per_edge(&mut self, now: Duration, round: Round, out: &mut Vec<VnOutput<I>>) {
        self.on_rn_round(now, round, true, out);
        let Some(r) = self.rounds.get_mut(&round) else {
            return;
        };
        r.per_edge = true;
        r.exchange_asked.get_or_insert(now);
        self.report_edges(round, out);
    }

    /// Tells the RN the edge slots of a per-edge round, once asked and frozen.
    fn report_edges(&mut self, round: Round, out: &mut Vec<VnOutput<I>>) {
        let Some(r) = self.rounds.get_mut(&round) else {
            return;
        };
        if let (true, false, Some(slots)) = (r.per_edge, r.edges_reported, &r.slots) {
            r.edges_reported = true;
            out.push(VnOutput::ToRn(FromVirtualNode::Edges {
                round,
                slots: slots.len() as u32,
            }));
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
        let Some(r) = self.rounds.get(&round) else {
            return;
        };
        let slots = r.slots.as_ref().map_or(0, Vec::len);
        let fits = r.edges_reported
            && r.own.is_none()
            && r.own_per_edge.is_none()
            && frames.len() == slots
            && frames.iter().all(|f| f.round == round);
        if !fits {
            tracing::error!(%round, frames = frames.len(), slots, "per-edge frames do not match the slots");
        }
        if fits {
            self.note_own_scale(&frames);
        }
        let Some(r) = self.rounds.get_mut(&round) else {
            return;
        };
        if r.own.is_some() || r.own_per_edge.is_some() {
            return;
        }
        // Unfitting frames send nothing (no slot gets a frame) but still open the round's deadline.
        let frames = if fits { frames } else { Vec::new() };
        r.own_per_edge = Some(frames.iter().map(|f| Arc::new(f.encode())).collect());
        self.send_own_chunk(now, round, out);
    }

    /// Schedules our chunk of `round` once both the chunk and the frozen neighbour set are there.
    fn send_own_chunk(&mut self, now: Duration, round: Round, out: &mut Vec<VnOutput<I>>) {
        let Some(r) = self.rounds.get_mut(&round) else {
            return;
        };
        if (r.own.is_none() && r.own_per_edge.is_none())
            || r.neighbours.is_none()
            || r.send_at.is_some()
        {
            return;
        }
        let jitter = self
            .cfg
            .send_jitter
            .mul_f64(rand::Rng::random::<f64>(&mut self.jitter_rng));
        let pace = if self.cfg.send_pace_auto {
            self.pace_estimates
                .iter()
                .copied()
                .max()
                .unwrap_or_default()
                .max(self.cfg.send_pace)
        } else {
            self.cfg.send_pace
        };
        let earliest = r
            .rn_started
            .map_or(now, |started| (started + pace).max(now));
        r.send_at = Some(earliest + jitter);
        self.send_due(now, out);
    }

    /// Sends the chunks whose send time has come.
    fn send_due(&mut self, now: Duration, out: &mut Vec<VnOutput<I>>) {
        for (&round, r) in self.rounds.iter_mut() {
            if r.deadline.is_some() || r.send_at.is_none_or(|t| t > now) {
                continue;
            }
            let Some(neighbours) = &r.neighbours else {
                continue;
            };
            // Broadcast: our chunk to every neighbour. Per edge: frame i to slot i, if that edge still stands.
            let sends: Vec<(I, Arc<Vec<u8>>)> = match (&r.own, &r.own_per_edge, &r.slots) {
                (Some(own), _, _) => neighbours
                    .iter()
                    .map(|n| (n.clone(), own.clone()))
                    .collect(),
                (None, Some(frames), Some(slots)) => slots
                    .iter()
                    .zip(frames)
                    .filter(|(n, _)| neighbours.contains(*n))
                    .map(|(n, f)| (n.clone(), f.clone()))
                    .collect(),
                _ => continue,
            };
            // A round the network has left behind (catch-up): nobody will send us its chunk any more, so the
            // round ends with what it has instead of waiting out the deadline.
            let left_behind = self
                .ahead
                .reported()
                .is_some_and(|at| at > round + MAX_FUTURE_ROUNDS);
            r.deadline = Some(if left_behind {
                now
            } else {
                now + self.cfg.exchange_timeout
            });
            for (n, bytes) in sends {
                if !(self.allowed)(&n) {
                    continue;
                }
                r.awaiting_reply.insert(n.clone());
                self.counters.sent_chunk(bytes.len());
                out.push(VnOutput::SendChunk {
                    to: n,
                    round,
                    bytes,
                });
            }
        }
    }

    fn on_control(&mut self, now: Duration, from: I, bytes: Vec<u8>, out: &mut Vec<VnOutput<I>>) {
        self.counters.received(bytes.len());
        if !(self.allowed)(&from) {
            self.refused(from, RefusalKind::NotAllowed, out);
            return;
        }
        // `from` is the connection's authenticated peer: limited before any decoding work is spent on it.
        if !self.control_rate.allow(&from, now) {
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
                if matches!(m, CyclonMsg::ShuffleRequest { .. })
                    && !self.shuffle_rate.allow(&from, now)
                {
                    self.refused(from, RefusalKind::RateLimited, out);
                    return;
                }
                // Gossip about peers that are not on the list is dropped entry by entry: they never enter a view.
                let msg = ControlMsg::Cyclon(self.filter_cyclon(m));
                self.sampler_input(now, SamplerInput::Message { from, msg }, out);
            }
            ControlMsg::Overlay(m) => {
                let listed = overlay_claims(&m).into_iter().flatten().all(|c| (self.allowed)(c));
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


    /// `from` (authenticated, allowed) showed that the network is at exchange `at` at least: enough distinct
    /// witnesses beyond what this VN accepts and the RN is told (`FromVirtualNode::Behind`), capped at the
    /// run's last exchange.
    fn note_ahead(&mut self, now: Duration, from: &I, at: Round, out: &mut Vec<VnOutput<I>>) {
        let at = self.cfg.last_round.map_or(at, |last| at.min(last));
        let newest = self.newest.unwrap_or(Round::ZERO);
        if let Some(exchange) = self.ahead.note(now, from, at, newest) {
            // A lower bound (the W-th largest claim): see `report_behind` for the margin.
            self.report_behind(now, exchange, self.cfg.lookahead.min(MAX_FUTURE_ROUNDS), out);
        } else if at > newest + MAX_FUTURE_ROUNDS
            && self.ahead.reported().is_none_or(|r| r < at)
            && self.ahead.beyond(now, newest) >= CATCH_UP_WITNESSES
        {
            // Enough distinct peers beyond our window to take seriously, but not a majority of those we hear:
            // we may be in step with the rest, or the peers we hear may be mostly as far behind as we are
            // (two nodes restarted together hear each other first). Ask peers drawn from the whole list (if
            // probes are on). One claim alone does not ask: measured in procs mode, nodes desynchronised by
            // a paused peer's deadlines then probed often, and each jump landing past the median pulled more.
            self.start_probe(now, out);
        }
    }

    /// The network is at exchange `exchange`: tell the RN to rejoin `margin` exchanges further, once per
    /// exchange.
    ///
    /// Passive witnesses give a lower bound, and the network moves on while this node negotiates and
    /// trains its first round back: joining at `exchange` itself it chased the network (measured in procs
    /// mode: 2-3 rounds behind after every jump, for the rest of the run). Joining up to MAX_FUTURE_ROUNDS
    /// further lands in step, yet never so far ahead that the others refuse its chunks or take its messages
    /// as evidence that they are behind (joining `lookahead` ahead did that: measured, a paused node's jump
    /// made the rest of the network skip after it). A probe's median is not a lower bound: see
    /// `decide_probe` for its margin.
    fn report_behind(
        &mut self,
        now: Duration,
        exchange: Round,
        margin: u64,
        out: &mut Vec<VnOutput<I>>,
    ) {
        self.ahead.adopt(exchange);
        let join = exchange + margin;
        let join = self.cfg.last_round.map_or(join, |last| join.min(last));
        out.push(VnOutput::ToRn(FromVirtualNode::Behind { exchange: join }));
        // Exchanges the network has left: their neighbours are done with them and will send nothing more, so
        // they end now with what they got (the RN then catches up at once, not after `exchange_timeout`).
        for (_, r) in self
            .rounds
            .range_mut(..exchange - MAX_FUTURE_ROUNDS)
            .filter(|(_, r)| !r.done && r.deadline.is_some())
        {
            r.deadline = Some(now);
        }
    }

    /// Starts a catch-up probe if probes are on, none is running and the last one started at least an
    /// exchange deadline ago: asks up to [`PROBE_PEERS`] distinct peers, drawn at random from the probe
    /// list, which exchange they are at. At most one probe per deadline, whatever peers claim: a peer
    /// that keeps claiming to be far ahead costs us five tiny requests per deadline, and moves us only if
    /// most of the peers asked agree with it.
    fn start_probe(&mut self, now: Duration, out: &mut Vec<VnOutput<I>>) {
        if !self.probes_on
            || self.probe.is_some()
            || self
                .last_probe
                .is_some_and(|t| now < t + self.cfg.exchange_timeout)
        {
            return;
        }
        let mut candidates: Vec<I> = self
            .probe_peers
            .iter()
            .cloned()
            .chain(self.sampler.view())
            .filter(|p| {
                *p != self.me && (self.allowed)(p) && self.probe_own.binary_search(p).is_err()
            })
            .collect();
        candidates.sort();
        candidates.dedup();
        if candidates.is_empty() {
            return;
        }
        let asked: Vec<I> = rand::seq::IndexedRandom::choose_multiple(
            candidates.as_slice(),
            &mut self.probe_rng,
            PROBE_PEERS,
        )
        .cloned()
        .collect();
        self.last_probe = Some(now);
        self.probe = Some(Probe {
            at_join: false,
            waiting: asked.iter().cloned().collect(),
            answers: BTreeMap::new(),
            deadline: now + self.cfg.exchange_timeout,
        });
        for to in asked {
            self.counters.sent(0);
            out.push(VnOutput::SendRoundQuery { to });
        }
    }

    /// `from` asks which exchange we are at: the newest exchange our RN started (what every overlay message
    /// and chunk of ours tells anyway). Unlisted, over its rate, or with a body: counted, not answered (the
    /// driver drops the request).
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
        if !self.round_query_rate.allow(&from, now) {
            self.refused(from, RefusalKind::RateLimited, out);
            return;
        }
        if !bytes.is_empty() {
            self.refused(from, RefusalKind::Malformed("round query with a body".into()), out);
            return;
        }
        let bytes = protocol::codec::encode_control(&self.newest).expect("an Option<Round> is ≤ 10 bytes");
        self.counters.sent(bytes.len());
        out.push(VnOutput::ReplyRound { token, bytes });
    }

    /// An answer to our probe: kept if it comes from a peer we asked and have not heard from in this probe.
    fn on_round_answer(
        &mut self,
        _now: Duration,
        from: I,
        bytes: Vec<u8>,
        out: &mut Vec<VnOutput<I>>,
    ) {
        self.counters.received(bytes.len());
        if !self.probe.as_mut().is_some_and(|p| p.waiting.remove(&from)) {
            return;
        }
        match protocol::codec::decode_control::<Option<Round>>(&bytes) {
            Ok(Some(at)) => {
                if let Some(p) = self.probe.as_mut() {
                    p.answers.insert(from, at);
                }
            }
            // Not started yet: no vote.
            Ok(None) => {}
            Err(e) => self.refused(from, RefusalKind::Malformed(e.to_string()), out),
        }
    }

    /// Once every peer asked answered (or failed), or at the probe's deadline: with at least
    /// [`CATCH_UP_WITNESSES`] answers, the lower median is where the network is — most of the peers asked
    /// are there or further, so a minority ahead (liars, or nodes that landed ahead after a jump) cannot
    /// move it, nor can a minority behind (a node restarted with us) hold it back. Beyond what this VN
    /// accepts, the RN is told (`Behind`), as for passive witnesses.
    fn decide_probe(&mut self, now: Duration, out: &mut Vec<VnOutput<I>>) {
        if self
            .probe
            .as_ref()
            .is_none_or(|p| !p.waiting.is_empty() && now < p.deadline)
        {
            return;
        }
        let Some(p) = self.probe.take() else { return };
        let at_join = p.at_join;
        let mut answers: Vec<Round> = p.answers.into_values().collect();
        if answers.len() < CATCH_UP_WITNESSES {
            tracing::info!(answers = answers.len(), at_join, "probe: too few answers to decide");
            if at_join {
                // Nothing known: the resumed node starts where it is now (see `start_resumed`).
                self.start_resumed(out);
            }
            return;
        }
        answers.sort_unstable();
        let at = answers[(answers.len() - 1) / 2];
        let at = self.cfg.last_round.map_or(at, |last| at.min(last));
        let newest = self.newest.unwrap_or(Round::ZERO);
        if at > newest + MAX_FUTURE_ROUNDS && self.ahead.reported().is_none_or(|r| r < at) {
            tracing::info!(%at, %newest, answers = answers.len(), "probe: the network is ahead");
            // Where to land. A resumed node's first round back is slower than the others' (the overlays of
            // its next rounds, which they negotiated rounds ago, it negotiates only now): measured in procs
            // mode, landing one round past the median left a restarted pair two rounds behind for seven
            // rounds in one seed of three, so it lands as far past as passive witnesses make it. A running
            // node that probes on evidence lands *at* the median, the round most peers are in: measured, with
            // a margin past it, nodes desynchronised by a paused peer's deadlines probed, landed past the
            // median, and pulled the median on, probe after probe (the six others skipped 4-8 rounds).
            let margin = if at_join {
                self.cfg.lookahead.min(MAX_FUTURE_ROUNDS)
            } else {
                0
            };
            self.report_behind(now, at, margin, out);
        } else if at_join {
            // The network is within this VN's reach. Its first round back is as slow as ever, so it still
            // lands past the median if that is beyond its own round; if not, it starts where it is. Either
            // way at once: a resumed node whose probe found nothing beyond its window used to wait out the
            // warm-up (3 s on loopback, 1.5 s then; measured in procs mode, a restart 1 s after the kill lost
            // 1.5 s this way), which mixes views before round 0 and is not needed after a restart.
            let margin = self.cfg.lookahead.min(MAX_FUTURE_ROUNDS);
            let last = self.cfg.last_round.unwrap_or(Round(u64::MAX));
            if (at + margin).min(last) > newest {
                self.report_behind(now, at, margin, out);
            } else {
                self.start_resumed(out);
            }
        }
    }

    /// A resumed node's join probe is decided without finding the network beyond its own round: its RN
    /// (waiting for this before its first round) starts at the round it resumed at. `Behind` naming this
    /// VN's own exchange is that signal: the RN skips nothing for it.
    fn start_resumed(&mut self, out: &mut Vec<VnOutput<I>>) {
        let exchange = self.newest.unwrap_or(Round::ZERO);
        out.push(VnOutput::ToRn(FromVirtualNode::Behind { exchange }));
    }

    /// `peer`'s connection closed and it could not be dialled again: it is treated as a send failure
    /// (Cyclon drops it; overlays still negotiating drop their links with it), and every open exchange whose
    /// frozen neighbours hold it stops waiting for it — its chunk counts as missed, the round averages over
    /// what arrived — instead of waiting out the exchange deadline, round after round, for the overlays
    /// frozen before it went (with a lookahead of L, up to L of them). The overlay stops counting those
    /// edges too, so a chunk it sends after all is refused as `NotNeighbour` and its end drops the edge.
    fn on_peer_gone(&mut self, now: Duration, peer: I, out: &mut Vec<VnOutput<I>>) {
        let open: Vec<Round> = self
            .rounds
            .iter()
            .filter(|(_, r)| !r.done && r.neighbours.as_ref().is_some_and(|n| n.contains(&peer)))
            .map(|(u, _)| *u)
            .collect();
        // First the exchanges, which keep counting the edge: the drops below reach `forget_edge`.
        for round in &open {
            if let Some(r) = self.rounds.get_mut(round) {
                r.lose_edge(&peer);
            }
        }
        self.sampler_input(now, SamplerInput::SendFailed { to: peer.clone() }, out);
        if self.cfg.static_graph {
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
        if let Some(p) = self.probe.as_mut() {
            p.waiting.remove(&peer);
        }
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
        bytes: Vec<u8>,
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
                self.refused(from, RefusalKind::Malformed(e.to_string()), out);
                self.reply(token, ChunkReply::Refused(RefuseReason::BadChunk), out);
                return;
            }
        };
        if let Err(reason) = self.check_chunk(&frame) {
            if matches!(reason, RefuseReason::NonFinite | RefuseReason::OutOfRange) {
                self.spent_on_poison(frame.round, &from);
            }
            self.refuse(from, token, reason, out);
            return;
        }
        let round = frame.round;
        let newest = self.newest.unwrap_or(Round::ZERO);
        let too_old = round < newest - (MAX_KEPT_ROUNDS - 1)
            || self.rounds.get(&round).is_some_and(|r| r.done);
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
        let linked = self.push || self.knows_link(round, &from);
        let r = self.rounds.entry(round).or_default();
        r.summary.round = round;
        if r.received_from.contains(&from) || r.pending.iter().any(|(p, _, _)| *p == from) {
            self.refuse(from, token, RefuseReason::Duplicate, out);
            return;
        }
        if r.neighbours.is_none() {
            // Not frozen here yet. An honest sender froze first with an edge to us, and an edge exists at both
            // ends before either counts it: a sender with no link in this round's overlay is not a
            // neighbour, and holding its chunk would only let it take a slot an honest early chunk needs.
            if !linked {
                self.refuse(from, token, RefuseReason::NotNeighbour, out);
                return;
            }
            if self.pending_total >= MAX_PENDING_CHUNKS {
                self.refuse(from, token, RefuseReason::WrongRound, out);
                return;
            }
            self.pending_total += 1;
            r.pending.push((from, frame, token));
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
        if let Some(r) = self.rounds.get_mut(&round)
            && !r.done
            && r.neighbours.is_some()
            && is_neighbour
        {
            r.received_from.insert(from.clone());
        }
    }

    /// Checks what the frame alone can tell: a known chunk index, its length, finite values within
    /// [`VnEngine::value_limit`]. NaN or an infinity anywhere is `NonFinite` even if another value is also
    /// out of range (one pass finds both).
    fn check_chunk(&self, frame: &ChunkFrame) -> Result<(), RefuseReason> {
        match self.cfg.chunk_lens.get(frame.chunk.get()) {
            Some(&len) if len == frame.values.len() => {}
            _ => return Err(RefuseReason::BadChunk),
        }
        // One pass over the magnitudes' bit patterns, which order as the magnitudes do and put infinities and
        // NaNs above every finite value: an integer maximum the compiler vectorises, where a float fold with
        // a NaN test per value does not (this pass reads every byte a VN receives).
        let largest_bits = frame
            .values
            .iter()
            .map(|v| v.to_bits() & !SIGN_BIT)
            .fold(0, u32::max);
        if largest_bits >= f32::INFINITY.to_bits() {
            return Err(RefuseReason::NonFinite);
        }
        if f32::from_bits(largest_bits) > self.value_limit() {
            return Err(RefuseReason::OutOfRange);
        }
        Ok(())
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
        let counted = self.push || self.counts_edge(round, &from);
        let edge_slots = self.edge_slots;
        let Some(r) = self.rounds.get_mut(&round) else {
            self.refuse(from, token, RefuseReason::WrongRound, out);
            return;
        };
        if r.done {
            self.refuse(from, token, RefuseReason::WrongRound, out);
            return;
        }
        // The sender's edge slot, for an RN with per-edge state; every counted neighbour has one (the slots
        // are the neighbours at the freeze, and edges are only dropped after it).
        let slot = r
            .slots
            .as_ref()
            .and_then(|s| s.iter().position(|p| *p == from))
            .map(|i| i as u32);
        if !counted || (edge_slots && slot.is_none()) {
            self.refuse(from, token, RefuseReason::NotNeighbour, out);
            return;
        }
        r.received_from.insert(from.clone());
        r.summary.received += 1;
        r.last_copy_at = Some(r.last_copy_at.map_or(now, |t| t.max(now)));
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
        let Some(r) = self.rounds.get_mut(&round) else {
            return;
        };
        if !r.awaiting_reply.remove(&from) {
            return;
        }
        match protocol::codec::decode_control::<ChunkReply>(&bytes) {
            Ok(ChunkReply::Accepted) => {
                // A per-edge exchange already reported (`DeliveredOnEdges` said false for this slot): tell
                // the RN now, or its per-edge state would disagree with the neighbour's for good (PDMM).
                if r.done
                    && r.per_edge
                    && let Some(slot) = r.slots.as_ref().and_then(|s| s.iter().position(|p| *p == from))
                {
                    out.push(VnOutput::ToRn(FromVirtualNode::LateDeliveredOnEdge {
                        round,
                        slot: slot as u32,
                    }));
                }
                r.summary.delivered += 1;
                r.delivered_to.insert(from);
            }
            Ok(ChunkReply::Refused(RefuseReason::NotNeighbour)) if self.push => {}
            Ok(ChunkReply::Refused(RefuseReason::NotNeighbour)) => {
                // Half-open edge: the other end does not count it, so neither do we from now on.
                if self.cfg.static_graph && round > Round::ZERO {
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
                    if let Some(r) = self.rounds.get_mut(&round) {
                        r.forget_edge(&peer);
                    }
                    if self.cfg.static_graph && round == Round::ZERO {
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
        if self.cfg.static_graph && round == Round::ZERO {
            let graph: BTreeSet<I> = neighbours.iter().cloned().collect();
            self.static_slots = Some(graph.iter().take(MAX_EDGE_SLOTS).cloned().collect());
            self.static_neighbours = Some(graph);
        }
        let slots = if self.cfg.static_graph {
            self.static_slots.clone().unwrap_or_default()
        } else {
            let sorted: BTreeSet<&I> = neighbours.iter().collect();
            sorted.into_iter().take(MAX_EDGE_SLOTS).cloned().collect()
        };
        // A round forgotten while its overlay was still open (the RN jumped ahead) stays forgotten.
        let Some(r) = self.rounds.get_mut(&round) else {
            return;
        };
        r.summary.neighbours = neighbours.len() as u32;
        if let Some(asked) = r.exchange_asked {
            r.summary.overlay_wait_us = micros(now.saturating_sub(asked));
        }
        r.neighbours = Some(neighbours.into_iter().collect());
        r.slots = Some(slots);
        let pending = std::mem::take(&mut r.pending);
        self.pending_total -= pending.len();
        for (from, frame, token) in pending {
            self.decide_chunk(now, from, frame, token, out);
        }
        self.report_edges(round, out);
        self.send_own_chunk(now, round, out);
        if self.cfg.static_graph && round == Round::ZERO {
            // Later exchanges the RN already started wait for this graph.
            let waiting: Vec<Round> = self
                .rounds
                .iter()
                .filter(|(u, r)| **u > Round::ZERO && r.neighbours.is_none())
                .map(|(u, _)| *u)
                .collect();
            let graph: Vec<I> = self.static_neighbours.iter().flatten().cloned().collect();
            for u in waiting {
                if self.newest.is_some_and(|n| u <= n) {
                    self.on_frozen(now, u, graph.clone(), out);
                }
            }
        }
    }

    /// Whether this VN counts the edge to `peer` in `round`: the round's overlay, or with a static graph
    /// the graph of exchange 0.
    fn counts_edge(&self, round: Round, peer: &I) -> bool {
        if self.cfg.static_graph && round > Round::ZERO {
            self.static_neighbours
                .as_ref()
                .is_some_and(|n| n.contains(peer))
        } else {
            self.sampler.is_neighbour(round, peer)
        }
    }

    /// Whether `peer` may hold an edge to us in `round` before we froze it (see `on_chunk`).
    fn knows_link(&self, round: Round, peer: &I) -> bool {
        if self.cfg.static_graph && round > Round::ZERO {
            self.counts_edge(round, peer)
        } else {
            self.sampler.has_link(round, peer)
        }
    }

    /// A static edge the other end no longer counts: gone for the rest of the run.
    fn drop_static_edge(&mut self, peer: &I) {
        if let Some(n) = self.static_neighbours.as_mut() {
            n.remove(peer);
        }
        for r in self.rounds.values_mut().filter(|r| !r.done) {
            r.forget_edge(peer);
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
        if self.cfg.static_graph || self.push {
            return 0;
        }
        let Some(newest) = self.newest else { return 0 };
        let furthest = self
            .rounds
            .iter()
            .rev()
            .find(|(_, r)| r.started)
            .map_or(newest, |(u, _)| *u);
        let ahead = furthest.0.saturating_sub(newest.0);
        self.cfg.lookahead.saturating_sub(ahead)
    }

    /// Sends due chunks and reports finished rounds.
    fn finish(&mut self, now: Duration, out: &mut Vec<VnOutput<I>>) {
        self.send_due(now, out);
        // Peers heard within one overlay window: those in step speak to us every few sub-steps.
        let fresh = self.sampler.overlay().deadline();
        let lag = self.negotiation_lag();
        let degree = self.cfg.sampler.overlay.degree;
        for (&round, r) in self.rounds.iter_mut() {
            let Some(deadline) = r.deadline else { continue };
            if r.done {
                continue;
            }
            // A push round's senders are not known in advance: it runs to its deadline.
            let all_in = !self.push
                && r.neighbours
                    .as_ref()
                    .is_some_and(|n| n.iter().all(|p| r.received_from.contains(p)));
            // Issue 15: an exchange the network is well behind (`HOLD_LEAD`) stays open until most peers
            // heard lately are within reach of it, or its deadline: a node that landed ahead, or whose
            // exchange had nobody to wait for, would otherwise run on alone (see `HOLD_LEAD`). Checked
            // after every input, the Cyclon ticks included.
            // Only an exchange short of partners is held: a node that ran ahead alone finds few or none (its
            // own siblings at most), while a VN in step with its r neighbours' chunks in has its evidence that
            // the network is where it is. The peers' claims are lower bounds that run several rounds low even
            // in step (each is the newest round a peer happened to talk to us about, less the lookahead):
            // without this, 5 of 20 rounds of a clean default run were held, up to 1 s each.
            let short = r.neighbours.as_ref().is_some_and(|n| n.len() < degree);
            let held = all_in && short && self.ahead.network_behind(now, round - lag, fresh);
            if (all_in && r.awaiting_reply.is_empty() && !held) || now >= deadline {
                r.done = true;
                // A round complete before its deadline tells when the slowest neighbour's chunk came.
                if self.cfg.send_pace_auto
                    && all_in
                    && let (Some(start), Some(last)) = (r.rn_started, r.last_copy_at)
                {
                    if self.pace_estimates.len() == PACE_MEMORY {
                        self.pace_estimates.pop_front();
                    }
                    self.pace_estimates
                        .push_back(last.saturating_sub(start).saturating_sub(self.cfg.send_jitter));
                }
                // Sends in flight hold their own reference; a finished round keeps no copy of the chunk.
                r.own = None;
                r.own_per_edge = None;
                if r.per_edge {
                    let accepted = r
                        .slots
                        .iter()
                        .flatten()
                        .map(|p| r.delivered_to.contains(p))
                        .collect();
                    out.push(VnOutput::ToRn(FromVirtualNode::DeliveredOnEdges {
                        round,
                        accepted,
                    }));
                }
                let mut summary = r.summary;
                self.counters.fill(&mut summary);
                out.push(VnOutput::ToRn(FromVirtualNode::Done(summary)));
            }
        }
    }

    fn forget_old_rounds(&mut self, out: &mut Vec<VnOutput<I>>) {
        let Some(newest) = self.newest else { return };
        let keep_from = newest - (MAX_KEPT_ROUNDS - 1);
        let old: Vec<Round> = self.rounds.range(..keep_from).map(|(r, _)| *r).collect();
        for round in old {
            if let Some(r) = self.rounds.remove(&round) {
                self.pending_total -= r.pending.len();
                for (from, _, token) in r.pending {
                    self.refuse(from, token, RefuseReason::WrongRound, out);
                }
            }
        }
    }

    /// Chunks held for rounds whose overlay is not frozen yet (each holds an unanswered reply token); at most
    /// [`MAX_PENDING_CHUNKS`]. For tests and metrics.
    pub fn pending_len(&self) -> usize {
        self.pending_total
    }

    /// Rounds this VN keeps exchange state for.
    pub fn rounds_kept(&self) -> usize {
        self.rounds.len()
    }

    /// Bounds and bookkeeping, for tests (run after every input): the pending count matches the chunks held
    /// and stays within [`MAX_PENDING_CHUNKS`]; only unfrozen rounds hold chunks; every kept round lies in
    /// the window `newest − (MAX_KEPT_ROUNDS − 1) ..= newest + max(lookahead, MAX_FUTURE_ROUNDS)`; and the
    /// sampler's own invariants hold.
    #[doc(hidden)]
    pub fn check_invariants(&self) -> Result<(), String> {
        let held: usize = self.rounds.values().map(|r| r.pending.len()).sum();
        if held != self.pending_total || held > MAX_PENDING_CHUNKS {
            return Err(format!(
                "{held} chunks held, counted {}, limit {MAX_PENDING_CHUNKS}",
                self.pending_total
            ));
        }
        if let Some((round, _)) = self
            .rounds
            .iter()
            .find(|(_, r)| r.neighbours.is_some() && !r.pending.is_empty())
        {
            return Err(format!("round {round} is frozen but still holds chunks"));
        }
        let newest = self.newest.unwrap_or(Round::ZERO);
        let (lo, hi) = (
            newest - (MAX_KEPT_ROUNDS - 1),
            newest + self.cfg.lookahead.max(MAX_FUTURE_ROUNDS),
        );
        if let Some(round) = self.rounds.keys().find(|&&r| r < lo || r > hi) {
            return Err(format!(
                "round {round} kept outside the window {lo} ..= {hi} ({} rounds kept)",
                self.rounds.len()
            ));
        }
        self.sampler.check_invariants()
    }
}

/// Whole microseconds of `d`, saturating (a `u64` of microseconds holds 584,000 years).
fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The identities an overlay message claims about third parties (at most two), which must be on the peer
/// list. An array, not a `Vec`: it is asked of every overlay message.
fn overlay_claims<I>(m: &OverlayMsg<I>) -> [Option<&I>; 2] {
    match m {
        OverlayMsg::Propose { origin, .. } | OverlayMsg::SpliceRequest { origin, .. } => {
            [origin.as_ref(), None]
        }
        OverlayMsg::Accept { acceptor, .. } => [Some(acceptor), None],
        OverlayMsg::SpliceOffer {
            splitter, other, ..
        } => [Some(splitter), Some(other)],
        OverlayMsg::Handover { newcomer, .. } => [Some(newcomer), None],
        _ => [None, None],
    }
}

/// How far below a message's round its sender's own round negotiation is known to be, beyond the lookahead
/// (catch-up counts it as a witness of the network's progress), or `None` if the message says nothing about
/// the sender.
///
/// A node negotiates up to `lookahead` rounds ahead of its own, so a sender speaking for itself (its own
/// walk, its own answer, a reply) is at least that far. A walk another VN named as its origin speaks for that
/// origin, and counting its forwarders would let one node ahead of the others (or one liar) appear as many
/// witnesses. A walk or answer that hides its origin may come from a relay, which takes a message at most
/// `MAX_FUTURE_ROUNDS` ahead of its own newest round: that much lower is what it shows of itself.
fn progress_shown<I: PartialEq>(m: &OverlayMsg<I>, from: &I) -> Option<u64> {
    match m {
        OverlayMsg::Propose { origin, .. } | OverlayMsg::SpliceRequest { origin, .. } => {
            match origin {
                Some(o) if o == from => Some(0),
                Some(_) => None,
                None => Some(MAX_FUTURE_ROUNDS),
            }
        }
        OverlayMsg::Accept { acceptor: own, .. }
        | OverlayMsg::SpliceOffer { splitter: own, .. } => {
            Some(if own == from { 0 } else { MAX_FUTURE_ROUNDS })
        }
        OverlayMsg::Handover { .. } => None,
        _ => Some(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use sampling::derive_rng;

    const LENS: [usize; 2] = [3, 2];

    fn engine(allowed: fn(&u32) -> bool) -> VnEngine<u32> {
        let cfg = VnConfig {
            sampler: SamplerConfig {
                cyclon: sampling::CyclonConfig::default(),
                overlay: sampling::OverlayConfig::new(2, Duration::from_millis(10)),
            },
            exchange_timeout: Duration::from_secs(1),
            send_jitter: Duration::from_millis(100),
            send_pace: Duration::ZERO,
            send_pace_auto: false,
            lookahead: 0,
            last_round: None,
            static_graph: false,
            skip: Arc::default(),
            start_jitter: Duration::ZERO,
            chunk_lens: Arc::new(LENS.to_vec()),
        };
        engine_with(cfg, allowed)
    }

    /// VN 0 with `cfg`, accepting the peers `allowed` accepts.
    fn engine_with(cfg: VnConfig, allowed: fn(&u32) -> bool) -> VnEngine<u32> {
        VnEngine::new(
            0,
            cfg,
            derive_rng(1, 0),
            derive_rng(1, 1),
            Box::new(allowed),
        )
        .unwrap()
    }

    fn chunk(round: u64, index: u32, values: &[f32]) -> Vec<u8> {
        ChunkFrame {
            round: Round(round),
            chunk: protocol::ChunkIndex(index),
            values: values.to_vec(),
        }
        .encode()
    }

    /// Control bytes from `from` (its own envelope).
    /// `from` walks a proposal for `round` through `e`: a claim that `from` is at least that far (catch-up).
    fn claim(e: &mut VnEngine<u32>, now: Duration, from: u32, round: u64) -> Vec<VnOutput<u32>> {
        let msg = ControlMsg::Overlay(OverlayMsg::Propose {
            round: Round(round),
            origin: Some(from),
            nonce: 1,
            ttl: 1,
        });
        e.handle(now, VnInput::Control { from, bytes: control(from, msg) })
    }

    fn control(from: u32, msg: ControlMsg<u32>) -> Vec<u8> {
        protocol::codec::encode_control(&ControlEnvelope { sender: from, msg }).unwrap()
    }

    /// Proposes to `e` from fresh peers, one per sub-step, until it offers one a slot in `round` (it accepts
    /// only in its acceptor sub-steps). Returns that peer and the time.
    fn reserve_link(e: &mut VnEngine<u32>, round: Round, from: Duration) -> (u32, Duration) {
        let substep = e.cfg.sampler.overlay.substep;
        for i in 0..20u32 {
            let now = from + substep * i + Duration::from_millis(1);
            let peer = 100 + i;
            let msg = ControlMsg::Overlay(OverlayMsg::Propose {
                round,
                origin: Some(peer),
                nonce: i as u64,
                ttl: 1,
            });
            let bytes = control(peer, msg);
            e.handle(now, VnInput::Control { from: peer, bytes });
            if e.sampler.has_link(round, &peer) {
                return (peer, now);
            }
        }
        panic!("no proposal accepted in 20 sub-steps");
    }

    /// The refusal reason sent back for a chunk, if any.
    fn reply_of(out: &[VnOutput<u32>]) -> Option<ChunkReply> {
        out.iter().find_map(|o| match o {
            VnOutput::Reply { bytes, .. } => Some(protocol::codec::decode_control(bytes).unwrap()),
            _ => None,
        })
    }

    fn send_chunk(
        e: &mut VnEngine<u32>,
        now: Duration,
        from: u32,
        bytes: Vec<u8>,
    ) -> Vec<VnOutput<u32>> {
        e.handle(
            now,
            VnInput::Chunk {
                from,
                bytes,
                token: 1,
            },
        )
    }

    /// When a VN with send pace `pace` sends its chunk of round 0, counted from its RN's `StartRound`, if the
    /// chunk comes `chunk_at` after it (and the RN sent `Prepare` `prepared_ahead` before it, if any).
    fn paced_send_time(
        pace: Duration,
        prepared_ahead: Option<Duration>,
        chunk_at: Duration,
    ) -> Option<Duration> {
        let cfg = VnConfig {
            static_graph: true,
            send_jitter: Duration::ZERO,
            send_pace: pace,
            send_pace_auto: false,
            chunk_lens: Arc::new(vec![1]),
            ..engine(|_| true).cfg.clone()
        };
        let mut e = engine_with(cfg, |_| true);
        let start = Duration::from_secs(100);
        if let Some(ahead) = prepared_ahead {
            e.handle(start - ahead, VnInput::Prepare(Round(0)));
        }
        e.handle(start, VnInput::StartRound(Round(0)));
        let mut out = Vec::new();
        e.on_frozen(start, Round(0), vec![5, 7], &mut out);
        let frame = ChunkFrame {
            round: Round(0),
            chunk: protocol::ChunkIndex(0),
            values: vec![1.0],
        };
        let mut t = start + chunk_at;
        let mut out = e.handle(t, VnInput::FromRn(ToVirtualNode::Exchange(frame)));
        // Step time in 5 ms ticks until the chunk goes out, inside the overlay's own window (140 ms here:
        // past it the sampler's negotiation, which has no peers, would replace the injected overlay).
        while t < start + Duration::from_millis(135) {
            if out.iter().any(|o| matches!(o, VnOutput::SendChunk { .. })) {
                return Some(t - start);
            }
            t += Duration::from_millis(5);
            out = e.handle(t, VnInput::Tick);
        }
        None
    }

    /// The overlay wait a VN reports for round 0 when its RN hands it the chunk `chunk_at` after the round
    /// started and the overlay freezes `frozen_at` after it.
    fn overlay_wait(chunk_at: Duration, frozen_at: Duration) -> u64 {
        let cfg = VnConfig {
            chunk_lens: Arc::new(vec![1]),
            ..engine(|_| true).cfg.clone()
        };
        let mut e = engine_with(cfg, |_| true);
        let start = Duration::from_secs(100);
        e.handle(start, VnInput::StartRound(Round(0)));
        let frame = ChunkFrame {
            round: Round(0),
            chunk: protocol::ChunkIndex(0),
            values: vec![1.0],
        };
        let mut events: Vec<(Duration, bool)> = vec![(chunk_at, true), (frozen_at, false)];
        events.sort();
        for (at, is_chunk) in events {
            if is_chunk {
                e.handle(
                    start + at,
                    VnInput::FromRn(ToVirtualNode::Exchange(frame.clone())),
                );
            } else {
                e.on_frozen(start + at, Round(0), vec![5, 7], &mut Vec::new());
            }
        }
        e.rounds[&Round(0)].summary.overlay_wait_us
    }

    /// A round's summary tells how long its exchange waited for the overlay: from the RN's chunk to the
    /// freeze, and nothing when the overlay was frozen before the chunk came (negotiated ahead).
    #[test]
    fn the_summary_reports_how_long_the_chunk_waited_for_the_overlay() {
        let ms = Duration::from_millis;
        assert_eq!(
            overlay_wait(ms(10), ms(55)),
            45_000,
            "frozen 45 ms after the chunk"
        );
        assert_eq!(overlay_wait(ms(10), ms(10)), 0, "frozen as the chunk came");
        assert_eq!(
            overlay_wait(ms(30), ms(5)),
            0,
            "frozen before the chunk: no wait"
        );
    }

    /// The send pace holds a chunk until the node's round start + pace, whenever the chunk came: a node that
    /// trained fast sends no earlier than one that trained slowly (issue 13); with no pace it sends at once.
    #[test]
    fn a_paced_chunk_leaves_at_round_start_plus_pace_not_when_training_ended() {
        let sent_at = |pace, chunk_at| paced_send_time(pace, None, chunk_at);
        let ms = Duration::from_millis;
        assert_eq!(sent_at(Duration::ZERO, ms(30)), Some(ms(30)), "no pace: at once");
        // Trained in 30 ms or in 70 ms: both send at the 100 ms pace.
        assert_eq!(sent_at(ms(100), ms(30)), Some(ms(100)));
        assert_eq!(sent_at(ms(100), ms(70)), Some(ms(100)));
        // Slower than the pace: at once, the pace never holds a late chunk longer.
        assert_eq!(sent_at(ms(100), ms(120)), Some(ms(120)));
    }

    /// `Prepare(0)` (its RN's warm-up ends soon) opens round 0's negotiation as `StartRound(0)` would, but the
    /// round has not started: a paced chunk leaves at the `StartRound` that follows plus the pace, not at the
    /// prepare plus the pace.
    #[test]
    fn a_prepared_first_round_is_negotiated_early_and_paced_from_its_real_start() {
        let opened_at = |first: fn(Round) -> VnInput<u32>| {
            let mut e = engine(|_| true);
            e.handle(Duration::ZERO, first(Round(0)));
            (0..200u64)
                .map(Duration::from_millis)
                .find(|&now| {
                    e.handle(now, VnInput::Tick);
                    e.neighbours(Round(0)).is_some()
                })
                .expect("opened")
        };
        assert_eq!(opened_at(VnInput::Prepare), opened_at(VnInput::StartRound));

        let ms = Duration::from_millis;
        assert_eq!(
            paced_send_time(ms(100), Some(ms(20)), ms(30)),
            Some(ms(100)),
            "paced from StartRound, not from Prepare"
        );
    }

    /// The automatic pace learns from a completed exchange when the slowest neighbour's chunk came (here 40 ms
    /// after the round start, no jitter) and holds the next exchange's chunk until its start + 40 ms.
    #[test]
    fn the_automatic_pace_learns_when_the_last_neighbours_chunk_came() {
        let cfg = VnConfig {
            static_graph: true,
            send_jitter: Duration::ZERO,
            send_pace: Duration::ZERO,
            send_pace_auto: true,
            chunk_lens: Arc::new(vec![1]),
            ..engine(|_| true).cfg.clone()
        };
        let mut e =
            VnEngine::new(0u32, cfg, derive_rng(1, 0), derive_rng(1, 1), Box::new(|_| true)).unwrap();
        let ms = Duration::from_millis;
        let frame = |round: u64| ChunkFrame {
            round: Round(round),
            chunk: protocol::ChunkIndex(0),
            values: vec![1.0],
        };
        let sent = |out: &[VnOutput<u32>]| out.iter().any(|o| matches!(o, VnOutput::SendChunk { .. }));
        e.handle(ms(0), VnInput::StartRound(Round(0)));
        let mut out = Vec::new();
        // The static graph of exchange 0 (injected); later exchanges run over it.
        e.on_frozen(ms(0), Round(0), vec![5], &mut out);
        // Exchange 1: nothing learnt yet, so the chunk leaves at once.
        e.handle(ms(10), VnInput::StartRound(Round(1)));
        let out = e.handle(ms(10), VnInput::FromRn(ToVirtualNode::Exchange(frame(1))));
        assert!(sent(&out), "{out:?}");
        let reply = protocol::codec::encode_control(&ChunkReply::Accepted).unwrap();
        e.handle(
            ms(11),
            VnInput::ChunkReply {
                from: 5,
                round: Round(1),
                bytes: reply,
            },
        );
        let out = send_chunk(&mut e, ms(50), 5, frame(1).encode());
        assert!(
            out.iter()
                .any(|o| matches!(o, VnOutput::ToRn(FromVirtualNode::Done(_)))),
            "exchange 1 complete: {out:?}"
        );
        // Exchange 2 starts at 60 ms, its chunk is ready at 65 ms, and waits for 60 + 40 ms.
        e.handle(ms(60), VnInput::StartRound(Round(2)));
        let mut out = e.handle(ms(65), VnInput::FromRn(ToVirtualNode::Exchange(frame(2))));
        let mut t = ms(65);
        while !sent(&out) && t < ms(130) {
            t += ms(5);
            out = e.handle(t, VnInput::Tick);
        }
        assert_eq!(t, ms(100), "sent at the learnt pace");
    }

    /// Directed push (EL-Local): no overlay message is ever sent; the chunk goes to r = 2 distinct peers of the
    /// Cyclon view; a chunk from a peer we never linked with is accepted (one that comes before the RN starts
    /// the round waits for it); a second one from the same peer is a duplicate; the round ends at its
    /// deadline, not when the r targets answered (no receiver knows its in-degree).
    #[test]
    fn push_mode_sends_to_view_peers_and_accepts_from_any_peer() {
        let mut e = engine(|_| true).with_push(true);
        let t = Duration::from_secs(1);
        let mut all = e.join(t, [1u32, 2, 3, 4, 5]);
        let early = send_chunk(&mut e, t, 9, chunk(0, 0, &[0.1, 0.2, 0.3]));
        assert_eq!(reply_of(&early), None, "held until the RN starts round 0");
        assert_eq!(e.pending_len(), 1);
        let out = e.handle(t, VnInput::StartRound(Round(0)));
        assert_eq!(reply_of(&out), Some(ChunkReply::Accepted));
        assert!(
            out.iter()
                .any(|o| matches!(o, VnOutput::Received { from: 9, .. }))
        );
        let dup = send_chunk(&mut e, t, 9, chunk(0, 0, &[0.1, 0.2, 0.3]));
        assert_eq!(
            reply_of(&dup),
            Some(ChunkReply::Refused(RefuseReason::Duplicate))
        );
        let frame = ChunkFrame {
            round: Round(0),
            chunk: protocol::ChunkIndex(0),
            values: vec![0.5; 3],
        };
        all.extend(e.handle(t, VnInput::FromRn(ToVirtualNode::Exchange(frame))));
        let sent_at = t + Duration::from_millis(150);
        all.extend(e.handle(sent_at, VnInput::Tick));
        let targets: BTreeSet<u32> = all
            .iter()
            .filter_map(|o| match o {
                VnOutput::SendChunk { to, .. } => Some(*to),
                _ => None,
            })
            .collect();
        assert_eq!(targets.len(), 2, "{all:?}");
        assert!(targets.iter().all(|p| (1..=5).contains(p)), "{targets:?}");
        for to in &targets {
            let bytes = protocol::codec::encode_control(&ChunkReply::Accepted).unwrap();
            all.extend(e.handle(
                sent_at,
                VnInput::ChunkReply {
                    from: *to,
                    round: Round(0),
                    bytes,
                },
            ));
        }
        let done = |out: &[VnOutput<u32>]| {
            out.iter().find_map(|o| match o {
                VnOutput::ToRn(FromVirtualNode::Done(s)) => Some(*s),
                _ => None,
            })
        };
        assert_eq!(
            done(&all),
            None,
            "every target answered, but senders are unknown: wait"
        );
        let out = e.handle(sent_at + e.cfg.exchange_timeout, VnInput::Tick);
        let s = done(&out).expect("the deadline ends the round");
        assert_eq!((s.received, s.delivered, s.neighbours), (1, 2, 2));
        all.extend(out);
        for o in &all {
            if let VnOutput::SendControl { bytes, .. } = o {
                let env: ControlEnvelope<u32> = protocol::codec::decode_control(bytes).unwrap();
                assert!(matches!(env.msg, ControlMsg::Cyclon(_)), "{:?}", env.msg);
            }
        }
    }

    /// A per-edge exchange that ended before a neighbour's acceptance came back reports the slot undelivered;
    /// the acceptance that comes afterwards is reported as a late delivery for that slot (PDMM's mirrors).
    #[test]
    fn an_acceptance_after_the_deadline_is_reported_late() {
        let cfg = VnConfig {
            static_graph: true,
            send_jitter: Duration::ZERO,
            chunk_lens: Arc::new(vec![1]),
            ..engine(|_| true).cfg.clone()
        };
        let mut e = VnEngine::new(0u32, cfg, derive_rng(1, 0), derive_rng(1, 1), Box::new(|_| true))
            .unwrap()
            .with_edge_slots(true);
        let ms = Duration::from_millis;
        e.handle(ms(0), VnInput::StartRound(Round(0)));
        let mut out = Vec::new();
        e.on_frozen(ms(0), Round(0), vec![5], &mut out);
        e.handle(ms(10), VnInput::StartRound(Round(1)));
        e.handle(ms(10), VnInput::FromRn(ToVirtualNode::PerEdge(Round(1))));
        let frame = |v: f32| ChunkFrame {
            round: Round(1),
            chunk: protocol::ChunkIndex(0),
            values: vec![v],
        };
        let out = e.handle(
            ms(10),
            VnInput::FromRn(ToVirtualNode::PerEdgeFrames {
                round: Round(1),
                frames: vec![frame(1.0)],
            }),
        );
        assert!(out.iter().any(|o| matches!(o, VnOutput::SendChunk { to: 5, .. })), "{out:?}");
        send_chunk(&mut e, ms(20), 5, frame(2.0).encode());
        // No answer from 5 before the 1 s deadline: the exchange ends with slot 0 undelivered.
        let out = e.handle(ms(1100), VnInput::Tick);
        assert!(
            out.iter().any(|o| matches!(o, VnOutput::ToRn(FromVirtualNode::DeliveredOnEdges { round: Round(1), accepted }) if accepted == &vec![false])),
            "{out:?}"
        );
        let accepted = protocol::codec::encode_control(&ChunkReply::Accepted).unwrap();
        let out = e.handle(
            ms(1200),
            VnInput::ChunkReply {
                from: 5,
                round: Round(1),
                bytes: accepted,
            },
        );
        assert_eq!(
            out.iter()
                .filter(|o| matches!(o, VnOutput::ToRn(FromVirtualNode::LateDeliveredOnEdge { round: Round(1), slot: 0 })))
                .count(),
            1,
            "{out:?}"
        );
    }

    /// An edge its other end dropped or refused after our freeze is forgotten: the exchange stops waiting for
    /// it and the summary stops counting it, unless its copy came (the edge was real) or the summary was
    /// already reported.
    #[test]
    fn an_edge_dropped_after_the_freeze_is_not_counted_as_a_neighbour() {
        let mut r: ExchangeRound<u32> = ExchangeRound {
            neighbours: Some([5, 7, 9].into_iter().collect()),
            awaiting_reply: [5, 7, 9].into_iter().collect(),
            received_from: [7].into_iter().collect(),
            ..ExchangeRound::default()
        };
        r.summary.neighbours = 3;
        r.forget_edge(&9);
        assert_eq!(r.summary.neighbours, 2);
        assert!(!r.awaiting_reply.contains(&9));
        assert!(!r.neighbours.as_ref().unwrap().contains(&9));
        // Twice: counted off once.
        r.forget_edge(&9);
        assert_eq!(r.summary.neighbours, 2);
        // Its copy came: the edge stood, and a lost reply is a lost copy.
        r.forget_edge(&7);
        assert_eq!(r.summary.neighbours, 2);
        // Reported already: the summary that went out stays as it was.
        r.done = true;
        r.forget_edge(&5);
        assert_eq!(r.summary.neighbours, 2);
        assert!(r.awaiting_reply.is_empty());
    }

    /// Per-edge exchanges over a static graph: the slots are the graph's sorted neighbours, frame i goes to
    /// slot i, copies come back with their slot, delivery is reported per slot; an edge refused later keeps
    /// its slot (the count stays 3) but its frame is no longer sent and its flag is false.
    #[test]
    fn per_edge_frames_go_to_their_slots_and_a_dropped_edge_keeps_its_slot_without_a_frame() {
        let cfg = VnConfig {
            static_graph: true,
            send_jitter: Duration::ZERO,
            send_pace: Duration::ZERO,
            send_pace_auto: false,
            chunk_lens: Arc::new(vec![1]),
            ..engine(|_| true).cfg.clone()
        };
        let mut e = VnEngine::new(
            0u32,
            cfg,
            derive_rng(1, 0),
            derive_rng(1, 1),
            Box::new(|_| true),
        )
        .unwrap()
        .with_edge_slots(true);
        let t = Duration::ZERO;
        e.handle(t, VnInput::StartRound(Round(0)));
        // Exchange 0's overlay freezes with three neighbours (injected: the negotiation is the sampler's).
        let mut out = Vec::new();
        e.on_frozen(t, Round(0), vec![9, 5, 7], &mut out);
        let frame = |round: u64, v: f32| ChunkFrame {
            round: Round(round),
            chunk: protocol::ChunkIndex(0),
            values: vec![v],
        };
        let sends = |out: &[VnOutput<u32>]| -> Vec<(u32, f32)> {
            out.iter()
                .filter_map(|o| match o {
                    VnOutput::SendChunk { to, bytes, .. } => {
                        Some((*to, ChunkFrame::decode(bytes).unwrap().values[0]))
                    }
                    _ => None,
                })
                .collect()
        };
        let edges = |out: &[VnOutput<u32>]| {
            out.iter().find_map(|o| match o {
                VnOutput::ToRn(FromVirtualNode::Edges { round, slots }) => Some((*round, *slots)),
                _ => None,
            })
        };
        let reply = |e: &mut VnEngine<u32>, from: u32, round: u64, r: ChunkReply| {
            let bytes = protocol::codec::encode_control(&r).unwrap();
            e.handle(
                t,
                VnInput::ChunkReply {
                    from,
                    round: Round(round),
                    bytes,
                },
            )
        };

        // Exchange 1: three slots, sorted: 5, 7, 9.
        let out = e.handle(t, VnInput::FromRn(ToVirtualNode::PerEdge(Round(1))));
        assert_eq!(edges(&out), Some((Round(1), 3)));
        let frames = vec![frame(1, 10.0), frame(1, 11.0), frame(1, 12.0)];
        let out = e.handle(
            t,
            VnInput::FromRn(ToVirtualNode::PerEdgeFrames {
                round: Round(1),
                frames,
            }),
        );
        assert_eq!(
            sends(&out),
            vec![(5, 10.0), (7, 11.0), (9, 12.0)],
            "frame i to slot i"
        );
        let out = e.handle(
            t,
            VnInput::Chunk {
                from: 7,
                bytes: frame(1, 3.0).encode(),
                token: 1,
            },
        );
        assert!(
            out.iter().any(|o| matches!(
                o,
                VnOutput::Received {
                    from: 7,
                    slot: Some(1),
                    ..
                }
            )),
            "{out:?}"
        );
        reply(&mut e, 5, 1, ChunkReply::Accepted);
        reply(&mut e, 7, 1, ChunkReply::Accepted);
        // 9 no longer counts the edge: it is dropped for the rest of the run.
        reply(
            &mut e,
            9,
            1,
            ChunkReply::Refused(RefuseReason::NotNeighbour),
        );
        let out = e.handle(
            t,
            VnInput::Chunk {
                from: 5,
                bytes: frame(1, 4.0).encode(),
                token: 2,
            },
        );
        let report = out.iter().position(|o| {
            matches!(o, VnOutput::ToRn(FromVirtualNode::DeliveredOnEdges { round: Round(1), accepted })
                if accepted == &vec![true, true, false])
        });
        let done = out
            .iter()
            .position(|o| matches!(o, VnOutput::ToRn(FromVirtualNode::Done(_))));
        assert!(
            matches!((report, done), (Some(r), Some(d)) if r < d),
            "{out:?}"
        );
        // The refused edge is not counted as a neighbour whose copies were lost: 2 neighbours, 2 in, 2 out.
        let summary = out.iter().find_map(|o| match o {
            VnOutput::ToRn(FromVirtualNode::Done(s)) => Some(*s),
            _ => None,
        });
        assert!(
            summary.is_some_and(|s| (s.neighbours, s.received, s.delivered) == (2, 2, 2)),
            "{summary:?}"
        );

        // Exchange 2: still three slots; slot 2's frame is not sent.
        let out = e.handle(t, VnInput::FromRn(ToVirtualNode::PerEdge(Round(2))));
        assert_eq!(edges(&out), Some((Round(2), 3)));
        let frames = vec![frame(2, 20.0), frame(2, 21.0), frame(2, 22.0)];
        let out = e.handle(
            t,
            VnInput::FromRn(ToVirtualNode::PerEdgeFrames {
                round: Round(2),
                frames,
            }),
        );
        assert_eq!(sends(&out), vec![(5, 20.0), (7, 21.0)]);
        // Frames that do not match the slots send nothing.
        let out = e.handle(t, VnInput::FromRn(ToVirtualNode::PerEdge(Round(3))));
        assert_eq!(edges(&out), Some((Round(3), 3)));
        let out = e.handle(
            t,
            VnInput::FromRn(ToVirtualNode::PerEdgeFrames {
                round: Round(3),
                frames: vec![frame(3, 1.0)],
            }),
        );
        assert!(sends(&out).is_empty());
    }

    #[test]
    fn bad_frames_are_refused_with_their_reason() {
        let mut e = engine(|_| true);
        let t = Duration::ZERO;
        e.handle(t, VnInput::StartRound(Round(0)));
        let refused = |out: &[VnOutput<u32>]| {
            reply_of(out).map(|r| match r {
                ChunkReply::Refused(reason) => reason,
                ChunkReply::Accepted => panic!("accepted"),
            })
        };
        assert_eq!(
            refused(&send_chunk(&mut e, t, 1, vec![1, 2, 3])),
            Some(RefuseReason::BadChunk),
            "malformed"
        );
        assert_eq!(
            refused(&send_chunk(&mut e, t, 1, chunk(0, 7, &[1.0]))),
            Some(RefuseReason::BadChunk),
            "unknown index"
        );
        assert_eq!(
            refused(&send_chunk(&mut e, t, 1, chunk(0, 1, &[1.0; 3]))),
            Some(RefuseReason::BadChunk),
            "wrong length"
        );
        assert_eq!(
            refused(&send_chunk(&mut e, t, 1, chunk(0, 1, &[1.0, f32::NAN]))),
            Some(RefuseReason::NonFinite)
        );
        assert_eq!(
            refused(&send_chunk(
                &mut e,
                t,
                1,
                chunk(0, 1, &[f32::INFINITY, 0.0])
            )),
            Some(RefuseReason::NonFinite)
        );
        // The check reads magnitudes from the bit patterns: negative infinities and NaNs with the sign bit set
        // are refused too.
        for bad in [f32::NEG_INFINITY, -f32::NAN] {
            assert_eq!(
                refused(&send_chunk(&mut e, t, 1, chunk(0, 1, &[-0.0, bad]))),
                Some(RefuseReason::NonFinite),
                "{bad}"
            );
        }
        assert_eq!(
            refused(&send_chunk(&mut e, t, 1, chunk(99, 1, &[1.0, 2.0]))),
            Some(RefuseReason::WrongRound),
            "far future"
        );
        // Before the freeze, a sender with no link in the round's overlay is refused at once.
        assert_eq!(
            refused(&send_chunk(&mut e, t, 2, chunk(0, 1, &[1.0, 2.0]))),
            Some(RefuseReason::NotNeighbour),
            "no link"
        );
        // A good chunk from a peer with a link waits (no reply yet); a second from it is a duplicate.
        let (peer, t) = reserve_link(&mut e, Round(0), t);
        assert_eq!(
            reply_of(&send_chunk(&mut e, t, peer, chunk(0, 1, &[1.0, 2.0]))),
            None
        );
        assert_eq!(e.pending_total, 1);
        assert_eq!(
            refused(&send_chunk(&mut e, t, peer, chunk(0, 0, &[1.0, 2.0, 3.0]))),
            Some(RefuseReason::Duplicate)
        );
        // At the freeze the offered slot was never confirmed: the held chunk is refused, not a neighbour's.
        let deadline = sampling::OverlayConfig::new(2, Duration::from_millis(10)).deadline();
        let out = e.handle(deadline + Duration::from_millis(1), VnInput::Tick);
        assert_eq!(refused(&out), Some(RefuseReason::NotNeighbour));
        assert!(
            !out.iter().any(|o| matches!(o, VnOutput::Received { .. })),
            "nothing reached the RN"
        );
        assert_eq!(e.pending_total, 0);
        assert_eq!(e.counters.refused, 11);
        let by = e.counters.refused_by_reason;
        assert_eq!(
            (
                by.malformed,
                by.bad_chunk,
                by.non_finite,
                by.wrong_round,
                by.duplicate,
                by.not_neighbour
            ),
            (1, 2, 4, 1, 1, 2)
        );
    }

    #[test]
    fn a_peer_flooding_control_messages_is_limited_and_others_are_not() {
        let mut e = engine(|_| true);
        let t = Duration::ZERO;
        let limited = |out: &[VnOutput<u32>]| {
            out.iter().any(|o| {
                matches!(
                    o,
                    VnOutput::Refused {
                        what: RefusalKind::RateLimited,
                        ..
                    }
                )
            })
        };
        // Shuffle requests: the burst is handled (each answered with a reply), the rest dropped unread.
        let shuffle = |from: u32| {
            control(
                from,
                ControlMsg::Cyclon(CyclonMsg::ShuffleRequest {
                    entries: vec![protocol::control::ViewEntry { id: from, age: 0 }],
                }),
            )
        };
        let handled = (0..20)
            .filter(|_| {
                let out = e.handle(
                    t,
                    VnInput::Control {
                        from: 5,
                        bytes: shuffle(5),
                    },
                );
                !limited(&out)
            })
            .count();
        assert_eq!(handled, SHUFFLE_BURST as usize);
        let other = e.handle(
            t,
            VnInput::Control {
                from: 6,
                bytes: shuffle(6),
            },
        );
        assert!(!limited(&other), "another peer is not limited");
        // One Cyclon period later the flooder may shuffle once more.
        let period = e.cfg.sampler.cyclon.period;
        let out = e.handle(
            t + period,
            VnInput::Control {
                from: 5,
                bytes: shuffle(5),
            },
        );
        assert!(!limited(&out));
        // Any control message: one negotiation open (lookahead 0) gives the peer a burst of
        // CONTROL_BURST_PER_ROUND; garbage counts too (the limit comes before decoding).
        let mut e = engine(|_| true);
        let passed = (0..200)
            .filter(|_| {
                let out = e.handle(
                    t,
                    VnInput::Control {
                        from: 7,
                        bytes: vec![0xff; 8],
                    },
                );
                !limited(&out)
            })
            .count();
        assert_eq!(passed, CONTROL_BURST_PER_ROUND as usize);
        assert_eq!(
            e.counters.refused, 200,
            "every message refused: malformed or limited"
        );
        let by = e.counters.refused_by_reason;
        assert_eq!((by.malformed, by.rate_limited), (64, 136));
    }

    /// The value-range rule (issue 14): bounded by the floor before the VN's own chunk, then by ratio × the
    /// own chunk's largest |v|, never beyond the ceiling; the issue's poison is refused as `OutOfRange` and
    /// counted under that reason, NaN keeps its own reason.
    #[test]
    fn values_out_of_the_models_range_are_refused() {
        let t = Duration::ZERO;
        let refused = |out: &[VnOutput<u32>]| match reply_of(out) {
            // The chunk passed the value checks; these senders have no link in the round, so it is then
            // refused as not a neighbour's (a linked sender's would wait for the freeze).
            Some(ChunkReply::Refused(RefuseReason::NotNeighbour)) | None => None,
            Some(ChunkReply::Refused(reason)) => Some(reason),
            Some(ChunkReply::Accepted) => panic!("accepted before the freeze"),
        };
        let own = |e: &mut VnEngine<u32>, values: &[f32]| {
            e.handle(
                t,
                VnInput::FromRn(ToVirtualNode::Exchange(ChunkFrame {
                    round: Round(0),
                    chunk: protocol::ChunkIndex(0),
                    values: values.to_vec(),
                })),
            );
        };
        // Defaults: the issue's poison is refused before and after the VN knows its scale.
        let mut e = engine(|_| true);
        e.handle(t, VnInput::StartRound(Round(0)));
        let d = ValueBounds::default();
        assert_eq!(e.value_limit(), d.floor, "before any own chunk: the floor");
        let poison: [[f32; 2]; 4] = [
            [1e30, -1e30],
            [f32::MAX, 0.1],
            [0.1, -f32::MAX],
            [0.3, 1e20],
        ];
        for (sender, values) in (10u32..).zip(poison) {
            let out = send_chunk(&mut e, t, sender, chunk(0, 1, &values));
            assert_eq!(refused(&out), Some(RefuseReason::OutOfRange), "{values:?}");
        }
        assert_eq!(
            refused(&send_chunk(&mut e, t, 20, chunk(0, 1, &[f32::NAN, 1e30]))),
            Some(RefuseReason::NonFinite),
            "NaN keeps its reason when another value is also out of range"
        );
        assert_eq!(
            refused(&send_chunk(&mut e, t, 21, chunk(0, 1, &[-999.0, 0.5]))),
            None
        );
        own(&mut e, &[0.5, -2.0, 1.0]);
        assert_eq!(e.value_limit(), 2.0 * d.ratio);
        assert_eq!(
            refused(&send_chunk(&mut e, t, 22, chunk(0, 1, &[1999.0, 0.0]))),
            None
        );
        assert_eq!(
            refused(&send_chunk(&mut e, t, 23, chunk(0, 1, &[0.0, -2001.0]))),
            Some(RefuseReason::OutOfRange)
        );
        // 5 out of range, 1 non-finite, and the two that passed refused as not a neighbour's.
        assert_eq!(e.counters.refused, 8);
        assert_eq!(e.counters.refused_by_reason.out_of_range, 5);
        assert_eq!(e.counters.refused_by_reason.non_finite, 1);
        assert_eq!(e.counters.refused_by_reason.not_neighbour, 2);
        let mut summary = RoundSummary::default();
        e.counters.fill(&mut summary);
        assert_eq!(summary.refused, 8);
        assert_eq!(summary.refused_by_reason.total(), 8);
        assert_eq!(summary.refused_by_reason.out_of_range, 5);
        e.counters.fill(&mut summary);
        assert!(summary.refused_by_reason.is_zero(), "reported once");

        // Configured bounds: ratio 10 over the own scale, clamped to [1, 100].
        let bounds = ValueBounds {
            ratio: 10.0,
            floor: 1.0,
            ceiling: 100.0,
        };
        let mut e = engine(|_| true).with_value_bounds(bounds).unwrap();
        e.handle(t, VnInput::StartRound(Round(0)));
        assert_eq!(
            refused(&send_chunk(&mut e, t, 1, chunk(0, 1, &[1.0, -1.0]))),
            None
        );
        assert_eq!(
            refused(&send_chunk(&mut e, t, 2, chunk(0, 1, &[1.5, 0.0]))),
            Some(RefuseReason::OutOfRange),
            "the floor before any own chunk"
        );
        own(&mut e, &[0.0, 0.01, 0.0]);
        assert_eq!(e.value_limit(), 1.0, "a tiny model: the floor");
        own(&mut e, &[0.0, 2.0, 0.0]);
        assert_eq!(
            refused(&send_chunk(&mut e, t, 3, chunk(0, 1, &[-20.0, 0.0]))),
            None
        );
        assert_eq!(
            refused(&send_chunk(&mut e, t, 4, chunk(0, 1, &[20.5, 0.0]))),
            Some(RefuseReason::OutOfRange)
        );
        own(&mut e, &[0.0, 50.0, 0.0]);
        assert_eq!(
            e.value_limit(),
            100.0,
            "the ceiling stops a ratcheted scale"
        );
        own(&mut e, &[f32::NAN, 1e4, 0.0]);
        assert_eq!(
            e.value_limit(),
            100.0,
            "a non-finite own chunk keeps the old scale"
        );

        for bad in [
            ValueBounds {
                ratio: 0.5,
                ..bounds
            },
            ValueBounds {
                floor: 0.0,
                ..bounds
            },
            ValueBounds {
                ceiling: 0.5,
                ..bounds
            },
            ValueBounds {
                ceiling: f32::INFINITY,
                ..bounds
            },
        ] {
            assert!(engine(|_| true).with_value_bounds(bad).is_err(), "{bad:?}");
        }
    }

    /// `StartRound(t)` opens the overlays of t ..= t + lookahead, spaced W / lookahead apart so they do not
    /// run in phase, each at this VN's own random offset; nothing beyond the lookahead is opened.
    #[test]
    fn rounds_ahead_are_negotiated_on_a_spaced_own_schedule() {
        let overlay = sampling::OverlayConfig::new(2, Duration::from_millis(10));
        let spacing = overlay.deadline() / 2;
        let jitter = Duration::from_millis(5);
        let make = |seed: u64| {
            let cfg = VnConfig {
                sampler: SamplerConfig {
                    cyclon: sampling::CyclonConfig::default(),
                    overlay: overlay.clone(),
                },
                exchange_timeout: Duration::from_secs(1),
                send_jitter: Duration::ZERO,
                send_pace: Duration::ZERO,
                send_pace_auto: false,
                lookahead: 2,
                last_round: None,
                static_graph: false,
                skip: Arc::default(),
                start_jitter: jitter,
                chunk_lens: Arc::new(LENS.to_vec()),
            };
            VnEngine::new(
                0u32,
                cfg,
                derive_rng(seed, 0),
                derive_rng(seed, 1),
                Box::new(|_| true),
            )
            .unwrap()
        };
        // When each of rounds 0..=3 opens, stepping the clock 1 ms at a time.
        let opened = |seed: u64| {
            let mut e = make(seed);
            e.handle(Duration::ZERO, VnInput::StartRound(Round(0)));
            let mut at = [None; 4];
            for ms in 0..=(3 * spacing.as_millis() as u64) {
                let now = Duration::from_millis(ms);
                e.handle(now, VnInput::Tick);
                for (r, slot) in at.iter_mut().enumerate() {
                    if slot.is_none() && e.neighbours(Round(r as u64)).is_some() {
                        *slot = Some(now);
                    }
                }
            }
            at
        };
        let a = opened(1);
        for (r, opened_at) in a.iter().enumerate().take(3) {
            let t = opened_at.expect("within the lookahead");
            let base = spacing * r as u32;
            assert!(t >= base && t <= base + jitter, "round {r} opened at {t:?}");
        }
        assert_eq!(a[3], None, "beyond the lookahead until the RN moves on");
        let b = opened(2);
        assert_ne!(a, b, "another VN (another seed) keeps its own phase");
    }

    /// What an overlay message shows catch-up of its sender's progress: its own walk or answer the round's
    /// lookahead below, a walk or answer that may be relayed (hidden origin) `MAX_FUTURE_ROUNDS` further
    /// below, a walk it relays for a named origin nothing.
    #[test]
    fn what_an_overlay_message_shows_of_its_senders_progress() {
        let walk = |origin| OverlayMsg::Propose {
            round: Round(9),
            origin,
            nonce: 1,
            ttl: 3,
        };
        assert_eq!(progress_shown(&walk(Some(5u32)), &5), Some(0));
        assert_eq!(progress_shown(&walk(Some(6)), &5), None);
        assert_eq!(progress_shown(&walk(None), &5), Some(MAX_FUTURE_ROUNDS));
        let accept = |acceptor| OverlayMsg::Accept {
            round: Round(9),
            nonce: 1,
            acceptor,
        };
        assert_eq!(progress_shown(&accept(5u32), &5), Some(0));
        assert_eq!(progress_shown(&accept(6), &5), Some(MAX_FUTURE_ROUNDS));
        let handover = OverlayMsg::Handover {
            round: Round(9),
            nonce: 1,
            newcomer: 6u32,
        };
        assert_eq!(progress_shown(&handover, &5), None);
    }

    /// A `Prepare`d batch (rounds 0 ..= lookahead) starts its rounds on the same spacing at every VN (the
    /// configured window × the cold-start stretch, over the lookahead), whatever round trips each VN has
    /// measured (which still stretch each round's own sub-steps): scaled by each VN's stretch, the batch's
    /// last rounds started up to a window apart.
    #[test]
    fn a_prepared_batch_starts_on_the_same_spacing_at_every_vn() {
        let cfg = VnConfig {
            lookahead: 4,
            start_jitter: Duration::ZERO,
            ..engine(|_| true).cfg.clone()
        };
        let make = || {
            VnEngine::new(0u32, cfg.clone(), derive_rng(1, 0), derive_rng(1, 1), Box::new(|_| true))
                .unwrap()
        };
        let starts = |e: &mut VnEngine<u32>| {
            e.handle(Duration::ZERO, VnInput::Prepare(Round(0)));
            let mut opened = [None; 5];
            for now in (0..400u64).map(Duration::from_millis) {
                e.handle(now, VnInput::Tick);
                for (r, at) in opened.iter_mut().enumerate() {
                    if at.is_none() && e.sampler.overlay().freeze_time(Round(r as u64)).is_some() {
                        *at = Some(now);
                    }
                }
            }
            opened
        };
        let (mut quiet, mut busy) = (make(), make());
        for _ in 0..crate::engine::round_trips::SAMPLES {
            let rtt = Duration::from_millis(30);
            busy.handle(Duration::ZERO, VnInput::ControlRoundTrip { rtt });
        }
        let q = starts(&mut quiet);
        assert_eq!(q, starts(&mut busy));
        // The configured window (140 ms) twice over the lookahead of 4: 70 ms apart.
        let ms = |t| Some(Duration::from_millis(t));
        assert_eq!(q, [ms(0), ms(70), ms(140), ms(210), ms(280)]);
        // Prepared with no round trip measured yet: the cold start's stretch, as measuring VNs get.
        assert_eq!(
            quiet.sampler.overlay().deadline(),
            cfg.sampler.overlay.deadline() * crate::engine::round_trips::INITIAL_STRETCH
        );
        assert!(busy.sampler.overlay().deadline() > quiet.sampler.overlay().deadline());
    }

    /// Slow acknowledgements stretch the overlays this VN starts afterwards; without round trips (the
    /// simulator) the configured timing holds.
    #[test]
    fn measured_round_trips_stretch_the_overlays_started_after_them() {
        let configured = sampling::OverlayConfig::new(2, Duration::from_millis(10));
        let mut quiet = engine(|_| true);
        quiet.handle(Duration::ZERO, VnInput::StartRound(Round(0)));
        let freeze = |e: &VnEngine<u32>, r: u64| e.sampler.overlay().freeze_time(Round(r));
        assert_eq!(freeze(&quiet, 0), Some(configured.deadline()));

        let mut busy = engine(|_| true);
        for _ in 0..crate::engine::round_trips::SAMPLES {
            busy.handle(
                Duration::ZERO,
                VnInput::ControlRoundTrip {
                    rtt: Duration::from_millis(30),
                },
            );
        }
        busy.handle(Duration::ZERO, VnInput::StartRound(Round(0)));
        // Two round trips of 30 ms: sub-steps of 60 ms instead of 10.
        assert_eq!(freeze(&busy, 0), Some(configured.deadline() * 6));
        busy.check_invariants().unwrap();
    }

    /// A negotiation started under slow round trips keeps its long window only while they stay slow: once
    /// they fall, the VN's next pacing decisions shorten the sub-steps it has still to run, step by step as
    /// the sub-step eases; slower round trips never lengthen it.
    #[test]
    fn round_trips_that_fall_shorten_the_negotiations_still_running() {
        let configured = sampling::OverlayConfig::new(2, Duration::from_millis(10));
        let freeze = |e: &VnEngine<u32>| e.sampler.overlay().freeze_time(Round(0)).unwrap();
        let rtts = |e: &mut VnEngine<u32>, now: Duration, ms: u64| {
            for _ in 0..crate::engine::round_trips::SAMPLES {
                let rtt = Duration::from_millis(ms);
                e.handle(now, VnInput::ControlRoundTrip { rtt });
            }
        };
        let mut e = engine(|_| true);
        rtts(&mut e, Duration::ZERO, 30);
        e.handle(Duration::ZERO, VnInput::StartRound(Round(0)));
        let long = freeze(&e);
        assert_eq!(long, configured.deadline() * 6);
        // Slower still: the running round keeps its window.
        rtts(&mut e, Duration::from_millis(50), 80);
        e.handle(Duration::from_millis(50), VnInput::StartRound(Round(1)));
        assert_eq!(freeze(&e), long);
        // Fast again: once the eased sub-step (80 ms after the slow spell, less 10 % a decision, two decisions
        // a round start) is below the round's 60 ms, each round start shortens what is left of it, and never
        // into the past (at 200 ms only its grace is left, and a new grace from then would end later).
        rtts(&mut e, Duration::from_millis(100), 1);
        let mut last = long;
        for (i, ms) in (100..=200).step_by(10).enumerate() {
            let now = Duration::from_millis(ms);
            e.handle(now, VnInput::StartRound(Round(2 + i as u64)));
            let f = freeze(&e);
            assert!(f <= last && f > now, "decision at {ms} ms: freeze {f:?} after {last:?}");
            if (1..=8).contains(&i) {
                assert!(f < last, "decision at {ms} ms: the sub-step eased below 60 ms");
            }
            last = f;
        }
        assert!(last < long * 2 / 3, "{last:?} against {long:?}");
        e.check_invariants().unwrap();
    }

    #[test]
    fn stale_rounds_and_unlisted_senders_are_refused() {
        let mut e = engine(|p| *p != 66);
        let t = Duration::ZERO;
        // Round 0 falls out of the kept window once the RN is MAX_KEPT_ROUNDS rounds further.
        for r in 0..=MAX_KEPT_ROUNDS {
            e.handle(t, VnInput::StartRound(Round(r)));
        }
        let out = send_chunk(&mut e, t, 1, chunk(0, 1, &[1.0, 2.0]));
        assert_eq!(
            reply_of(&out),
            Some(ChunkReply::Refused(RefuseReason::WrongRound)),
            "stale round"
        );
        let out = send_chunk(&mut e, t, 66, chunk(5, 1, &[1.0, 2.0]));
        assert_eq!(
            reply_of(&out),
            Some(ChunkReply::Refused(RefuseReason::NotNeighbour)),
            "unlisted sender"
        );
        let out = e.handle(
            t,
            VnInput::Control {
                from: 66,
                bytes: vec![0],
            },
        );
        assert!(out.iter().any(|o| matches!(
            o,
            VnOutput::Refused {
                what: RefusalKind::NotAllowed,
                ..
            }
        )));
        // Gossip naming an unlisted peer never enters the view.
        let gossip = ControlMsg::Cyclon(CyclonMsg::ShuffleRequest {
            entries: vec![
                protocol::control::ViewEntry { id: 66u32, age: 0 },
                protocol::control::ViewEntry { id: 5, age: 0 },
            ],
        });
        let env = ControlEnvelope {
            sender: 5u32,
            msg: gossip.clone(),
        };
        e.handle(
            t,
            VnInput::Control {
                from: 5,
                bytes: protocol::codec::encode_control(&env).unwrap(),
            },
        );
        assert!(
            e.view().contains(&5) && !e.view().contains(&66),
            "{:?}",
            e.view()
        );

        // A sender claiming another identity than its connection's is refused.
        let spoof = ControlEnvelope {
            sender: 7u32,
            msg: gossip,
        };
        let out = e.handle(
            t,
            VnInput::Control {
                from: 8,
                bytes: protocol::codec::encode_control(&spoof).unwrap(),
            },
        );
        assert!(out.iter().any(|o| matches!(
            o,
            VnOutput::Refused {
                what: RefusalKind::Malformed(_),
                ..
            }
        )));
        assert!(!e.view().contains(&7) && !e.view().contains(&8));
    }

    /// A static-graph VN with three neighbours (5, 7, 9) frozen for exchange 0 and no send jitter.
    fn static_engine() -> VnEngine<u32> {
        let cfg = VnConfig {
            static_graph: true,
            send_jitter: Duration::ZERO,
            chunk_lens: Arc::new(vec![1]),
            ..engine(|_| true).cfg.clone()
        };
        let mut e = engine_with(cfg, |_| true);
        e.handle(Duration::ZERO, VnInput::StartRound(Round(0)));
        let mut out = Vec::new();
        e.on_frozen(Duration::ZERO, Round(0), vec![9, 5, 7], &mut out);
        e
    }

    fn own_frame(round: u64, v: f32) -> ToVirtualNode {
        ToVirtualNode::Exchange(ChunkFrame {
            round: Round(round),
            chunk: protocol::ChunkIndex(0),
            values: vec![v],
        })
    }

    fn done_of(out: &[VnOutput<u32>]) -> Option<RoundSummary> {
        out.iter().find_map(|o| match o {
            VnOutput::ToRn(FromVirtualNode::Done(s)) => Some(*s),
            _ => None,
        })
    }

    /// Issue 15, a node running ahead: an exchange with nobody to wait for ends at once — unless most peers
    /// heard lately are two or more exchanges behind it (`HOLD_LEAD`): then it stays open until most are
    /// within one, and never past its deadline.
    #[test]
    fn an_exchange_the_network_is_well_behind_is_held() {
        // A static graph without edges: every exchange has nobody to wait for.
        let alone = || {
            let cfg = static_engine().cfg.clone();
            let mut e =
                VnEngine::new(0u32, cfg, derive_rng(1, 0), derive_rng(1, 1), Box::new(|_| true))
                    .unwrap();
            e.handle(Duration::ZERO, VnInput::StartRound(Round(0)));
            e.on_frozen(Duration::ZERO, Round(0), vec![], &mut Vec::new());
            e
        };
        let t = Duration::from_millis(10);
        let mut e = alone();
        assert!(done_of(&e.handle(t, VnInput::FromRn(own_frame(10, 1.0)))).is_some(), "nobody heard: at once");
        let mut e = alone();
        for p in 1..=3 {
            claim(&mut e, t, p, 8);
        }
        assert!(done_of(&e.handle(t, VnInput::FromRn(own_frame(10, 1.0)))).is_none(), "three peers at 8: held");
        assert!(done_of(&claim(&mut e, t, 1, 9)).is_none(), "one of three within one");
        assert!(done_of(&claim(&mut e, t, 2, 9)).is_some(), "two of three within one: done");
        // Bounded by the exchange deadline, however long the peers stay behind.
        let mut e = alone();
        for p in 1..=3 {
            claim(&mut e, t, p, 8);
        }
        e.handle(t, VnInput::FromRn(own_frame(10, 1.0)));
        // The peers keep speaking (claims stay fresh: within one overlay window).
        let deadline = t + e.cfg.exchange_timeout;
        let mut now = t;
        while now + Duration::from_millis(100) < deadline {
            now += Duration::from_millis(100);
            for p in 1..=3 {
                assert!(done_of(&claim(&mut e, now, p, 8)).is_none(), "held at {now:?}");
            }
        }
        assert!(done_of(&e.handle(deadline, VnInput::Tick)).is_some());
    }

    /// A VN whose exchange has all its r neighbours' chunks is in step with them: peers' low claims do not
    /// hold it (they are lower bounds, and run low in a healthy network too).
    #[test]
    fn an_exchange_with_all_its_partners_in_is_not_held() {
        let mut e = static_engine();
        let t = Duration::from_millis(10);
        // Five peers heard at exchange 0 while this VN finishes exchange 5: the network looks 5 behind.
        for p in 20..=24 {
            claim(&mut e, t, p, 0);
        }
        let neighbours = [5u32, 7, 9];
        assert!(neighbours.len() >= e.cfg.sampler.overlay.degree, "a full exchange");
        e.handle(t, VnInput::FromRn(own_frame(5, 1.0)));
        let accepted = protocol::codec::encode_control(&ChunkReply::Accepted).unwrap();
        let mut last = Vec::new();
        for (token, from) in neighbours.into_iter().enumerate() {
            let bytes = ChunkFrame {
                round: Round(5),
                chunk: protocol::ChunkIndex(0),
                values: vec![2.0],
            }
            .encode();
            e.handle(t, VnInput::Chunk { from, bytes, token: token as u64 + 1 });
            let bytes = accepted.clone();
            last = e.handle(t, VnInput::ChunkReply { from, round: Round(5), bytes });
        }
        assert!(done_of(&last).is_some(), "all partners in: done, whatever the claims");
    }

    /// Issue 15: a neighbour whose connection closed for good (`PeerGone`) costs its chunk, not the exchange
    /// deadline: the open exchange ends as soon as the others' chunks are in, later exchanges no longer send
    /// to it or wait for it, and a chunk it sends after all is refused.
    #[test]
    fn a_gone_neighbour_is_not_waited_for() {
        let mut e = static_engine();
        let t = Duration::from_millis(10);
        let out = e.handle(t, VnInput::FromRn(own_frame(1, 1.0)));
        let to: Vec<u32> = out
            .iter()
            .filter_map(|o| match o {
                VnOutput::SendChunk { to, .. } => Some(*to),
                _ => None,
            })
            .collect();
        assert_eq!(to, vec![5, 7, 9]);
        for (from, token) in [(5, 1), (7, 2)] {
            let bytes = ChunkFrame {
                round: Round(1),
                chunk: protocol::ChunkIndex(0),
                values: vec![2.0],
            }
            .encode();
            let out = e.handle(t, VnInput::Chunk { from, bytes, token });
            assert!(done_of(&out).is_none(), "9's chunk is still awaited");
        }
        let accepted = protocol::codec::encode_control(&ChunkReply::Accepted).unwrap();
        for from in [5, 7] {
            let bytes = accepted.clone();
            e.handle(t, VnInput::ChunkReply { from, round: Round(1), bytes });
        }
        // 9 is gone: the exchange ends now, with the two copies that came, long before its deadline.
        let out = e.handle(t, VnInput::PeerGone { peer: 9 });
        let s = done_of(&out).expect("done at once");
        assert_eq!((s.round, s.received, s.delivered), (Round(1), 2, 2));
        // 9 stays counted: the edge stood and its copy was missed, which the metrics show.
        assert_eq!(s.neighbours, 3);
        // The next exchange neither sends to 9 nor waits for it.
        let out = e.handle(t, VnInput::FromRn(own_frame(2, 1.0)));
        let to: Vec<u32> = out
            .iter()
            .filter_map(|o| match o {
                VnOutput::SendChunk { to, .. } => Some(*to),
                _ => None,
            })
            .collect();
        assert_eq!(to, vec![5, 7]);
        let late = ChunkFrame {
            round: Round(2),
            chunk: protocol::ChunkIndex(0),
            values: vec![2.0],
        };
        let out = e.handle(
            t,
            VnInput::Chunk {
                from: 9,
                bytes: late.encode(),
                token: 3,
            },
        );
        assert_eq!(
            reply_of(&out),
            Some(ChunkReply::Refused(RefuseReason::NotNeighbour))
        );
        for (from, token) in [(5, 4), (7, 5)] {
            e.handle(t, VnInput::Chunk { from, bytes: late.encode(), token });
        }
        let mut out = Vec::new();
        for from in [5, 7] {
            let bytes = accepted.clone();
            out = e.handle(t, VnInput::ChunkReply { from, round: Round(2), bytes });
        }
        assert_eq!(done_of(&out).map(|s| s.received), Some(2));
    }

    /// A probing VN (lookahead 4) over peers 1..=12.
    fn probing(resumed_at: Option<u64>) -> VnEngine<u32> {
        let cfg = VnConfig {
            lookahead: 4,
            ..engine(|_| true).cfg.clone()
        };
        VnEngine::new(0u32, cfg, derive_rng(1, 0), derive_rng(1, 1), Box::new(|p| *p != 66))
            .unwrap()
            .with_round_probes((0..=10).chain([66]).collect(), vec![11, 12], resumed_at.map(Round))
    }

    fn queries(out: &[VnOutput<u32>]) -> Vec<u32> {
        out.iter()
            .filter_map(|o| match o {
                VnOutput::SendRoundQuery { to } => Some(*to),
                _ => None,
            })
            .collect()
    }

    fn behind(out: &[VnOutput<u32>]) -> Option<Round> {
        out.iter().find_map(|o| match o {
            VnOutput::ToRn(FromVirtualNode::Behind { exchange }) => Some(*exchange),
            _ => None,
        })
    }

    fn answer(e: &mut VnEngine<u32>, now: Duration, from: u32, at: Option<u64>) -> Vec<VnOutput<u32>> {
        let bytes = protocol::codec::encode_control(&at.map(Round)).unwrap();
        e.handle(now, VnInput::RoundAnswer { from, bytes })
    }

    /// Issue 15, active catch-up: a resumed VN asks five distinct listed peers (never itself, an unlisted
    /// one or one of its own node's VNs, 11 and 12 here, though they are in its view) which exchange they are at as it joins, and adopts the lower median of the answers — two stale
    /// answers (the other node restarted with it) do not hold it back; unasked and repeated answers do not
    /// count.
    #[test]
    fn a_resumed_node_asks_peers_and_adopts_the_median_round() {
        let mut e = probing(Some(3));
        let t = Duration::ZERO;
        let out = e.join(t, 1..=12);
        let mut asked = queries(&out);
        assert_eq!(asked.len(), PROBE_PEERS);
        assert!(asked.iter().all(|p| (1..=10).contains(p)), "{asked:?}");
        asked.sort();
        asked.dedup();
        assert_eq!(asked.len(), PROBE_PEERS, "distinct peers");
        // An unasked peer's answer is ignored, however far ahead it claims.
        let stranger = (1..=10).find(|p| !asked.contains(p)).unwrap();
        assert!(behind(&answer(&mut e, t, stranger, Some(40))).is_none());
        let answers = [Some(3), Some(3), Some(10), Some(11), Some(12)];
        let mut out = Vec::new();
        for (i, (&p, at)) in asked.iter().zip(answers).enumerate() {
            out = answer(&mut e, t, p, at);
            if i == 0 {
                // Answering twice does not count twice.
                assert!(behind(&answer(&mut e, t, p, Some(50))).is_none());
            }
            if i < 4 {
                assert!(behind(&out).is_none(), "decided only once all answered");
            }
        }
        // Lower median of 3, 3, 10, 11, 12 is 10; the RN rejoins min(lookahead, MAX_FUTURE_ROUNDS) past it.
        assert_eq!(behind(&out), Some(Round(10 + MAX_FUTURE_ROUNDS)));
    }

    /// Issue 15: a resumed VN's join probe always lets its RN start at once — past the median when that is
    /// beyond its own round even within its window, at its own round when the network is not ahead or too
    /// few peers answered — instead of waiting out the warm-up.
    #[test]
    fn a_resumed_node_starts_at_once_whatever_its_probe_finds() {
        let t = Duration::ZERO;
        let run = |answers: [Option<u64>; 5], failed: usize| {
            let mut e = probing(Some(6));
            let asked = queries(&e.join(t, 1..=12));
            let mut out = Vec::new();
            for (i, (&p, at)) in asked.iter().zip(answers).enumerate() {
                out = if i < failed {
                    e.handle(t, VnInput::RoundQueryFailed { to: p })
                } else {
                    answer(&mut e, t, p, at)
                };
            }
            behind(&out)
        };
        // Within reach (median 7, 6 + MAX_FUTURE_ROUNDS = 8): lands 2 past it all the same.
        assert_eq!(run([Some(7), Some(7), Some(7), Some(8), Some(8)], 0), Some(Round(7 + MAX_FUTURE_ROUNDS)));
        // The network at its own round or behind it: starts where it is.
        assert_eq!(run([Some(3), Some(4), Some(4), Some(4), Some(5)], 0), Some(Round(6)));
        // Too few answers: starts where it is.
        assert_eq!(run([Some(30), Some(30), Some(30), Some(30), Some(30)], 3), Some(Round(6)));
    }

    /// The probe keeps the old protection: a VN asks only once three peers it hears are beyond its window,
    /// a minority ahead (two of five answers) does not move a VN in step with the rest; fewer than three
    /// answers decide nothing; peers that cannot be reached or answer garbage do
    /// not vote; and a VN probes at most once per exchange deadline whatever peers claim.
    #[test]
    fn a_probe_needs_a_majority_ahead_and_is_bounded() {
        let t = Duration::ZERO;
        let mut e = probing(None);
        assert!(queries(&e.join(t, 1..=12)).is_empty(), "not resumed: no probe at join");
        e.handle(t, VnInput::StartRound(Round(5)));
        // Six peers in step (exchange 5: proposals for 9 with lookahead 4) and peers 1, 2 claiming exchange
        // 20; then peer 3 too: three distinct peers beyond the window, a minority of the nine heard — not
        // enough to move, enough to ask.
        // The queries sent while the crowd and then peer 3 speak (peer 3's earlier claims may still be fresh).
        let crowd = |e: &mut VnEngine<u32>, now: Duration| {
            let mut asked = Vec::new();
            for p in 4..=9 {
                asked.extend(queries(&claim(e, now, p, 9)));
            }
            for p in 1..=3 {
                asked.extend(queries(&claim(e, now, p, 24)));
            }
            asked
        };
        for p in 4..=9 {
            claim(&mut e, t, p, 9);
        }
        assert!(queries(&claim(&mut e, t, 1, 24)).is_empty(), "one peer ahead: no probe");
        assert!(queries(&claim(&mut e, t, 2, 24)).is_empty(), "two peers ahead: no probe");
        let out = claim(&mut e, t, 3, 24);
        assert!(behind(&out).is_none());
        let asked = queries(&out);
        assert_eq!(asked.len(), PROBE_PEERS);
        assert!(queries(&claim(&mut e, t, 3, 24)).is_empty(), "one probe at a time");
        let answers = [Some(5), Some(6), Some(5), Some(20), Some(20)];
        let mut out = Vec::new();
        for (&p, at) in asked.iter().zip(answers) {
            out = answer(&mut e, t, p, at);
        }
        assert!(behind(&out).is_none(), "two of five ahead: in step");
        let soon = t + e.cfg.exchange_timeout / 2;
        assert!(crowd(&mut e, soon).is_empty(), "at most one probe per deadline");
        // A later probe: two answers ahead, one unreachable, two garbage: too few votes, nothing moves.
        let later = t + e.cfg.exchange_timeout;
        let asked = crowd(&mut e, later);
        assert_eq!(asked.len(), PROBE_PEERS);
        answer(&mut e, later, asked[0], Some(20));
        answer(&mut e, later, asked[1], Some(20));
        e.handle(later, VnInput::RoundQueryFailed { to: asked[2] });
        e.handle(later, VnInput::RoundAnswer { from: asked[3], bytes: vec![0xff; 9] });
        let out = e.handle(later, VnInput::RoundAnswer { from: asked[4], bytes: vec![] });
        assert!(behind(&out).is_none());
        assert!(e.probe.is_none(), "decided (nothing) once every peer asked was heard from");
        // Three of five ahead, one peer never answering: decided at the probe's deadline.
        let again = later + e.cfg.exchange_timeout;
        let asked = crowd(&mut e, again);
        for (&p, at) in asked.iter().zip([Some(21), Some(20), Some(22), Some(5)]) {
            assert!(behind(&answer(&mut e, again, p, at)).is_none());
        }
        let deadline = again + e.cfg.exchange_timeout;
        assert!(e.poll_timeout().is_some_and(|d| d <= deadline));
        let out = e.handle(deadline, VnInput::Tick);
        assert_eq!(
            behind(&out),
            Some(Round(20)),
            "lower median of 5, 20, 21, 22: a running node lands at the median, never past it"
        );
    }

    /// Round queries are answered with the newest exchange, once per request, within a per-peer rate; an
    /// unlisted asker or a query with a body gets nothing.
    #[test]
    fn round_queries_are_answered_bounded() {
        let mut e = probing(Some(7));
        let t = Duration::ZERO;
        let ask = |e: &mut VnEngine<u32>, from: u32, bytes: Vec<u8>| {
            e.handle(t, VnInput::RoundQuery { from, bytes, token: 1 })
                .into_iter()
                .find_map(|o| match o {
                    VnOutput::ReplyRound { bytes, .. } => {
                        Some(protocol::codec::decode_control::<Option<Round>>(&bytes).unwrap())
                    }
                    _ => None,
                })
        };
        assert_eq!(ask(&mut e, 1, vec![]), Some(Some(Round(7))));
        assert_eq!(ask(&mut e, 66, vec![]), None, "unlisted");
        assert_eq!(ask(&mut e, 2, vec![1]), None, "a body");
        let answered = (0..10).filter(|_| ask(&mut e, 3, vec![]).is_some()).count();
        assert_eq!(answered, ROUND_QUERY_BURST as usize);
        assert_eq!(ask(&mut engine(|_| true), 1, vec![]), Some(None), "not started: no round");
    }

    #[test]
    fn malformed_control_is_counted() {
        let mut e = engine(|_| true);
        let out = e.handle(
            Duration::ZERO,
            VnInput::Control {
                from: 3,
                bytes: vec![0xFF; 40],
            },
        );
        assert!(out.iter().any(|o| matches!(
            o,
            VnOutput::Refused {
                what: RefusalKind::Malformed(_),
                ..
            }
        )));
        assert_eq!(e.counters.refused, 1);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), round in 0u64..4) {
            let mut e = engine(|_| true);
            e.handle(Duration::ZERO, VnInput::StartRound(Round(round)));
            e.handle(Duration::ZERO, VnInput::Chunk { from: 1, bytes: bytes.clone(), token: 1 });
            e.handle(Duration::ZERO, VnInput::Control { from: 1, bytes: bytes.clone() });
            e.handle(Duration::ZERO, VnInput::ChunkReply { from: 1, round: Round(round), bytes });
        }
    }
}
