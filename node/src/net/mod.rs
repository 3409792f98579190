//! The libp2p shell: one Swarm per virtual-node identity, driving the sans-IO VN engine, and the RN↔VN link
//! (`link.rs`) to VNs hosted in another process.

pub mod behaviour;
pub mod boxed;
pub mod chunk_link;
pub mod chunk_slots;
pub mod codec;
pub mod contact;
pub mod control_link;
pub mod limits;
pub mod link;
pub mod link_codec;
pub mod link_limits;
pub mod link_order;
pub mod liveness;
pub mod preconnect;
pub mod release;
mod stream_link;
pub mod transport;
pub mod vn_task;
