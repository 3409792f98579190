//! A node's Prometheus/OpenMetrics endpoint (`metrics_addr` in the node config): our round metrics
//! (`node_metrics.rs`, `shatter_` prefix) and libp2p's own swarm metrics (connections, bandwidth by transport
//! protocol, identify, ping), one registry for the RN task, every VN task and the HTTP server.
//!
//! - `node_metrics.rs`: [`NodeMetrics`], the families the RN task updates from what it already computes (its
//!   [`crate::engine::RoundMetrics`], each VN's round summary, write failures).
//! - `exposition.rs`: the registry as OpenMetrics text, with same-named families of several VNs (or nodes)
//!   written as one family.
//! - `server.rs`: the HTTP endpoint (`GET /metrics`), on the node's tokio runtime.

mod exposition;
mod node_metrics;
mod server;

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use prometheus_client::registry::Registry;

pub use exposition::{CONTENT_TYPE, encode};
pub use node_metrics::{NodeMetrics, Phase};
pub use server::{MetricsServer, serve};

/// One registry shared by a node's tasks (or, in a test network, by many nodes under their own labels) and
/// the endpoint that encodes it. Metrics are updated without the lock (they are atomics); it is taken only to
/// register, at start-up, and to encode, per scrape.
pub type SharedRegistry = Arc<Mutex<Registry>>;

/// Where a node registers its metrics: a shared registry and the labels that tell this node's series apart
/// from others in it (none for `node run`, which has the registry to itself).
#[derive(Clone, Default)]
pub struct Telemetry {
    registry: SharedRegistry,
    labels: Vec<(Cow<'static, str>, Cow<'static, str>)>,
}

impl Telemetry {
    pub fn new(registry: SharedRegistry) -> Self {
        Self {
            registry,
            labels: Vec::new(),
        }
    }

    /// This node's series carry `key="value"` besides their own labels.
    pub fn with_label(mut self, key: impl Into<Cow<'static, str>>, value: impl ToString) -> Self {
        self.labels.push((key.into(), value.to_string().into()));
        self
    }

    pub fn registry(&self) -> &SharedRegistry {
        &self.registry
    }

    /// Runs `f` on the sub-registry of this node's series.
    fn with_node_registry<R>(&self, f: impl FnOnce(&mut Registry) -> R) -> R {
        let mut root = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        f(root.sub_registry_with_labels(self.labels.iter().cloned()))
    }

    /// Registers our families for this node.
    pub(crate) fn node_metrics(&self, vns: usize) -> NodeMetrics {
        self.with_node_registry(|r| NodeMetrics::register(r, vns))
    }

    /// Runs `f` on the sub-registry of VN `vn`'s swarm metrics (its series carry `vn="<vn>"`).
    pub(crate) fn with_vn_registry<R>(&self, vn: usize, f: impl FnOnce(&mut Registry) -> R) -> R {
        self.with_node_registry(|r| {
            f(r.sub_registry_with_label(("vn".into(), vn.to_string().into())))
        })
    }
}
