//! [`ChunkCheck`]: what a received chunk frame must be before a VN looks at who sent it — a known chunk index,
//! the length of that index, finite values within the model's range ([`ValueBounds`]). The range follows the
//! scale of this VN's own chunks, so it owns that scale.

use std::sync::Arc;

use protocol::{ChunkFrame, RefuseReason};

use crate::engine::values::ValueBounds;

/// The sign bit of an f32: cleared, the bit pattern is the magnitude's.
const SIGN_BIT: u32 = 1 << 31;

/// The checks a VN puts every received frame through, and the scale they follow.
#[derive(Debug, Clone)]
pub(crate) struct ChunkCheck {
    /// Length of each chunk index of the static partition (`len()` = k).
    chunk_lens: Arc<Vec<usize>>,
    bounds: ValueBounds,
    /// Largest |v| of the latest own chunk (the model's scale as this VN knows it); `None` before the first.
    own_scale: Option<f32>,
}

impl ChunkCheck {
    pub(crate) fn new(chunk_lens: Arc<Vec<usize>>, bounds: ValueBounds) -> Self {
        Self {
            chunk_lens,
            bounds,
            own_scale: None,
        }
    }

    /// The largest |v| a received chunk may carry now.
    pub(crate) fn value_limit(&self) -> f32 {
        self.bounds.limit(self.own_scale)
    }

    /// One pass over our own frames per round: the scale received chunks are held to. A non-finite own
    /// value (an RN bug; training that diverges is restored before it gets here) leaves the old scale.
    pub(crate) fn note_own(&mut self, frames: &[ChunkFrame]) {
        let values = || frames.iter().flat_map(|f| f.values.iter());
        let scale = values().fold(0.0f32, |m, v| m.max(v.abs()));
        if !frames.is_empty() && scale.is_finite() && values().all(|v| v.is_finite()) {
            self.own_scale = Some(scale);
        }
    }

    /// Checks what the frame alone can tell: a known chunk index, its length, finite values within
    /// [`ChunkCheck::value_limit`]. NaN or an infinity anywhere is `NonFinite` even if another value is also
    /// out of range (one pass finds both).
    pub(crate) fn check(&self, frame: &ChunkFrame) -> Result<(), RefuseReason> {
        match self.chunk_lens.get(frame.chunk.get()) {
            Some(&len) if len == frame.values.len() => {}
            _ => return Err(RefuseReason::BadChunk),
        }
        // One pass over the magnitudes' bit patterns, which order as the magnitudes do and put infinities and
        // NaNs above every finite value: an integer maximum the compiler vectorises, where a float fold with
        // a NaN test per value does not (this pass reads every byte a VN receives).
        let largest_bits = frame
            .values
            .iter()
            .map(|v| v.to_bits() & !SIGN_BIT)
            .fold(0, u32::max);
        if largest_bits >= f32::INFINITY.to_bits() {
            return Err(RefuseReason::NonFinite);
        }
        if f32::from_bits(largest_bits) > self.value_limit() {
            return Err(RefuseReason::OutOfRange);
        }
        Ok(())
    }
}
