//! The libp2p shell: one Swarm per virtual-node identity, driving the sans-IO VN engine.

pub mod behaviour;
pub mod codec;
pub mod limits;
pub mod transport;
pub mod vn_task;
