//! [`CatchUp`]: noticing that this VN's node fell behind the network, passively (peers' messages show rounds
//! beyond what it accepts: `behind.rs`) and actively (a probe asks [`PROBE_PEERS`] peers which exchange they
//! are at, [`super::VnEngine::with_round_probes`]). It decides; the engine tells the RN `Behind` and ends the
//! exchanges the network has left.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use protocol::Round;
use protocol::control::MAX_FUTURE_ROUNDS;
use rand_chacha::ChaCha12Rng;

use super::behind::{AheadWitnesses, CATCH_UP_WITNESSES};

/// Peers a VN asks at once which exchange they are at (a catch-up probe). Five distinct listed peers, chosen
/// at random from the peer list without the VN's own node: the lower median of their answers is where the
/// network is unless most of them lie or are behind themselves.
pub const PROBE_PEERS: usize = 5;

/// What a peer's claim of progress means for this VN.
#[derive(Debug, PartialEq)]
pub(crate) enum Witnessed {
    /// Nothing to act on.
    Nothing,
    /// Enough witnesses agree: the network is at this exchange at least (a lower bound).
    Behind(Round),
    /// Enough peers beyond our window to take seriously, not a majority: ask (if probes are on).
    Probe,
}

/// What a finished probe decided.
#[derive(Debug, PartialEq)]
pub(crate) enum ProbeDecision {
    /// The network is at `at`: rejoin `margin` exchanges further.
    Behind { at: Round, margin: u64 },
    /// A resumed node found nothing beyond its own round: it starts where it is.
    StartHere,
}

/// One catch-up probe: whom it asked, what they answered, when it gives up waiting.
#[derive(Debug)]
struct Probe<I> {
    /// Started as a resumed VN joined (rather than on evidence while running): see [`CatchUp::decide`].
    at_join: bool,
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
    /// A resumed VN probes as it joins.
    at_join: bool,
}

/// A VN's catch-up: the witnesses it heard, and its probes.
#[derive(Debug)]
pub(crate) struct CatchUp<I> {
    ahead: AheadWitnesses<I>,
    probing: Option<Probing<I>>,
    /// Choosing whom to ask draws nothing from the streams the overlay and the jitter use.
    rng: ChaCha12Rng,
}

impl<I: Ord + Clone> CatchUp<I> {
    /// Passive catch-up only: a peer counts as a witness while heard within `window`.
    pub(crate) fn new(window: Duration, rng: ChaCha12Rng) -> Self {
        Self {
            ahead: AheadWitnesses::new(window),
            probing: None,
            rng,
        }
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
            at_join: resumed,
        });
    }

    /// Whether to probe as the VN joins (once).
    pub(crate) fn take_join_probe(&mut self) -> bool {
        self.probing
            .as_mut()
            .is_some_and(|p| std::mem::take(&mut p.at_join))
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
        if let Some(exchange) = self.ahead.note(now, from, at, newest) {
            Witnessed::Behind(exchange)
        } else if at > newest + MAX_FUTURE_ROUNDS
            && self.ahead.reported().is_none_or(|r| r < at)
            && self.ahead.beyond(now, newest) >= CATCH_UP_WITNESSES
        {
            // Enough distinct peers beyond our window to take seriously, but not a majority of those we hear:
            // we may be in step with the rest, or the peers we hear may be mostly as far behind as we are
            // (two nodes restarted together hear each other first). Ask peers drawn from the whole list (if
            // probes are on). One claim alone does not ask: measured in procs mode, nodes desynchronised by
            // a paused peer's deadlines then probed often, and each jump landing past the median pulled more.
            Witnessed::Probe
        } else {
            Witnessed::Nothing
        }
    }

    /// Starts a probe (`at_join`: the resumed VN's join probe) if probes are on, none is running and the last
    /// one started at least `timeout` ago:
    /// returns the peers to ask, up to [`PROBE_PEERS`] distinct ones drawn at random from the probe list and
    /// `view`, never `me`, this node's own VNs or peers not `allowed`. At most one probe per `timeout`,
    /// whatever peers claim: a peer that keeps claiming to be far ahead costs us five tiny requests per
    /// deadline, and moves us only if most of the peers asked agree with it.
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
        if p.current.is_some() || p.last.is_some_and(|t| now < t + timeout) {
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
        let asked: Vec<I> = rand::seq::IndexedRandom::choose_multiple(
            candidates.as_slice(),
            &mut self.rng,
            PROBE_PEERS,
        )
        .cloned()
        .collect();
        p.last = Some(now);
        p.current = Some(Probe {
            at_join,
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
            Ok(Some(at)) => {
                p.answers.insert(from, at);
                Ok(())
            }
            // Not started yet: no vote.
            Ok(None) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Once every peer asked answered (or failed), or at the probe's deadline: with at least
    /// [`CATCH_UP_WITNESSES`] answers, the lower median is where the network is — most of the peers asked
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
        if answers.len() < CATCH_UP_WITNESSES {
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
        if at > newest + MAX_FUTURE_ROUNDS && self.ahead.reported().is_none_or(|r| r < at) {
            tracing::info!(%at, %newest, answers = answers.len(), "probe: the network is ahead");
            // Where to land. A resumed node's first round back is slower than the others' (the overlays of
            // its next rounds, which they negotiated rounds ago, it negotiates only now): measured in procs
            // mode, landing one round past the median left a restarted pair two rounds behind for seven
            // rounds in one seed of three, so it lands as far past as passive witnesses make it. A running
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
