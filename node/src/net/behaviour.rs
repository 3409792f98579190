//! The libp2p behaviour of one virtual node: an allow-list (permissioning), identify, ping, two Shatter
//! request-response protocols (chunks, and the round query of catch-up) and the streams that carry control
//! messages (`super::control_link`).

use std::sync::Arc;
use std::time::Duration;

use libp2p::allow_block_list::{self, AllowedPeers};
use libp2p::identity::Keypair;
use libp2p::request_response::{self, ProtocolSupport};
use libp2p::swarm::NetworkBehaviour;
use libp2p::{StreamProtocol, identify, ping};
use libp2p::{connection_limits, memory_connection_limits};

use super::codec::FrameCodec;
use super::limits;

/// Timeouts chosen for Shatter rather than libp2p's 10 s defaults.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// A chunk request: one chunk of ResNet-18 at k = 1 is 45 MB, which a slow link needs well over 10 s for.
    pub chunk_request: Duration,
    /// A control stream's opening (dial included) and a round query: small, and a lost one is cheaper to
    /// time out fast (Cyclon drops the target).
    pub control_request: Duration,
    /// A connection with no stream: rounds include local training, often longer than libp2p's 10 s, and
    /// re-dialling every round costs a handshake per neighbour.
    pub idle_connection: Duration,
    /// From accepting (or dialling) a socket to a multiplexed, authenticated connection; a socket that has not
    /// got there by then is closed. The node builder sets it from `Timing::handshake_timeout_ms` (what a node
    /// config sets); default [`super::limits::HANDSHAKE_TIMEOUT`].
    pub handshake: Duration,
    /// A connection that answered no ping for this long is closed and its peer, if it has no other, gone
    /// (`super::liveness`); from `Timing::peer_silence_ms`.
    pub peer_silence: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            chunk_request: Duration::from_secs(120),
            control_request: Duration::from_secs(5),
            idle_connection: Duration::from_secs(300),
            handshake: super::limits::HANDSHAKE_TIMEOUT,
            peer_silence: super::liveness::DEFAULT_PEER_SILENCE,
        }
    }
}

/// Largest chunk reply: an encoded `ChunkReply` is two bytes; 64 leaves room for future variants.
const MAX_CHUNK_REPLY_BYTES: usize = 64;

/// Largest round query: the request is empty (a non-empty one is refused by the VN); 8 bytes of slack.
pub const MAX_ROUND_QUERY_BYTES: usize = 8;

/// Largest round answer: an encoded `Option<Round>` is at most 10 bytes (a tag and a varint u64).
pub const MAX_ROUND_ANSWER_BYTES: usize = 16;

/// Round-query streams on one connection: a VN asks a peer once per probe, so a few cover a late answer.
pub const ROUND_STREAMS_PER_CONNECTION: usize = 4;

#[derive(NetworkBehaviour)]
pub struct VnBehaviour {
    /// First, so that a connection over the limits is denied before any other behaviour sets up state for it.
    pub limits: connection_limits::Behaviour,
    pub memory: memory_connection_limits::Behaviour,
    pub allow: allow_block_list::Behaviour<AllowedPeers>,
    pub identify: identify::Behaviour,
    pub ping: ping::Behaviour,
    /// Chunk frames travel shared ([`FrameCodec`] of `Arc<Vec<u8>>`): one encoding for all r neighbours.
    pub chunk: request_response::Behaviour<FrameCodec<Arc<Vec<u8>>>>,
    /// Control messages: one long-lived stream per peer and direction (`super::control_link`).
    pub stream: libp2p_stream::Behaviour,
    /// Chunks: one long-lived stream per peer and direction (`super::chunk_link`). A behaviour apart from
    /// `stream`: `libp2p_stream`'s handler negotiates one outbound stream at a time per connection, so chunk
    /// streams opened (and reopened) in a round's burst would hold control streams' openings behind them.
    pub chunk_stream: libp2p_stream::Behaviour,
    /// "Which exchange are you at?" (catch-up, `engine/vn/catch_up.rs` probes): tiny, bounded both ways.
    pub round: request_response::Behaviour<FrameCodec>,
}

impl VnBehaviour {
    /// `max_chunk_frame`: the largest chunk frame this run carries (`protocol::chunk::chunk_frame_bytes` of
    /// its largest chunk); longer requests are refused from their length prefix, before any allocation.
    pub fn new(key: &Keypair, timeouts: Timeouts, max_chunk_frame: usize) -> Self {
        let chunk = request_response::Behaviour::with_codec(
            FrameCodec::new(
                max_chunk_frame.min(protocol::chunk::MAX_CHUNK_FRAME_BYTES),
                MAX_CHUNK_REPLY_BYTES,
            ),
            [(
                StreamProtocol::new(protocol::names::CHUNK),
                ProtocolSupport::Full,
            )],
            request_response::Config::default()
                .with_request_timeout(timeouts.chunk_request)
                .with_max_concurrent_streams(limits::CHUNK_STREAMS_PER_CONNECTION),
        );
        let round = request_response::Behaviour::with_codec(
            FrameCodec::new(MAX_ROUND_QUERY_BYTES, MAX_ROUND_ANSWER_BYTES),
            [(
                StreamProtocol::new(protocol::names::ROUND),
                ProtocolSupport::Full,
            )],
            request_response::Config::default()
                .with_request_timeout(timeouts.control_request)
                .with_max_concurrent_streams(ROUND_STREAMS_PER_CONNECTION),
        );
        Self {
            limits: limits::connection_limits(),
            memory: limits::memory_limits(),
            allow: allow_block_list::Behaviour::default(),
            // The agent version is the same for every VN of every node: it must not tell siblings apart. Only
            // the VN's external address (the node builder sets its one announced address) is told, never the
            // listen addresses: those would name every interface of the host, linking VNs that share one.
            identify: identify::Behaviour::new(
                identify::Config::new(protocol::names::IDENTIFY_VERSION.into(), key.public())
                    .with_agent_version("shatter".into())
                    .with_hide_listen_addrs(true),
            ),
            // Often enough that a silent connection is noticed within seconds (`super::liveness`); a ping
            // that takes the whole silence has failed anyway.
            ping: ping::Behaviour::new(
                ping::Config::new()
                    .with_interval(super::liveness::PING_INTERVAL)
                    .with_timeout(timeouts.peer_silence),
            ),
            chunk,
            stream: libp2p_stream::Behaviour::new(),
            chunk_stream: libp2p_stream::Behaviour::new(),
            round,
        }
    }
}
