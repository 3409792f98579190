//! The sans-IO round engine: the real-node role ([`RnEngine`]) and the virtual-node role ([`VnEngine`]).
//! No sockets, clocks or global RNG: drivers feed inputs with `now` and carry out the outputs. The libp2p
//! shell (`net/`) and the in-memory simulator (`sim.rs`) are the two drivers.

mod counters;
pub mod metrics;
pub mod rn;
pub mod route;
pub mod vn;

pub use metrics::RoundMetrics;
pub use rn::{RnEngine, RnInput, RnOutput};
pub use route::{RnDriver, VnDriver, route_rn, route_vn};
pub use vn::{RefusalKind, ReplyToken, VnConfig, VnEngine, VnIdentity, VnInput, VnOutput};
