//! [`Round`] and [`ChunkIndex`]: the two numbers every layer passes, as types of their own, so a round is
//! never mistaken for a chunk index, a count or a time, and each is one type from the wire to the report.
//! Both serialise as their bare integer (serde `transparent`), so wire bytes and JSON are what they were.

use std::fmt;
use std::ops::{Add, Sub};

use serde::{Deserialize, Serialize};

/// A training round t (0-based). Rounds are ordered; `round + n` and `round - n` step by whole rounds
/// (saturating at 0 going down).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Round(pub u64);

impl Round {
    pub const ZERO: Round = Round(0);

    pub fn get(self) -> u64 {
        self.0
    }

    /// The round after this one.
    pub fn next(self) -> Round {
        Round(self.0 + 1)
    }
}

impl Add<u64> for Round {
    type Output = Round;
    fn add(self, n: u64) -> Round {
        Round(self.0.saturating_add(n))
    }
}

impl Sub<u64> for Round {
    type Output = Round;
    fn sub(self, n: u64) -> Round {
        Round(self.0.saturating_sub(n))
    }
}

impl fmt::Display for Round {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The index s of a chunk of the static partition (0 ≤ s < k): VN s of every real node carries chunk s.
/// On the wire a little-endian u32; `models` takes it as a `usize` ([`ChunkIndex::get`]).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct ChunkIndex(pub u32);

impl ChunkIndex {
    pub fn get(self) -> usize {
        self.0 as usize
    }

    /// The index of VN / chunk `s`. Panics above `u32::MAX` (k is bounded far below by configs).
    pub fn of(s: usize) -> ChunkIndex {
        ChunkIndex(u32::try_from(s).expect("chunk index fits in u32"))
    }
}

impl fmt::Display for ChunkIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialise_as_bare_integers() {
        assert_eq!(serde_json::to_string(&Round(7)).unwrap(), "7");
        let cfg = bincode::config::standard();
        assert_eq!(
            bincode::serde::encode_to_vec(Round(300), cfg).unwrap(),
            bincode::serde::encode_to_vec(300u64, cfg).unwrap()
        );
        assert_eq!(Round(2) - 5, Round::ZERO);
        assert_eq!(Round(2) + 1, Round(2).next());
        assert_eq!(ChunkIndex::of(3).get(), 3);
    }
}
