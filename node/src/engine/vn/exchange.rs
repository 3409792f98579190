//! [`Exchange`]: one round's exchange at a VN, from the start of its overlay negotiation to the summary it
//! reports, as two phase types — where its negotiation is ([`Negotiation`]) and where its own chunk is
//! ([`Phase`]) — and [`Exchanges`], the window of exchanges a VN keeps, with the chunks held for rounds whose
//! overlay is not frozen yet.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use protocol::rnvn::RoundSummary;
use protocol::{ChunkFrame, Round};

use super::edge_slots::EdgeSlots;
use super::io::ReplyToken;

/// Chunks held for rounds whose overlay is not frozen yet, over all rounds. Only a peer with a link in that
/// round's overlay (at most one chunk per peer and round) is held, so a VN holds about r per round and rounds
/// run at most `MAX_FUTURE_ROUNDS` ahead; 64 covers r = 8 over several rounds with margin, and bounds what
/// early senders can make us hold (64 × the largest chunk) whatever the overlay's state.
pub const MAX_PENDING_CHUNKS: usize = 64;

/// Where an exchange's overlay negotiation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Negotiation {
    /// Not scheduled here (a round known only from early chunks, or one with nothing to negotiate).
    Unscheduled,
    /// This VN starts it at this time.
    Due(Duration),
    /// Started (with directed push: the targets are drawn).
    Started,
}

/// Where an exchange's own chunk is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Waiting for our chunk and the frozen neighbour set.
    Waiting,
    /// Both are there and the jitter is drawn: our chunk goes out at this time.
    SendAt(Duration),
    /// Sent; neighbours' chunks are awaited until this deadline.
    Collecting { deadline: Duration },
    /// Reported to the RN.
    Done,
}

/// What we send in an exchange.
#[derive(Debug)]
pub(crate) enum Own {
    /// Not handed over by the RN yet (or dropped once the exchange is done).
    Nothing,
    /// One frame for every neighbour (encoded once, shared).
    Broadcast(Arc<Vec<u8>>),
    /// One frame per edge slot (PDMM).
    PerEdge(Vec<Arc<Vec<u8>>>),
}

/// One round's exchange at a VN.
#[derive(Debug)]
pub(crate) struct Exchange<I> {
    pub(crate) negotiation: Negotiation,
    pub(crate) phase: Phase,
    pub(crate) own: Own,
    pub(crate) edges: EdgeSlots<I>,
    /// The frozen neighbours (`None` before the freeze), less edges refused or dropped since.
    pub(crate) neighbours: Option<BTreeSet<I>>,
    /// When our RN started this round (its `StartRound`, or its chunk if that came first): the send pace
    /// counts from here.
    pub(crate) rn_started: Option<Duration>,
    /// When our RN asked for this round's exchange (its chunk, or its request for the edge slots): a freeze
    /// after it is reported as the round's overlay wait (`RoundSummary::overlay_wait_us`).
    pub(crate) exchange_asked: Option<Duration>,
    /// When the last neighbour's chunk of this round was accepted (the automatic pace learns from it).
    pub(crate) last_copy_at: Option<Duration>,
    /// Neighbours our chunk was sent to whose reply is still outstanding.
    pub(crate) awaiting_reply: BTreeSet<I>,
    /// Neighbours whose chunk came (or was spent on values we refused).
    pub(crate) received_from: BTreeSet<I>,
    /// Neighbours that acknowledged our chunk as accepted: alive and in this round.
    pub(crate) accepted_by: BTreeSet<I>,
    /// The deadline was brought forward because the network left this exchange behind (catch-up): the
    /// neighbours missing then withheld nothing, they had moved on.
    pub(crate) cut_short: bool,
    /// Chunks that came before the freeze (counted in [`Exchanges`]).
    pending: Vec<(I, ChunkFrame, ReplyToken)>,
    pub(crate) summary: RoundSummary,
}

impl<I: Ord + Clone> Exchange<I> {
    fn new(round: Round) -> Self {
        Self {
            negotiation: Negotiation::Unscheduled,
            phase: Phase::Waiting,
            own: Own::Nothing,
            edges: EdgeSlots::default(),
            neighbours: None,
            rn_started: None,
            exchange_asked: None,
            last_copy_at: None,
            awaiting_reply: BTreeSet::new(),
            received_from: BTreeSet::new(),
            accepted_by: BTreeSet::new(),
            cut_short: false,
            pending: Vec::new(),
            summary: RoundSummary {
                round,
                ..RoundSummary::default()
            },
        }
    }

    pub(crate) fn done(&self) -> bool {
        self.phase == Phase::Done
    }

    pub(crate) fn frozen(&self) -> bool {
        self.neighbours.is_some()
    }

    /// The negotiation is started or scheduled here.
    pub(crate) fn negotiation_scheduled(&self) -> bool {
        self.negotiation != Negotiation::Unscheduled
    }

    /// The next time this exchange needs the driver: its deadline, its send time, or its negotiation's start.
    pub(crate) fn next_timer(&self) -> Option<Duration> {
        match (self.phase, self.negotiation) {
            (Phase::Done, _) => None,
            (Phase::Collecting { deadline }, _) => Some(deadline),
            (Phase::SendAt(at), _) => Some(at),
            (Phase::Waiting, Negotiation::Due(at)) => Some(at),
            (Phase::Waiting, _) => None,
        }
    }

    /// The frozen neighbours that took our chunk (acknowledged it as accepted) and sent none, delivered or
    /// held: withheld, as a stopped or dead peer, which acknowledges nothing, did not.
    pub(crate) fn silent_neighbours(&self) -> Vec<I> {
        self.neighbours
            .iter()
            .flatten()
            .filter(|p| self.accepted_by.contains(*p) && !self.heard_from(p))
            .cloned()
            .collect()
    }

    /// The frozen neighbours that sent no chunk and acknowledged none of ours: dead, or withholding everything
    /// (`suspects.rs` tells the two apart afterwards).
    pub(crate) fn mute_neighbours(&self) -> Vec<I> {
        self.neighbours
            .iter()
            .flatten()
            .filter(|p| !self.accepted_by.contains(*p) && !self.heard_from(p))
            .cloned()
            .collect()
    }

    /// Whether `peer` already sent its chunk, delivered or held.
    pub(crate) fn heard_from(&self, peer: &I) -> bool {
        self.received_from.contains(peer) || self.pending.iter().any(|(p, _, _)| p == peer)
    }

    /// Every frozen neighbour's chunk came.
    pub(crate) fn all_in(&self) -> bool {
        self.neighbours
            .as_ref()
            .is_some_and(|n| n.iter().all(|p| self.received_from.contains(p)))
    }

    /// After the freeze, `peer` stopped being a neighbour of this round: its end refused the edge
    /// (half-open: it never counted us) or dropped it. The exchange stops waiting for it, and the round's
    /// summary, if not yet reported, stops counting the edge, whose copies were never going to come either
    /// way. Counted, such an edge showed as a copy lost each way in the metrics (the default run: 0-4 of
    /// about 2,500 a run). A neighbour that went away stays counted: its copy was missed ([`Self::lose_edge`]).
    pub(crate) fn forget_edge(&mut self, peer: &I) {
        let removed = self.neighbours.as_mut().is_some_and(|n| n.remove(peer));
        if removed && !self.done() && !self.received_from.contains(peer) {
            self.summary.neighbours = self.summary.neighbours.saturating_sub(1);
        }
        self.awaiting_reply.remove(peer);
    }

    /// `peer` went away: the exchange stops waiting for it, and the edge stays counted, since it stood and
    /// its copy was missed. Called before the overlay and the static graph drop the edge, so that
    /// [`Self::forget_edge`] then finds nothing to count off.
    pub(crate) fn lose_edge(&mut self, peer: &I) {
        if let Some(n) = self.neighbours.as_mut() {
            n.remove(peer);
        }
        self.awaiting_reply.remove(peer);
    }
}

/// The exchanges a VN keeps, by round, and the chunks they hold.
#[derive(Debug)]
pub(crate) struct Exchanges<I> {
    rounds: BTreeMap<Round, Exchange<I>>,
    /// Chunks held over all rounds (at most [`MAX_PENDING_CHUNKS`]).
    held: usize,
    /// The rounds whose exchange is collecting (`Phase::Collecting`): the only ones that can end, looked at
    /// after every input, while a VN keeps a few dozen rounds.
    collecting: BTreeSet<Round>,
}

impl<I: Ord + Clone> Default for Exchanges<I> {
    fn default() -> Self {
        Self {
            rounds: BTreeMap::new(),
            held: 0,
            collecting: BTreeSet::new(),
        }
    }
}

impl<I: Ord + Clone> Exchanges<I> {
    pub(crate) fn get(&self, round: &Round) -> Option<&Exchange<I>> {
        self.rounds.get(round)
    }

    pub(crate) fn get_mut(&mut self, round: &Round) -> Option<&mut Exchange<I>> {
        self.rounds.get_mut(round)
    }

    /// The exchange of `round`, made if new.
    pub(crate) fn entry(&mut self, round: Round) -> &mut Exchange<I> {
        self.rounds
            .entry(round)
            .or_insert_with(|| Exchange::new(round))
    }

    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = (&Round, &Exchange<I>)> {
        self.rounds.iter()
    }

    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&Round, &mut Exchange<I>)> {
        self.rounds.iter_mut()
    }

    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut Exchange<I>> {
        self.rounds.values_mut()
    }

    /// Exchanges before `before`.
    pub(crate) fn before_mut(
        &mut self,
        before: Round,
    ) -> impl Iterator<Item = (&Round, &mut Exchange<I>)> {
        self.rounds.range_mut(..before)
    }

    /// Rounds whose exchange satisfies `pick`, in order.
    pub(crate) fn rounds_where(&self, pick: impl Fn(&Round, &Exchange<I>) -> bool) -> Vec<Round> {
        self.rounds
            .iter()
            .filter(|(u, x)| pick(u, x))
            .map(|(u, _)| *u)
            .collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.rounds.len()
    }

    /// `round`'s own chunk went out: its exchange collects its neighbours' chunks until `deadline`.
    pub(crate) fn start_collecting(&mut self, round: Round, deadline: Duration) {
        if let Some(x) = self.rounds.get_mut(&round) {
            x.phase = Phase::Collecting { deadline };
            self.collecting.insert(round);
        }
    }

    /// `round`'s exchange is over (reported to the RN).
    pub(crate) fn end_collecting(&mut self, round: Round) {
        if let Some(x) = self.rounds.get_mut(&round) {
            x.phase = Phase::Done;
        }
        self.collecting.remove(&round);
    }

    /// The rounds whose exchange is collecting, in order.
    pub(crate) fn collecting(&self) -> Vec<Round> {
        self.collecting.iter().copied().collect()
    }

    /// Chunks held for rounds not frozen yet.
    pub(crate) fn held(&self) -> usize {
        self.held
    }

    /// Holds an early chunk of `round` until its overlay freezes; `false` (and nothing held) when
    /// [`MAX_PENDING_CHUNKS`] are held already.
    pub(crate) fn hold(
        &mut self,
        round: Round,
        from: I,
        frame: ChunkFrame,
        token: ReplyToken,
    ) -> bool {
        if self.held >= MAX_PENDING_CHUNKS {
            return false;
        }
        self.held += 1;
        self.entry(round).pending.push((from, frame, token));
        true
    }

    /// The chunks held for `round`, now to be decided.
    pub(crate) fn take_held(&mut self, round: Round) -> Vec<(I, ChunkFrame, ReplyToken)> {
        let Some(x) = self.rounds.get_mut(&round) else {
            return Vec::new();
        };
        let held = std::mem::take(&mut x.pending);
        self.held -= held.len();
        held
    }

    /// Forgets the exchanges before `keep_from`; returns the senders and reply tokens of the chunks they held,
    /// to be refused.
    pub(crate) fn forget_before(&mut self, keep_from: Round) -> Vec<(I, ReplyToken)> {
        let old: Vec<Round> = self.rounds.range(..keep_from).map(|(r, _)| *r).collect();
        let mut refused = Vec::new();
        for round in old {
            self.collecting.remove(&round);
            if let Some(x) = self.rounds.remove(&round) {
                self.held -= x.pending.len();
                refused.extend(x.pending.into_iter().map(|(from, _, token)| (from, token)));
            }
        }
        refused
    }

    /// The held count matches the chunks held and stays within [`MAX_PENDING_CHUNKS`]; only unfrozen rounds
    /// hold chunks; every kept round lies in `lo ..= hi`.
    pub(crate) fn check_invariants(&self, lo: Round, hi: Round) -> Result<(), String> {
        let held: usize = self.rounds.values().map(|x| x.pending.len()).sum();
        if held != self.held || held > MAX_PENDING_CHUNKS {
            return Err(format!(
                "{held} chunks held, counted {}, limit {MAX_PENDING_CHUNKS}",
                self.held
            ));
        }
        if let Some((round, _)) = self
            .rounds
            .iter()
            .find(|(_, x)| x.frozen() && !x.pending.is_empty())
        {
            return Err(format!("round {round} is frozen but still holds chunks"));
        }
        let collecting: BTreeSet<Round> = self
            .rounds
            .iter()
            .filter(|(_, x)| matches!(x.phase, Phase::Collecting { .. }))
            .map(|(r, _)| *r)
            .collect();
        if collecting != self.collecting {
            return Err(format!(
                "collecting {collecting:?}, listed as collecting {:?}",
                self.collecting
            ));
        }
        if let Some(round) = self.rounds.keys().find(|&&r| r < lo || r > hi) {
            return Err(format!(
                "round {round} kept outside the window {lo} ..= {hi} ({} rounds kept)",
                self.rounds.len()
            ));
        }
        Ok(())
    }
}

/// Whole microseconds of `d`, saturating (a `u64` of microseconds holds 584,000 years).
pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An edge its other end dropped or refused after our freeze is forgotten: the exchange stops waiting for
    /// it and the summary stops counting it, unless its copy came (the edge was real) or the summary was
    /// already reported.
    #[test]
    fn an_edge_dropped_after_the_freeze_is_not_counted_as_a_neighbour() {
        let mut r: Exchange<u32> = Exchange {
            neighbours: Some([5, 7, 9].into_iter().collect()),
            awaiting_reply: [5, 7, 9].into_iter().collect(),
            received_from: [7].into_iter().collect(),
            ..Exchange::new(Round(0))
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
        r.phase = Phase::Done;
        r.forget_edge(&5);
        assert_eq!(r.summary.neighbours, 2);
        assert!(r.awaiting_reply.is_empty());
    }
}
