//! The Shatter node: a permissioned libp2p host running one real node (RN) and its k virtual nodes (VNs).
//!
//! # Layout
//! - `error.rs`: [`NodeError`].
//! - `id.rs`: [`VnAddr`], how VNs name each other on the wire.
//! - `keys.rs`: VN key generation and loading.
//! - `peers.rs`: the peer list file (permissioning and bootstrap).
//! - `engine/`: the sans-IO round engine: `rn.rs` (real node), `vn.rs` (virtual node), `metrics.rs`,
//!   `counters.rs`.
//! - `net/`: the libp2p shell: behaviour, codec, transport.

pub mod engine;
mod error;
mod id;
pub mod keys;
pub mod net;
pub mod peers;

pub use error::{NodeError, Result};
pub use id::VnAddr;
