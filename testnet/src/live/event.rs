//! [`LiveEvent`]: one JSON object per server-sent event, `type` naming which.

use node::engine::RoundMetrics;
use serde::{Deserialize, Serialize};

/// What the page is told, in the order it happened.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LiveEvent {
    /// The invocation: one line describing it, and what every setting shares.
    Run {
        description: String,
        mode: String,
        nodes: usize,
        rounds: u64,
        degree: usize,
        /// The values of k of the sweep, in order.
        ks: Vec<usize>,
        /// Model parameters.
        d: usize,
        audit: bool,
        /// Whether the testnet sees the overlay (sim and inproc: it holds every node's keys).
        overlay_known: bool,
    },
    /// A setting (one k) starts.
    Setting {
        k: usize,
        label: String,
        /// Bytes a node sends per round by the 4·d·r cost model (scaled for the algorithm's payload).
        cost_model_bytes: f64,
    },
    /// Node `node` finished a round of setting `k`.
    Round {
        k: usize,
        node: usize,
        #[serde(flatten)]
        m: RoundMetrics,
    },
    /// Every node finished round `round`: the VN overlay its copies travelled on. VN `i` belongs to node
    /// `owner[i]` (ground truth only the testnet has; the page shows it only in its audit view).
    Overlay {
        k: usize,
        round: u64,
        owner: Vec<u32>,
        edges: Vec<(u32, u32)>,
    },
    /// `--audit`: the attacks' figures per audited round, and the sibling-linkage attack's over the run.
    Audit {
        k: usize,
        rounds: Vec<AuditRound>,
        /// ROC-AUC of linking sibling VNs by their chunks' arrival times (pooled over attackers).
        linkage_auc: Option<f64>,
    },
    /// The setting ended.
    SettingDone { k: usize, wall_secs: f64 },
    /// The invocation ended; its report is in `out`.
    Finished { out: String },
}

/// The audit of one round: mean MIA ROC-AUC over the chunks attacked, and the linkability attack's success.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AuditRound {
    pub round: u64,
    pub mia_auc: f64,
    pub la_success: f64,
    pub la_chance: f64,
}
