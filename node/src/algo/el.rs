//! Epidemic Learning (de Vos et al., NeurIPS 2023; the paper's EL baseline): every node sends its whole model
//! to the r neighbours of a fresh random r-regular graph each round and averages what it receives — Shatter
//! with k = 1, the same code path.

use std::sync::Arc;

use models::chunking::ChunkPartition;

use super::Shatter;

/// EL over a one-chunk partition (`partition.k()` must be 1: the whole model is one chunk).
pub fn el(partition: Arc<ChunkPartition>) -> Result<Shatter, super::AlgoError> {
    if partition.k() != 1 {
        return Err(super::AlgoError::Other(format!(
            "EL sends the whole model: a partition of k = 1, not {}",
            partition.k()
        )));
    }
    Ok(Shatter::named("el", partition))
}
