//! The real-node (RN) role, sans-IO: the round loop of Shatter (paper §3, DESIGN §1).
//!
//! Round t: start the overlay of t at every VN and train (the driver trains, on a blocking thread) →
//! cut the trained parameters into k chunks and hand chunk s to VN s → collect every copy the VNs receive →
//! when every VN reported the round done, average per parameter → evaluate (the driver) → round t + 1.
//! Copies of round t + 1 that come while round t is still evaluated (a faster neighbour) are kept for it.
//! With k = 1 this is Epidemic Learning: one VN carries the whole model; same code path.
//!
//! The RN never learns who sent a copy: a VN hands over frames (round, chunk index, values) only.

use std::time::Duration;

use protocol::rnvn::{FromVirtualNode, ToVirtualNode};
use protocol::{ChunkFrame, Round};

use super::copy_check::{CopyCheck, CopyLimits};
use super::metrics::RoundMetrics;
use crate::algo::{Algorithm, Graph, Payload};

/// What the driver feeds an [`RnEngine`].
#[derive(Debug)]
pub enum RnInput {
    /// Begin round 0.
    Start,
    /// Local training of `round` finished with these parameters. A `train_loss` that is not finite says the
    /// training diverged and `params` are the model from before it (what [`crate::learner::Learner::train`]
    /// returns then): the round goes on with them and the metrics say `train_diverged`. A sentinel in the
    /// loss rather than a field of its own, so that every driver (they build this input from the learner's
    /// result) carries it unchanged.
    Trained {
        round: Round,
        params: Vec<f32>,
        train_loss: f64,
        secs: f64,
    },
    /// A message from VN `vn`.
    FromVn { vn: usize, msg: FromVirtualNode },
    /// VN `vn` is gone (its task ended or panicked): this round and every later one proceed without it, as if
    /// it reported each done with nothing received.
    VnLost { vn: usize },
    /// The aggregated model of `round` was evaluated.
    Evaluated {
        round: Round,
        metric_name: models::train::MetricKind,
        metric: f64,
        loss: f64,
        secs: f64,
    },
}

/// What an [`RnEngine`] asks its driver to do.
#[derive(Debug)]
pub enum RnOutput {
    /// Tell every VN that exchange `exchange` (step `exchange mod steps` of round `exchange / steps`) starts:
    /// it negotiates that exchange's overlay, and those after it up to its lookahead.
    StartRound {
        exchange: Round,
    },
    /// Run local training for `round` on the current model (the driver's), then report `Trained`.
    Train {
        round: Round,
    },
    ToVn {
        vn: usize,
        msg: ToVirtualNode,
    },
    /// Load `params` (the aggregated model) into the model, evaluate it, report `Evaluated`.
    Evaluate {
        round: Round,
        params: Vec<f32>,
    },
    RoundDone(RoundMetrics),
    /// This node sits out `round` (dropout): no training, sharing or aggregation. After `wait` (about a
    /// round's length, so that the node rejoins with the network's next round) evaluate the current,
    /// unchanged model and report `Evaluated`.
    Idle {
        round: Round,
        wait: Duration,
    },
    /// All rounds are done (emitted after a `ToVn { Stop }` for every VN).
    Finished,
    /// The algorithm could not go on (a bug or a mismatch between its configuration and the engine's): the
    /// driver stops the node with this error.
    Failed(String),
}

#[derive(Debug, PartialEq, Eq)]
enum Phase {
    Idle,
    /// Sitting out the round (dropout).
    Absent,
    Training,
    Exchanging,
    Evaluating,
    Finished,
}

/// One real node's round loop.
pub struct RnEngine {
    algo: Box<dyn Algorithm>,
    /// The algorithm keeps per-edge state ([`Algorithm::per_edge`]), asked once.
    per_edge: bool,
    rounds: u64,
    /// Exchange steps per round (`algo.steps()`), and the step in progress.
    steps: u32,
    step: u32,
    round: Round,
    phase: Phase,
    params: Vec<f32>,
    vn_done: Vec<bool>,
    /// VNs that are gone; they count as done in every round.
    vn_lost: Vec<bool>,
    /// VNs asked for their edge slots this step (a per-neighbour payload) whose frames are not sent yet.
    awaiting_edges: Vec<bool>,
    metrics: RoundMetrics,
    /// Rounds this node takes part in (empty: all); see [`RnEngine::with_participation`].
    participates: Vec<bool>,
    /// How long a sat-out round lasts before any round was timed, then the last round's length.
    idle: Duration,
    round_start: Duration,
    exchange_start: Duration,
    /// The longest overlay wait reported so far by this exchange's VNs, in microseconds.
    exchange_overlay_wait: u64,
    /// The round `Start` begins (0, or the round after a checkpoint's: [`RnEngine::starting_at`]).
    first: Round,
    /// The round the network is at, as this node's VNs found (catch-up): the next round begins there
    /// instead of at the one after ours, if it is later.
    catch_up: Option<Round>,
    /// Copies of a later exchange than this node's (handed over while it evaluated the round before, before
    /// its first round, or during an earlier step), kept until that exchange begins: see
    /// [`RnEngine::keep_early`].
    early: Vec<(usize, FromVirtualNode)>,
    /// What a VN's copies must be ([`RnEngine::with_copy_limits`]); `None`: taken as the aggregator takes them.
    copies: Option<CopyCheck>,
    /// Copies a VN handed over that the RN refused (`engine/copy_check.rs`, for hosted VNs) or the aggregator
    /// did: 0 unless a VN host hands over what a VN would refuse (issue 44) or the VN and RN disagree on the
    /// partition.
    pub rejected_copies: u64,
}

impl RnEngine {
    /// An RN running `rounds` rounds of `algo` (k = `algo.virtual_nodes()` VNs, `algo.steps()` exchanges per
    /// round). Refuses an algorithm without VNs or steps.
    pub fn new(mut algo: Box<dyn Algorithm>, rounds: u64) -> crate::Result<Self> {
        let per_edge = algo.per_edge().is_some();
        let k = algo.virtual_nodes();
        let steps = algo.steps();
        if steps == 0 || k == 0 {
            return Err(crate::NodeError::Config(format!(
                "{} needs {steps} exchange step(s) per round with {k} VNs; the engine runs at least one step \
                 with at least one VN",
                algo.name(),
            )));
        }
        Ok(Self {
            algo,
            per_edge,
            rounds,
            steps,
            step: 0,
            round: Round::ZERO,
            phase: Phase::Idle,
            params: Vec::new(),
            vn_done: vec![false; k],
            vn_lost: vec![false; k],
            early: Vec::new(),
            awaiting_edges: vec![false; k],
            metrics: RoundMetrics::default(),
            participates: Vec::new(),
            idle: Duration::ZERO,
            round_start: Duration::ZERO,
            exchange_start: Duration::ZERO,
            exchange_overlay_wait: 0,
            first: Round::ZERO,
            catch_up: None,
            copies: None,
            rejected_copies: 0,
        })
    }

    /// Holds every copy a VN hands over to what a VN holds a frame off the wire to, and to at most
    /// `limits.per_exchange` per VN and exchange (`engine/copy_check.rs`): a VN host's copies are otherwise
    /// unchecked.
    pub fn with_copy_limits(mut self, limits: CopyLimits) -> Self {
        self.copies = Some(CopyCheck::new(self.vn_done.len(), limits));
        self
    }

    /// Takes part only in the rounds `schedule` marks (dropout, `engine::dropout::participation`); a round
    /// sat out lasts as long as the last round did (`first_idle` before any).
    pub fn with_participation(mut self, schedule: Vec<bool>, first_idle: Duration) -> Self {
        self.participates = schedule;
        self.idle = first_idle;
        self
    }

    /// Begins at `round` instead of 0: a run resumed from the checkpoint of round `round − 1`. The rounds
    /// before it count as sat out for the VNs (no overlay is negotiated for them; with a static graph the node
    /// runs without edges, as one that sat out exchange 0) and the first round's metrics say `resumed`.
    pub fn starting_at(mut self, round: Round) -> Self {
        self.first = round;
        self
    }

    /// The round the engine begins at (see [`RnEngine::starting_at`]).
    pub fn first_round(&self) -> Round {
        self.first
    }

    fn takes_part(&self, round: Round) -> bool {
        if round < self.first {
            return false;
        }
        self.participates
            .get(round.get() as usize)
            .copied()
            .unwrap_or(true)
    }

    /// The exchanges of the rounds this node sits out: its VNs stay out of their overlays.
    pub fn skipped_exchanges(&self) -> std::collections::BTreeSet<Round> {
        (0..self.rounds)
            .map(Round)
            .filter(|&t| !self.takes_part(t))
            .flat_map(|t| (0..self.steps).map(move |s| (t, s)))
            .map(|(t, s)| self.exchange(t, s))
            .collect()
    }

    /// Length of each chunk index the algorithm sends (the VNs refuse frames of another length).
    pub fn chunk_lens(&self) -> Vec<usize> {
        self.algo.chunk_lens()
    }

    pub fn round(&self) -> Round {
        self.round
    }

    /// Exchanges the VNs run in the whole run: one per step of every round. The VNs number them
    /// `round · steps + step` ([`RnEngine::exchange`]); with one step an exchange is a round.
    pub fn exchanges(&self) -> u64 {
        self.rounds * self.steps as u64
    }

    /// The graph the algorithm exchanges over (the VNs negotiate a static one once).
    pub fn graph(&self) -> Graph {
        self.algo.graph()
    }

    /// Whether the algorithm keeps per-edge state: its VNs must hand copies over with their edge slot
    /// (`VnConfig::edge_slots`).
    pub fn per_edge(&self) -> bool {
        self.per_edge
    }

    /// The exchange number of `step` of `round`, as the VNs and the frames on the wire carry it.
    pub fn exchange(&self, round: Round, step: u32) -> Round {
        Round(round.get() * self.steps as u64 + step as u64)
    }

    pub fn is_finished(&self) -> bool {
        self.phase == Phase::Finished
    }

    pub fn handle(&mut self, now: Duration, input: RnInput) -> Vec<RnOutput> {
        let mut out = Vec::new();
        match input {
            RnInput::Start if self.phase == Phase::Idle && self.first.get() >= self.rounds => {
                // Resumed from the checkpoint of the last round: nothing is left to do.
                self.finish(&mut out);
            }
            RnInput::Start if self.phase == Phase::Idle => {
                let (round, skipped) = self.next_round(self.first);
                self.begin_round(now, round, &mut out);
                self.metrics.skipped_rounds = skipped;
                self.metrics.resumed = self.first > Round::ZERO;
            }
            RnInput::FromVn {
                msg: FromVirtualNode::Behind { exchange },
                ..
            } => {
                // Acted on at the next round boundary: the round in progress (training cannot be cut short)
                // ends first, bounded by the exchange deadline.
                let round = Round(exchange.get() / self.steps as u64);
                if self.catch_up.is_none_or(|r| r < round) {
                    tracing::info!(%round, ours = %self.round, "the network is ahead: catching up at the next round");
                    self.catch_up = Some(round);
                }
            }
            RnInput::Trained {
                round,
                params,
                train_loss,
                secs,
            } if self.phase == Phase::Training && round == self.round => {
                if train_loss.is_finite() {
                    self.metrics.train_loss = train_loss;
                } else {
                    // No step of this round was kept; the learner warned (rate-limited) with the cause.
                    self.metrics.train_diverged = true;
                    self.metrics.train_loss = 0.0;
                }
                self.metrics.train_secs = secs;
                self.exchange_start = now;
                self.phase = Phase::Exchanging;
                self.params = params;
                self.start_step(&mut out);
                // Every VN may already be done: all of them lost.
                self.finish_exchange(now, &mut out);
            }
            RnInput::FromVn { vn, msg } => self.on_vn_message(now, vn, msg, &mut out),
            RnInput::VnLost { vn } if vn < self.vn_lost.len() => {
                self.vn_lost[vn] = true;
                self.vn_done[vn] = true;
                self.finish_exchange(now, &mut out);
            }
            RnInput::Evaluated {
                round,
                metric_name,
                metric,
                loss,
                secs,
            } if matches!(self.phase, Phase::Evaluating | Phase::Absent) && round == self.round => {
                if self.phase == Phase::Evaluating {
                    self.idle = now - self.round_start;
                }
                self.metrics.metric_name = metric_name;
                self.metrics.test_metric = metric;
                self.metrics.test_loss = loss;
                self.metrics.eval_secs = secs;
                self.end_round(now, &mut out);
            }
            other => tracing::debug!(?other, "input ignored in this phase"),
        }
        out
    }

    /// Reports the round and starts the next one, or finishes.
    fn end_round(&mut self, now: Duration, out: &mut Vec<RnOutput>) {
        self.metrics.round_secs = (now - self.round_start).as_secs_f64();
        out.push(RnOutput::RoundDone(std::mem::take(&mut self.metrics)));
        if self.round.get() + 1 < self.rounds {
            let (round, skipped) = self.next_round(self.round + 1);
            self.begin_round(now, round, out);
            self.metrics.skipped_rounds = skipped;
        } else {
            self.finish(out);
        }
    }

    fn finish(&mut self, out: &mut Vec<RnOutput>) {
        self.phase = Phase::Finished;
        for vn in 0..self.vn_done.len() {
            out.push(RnOutput::ToVn {
                vn,
                msg: ToVirtualNode::Stop,
            });
        }
        out.push(RnOutput::Finished);
    }

    /// The round to begin instead of `next`, and how many rounds that skips: the network's round when this
    /// node's VNs found it ahead (capped at the last round), else `next`.
    fn next_round(&mut self, next: Round) -> (Round, u64) {
        match self.catch_up.take() {
            Some(net) if net > next => {
                let to = net.min(Round(self.rounds - 1));
                (to, to.get() - next.get())
            }
            _ => (next, 0),
        }
    }

    fn begin_round(&mut self, now: Duration, round: Round, out: &mut Vec<RnOutput>) {
        self.round = round;
        self.round_start = now;
        self.phase = Phase::Training;
        self.step = 0;
        self.algo.begin_round(round);
        self.vn_done.clone_from(&self.vn_lost);
        self.metrics = RoundMetrics {
            round,
            ..RoundMetrics::default()
        };
        self.exchange_overlay_wait = 0;
        // Sent in a round sat out too: the VNs stay out of this round's exchange (their `skip`) but keep
        // negotiating the overlays of the rounds after it on the network's cadence. Without it a node back
        // from an absence started negotiating its first rounds only on its return, after the others had
        // frozen them, and found almost no partners (EL at 50% dropout: 2.5 of 4 neighbours).
        out.push(RnOutput::StartRound {
            exchange: self.exchange(round, 0),
        });
        if !self.takes_part(round) {
            self.phase = Phase::Absent;
            self.metrics.absent = true;
            out.push(RnOutput::Idle {
                round,
                wait: self.idle,
            });
        } else {
            out.push(RnOutput::Train { round });
        }
        self.take_early(now, out);
    }

    /// Hands each VN its frame for the current step (the wire's round field is the step's exchange number),
    /// or, for a per-neighbour payload, asks it for its edge slots (the frames follow in
    /// [`RnEngine::send_per_edge`]).
    fn start_step(&mut self, out: &mut Vec<RnOutput>) {
        let (round, step) = (self.round, self.step);
        let exchange = self.exchange(round, step);
        self.awaiting_edges.fill(false);
        let payloads = match self.algo.outgoing(round, step, &self.params) {
            Ok(payloads) => payloads,
            Err(e) => {
                let name = self.algo.name();
                out.push(RnOutput::Failed(format!(
                    "{name}: no payload for round {round} step {step}: {e}"
                )));
                return;
            }
        };
        for (vn, payload) in payloads {
            let msg = match payload {
                Payload::Broadcast(frame) => {
                    let frame = ChunkFrame {
                        round: exchange,
                        ..frame
                    };
                    if let Some(c) = &mut self.copies {
                        c.own(vn, std::slice::from_ref(&frame));
                    }
                    ToVirtualNode::Exchange(frame)
                }
                Payload::PerNeighbour => {
                    if let Some(a) = self.awaiting_edges.get_mut(vn) {
                        *a = true;
                    }
                    ToVirtualNode::PerEdge(exchange)
                }
            };
            out.push(RnOutput::ToVn { vn, msg });
        }
    }

    /// VN `vn` reported `slots` edge slots for the current per-neighbour step: the algorithm's frame per slot.
    fn send_per_edge(&mut self, vn: usize, slots: u32, out: &mut Vec<RnOutput>) {
        let (round, step) = (self.round, self.step);
        let exchange = self.exchange(round, step);
        let name = self.algo.name().to_string();
        if slots as usize > protocol::rnvn::MAX_EDGE_SLOTS {
            out.push(RnOutput::Failed(format!(
                "VN {vn} reported {slots} edge slots, above {}",
                protocol::rnvn::MAX_EDGE_SLOTS
            )));
            return;
        }
        let frames = match self.algo.per_edge() {
            Some(edges) => edges.frames(round, step, vn, slots as usize),
            None => Err(crate::algo::AlgoError::Other(format!(
                "{name} keeps no per-edge state and sends no per-neighbour payloads"
            ))),
        };
        match frames {
            Ok(frames) if frames.len() == slots as usize => {
                let frames: Vec<ChunkFrame> = frames
                    .into_iter()
                    .map(|f| ChunkFrame {
                        round: exchange,
                        ..f
                    })
                    .collect();
                if let Some(c) = &mut self.copies {
                    c.own(vn, &frames);
                }
                out.push(RnOutput::ToVn {
                    vn,
                    msg: ToVirtualNode::PerEdgeFrames {
                        round: exchange,
                        frames,
                    },
                });
            }
            Ok(frames) => out.push(RnOutput::Failed(format!(
                "{name}: {} frames for {slots} edge slots in round {round} step {step}",
                frames.len()
            ))),
            Err(e) => out.push(RnOutput::Failed(format!(
                "{name}: no per-neighbour frames for round {round} step {step}: {e}"
            ))),
        }
    }

    fn on_vn_message(
        &mut self,
        now: Duration,
        vn: usize,
        msg: FromVirtualNode,
        out: &mut Vec<RnOutput>,
    ) {
        // Copies can arrive while we still train: a neighbour whose training finished first sends as soon as
        // its overlay is frozen, and our VN hands the copy over at once.
        if vn >= self.vn_done.len() {
            return;
        }
        let Some(msg) = self.keep_early(vn, msg) else {
            return;
        };
        if !matches!(self.phase, Phase::Training | Phase::Exchanging) {
            return;
        }
        let exchange = self.exchange(self.round, self.step);
        if let (
            Some(c),
            FromVirtualNode::Received(frame) | FromVirtualNode::ReceivedOnEdge { frame, .. },
        ) = (&mut self.copies, &msg)
            && frame.round == exchange
            && let Err(why) = c.take(vn, frame)
        {
            self.rejected_copies += 1;
            tracing::warn!(vn, %why, "copy refused: not what a VN may hand over");
            return;
        }
        match msg {
            FromVirtualNode::Received(frame) if frame.round == exchange => {
                if let Err(e) = self.algo.receive(self.step, vn, &frame) {
                    self.rejected_copies += 1;
                    tracing::warn!(vn, error = %e, "copy refused by the aggregator");
                    return;
                }
                self.metrics.copies_received += 1;
            }
            FromVirtualNode::ReceivedOnEdge { slot, frame } if frame.round == exchange => {
                // An algorithm without per-edge state takes the copy as any other.
                let step = self.step;
                let taken = match self.algo.per_edge() {
                    Some(edges) => edges.receive_on_edge(step, vn, slot, &frame),
                    None => self.algo.receive(step, vn, &frame),
                };
                if let Err(e) = taken {
                    self.rejected_copies += 1;
                    tracing::warn!(vn, slot, error = %e, "copy refused by the aggregator");
                    return;
                }
                self.metrics.copies_received += 1;
            }
            FromVirtualNode::Received(_) | FromVirtualNode::ReceivedOnEdge { .. } => {}
            FromVirtualNode::Edges { round, slots }
                if round == exchange
                    && self.phase == Phase::Exchanging
                    && self.awaiting_edges[vn] =>
            {
                self.awaiting_edges[vn] = false;
                self.send_per_edge(vn, slots, out);
            }
            FromVirtualNode::Edges { .. } => {}
            FromVirtualNode::DeliveredOnEdges { round, accepted } if round == exchange => {
                let step = self.step;
                if let Some(edges) = self.algo.per_edge() {
                    edges.delivered_on_edges(step, vn, &accepted);
                }
            }
            FromVirtualNode::DeliveredOnEdges { .. } => {}
            // Any exchange the algorithm may still hold unacknowledged (PDMM keeps the last few).
            FromVirtualNode::LateDeliveredOnEdge { round, slot } => {
                if let Some(edges) = self.algo.per_edge() {
                    edges.late_delivered_on_edge(round, vn, slot);
                }
            }
            FromVirtualNode::Done(s) if s.round == exchange && !self.vn_done[vn] => {
                self.vn_done[vn] = true;
                let m = &mut self.metrics;
                m.bytes_sent += s.bytes_sent;
                m.chunk_bytes_sent += s.chunk_bytes_sent;
                m.bytes_received += s.bytes_received;
                m.messages_sent += s.messages_sent;
                m.messages_received += s.messages_received;
                m.neighbours += s.neighbours;
                m.copies_delivered += s.delivered;
                m.refused += s.refused;
                m.refused_by_reason.add(&s.refused_by_reason);
                // The exchange waits for its slowest VN: the longest wait of this exchange's VNs.
                self.exchange_overlay_wait = self.exchange_overlay_wait.max(s.overlay_wait_us);
                self.algo.delivered(self.step, vn, s.delivered);
                self.finish_exchange(now, out);
            }
            FromVirtualNode::Done(_) => {}
            // Taken by `handle` in every phase.
            FromVirtualNode::Behind { .. } => {}
        }
    }

    /// Keeps a copy for a later exchange than this node's (`None`: kept or dropped; `Some`: not such a copy).
    /// A neighbour that finished an exchange before us (its evaluation or its warm-up ended sooner) trains
    /// and sends its next chunk as soon as the next overlay is frozen, which the overlays negotiated ahead
    /// make the common case, and our VN accepts the copy and hands it over at once. Ignored, it was counted
    /// by the VN and lost to the average: 1-3 of a node's 4 copies of the last round, in half the runs of
    /// `node/tests/both_drivers.rs`. Bounded: a VN accepts at most one copy per neighbour of an exchange, and
    /// this keeps at most `MAX_DEGREE` per VN; [`RnEngine::take_early`] hands them on when their exchange
    /// begins.
    fn keep_early(&mut self, vn: usize, msg: FromVirtualNode) -> Option<FromVirtualNode> {
        let round = match &msg {
            FromVirtualNode::Received(f) | FromVirtualNode::ReceivedOnEdge { frame: f, .. } => {
                f.round
            }
            _ => return Some(msg),
        };
        let later = match self.phase {
            Phase::Idle => true,
            Phase::Training | Phase::Exchanging | Phase::Evaluating | Phase::Absent => {
                round > self.exchange(self.round, self.step)
            }
            Phase::Finished => false,
        };
        if !later {
            return Some(msg);
        }
        if self.early.len() < self.vn_done.len() * sampling::overlay::MAX_DEGREE {
            self.early.push((vn, msg));
        }
        None
    }

    /// Hands on the copies kept for the exchange this node has just begun; those of later ones stay, those of
    /// earlier ones (a round skipped to catch up) are dropped.
    fn take_early(&mut self, now: Duration, out: &mut Vec<RnOutput>) {
        for (vn, msg) in std::mem::take(&mut self.early) {
            self.on_vn_message(now, vn, msg, out);
        }
    }

    /// Once trained and every VN is done with the step: combine, then start the next step or ask for the
    /// evaluation.
    fn finish_exchange(&mut self, now: Duration, out: &mut Vec<RnOutput>) {
        if self.phase != Phase::Exchanging || !self.vn_done.iter().all(|d| *d) {
            return;
        }
        // Summed over the round's exchanges, as the exchange time is.
        self.metrics.overlay_wait_secs +=
            std::mem::take(&mut self.exchange_overlay_wait) as f64 / 1e6;
        let params = match self.algo.combine(self.round, self.step, &self.params) {
            Ok(params) => params,
            Err(e) => {
                out.push(RnOutput::Failed(format!(
                    "{}: combining round {} step {}: {e}",
                    self.algo.name(),
                    self.round,
                    self.step
                )));
                return;
            }
        };
        if self.step + 1 < self.steps {
            self.step += 1;
            self.params = params;
            self.vn_done.clone_from(&self.vn_lost);
            out.push(RnOutput::StartRound {
                exchange: self.exchange(self.round, self.step),
            });
            self.start_step(out);
            self.take_early(now, out);
            // Every VN may already be done: all of them lost.
            self.finish_exchange(now, out);
            return;
        }
        self.metrics.exchange_secs = (now - self.exchange_start).as_secs_f64();
        self.phase = Phase::Evaluating;
        out.push(RnOutput::Evaluate {
            round: self.round,
            params,
        });
    }

    /// Lets the driver record how long the aggregation (the `handle` call that produced `Evaluate`) took.
    pub fn set_aggregate_secs(&mut self, secs: f64) {
        self.metrics.aggregate_secs = secs;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use protocol::rnvn::RoundSummary;

    use super::*;

    fn engine(k: usize) -> RnEngine {
        let partition = models::chunking::ChunkPartition::new(&[6, 4], k, 1).unwrap();
        RnEngine::new(crate::algo::shatter_or_el(Arc::new(partition)), 3).unwrap()
    }

    fn trained(round: Round) -> RnInput {
        RnInput::Trained {
            round,
            params: vec![1.0; 10],
            train_loss: 0.0,
            secs: 0.0,
        }
    }

    fn done(vn: usize, round: Round) -> RnInput {
        RnInput::FromVn {
            vn,
            msg: FromVirtualNode::Done(RoundSummary {
                round,
                ..RoundSummary::default()
            }),
        }
    }

    /// The metrics of the round that `out` ends.
    fn round_done(out: &[RnOutput]) -> &RoundMetrics {
        out.iter()
            .find_map(|o| match o {
                RnOutput::RoundDone(m) => Some(m),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no round ended: {out:?}"))
    }

    fn evaluates(out: &[RnOutput]) -> bool {
        out.iter().any(|o| matches!(o, RnOutput::Evaluate { .. }))
    }

    #[test]
    fn a_lost_vn_counts_as_done_in_this_round_and_every_later_one() {
        let t = Duration::ZERO;
        let mut e = engine(3);
        e.handle(t, RnInput::Start);
        // Lost while the RN trains: the round waits for the two others, not for it.
        assert!(!evaluates(&e.handle(t, RnInput::VnLost { vn: 1 })));
        assert!(!evaluates(&e.handle(t, trained(Round(0)))));
        assert!(!evaluates(&e.handle(t, done(0, Round(0)))));
        assert!(evaluates(&e.handle(t, done(2, Round(0)))));
        let out = e.handle(t, evaluated(Round(0)));
        assert!(out.iter().any(|o| matches!(o, RnOutput::Train { .. })));
        // Round 1: still not waited for.
        e.handle(t, trained(Round(1)));
        e.handle(t, done(0, Round(1)));
        assert!(evaluates(&e.handle(t, done(2, Round(1)))));
    }

    /// A round's overlay wait is its slowest VN's: the exchange ends only when every VN is done.
    #[test]
    fn the_round_reports_the_longest_overlay_wait_of_its_vns() {
        let t = Duration::ZERO;
        let mut e = engine(3);
        e.handle(t, RnInput::Start);
        e.handle(t, trained(Round(0)));
        for (vn, wait_us) in [(0, 3_000), (1, 8_000), (2, 0)] {
            e.handle(
                t,
                RnInput::FromVn {
                    vn,
                    msg: FromVirtualNode::Done(RoundSummary {
                        round: Round(0),
                        overlay_wait_us: wait_us,
                        ..RoundSummary::default()
                    }),
                },
            );
        }
        let out = e.handle(t, evaluated(Round(0)));
        assert_eq!(round_done(&out).overlay_wait_secs, 0.008);
        // The next round starts from nothing.
        e.handle(t, trained(Round(1)));
        for vn in 0..3 {
            e.handle(t, done(vn, Round(1)));
        }
        let out = e.handle(t, evaluated(Round(1)));
        assert_eq!(round_done(&out).overlay_wait_secs, 0.0);
    }

    #[test]
    fn a_round_sat_out_idles_then_reports_the_unchanged_model() {
        let t = Duration::ZERO;
        let wait = Duration::from_secs(3);
        let mut e = engine(1).with_participation(vec![true, false, true], wait);
        assert_eq!(
            e.skipped_exchanges(),
            std::collections::BTreeSet::from([Round(1)])
        );
        e.handle(t, RnInput::Start);
        e.handle(t, trained(Round(0)));
        e.handle(t, done(0, Round(0)));
        let later = Duration::from_secs(5);
        let out = e.handle(later, evaluated(Round(0)));
        // Round 1 is sat out: no training, an idle as long as round 0 was; the VNs are told the round started
        // (they stay out of its exchange, and keep negotiating the rounds after it in step).
        assert!(
            matches!(
                &out[1..],
                [RnOutput::StartRound { exchange: Round(1) }, RnOutput::Idle { round: Round(1), wait }]
                    if *wait == later
            ),
            "{out:?}"
        );
        // After the wait the driver evaluates the unchanged model.
        let out = e.handle(later + later, evaluated(Round(1)));
        let RnOutput::RoundDone(m) = &out[0] else {
            panic!("{out:?}")
        };
        assert!(
            m.absent && m.test_metric == 0.5 && m.chunk_bytes_sent == 0,
            "{m:?}"
        );
        assert_eq!(m.round_secs, 5.0, "idled as long as round 0 took");
        assert!(
            matches!(
                &out[1..],
                [
                    RnOutput::StartRound { exchange: Round(2) },
                    RnOutput::Train { round: Round(2) }
                ]
            ),
            "{out:?}"
        );
    }

    fn evaluated(round: Round) -> RnInput {
        RnInput::Evaluated {
            round,
            metric_name: models::train::MetricKind::Accuracy,
            metric: 0.5,
            loss: 1.0,
            secs: 0.0,
        }
    }

    /// A copy of chunk `vn`'s values from a neighbour of VN `vn`, for `round`.
    fn copy(partition: &models::chunking::ChunkPartition, vn: usize, round: Round) -> RnInput {
        RnInput::FromVn {
            vn,
            msg: FromVirtualNode::Received(ChunkFrame {
                round,
                chunk: protocol::ChunkIndex(vn as u32),
                values: vec![2.0; partition.chunk_len(vn)],
            }),
        }
    }

    /// Issue 44, item 4: a VN host hands its node more copies than its VN can have neighbours, and copies the
    /// wire refuses (a value 10⁵ times the model's, a NaN). The RN takes the degree's worth of honest ones
    /// and refuses the rest; the average is that of honest copies. Before, every copy went into the average
    /// (7 copies taken, the NaN alone refused, the average pulled towards 10⁵): run without `with_copy_limits`.
    #[test]
    fn a_vn_host_cannot_inject_extra_or_out_of_range_copies() {
        let t = Duration::ZERO;
        let partition = Arc::new(models::chunking::ChunkPartition::new(&[6, 4], 2, 1).unwrap());
        let mut e = RnEngine::new(crate::algo::shatter_or_el(partition.clone()), 3)
            .unwrap()
            .with_copy_limits(CopyLimits {
                chunk_lens: Arc::new(vec![partition.chunk_len(0), partition.chunk_len(1)]),
                values: crate::engine::ValueBounds::default(),
                per_exchange: 2,
            });
        e.handle(t, RnInput::Start);
        e.handle(t, trained(Round(0)));
        let hosted = |values: Vec<f32>| RnInput::FromVn {
            vn: 0,
            msg: FromVirtualNode::Received(ChunkFrame {
                round: Round(0),
                chunk: protocol::ChunkIndex(0),
                values,
            }),
        };
        let len = partition.chunk_len(0);
        e.handle(t, hosted(vec![1e5; len]));
        let mut nan = vec![2.0; len];
        nan[0] = f32::NAN;
        e.handle(t, hosted(nan));
        for _ in 0..6 {
            e.handle(t, hosted(vec![2.0; len]));
        }
        e.handle(t, done(0, Round(0)));
        let out = e.handle(t, done(1, Round(0)));
        let params = out
            .iter()
            .find_map(|o| match o {
                RnOutput::Evaluate { params, .. } => Some(params.clone()),
                _ => None,
            })
            .expect("evaluates");
        assert!(
            params.iter().all(|v| v.is_finite() && v.abs() <= 2.0),
            "{params:?}"
        );
        assert_eq!(
            e.rejected_copies, 6,
            "two refused by value, four beyond the degree"
        );
        let out = e.handle(t, evaluated(Round(0)));
        assert_eq!(round_done(&out).copies_received, 2);
    }

    #[test]
    fn copies_that_come_before_their_round_are_kept_for_it() {
        let t = Duration::ZERO;
        let partition = Arc::new(models::chunking::ChunkPartition::new(&[6, 4], 2, 1).unwrap());
        let mut e = RnEngine::new(crate::algo::shatter_or_el(partition.clone()), 3).unwrap();
        // Before the first round (a neighbour's warm-up ended sooner).
        e.handle(t, copy(&partition, 0, Round(0)));
        e.handle(t, RnInput::Start);
        e.handle(t, trained(Round(0)));
        e.handle(t, done(0, Round(0)));
        assert!(evaluates(&e.handle(t, done(1, Round(0)))));
        // While round 0 is evaluated: copies of round 1 (kept) and of round 0 (too late: dropped).
        e.handle(t, copy(&partition, 1, Round(1)));
        e.handle(t, copy(&partition, 0, Round(1)));
        e.handle(t, copy(&partition, 0, Round(0)));
        let out = e.handle(t, evaluated(Round(0)));
        let RnOutput::RoundDone(m) = &out[0] else {
            panic!("{out:?}")
        };
        assert_eq!(
            m.copies_received, 1,
            "round 0: the copy from before the start"
        );
        e.handle(t, trained(Round(1)));
        e.handle(t, done(0, Round(1)));
        e.handle(t, done(1, Round(1)));
        let out = e.handle(t, evaluated(Round(1)));
        let RnOutput::RoundDone(m) = &out[0] else {
            panic!("{out:?}")
        };
        assert_eq!(
            m.copies_received, 2,
            "round 1: both copies that came during round 0's evaluation"
        );
        assert_eq!(e.rejected_copies, 0);
    }

    #[test]
    fn early_copies_are_bounded() {
        let t = Duration::ZERO;
        let partition = Arc::new(models::chunking::ChunkPartition::new(&[6, 4], 1, 1).unwrap());
        let mut e = RnEngine::new(crate::algo::shatter_or_el(partition.clone()), 3).unwrap();
        for _ in 0..3 * sampling::overlay::MAX_DEGREE {
            e.handle(t, copy(&partition, 0, Round(2)));
        }
        assert_eq!(e.early.len(), sampling::overlay::MAX_DEGREE);
    }

    fn behind(exchange: u64) -> RnInput {
        RnInput::FromVn {
            vn: 0,
            msg: FromVirtualNode::Behind {
                exchange: Round(exchange),
            },
        }
    }

    /// Issue 15: a resumed engine begins after its checkpoint's round and says so; told by a VN that the
    /// network is ahead, it finishes the round in progress, then skips to the network's round (no training
    /// for the rounds between) and says how many it skipped; a claim beyond the run is capped at its last
    /// round; resumed after the last round, it finishes at once.
    #[test]
    fn a_resumed_engine_starts_after_its_checkpoint_and_catches_up_at_the_next_round() {
        let t = Duration::ZERO;
        let partition = models::chunking::ChunkPartition::new(&[6, 4], 1, 1).unwrap();
        let mut e = RnEngine::new(crate::algo::shatter_or_el(Arc::new(partition)), 10)
            .unwrap()
            .starting_at(Round(3));
        assert!(
            e.skipped_exchanges().contains(&Round(2)),
            "no overlay for rounds before the resume"
        );
        let out = e.handle(t, RnInput::Start);
        assert!(
            matches!(
                &out[..],
                [
                    RnOutput::StartRound { exchange: Round(3) },
                    RnOutput::Train { round: Round(3) }
                ]
            ),
            "{out:?}"
        );
        // Behind arrives mid-round: nothing happens until the round ends.
        assert!(e.handle(t, behind(7)).is_empty());
        e.handle(t, trained(Round(3)));
        e.handle(t, done(0, Round(3)));
        let out = e.handle(t, evaluated(Round(3)));
        let RnOutput::RoundDone(m) = &out[0] else {
            panic!("{out:?}")
        };
        assert!(m.resumed && m.skipped_rounds == 0, "{m:?}");
        assert!(
            matches!(
                &out[1..],
                [
                    RnOutput::StartRound { exchange: Round(7) },
                    RnOutput::Train { round: Round(7) }
                ]
            ),
            "rounds 4-6 skipped: {out:?}"
        );
        // A claim beyond the run: capped at the last round (9).
        e.handle(t, behind(50));
        e.handle(t, trained(Round(7)));
        e.handle(t, done(0, Round(7)));
        let out = e.handle(t, evaluated(Round(7)));
        let RnOutput::RoundDone(m) = &out[0] else {
            panic!("{out:?}")
        };
        assert!(!m.resumed && m.skipped_rounds == 3, "{m:?}");
        assert!(
            matches!(
                &out[1..],
                [
                    RnOutput::StartRound { exchange: Round(9) },
                    RnOutput::Train { round: Round(9) }
                ]
            ),
            "{out:?}"
        );
        // An old claim changes nothing.
        assert!(e.handle(t, behind(2)).is_empty());
        e.handle(t, trained(Round(9)));
        e.handle(t, done(0, Round(9)));
        let out = e.handle(t, evaluated(Round(9)));
        assert!(matches!(&out[0], RnOutput::RoundDone(m) if m.skipped_rounds == 1));
        assert!(matches!(out.last(), Some(RnOutput::Finished)));

        let partition = models::chunking::ChunkPartition::new(&[6, 4], 1, 1).unwrap();
        let mut done_already = RnEngine::new(crate::algo::shatter_or_el(Arc::new(partition)), 10)
            .unwrap()
            .starting_at(Round(10));
        let out = done_already.handle(t, RnInput::Start);
        assert!(matches!(out.last(), Some(RnOutput::Finished)) && done_already.is_finished());
    }

    #[test]
    fn with_every_vn_lost_the_round_ends_when_training_does() {
        let t = Duration::ZERO;
        let mut e = engine(1);
        e.handle(t, RnInput::Start);
        assert!(!evaluates(&e.handle(t, RnInput::VnLost { vn: 0 })));
        assert!(evaluates(&e.handle(t, trained(Round(0)))));
    }
}
