//! Shatter's wire format: protocol names, the length-prefixed framing with named `MAX_*` limits, the
//! control-message codec, chunk frames, and the message types of every protocol.
//!
//! Nothing read off the wire is trusted: every decoder returns a typed [`DecodeError`], checks each length
//! against a named limit before allocating, and never panics on any input (fuzz targets in `fuzz/`).
//!
//! # Layout
//! - `names.rs`: versioned protocol names (`/shatter/<name>/<version>`).
//! - `error.rs`: [`DecodeError`] and [`EncodeError`].
//! - `ids.rs`: [`Round`] and [`ChunkIndex`], used end to end.
//! - `frame.rs`: the 4-byte length prefix every message travels behind, and its limits.
//! - `codec.rs`: the control-message encoding (bincode 2 with serde). The one file to change to swap it.
//! - `chunk.rs`: chunk frames (round, chunk index, raw little-endian f32 values) and the receiver's reply.
//! - `control.rs`: Cyclon and overlay messages, generic over the peer identity type; the control envelope
//!   (what travels on the control protocol); the round limits every VN applies (`MAX_KEPT_ROUNDS`,
//!   `MAX_FUTURE_ROUNDS`).
//! - `rnvn.rs`: messages between a real node and a virtual node running outside its process.
//! - `link.rs`: how those messages travel on the RN↔VN link to a VN host (`node vn`).
//! - `examples/fuzz_seeds.rs`: writes the fuzz targets' seed corpus (valid encodings of every message).

pub mod chunk;
pub mod codec;
pub mod control;
mod error;
pub mod frame;
mod ids;
pub mod link;
pub mod names;
pub mod rnvn;

pub use chunk::{ChunkFrame, ChunkReply, RefuseReason};
pub use error::{DecodeError, EncodeError};
pub use ids::{ChunkIndex, Round};
