//! What a [`VnEngine`](super::VnEngine) takes and gives: [`VnInput`] from its driver (peers' bytes, its RN's
//! commands, time) and [`VnOutput`] for its driver to carry out. The shared vocabulary of the VN's rooms.

use std::sync::Arc;
use std::time::Duration;

use protocol::rnvn::{FromVirtualNode, ToVirtualNode};
use protocol::{ChunkFrame, RefuseReason, Round};
use serde::{Serialize, de::DeserializeOwned};

/// Identity of a VN as the engine needs it: ordered (determinism), serialisable (Cyclon entries).
pub trait VnIdentity: sampling::PeerId + Serialize + DeserializeOwned + Send + 'static {}
impl<T: sampling::PeerId + Serialize + DeserializeOwned + Send + 'static> VnIdentity for T {}

/// The shell's handle for an inbound chunk request, to answer it later (a libp2p response channel).
pub type ReplyToken = u64;

/// What the driver feeds a [`VnEngine`](super::VnEngine).
#[derive(Debug)]
pub enum VnInput<I> {
    /// A message from this VN's RN (the RN↔VN protocol: round starts, chunks, per-edge frames, stop).
    FromRn(ToVirtualNode),
    /// A control message from the authenticated peer `from`.
    Control { from: I, bytes: Vec<u8> },
    /// A chunk request from `from`, to be answered with a `Reply` carrying `token`.
    Chunk {
        from: I,
        /// Shared, as a sender's frame is: a driver that holds the frame in an `Arc` (the simulator's one
        /// encoding for all of a VN's neighbours) hands it over without a copy per receiver.
        bytes: Arc<Vec<u8>>,
        token: ReplyToken,
    },
    /// `from`'s answer to a chunk we sent for `round`.
    ChunkReply {
        from: I,
        round: Round,
        bytes: Vec<u8>,
    },
    /// A message to `to` could not be delivered (dial failure, timeout, connection closed).
    SendFailed { to: I },
    /// `peer` is gone: its connection closed and it could not be dialled again (a crashed or killed node).
    /// Open exchanges stop waiting for its chunk (as for a missed one) and the overlays drop it; it comes
    /// back through Cyclon when it talks again.
    PeerGone { peer: I },
    /// `from` asks which exchange this VN is at (catch-up); answer with a `ReplyRound` carrying `token`.
    RoundQuery {
        from: I,
        bytes: Vec<u8>,
        token: ReplyToken,
    },
    /// `from`'s answer to our round query.
    RoundAnswer { from: I, bytes: Vec<u8> },
    /// Our round query to `to` got no answer (dial failure, timeout, closed).
    RoundQueryFailed { to: I },
    /// A control message we sent was acknowledged `rtt` after it left (as the driver measured it): paces
    /// the overlay's sub-steps (`round_trips.rs`). A driver that does not measure never sends it.
    ControlRoundTrip { rtt: Duration },
    /// Time passed: due timers fire.
    Tick,
}

/// What a [`VnEngine`](super::VnEngine) asks its driver to do, or tells it.
#[derive(Debug, Clone, PartialEq)]
pub enum VnOutput<I> {
    SendControl {
        to: I,
        bytes: Vec<u8>,
    },
    /// Send a chunk frame (encoded once, shared by all neighbours of the round).
    SendChunk {
        to: I,
        round: Round,
        bytes: Arc<Vec<u8>>,
    },
    Reply {
        token: ReplyToken,
        bytes: Vec<u8>,
    },
    /// Ask `to` which exchange it is at (an empty request); its answer comes back as `VnInput::RoundAnswer`.
    SendRoundQuery {
        to: I,
    },
    /// Answer the round query `token` with `bytes` (an encoded `Option<Round>`).
    ReplyRound {
        token: ReplyToken,
        bytes: Vec<u8>,
    },
    ToRn(FromVirtualNode),
    /// Hand an accepted chunk copy to the RN as `FromVirtualNode::Received(frame)`, or with a `slot` (VNs
    /// whose [`VnConfig::edge_slots`](super::VnConfig::edge_slots) is set) as `FromVirtualNode::ReceivedOnEdge`. `from` (the neighbour VN
    /// that sent it) is for the driver's [`crate::observe::Observer`] only and never reaches the RN.
    Received {
        from: I,
        slot: Option<u32>,
        frame: ChunkFrame,
    },
    /// Something was refused; counted in the round summary, surfaced for logs and the event stream.
    Refused {
        from: I,
        what: RefusalKind,
    },
}

/// Kinds of refusal, for counting and logs.
#[derive(Debug, Clone, PartialEq)]
pub enum RefusalKind {
    /// Bytes that did not decode or broke a protocol limit.
    Malformed(String),
    /// A sender or a gossiped identity that is not on the peer list.
    NotAllowed,
    /// A chunk refused with this reason.
    Chunk(RefuseReason),
    /// A control message over its sender's rate (dropped unread).
    RateLimited,
}
