//! The sans-IO round engine: the real-node role ([`RnEngine`]) and the virtual-node role ([`VnEngine`]).
//! No sockets, clocks or global RNG (clippy.toml disallows them): drivers feed inputs with `now` and carry out
//! the outputs through [`route_vn`] / [`route_rn`] by implementing [`VnDriver`] / [`RnDriver`]. The libp2p
//! shell (`net/vn_task.rs`, `runtime/rn_task.rs`) and the in-memory simulator (`sim.rs`) are the two drivers.
//! Timers follow quinn's `poll_timeout` contract: after each input the driver asks
//! [`VnEngine::poll_timeout`] (the router does it) and feeds `Tick` at that time.

mod copy_check;
mod counters;
pub(crate) mod dropout;
mod metrics;
pub(crate) mod rate;
mod rn;
mod route;
mod values;
pub mod vn;

pub use copy_check::{CopyLimits, CopyRefused};
pub use metrics::RoundMetrics;
pub use rn::{RnEngine, RnInput, RnOutput};
pub use route::{RnDriver, VnDriver, route_rn, route_vn};
pub use values::ValueBounds;
pub use vn::{
    RefusalKind, ReplyToken, SendPace, VnConfig, VnEngine, VnIdentity, VnInput, VnOutput, VnRun,
    VnTiming,
};
