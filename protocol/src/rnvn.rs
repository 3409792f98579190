//! Messages between a real node (RN) and one of its virtual nodes (VN) when the VN runs outside the RN's
//! process (planned: today VNs run in-process and these travel over in-memory channels as the same values).
//!
//! The RN hands VN s its chunk for round t and later collects everything the VN received. Bulk values travel
//! as [`ChunkFrame`]s on the RN↔VN connection, which is private to the operator: nothing here ever reaches
//! another node, so it may name the RN freely.

use serde::{Deserialize, Serialize};

use crate::{ChunkFrame, Round};

/// RN → VN.
#[derive(Debug, Clone, PartialEq)]
pub enum ToVirtualNode {
    /// Start exchanging `chunk` for its round: send it to every confirmed neighbour of that round.
    Exchange(ChunkFrame),
    /// Leave the network.
    Stop,
}

/// VN → RN.
#[derive(Debug, Clone, PartialEq)]
pub enum FromVirtualNode {
    /// One copy received from a neighbour in `round` (the frame carries round and chunk index).
    Received(ChunkFrame),
    /// The exchange of `round` is over at this VN: all copies it will hand over for the round have been sent.
    Done(RoundSummary),
}

/// What a VN reports at the end of a round's exchange. Counts only: nothing identifies the neighbours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RoundSummary {
    pub round: Round,
    /// Confirmed neighbours in the round's overlay.
    pub neighbours: u32,
    /// Copies received and accepted.
    pub received: u32,
    /// Copies sent that the neighbour accepted.
    pub delivered: u32,
    /// Frames refused (malformed, wrong round, bad chunk, non-finite, not a neighbour).
    pub refused: u32,
    /// Bytes of chunk frames sent (payload + length prefix), the part the cost model 4·d·r describes.
    pub chunk_bytes_sent: u64,
    /// Payload bytes sent and received on the wire for the round (chunks and control).
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub messages_sent: u64,
    pub messages_received: u64,
}
