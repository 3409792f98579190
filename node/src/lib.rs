//! The Shatter node: a permissioned libp2p host running one real node (RN) and its k virtual nodes (VNs).
//!
//! # The API
//! - Run a node in your program: [`NodeBuilder`] → [`NodeHandle`] (status, stop) and a stream of
//!   [`NodeEvent`]s; [`Timing`] for the protocol's timing; errors are [`NodeError`].
//! - What an operator writes: [`config`] (`node run --config`), [`host_config`] (`node vn --config`),
//!   [`peers`] (the peer list), [`keys`] (VN identities), [`kit`] (a network's setup from one HOSTS file), [`secret`] (the node's private randomness); VN hosts: [`VnHost`], [`RemoteVn`], [`HostedVn`].
//! - What the learning runs: [`algo`] (one [`algo::Algorithm`] per algorithm, chosen by [`algo::AlgoSpec`]) and
//!   [`learner`] (a node's model, data and training).
//! - For research harnesses: [`observe`] (hooks that see models and copies), [`sim`] (the whole network on a
//!   virtual clock), [`engine`] (the sans-IO round engine, for another driver), [`limits`] (open files).
//!
//! `net` (the libp2p shell) and `arrival_log` are public only for this project's own tests, benches and
//! testnet; they are hidden from the docs and are not an API.
//!
//! # Layout
//! - `config.rs`: the `node run --config FILE.toml` configuration.
//! - `host_config.rs`: the `node vn --config FILE.toml` configuration (a VN host); `placement.rs`: the rule
//!   that a VN host runs at most one VN of each node.
//! - `kit/`: `node kit HOSTS.toml --out DIR`, a whole network's folders, compose file, Dockerfile and units
//!   from one file describing the hosts ([`kit`]).
//! - `checkpoint.rs`: per-round checkpoints (model as safetensors, metadata as JSON) for `node run --resume`.
//! - `error.rs`: [`NodeError`].
//! - `id.rs`: [`VnAddr`], how VNs name each other on the wire.
//! - `keys.rs`: VN key generation and loading; `psk.rs`: the pre-shared key file of a private network.
//! - `private_file.rs`: files only their owner reads (keys, checkpoints), created 0600 and renamed into place.
//! - `disk.rs`: the file layer of checkpoints and metrics lines, a trait so tests can fail it on demand.
//! - `console.rs`: the binary's standard output and error, written by a thread that never blocks the node.
//! - `peers.rs`: the peer list file (permissioning and bootstrap).
//! - `secret.rs`: the node secret its private randomness comes from (noise, duals, choices, dropout).
//! - `algo/`: [`algo::Algorithm`] (and [`algo::PerEdge`] for algorithms with state on edges), one file per
//!   algorithm (`shatter.rs`, `el.rs`, `el_local.rs`, `dpsgd.rs`, `chunking.rs`, `topk.rs`, `muffliato.rs`,
//!   `ghp.rs`, `pdmm.rs`) and `spec.rs` ([`algo::AlgoSpec`]: a name to an algorithm).
//! - `engine/`: the sans-IO round engine: `rn.rs` (real node, runs an `Algorithm`), `vn/` (virtual node: one
//!   dispatcher over one file per concern, see its module doc), `route.rs` (the one routing layer:
//!   `VnDriver`/`RnDriver`, implemented by both drivers; the RN-never-learns-the-sender split), `metrics.rs`,
//!   `counters.rs`, `rate.rs` (per-peer token buckets), `values.rs` (the range rule on received values),
//!   `dropout.rs` (Appendix E's model).
//! - `limits.rs`: the open-files limit many VNs need.
//! - `arrival_log.rs`: a network observer writing arrivals to a file (the timing attack on node processes).
//! - `observe.rs`: [`observe::Observer`], hooks for research harnesses (privacy audits, the network
//!   observer's timing attack).
//! - `learner.rs`: one real node's model, data and training ([`learner::Learner`]), shared by the drivers.
//! - `sim.rs`: the in-memory driver (many nodes on a virtual clock), used by tests and `testnet --mode sim`.
//! - `net/`: the libp2p shell: `behaviour.rs`, `codec.rs`, `transport.rs`, `limits.rs` (connection and stream
//!   limits, and the bounds they give), `vn_task.rs` (one task per VN driving its engine with its Swarm;
//!   its `VnDriver`), `contact.rs` (what the VNs tell their RN of reaching peers outside the node) and
//!   `liveness.rs` (a connection silent past `Timing::peer_silence_ms` is closed, its peer gone).
//! - `runtime/`: the embedding API: `builder.rs` ([`NodeBuilder`]), `handle.rs` ([`NodeHandle`],
//!   [`NodeStatus`]), `timing.rs` ([`Timing`]), `rn_task.rs` (the RN task; its `RnDriver`), `vn_setup.rs`
//!   (building a VN, in-process or hosted), `vn_host.rs` and `remote_vn.rs` (VN hosts and their link),
//!   `isolation.rs` (a node that reaches nobody warns, then stops).
//! - `events.rs`: [`NodeEvent`], the event stream.
//! - `telemetry/`: [`telemetry`], the Prometheus/OpenMetrics endpoint (`metrics_addr`): our families and
//!   libp2p's swarm metrics in one registry, served over HTTP.
//! - `main.rs`: the `node` binary (`keygen`, `peer-list`, `run`, `vn`, `psk`, `kit`).

pub mod algo;
#[doc(hidden)]
pub mod arrival_log;
mod checkpoint;
pub mod config;
#[doc(hidden)]
pub mod console;
#[doc(hidden)]
pub mod disk;
pub mod engine;
mod error;
pub mod events;
pub mod host_config;
mod id;
pub mod keys;
pub mod kit;
pub mod learner;
pub mod limits;
#[doc(hidden)]
pub mod net;
pub mod observe;
pub mod peers;
mod placement;
mod private_file;
pub mod psk;
mod runtime;
pub mod secret;
pub mod sim;
pub mod telemetry;

pub use error::{NodeError, Result};
pub use events::NodeEvent;
pub use id::VnAddr;
pub use runtime::{
    DEFAULT_ISOLATION_TIMEOUT, HostedVn, NodeBuilder, NodeHandle, NodeStatus, RemoteVn, Timing,
    VnHost,
};
