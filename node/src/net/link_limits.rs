//! What one peer of the RN↔VN link can make the other end hold: above all what one tenant (a real node) can
//! make a VN host hold, since a host serves VNs of several nodes and one must not exhaust it for the others.
//! Enforced by the link's codec (`super::link_codec`: a message's length prefix, bytes being read per
//! connection), libp2p's connection limits, request-response's stream cap and the link task
//! (`super::link`: bytes held out of order or not yet taken, bytes sent and not acknowledged); past a bound
//! the peer's link is reset with a warning naming it, and only its VNs stop.
//!
//! Per peer, with `m` = [`LinkBounds::message_bytes`]:
//! - messages: at most `m` bytes each, refused from the length prefix;
//! - being read: at most [`LinkBounds::reading_bytes`] per connection (a frame's buffer grows with the bytes
//!   that arrive, and each growth is charged first), [`LINK_CONNECTIONS_PER_PEER`] connections;
//! - received and not yet taken (waiting for a missing sequence number, or delivered and not yet handed on by
//!   the host or the node): at most [`LinkBounds::held_bytes`];
//! - sent and not yet acknowledged: at most [`LinkBounds::unacked_bytes`] (a peer that does not read what it
//!   is sent is reset, rather than making the other end queue for it).
//!
//! A VN host adds, per tenant (one VN of a node per host): its VN's command queue
//! (`VN_COMMAND_CAPACITY` commands of at most `m`) and its VN's report queue ([`HOST_REPORTS_PER_VN`]
//! reports of at most `m`: the host refuses a setup whose chunks do not fit a message). [`LinkBounds::for_tenant`]
//! splits one stated budget `T` among all of these, so a tenant can make a host hold at most `T`
//! ([`LinkBounds::tenant_total`]) and a host serving `n` nodes at most `n × T`.

use protocol::link::{LINK_HEADER_BYTES, MAX_SETUP_BYTES, max_link_message_bytes};
use protocol::rnvn::MAX_EDGE_SLOTS;

/// No link message is longer, whatever the run: a per-edge batch of large chunks (ResNet-18 at k = 1 has
/// 45 MB chunks) fits, and a larger one is a run to split over more VNs.
pub const MAX_LINK_MESSAGE: usize = 1 << 30;

/// Connections with one link peer at once: one is the norm (the node dials its host); a second while a
/// restarted node's new connection replaces one the host has not yet seen close.
pub const LINK_CONNECTIONS_PER_PEER: u32 = 2;

/// Link handshakes in progress at once on a host: its nodes dial once at start and after a restart; only
/// allow-listed identities get further.
pub const LINK_PENDING_INCOMING: u32 = 16;

/// Request streams (both ways) in flight on one link connection. A node has at most one VN per host
/// (`placement.rs`), which in a round sends up to `MAX_EDGE_SLOTS` copies it received plus a handful of
/// reports, and takes a start, a chunk and a stop; twice that covers a round overlapping the next. Past it
/// libp2p drops the stream (the sender sees a failure and resets the link).
pub const LINK_STREAMS: usize = 2 * (MAX_EDGE_SLOTS + 8);

/// yamux streams at once on a link connection: the request streams and room for those still closing.
pub const LINK_YAMUX_STREAMS: usize = LINK_STREAMS + 16;

/// Messages held ahead of a missing one. A large message overtaken by a round's small ones leaves a few
/// hundred waiting; far more is a lost message (the byte bound usually comes first).
pub const MAX_REORDER_MESSAGES: usize = 4096;

/// Reports a hosted VN may have queued for the host's loop, which takes one from each VN in turn: a VN that
/// reports faster than its node's link takes them waits, alone.
pub const HOST_REPORTS_PER_VN: usize = 8;

/// Commands a hosted VN may have queued (the VN's command channel, `VN_COMMAND_CAPACITY`, restated here for
/// the budget; a test in `runtime::vn_host` checks they agree).
pub const HOST_COMMANDS_PER_VN: usize = 8;

/// A VN host's default budget per tenant (`tenant_bytes` in its config): messages up to 32 MiB (a chunk of 8
/// million parameters, or a per-edge batch of smaller ones).
pub const DEFAULT_TENANT_BYTES: usize = 1 << 30;

/// The smallest budget a host accepts: a setup must fit a message.
pub const MIN_TENANT_BYTES: usize = 32 * (MAX_SETUP_BYTES + LINK_HEADER_BYTES + 16);

/// The byte bounds of one link end, per peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkBounds {
    /// The longest message; longer ones are refused from their length prefix.
    pub message_bytes: usize,
    /// Bytes of messages being read at once on one connection.
    pub reading_bytes: usize,
    /// Bytes of messages received and not yet taken by the consumer (out of order, or in order and queued),
    /// each counted with the event that carries it (so the count of queued messages is bounded too).
    pub held_bytes: usize,
    /// Bytes of messages sent and not yet acknowledged.
    pub unacked_bytes: usize,
}

impl LinkBounds {
    /// A node's end, for a run whose chunk frames are at most `max_chunk_frame` bytes: a message is at most a
    /// per-edge batch or a setup, and each budget holds two of the largest (a round of one VN's copies, and
    /// the next round's).
    pub fn for_run(max_chunk_frame: usize) -> Self {
        let m = max_link_message_bytes(max_chunk_frame).min(MAX_LINK_MESSAGE);
        Self {
            message_bytes: m,
            reading_bytes: 2 * m,
            held_bytes: 2 * m,
            unacked_bytes: 2 * m,
        }
    }

    /// A VN host's end, from its per-tenant budget `tenant_bytes` (at least [`MIN_TENANT_BYTES`]): messages of
    /// T/32; 4 messages being read per connection (T/4 for both connections), 4 held, 4 unacknowledged, and
    /// the VN's 8 commands and 8 reports: T in all.
    pub fn for_tenant(tenant_bytes: usize) -> Self {
        let m = (tenant_bytes / 32).min(MAX_LINK_MESSAGE);
        Self {
            message_bytes: m,
            reading_bytes: 4 * m,
            held_bytes: 4 * m,
            unacked_bytes: 4 * m,
        }
    }

    /// The most one peer can make this end hold in link messages.
    pub fn link_total(&self) -> usize {
        LINK_CONNECTIONS_PER_PEER as usize * self.reading_bytes
            + self.held_bytes
            + self.unacked_bytes
    }

    /// The most one tenant can make a VN host hold: its link, its VN's commands and reports.
    pub fn tenant_total(&self) -> usize {
        self.link_total() + (HOST_COMMANDS_PER_VN + HOST_REPORTS_PER_VN) * self.message_bytes
    }

    /// Whether chunk frames of `max_chunk_frame` bytes fit one message (a report of one received copy).
    pub fn fits_chunk(&self, max_chunk_frame: usize) -> bool {
        max_chunk_frame + protocol::frame::LENGTH_PREFIX_BYTES + LINK_HEADER_BYTES + 16
            <= self.message_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_is_held_to_its_budget() {
        let b = LinkBounds::for_tenant(DEFAULT_TENANT_BYTES);
        assert_eq!(b.message_bytes, 32 << 20);
        assert_eq!(b.tenant_total(), DEFAULT_TENANT_BYTES);
        let small = LinkBounds::for_tenant(MIN_TENANT_BYTES);
        assert!(small.tenant_total() <= MIN_TENANT_BYTES);
        assert!(small.message_bytes >= MAX_SETUP_BYTES + LINK_HEADER_BYTES);
    }

    #[test]
    fn a_nodes_bounds_follow_its_run() {
        // MovieLens at k = 2: chunk frames of 413 KB, a per-edge batch of 256 of them about 106 MB.
        let frame = protocol::chunk::chunk_frame_bytes(103_340);
        let b = LinkBounds::for_run(frame);
        assert_eq!(b.message_bytes, max_link_message_bytes(frame));
        assert!(b.link_total() < 1 << 30, "{}", b.link_total());
        // The largest chunks allowed hit the absolute cap.
        let huge = LinkBounds::for_run(protocol::chunk::MAX_CHUNK_FRAME_BYTES);
        assert_eq!(huge.message_bytes, MAX_LINK_MESSAGE);
        assert!(LinkBounds::for_tenant(DEFAULT_TENANT_BYTES).fits_chunk(frame));
    }
}
