//! Per-round metrics of one real node, written as one JSON line per round.

use models::train::MetricKind;
use protocol::Round;
use protocol::rnvn::RefusalCounts;
use serde::{Deserialize, Serialize};

/// What one RN reports for one round. Traffic is VN↔VN traffic summed over this RN's VNs (frame payloads
/// and length prefixes; see `counters.rs`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RoundMetrics {
    pub round: Round,
    /// Which test metric `test_metric` is (written as "accuracy" or "rmse").
    pub metric_name: MetricKind,
    /// Test metric of the aggregated model.
    pub test_metric: f64,
    pub test_loss: f64,
    /// Mean training loss of this round's local steps (0 when the training diverged: no step was kept).
    pub train_loss: f64,
    /// This round's local training diverged (a non-finite loss): the node went on from the model it had
    /// before the round's training instead of leaving the run (issue 14). Left out of the JSON when false,
    /// so an honest run's metrics read as before.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub train_diverged: bool,
    /// The node sat this round out (dropout: no training, sharing or aggregation; the test metric is the
    /// last one, the model did not change). Left out of the JSON when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub absent: bool,
    /// Rounds this node skipped right before this one to catch up with the network (issue 15: it found
    /// itself behind, e.g. after a pause or a restart, and adopted the network's round; no training, sharing
    /// or metrics line for the rounds skipped). Left out of the JSON when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped_rounds: u64,
    /// The first round of a run resumed from a checkpoint (`node run --resume`). Left out when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resumed: bool,
    /// Rounds, this one included, since the last checkpoint that could be saved (a full or failing disk;
    /// the node trains on and tries again every round): 0 when this round's checkpoint was saved. A resume
    /// would go back that many rounds. Left out when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unsaved_checkpoints: u64,
    /// Writes and syncs of the metrics file that failed so far in this process (a line refused is kept and
    /// written, late, once the disk takes it). Left out when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub metrics_write_failures: u64,
    /// This node's metrics lines that may be missing from the file before this one: dropped after the disk
    /// refused them longer than the node keeps lines, or not yet durable at a checkpoint a resumed run
    /// started from. Left out when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub metrics_lines_lost: u64,
    /// Chunk frames sent (payload + prefix): the cost model's 4·d·r plus headers for a full overlay.
    pub chunk_bytes_sent: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub messages_sent: u64,
    pub messages_received: u64,
    /// RN↔VN link bytes of the round, both directions (messages as encoded, `protocol::link`), when the VNs
    /// run in VN hosts (`node vn`); the in-process channels cost nothing on a wire. Left out when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub link_bytes: u64,
    /// Confirmed overlay neighbours, summed over this RN's VNs and the round's exchanges (k·r for a perfect
    /// overlay and one exchange per round; Muffliato's ten exchanges give 10·r). Traffic and copies are summed
    /// over the exchanges too.
    pub neighbours: u32,
    /// Chunk copies received and aggregated.
    pub copies_received: u32,
    /// Our chunk copies that neighbours accepted.
    pub copies_delivered: u32,
    /// Frames refused by this RN's VNs (malformed, not allowed, wrong round, bad chunk, non-finite, out of
    /// range, duplicate, not a neighbour): the sum of `refused_by_reason`.
    pub refused: u32,
    /// `refused` by reason (`{"malformed": 0, "not_allowed": 0, …, "out_of_range": 3, …}`). Left out of the
    /// JSON when nothing was refused, so an honest run's metrics read as before.
    #[serde(default, skip_serializing_if = "RefusalCounts::is_zero")]
    pub refused_by_reason: RefusalCounts,
    pub train_secs: f64,
    /// From the end of training to the last VN's report (waiting for the overlay and the neighbours' chunks).
    pub exchange_secs: f64,
    /// The part of `exchange_secs` that waited for the round's overlay to freeze: per exchange, the longest
    /// wait of this RN's VNs (`RoundSummary::overlay_wait_us`), summed over the round's exchanges. 0 when
    /// every overlay was negotiated ahead. Metrics files written before it read as 0.
    #[serde(default)]
    pub overlay_wait_secs: f64,
    pub aggregate_secs: f64,
    pub eval_secs: f64,
    pub round_secs: f64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
