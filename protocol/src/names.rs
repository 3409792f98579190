//! Versioned protocol names. A breaking change to a message bumps its version, so peers running different
//! versions fail protocol negotiation cleanly instead of misreading each other's bytes.

/// Chunk exchange between neighbouring virtual nodes: a [`crate::ChunkFrame`] request, a
/// [`crate::ChunkReply`] response.
pub const CHUNK: &str = "/shatter/chunk/1";

/// Chunk exchange on one long-lived stream per pair of virtual nodes and direction: length-prefixed
/// [`crate::ChunkFrame`]s one way, each followed by the sender's two-byte grid note (since version 2), a
/// length-prefixed [`crate::ChunkReply`] for each, in order, the other.
pub const CHUNK_STREAM: &str = "/shatter/chunk-stream/2";

/// Control messages between virtual nodes: Cyclon shuffles and overlay negotiation. One long-lived stream per
/// peer carrying length-prefixed messages one way and cumulative acknowledgements (the count of messages
/// read, a little-endian u64) the other (since version 2; version 1 was one request-response stream per
/// message). Version 3: walks name no origin and their answers travel back along the walk's path.
pub const CONTROL: &str = "/shatter/control/3";

/// Real node ↔ virtual node traffic, for a virtual node running outside its real node's process.
pub const RNVN: &str = "/shatter/rnvn/1";

/// Identify's protocol version string: peers that announce another one are not Shatter nodes of this
/// generation.
pub const IDENTIFY_VERSION: &str = "/shatter/1";

/// "Which exchange are you at?" between virtual nodes (catch-up, issue 15): an empty request, a response of
/// one encoded `Option<Round>` (the newest exchange the answering VN's real node started, if any).
pub const ROUND: &str = "/shatter/round/1";
