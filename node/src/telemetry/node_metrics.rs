//! [`NodeMetrics`]: our families (`shatter_` prefix), set from what the RN task already computes — its
//! [`RoundMetrics`] at each round's end, each VN's [`RoundSummary`], the phase it is in and the writes that
//! failed — never recomputed here.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use protocol::rnvn::{RefusalCounts, RoundSummary};

use crate::engine::RoundMetrics;
use crate::events::DurableFile;

/// What the RN is doing now (`shatter_phase{phase="…"}` is 1 for it and 0 for the others).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Before round 0: the VNs gossip to fill their views.
    Warmup,
    /// Local SGD steps.
    Training,
    /// From the end of training to the last VN's report (overlay wait and chunk exchange).
    Exchange,
    /// Aggregation and the evaluation of the aggregated model.
    Evaluation,
    /// Sitting the round out (dropout).
    Absent,
    /// All rounds done, or stopped.
    Finished,
}

const PHASES: [Phase; 6] = [
    Phase::Warmup,
    Phase::Training,
    Phase::Exchange,
    Phase::Evaluation,
    Phase::Absent,
    Phase::Finished,
];

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Warmup => "warmup",
            Phase::Training => "training",
            Phase::Exchange => "exchange",
            Phase::Evaluation => "evaluation",
            Phase::Absent => "absent",
            Phase::Finished => "finished",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabel {
    phase: &'static str,
}

/// A part of a round's wall-clock time (`RoundMetrics`' `*_secs`; `exchange` without its overlay wait):
/// training, exchange, overlay_wait, aggregation or evaluation.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartLabel {
    part: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MetricLabel {
    metric: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VnLabel {
    vn: u32,
}

/// `direction`: sent or received; `traffic`: chunk (chunk frames) or control (everything else our codec
/// carries: control messages, round queries, replies) for sent bytes, all for received ones (a VN counts
/// them before decoding).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WireLabel {
    direction: &'static str,
    traffic: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabel {
    direction: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FileLabel {
    file: &'static str,
}

type SecondsCounter = Counter<f64, AtomicU64>;
type FloatGauge = Gauge<f64, AtomicU64>;

/// Our families for one node. Cloning shares them (each metric is an `Arc` of atomics).
#[derive(Clone)]
pub struct NodeMetrics {
    round: Gauge,
    rounds: Counter,
    phase: Family<PhaseLabel, Gauge>,
    round_duration: Histogram,
    round_part: Family<PartLabel, SecondsCounter>,
    test_metric: Family<MetricLabel, FloatGauge>,
    train_loss: FloatGauge,
    neighbours: Gauge,
    vn_neighbours: Family<VnLabel, Gauge>,
    wire_bytes: Family<WireLabel, Counter>,
    wire_messages: Family<DirectionLabel, Counter>,
    copies_received: Counter,
    copies_delivered: Counter,
    refusals: Family<ReasonLabel, Counter>,
    overlay_waits: Counter,
    train_divergences: Counter,
    absent_rounds: Counter,
    skipped_rounds: Counter,
    unsaved_checkpoints: Gauge,
    write_failures: Family<FileLabel, Counter>,
    link_bytes: Counter,
    vns_lost: Counter,
}

impl NodeMetrics {
    /// Registers the families under `shatter_` in `registry`, for a node of `vns` VNs (their neighbour gauges
    /// start at 0, so a VN that never reports shows as one without neighbours).
    pub(crate) fn register(registry: &mut Registry, vns: usize) -> Self {
        let m = Self {
            round: Gauge::default(),
            rounds: Counter::default(),
            phase: Family::default(),
            // 10 ms to about 80 s: a loopback round of a small model up to a ResNet round on a slow link.
            round_duration: Histogram::new(exponential_buckets(0.01, 2.0, 14)),
            round_part: Family::default(),
            test_metric: Family::default(),
            train_loss: FloatGauge::default(),
            neighbours: Gauge::default(),
            vn_neighbours: Family::default(),
            wire_bytes: Family::default(),
            wire_messages: Family::default(),
            copies_received: Counter::default(),
            copies_delivered: Counter::default(),
            refusals: Family::default(),
            overlay_waits: Counter::default(),
            train_divergences: Counter::default(),
            absent_rounds: Counter::default(),
            skipped_rounds: Counter::default(),
            unsaved_checkpoints: Gauge::default(),
            write_failures: Family::default(),
            link_bytes: Counter::default(),
            vns_lost: Counter::default(),
        };
        let r = registry.sub_registry_with_prefix("shatter");
        r.register(
            "round",
            "The last round this node finished",
            m.round.clone(),
        );
        r.register(
            "rounds",
            "Rounds finished by this process",
            m.rounds.clone(),
        );
        r.register(
            "phase",
            "What the node is doing now: 1 for the current phase, 0 for the others",
            m.phase.clone(),
        );
        r.register_with_unit(
            "round_duration",
            "Wall-clock time of a round (rounds the node took part in)",
            Unit::Seconds,
            m.round_duration.clone(),
        );
        r.register_with_unit(
            "round_part",
            "Wall-clock time of rounds by part: training, exchange (without the overlay wait), overlay_wait, aggregation, evaluation",
            Unit::Seconds,
            m.round_part.clone(),
        );
        r.register(
            "test_metric",
            "Test metric of the aggregated model after the last round (accuracy or RMSE, by the metric label)",
            m.test_metric.clone(),
        );
        r.register(
            "train_loss",
            "Mean training loss of the last round's local steps",
            m.train_loss.clone(),
        );
        r.register(
            "neighbours",
            "Confirmed overlay neighbours in the last round, summed over this node's VNs (k*r for a full overlay)",
            m.neighbours.clone(),
        );
        r.register(
            "vn_neighbours",
            "Confirmed overlay neighbours of each VN in its last exchange (r for a full overlay)",
            m.vn_neighbours.clone(),
        );
        r.register_with_unit(
            "wire",
            "VN-to-VN bytes on our streams (frame payloads and length prefixes; noise and yamux framing are in libp2p_bandwidth)",
            Unit::Bytes,
            m.wire_bytes.clone(),
        );
        r.register(
            "wire_messages",
            "VN-to-VN frames sent and received",
            m.wire_messages.clone(),
        );
        r.register(
            "copies_received",
            "Chunk copies received from neighbours and aggregated",
            m.copies_received.clone(),
        );
        r.register(
            "copies_delivered",
            "Chunk copies of ours that neighbours accepted",
            m.copies_delivered.clone(),
        );
        r.register(
            "refusals",
            "Frames refused by this node's VNs, by reason (rate_limited: control messages over their sender's rate limit, dropped unread)",
            m.refusals.clone(),
        );
        r.register(
            "overlay_waits",
            "Rounds whose exchange waited for the overlay to freeze (the seconds are shatter_round_part_seconds_total{part=\"overlay_wait\"})",
            m.overlay_waits.clone(),
        );
        r.register(
            "train_divergences",
            "Rounds whose local training diverged (non-finite loss; the node went on from its previous model)",
            m.train_divergences.clone(),
        );
        r.register(
            "absent_rounds",
            "Rounds this node sat out (dropout)",
            m.absent_rounds.clone(),
        );
        r.register(
            "skipped_rounds",
            "Rounds skipped to catch up with the network",
            m.skipped_rounds.clone(),
        );
        r.register(
            "unsaved_checkpoints",
            "Rounds since the last checkpoint that could be saved (0: the last round's was)",
            m.unsaved_checkpoints.clone(),
        );
        r.register(
            "write_failures",
            "Checkpoint and metrics-file writes that failed (the node trains on and tries again)",
            m.write_failures.clone(),
        );
        r.register_with_unit(
            "link",
            "RN-to-VN link bytes, both directions, when the VNs run in VN hosts",
            Unit::Bytes,
            m.link_bytes.clone(),
        );
        r.register(
            "vns_lost",
            "Virtual nodes whose task ended before the node (the node goes on without them)",
            m.vns_lost.clone(),
        );
        for vn in 0..vns {
            m.vn_neighbours
                .get_or_create(&VnLabel { vn: vn as u32 })
                .set(0);
        }
        // Series that exist from the start read 0 until their first event (an empty family is not written,
        // and a rate over a series that appears at its first failure misses that failure).
        for file in ["checkpoint", "metrics"] {
            let _ = m.write_failures.get_or_create(&FileLabel { file });
        }
        for (reason, _) in refusal_reasons(&RefusalCounts::default()) {
            let _ = m.refusals.get_or_create(&ReasonLabel { reason });
        }
        m.set_phase(Phase::Warmup);
        m
    }

    pub(crate) fn set_phase(&self, now: Phase) {
        for p in PHASES {
            self.phase
                .get_or_create(&PhaseLabel { phase: p.name() })
                .set(i64::from(p == now));
        }
    }

    /// A round finished with these metrics (those of the RN task, after its metrics-file write).
    pub(crate) fn round_finished(&self, m: &RoundMetrics) {
        self.round.set(m.round.get() as i64);
        self.rounds.inc();
        if m.absent {
            self.absent_rounds.inc();
        } else {
            self.round_duration.observe(m.round_secs);
            let exchange = (m.exchange_secs - m.overlay_wait_secs).max(0.0);
            for (part, secs) in [
                ("training", m.train_secs),
                ("exchange", exchange),
                ("overlay_wait", m.overlay_wait_secs),
                ("aggregation", m.aggregate_secs),
                ("evaluation", m.eval_secs),
            ] {
                self.round_part
                    .get_or_create(&PartLabel { part })
                    .inc_by(secs.max(0.0));
            }
        }
        self.test_metric
            .get_or_create(&MetricLabel {
                metric: m.metric_name.to_string(),
            })
            .set(m.test_metric);
        self.train_loss.set(m.train_loss);
        self.neighbours.set(i64::from(m.neighbours));
        let wire = |direction, traffic| {
            self.wire_bytes
                .get_or_create(&WireLabel { direction, traffic })
        };
        wire("sent", "chunk").inc_by(m.chunk_bytes_sent);
        wire("sent", "control").inc_by(m.bytes_sent.saturating_sub(m.chunk_bytes_sent));
        wire("received", "all").inc_by(m.bytes_received);
        for (direction, n) in [("sent", m.messages_sent), ("received", m.messages_received)] {
            self.wire_messages
                .get_or_create(&DirectionLabel { direction })
                .inc_by(n);
        }
        self.copies_received.inc_by(u64::from(m.copies_received));
        self.copies_delivered.inc_by(u64::from(m.copies_delivered));
        for (reason, n) in refusal_reasons(&m.refused_by_reason) {
            self.refusals
                .get_or_create(&ReasonLabel { reason })
                .inc_by(u64::from(n));
        }
        if m.overlay_wait_secs > 0.0 {
            self.overlay_waits.inc();
        }
        if m.train_diverged {
            self.train_divergences.inc();
        }
        self.skipped_rounds.inc_by(m.skipped_rounds);
        self.unsaved_checkpoints.set(m.unsaved_checkpoints as i64);
        self.link_bytes.inc_by(m.link_bytes);
    }

    /// VN `vn` ended an exchange with this summary.
    pub(crate) fn vn_done(&self, vn: usize, s: &RoundSummary) {
        self.vn_neighbours
            .get_or_create(&VnLabel { vn: vn as u32 })
            .set(i64::from(s.neighbours));
    }

    pub(crate) fn vn_lost(&self) {
        self.vns_lost.inc();
    }

    pub(crate) fn write_failed(&self, file: DurableFile) {
        let file = match file {
            DurableFile::Checkpoint => "checkpoint",
            DurableFile::Metrics => "metrics",
        };
        self.write_failures.get_or_create(&FileLabel { file }).inc();
    }
}

/// Every reason with its count, so that each reason's series exists from the first round on (a rate over a
/// series that appears only at its first refusal misses that refusal).
fn refusal_reasons(c: &RefusalCounts) -> [(&'static str, u32); 9] {
    let RefusalCounts {
        malformed,
        not_allowed,
        not_neighbour,
        wrong_round,
        bad_chunk,
        non_finite,
        out_of_range,
        duplicate,
        rate_limited,
    } = *c;
    [
        ("malformed", malformed),
        ("not_allowed", not_allowed),
        ("not_neighbour", not_neighbour),
        ("wrong_round", wrong_round),
        ("bad_chunk", bad_chunk),
        ("non_finite", non_finite),
        ("out_of_range", out_of_range),
        ("duplicate", duplicate),
        ("rate_limited", rate_limited),
    ]
}
