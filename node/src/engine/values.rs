//! [`ValueBounds`]: the range rule a VN puts on received values, next to the NaN rule (issue 14).

use serde::Serialize;

/// How large a received value may be: `|v| ≤ clamp(ratio × scale, floor, ceiling)`, where `scale` is the
/// largest |v| of this VN's own latest chunk (issue 14: one hostile neighbour sending huge finite values
/// overflowed the aggregate, the next training step diverged and the victim left the run).
///
/// Why relative to the VN's *own* chunk: it is the one scale a VN knows without trusting anyone (its RN
/// gives it every round, `ToVirtualNode::Exchange`), and honest chunks of a round come from models averaged
/// together every round, so their values stay within a small factor of each other. Every chunk deals every
/// layer of the model (the static partition, DESIGN §1), so the scale of the VN's own chunk index speaks for
/// the chunks of other indices it receives. The scale is that of the latest own chunk when the chunk is
/// checked (a neighbour that trained faster may send round t before this VN has its own chunk of t: it is
/// then checked against round t − 1's scale, which differs little).
///
/// Why a floor: before its first own chunk a VN knows no scale, and a model can have tiny values (zeros at
/// initialisation); honest values below the floor are never refused.
///
/// Why a ceiling: the scale is learned from a model that averages in what was accepted, so a patient
/// neighbour sending ratio × scale every round could raise the bound geometrically (accepted values raise
/// the aggregate, which raises the scale). The ceiling stops that ratchet at an absolute value no model of
/// this project approaches and far from f32 overflow (the sum of r + 1 values stays finite).
///
/// What this does not do: values inside the bound still move the average (a bounded bias, not an
/// overflow); robust aggregation (clipping, trimmed means) is another matter. A step that still diverges
/// is survived by the learner (`crate::learner::Learner::train` restores the model from before the step).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ValueBounds {
    /// Largest accepted |v| as a multiple of the own chunk's largest |v| (≥ 1).
    pub ratio: f32,
    /// Values up to this are always accepted (> 0); also the bound before the VN's first own chunk.
    pub floor: f32,
    /// Values beyond this are always refused (≥ `floor`, finite).
    pub ceiling: f32,
}

impl Default for ValueBounds {
    /// Generous enough never to refuse an honest run: honest chunks differ from a VN's own by a few times at most
    /// (measured, largest received |v| over own largest |v|: 1.07 in the default sim, 4.1 in a MovieLens sim with
    /// its per-user partition; `docs/operator-guide.md`, faulty values), so ×1000 leaves a margin of 240×; the
    /// models here have |θ| of a few units (floor 1000) and nothing near 10⁶ (ceiling). The poison (1e20 …
    /// f32::MAX) is refused at once.
    fn default() -> Self {
        Self {
            ratio: 1e3,
            floor: 1e3,
            ceiling: 1e6,
        }
    }
}

impl ValueBounds {
    /// Refuses bounds that make no sense (they would refuse honest values or bound nothing).
    pub fn validate(&self) -> Result<(), String> {
        if !(self.ratio.is_finite() && self.ratio >= 1.0) {
            return Err(format!(
                "value ratio {} must be finite and at least 1",
                self.ratio
            ));
        }
        if !(self.floor.is_finite() && self.floor > 0.0) {
            return Err(format!(
                "value floor {} must be finite and positive",
                self.floor
            ));
        }
        if !(self.ceiling.is_finite() && self.ceiling >= self.floor) {
            return Err(format!(
                "value ceiling {} must be finite and at least the floor {}",
                self.ceiling, self.floor
            ));
        }
        Ok(())
    }

    /// The largest accepted |v| for a VN whose own latest chunk has largest |v| `scale` (`None`: no own chunk
    /// yet).
    pub fn limit(&self, scale: Option<f32>) -> f32 {
        let relative = scale.map_or(0.0, |s| self.ratio * s);
        // `max`/`min` ignore a NaN operand: a NaN scale (never stored) would leave the floor.
        relative.max(self.floor).min(self.ceiling)
    }
}
