//! One setting (one k) of an invocation, in the chosen mode. The modes share learners, partition and audit
//! plan construction here; each mode's file runs the network its way.

pub mod capture;
pub mod hosts;
pub mod inproc;
pub mod netns;
pub mod procs;
pub mod sim;

use std::sync::Arc;

use models::data::Split;

use crate::RunOutput;
use crate::audit::{AuditData, AuditPlan};
use crate::cli::Mode;
use crate::progress::Progress;
use crate::scenario::{Setting, Settings};

/// Runs `setting` of `s` on the loaded data (`split`, per-node `parts`); `audit` is `Some` with `--audit`.
pub fn setting(
    s: &Settings,
    setting: Setting,
    split: &Split,
    parts: &[Vec<usize>],
    audit: Option<&Arc<AuditData>>,
    progress: &mut Progress,
) -> anyhow::Result<RunOutput> {
    if s.mode == Mode::Procs {
        return procs::run(s, setting, &s.out, progress);
    }
    let learners = if s.devices.is_empty() {
        s.learning.learners(split, parts, 0..s.nodes)?
    } else {
        s.learning.learners_on(split, parts, 0..s.nodes, |i| {
            s.device_of(i).unwrap_or_default()
        })?
    };
    // One partition for all in-process nodes (and the audit): it takes ~6 bytes per parameter.
    let partition = Arc::new(
        s.learning
            .chunk_partition(&learners[0].model, setting.chunks())?,
    );
    let plan = match audit {
        Some(data) => AuditPlan::new(
            s.audit,
            s.rounds,
            &s.learning,
            data,
            split,
            partition.clone(),
            setting.algo(),
        )?,
        None => None,
    };
    if s.mode == Mode::Sim {
        sim::run(s, setting, learners, partition, plan, progress)
    } else {
        inproc::run(s, setting, learners, partition, plan, progress)
    }
}
