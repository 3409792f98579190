//! The embedding API: [`NodeBuilder`] → [`NodeBuilder::spawn`] → a cloneable [`NodeHandle`] plus a stream of
//! [`crate::NodeEvent`]s. One node = one real node (RN) task and k virtual-node tasks, each VN with its own
//! Swarm.
//!
//! - `builder.rs`: [`NodeBuilder`], checks and spawning.
//! - `handle.rs`: [`NodeHandle`], [`NodeStatus`].
//! - `timing.rs`: [`Timing`], protocol timing on a real network.
//! - `rn_task.rs`: the RN task (round loop, training jobs, checkpoints).
//! - `remote_vn.rs`: VNs run by VN hosts, seen by the RN task as ordinary VN tasks (proxies over the link).
//! - `vn_host.rs`: [`VnHost`], the `node vn` process running VNs for real nodes elsewhere.
//! - `vn_setup.rs`: what a VN needs from its RN's run, and building a VN from it (in-process or hosted).
//! - `metrics_file.rs`: the per-round metrics lines, append-only across crashes and restarts.
//! - `isolation.rs`: noticing a node that reaches nobody (warnings every round, a stop after a timeout).

mod builder;
mod handle;
mod isolation;
mod metrics_file;
mod remote_vn;
mod rn_task;
mod timing;
mod vn_host;
mod vn_setup;

pub use builder::NodeBuilder;
pub use handle::{NodeHandle, NodeStatus};
pub use isolation::DEFAULT_ISOLATION_TIMEOUT;
pub use remote_vn::RemoteVn;
pub use timing::{LOOPBACK_LOOKAHEAD, Timing};
pub use vn_host::{HostedVn, VnHost};
