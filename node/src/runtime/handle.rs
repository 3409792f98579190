//! [`NodeHandle`] and [`NodeStatus`]: how an embedder watches and stops a running node.

use std::sync::Arc;

use tokio::sync::watch;

use crate::VnAddr;
use crate::engine::RoundMetrics;

/// Where a node stands, as its handle reports it.
#[derive(Debug, Clone, Default)]
pub struct NodeStatus {
    /// The round in progress (or the last one, once finished).
    pub round: protocol::Round,
    pub rounds_completed: u64,
    pub last: Option<RoundMetrics>,
    pub finished: bool,
    pub error: Option<String>,
}

/// A running node. Cloneable; dropping every clone does not stop the node (call [`NodeHandle::stop`]).
#[derive(Clone)]
pub struct NodeHandle {
    pub(super) status: watch::Receiver<NodeStatus>,
    pub(super) stop: Arc<watch::Sender<bool>>,
    pub(super) addrs: Arc<Vec<VnAddr>>,
    /// One per VN task, for [`NodeHandle::crash_virtual_node`].
    pub(super) vn_tasks: Arc<Vec<tokio::task::AbortHandle>>,
}

impl NodeHandle {
    pub fn status(&self) -> NodeStatus {
        self.status.borrow().clone()
    }

    /// The VNs' identities and the addresses they announce.
    pub fn addresses(&self) -> &[VnAddr] {
        &self.addrs
    }

    /// Fault injection for tests and drills: ends VN `vn`'s task abruptly, as a panic would. The node reports
    /// [`crate::NodeEvent::VnLost`] and completes its rounds without that VN.
    pub fn crash_virtual_node(&self, vn: usize) {
        if let Some(t) = self.vn_tasks.get(vn) {
            t.abort();
        }
    }

    /// Asks the node to stop: it leaves at once, mid-round if need be.
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }

    /// Waits until the node finished (all rounds, a stop, or an error) and returns its final status.
    pub async fn wait(&self) -> NodeStatus {
        let mut rx = self.status.clone();
        let _ = rx.wait_for(|s| s.finished).await;
        rx.borrow().clone()
    }
}
