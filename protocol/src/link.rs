//! The RN↔VN link: how [`crate::rnvn`] messages travel when a virtual node runs in a VN host process
//! (`node vn`) instead of inside its real node (issue 13: a VN's address then says nothing about its RN).
//!
//! One link connection carries the messages of several VNs; each message names the VN by the slot number
//! the RN gave it (its VN index s, private to the link) and carries a per-direction sequence number, because
//! request-response substreams may complete out of order (a large `Received` chunk overtaken by the round's
//! `Done` would lose the chunk). The receiver delivers in sequence order.
//!
//! ```text
//! offset  size  field
//! 0       1     version (LINK_VERSION)
//! 1       1     kind (LinkBody variant, see KIND_*)
//! 2       4     vn slot, u32 LE
//! 6       8     sequence number, u64 LE
//! 14      ...   body: u64/u32 LE integers, chunk frames behind their 4-byte length prefix, or the raw bytes
//!               of a setup / address / reason / control-encoded summary (the rest of the message)
//! ```
//!
//! Nothing read here is trusted: every count and length is checked against a named limit before use.

use crate::chunk::ChunkFrame;
use crate::rnvn::{FromVirtualNode, MAX_EDGE_SLOTS, RoundSummary, ToVirtualNode};
use crate::{DecodeError, EncodeError, Round, frame};

/// Version byte of the layout above. 2: a VN's round summary carries its overlay wait
/// ([`RoundSummary::overlay_wait_us`]).
pub const LINK_VERSION: u8 = 2;

/// Bytes before the body.
pub const LINK_HEADER_BYTES: usize = 1 + 1 + 4 + 8;

/// Largest setup (the RN's run parameters for a VN, encoded by the node; a few hundred bytes plus the
/// rounds the RN sits out).
pub const MAX_SETUP_BYTES: usize = 1 << 20;

/// Largest address or refusal reason.
pub const MAX_TEXT_BYTES: usize = 1024;

/// Largest link message for a run whose chunk frames are at most `max_chunk_frame` bytes: a per-edge batch
/// of [`MAX_EDGE_SLOTS`] frames, or a setup, whichever is larger.
pub const fn max_link_message_bytes(max_chunk_frame: usize) -> usize {
    let frames = (max_chunk_frame + frame::LENGTH_PREFIX_BYTES) * MAX_EDGE_SLOTS;
    let body = if frames > MAX_SETUP_BYTES {
        frames
    } else {
        MAX_SETUP_BYTES
    };
    LINK_HEADER_BYTES + 16 + body
}

/// What one link message says.
#[derive(Debug, Clone, PartialEq)]
pub enum LinkBody {
    /// RN → host: run the VN of this slot with these parameters (opaque here: the node's encoding).
    Setup(Vec<u8>),
    /// Host → RN: the VN of this slot runs and listens at this address (a multiaddr's bytes).
    Ready(Vec<u8>),
    /// Host → RN: the VN of this slot will not run, and why.
    Refused(String),
    /// RN → host: a command for the VN (round starts included).
    ToVn(ToVirtualNode),
    /// Host → RN: a report of the VN.
    FromVn(FromVirtualNode),
}

/// One message on the link.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkMessage {
    pub vn: u32,
    pub seq: u64,
    pub body: LinkBody,
}

const KIND_SETUP: u8 = 1;
const KIND_READY: u8 = 2;
const KIND_REFUSED: u8 = 3;
const KIND_START: u8 = 4;
const KIND_EXCHANGE: u8 = 5;
const KIND_PER_EDGE: u8 = 6;
const KIND_PER_EDGE_FRAMES: u8 = 7;
const KIND_STOP: u8 = 8;
const KIND_RECEIVED: u8 = 9;
const KIND_RECEIVED_ON_EDGE: u8 = 10;
const KIND_EDGES: u8 = 11;
const KIND_DELIVERED_ON_EDGES: u8 = 12;
const KIND_DONE: u8 = 13;
const KIND_BEHIND: u8 = 14;
const KIND_LATE_DELIVERED: u8 = 15;
const KIND_PREPARE: u8 = 16;

fn too_large(what: &'static str, got: usize, max: usize) -> EncodeError {
    EncodeError::TooLarge {
        what,
        got: got as u64,
        max: max as u64,
    }
}

impl LinkMessage {
    /// Encodes the message; chunk frames over `max_chunk_frame` bytes are refused (the receiver would).
    pub fn encode(&self, max_chunk_frame: usize) -> Result<Vec<u8>, EncodeError> {
        let mut out = Vec::with_capacity(LINK_HEADER_BYTES + 32);
        out.push(LINK_VERSION);
        out.push(0); // kind, set below
        out.extend_from_slice(&self.vn.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        let frame = |f: &ChunkFrame, out: &mut Vec<u8>| -> Result<(), EncodeError> {
            frame::write_frame(&f.encode(), max_chunk_frame, out)
        };
        let kind = match &self.body {
            LinkBody::Setup(b) => {
                if b.len() > MAX_SETUP_BYTES {
                    return Err(too_large("link setup", b.len(), MAX_SETUP_BYTES));
                }
                out.extend_from_slice(b);
                KIND_SETUP
            }
            LinkBody::Ready(b) => {
                if b.len() > MAX_TEXT_BYTES {
                    return Err(too_large("link address", b.len(), MAX_TEXT_BYTES));
                }
                out.extend_from_slice(b);
                KIND_READY
            }
            LinkBody::Refused(r) => {
                // A reason is for people: cut it (on a character boundary) rather than fail.
                let mut end = r.len().min(MAX_TEXT_BYTES);
                while !r.is_char_boundary(end) {
                    end -= 1;
                }
                out.extend_from_slice(&r.as_bytes()[..end]);
                KIND_REFUSED
            }
            LinkBody::ToVn(ToVirtualNode::StartRound(round)) => {
                out.extend_from_slice(&round.get().to_le_bytes());
                KIND_START
            }
            LinkBody::ToVn(ToVirtualNode::Prepare(round)) => {
                out.extend_from_slice(&round.get().to_le_bytes());
                KIND_PREPARE
            }
            LinkBody::ToVn(ToVirtualNode::Exchange(f)) => {
                frame(f, &mut out)?;
                KIND_EXCHANGE
            }
            LinkBody::ToVn(ToVirtualNode::PerEdge(round)) => {
                out.extend_from_slice(&round.get().to_le_bytes());
                KIND_PER_EDGE
            }
            LinkBody::ToVn(ToVirtualNode::PerEdgeFrames { round, frames }) => {
                if frames.len() > MAX_EDGE_SLOTS {
                    return Err(too_large("per-edge frames", frames.len(), MAX_EDGE_SLOTS));
                }
                out.extend_from_slice(&round.get().to_le_bytes());
                out.extend_from_slice(&(frames.len() as u32).to_le_bytes());
                for f in frames {
                    frame(f, &mut out)?;
                }
                KIND_PER_EDGE_FRAMES
            }
            LinkBody::ToVn(ToVirtualNode::Stop) => KIND_STOP,
            LinkBody::FromVn(FromVirtualNode::Received(f)) => {
                frame(f, &mut out)?;
                KIND_RECEIVED
            }
            LinkBody::FromVn(FromVirtualNode::ReceivedOnEdge { slot, frame: f }) => {
                out.extend_from_slice(&slot.to_le_bytes());
                frame(f, &mut out)?;
                KIND_RECEIVED_ON_EDGE
            }
            LinkBody::FromVn(FromVirtualNode::Edges { round, slots }) => {
                out.extend_from_slice(&round.get().to_le_bytes());
                out.extend_from_slice(&slots.to_le_bytes());
                KIND_EDGES
            }
            LinkBody::FromVn(FromVirtualNode::DeliveredOnEdges { round, accepted }) => {
                if accepted.len() > MAX_EDGE_SLOTS {
                    return Err(too_large("edge flags", accepted.len(), MAX_EDGE_SLOTS));
                }
                out.extend_from_slice(&round.get().to_le_bytes());
                out.extend_from_slice(&(accepted.len() as u32).to_le_bytes());
                out.extend(accepted.iter().map(|&a| a as u8));
                KIND_DELIVERED_ON_EDGES
            }
            LinkBody::FromVn(FromVirtualNode::Done(summary)) => {
                out.extend_from_slice(&crate::codec::encode_control(summary)?);
                KIND_DONE
            }
            LinkBody::FromVn(FromVirtualNode::Behind { exchange }) => {
                out.extend_from_slice(&exchange.get().to_le_bytes());
                KIND_BEHIND
            }
            LinkBody::FromVn(FromVirtualNode::LateDeliveredOnEdge { round, slot }) => {
                out.extend_from_slice(&round.get().to_le_bytes());
                out.extend_from_slice(&slot.to_le_bytes());
                KIND_LATE_DELIVERED
            }
        };
        out[1] = kind;
        Ok(out)
    }

    /// Decodes a message whose chunk frames are at most `max_chunk_frame` bytes. Checks structure only; the
    /// VN engine (or the RN engine) checks rounds, chunk indices and values as it does for in-process VNs.
    pub fn decode(bytes: &[u8], max_chunk_frame: usize) -> Result<Self, DecodeError> {
        let Some((header, body)) = bytes.split_first_chunk::<LINK_HEADER_BYTES>() else {
            return Err(DecodeError::Truncated {
                what: "link header",
                need: LINK_HEADER_BYTES,
                have: bytes.len(),
            });
        };
        if header[0] != LINK_VERSION {
            return Err(DecodeError::Version {
                what: "link message",
                got: header[0],
                supported: LINK_VERSION,
            });
        }
        let vn = u32::from_le_bytes(header[2..6].try_into().expect("4 bytes"));
        let seq = u64::from_le_bytes(header[6..14].try_into().expect("8 bytes"));
        let mut r = Reader { rest: body };
        let body = match header[1] {
            KIND_SETUP => LinkBody::Setup(r.rest_bounded("link setup", MAX_SETUP_BYTES)?),
            KIND_READY => LinkBody::Ready(r.rest_bounded("link address", MAX_TEXT_BYTES)?),
            KIND_REFUSED => {
                let b = r.rest_bounded("refusal reason", MAX_TEXT_BYTES)?;
                LinkBody::Refused(String::from_utf8_lossy(&b).into_owned())
            }
            KIND_START => LinkBody::ToVn(ToVirtualNode::StartRound(Round(r.u64()?))),
            KIND_PREPARE => LinkBody::ToVn(ToVirtualNode::Prepare(Round(r.u64()?))),
            KIND_EXCHANGE => LinkBody::ToVn(ToVirtualNode::Exchange(r.frame(max_chunk_frame)?)),
            KIND_PER_EDGE => LinkBody::ToVn(ToVirtualNode::PerEdge(Round(r.u64()?))),
            KIND_PER_EDGE_FRAMES => {
                let round = Round(r.u64()?);
                let n = r.count("per-edge frames")?;
                let frames = (0..n)
                    .map(|_| r.frame(max_chunk_frame))
                    .collect::<Result<_, _>>()?;
                LinkBody::ToVn(ToVirtualNode::PerEdgeFrames { round, frames })
            }
            KIND_STOP => LinkBody::ToVn(ToVirtualNode::Stop),
            KIND_RECEIVED => LinkBody::FromVn(FromVirtualNode::Received(r.frame(max_chunk_frame)?)),
            KIND_RECEIVED_ON_EDGE => {
                let slot = r.u32()?;
                let frame = r.frame(max_chunk_frame)?;
                LinkBody::FromVn(FromVirtualNode::ReceivedOnEdge { slot, frame })
            }
            KIND_EDGES => {
                let round = Round(r.u64()?);
                let slots = r.u32()?;
                if slots as usize > MAX_EDGE_SLOTS {
                    return Err(DecodeError::TooLarge {
                        what: "edge slots",
                        got: slots as u64,
                        max: MAX_EDGE_SLOTS as u64,
                    });
                }
                LinkBody::FromVn(FromVirtualNode::Edges { round, slots })
            }
            KIND_DELIVERED_ON_EDGES => {
                let round = Round(r.u64()?);
                let n = r.count("edge flags")?;
                let flags = r.take(n, "edge flags")?;
                let accepted = flags
                    .iter()
                    .map(|&b| match b {
                        0 => Ok(false),
                        1 => Ok(true),
                        _ => Err(DecodeError::Invalid(format!("edge flag {b} is not 0 or 1"))),
                    })
                    .collect::<Result<_, _>>()?;
                LinkBody::FromVn(FromVirtualNode::DeliveredOnEdges { round, accepted })
            }
            KIND_DONE => {
                let b = r.rest_bounded("round summary", crate::codec::MAX_CONTROL_BYTES)?;
                let summary: RoundSummary = crate::codec::decode_control(&b)?;
                LinkBody::FromVn(FromVirtualNode::Done(summary))
            }
            KIND_BEHIND => LinkBody::FromVn(FromVirtualNode::Behind {
                exchange: Round(r.u64()?),
            }),
            KIND_LATE_DELIVERED => {
                let round = Round(r.u64()?);
                let slot = r.u32()?;
                LinkBody::FromVn(FromVirtualNode::LateDeliveredOnEdge { round, slot })
            }
            k => {
                return Err(DecodeError::Invalid(format!(
                    "unknown link message kind {k}"
                )));
            }
        };
        if !r.rest.is_empty() {
            return Err(DecodeError::TrailingBytes {
                what: "link message",
                extra: r.rest.len(),
            });
        }
        Ok(Self { vn, seq, body })
    }
}

/// A cursor over a message body.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        if self.rest.len() < n {
            return Err(DecodeError::Truncated {
                what,
                need: n,
                have: self.rest.len(),
            });
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        let b = self.take(8, "link integer")?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.take(4, "link integer")?;
        Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }

    /// A count of at most [`MAX_EDGE_SLOTS`].
    fn count(&mut self, what: &'static str) -> Result<usize, DecodeError> {
        let n = self.u32()? as usize;
        if n > MAX_EDGE_SLOTS {
            return Err(DecodeError::TooLarge {
                what,
                got: n as u64,
                max: MAX_EDGE_SLOTS as u64,
            });
        }
        Ok(n)
    }

    fn frame(&mut self, max: usize) -> Result<ChunkFrame, DecodeError> {
        let (payload, rest) = frame::split_frame(self.rest, max)?;
        self.rest = rest;
        ChunkFrame::decode(payload)
    }

    fn rest_bounded(&mut self, what: &'static str, max: usize) -> Result<Vec<u8>, DecodeError> {
        if self.rest.len() > max {
            return Err(DecodeError::TooLarge {
                what,
                got: self.rest.len() as u64,
                max: max as u64,
            });
        }
        Ok(std::mem::take(&mut self.rest).to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ChunkIndex;
    use crate::rnvn::RefusalCounts;

    fn chunk(round: u64, values: &[f32]) -> ChunkFrame {
        ChunkFrame {
            round: Round(round),
            chunk: ChunkIndex(3),
            values: values.to_vec(),
        }
    }

    fn every_kind() -> Vec<LinkBody> {
        vec![
            LinkBody::Setup(vec![1, 2, 3]),
            LinkBody::Ready(b"/ip4/127.0.0.1/tcp/4001".to_vec()),
            LinkBody::Refused("no such VN".into()),
            LinkBody::ToVn(ToVirtualNode::StartRound(Round(7))),
            LinkBody::ToVn(ToVirtualNode::Prepare(Round(0))),
            LinkBody::ToVn(ToVirtualNode::Exchange(chunk(7, &[1.0, -2.5]))),
            LinkBody::ToVn(ToVirtualNode::PerEdge(Round(8))),
            LinkBody::ToVn(ToVirtualNode::PerEdgeFrames {
                round: Round(8),
                frames: vec![chunk(8, &[0.5]), chunk(8, &[]), chunk(8, &[3.0, 4.0, 5.0])],
            }),
            LinkBody::ToVn(ToVirtualNode::Stop),
            LinkBody::FromVn(FromVirtualNode::Received(chunk(9, &[f32::MAX, 0.0]))),
            LinkBody::FromVn(FromVirtualNode::ReceivedOnEdge {
                slot: 2,
                frame: chunk(9, &[1.5]),
            }),
            LinkBody::FromVn(FromVirtualNode::Edges {
                round: Round(9),
                slots: 4,
            }),
            LinkBody::FromVn(FromVirtualNode::DeliveredOnEdges {
                round: Round(9),
                accepted: vec![true, false, true],
            }),
            LinkBody::FromVn(FromVirtualNode::Done(RoundSummary {
                round: Round(9),
                neighbours: 4,
                received: 3,
                delivered: 4,
                refused: 1,
                refused_by_reason: RefusalCounts {
                    duplicate: 1,
                    ..RefusalCounts::default()
                },
                chunk_bytes_sent: 1234,
                bytes_sent: 5678,
                bytes_received: 91011,
                messages_sent: 12,
                messages_received: 13,
                overlay_wait_us: 14_500,
            })),
            LinkBody::FromVn(FromVirtualNode::Behind {
                exchange: Round(42),
            }),
            LinkBody::FromVn(FromVirtualNode::LateDeliveredOnEdge {
                round: Round(43),
                slot: 5,
            }),
        ]
    }

    #[test]
    fn every_message_round_trips() {
        for (i, body) in every_kind().into_iter().enumerate() {
            let m = LinkMessage {
                vn: i as u32,
                seq: 1000 + i as u64,
                body,
            };
            let bytes = m.encode(1024).unwrap();
            assert_eq!(LinkMessage::decode(&bytes, 1024).unwrap(), m, "kind {i}");
        }
    }

    #[test]
    fn truncations_and_corruptions_are_errors_not_panics() {
        for body in every_kind() {
            let m = LinkMessage {
                vn: 1,
                seq: 2,
                body,
            };
            let bytes = m.encode(1024).unwrap();
            // Every prefix and every extension decodes to an error or a message, never a panic (kinds whose
            // body is "the rest", setup/address/reason, have valid prefixes).
            for cut in 0..bytes.len() {
                let _ = LinkMessage::decode(&bytes[..cut], 1024);
            }
            let mut extra = bytes.clone();
            extra.push(0);
            let _ = LinkMessage::decode(&extra, 1024);
        }
        assert!(matches!(
            LinkMessage::decode(&[9; LINK_HEADER_BYTES], 1024),
            Err(DecodeError::Version { .. })
        ));
        let mut unknown = vec![LINK_VERSION, 200];
        unknown.extend_from_slice(&[0; 12]);
        assert!(matches!(
            LinkMessage::decode(&unknown, 1024),
            Err(DecodeError::Invalid(_))
        ));
    }

    #[test]
    fn trailing_bytes_after_a_fixed_body_are_refused() {
        let m = LinkMessage {
            vn: 0,
            seq: 0,
            body: LinkBody::ToVn(ToVirtualNode::StartRound(Round(1))),
        };
        let mut bytes = m.encode(64).unwrap();
        bytes.push(1);
        assert!(matches!(
            LinkMessage::decode(&bytes, 64),
            Err(DecodeError::TrailingBytes { .. })
        ));
    }

    #[test]
    fn limits_hold_both_ways() {
        let big = LinkMessage {
            vn: 0,
            seq: 0,
            body: LinkBody::ToVn(ToVirtualNode::Exchange(chunk(1, &[0.0; 100]))),
        };
        // The frame is 17 + 400 bytes: a receiver allowing 100 refuses it, and so does the sender.
        assert!(big.encode(100).is_err());
        let bytes = big.encode(1000).unwrap();
        assert!(LinkMessage::decode(&bytes, 100).is_err());
        // A count above MAX_EDGE_SLOTS is refused before any frame is read.
        let mut many = vec![LINK_VERSION, KIND_PER_EDGE_FRAMES];
        many.extend_from_slice(&[0; 12]);
        many.extend_from_slice(&1u64.to_le_bytes());
        many.extend_from_slice(&(MAX_EDGE_SLOTS as u32 + 1).to_le_bytes());
        assert!(matches!(
            LinkMessage::decode(&many, 1000),
            Err(DecodeError::TooLarge { .. })
        ));
        let flags = LinkMessage {
            vn: 0,
            seq: 0,
            body: LinkBody::FromVn(FromVirtualNode::DeliveredOnEdges {
                round: Round(1),
                accepted: vec![true; 2],
            }),
        };
        let mut bytes = flags.encode(64).unwrap();
        *bytes.last_mut().unwrap() = 2;
        assert!(matches!(
            LinkMessage::decode(&bytes, 64),
            Err(DecodeError::Invalid(_))
        ));
        assert!(max_link_message_bytes(1000) >= (1004) * MAX_EDGE_SLOTS);
    }
}
