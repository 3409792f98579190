//! [`CopyCheck`]: what a copy a VN hands over must be before the RN's aggregator takes it (issue 44, item 4).
//!
//! A VN checks every frame off the wire (`vn/chunk_check.rs`: a known chunk index, its length, finite values
//! within the model's range) and accepts at most one per neighbour of an exchange. A VN run by a VN host is
//! the host's code, not ours: the RN took any number of `Received` copies per exchange from it and checked
//! them for finiteness alone, so one host could outvote a node's neighbours in its average or push values the
//! wire refuses. The RN now puts every copy through the same check with the same scale (each VN's own latest
//! frame, which the RN itself hands over) and takes at most as many copies per VN and exchange as the VN may
//! have senders: its overlay degree, or the peer list with directed push. The node builder applies it to
//! hosted VNs only: an in-process VN is our code and has run these very checks on every copy it hands over.

use std::sync::Arc;

use protocol::{ChunkFrame, RefuseReason, Round};

use super::ValueBounds;
use super::vn::ChunkCheck;

/// What the RN holds its VNs' copies to.
#[derive(Debug, Clone)]
pub struct CopyLimits {
    /// Length of each chunk index of the static partition.
    pub chunk_lens: Arc<Vec<usize>>,
    /// The value rule the VNs apply.
    pub values: ValueBounds,
    /// Copies one VN may hand over per exchange: its degree (the overlay and a static graph give a VN at most
    /// that many neighbours), or the number of listed peers with directed push, where any of them may draw it.
    pub per_exchange: usize,
}

/// Why a copy was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum CopyRefused {
    /// What the wire refuses too (bad index or length, non-finite, out of range).
    Frame(RefuseReason),
    /// More copies from this VN in this exchange than it can have senders.
    TooMany { per_exchange: usize },
}

impl std::fmt::Display for CopyRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CopyRefused::Frame(why) => write!(f, "{why:?}"),
            CopyRefused::TooMany { per_exchange } => {
                write!(
                    f,
                    "more than {per_exchange} copies from one VN in one exchange"
                )
            }
        }
    }
}

/// Per VN: the frame check (with its own scale) and the copies taken in the latest exchange it handed over.
#[derive(Debug)]
pub(crate) struct CopyCheck {
    checks: Vec<ChunkCheck>,
    /// Per VN: the exchange of the copies counted, and how many. Counted by the copies' own exchange, not
    /// reset when the RN begins one: copies of an exchange arrive while the RN still trains for it.
    taken: Vec<(Round, usize)>,
    per_exchange: usize,
}

impl CopyCheck {
    pub(crate) fn new(k: usize, limits: CopyLimits) -> Self {
        Self {
            checks: vec![ChunkCheck::new(limits.chunk_lens, limits.values); k],
            taken: vec![(Round::ZERO, 0); k],
            per_exchange: limits.per_exchange,
        }
    }

    /// The RN hands VN `vn` its own frames: the scale that VN's copies are held to, as the VN holds its own.
    pub(crate) fn own(&mut self, vn: usize, frames: &[ChunkFrame]) {
        if let Some(c) = self.checks.get_mut(vn) {
            c.note_own(frames);
        }
    }

    /// Checks a copy VN `vn` handed over for the RN's current exchange (exchanges only grow), and counts it
    /// if it passes.
    pub(crate) fn take(&mut self, vn: usize, frame: &ChunkFrame) -> Result<(), CopyRefused> {
        let (Some(check), Some((counted, taken))) = (self.checks.get(vn), self.taken.get_mut(vn))
        else {
            return Err(CopyRefused::Frame(RefuseReason::BadChunk));
        };
        check.check(frame).map_err(CopyRefused::Frame)?;
        if *counted != frame.round {
            (*counted, *taken) = (frame.round, 0);
        }
        if *taken >= self.per_exchange {
            return Err(CopyRefused::TooMany {
                per_exchange: self.per_exchange,
            });
        }
        *taken += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::ChunkIndex;

    fn frame(chunk: u32, values: Vec<f32>) -> ChunkFrame {
        at(3, chunk, values)
    }

    fn at(round: u64, chunk: u32, values: Vec<f32>) -> ChunkFrame {
        ChunkFrame {
            round: Round(round),
            chunk: ChunkIndex(chunk),
            values,
        }
    }

    fn check() -> CopyCheck {
        CopyCheck::new(
            2,
            CopyLimits {
                chunk_lens: Arc::new(vec![3, 2]),
                values: ValueBounds::default(),
                per_exchange: 2,
            },
        )
    }

    #[test]
    fn a_copy_passes_the_wires_checks() {
        let mut c = check();
        c.own(0, &[frame(0, vec![1.0, -2.0, 0.5])]);
        assert_eq!(c.take(0, &frame(1, vec![0.0, 1.0])), Ok(()));
        let refused = |c: &mut CopyCheck, f| match c.take(0, &f) {
            Err(CopyRefused::Frame(why)) => why,
            other => panic!("{other:?}"),
        };
        assert_eq!(refused(&mut c, frame(2, vec![0.0])), RefuseReason::BadChunk);
        assert_eq!(refused(&mut c, frame(1, vec![0.0])), RefuseReason::BadChunk);
        assert_eq!(
            refused(&mut c, frame(1, vec![f32::NAN, 0.0])),
            RefuseReason::NonFinite
        );
        // Own scale 2, ratio 1000: 2000 passes (the floor is 1000), 2001 does not.
        assert_eq!(c.take(0, &frame(1, vec![2000.0, 0.0])), Ok(()));
        assert_eq!(
            refused(&mut c, frame(1, vec![2001.0, 0.0])),
            RefuseReason::OutOfRange
        );
        assert!(c.take(5, &frame(1, vec![0.0, 0.0])).is_err(), "no such VN");
    }

    #[test]
    fn a_vn_hands_over_at_most_its_senders_per_exchange() {
        let mut c = check();
        let f = frame(1, vec![0.0, 1.0]);
        assert_eq!(c.take(1, &f), Ok(()));
        assert_eq!(c.take(1, &f), Ok(()));
        assert_eq!(c.take(1, &f), Err(CopyRefused::TooMany { per_exchange: 2 }));
        // Counted per VN, and per exchange.
        assert_eq!(c.take(0, &f), Ok(()));
        assert_eq!(c.take(1, &at(4, 1, vec![0.0, 1.0])), Ok(()));
    }
}
