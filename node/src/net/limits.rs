//! Connection and stream limits of one VN's Swarm: what anyone who can reach a port, and what one listed peer,
//! can make a VN hold. Enforced by libp2p's own `connection_limits` behaviour, the transport's upgrade timeout,
//! request-response's per-connection stream cap and the control and chunk links' own bounds
//! (`super::control_link`, `super::chunk_link`); the numbers live here, each with the reason for its size.
//!
//! Bounds that follow (per VN; `F` = the run's largest chunk frame, `protocol::chunk::chunk_frame_bytes`):
//! - unauthenticated sockets: at most [`MAX_PENDING_INCOMING`] at once, each closed
//!   `Timing::handshake_timeout_ms` after it was accepted unless its handshake completed. Extra sockets are
//!   accepted and closed at once: descriptors stay within `MAX_PENDING_INCOMING` + the established bound.
//! - established: at most [`MAX_CONNECTIONS_PER_PEER`] per listed peer (an unlisted peer's connection is closed
//!   by the allow-list as soon as its handshake reveals who it is).
//! - inbound bytes held for one peer: at most `MAX_CONNECTIONS_PER_PEER` × [`CHUNK_STREAMS_PER_CONNECTION`] × F in
//!   chunk requests (the request-response chunk protocol, still accepted), one chunk frame F on its chunk
//!   stream, one control frame (`protocol::codec::MAX_CONTROL_BYTES`) and its reader's buffer: a peer has one
//!   chunk stream and one control stream to a VN, a newer one replacing the older, and a chunk stream's reader
//!   reads its next frame only once the VN answered the last ([`inbound_bytes_per_peer`]). Frame reads grow with
//!   the bytes that arrive (`super::codec::READ_AHEAD_BYTES` ahead at most, capacity at most twice what
//!   arrived), so a stream that announces a large frame and trickles costs what it sent.
//! - yamux: at most [`YAMUX_STREAMS_PER_CONNECTION`] streams on a connection, each holding at most its receive
//!   window (256 KiB) of bytes its reader has not taken: [`YAMUX_BYTES_PER_CONNECTION`] (12 MiB) a connection
//!   for streams at rest. yamux grows a stream's window only while its reader keeps up, up to its connection
//!   window (1 GiB, which libp2p-yamux 0.48 does not let us set).
//!
//! These bounds are per identity: a node's k identities, or a coalition's, multiply them (no budget spans the
//! identities of one node yet).

use std::time::Duration;

use libp2p::connection_limits::{self, ConnectionLimits};
use libp2p::memory_connection_limits;

/// Handshakes (TCP accept → pre-shared key → noise → yamux) in progress at once. Honest dials arrive in small
/// bursts: a VN is contacted by the peers of its view and of the rounds it negotiates, a few dozen at most even
/// when a whole network starts together. Past this, new sockets are closed on arrival; a connection flood thus
/// costs the VN this many descriptors for one handshake timeout, and an honest peer that loses the race is
/// refused only until the stalled sockets time out (its request fails and the overlay or Cyclon tries again).
pub const MAX_PENDING_INCOMING: u32 = 64;

/// Default limit on one handshake: a few round trips (multistream-select, noise XX, yamux), well within this
/// even on a slow link or with busy cores. A socket that has not authenticated by then is closed.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections with one peer at once. One is the norm (requests reuse it); two appear when both ends dial at
/// the same instant, and a third while a closing one is replaced. More is a peer opening connections to
/// multiply the streams and buffers it can make us hold.
pub const MAX_CONNECTIONS_PER_PEER: u32 = 4;

/// Chunk-protocol streams (inbound + outbound) on one connection. Between two VNs there is at most one chunk
/// each way per round, and a VN accepts chunks for at most `MAX_FUTURE_ROUNDS` rounds ahead of its own:
/// (MAX_FUTURE_ROUNDS + 1) per direction, with room for a late reply. Beyond this libp2p drops the stream
/// (inbound) or fails the request (outbound), which the sender sees as a failed delivery.
pub const CHUNK_STREAMS_PER_CONNECTION: usize =
    2 * (protocol::control::MAX_FUTURE_ROUNDS as usize + 1) + 2;

/// yamux streams open at once on one VN connection (yamux's default is 512, each with a receive window of
/// 256 KiB: 128 MiB a connection could make us buffer). What a connection carries at most: the chunk
/// requests ([`CHUNK_STREAMS_PER_CONNECTION`]), a chunk and a control stream each way, the round queries
/// (`behaviour::ROUND_STREAMS_PER_CONNECTION`), identify and ping each way: 24, with room for streams still
/// closing. Past it yamux refuses the stream (the opener sees a failed stream).
pub const YAMUX_STREAMS_PER_CONNECTION: usize = 48;

/// Bytes yamux may buffer for one connection's streams that their readers have not taken (its initial
/// receive window, 256 KiB, per stream). yamux grows a window only for a stream read faster than the link
/// delivers, so a peer cannot grow what it makes us hold by sending faster.
pub const YAMUX_BYTES_PER_CONNECTION: usize = YAMUX_STREAMS_PER_CONNECTION * 256 * 1024;

/// libp2p's connection-limits behaviour with the limits above. Outbound connections are our own choice and
/// not limited here.
pub fn connection_limits() -> connection_limits::Behaviour {
    connection_limits::Behaviour::new(
        ConnectionLimits::default()
            .with_max_pending_incoming(Some(MAX_PENDING_INCOMING))
            .with_max_established_per_peer(Some(MAX_CONNECTIONS_PER_PEER)),
    )
}

/// Share of the machine's physical memory above which a node's VNs refuse new connections (inbound and
/// outbound): past it, a process holding many VNs (or under a flood the limits above did not foresee) stops
/// growing by connections instead of meeting the out-of-memory killer. Connections already open keep working.
pub const MAX_MEMORY_FRACTION: f64 = 0.9;

/// libp2p's memory-connection-limits behaviour at [`MAX_MEMORY_FRACTION`].
pub fn memory_limits() -> memory_connection_limits::Behaviour {
    memory_connection_limits::Behaviour::with_max_percentage(MAX_MEMORY_FRACTION)
}

/// The most inbound frame bytes one listed peer can make a VN hold at once, with chunk frames of at most
/// `max_chunk_frame` bytes.
pub const fn inbound_bytes_per_peer(max_chunk_frame: usize) -> usize {
    MAX_CONNECTIONS_PER_PEER as usize * CHUNK_STREAMS_PER_CONNECTION * max_chunk_frame
        + max_chunk_frame
        + protocol::codec::MAX_CONTROL_BYTES
        + super::control_link::READ_BUFFER
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_can_hold_a_bounded_number_of_frames() {
        // MovieLens at k = 2: chunks of ~103,340 values.
        let frame = protocol::chunk::chunk_frame_bytes(103_340);
        let bound = inbound_bytes_per_peer(frame);
        assert_eq!(CHUNK_STREAMS_PER_CONNECTION, 8);
        // 4 × 8 × 413 KB + 413 KB + 64 KiB + 1 KiB ≈ 13.7 MB: bounded and independent of what a frame
        // announces.
        assert!(bound < 14_000_000, "{bound}");
        assert!(bound > (4 * 8 + 1) * frame);
    }
}
