//! Per-round random r-regular overlay, negotiated without a coordinator (DESIGN §5), sans-IO.
//!
//! The paper draws G_t from a central oracle (or a public seed). Here every VN runs an [`OverlayBuilder`] fed
//! by its Cyclon view, and the VNs build a near-r-regular graph by a matching-style proposal protocol.
//!
//! # Protocol (one round t)
//! * **Sub-steps.** S = 4r sub-steps of length `substep`, timed by each VN's *own* clock from its *local*
//!   round start (`StartRound`); clocks need not agree. At the start of each sub-step a VN whose degree is
//!   below r (reserved, committed and established edges all count) becomes proposer or acceptor with
//!   probability ½ (otherwise idle).
//!   The sub-step (and with it the reservation, retransmission and grace periods) is set for a round when
//!   it starts: [`OverlayBuilder::set_substep`] lets a driver that measures its round trips stretch it for the
//!   rounds it starts later (the node does, `node::engine::round_trips`; the simulator keeps the configured one),
//!   and [`OverlayBuilder::shorten_running`] shortens the sub-steps still to come in running rounds once the
//!   round trips fall again.
//! * **Proposal.** A proposer sends one `Propose{origin: self, nonce, ttl}` to a random view entry, `ttl`
//!   being its hop budget ([`OverlayConfig::walk_ttl`]: the configured one, less in a network of fewer VNs). A
//!   receiver that is an acceptor *in its own current sub-step*, has not accepted in this sub-step, has
//!   degree < r, is not the origin and not already linked to it, reserves a slot for the nonce and sends
//!   `Accept{acceptor: self}` straight to the origin. Any other receiver forwards the proposal to a random
//!   entry of its view (other than the sender and the origin); at ttl 0 the walk ends silently. One
//!   proposal and one acceptance per VN per sub-step (several make the graph nearly bipartite, DESIGN §5).
//! * **Walks that hide their origin** ([`OverlayConfig::hide_origin`]). A walk that names its origin shows
//!   its first hop (the sender is the origin), and with it when the origin started it. With `hide_origin`
//!   the walk names none (`origin: None`), so nothing in it tells a receiver whether its sender started it or
//!   relayed it (issue 13): each relay remembers whom it had the walk from, and `Accept` (or `SpliceOffer`)
//!   travels back hop by hop; the acceptor learns the origin only from its `Confirm` (and refuses it then if
//!   they are linked already). The hop budget hides the first hop too: a walk starts at the budget, and a
//!   relay that receives a hidden walk at its own budget (the same at every VN of one network) keeps it there
//!   with probability [`KEEP_TOP_TTL`] (else lowers it by one, as every lower value is), so a receiver of a
//!   full-budget walk faces a sender that started it with probability 1 − [`KEEP_TOP_TTL`] only. The cost is
//!   latency and messages: an answer takes as many hops back as the walk took out. Both kinds of walk are
//!   understood by every VN, so each chooses for itself.
//! * **Commit.** The origin, if it still has room and is not linked to the acceptor, sends `Confirm` to the
//!   acceptor directly and counts the edge as *committed*; otherwise it sends `Nack`. It retransmits
//!   `Confirm` every `retransmit` until it gets `ConfirmAck` or the round freezes. The acceptor, which learns
//!   the origin only now, counts the edge (*established*) on a `Confirm` naming its reservation's nonce if it
//!   is not linked to that peer yet (else `Nack`), and answers `ConfirmAck` (again for every
//!   retransmission); a reservation that sees no `Confirm` within `reserve_timeout` is released, and a later
//!   `Confirm` is still taken if there is room (else `Nack`). The proposer counts the edge only on
//!   `ConfirmAck`.
//! * **Splice repair.** After the S sub-steps come `repair_steps` more sub-steps. In each, a VN short by ≥ 2
//!   sends a `SpliceRequest` walk (a VN short by exactly 1 keeps running the proposal protocol, since a
//!   splice adds two edges). A receiver x with an established edge (x, y) and no splice in progress locks
//!   (x, y) and answers `SpliceOffer{splitter: x, other: y}` back along the path. If the origin v is still
//!   short by ≥ 2 and linked to neither x nor y, it commits to both and sends `SpliceAccept` to x
//!   (retransmitted); x, if v is not already its neighbour, replaces y by v, acknowledges v and sends
//!   `Handover{newcomer: v}` to y, which drops x, takes v if it has room and acknowledges v (or `Nack`s).
//!   v counts each of x and y on its ack.
//! * **Deadline.** At `start + (S + repair_steps)·substep + grace` the round freezes: the neighbour set is
//!   the established edges, emitted as [`OverlayOutput::Frozen`]. Unacknowledged commitments are withdrawn
//!   with `Drop`, reservations are released. After freezing a VN still answers retransmitted `Confirm`s for
//!   edges it counts and processes `Drop`s (emitting [`OverlayOutput::EdgeDropped`]), but forms no new edge.
//!   `grace` must cover the spread of round starts plus a round trip, so that a VN that started late still
//!   finds its peers open.
//!
//! # Half-open edges (an edge counted by one end only)
//! No finite handshake over a lossy network makes both ends agree for sure (two generals), so the
//! protocol makes disagreement rare and *detectable by both ends*:
//! * the end that committed (proposer, splice origin) counts only after the other end's `ConfirmAck`, so
//!   when that ack never comes it knows the edge is doubtful, does not count it, and sends `Drop` at freeze;
//! * the other end counts on the commitment, so it can only be wrong when every ack was lost *and* the
//!   `Drop` is lost; it then detects the mismatch at chunk exchange: the node refuses chunks over an edge it
//!   does not count ([`OverlayBuilder::is_neighbour`]), and the sender feeds that refusal back as
//!   [`OverlayInput::EdgeRefused`], which removes the edge ([`OverlayOutput::EdgeDropped`]). A late `ConfirmAck`
//!   for an edge that is no longer counted is answered with `Drop` as well.
//! * a splice hands (x, y) over with `Handover`; x re-sends a `Drop` to y at freeze in case it was lost.
//!
//! # A deviating insider (issue 44, crowding)
//! A listed node holds k identities, and nothing tells a VN which identities are one node's: whatever one
//! identity can do to become a VN's neighbour, a node does k times. An identity can propose straight at a
//! victim (naming itself, or posing as the relay of a sibling's walk, or hiding the origin), take every walk
//! it sees whatever its degree, answer walks it only relays, and push its siblings into a view. None of that
//! is told apart from honest behaviour by one message, so the bound comes from the victim's own count:
//! * **Repeat cap** ([`OverlayConfig::repeat_cap`]): a VN takes a peer as neighbour in a round only if that
//!   peer was its neighbour in fewer than c of the rounds within [`OverlayConfig::repeat_window`] of it
//!   (c = ⌊1.5 · window · r/(n − 1)⌋, at least 1), at every place an edge is formed (an `Accept` or `Confirm`, a named
//!   walk it would take, a splice offer or hand-over). So in any window a node of k identities is a VN's
//!   neighbour at most k·c times, at most 1.5 × an honest node's expected share, however it deviates.
//! * **Shunning**: a walk that hides its origin shows who it was for only at its `Confirm`; a capped origin is
//!   refused then, and the peer that handed over the walk (and the origin) hands this VN no walk it takes for
//!   a window (it forwards them), so a node's hidden walks cannot keep taking up its acceptances.
//! * **Withheld chunks**: a neighbour whose chunk did not come by the exchange's deadline
//!   ([`OverlayInput::Withheld`]) is shunned as well, and a walk naming a shunned origin is not taken (nor,
//!   for a hidden walk, confirmed): a node whose identities take edges and send nothing on them makes each
//!   victim VN wait out its exchange timeout once per window, not every round it can get in. An honest
//!   neighbour that missed a deadline (it crashed, or fell far behind) is taken again after the window.
//! * **First hops**: a VN starts no walk at a peer at the cap or shunned (that peer could only waste it).
//! * **Answers from the peer that could send them**: an `Accept`/`SpliceOffer` for a walk that names us is
//!   taken only from the acceptor itself, one for a walk that hides us only from a peer we sent the walk to.
//!
//! The cost for honest runs: none in the first rounds of a network, nor in small ones (r/(n − 1) ≥ 2/3); at
//! n = 128, r = 8 a pair reaches the cap (4 in 50 rounds) with probability about 0.2 in 50 rounds, and the
//! VN-rounds short of r go from 0.3 % to 0.6 % (λ₂ and the fraction received unchanged; `results/insider`).
//!
//! # Rounds, early and late messages
//! Several rounds may be open at once (a node negotiates up to `MAX_LOOKAHEAD` rounds ahead of the one it
//! trains, each at its own time; the rounds are independent states here). A proposal or
//! splice request for a round this VN has not started (or has frozen) is simply forwarded (or rejected at
//! ttl 0): forwarding needs no round state, so no buffering of future-round messages is needed here. Other
//! messages for a round that is not open are answered as documented above (`Nack`/`Drop`) or ignored;
//! answers to walks are relayed whether or not the relay has the round open.
//! Messages more than [`MAX_FUTURE_ROUNDS`] ahead of the newest started round, or for rounds older than the
//! [`MAX_KEPT_ROUNDS`] kept, are dropped.

mod history;
mod links;
mod next_timer;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use protocol::Round;
pub use protocol::control::{MAX_FUTURE_ROUNDS, MAX_KEPT_ROUNDS};
use protocol::control::{MAX_TTL, OverlayMsg, walk_nonce};
use rand::Rng;
use rand::seq::IndexedRandom;
use rand_chacha::ChaCha12Rng;

use self::history::NeighbourHistory;
use self::links::Links;
use self::next_timer::NextTimer;
use crate::{Error, PeerId};

/// Largest degree accepted in a config; the paper uses r ≤ 8 (Table 2, Fig. 6 sweeps r = 2 .. 8), 64 keeps
/// per-VN state and traffic small while allowing experiments.
pub const MAX_DEGREE: usize = 64;

/// Probability that a relay keeps a walk's hop budget at the configured maximum instead of lowering it (see
/// the module docs): a receiver of a full-budget walk faces its origin with probability 1 − 0.75 = ¼, and a
/// walk runs on average 1/(1 − 0.75) − 1 = 3 hops longer when it is not accepted earlier.
pub const KEEP_TOP_TTL: f64 = 0.75;

/// Walks a VN remembers having relayed, over all rounds, so as to send their answers back. An honest round
/// at r = 8 has each VN relay a few hops per sub-step (walks end at the first acceptor); past the bound the
/// oldest round's entries are forgotten first, and a walk relayed without a record only loses its answer.
pub const MAX_RELAYED: usize = 4096;

/// Rounds over which [`OverlayConfig::repeat_cap`] counts how often one peer was a neighbour: the issue's
/// measure of crowding is 50 rounds, and a window no longer than that bounds every 50 rounds.
pub const REPEAT_WINDOW: u64 = 50;

/// How many times an honest peer's expected share of a VN's neighbourships one peer may reach in a window
/// ([`OverlayConfig::repeat_cap`]).
pub const REPEAT_FACTOR: f64 = 1.5;

/// Overlay parameters. Durations are virtual in the simulator and real in the node.
#[derive(Debug, Clone, PartialEq)]
pub struct OverlayConfig {
    /// Target degree r (paper default r = 8, r = 6 in the k sweep; §5 / Table 2).
    pub degree: usize,
    /// Proposal sub-steps S (DESIGN §5: S = 4r).
    pub substeps: u32,
    /// Length of one sub-step. Should exceed a round trip so an Accept/Confirm finishes within it.
    pub substep: Duration,
    /// Hop budget of proposals and splice requests (DESIGN §5: 30), and the most a received walk may have
    /// left. A network of fewer VNs starts its walks with less ([`Self::walk_ttl`]).
    pub ttl: u8,
    /// Splice-repair sub-steps after the S proposal sub-steps.
    pub repair_steps: u32,
    /// How long an acceptor keeps a slot reserved waiting for `Confirm`.
    pub reserve_timeout: Duration,
    /// Retransmission interval of unacknowledged `Confirm`/`SpliceAccept`.
    pub retransmit: Duration,
    /// Extra time after the last repair sub-step before freezing (covers start skew + a round trip).
    pub grace: Duration,
    /// Start walks that name no origin, answered back along their path (see the module docs).
    pub hide_origin: bool,
    /// VNs in the network, this one included, where known (a permissioned network's peer list): the walks
    /// this VN starts or relays then take at most one hop per other VN ([`Self::walk_ttl`]).
    pub network_size: Option<usize>,
    /// Rounds of the sliding window over which one peer's neighbourships are capped
    /// ([`Self::repeat_cap`]); 0 turns the cap off.
    pub repeat_window: u64,
}

impl OverlayConfig {
    /// DESIGN §5 defaults for degree `r` with sub-steps of `substep`.
    pub fn new(degree: usize, substep: Duration) -> Self {
        Self {
            degree,
            substeps: 4 * degree as u32,
            substep,
            ttl: 30,
            repair_steps: degree as u32,
            reserve_timeout: substep * 2,
            retransmit: substep,
            grace: substep * 4,
            hide_origin: false,
            network_size: None,
            repeat_window: REPEAT_WINDOW,
        }
    }

    /// The most rounds, out of any [`Self::repeat_window`] consecutive ones, in which one peer may be this
    /// VN's neighbour: ⌊[`REPEAT_FACTOR`] · window · r/(n − 1)⌋ (at least 1), in a network of n VNs whose
    /// size is known; `None` (no cap) where it is not, or where the cap would not bind (r/(n − 1) ≥ 2/3).
    ///
    /// Why (issue 44, crowding): a listed node holds k identities, and nothing in a walk tells a VN which
    /// identities are one node's, so whatever one identity may do to become a VN's neighbour, k of them do
    /// k times. A deviating identity can make itself a neighbour at will (by proposing straight at its
    /// victim, a sibling posing as its relay, or by taking every walk it sees); only the victim's own count
    /// of how often a peer was its neighbour bounds it. An honest peer is one with probability r/(n − 1) a
    /// round, so in any window a whole node of k identities reaches at most 1.5 × an honest node's expected
    /// share. The cost for honest peers: at n = 128, r = 8 (cap 4 in 50 rounds, where a pair meets 3.15 times
    /// on average) about one edge in ten would take a pair past the cap and is formed with another peer
    /// instead, or late in a round not at all (`results/insider`); small networks (r/(n − 1) ≥ 2/3) are not capped, nor the first rounds of any
    /// network.
    pub fn repeat_cap(&self) -> Option<usize> {
        let n = self.network_size?;
        if self.repeat_window == 0 || n < 2 {
            return None;
        }
        let share = self.degree as f64 / (n - 1) as f64;
        let cap = (REPEAT_FACTOR * self.repeat_window as f64 * share).floor() as u64;
        (cap < self.repeat_window).then_some(cap.max(1) as usize)
    }

    /// The hop budget of the walks this VN starts, and the most it passes on: `ttl`, or one hop per other VN
    /// of a smaller network.
    ///
    /// Most of a round's overlay messages are hops of walks that found no acceptor: late in a negotiation,
    /// or at a VN that started it late, nearly every VN it reaches is full, and the walk wanders on until its
    /// budget runs out. In a network of n VNs, hops past n − 1 only return to VNs the walk has been at, and
    /// capping it there forms the same graphs: in the simulator (`overlay_report --rounds 300 --lookahead
    /// 12`, seeds 1-8) 16 VNs at r = 4 sent 31-32.5 overlay messages per VN and round instead of 44.7-47.5,
    /// with 2.42% of VNs short of r on average either way; 8 VNs 26 instead of 58-63 (results/round-speed,
    /// "Walks no longer than the network", has the other sizes and the one cost, at 8 VNs and r = 2).
    /// Networks of 31 VNs or more keep the full budget.
    pub fn walk_ttl(&self) -> u8 {
        match self.network_size {
            Some(n) => {
                let others = u8::try_from(n.saturating_sub(1)).unwrap_or(u8::MAX);
                self.ttl.min(others.max(1))
            }
            None => self.ttl,
        }
    }

    /// Time from the local round start to the freeze.
    pub fn deadline(&self) -> Duration {
        self.timing().deadline(self.total_substeps())
    }

    /// Sub-steps of a round: proposal and repair.
    pub fn total_substeps(&self) -> u32 {
        self.substeps + self.repair_steps
    }

    /// The configured timing of a round.
    pub fn timing(&self) -> RoundTiming {
        RoundTiming {
            substep: self.substep,
            reserve_timeout: self.reserve_timeout,
            retransmit: self.retransmit,
            grace: self.grace,
        }
    }

    /// The timing of a round run with sub-steps of `substep` instead of the configured one: the reservation,
    /// retransmission and grace periods scale with it (each is a number of sub-steps' worth of round trips).
    /// The configured sub-step gives exactly [`Self::timing`].
    pub fn timing_with_substep(&self, substep: Duration) -> RoundTiming {
        // Integer nanoseconds, so a given stretch gives the same durations on every platform (and the
        // configured sub-step exactly the configured timing).
        let (num, den) = (substep.as_nanos(), self.substep.as_nanos().max(1));
        let scale = |d: Duration| {
            Duration::from_nanos(u64::try_from(d.as_nanos() * num / den).unwrap_or(u64::MAX))
        };
        RoundTiming {
            substep,
            reserve_timeout: scale(self.reserve_timeout),
            retransmit: scale(self.retransmit),
            grace: scale(self.grace),
        }
    }

    pub fn validate(&self) -> Result<(), Error> {
        if self.degree == 0 || self.degree > MAX_DEGREE {
            return Err(Error::Config(format!(
                "degree {} not in 1..={MAX_DEGREE}",
                self.degree
            )));
        }
        if self.ttl > MAX_TTL {
            return Err(Error::Config(format!(
                "ttl {} exceeds MAX_TTL {MAX_TTL}",
                self.ttl
            )));
        }
        if self.substep.is_zero() || self.retransmit.is_zero() || self.reserve_timeout.is_zero() {
            return Err(Error::Config(
                "substep, retransmit and reserve_timeout must be positive".into(),
            ));
        }
        Ok(())
    }
}

/// The durations one round is negotiated with, set when it starts ([`OverlayBuilder::set_substep`] changes
/// them for rounds started later; [`OverlayBuilder::shorten_running`] shortens the sub-steps a running round
/// has still to come, never one that began).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoundTiming {
    pub substep: Duration,
    pub reserve_timeout: Duration,
    pub retransmit: Duration,
    pub grace: Duration,
}

impl RoundTiming {
    /// Time from the round's start to its freeze, over `steps` sub-steps (proposal and repair).
    pub fn deadline(&self, steps: u32) -> Duration {
        self.substep * steps + self.grace
    }
}

impl Default for OverlayConfig {
    fn default() -> Self {
        Self::new(8, Duration::from_millis(100))
    }
}

/// What the caller feeds an [`OverlayBuilder`].
#[derive(Debug, Clone)]
pub enum OverlayInput<I> {
    /// Start negotiating round `round` now (local clock). Ignored if already started or too old.
    StartRound { round: Round },
    /// A message from the authenticated sender `from`.
    Message { from: I, msg: OverlayMsg<I> },
    /// A send to `to` failed: pending (not yet established) links with it in open rounds are dropped, and so
    /// are established ones in open rounds (a dead peer must not hold a slot).
    SendFailed { to: I },
    /// `peer` refused our chunk for `round` (it does not count the edge): stop counting it.
    EdgeRefused { round: Round, peer: I },
    /// `peer`, this VN's neighbour in `round`, sent no chunk by the exchange's deadline: it is shunned for a
    /// window ([`OverlayBuilder::shun`]).
    Withheld { round: Round, peer: I },
    /// Time passed; due timers fire. Any input fires due timers first.
    Tick,
}

/// What an [`OverlayBuilder`] asks its caller to do or tells it.
#[derive(Debug, Clone, PartialEq)]
pub enum OverlayOutput<I> {
    Send {
        to: I,
        msg: OverlayMsg<I>,
    },
    /// Round `round` is frozen; `neighbours` (sorted) is its neighbour set.
    Frozen {
        round: Round,
        neighbours: Vec<I>,
    },
    /// After the freeze, `peer` was removed from round `round`'s neighbour set (Drop or refusal).
    EdgeDropped {
        round: Round,
        peer: I,
    },
    /// A message failed validation and was ignored.
    Invalid {
        from: I,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Idle,
    Proposer,
    Acceptor,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum SpliceRole<I> {
    /// The peer splits its edge to `other` for us.
    Splitter { other: I },
    /// The peer is the far end of the split edge.
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Link<I> {
    /// We committed (Confirm / SpliceAccept, carrying the walk's `key`) and wait for the ack; not counted yet.
    Committed {
        nonce: u64,
        key: u64,
        retx: Option<Duration>,
        splice: Option<SpliceRole<I>>,
    },
    /// Counted.
    Established { nonce: u64 },
}

impl<I> Link<I> {
    fn nonce(&self) -> u64 {
        match self {
            Link::Committed { nonce, .. } | Link::Established { nonce } => *nonce,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Walk {
    Propose,
    Splice,
}

/// A walk this VN started: its kind and secret key, and who may answer it.
#[derive(Debug, Clone)]
struct OwnWalk<I> {
    kind: Walk,
    key: u64,
    /// Whether it names its origin (then only the acceptor itself may answer, straight to us).
    named: bool,
    /// The peers we sent it to (the first hop, and the next one each time it came back through us): the
    /// only ones that may hand us an answer to a walk that hides its origin.
    sent_to: Vec<I>,
}

/// Most peers a VN shuns at once ([`OverlayBuilder::shun`]): a rogue node's identities, several times over.
pub const MAX_SHUNNED: usize = 64;

/// Most peers an [`OwnWalk`] remembers having been sent to (a walk comes back through its origin rarely).
const MAX_SENT_TO: usize = 8;

/// A splitter's offer: the edge to `other` is kept for the walk `nonce` until its origin commits
/// (`SpliceAccept`) or `until`. It holds a degree slot meanwhile, as an `Accept`'s reservation does.
#[derive(Debug, Clone)]
struct SpliceLock<I> {
    nonce: u64,
    other: I,
    until: Duration,
}

#[derive(Debug, Clone)]
struct RoundState<I> {
    start: Duration,
    timing: RoundTiming,
    frozen: bool,
    links: Links<I, Link<I>>,
    /// Next sub-step boundary to process (0 .. S + repair_steps).
    next_substep: u32,
    role: Role,
    accepted: bool,
    /// Walks this VN started and has no answer for yet, by nonce.
    walks: BTreeMap<u64, OwnWalk<I>>,
    /// Slots reserved by our `Accept`s, by walk nonce: until when, and the origin if the walk named it (else
    /// it is known only from its `Confirm`).
    /// The third field is the peer that handed us the walk.
    offers: BTreeMap<u64, (Duration, Option<I>, I)>,
    lock: Option<SpliceLock<I>>,
    /// Peers whose edge we handed over in a splice; they get a second `Drop` at freeze.
    handed_over: Vec<I>,
    /// Offers (Accept) whose reservation expired before the `Confirm` came, by nonce: a late `Confirm` with
    /// that nonce may still take the edge if there is room. A `Confirm` for anything else is refused — an
    /// edge arises only from an offer this VN made (else a listed peer could make itself any VN's neighbour).
    /// At most one per acceptor sub-step.
    expired_offers: BTreeSet<u64>,
}

impl<I: PeerId> RoundState<I> {
    /// Slots taken: links of every kind, reservations and a splice lock.
    fn degree(&self) -> usize {
        self.links.len() + self.offers.len() + usize::from(self.lock.is_some())
    }

    fn established(&self) -> Vec<I> {
        self.links
            .iter()
            .filter(|(_, l)| matches!(l, Link::Established { .. }))
            .map(|(p, _)| p.clone())
            .collect()
    }
}

/// One VN's overlay negotiation state for all open rounds.
#[derive(Debug, Clone)]
pub struct OverlayBuilder<I> {
    me: I,
    cfg: OverlayConfig,
    /// The timing of rounds started from now on (the configured one unless `set_substep` changed it).
    timing: RoundTiming,
    rng: ChaCha12Rng,
    rounds: BTreeMap<Round, RoundState<I>>,
    /// For every walk relayed (by round and nonce): the peer it came from, where its answer goes back.
    relayed: BTreeMap<Round, BTreeMap<u64, I>>,
    /// Entries of `relayed`, at most [`MAX_RELAYED`].
    relayed_count: usize,
    /// [`OverlayConfig::repeat_cap`], computed once.
    cap: Option<usize>,
    /// Peers whose walks this VN does not take, until the round given ([`Self::shun`]).
    shunned: BTreeMap<I, Round>,
    /// The neighbours of each round frozen in the last 2 · `repeat_window` rounds (at its freeze), for the
    /// cap once the round itself is forgotten.
    history: NeighbourHistory<I>,
    /// The peers linked (of any kind) in each open round, by round and by peer, for the cap's count of the
    /// open rounds. Brought up to date with a round's links whenever its timers are ([`Self::settle_timer`],
    /// [`Self::settle_all_timers`], each round `fire_timers` visits): an input changes the links of its own
    /// round only, and the cap never counts the round it is asked about.
    open_links: NeighbourHistory<I>,
    /// When a timer of an open round is next due (inputs before then skip `fire_timers`).
    next_timer: NextTimer,
}

impl<I: PeerId> OverlayBuilder<I> {
    /// A builder for `me`; `rng` seeded from (run seed, identity), distinct from the Cyclon stream.
    pub fn new(me: I, cfg: OverlayConfig, rng: ChaCha12Rng) -> Result<Self, Error> {
        cfg.validate()?;
        Ok(Self {
            me,
            cap: cfg.repeat_cap(),
            shunned: BTreeMap::new(),
            history: NeighbourHistory::default(),
            open_links: NeighbourHistory::default(),
            next_timer: NextTimer::default(),
            timing: cfg.timing(),
            cfg,
            rng,
            rounds: BTreeMap::new(),
            relayed: BTreeMap::new(),
            relayed_count: 0,
        })
    }

    pub fn id(&self) -> &I {
        &self.me
    }

    pub fn config(&self) -> &OverlayConfig {
        &self.cfg
    }

    /// Sub-steps of `substep` (at least one nanosecond) for the rounds started from now on; rounds already
    /// running keep theirs ([`Self::shorten_running`] shortens them). A driver that measures its round trips
    /// stretches the sub-step when replies come late (a busy network), so that negotiations slow down instead
    /// of missing their sub-steps.
    pub fn set_substep(&mut self, substep: Duration) {
        self.timing = self
            .cfg
            .timing_with_substep(substep.max(Duration::from_nanos(1)));
    }

    /// Shortens the sub-steps still to come in the rounds already running to `substep` (at least one
    /// nanosecond), in each round whose sub-step is longer: the sub-steps that began keep their ends (an
    /// overdue one ends now), so no boundary moves into the past, and a round is never made longer. The
    /// reservation, retransmission and grace periods scale with it, as in [`Self::set_substep`].
    ///
    /// Why: a round's sub-step is set when it starts, from the round trips measured then, and a node
    /// negotiates up to its lookahead of rounds ahead. Negotiations started while the network was busy (its
    /// first rounds) kept windows of twice the configured one or more after the load had gone, and the rounds
    /// they were for, the last ones of a run, waited for them. Each VN still decides alone: its peers run
    /// their own sub-steps, as they do when they stretch them.
    pub fn shorten_running(&mut self, now: Duration, substep: Duration) {
        let substep = substep.max(Duration::from_nanos(1));
        let timing = self.cfg.timing_with_substep(substep);
        let total = self.cfg.total_substeps();
        for s in self.rounds.values_mut().filter(|s| !s.frozen) {
            if s.timing.substep <= substep {
                continue;
            }
            // The next boundary to process stays where it was (or comes now, if it is overdue, so that no
            // later one lands in the past and fires at once): boundary i is then at `start + substep * i`
            // with the start below, and every later one comes sooner.
            let n = s.next_substep;
            let next = (s.start + s.timing.substep * n).max(now);
            let start = next.saturating_sub(substep * n);
            if start + timing.deadline(total) < s.start + s.timing.deadline(total) {
                s.start = start;
                s.timing = timing;
            }
        }
        self.settle_all_timers();
    }

    /// Time from a round's start to its freeze, for a round started now.
    pub fn deadline(&self) -> Duration {
        self.timing.deadline(self.cfg.total_substeps())
    }

    /// Established neighbours of `round` (sorted), whether frozen or not; `None` if the round is unknown.
    pub fn neighbours(&self, round: Round) -> Option<Vec<I>> {
        self.rounds.get(&round).map(|s| s.established())
    }

    /// Whether this VN counts the edge to `peer` in `round`: the node accepts and sends chunks only then.
    pub fn is_neighbour(&self, round: Round, peer: &I) -> bool {
        self.rounds
            .get(&round)
            .and_then(|s| s.links.get(peer))
            .is_some_and(|l| matches!(l, Link::Established { .. }))
    }

    /// Whether `round` has any link with `peer`: offered (to a walk that named it as its origin), committed
    /// or counted. Before a round freezes, only such a peer can legitimately send this VN its chunk of that
    /// round (it froze first with the edge).
    pub fn has_link(&self, round: Round, peer: &I) -> bool {
        self.rounds.get(&round).is_some_and(|s| {
            s.links.contains_key(peer)
                || s.offers.values().any(|(_, o, _)| o.as_ref() == Some(peer))
        })
    }

    pub fn is_frozen(&self, round: Round) -> Option<bool> {
        self.rounds.get(&round).map(|s| s.frozen)
    }

    /// Local time at which `round` freezes (if started).
    pub fn freeze_time(&self, round: Round) -> Option<Duration> {
        self.rounds
            .get(&round)
            .map(|s| s.start + s.timing.deadline(self.cfg.total_substeps()))
    }

    /// Rounds currently kept (open or frozen).
    pub fn rounds(&self) -> impl Iterator<Item = Round> + '_ {
        self.rounds.keys().copied()
    }

    /// The earliest time the caller must call `handle(.., Tick)` (the `poll_timeout` contract: ask after every
    /// `handle`; there is no timer output).
    pub fn next_timeout(&self) -> Option<Duration> {
        match self.next_timer.settled() {
            Some(at) => {
                debug_assert_eq!(at, self.earliest_timer(), "the kept next timer is exact");
                at
            }
            None => self.earliest_timer(),
        }
    }

    /// The earliest due timer of the open rounds, from their state.
    fn earliest_timer(&self) -> Option<Duration> {
        let total = self.cfg.total_substeps();
        self.rounds
            .values()
            .filter_map(|s| Self::round_timer(s, total))
            .min()
    }

    /// Every open round's next due timer is worked out again (after an input that may touch any round).
    fn settle_all_timers(&mut self) {
        let total = self.cfg.total_substeps();
        let timers = self
            .rounds
            .iter()
            .filter_map(|(r, s)| Self::round_timer(s, total).map(|t| (*r, t)));
        self.next_timer.settle_all(timers);
        let gone: Vec<Round> = self
            .open_links
            .iter()
            .map(|(r, _)| *r)
            .filter(|r| !self.rounds.contains_key(r))
            .collect();
        for round in gone {
            self.open_links.remove(round);
        }
        let rounds: Vec<Round> = self.rounds.keys().copied().collect();
        for round in rounds {
            self.sync_links(round);
        }
    }

    /// `round`'s next due timer is worked out again (after an input that touched that round only).
    fn settle_timer(&mut self, round: Round) {
        let total = self.cfg.total_substeps();
        let at = self
            .rounds
            .get(&round)
            .and_then(|s| Self::round_timer(s, total));
        self.next_timer.settle(round, at);
        self.sync_links(round);
    }

    /// `open_links` takes `round`'s links as they are now, if they changed (forgets the round if it is no
    /// longer open).
    fn sync_links(&mut self, round: Round) {
        match self.rounds.get_mut(&round) {
            Some(s) => {
                if s.links.take_changed() {
                    self.open_links
                        .insert(round, s.links.keys().cloned().collect());
                }
            }
            None => self.open_links.remove(round),
        }
    }

    /// The earliest due timer of one round, from its state (`None` once frozen).
    fn round_timer(s: &RoundState<I>, total: u32) -> Option<Duration> {
        if s.frozen {
            return None;
        }
        let mut best: Option<Duration> = None;
        let mut consider = |t: Duration| best = Some(best.map_or(t, |b: Duration| b.min(t)));
        consider(s.start + s.timing.deadline(total));
        if s.next_substep < total {
            consider(s.start + s.timing.substep * s.next_substep);
        }
        for l in s.links.values() {
            if let Link::Committed { retx: Some(t), .. } = l {
                consider(*t);
            }
        }
        for (until, _, _) in s.offers.values() {
            consider(*until);
        }
        if let Some(lock) = &s.lock {
            consider(lock.until);
        }
        best
    }

    /// Feed one input. `view` is the current Cyclon view (peers to send proposals and forward walks to).
    pub fn handle(
        &mut self,
        now: Duration,
        input: OverlayInput<I>,
        view: &[I],
        out: &mut Vec<OverlayOutput<I>>,
    ) {
        self.fire_timers(now, view, out);
        match input {
            OverlayInput::Tick => return,
            // A message touches the state of its own round only.
            OverlayInput::Message { from, msg } => {
                let round = msg.round();
                if msg.validate().is_err() || from == self.me || self.walk_too_long(&msg) {
                    out.push(OverlayOutput::Invalid { from });
                } else {
                    self.on_message(now, from, msg, view, out);
                }
                self.settle_timer(round);
                return;
            }
            _ => self.next_timer.changing(),
        }
        match input {
            OverlayInput::Tick | OverlayInput::Message { .. } => {}
            OverlayInput::StartRound { round } => self.start_round(now, round, view, out),
            OverlayInput::SendFailed { to } => {
                for s in self.rounds.values_mut().filter(|s| !s.frozen) {
                    s.links.remove(&to);
                    if s.lock.as_ref().is_some_and(|l| l.other == to) {
                        s.lock = None;
                    }
                }
            }
            OverlayInput::EdgeRefused { round, peer } => {
                if let Some(s) = self.rounds.get_mut(&round)
                    && let Some(l) = s.links.remove(&peer)
                    && matches!(l, Link::Established { .. })
                {
                    out.push(OverlayOutput::EdgeDropped { round, peer });
                }
            }
            OverlayInput::Withheld { round, peer } => self.shun(round, peer),
        }
        self.settle_all_timers();
    }

    /// Whether `peer` was this VN's neighbour as often as [`OverlayConfig::repeat_cap`] allows around
    /// `round`: it is not taken as one in `round`. The rounds counted are those other than `round`, less than
    /// [`OverlayConfig::repeat_window`] away from it, in which `peer` was (or is, in a round still open)
    /// linked with this VN.
    ///
    /// Both halves are indexed by peer (`history`, `open_links`), and counted only up to the cap: it is asked
    /// per view entry and sub-step, and per walk received, and a walk over the open rounds' links for each
    /// question was a quarter of a paper-scale simulation's time.
    fn at_cap(&self, round: Round, peer: &I) -> bool {
        let Some(cap) = self.cap else {
            return false;
        };
        let w = self.cfg.repeat_window;
        let near = |r: &Round| *r != round && r.get().abs_diff(round.get()) < w;
        let live = self.open_links.rounds_of(peer).filter(near);
        let past = self
            .history
            .rounds_of(peer)
            .filter(|r| near(r) && !self.rounds.contains_key(r));
        let capped = live.chain(past).take(cap).count() >= cap;
        debug_assert_eq!(
            capped,
            {
                let live = self
                    .rounds
                    .iter()
                    .filter(|(r, s)| near(r) && s.links.contains_key(peer))
                    .map(|(r, _)| *r);
                let past = self
                    .history
                    .rounds_of(peer)
                    .filter(|r| near(r) && !self.rounds.contains_key(r));
                past.chain(live).take(cap).count() >= cap
            },
            "the open links' index is up to date"
        );
        capped
    }

    /// Takes no walk from `peer` in the next [`OverlayConfig::repeat_window`] rounds (it forwards them):
    /// `peer` handed us a walk whose origin, known only at its `Confirm`, is capped. At most
    /// [`MAX_SHUNNED`] peers, the soonest released going first.
    fn shun(&mut self, round: Round, peer: I) {
        let until = Round(round.get().saturating_add(self.cfg.repeat_window));
        self.shunned.insert(peer, until);
        if self.shunned.len() > MAX_SHUNNED {
            let first = self
                .shunned
                .iter()
                .min_by_key(|(_, r)| **r)
                .map(|(p, _)| p.clone())
                .expect("non-empty");
            self.shunned.remove(&first);
        }
    }

    /// Whether this VN takes no walk from `peer` (nor naming it) in `round`.
    pub fn is_shunned(&self, round: Round, peer: &I) -> bool {
        self.shunned(round, peer)
    }

    fn shunned(&self, round: Round, peer: &I) -> bool {
        self.shunned.get(peer).is_some_and(|&until| round <= until)
    }

    fn newest(&self) -> Option<Round> {
        self.rounds.keys().next_back().copied()
    }

    /// A walk whose remaining ttl exceeds the configured one: no honest VN of this network starts a walk that
    /// long (every hop lowers it), so it is a peer trying to make us and others forward it for longer — up to
    /// `MAX_TTL` hops of traffic from one message.
    fn walk_too_long(&self, msg: &OverlayMsg<I>) -> bool {
        matches!(
            msg,
            OverlayMsg::Propose { ttl, .. } | OverlayMsg::SpliceRequest { ttl, .. } if *ttl > self.cfg.ttl
        )
    }

    fn start_round(
        &mut self,
        now: Duration,
        round: Round,
        view: &[I],
        out: &mut Vec<OverlayOutput<I>>,
    ) {
        if self.rounds.contains_key(&round) {
            return;
        }
        if self.rounds.len() as u64 >= MAX_KEPT_ROUNDS
            && self.rounds.keys().next().is_some_and(|&o| round < o)
        {
            return;
        }
        self.rounds.insert(
            round,
            RoundState {
                start: now,
                timing: self.timing,
                frozen: false,
                links: Links::default(),
                next_substep: 0,
                role: Role::Idle,
                accepted: false,
                walks: BTreeMap::new(),
                offers: BTreeMap::new(),
                lock: None,
                handed_over: Vec::new(),
                expired_offers: BTreeSet::new(),
            },
        );
        while self.rounds.len() as u64 > MAX_KEPT_ROUNDS {
            if let Some((gone, _)) = self.rounds.pop_first() {
                self.open_links.remove(gone);
            }
        }
        // Answers to walks of rounds no longer kept would be dropped anyway.
        if let Some(&oldest) = self.rounds.keys().next() {
            let kept = self.relayed.split_off(&oldest);
            let gone = std::mem::replace(&mut self.relayed, kept);
            self.relayed_count -= gone.values().map(BTreeMap::len).sum::<usize>();
        }
        self.fire_timers(now, view, out);
    }

    fn fire_timers(&mut self, now: Duration, view: &[I], out: &mut Vec<OverlayOutput<I>>) {
        if self.next_timer.nothing_due(now) {
            return;
        }
        // The rounds with a timer due, or every open round while their timers are being changed (a round
        // with nothing due is left exactly as it is by the walk below).
        let (keys, every): (Vec<Round>, bool) = match self.next_timer.due(now) {
            Some(due) => (due, false),
            None => {
                let open = self.rounds.iter().filter(|(_, s)| !s.frozen);
                (open.map(|(k, _)| *k).collect(), true)
            }
        };
        let cfg = self.cfg.clone();
        let total = cfg.total_substeps();
        for &round in &keys {
            if self.rounds.get(&round).is_none_or(|s| s.frozen) {
                continue;
            }
            // The view entries a walk of ours does not start with: peers at the repeat cap (they cannot
            // become our neighbour in this round; a rogue one would take the walk and waste it) and shunned
            // ones. Worked out only when a sub-step begins with this VN short of r (only then does it start a
            // walk: its degree does not change before the sub-steps below are done), and empty in most rounds,
            // where the first hop is drawn from the whole view as before.
            let due = {
                let s = &self.rounds[&round];
                s.next_substep < total
                    && s.degree() < cfg.degree
                    && s.start + s.timing.substep * s.next_substep
                        <= now.min(s.start + s.timing.deadline(total))
            };
            let avoid: Vec<I> = if due && self.cap.is_some() {
                view.iter()
                    .filter(|p| self.at_cap(round, p) || self.shunned(round, p))
                    .cloned()
                    .collect()
            } else {
                Vec::new()
            };
            let hops: Vec<I>;
            let view = if avoid.is_empty() {
                view
            } else {
                hops = view
                    .iter()
                    .filter(|p| !avoid.contains(p))
                    .cloned()
                    .collect();
                &hops[..]
            };
            let s = self.rounds.get_mut(&round).expect("listed");
            let timing = s.timing;
            let deadline = s.start + timing.deadline(total);
            // Sub-step boundaries, in order (several if the caller was late).
            while s.next_substep < total
                && s.start + timing.substep * s.next_substep <= now.min(deadline)
            {
                let i = s.next_substep;
                s.next_substep += 1;
                s.accepted = false;
                s.role = Role::Idle;
                let deficit = cfg.degree.saturating_sub(s.degree());
                // Proposal sub-steps: every VN below degree r matches. Repair sub-steps: a VN short by one
                // keeps matching (a splice adds two edges, so it cannot help); short by two or more, it splices.
                let repairing = i >= cfg.substeps;
                let matching = if repairing { deficit == 1 } else { deficit > 0 };
                if matching {
                    s.role = if self.rng.random_bool(0.5) {
                        Role::Proposer
                    } else {
                        Role::Acceptor
                    };
                    if s.role == Role::Proposer
                        && let Some(to) = view.choose(&mut self.rng)
                    {
                        let key = self.rng.random::<u64>();
                        let nonce = walk_nonce(key);
                        let walk = OwnWalk {
                            kind: Walk::Propose,
                            key,
                            named: !cfg.hide_origin,
                            sent_to: vec![to.clone()],
                        };
                        s.walks.insert(nonce, walk);
                        let msg = OverlayMsg::Propose {
                            round,
                            origin: (!cfg.hide_origin).then(|| self.me.clone()),
                            nonce,
                            ttl: cfg.walk_ttl(),
                        };
                        out.push(OverlayOutput::Send {
                            to: to.clone(),
                            msg,
                        });
                    }
                } else if repairing
                    && deficit >= 2
                    && let Some(to) = view.choose(&mut self.rng)
                {
                    let key = self.rng.random::<u64>();
                    let nonce = walk_nonce(key);
                    let walk = OwnWalk {
                        kind: Walk::Splice,
                        key,
                        named: !cfg.hide_origin,
                        sent_to: vec![to.clone()],
                    };
                    s.walks.insert(nonce, walk);
                    let msg = OverlayMsg::SpliceRequest {
                        round,
                        origin: (!cfg.hide_origin).then(|| self.me.clone()),
                        nonce,
                        ttl: cfg.walk_ttl(),
                    };
                    out.push(OverlayOutput::Send {
                        to: to.clone(),
                        msg,
                    });
                }
            }
            // Expired reservations and splice locks, due retransmissions.
            let expired = &mut s.expired_offers;
            if s.offers.values().any(|(until, _, _)| *until <= now) {
                s.offers.retain(|nonce, (until, _, _)| {
                    let keep = *until > now;
                    if !keep {
                        expired.insert(*nonce);
                    }
                    keep
                });
            }
            for (p, l) in s.links.values_in_place() {
                match l {
                    Link::Committed {
                        key,
                        retx: Some(t),
                        splice,
                        ..
                    } if *t <= now => {
                        *t = now + timing.retransmit;
                        let key = *key;
                        let msg = match splice {
                            Some(SpliceRole::Splitter { .. }) => {
                                OverlayMsg::SpliceAccept { round, key }
                            }
                            _ => OverlayMsg::Confirm { round, key },
                        };
                        out.push(OverlayOutput::Send { to: p.clone(), msg });
                    }
                    _ => {}
                }
            }
            if s.lock.as_ref().is_some_and(|l| l.until <= now) {
                s.lock = None;
            }
            if deadline <= now {
                Self::freeze(round, s, out);
                if let Some(cap_window) = self.cap.map(|_| cfg.repeat_window) {
                    self.history.insert(round, s.established());
                    let keep = Round(round.get().saturating_sub(2 * cap_window));
                    self.history.forget_before(keep);
                }
                // Answers still on their way back through this VN are for walks its peers gave up on.
                if let Some(gone) = self.relayed.remove(&round) {
                    self.relayed_count -= gone.len();
                }
            }
            // The next round's avoid list counts this one's links.
            self.sync_links(round);
        }
        if every {
            self.settle_all_timers();
        } else {
            for round in keys {
                self.settle_timer(round);
            }
        }
    }

    fn freeze(round: Round, s: &mut RoundState<I>, out: &mut Vec<OverlayOutput<I>>) {
        s.frozen = true;
        s.walks.clear();
        s.offers.clear();
        s.expired_offers.clear();
        s.lock = None;
        let mut withdrawn = Vec::new();
        s.links.retain(|p, l| match l {
            Link::Established { .. } => true,
            Link::Committed { .. } => {
                withdrawn.push(p.clone());
                false
            }
        });
        withdrawn.append(&mut s.handed_over);
        withdrawn.sort();
        withdrawn.dedup();
        for p in withdrawn {
            if !s.links.contains_key(&p) {
                out.push(OverlayOutput::Send {
                    to: p,
                    msg: OverlayMsg::Drop { round },
                });
            }
        }
        out.push(OverlayOutput::Frozen {
            round,
            neighbours: s.established(),
        });
    }

    /// Random view entry other than `from` and the walk's `origin` (falls back to any entry other than us
    /// and the origin, `from` included).
    fn next_hop(&mut self, view: &[I], from: &I, origin: Option<&I>) -> Option<I> {
        let good: Vec<&I> = view
            .iter()
            .filter(|p| *p != from && Some(*p) != origin && **p != self.me)
            .collect();
        if let Some(p) = good.choose(&mut self.rng) {
            return Some((*p).clone());
        }
        view.iter()
            .filter(|p| Some(*p) != origin && **p != self.me)
            .collect::<Vec<_>>()
            .choose(&mut self.rng)
            .map(|p| (*p).clone())
    }

    /// Where the answer to a walk received from `from` goes: its named origin, or back along its path (to the
    /// peer this VN first had it from, in case it passed here before). The named origin, if any, comes second.
    fn answer_to<'m>(
        &self,
        round: Round,
        nonce: u64,
        from: &I,
        msg: &'m OverlayMsg<I>,
    ) -> (I, Option<&'m I>) {
        match msg {
            OverlayMsg::Propose {
                origin: Some(o), ..
            }
            | OverlayMsg::SpliceRequest {
                origin: Some(o), ..
            } => (o.clone(), Some(o)),
            _ => (
                self.relayed_from(round, nonce).unwrap_or(from).clone(),
                None,
            ),
        }
    }

    /// Where the answer to a walk this VN relayed goes: the peer it first had the walk from.
    fn relayed_from(&self, round: Round, nonce: u64) -> Option<&I> {
        self.relayed.get(&round).and_then(|m| m.get(&nonce))
    }

    /// Remembers that the walk `nonce` of `round` came from `from` (the first time it passes here: a walk
    /// that loops back is answered along its shorter path). Past [`MAX_RELAYED`] the oldest round goes first.
    fn remember_relayed(&mut self, round: Round, nonce: u64, from: &I) {
        if self.relayed_from(round, nonce).is_some() {
            return;
        }
        while self.relayed_count >= MAX_RELAYED {
            let Some((_, gone)) = self.relayed.pop_first() else {
                break;
            };
            self.relayed_count -= gone.len();
        }
        self.relayed
            .entry(round)
            .or_default()
            .insert(nonce, from.clone());
        self.relayed_count += 1;
    }

    /// Sends a walk on to a random view entry, or ends it at ttl 0. A relayed walk that hides its origin is
    /// remembered, so that its answer can go back; one of our own that came back to us is simply sent on.
    fn forward(
        &mut self,
        from: &I,
        msg: OverlayMsg<I>,
        view: &[I],
        out: &mut Vec<OverlayOutput<I>>,
    ) {
        let (round, origin, nonce, ttl, splice) = match msg {
            OverlayMsg::Propose {
                round,
                origin,
                nonce,
                ttl,
            } => (round, origin, nonce, ttl, false),
            OverlayMsg::SpliceRequest {
                round,
                origin,
                nonce,
                ttl,
            } => (round, origin, nonce, ttl, true),
            _ => return,
        };
        if ttl == 0 {
            return;
        }
        // Past this network's budget a walk only returns to VNs it has been at: one that arrives with more
        // (from a VN that does not know the network's size, or one that would have us relay for longer) goes
        // on with ours.
        let budget = self.cfg.walk_ttl();
        let ttl = ttl.min(budget);
        let Some(to) = self.next_hop(view, from, origin.as_ref()) else {
            return;
        };
        let hidden = origin.is_none();
        if let Some(w) = self
            .rounds
            .get_mut(&round)
            .and_then(|s| s.walks.get_mut(&nonce))
        {
            // Our own walk came back: its answer may now come from this hop.
            if w.sent_to.len() < MAX_SENT_TO && !w.sent_to.contains(&to) {
                w.sent_to.push(to.clone());
            }
        } else if hidden {
            self.remember_relayed(round, nonce, from);
        }
        // A hidden walk's full budget stays full with probability KEEP_TOP_TTL: the first hop is not the only
        // one with it.
        let ttl = if hidden && ttl == budget && self.rng.random_bool(KEEP_TOP_TTL) {
            ttl
        } else {
            ttl - 1
        };
        let msg = if splice {
            OverlayMsg::SpliceRequest {
                round,
                origin,
                nonce,
                ttl,
            }
        } else {
            OverlayMsg::Propose {
                round,
                origin,
                nonce,
                ttl,
            }
        };
        out.push(OverlayOutput::Send { to, msg });
    }

    /// An answer (`Accept`, `SpliceOffer`) to the walk `nonce`: ours is handled, one we relayed goes back to
    /// the peer we had the walk from (once). Anything else is refused (`Nack`) if the answering VN sent it
    /// itself, so that it frees the slot it holds for us (a walk we no longer wait for), and dropped if not.
    fn on_answer(
        &mut self,
        now: Duration,
        from: I,
        msg: OverlayMsg<I>,
        out: &mut Vec<OverlayOutput<I>>,
    ) {
        let (round, nonce, kind, answerer) = match &msg {
            OverlayMsg::Accept {
                round,
                nonce,
                acceptor,
            } => (*round, *nonce, Walk::Propose, acceptor),
            OverlayMsg::SpliceOffer {
                round,
                nonce,
                splitter,
                ..
            } => (*round, *nonce, Walk::Splice, splitter),
            _ => return,
        };
        let direct = *answerer == from;
        // Only the peer that could send the answer is heard: the acceptor itself for a walk that names us,
        // a peer we sent the walk to for one that does not. Anyone else on the walk's path (or anyone told
        // its nonce) could otherwise answer for a peer of its choosing.
        let mine = self.rounds.get(&round).is_some_and(|s| {
            !s.frozen
                && s.walks.get(&nonce).is_some_and(|w| {
                    w.kind == kind
                        && if w.named {
                            direct
                        } else {
                            w.sent_to.contains(&from)
                        }
                })
        });
        if mine {
            let key = self.state(round).walks.remove(&nonce).expect("checked").key;
            match msg {
                OverlayMsg::Accept { acceptor, .. } => {
                    self.on_accept(now, round, nonce, key, acceptor, out)
                }
                OverlayMsg::SpliceOffer {
                    splitter, other, ..
                } => self.on_splice_offer(now, round, nonce, key, splitter, other, out),
                _ => {}
            }
            return;
        }
        if let Some(back) = self.relayed.get_mut(&round).and_then(|m| m.remove(&nonce)) {
            self.relayed_count -= 1;
            if back != from {
                out.push(OverlayOutput::Send { to: back, msg });
            }
        } else if direct {
            send(out, &from, OverlayMsg::Nack { round, nonce });
        }
    }

    /// Routes a validated message to its handler (one method per message kind below).
    fn on_message(
        &mut self,
        now: Duration,
        from: I,
        msg: OverlayMsg<I>,
        view: &[I],
        out: &mut Vec<OverlayOutput<I>>,
    ) {
        let round = msg.round();
        if let Some(newest) = self.newest()
            && (round > newest + MAX_FUTURE_ROUNDS
                || (self.rounds.len() as u64 >= MAX_KEPT_ROUNDS
                    && round < *self.rounds.keys().next().expect("non-empty")))
        {
            return;
        }
        if matches!(
            msg,
            OverlayMsg::Accept { .. } | OverlayMsg::SpliceOffer { .. }
        ) {
            self.on_answer(now, from, msg, out);
            return;
        }
        if !self.rounds.contains_key(&round) {
            self.on_unstarted(from, msg, view, out);
            return;
        }
        match msg {
            OverlayMsg::Propose { nonce, .. } => {
                self.on_propose(now, round, from, nonce, msg, view, out)
            }
            OverlayMsg::SpliceRequest { nonce, .. } => {
                self.on_splice_request(now, round, from, nonce, msg, view, out)
            }
            // Answers were routed above (`on_answer`), whether or not the round is open here.
            OverlayMsg::Accept { .. } | OverlayMsg::SpliceOffer { .. } => {}
            OverlayMsg::Confirm { key, .. } => self.on_confirm(round, from, key, out),
            OverlayMsg::ConfirmAck { nonce, .. } => self.on_confirm_ack(round, from, nonce, out),
            OverlayMsg::Nack { nonce, .. } => self.on_nack(round, from, nonce, out),
            OverlayMsg::Drop { .. } => self.on_drop(round, from, out),
            OverlayMsg::SpliceAccept { key, .. } => self.on_splice_accept(round, from, key, out),
            OverlayMsg::Handover {
                nonce, newcomer, ..
            } => self.on_handover(round, from, nonce, newcomer, out),
        }
    }

    /// The state of a round `on_message` found open or frozen.
    fn state(&mut self, round: Round) -> &mut RoundState<I> {
        self.rounds.get_mut(&round).expect("checked by on_message")
    }

    /// A round not started (or forgotten): walks are forwarded, commitments refused, the rest ignored
    /// (answers to walks were relayed before).
    fn on_unstarted(
        &mut self,
        from: I,
        msg: OverlayMsg<I>,
        view: &[I],
        out: &mut Vec<OverlayOutput<I>>,
    ) {
        let round = msg.round();
        match msg {
            OverlayMsg::Propose { .. } | OverlayMsg::SpliceRequest { .. } => {
                self.forward(&from, msg, view, out)
            }
            OverlayMsg::Confirm { key, .. } | OverlayMsg::SpliceAccept { key, .. } => {
                let nonce = walk_nonce(key);
                send(out, &from, OverlayMsg::Nack { round, nonce })
            }
            OverlayMsg::ConfirmAck { .. } => send(out, &from, OverlayMsg::Drop { round }),
            _ => {}
        }
    }

    /// An acceptor of this sub-step with room reserves a slot and answers the origin (or back along the walk's
    /// path if it hides its origin); anyone else forwards.
    #[allow(clippy::too_many_arguments)]
    fn on_propose(
        &mut self,
        now: Duration,
        round: Round,
        from: I,
        nonce: u64,
        msg: OverlayMsg<I>,
        view: &[I],
        out: &mut Vec<OverlayOutput<I>>,
    ) {
        let degree = self.cfg.degree;
        let (back, named) = self.answer_to(round, nonce, &from, &msg);
        let capped = named.is_some_and(|o| self.at_cap(round, o) || self.shunned(round, o))
            || self.shunned(round, &from);
        let s = self.rounds.get_mut(&round).expect("checked by on_message");
        let until = now + s.timing.reserve_timeout;
        // `role` is Acceptor only inside a sub-step of this VN's own clock (reset at each boundary).
        if !s.frozen
            && !capped
            && s.role == Role::Acceptor
            && !s.accepted
            && s.degree() < degree
            && !s.walks.contains_key(&nonce)
            && !s.offers.contains_key(&nonce)
            && named.is_none_or(|o| {
                *o != self.me
                    && !s.links.contains_key(o)
                    && !s.offers.values().any(|(_, p, _)| p.as_ref() == Some(o))
            })
        {
            s.accepted = true;
            s.offers
                .insert(nonce, (until, named.cloned(), from.clone()));
            let acceptor = self.me.clone();
            send(
                out,
                &back,
                OverlayMsg::Accept {
                    round,
                    nonce,
                    acceptor,
                },
            );
        } else {
            self.forward(&from, msg, view, out);
        }
    }

    /// A VN with an established edge (x, y) and no splice in progress offers to split it for the walk's
    /// origin (answering back along the path); anyone else forwards.
    #[allow(clippy::too_many_arguments)]
    fn on_splice_request(
        &mut self,
        now: Duration,
        round: Round,
        from: I,
        nonce: u64,
        msg: OverlayMsg<I>,
        view: &[I],
        out: &mut Vec<OverlayOutput<I>>,
    ) {
        let (back, named) = self.answer_to(round, nonce, &from, &msg);
        let capped = named.is_some_and(|o| self.at_cap(round, o));
        let s = self.rounds.get_mut(&round).expect("checked by on_message");
        let until = now + s.timing.reserve_timeout;
        let candidates: Vec<I> = s.established();
        if !s.frozen
            && !capped
            && s.lock.is_none()
            && !s.walks.contains_key(&nonce)
            && named.is_none_or(|o| *o != self.me && !s.links.contains_key(o))
            && !candidates.is_empty()
        {
            let other = candidates.choose(&mut self.rng).expect("non-empty").clone();
            s.lock = Some(SpliceLock {
                nonce,
                other: other.clone(),
                until,
            });
            let splitter = self.me.clone();
            send(
                out,
                &back,
                OverlayMsg::SpliceOffer {
                    round,
                    nonce,
                    splitter,
                    other,
                },
            );
        } else {
            self.forward(&from, msg, view, out);
        }
    }

    /// Our proposal was accepted by `acceptor`: commit (`Confirm`, retransmitted until acknowledged) if we
    /// still have room and are not linked to it yet, else refuse (`Nack`) so that it frees the slot.
    fn on_accept(
        &mut self,
        now: Duration,
        round: Round,
        nonce: u64,
        key: u64,
        acceptor: I,
        out: &mut Vec<OverlayOutput<I>>,
    ) {
        let degree = self.cfg.degree;
        let me = self.me.clone();
        let capped = self.at_cap(round, &acceptor);
        let s = self.state(round);
        let retx = now + s.timing.retransmit;
        if acceptor == me {
            return;
        }
        if s.degree() < degree && !s.links.contains_key(&acceptor) && !capped {
            let link = Link::Committed {
                nonce,
                key,
                retx: Some(retx),
                splice: None,
            };
            s.links.insert(acceptor.clone(), link);
            send(out, &acceptor, OverlayMsg::Confirm { round, key });
        } else {
            send(out, &acceptor, OverlayMsg::Nack { round, nonce });
        }
    }

    /// The proposer committed to the slot we reserved, proving with the walk's key that it is the walk's
    /// origin: count the edge and acknowledge (every retransmission).
    fn on_confirm(&mut self, round: Round, from: I, key: u64, out: &mut Vec<OverlayOutput<I>>) {
        let nonce = walk_nonce(key);
        let degree = self.cfg.degree;
        let capped = self.at_cap(round, &from) || self.shunned(round, &from);
        let s = self.state(round);
        let open = !s.frozen;
        let linked = s.links.contains_key(&from);
        match s.links.get(&from) {
            Some(Link::Established { nonce: n }) if *n == nonce => {
                send(out, &from, OverlayMsg::ConfirmAck { round, nonce });
            }
            // An origin that was our neighbour as often as the cap allows: refused, and the reservation
            // (which it learnt of only through its walk) freed at once.
            None if capped => {
                let sender = s.offers.remove(&nonce).map(|(_, _, p)| p);
                s.expired_offers.remove(&nonce);
                send(out, &from, OverlayMsg::Nack { round, nonce });
                // A walk that hid a capped origin used up an acceptance of ours: its sender (the origin itself,
                // or a peer posing as its relay) hands us no walk we take for a while.
                for p in sender.into_iter().chain([from.clone()]) {
                    self.shun(round, p);
                }
            }
            _ if open
                && s.offers
                    .remove(&nonce)
                    .is_some_and(|(_, named, _)| named.is_none_or(|o| o == from))
                && !linked =>
            {
                // The reservation for this walk becomes the edge with its origin, now known.
                s.links.insert(from.clone(), Link::Established { nonce });
                send(out, &from, OverlayMsg::ConfirmAck { round, nonce });
            }
            None if open && s.degree() < degree && s.expired_offers.remove(&nonce) => {
                // Our reservation expired but there is still room: take the edge.
                s.links.insert(from.clone(), Link::Established { nonce });
                send(out, &from, OverlayMsg::ConfirmAck { round, nonce });
            }
            // An origin we are already linked to (its walk reached us on another path) is refused, which
            // frees the reservation too.
            _ => send(out, &from, OverlayMsg::Nack { round, nonce }),
        }
    }

    /// The other end counts our commitment: count it too. An ack for an edge we do not count gets a `Drop`.
    fn on_confirm_ack(
        &mut self,
        round: Round,
        from: I,
        nonce: u64,
        out: &mut Vec<OverlayOutput<I>>,
    ) {
        let s = self.state(round);
        let open = !s.frozen;
        match s.links.get(&from) {
            Some(Link::Committed { nonce: n, .. }) if *n == nonce && open => {
                s.links.insert(from.clone(), Link::Established { nonce });
            }
            Some(Link::Established { nonce: n }) if *n == nonce => {}
            _ => {
                // The peer counts an edge we do not: tell it.
                send(out, &from, OverlayMsg::Drop { round });
            }
        }
    }

    /// The peer refused the link with this nonce: forget it (and, for a splice we started, both halves).
    fn on_nack(&mut self, round: Round, from: I, nonce: u64, out: &mut Vec<OverlayOutput<I>>) {
        let s = self.state(round);
        let open = !s.frozen;
        // The origin of a walk we answered refuses it: free the reservation (or the splice lock).
        s.offers.remove(&nonce);
        if s.lock.as_ref().is_some_and(|l| l.nonce == nonce) {
            s.lock = None;
        }
        let matched = s.links.get(&from).filter(|l| l.nonce() == nonce).cloned();
        match matched {
            Some(Link::Established { .. }) if !open => {
                s.links.remove(&from);
                out.push(OverlayOutput::EdgeDropped { round, peer: from });
            }
            Some(Link::Established { .. }) => {
                s.links.remove(&from);
            }
            Some(Link::Committed {
                splice: Some(SpliceRole::Splitter { other }),
                ..
            }) => {
                s.links.remove(&from);
                if matches!(s.links.get(&other), Some(Link::Committed { nonce: n, .. }) if *n == nonce)
                {
                    s.links.remove(&other);
                }
            }
            Some(_) => {
                s.links.remove(&from);
            }
            None => {}
        }
    }

    /// The peer no longer counts the edge: neither do we (reported once the round is frozen).
    fn on_drop(&mut self, round: Round, from: I, out: &mut Vec<OverlayOutput<I>>) {
        let s = self.state(round);
        if let Some(l) = s.links.remove(&from)
            && matches!(l, Link::Established { .. })
            && s.frozen
        {
            out.push(OverlayOutput::EdgeDropped {
                round,
                peer: from.clone(),
            });
        }
        if s.lock.as_ref().is_some_and(|l| l.other == from) {
            s.lock = None;
        }
    }

    /// `from`, a splitter, offers its edge to `other` for our splice walk: commit to both ends if still short by
    /// two and linked to neither.
    #[allow(clippy::too_many_arguments)]
    fn on_splice_offer(
        &mut self,
        now: Duration,
        round: Round,
        nonce: u64,
        key: u64,
        from: I,
        other: I,
        out: &mut Vec<OverlayOutput<I>>,
    ) {
        let degree = self.cfg.degree;
        let me = self.me.clone();
        let capped = self.at_cap(round, &from) || self.at_cap(round, &other);
        let s = self.state(round);
        let retx = now + s.timing.retransmit;
        if from == me {
            return;
        }
        let ok = !capped
            && degree.saturating_sub(s.degree()) >= 2
            && other != from
            && other != me
            && !s.links.contains_key(&from)
            && !s.links.contains_key(&other);
        if ok {
            s.links.insert(
                from.clone(),
                Link::Committed {
                    nonce,
                    key,
                    retx: Some(retx),
                    splice: Some(SpliceRole::Splitter {
                        other: other.clone(),
                    }),
                },
            );
            s.links.insert(
                other,
                Link::Committed {
                    nonce,
                    key,
                    retx: None,
                    splice: Some(SpliceRole::Other),
                },
            );
            send(out, &from, OverlayMsg::SpliceAccept { round, key });
        } else {
            send(out, &from, OverlayMsg::Nack { round, nonce });
        }
    }

    /// The splice origin committed (proving with the walk's key that it is the origin): replace the locked edge (x, y) by (x, origin) and hand y over to it.
    fn on_splice_accept(
        &mut self,
        round: Round,
        from: I,
        key: u64,
        out: &mut Vec<OverlayOutput<I>>,
    ) {
        let nonce = walk_nonce(key);
        let degree = self.cfg.degree;
        let capped = self.at_cap(round, &from) || self.shunned(round, &from);
        let s = self.state(round);
        // The origin, known only now, must not be a neighbour already (nor the far end of the edge), nor
        // one that was our neighbour as often as the cap allows.
        let lock_ok = !s.frozen
            && !capped
            && !s.links.contains_key(&from)
            && s.lock.as_ref().is_some_and(|l| {
                l.nonce == nonce
                    && l.other != from
                    && matches!(s.links.get(&l.other), Some(Link::Established { .. }))
            });
        if lock_ok {
            let lock = s.lock.take().expect("checked");
            s.links.remove(&lock.other);
            s.links.insert(from.clone(), Link::Established { nonce });
            // Each peer once and at most r of them: an honest round hands over at most its r edges, and a
            // peer looping splices must not grow the list (the second `Drop` is a redundancy; a lost one is
            // still caught by `EdgeRefused`).
            if !s.handed_over.contains(&lock.other) && s.handed_over.len() < degree {
                s.handed_over.push(lock.other.clone());
            }
            send(out, &from, OverlayMsg::ConfirmAck { round, nonce });
            send(
                out,
                &lock.other,
                OverlayMsg::Handover {
                    round,
                    nonce,
                    newcomer: from,
                },
            );
        } else if matches!(s.links.get(&from), Some(Link::Established { nonce: n }) if *n == nonce)
        {
            send(out, &from, OverlayMsg::ConfirmAck { round, nonce });
        } else {
            if s.lock.as_ref().is_some_and(|l| l.nonce == nonce) {
                s.lock = None;
            }
            send(out, &from, OverlayMsg::Nack { round, nonce });
        }
    }

    /// Our neighbour x split our edge: drop x, take the newcomer if there is room (else `Nack` it).
    fn on_handover(
        &mut self,
        round: Round,
        from: I,
        nonce: u64,
        newcomer: I,
        out: &mut Vec<OverlayOutput<I>>,
    ) {
        let degree = self.cfg.degree;
        let me = self.me.clone();
        let capped = self.at_cap(round, &newcomer);
        let s = self.state(round);
        let open = !s.frozen;
        // Only a current neighbour can hand its edge over: from anyone else a Handover would insert a
        // newcomer of the sender's choosing (forced adjacency).
        if !matches!(s.links.get(&from), Some(Link::Established { .. })) {
            if newcomer != me {
                send(out, &newcomer, OverlayMsg::Nack { round, nonce });
            }
            return;
        }
        s.links.remove(&from);
        if !open {
            out.push(OverlayOutput::EdgeDropped {
                round,
                peer: from.clone(),
            });
        }
        if s.lock.as_ref().is_some_and(|l| l.other == from) {
            s.lock = None;
        }
        if open
            && newcomer != me
            && !capped
            && !s.links.contains_key(&newcomer)
            && s.degree() < degree
        {
            s.links
                .insert(newcomer.clone(), Link::Established { nonce });
            send(out, &newcomer, OverlayMsg::ConfirmAck { round, nonce });
        } else if newcomer != me {
            send(out, &newcomer, OverlayMsg::Nack { round, nonce });
        }
    }

    /// Structural invariants of every kept round, for tests and simulations (run after every event):
    /// no link to ourselves; at most r counted (established) edges; a frozen round holds only established
    /// links, no lock and no walk; a splice lock names two distinct peers other than us; sub-step counters
    /// within the schedule; at most r + 1 links of any kind; at most one open walk per sub-step run; at most r hand-overs; at most
    /// [`MAX_KEPT_ROUNDS`] rounds. An `Err` names the round and what broke.
    pub fn check_invariants(&self) -> Result<(), String> {
        let total = self.cfg.total_substeps();
        for (round, s) in &self.rounds {
            let fail = |what: &str| Err(format!("overlay of {:?}, round {round}: {what}", self.me));
            if s.links.contains_key(&self.me) {
                return fail("a link to itself");
            }
            let established = s.established().len();
            if established > self.cfg.degree {
                return fail(&format!(
                    "{established} established edges > r = {}",
                    self.cfg.degree
                ));
            }
            if s.next_substep > total {
                return fail("sub-step counter past the schedule");
            }
            // Every link and reservation but a splitter's lock needs a free slot (degree < r), and a splitter
            // holds at most one lock: r + 1 slots at most, of any kind.
            if s.degree() > self.cfg.degree + 1 {
                return fail(&format!(
                    "{} slots taken > r + 1 = {}",
                    s.degree(),
                    self.cfg.degree + 1
                ));
            }
            if s.handed_over.len() > self.cfg.degree {
                return fail(&format!("{} hand-overs > r", s.handed_over.len()));
            }
            // One walk per sub-step at most, forgotten on its answer or at the freeze.
            if s.walks.len() > s.next_substep as usize {
                return fail(&format!(
                    "{} walks open after {} sub-steps",
                    s.walks.len(),
                    s.next_substep
                ));
            }
            if s.frozen
                && (s.lock.is_some()
                    || !s.walks.is_empty()
                    || !s.offers.is_empty()
                    || s.links
                        .values()
                        .any(|l| !matches!(l, Link::Established { .. })))
            {
                return fail("frozen with a pending link, lock or walk");
            }
            if s.lock.as_ref().is_some_and(|l| l.other == self.me) {
                return fail("a splice lock naming itself");
            }
        }
        let relayed: usize = self.relayed.values().map(BTreeMap::len).sum();
        if relayed != self.relayed_count || relayed > MAX_RELAYED {
            return Err(format!(
                "{relayed} walks remembered as relayed (counted {}, at most {MAX_RELAYED})",
                self.relayed_count
            ));
        }
        if self.rounds.len() as u64 > MAX_KEPT_ROUNDS {
            return Err(format!(
                "{} rounds kept > {MAX_KEPT_ROUNDS}",
                self.rounds.len()
            ));
        }
        if let Some((round, _)) = self.open_links.iter().find(|(r, peers)| {
            self.rounds
                .get(r)
                .is_none_or(|s| !peers.iter().eq(s.links.keys()))
        }) {
            return Err(format!("round {round}: the open links' index is stale"));
        }
        if let Some(round) = self
            .rounds
            .iter()
            .find(|(r, s)| !self.open_links.holds(**r, s.links.keys()))
            .map(|(r, _)| r)
        {
            return Err(format!(
                "round {round}: links missing from the open links' index"
            ));
        }
        Ok(())
    }
}

fn send<I: Clone>(out: &mut Vec<OverlayOutput<I>>, to: &I, msg: OverlayMsg<I>) {
    out.push(OverlayOutput::Send {
        to: to.clone(),
        msg,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::derive_rng;

    /// The repeat cap: 1.5 × an honest peer's expected share of 50 rounds, at least 1, none where it would
    /// not bind or the network's size is unknown.
    #[test]
    fn the_repeat_cap_is_one_and_a_half_honest_shares() {
        let cap = |n: Option<usize>, r: usize| {
            OverlayConfig {
                network_size: n,
                ..OverlayConfig::new(r, Duration::from_millis(10))
            }
            .repeat_cap()
        };
        assert_eq!(cap(Some(128), 8), Some(4)); // 1.5 · 50 · 8/127 = 4.72
        assert_eq!(cap(Some(48), 4), Some(6));
        assert_eq!(cap(Some(2000), 8), Some(1));
        assert_eq!(cap(Some(8), 6), None); // r/(n − 1) ≥ 2/3: every round
        assert_eq!(cap(None, 8), None);
        let off = OverlayConfig {
            network_size: Some(128),
            repeat_window: 0,
            ..OverlayConfig::new(8, Duration::from_millis(10))
        };
        assert_eq!(off.repeat_cap(), None);
    }

    /// A peer that was our neighbour as often as the cap allows is refused at its `Confirm` (and its
    /// reservation freed), and the peer that handed us its hidden walk is shunned: its next walk is forwarded,
    /// not taken. One round later, with the window past, it is taken again.
    /// Issue 44: a neighbour that sent no chunk by a round's deadline (`Withheld`) is shunned: a walk it
    /// proposes straight at us naming itself is forwarded, not taken, in the next rounds of the window, as is
    /// one relayed by an honest peer that names it; a walk of another peer is taken.
    #[test]
    fn a_neighbour_that_withheld_its_chunk_is_not_taken_again_within_the_window() {
        let cfg = OverlayConfig {
            network_size: Some(40),
            ..OverlayConfig::new(2, Duration::from_millis(10))
        };
        let mut b = OverlayBuilder::new(0u32, cfg, derive_rng(5, 2)).unwrap();
        let (view, mut out) = ([1, 2, 3], Vec::new());
        let t = Duration::ZERO;
        b.handle(
            t,
            OverlayInput::Withheld {
                round: Round(3),
                peer: 7,
            },
            &view,
            &mut out,
        );
        let r = Round(5);
        b.handle(t, OverlayInput::StartRound { round: r }, &view, &mut out);
        let offer = |b: &mut OverlayBuilder<u32>, from: u32, origin: u32, nonce: u64| {
            let s = b.rounds.get_mut(&r).unwrap();
            s.role = Role::Acceptor;
            s.accepted = false;
            let mut out = Vec::new();
            let walk = OverlayMsg::Propose {
                round: r,
                origin: Some(origin),
                nonce,
                ttl: 0,
            };
            b.handle(
                t,
                OverlayInput::Message { from, msg: walk },
                &view,
                &mut out,
            );
            out.iter().any(|o| {
                matches!(
                    o,
                    OverlayOutput::Send {
                        msg: OverlayMsg::Accept { .. },
                        ..
                    }
                )
            })
        };
        assert!(!offer(&mut b, 7, 7, 11), "its own walk, straight at us");
        assert!(
            !offer(&mut b, 2, 7, 12),
            "its walk, relayed by an honest peer"
        );
        assert!(offer(&mut b, 8, 8, 13), "another peer's walk");
        assert!(
            !b.shunned(Round(3 + REPEAT_WINDOW + 1), &7),
            "the window ends"
        );
    }

    #[test]
    fn a_capped_origin_is_refused_and_its_relay_shunned() {
        let cfg = OverlayConfig {
            network_size: Some(2000),
            ..OverlayConfig::new(2, Duration::from_millis(10))
        };
        assert_eq!(cfg.repeat_cap(), Some(1));
        let mut b = OverlayBuilder::new(0u32, cfg, derive_rng(5, 1)).unwrap();
        let (view, mut out) = ([1, 2, 3], Vec::new());
        let t = Duration::ZERO;
        b.history.insert(Round(10), vec![5]);
        let r = Round(59);
        b.handle(t, OverlayInput::StartRound { round: r }, &view, &mut out);
        let key = 77;
        let nonce = walk_nonce(key);
        let s = b.rounds.get_mut(&r).unwrap();
        s.offers
            .insert(nonce, (t + Duration::from_secs(1), None, 4));
        out.clear();
        let confirm = OverlayMsg::Confirm { round: r, key };
        b.handle(
            t,
            OverlayInput::Message {
                from: 5,
                msg: confirm,
            },
            &view,
            &mut out,
        );
        assert_eq!(
            out,
            vec![OverlayOutput::Send {
                to: 5,
                msg: OverlayMsg::Nack { round: r, nonce }
            }]
        );
        assert!(b.rounds[&r].offers.is_empty() && !b.is_neighbour(r, &5));
        assert!(b.shunned(r, &4) && b.shunned(r, &5) && !b.shunned(r, &3));
        // An acceptor of this sub-step forwards a walk from the shunned relay.
        let s = b.rounds.get_mut(&r).unwrap();
        s.role = Role::Acceptor;
        out.clear();
        let walk = OverlayMsg::Propose {
            round: r,
            origin: None,
            nonce: 9,
            ttl: 3,
        };
        b.handle(
            t,
            OverlayInput::Message { from: 4, msg: walk },
            &view,
            &mut out,
        );
        assert!(
            matches!(
                &out[..],
                [OverlayOutput::Send {
                    msg: OverlayMsg::Propose { .. },
                    ..
                }]
            ),
            "{out:?}"
        );
        // From anyone else a walk is taken.
        out.clear();
        let walk = OverlayMsg::Propose {
            round: r,
            origin: None,
            nonce: 10,
            ttl: 3,
        };
        b.handle(
            t,
            OverlayInput::Message { from: 3, msg: walk },
            &view,
            &mut out,
        );
        assert!(
            matches!(
                &out[..],
                [OverlayOutput::Send {
                    to: 3,
                    msg: OverlayMsg::Accept { .. }
                }]
            ),
            "{out:?}"
        );
        // Round 60 is 50 rounds from round 10: peer 5 is no longer capped there.
        assert!(b.at_cap(r, &5) && !b.at_cap(Round(60), &5));
        b.check_invariants().unwrap();
    }

    /// An answer to our walk is heard only from the peer that could send it: the acceptor itself for a walk
    /// that names us, a peer we sent the walk to for one that does not. Anyone else is ignored (and the walk
    /// still waits for its real answer).
    #[test]
    fn an_answer_is_heard_only_from_the_peer_that_could_send_it() {
        for named in [true, false] {
            let cfg = OverlayConfig::new(2, Duration::from_millis(10));
            let mut b = OverlayBuilder::new(0u32, cfg, derive_rng(6, 1)).unwrap();
            let (view, mut out) = ([1, 2, 3], Vec::new());
            let t = Duration::ZERO;
            let r = Round(0);
            b.handle(t, OverlayInput::StartRound { round: r }, &view, &mut out);
            let key = 41;
            let nonce = walk_nonce(key);
            let walk = OwnWalk {
                kind: Walk::Propose,
                key,
                named,
                sent_to: vec![1],
            };
            b.rounds.get_mut(&r).unwrap().walks.insert(nonce, walk);
            let accept = |acceptor| OverlayMsg::Accept {
                round: r,
                nonce,
                acceptor,
            };
            // A peer on the path (or anyone told the nonce) answers for a peer of its choosing: ignored.
            out.clear();
            b.handle(
                t,
                OverlayInput::Message {
                    from: 2,
                    msg: accept(3),
                },
                &view,
                &mut out,
            );
            assert!(out.is_empty(), "named {named}: {out:?}");
            assert!(b.rounds[&r].walks.contains_key(&nonce));
            // The peer that could send it: the acceptor (named), the first hop (hidden).
            let from = if named { 3 } else { 1 };
            b.handle(
                t,
                OverlayInput::Message {
                    from,
                    msg: accept(3),
                },
                &view,
                &mut out,
            );
            assert_eq!(
                out,
                vec![OverlayOutput::Send {
                    to: 3,
                    msg: OverlayMsg::Confirm { round: r, key }
                }],
                "named {named}"
            );
        }
    }

    #[test]
    fn check_invariants_reports_broken_state() {
        let mut b = OverlayBuilder::new(
            0u32,
            OverlayConfig::new(2, Duration::from_millis(10)),
            derive_rng(1, 1),
        )
        .unwrap();
        let mut out = Vec::new();
        b.handle(
            Duration::ZERO,
            OverlayInput::StartRound { round: Round(0) },
            &[1, 2, 3],
            &mut out,
        );
        assert!(b.check_invariants().is_ok());
        let s = b.rounds.get_mut(&Round(0)).unwrap();
        s.links.insert(0, Link::Established { nonce: 1 });
        assert!(b.check_invariants().unwrap_err().contains("itself"));
        let s = b.rounds.get_mut(&Round(0)).unwrap();
        s.links.clear();
        for p in 1..=3 {
            s.links.insert(p, Link::Established { nonce: p as u64 });
        }
        assert!(b.check_invariants().unwrap_err().contains("r = 2"));
        let s = b.rounds.get_mut(&Round(0)).unwrap();
        s.links.clear();
        s.offers.insert(1, (Duration::ZERO, Some(1), 1));
        s.frozen = true;
        assert!(b.check_invariants().unwrap_err().contains("frozen"));
    }

    /// Regression (found while writing `tests/hostile_inputs.rs`): a peer cycling unsolicited `Confirm`,
    /// `SpliceRequest`/`SpliceAccept` and `Drop` made one open round's hand-over list grow by one entry per
    /// cycle, without bound until the freeze. It now holds each peer once, at most r of them.
    #[test]
    fn hand_overs_stay_bounded_under_a_splice_loop() {
        let mut b = OverlayBuilder::new(
            0u32,
            OverlayConfig::new(2, Duration::from_millis(10)),
            derive_rng(3, 1),
        )
        .unwrap();
        let view = [1, 2, 3];
        let mut out = Vec::new();
        let t = Duration::ZERO;
        let r = Round(0);
        b.handle(t, OverlayInput::StartRound { round: r }, &view, &mut out);
        let mut msg = |b: &mut OverlayBuilder<u32>, from: u32, msg: OverlayMsg<u32>| {
            b.handle(t, OverlayInput::Message { from, msg }, &view, &mut out);
            b.check_invariants().unwrap();
        };
        for i in 0..200u64 {
            // Peers 1 and 2 take turns being handed over: 1 (or 2) becomes a neighbour by Confirm, 3 asks
            // for a splice of that edge, commits, and leaves again with Drop.
            let (x, nonce) = (1 + (i % 2) as u32, 1000 + i);
            msg(
                &mut b,
                x,
                OverlayMsg::Confirm {
                    round: r,
                    key: nonce,
                },
            );
            msg(
                &mut b,
                3,
                OverlayMsg::SpliceRequest {
                    round: r,
                    origin: Some(3),
                    nonce,
                    ttl: 1,
                },
            );
            msg(
                &mut b,
                3,
                OverlayMsg::SpliceAccept {
                    round: r,
                    key: nonce,
                },
            );
            msg(&mut b, 3, OverlayMsg::Drop { round: r });
        }
        let handed_over = &b.rounds[&r].handed_over;
        assert!(
            handed_over.len() <= 2,
            "{} hand-overs recorded",
            handed_over.len()
        );
    }

    /// `shorten_running` keeps the boundaries that passed and the next one, brings every later one and the
    /// freeze sooner, and leaves alone frozen rounds, rounds already at the shorter sub-step and any longer
    /// sub-step.
    #[test]
    fn shortened_running_rounds_keep_their_next_boundary_and_freeze_sooner() {
        let cfg = OverlayConfig::new(4, Duration::from_millis(10));
        let total = cfg.total_substeps();
        let mut b = OverlayBuilder::new(0u32, cfg.clone(), derive_rng(3, 2)).unwrap();
        let (view, mut out) = ([1, 2, 3], Vec::new());
        let at = |ms: u64| Duration::from_millis(ms);
        // Round 0 at the configured 10 ms, rounds 1 and 2 at 30 ms, from time 0.
        b.handle(
            at(0),
            OverlayInput::StartRound { round: Round(0) },
            &view,
            &mut out,
        );
        b.set_substep(at(30));
        b.handle(
            at(0),
            OverlayInput::StartRound { round: Round(1) },
            &view,
            &mut out,
        );
        b.handle(
            at(0),
            OverlayInput::StartRound { round: Round(2) },
            &view,
            &mut out,
        );
        // Boundaries 0, 30, 60 and 90 have passed; the next is at 120.
        b.handle(at(95), OverlayInput::Tick, &view, &mut out);
        let before = b.freeze_time(Round(1)).unwrap();
        assert_eq!(before, cfg.deadline() * 3);
        // A longer sub-step changes nothing.
        b.shorten_running(at(95), at(50));
        assert_eq!(b.freeze_time(Round(1)), Some(before));
        b.shorten_running(at(95), at(10));
        // Boundary 4 stays at 120, the 16 after it come 10 ms apart, then the grace of the 10 ms timing.
        let want = at(120) + at(10) * (total - 4) + cfg.grace;
        assert_eq!(b.freeze_time(Round(1)), Some(want));
        assert_eq!(b.freeze_time(Round(2)), Some(want));
        assert_eq!(b.freeze_time(Round(0)), Some(cfg.deadline()));
        // Once round 0 froze, shortening leaves it as it was, and the others run to their new freeze.
        b.handle(cfg.deadline(), OverlayInput::Tick, &view, &mut out);
        assert_eq!(b.is_frozen(Round(0)), Some(true));
        b.shorten_running(cfg.deadline(), at(1));
        assert_eq!(b.freeze_time(Round(0)), Some(cfg.deadline()));
        // An overdue boundary comes now, not in the past: nothing fires at once.
        let mut late = OverlayBuilder::new(0u32, cfg.clone(), derive_rng(3, 2)).unwrap();
        late.set_substep(at(30));
        late.handle(
            at(0),
            OverlayInput::StartRound { round: Round(0) },
            &view,
            &mut out,
        );
        late.handle(at(95), OverlayInput::Tick, &view, &mut out);
        late.shorten_running(at(130), at(10));
        assert_eq!(late.next_timeout(), Some(at(130)));
        assert_eq!(
            late.freeze_time(Round(0)),
            Some(at(130) + at(10) * (total - 4) + cfg.grace)
        );
        b.check_invariants().unwrap();
        late.check_invariants().unwrap();
    }

    #[test]
    fn a_new_substep_times_the_rounds_started_after_it_and_leaves_running_ones_alone() {
        let cfg = OverlayConfig::new(4, Duration::from_millis(10));
        let mut b = OverlayBuilder::new(0u32, cfg.clone(), derive_rng(3, 2)).unwrap();
        let (view, mut out) = ([1, 2, 3], Vec::new());
        let at = |ms: u64| Duration::from_millis(ms);
        b.handle(
            at(0),
            OverlayInput::StartRound { round: Round(0) },
            &view,
            &mut out,
        );
        b.set_substep(at(30));
        assert_eq!(b.deadline(), cfg.deadline() * 3);
        b.handle(
            at(5),
            OverlayInput::StartRound { round: Round(1) },
            &view,
            &mut out,
        );
        assert_eq!(b.freeze_time(Round(0)), Some(cfg.deadline()));
        assert_eq!(b.freeze_time(Round(1)), Some(at(5) + cfg.deadline() * 3));
        // The scaled round's reservation, retransmission and grace periods are the configured ones times 3.
        let t = cfg.timing_with_substep(at(30));
        assert_eq!(
            (t.reserve_timeout, t.retransmit, t.grace),
            (cfg.reserve_timeout * 3, cfg.retransmit * 3, cfg.grace * 3)
        );
        assert_eq!(cfg.timing_with_substep(cfg.substep), cfg.timing());
        // Round 0 freezes on its own schedule, round 1 three times later.
        b.handle(cfg.deadline(), OverlayInput::Tick, &view, &mut out);
        assert_eq!(b.is_frozen(Round(0)), Some(true));
        assert_eq!(b.is_frozen(Round(1)), Some(false));
        assert_eq!(
            b.next_timeout().map(|t| t <= at(5) + cfg.deadline() * 3),
            Some(true)
        );
        b.handle(
            at(5) + cfg.deadline() * 3,
            OverlayInput::Tick,
            &view,
            &mut out,
        );
        assert_eq!(b.is_frozen(Round(1)), Some(true));
        b.check_invariants().unwrap();
    }
}
