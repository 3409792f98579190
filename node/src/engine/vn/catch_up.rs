//! [`CatchUp`]: noticing that this VN's node fell behind the network. Peers' messages that show rounds beyond
//! what the VN accepts (`behind.rs`) are evidence, never a decision: they only start a probe, which asks
//! [`PROBE_PEERS`] peers drawn at random from the peers it can dial which exchange they are at
//! ([`super::VnEngine::with_round_probes`]), and only once this VN's own exchanges show it is cut off (its
//! latest finished exchange received no copy: [`CatchUp::isolated`]). It decides; the engine tells the RN
//! `Behind` and ends the exchanges the network has left.
//!
//! Why evidence alone never moves a node (issue 44): a listed node holds k identities, and nothing tells a VN
//! which identities are one node's, so "three distinct peers agree" can be three identities of one liar. In
//! a fresh node's warm-up no honest VN has spoken yet, so such a liar was every voter: three identities
//! sending one `Drop` each made every node of a real network jump to its last round. A VN in step with the
//! network has the proof in its own exchanges (neighbours' copies arrive), and a VN that has not exchanged
//! yet is not behind anyone; a probe's answers come from peers the VN chose at random, so a liar moves it
//! only when it holds most of the peers drawn. A resumed VN's join probe starts without that proof (it has
//! not exchanged since its restart), so a jump beyond its window takes a second draw of other peers that
//! agrees ([`ProbeDecision::Confirm`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use protocol::Round;
use protocol::control::MAX_FUTURE_ROUNDS;
use rand_chacha::ChaCha12Rng;

use super::behind::{AheadWitnesses, CATCH_UP_WITNESSES};

/// Peers a VN asks at once which exchange they are at (a catch-up probe). Nine distinct listed peers, chosen
/// at random from the peers a VN can dial (without the VN's own node where the VN knows it): the lower median of their
/// answers is where the network is unless five of the nine lie or are behind themselves. A node holding 8 of
/// 32 listed identities (one of four nodes) holds five of nine drawn with probability 0.023 (hypergeometric),
/// 0.0008 among 64 identities; with five peers asked it was 0.085 and 0.012. The requests are a few bytes.
pub const PROBE_PEERS: usize = 9;

/// What a peer's claim of progress means for this VN.
#[derive(Debug, PartialEq)]
pub(crate) enum Witnessed {
    /// Nothing to act on.
    Nothing,
    /// Enough distinct peers beyond our window to take seriously: ask (if probes are on and this VN is cut
    /// off, [`CatchUp::isolated`]).
    Probe,
}

/// What a finished probe decided.
#[derive(Debug, PartialEq)]
pub(crate) enum ProbeDecision {
    /// The network is at `at`: rejoin `margin` exchanges further.
    Behind { at: Round, margin: u64 },
    /// A resumed node found nothing beyond its own round: it starts where it is.
    StartHere,
    /// A resumed node's join probe found the network beyond its window: ask other peers before jumping
    /// ([`CatchUp::start_probe`] asks them at once).
    Confirm,
}

/// One catch-up probe: whom it asked, what they answered, when it gives up waiting.
#[derive(Debug)]
struct Probe<I> {
    /// Started as a resumed VN joined (rather than on evidence while running): see [`CatchUp::decide`].
    at_join: bool,
    /// A join probe that confirms another's finding: that probe's median.
    confirming: Option<Round>,
    /// How many peers were asked: a decision needs answers from most of them.
    asked: usize,
    waiting: BTreeSet<I>,
    answers: BTreeMap<I, Round>,
    deadline: Duration,
}

/// Active catch-up, where the driver turned it on.
#[derive(Debug)]
struct Probing<I> {
    /// The peers a probe may ask (the peer list without this VN), and this node's own VNs, never asked.
    peers: Vec<I>,
    own: Vec<I>,
    current: Option<Probe<I>>,
    /// When the last probe started.
    last: Option<Duration>,
    /// A resumed VN probes as it joins: `Pending` until it joins, then when (see [`JOIN_PROBE_SPREAD`]).
    join: JoinProbe,
    /// The peers the last join probe asked, and the median it found beyond the window, while a second
    /// probe is to confirm it.
    first_join: Vec<I>,
    to_confirm: Option<Round>,
}

/// A resumed VN's probe as it joins.
#[derive(Debug, Clone, Copy, PartialEq)]
enum JoinProbe {
    None,
    Pending,
    At(Duration),
}

/// A resumed node's VNs join at the same instant; each starts its join probe after its own random delay in
/// `[0, JOIN_PROBE_SPREAD]`, so that the k probes do not leave together and tie the VNs to one node (issue
/// 43). Small beside a restart (the process start, the dials and the checkpoint load take seconds), large
/// beside the millisecond coincidences a packet observer scores.
pub const JOIN_PROBE_SPREAD: Duration = Duration::from_millis(200);

/// A VN's catch-up: the witnesses it heard, whether its own exchanges show it in step, and its probes.
#[derive(Debug)]
pub(crate) struct CatchUp<I> {
    ahead: AheadWitnesses<I>,
    /// The newest exchange this VN finished, and whether a neighbour's copy arrived in it.
    last_exchange: Option<(Round, bool)>,
    probing: Option<Probing<I>>,
    /// Choosing whom to ask draws nothing from the streams the overlay and the jitter use.
    rng: ChaCha12Rng,
}

impl<I: Ord + Clone> CatchUp<I> {
    /// Passive catch-up only: a peer counts as a witness while heard within `window`.
    pub(crate) fn new(window: Duration, rng: ChaCha12Rng) -> Self {
        Self {
            ahead: AheadWitnesses::new(window),
            last_exchange: None,
            probing: None,
            rng,
        }
    }

    /// Whether `peer` is one of this node's own VNs (known only to a node's own process): a copy from a
    /// sibling says nothing about being in step with the network — the VNs of a node left behind negotiate
    /// the same old rounds and pair with each other (measured on loopback: a resumed node's two VNs exchanged
    /// with each other round after round, four rounds behind).
    pub(crate) fn is_own(&self, peer: &I) -> bool {
        self.probing
            .as_ref()
            .is_some_and(|p| p.own.binary_search(peer).is_ok())
    }

    /// This VN finished `exchange`; `copies`: whether any neighbour's copy (not a sibling's) arrived in it.
    pub(crate) fn exchange_done(&mut self, exchange: Round, copies: bool) {
        if self.last_exchange.is_none_or(|(r, _)| r <= exchange) {
            self.last_exchange = Some((exchange, copies));
        }
    }

    /// Whether this VN's own exchanges say it may be cut off from the network: its newest finished exchange
    /// received no copy. Before its first exchange a VN is never isolated (a fresh node's warm-up has no
    /// honest witnesses to outvote a liar: module docs); a resumed VN probes as it joins instead.
    pub(crate) fn isolated(&self) -> bool {
        matches!(self.last_exchange, Some((_, false)))
    }

    /// Turns on probes: `peers` may be asked (sorted and deduplicated here), `own` never are. `resumed`: the
    /// VN probes as it joins.
    pub(crate) fn enable_probes(&mut self, mut peers: Vec<I>, mut own: Vec<I>, resumed: bool) {
        peers.sort();
        peers.dedup();
        own.sort();
        self.probing = Some(Probing {
            peers,
            own,
            current: None,
            last: None,
            join: if resumed {
                JoinProbe::Pending
            } else {
                JoinProbe::None
            },
            first_join: Vec::new(),
            to_confirm: None,
        });
    }

    /// The VN joins at `now`: a resumed VN's join probe is due after its own random delay.
    pub(crate) fn joined(&mut self, now: Duration) {
        if let Some(p) = self.probing.as_mut()
            && p.join == JoinProbe::Pending
        {
            let delay = JOIN_PROBE_SPREAD.mul_f64(rand::Rng::random::<f64>(&mut self.rng));
            p.join = JoinProbe::At(now + delay);
        }
    }

    /// When the join probe is due, while it is.
    pub(crate) fn join_probe_at(&self) -> Option<Duration> {
        match self.probing.as_ref()?.join {
            JoinProbe::At(at) => Some(at),
            _ => None,
        }
    }

    /// Whether the join probe is due now (once).
    pub(crate) fn take_join_probe(&mut self, now: Duration) -> bool {
        let due = self.join_probe_at().is_some_and(|at| at <= now);
        if due && let Some(p) = self.probing.as_mut() {
            p.join = JoinProbe::None;
        }
        due
    }

    pub(crate) fn expire(&mut self, now: Duration) {
        self.ahead.expire(now);
    }

    /// The exchange last reported to the RN as the network's, if any.
    pub(crate) fn reported(&self) -> Option<Round> {
        self.ahead.reported()
    }

    /// The RN is told the network is at `exchange`.
    pub(crate) fn adopt(&mut self, exchange: Round) {
        self.ahead.adopt(exchange);
    }

    /// Whether most peers heard within `fresh` are well behind `exchange` (`behind.rs`).
    pub(crate) fn network_behind(&self, now: Duration, exchange: Round, fresh: Duration) -> bool {
        self.ahead.network_behind(now, exchange, fresh)
    }

    /// `from` (authenticated, allowed) showed that the network is at exchange `at` at least; this VN's node
    /// is at `newest`.
    pub(crate) fn witness(
        &mut self,
        now: Duration,
        from: &I,
        at: Round,
        newest: Round,
    ) -> Witnessed {
        self.ahead.note(now, from, at);
        if at > newest + MAX_FUTURE_ROUNDS && self.evidence(now, newest) {
            Witnessed::Probe
        } else {
            Witnessed::Nothing
        }
    }

    /// Whether the claims heard are worth a probe: at least [`CATCH_UP_WITNESSES`] distinct peers fresh
    /// beyond this VN's window, and nothing reported already covers them. One claim alone does not ask:
    /// measured in procs mode, nodes desynchronised by a paused peer's deadlines probed often, and each jump
    /// landing past the median pulled more. Whether most of the peers heard are ahead does not matter: the
    /// peers heard may be one node's identities, or mostly as far behind as we are (two nodes restarted
    /// together hear each other first); the probe asks peers drawn from the whole list.
    pub(crate) fn evidence(&self, now: Duration, newest: Round) -> bool {
        self.ahead.beyond(now, newest) >= CATCH_UP_WITNESSES
            && self
                .ahead
                .furthest(now)
                .is_some_and(|at| self.ahead.reported().is_none_or(|r| r < at))
    }

    /// Starts a probe (`at_join`: the resumed VN's join probe) if probes are on, none is running and the last
    /// one started at least `timeout` ago:
    /// returns the peers to ask, up to [`PROBE_PEERS`] distinct ones drawn at random from the probe list (the
    /// peer list's entries with an address) and `view` (peers whose address the VN learnt since), never `me`,
    /// this node's own VNs or peers not `allowed`. At most one probe per `timeout`, whatever peers claim: a peer that keeps
    /// claiming to be far ahead costs us nine tiny requests per deadline, and moves us only if most of the
    /// peers asked agree with it.
    pub(crate) fn start_probe(
        &mut self,
        now: Duration,
        me: &I,
        view: Vec<I>,
        allowed: &dyn Fn(&I) -> bool,
        timeout: Duration,
        at_join: bool,
    ) -> Vec<I> {
        let Some(p) = self.probing.as_mut() else {
            return Vec::new();
        };
        // A confirming probe follows the probe it confirms at once.
        let confirming = p.to_confirm.take().filter(|_| at_join);
        if p.current.is_some()
            || (confirming.is_none() && p.last.is_some_and(|t| now < t + timeout))
        {
            return Vec::new();
        }
        let mut candidates: Vec<I> = p
            .peers
            .iter()
            .cloned()
            .chain(view)
            .filter(|c| c != me && allowed(c) && p.own.binary_search(c).is_err())
            .collect();
        candidates.sort();
        candidates.dedup();
        if candidates.is_empty() {
            return Vec::new();
        }
        // A confirming probe asks peers the first did not, topped up from those in a network too small
        // for two disjoint draws.
        let fresh: Vec<I> = match confirming {
            Some(_) => candidates
                .iter()
                .filter(|c| !p.first_join.contains(c))
                .cloned()
                .collect(),
            None => candidates.clone(),
        };
        let mut asked: Vec<I> =
            rand::seq::IndexedRandom::choose_multiple(fresh.as_slice(), &mut self.rng, PROBE_PEERS)
                .cloned()
                .collect();
        if asked.len() < PROBE_PEERS {
            let rest: Vec<I> = candidates
                .iter()
                .filter(|c| !asked.contains(c))
                .cloned()
                .collect();
            asked.extend(
                rand::seq::IndexedRandom::choose_multiple(
                    rest.as_slice(),
                    &mut self.rng,
                    PROBE_PEERS - asked.len(),
                )
                .cloned(),
            );
        }
        if at_join && confirming.is_none() {
            p.first_join = asked.clone();
        }
        p.last = Some(now);
        p.current = Some(Probe {
            at_join,
            confirming,
            asked: asked.len(),
            waiting: asked.iter().cloned().collect(),
            answers: BTreeMap::new(),
            deadline: now + timeout,
        });
        asked
    }

    /// When the running probe gives up waiting.
    pub(crate) fn deadline(&self) -> Option<Duration> {
        self.current().map(|p| p.deadline)
    }

    fn current(&self) -> Option<&Probe<I>> {
        self.probing.as_ref().and_then(|p| p.current.as_ref())
    }

    fn current_mut(&mut self) -> Option<&mut Probe<I>> {
        self.probing.as_mut().and_then(|p| p.current.as_mut())
    }

    /// `peer` will not answer (its query failed, or it is gone).
    pub(crate) fn no_answer(&mut self, peer: &I) {
        if let Some(p) = self.current_mut() {
            p.waiting.remove(peer);
        }
    }

    /// An answer to our probe: kept if it comes from a peer we asked and have not heard from in this probe
    /// (others are ignored). An answer that does not decode is an error.
    pub(crate) fn answer(&mut self, from: I, bytes: &[u8]) -> Result<(), String> {
        let Some(p) = self.current_mut() else {
            return Ok(());
        };
        if !p.waiting.remove(&from) {
            return Ok(());
        }
        match protocol::codec::decode_control::<Option<Round>>(bytes) {
            // Not started yet: a vote that the network is not ahead (a liar that answers for rounds far
            // ahead must outvote the peers that have not begun too).
            Ok(at) => {
                p.answers.insert(from, at.unwrap_or(Round::ZERO));
                Ok(())
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// Once every peer asked answered (or failed), or at the probe's deadline: with answers from most of the
    /// peers asked (and at least [`CATCH_UP_WITNESSES`]), the lower median is where the network is — most of the peers asked
    /// are there or further, so a minority ahead (liars, or nodes that landed ahead after a jump) cannot
    /// move it, nor can a minority behind (a node restarted with us) hold it back. `newest`: this VN's
    /// node's exchange; `last_round`: the run's, which caps everything; `margin`: how far past the network a
    /// resumed node lands.
    pub(crate) fn decide(
        &mut self,
        now: Duration,
        newest: Round,
        last_round: Option<Round>,
        margin: u64,
    ) -> Option<ProbeDecision> {
        if self
            .current()
            .is_none_or(|p| !p.waiting.is_empty() && now < p.deadline)
        {
            return None;
        }
        let p = self.probing.as_mut()?.current.take()?;
        let at_join = p.at_join;
        let mut answers: Vec<Round> = p.answers.into_values().collect();
        // Most of the peers asked must answer: otherwise the liars among them could be most of the answers.
        if answers.len() < CATCH_UP_WITNESSES || 2 * answers.len() <= p.asked {
            tracing::info!(
                answers = answers.len(),
                at_join,
                "probe: too few answers to decide"
            );
            // Nothing known: a resumed node starts where it is now.
            return at_join.then_some(ProbeDecision::StartHere);
        }
        answers.sort_unstable();
        let at = answers[(answers.len() - 1) / 2];
        let at = last_round.map_or(at, |last| at.min(last));
        // A resumed node's jump beyond its window takes two probes of different peers that agree (the lower
        // of their medians): a node holding 8 of 32 listed identities holds five of nine peers drawn with
        // probability 0.023, and five of nine in each of two disjoint draws never (that takes ten).
        let at = match p.confirming {
            Some(first) => at.min(first),
            None if at_join && at > newest + MAX_FUTURE_ROUNDS => {
                tracing::info!(%at, %newest, "probe: the network is ahead; asking other peers to confirm");
                if let Some(probing) = self.probing.as_mut() {
                    probing.to_confirm = Some(at);
                }
                return Some(ProbeDecision::Confirm);
            }
            None => at,
        };
        if at > newest + MAX_FUTURE_ROUNDS && self.ahead.reported().is_none_or(|r| r < at) {
            tracing::info!(%at, %newest, answers = answers.len(), "probe: the network is ahead");
            // Where to land. A resumed node's first round back is slower than the others' (the overlays of
            // its next rounds, which they negotiated rounds ago, it negotiates only now): measured in procs
            // mode, landing one round past the median left a restarted pair two rounds behind for seven
            // rounds in one seed of three, so it lands `margin` (up to MAX_FUTURE_ROUNDS) past it. A running
            // node that probes on evidence lands *at* the median, the round most peers are in: measured, with
            // a margin past it, nodes desynchronised by a paused peer's deadlines probed, landed past the
            // median, and pulled the median on, probe after probe (the six others skipped 4-8 rounds).
            let margin = if at_join { margin } else { 0 };
            Some(ProbeDecision::Behind { at, margin })
        } else if at_join {
            // The network is within this VN's reach. Its first round back is as slow as ever, so it still
            // lands past the median if that is beyond its own round; if not, it starts where it is. Either
            // way at once: a resumed node whose probe found nothing beyond its window used to wait out the
            // warm-up (3 s on loopback, 1.5 s then; measured in procs mode, a restart 1 s after the kill lost
            // 1.5 s this way), which mixes views before round 0 and is not needed after a restart.
            let last = last_round.unwrap_or(Round(u64::MAX));
            if (at + margin).min(last) > newest {
                Some(ProbeDecision::Behind { at, margin })
            } else {
                Some(ProbeDecision::StartHere)
            }
        } else {
            None
        }
    }
}
