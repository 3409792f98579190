//! Chunk frames: the model fragments virtual nodes exchange. Values travel as raw little-endian f32 behind a
//! fixed 17-byte header, not through serde: a chunk is up to tens of MB and this layout is read and
//! written with one pass and no per-element framing.
//!
//! ```text
//! offset  size  field
//! 0       1     version (CHUNK_FRAME_VERSION)
//! 1       8     round, u64 LE
//! 9       4     chunk index, u32 LE
//! 13      4     value count n, u32 LE
//! 17      4n    values, f32 LE
//! ```
//!
//! Decoding checks structure only (version, count within [`MAX_CHUNK_VALUES`], exact length). Whether the
//! round, the chunk index, the length for that index and the values themselves (NaN, infinities, values out
//! of the model's range) are acceptable depends on the receiver's state and is checked by the round engine, which counts refusals.

use serde::{Deserialize, Serialize};

use crate::{ChunkIndex, DecodeError, Round};

/// Version byte of the chunk frame layout above.
pub const CHUNK_FRAME_VERSION: u8 = 1;

/// Bytes before the values.
pub const CHUNK_HEADER_BYTES: usize = 1 + 8 + 4 + 4;

/// Most values one chunk may carry: 2^24 (64 MiB of f32). Epidemic Learning (k = 1) sends the whole model as
/// one chunk, and the paper's largest model, ResNet-18 for CIFAR-10, has about 11.2 M parameters; this leaves
/// headroom while bounding what a peer can make us allocate per frame.
pub const MAX_CHUNK_VALUES: usize = 1 << 24;

/// Largest chunk frame payload, the framing limit for the chunk protocol.
pub const MAX_CHUNK_FRAME_BYTES: usize = chunk_frame_bytes(MAX_CHUNK_VALUES);

/// Bytes of the frame of a chunk of `values` values (header and values, without the length prefix): the
/// largest chunk frame a run can carry is this for its largest chunk, and a receiver refuses longer ones
/// before reading them.
pub const fn chunk_frame_bytes(values: usize) -> usize {
    CHUNK_HEADER_BYTES + 4 * values
}

/// One chunk of one round: the values a virtual node holds for chunk index `chunk` of the static partition.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkFrame {
    pub round: Round,
    pub chunk: ChunkIndex,
    pub values: Vec<f32>,
}

impl ChunkFrame {
    /// Encodes this frame (without the length prefix).
    pub fn encode(&self) -> Vec<u8> {
        encode_chunk(self.round.get(), self.chunk.0, &self.values)
    }

    /// Decodes a frame payload, checking the header and that the length matches the announced count exactly.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let Some((header, body)) = bytes.split_first_chunk::<CHUNK_HEADER_BYTES>() else {
            return Err(DecodeError::Truncated {
                what: "chunk header",
                need: CHUNK_HEADER_BYTES,
                have: bytes.len(),
            });
        };
        if header[0] != CHUNK_FRAME_VERSION {
            return Err(DecodeError::Version {
                what: "chunk frame",
                got: header[0],
                supported: CHUNK_FRAME_VERSION,
            });
        }
        let round = u64::from_le_bytes(header[1..9].try_into().expect("8 bytes"));
        let chunk = u32::from_le_bytes(header[9..13].try_into().expect("4 bytes"));
        let count = u32::from_le_bytes(header[13..17].try_into().expect("4 bytes")) as usize;
        if count > MAX_CHUNK_VALUES {
            return Err(DecodeError::TooLarge {
                what: "chunk value count",
                got: count as u64,
                max: MAX_CHUNK_VALUES as u64,
            });
        }
        let need = 4 * count;
        if body.len() < need {
            return Err(DecodeError::Truncated {
                what: "chunk values",
                need,
                have: body.len(),
            });
        }
        if body.len() > need {
            return Err(DecodeError::TrailingBytes {
                what: "chunk frame",
                extra: body.len() - need,
            });
        }
        let values = body
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
            .collect();
        Ok(Self {
            round: Round(round),
            chunk: ChunkIndex(chunk),
            values,
        })
    }
}

/// Encodes a chunk frame from borrowed values, so a sender need not copy its chunk into a [`ChunkFrame`].
/// Panics if `values` exceeds [`MAX_CHUNK_VALUES`]: the partition of a model never produces such a chunk.
pub fn encode_chunk(round: u64, chunk: u32, values: &[f32]) -> Vec<u8> {
    assert!(
        values.len() <= MAX_CHUNK_VALUES,
        "chunk of {} values exceeds MAX_CHUNK_VALUES",
        values.len()
    );
    let mut out = Vec::with_capacity(CHUNK_HEADER_BYTES + 4 * values.len());
    out.push(CHUNK_FRAME_VERSION);
    out.extend_from_slice(&round.to_le_bytes());
    out.extend_from_slice(&chunk.to_le_bytes());
    out.extend_from_slice(&(values.len() as u32).to_le_bytes());
    // Sized first, then filled in place: a copy the compiler vectorises, where a push per value is not.
    out.resize(CHUNK_HEADER_BYTES + 4 * values.len(), 0);
    for (dst, v) in out[CHUNK_HEADER_BYTES..].chunks_exact_mut(4).zip(values) {
        dst.copy_from_slice(&v.to_le_bytes());
    }
    out
}

/// The receiver's answer to a chunk. A sender learns from it whether the edge it sent over is counted at the
/// other end: a refusal for [`RefuseReason::NotNeighbour`] means the edge is half-open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChunkReply {
    Accepted,
    Refused(RefuseReason),
}

/// Why a chunk was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RefuseReason {
    /// The sender is not a confirmed neighbour of the receiver in this round (never was, or a half-open edge).
    NotNeighbour,
    /// The round is over at the receiver, or too far in the future to buffer.
    WrongRound,
    /// The chunk index is not one of the partition's, or its length does not match that index.
    BadChunk,
    /// NaN or an infinity among the values.
    NonFinite,
    /// The same neighbour already delivered a chunk this round.
    Duplicate,
    /// A finite value too large for the model being trained: beyond the receiver's bound, which it derives
    /// from its own chunk's scale (`node::engine::ValueBounds`). Refused like NaN, because averaging it
    /// in overflows the aggregate or makes the next training step diverge (issue 14). Appended last: the
    /// variants before it keep their encoding.
    OutOfRange,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn chunks_round_trip(round in any::<u64>(), chunk in any::<u32>(),
                             values in proptest::collection::vec(any::<f32>().prop_filter("nan != nan", |v| !v.is_nan()), 0..300)) {
            let frame = ChunkFrame { round: Round(round), chunk: ChunkIndex(chunk), values };
            let bytes = frame.encode();
            prop_assert_eq!(bytes.len(), CHUNK_HEADER_BYTES + 4 * frame.values.len());
            prop_assert_eq!(ChunkFrame::decode(&bytes).unwrap(), frame);
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = ChunkFrame::decode(&bytes);
        }
    }

    #[test]
    fn nan_bits_survive_the_trip() {
        // Decoding must not silently change values: the engine, not the codec, decides what to refuse.
        let frame = ChunkFrame {
            round: Round(1),
            chunk: ChunkIndex(0),
            values: vec![f32::NAN, f32::INFINITY],
        };
        let back = ChunkFrame::decode(&frame.encode()).unwrap();
        assert!(back.values[0].is_nan());
        assert_eq!(back.values[1], f32::INFINITY);
    }

    #[test]
    fn header_errors_are_typed() {
        let mut bytes = encode_chunk(7, 2, &[1.0, 2.0]);
        assert!(matches!(
            ChunkFrame::decode(&bytes[..10]),
            Err(DecodeError::Truncated {
                what: "chunk header",
                ..
            })
        ));
        assert!(matches!(
            ChunkFrame::decode(&bytes[..bytes.len() - 1]),
            Err(DecodeError::Truncated {
                what: "chunk values",
                need: 8,
                have: 7
            })
        ));
        bytes.push(0);
        assert!(matches!(
            ChunkFrame::decode(&bytes),
            Err(DecodeError::TrailingBytes { extra: 1, .. })
        ));
        bytes[0] = 9;
        assert!(matches!(
            ChunkFrame::decode(&bytes),
            Err(DecodeError::Version { got: 9, .. })
        ));
    }

    /// The reply's encoding is part of the wire: each reason keeps its byte, and `OutOfRange` (added for
    /// issue 14) is a new one after them, so an older peer's replies still decode the same.
    #[test]
    fn refusal_reasons_keep_their_encoding() {
        use crate::codec::{decode_control, encode_control};
        let all = [
            (ChunkReply::Accepted, vec![0u8]),
            (ChunkReply::Refused(RefuseReason::NotNeighbour), vec![1, 0]),
            (ChunkReply::Refused(RefuseReason::WrongRound), vec![1, 1]),
            (ChunkReply::Refused(RefuseReason::BadChunk), vec![1, 2]),
            (ChunkReply::Refused(RefuseReason::NonFinite), vec![1, 3]),
            (ChunkReply::Refused(RefuseReason::Duplicate), vec![1, 4]),
            (ChunkReply::Refused(RefuseReason::OutOfRange), vec![1, 5]),
        ];
        for (reply, bytes) in all {
            assert_eq!(encode_control(&reply).unwrap(), bytes, "{reply:?}");
            assert_eq!(decode_control::<ChunkReply>(&bytes).unwrap(), reply);
        }
        assert!(
            decode_control::<ChunkReply>(&[1, 6]).is_err(),
            "unknown reason"
        );
    }

    #[test]
    fn a_huge_count_is_refused_before_allocation() {
        let mut bytes = encode_chunk(0, 0, &[]);
        bytes[13..17].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            ChunkFrame::decode(&bytes),
            Err(DecodeError::TooLarge { .. })
        ));
    }
}
