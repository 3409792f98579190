//! The node's event stream for embedders: finished rounds, refused peers, errors.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use libp2p::PeerId;
use tokio::sync::mpsc;

use crate::engine::RoundMetrics;

/// Events are buffered up to this many; beyond it, all but round results are dropped (and counted) rather
/// than slowing the network down for a consumer that does not read them.
pub const EVENT_CAPACITY: usize = 1024;

#[derive(Debug, Clone)]
pub enum NodeEvent {
    /// A round finished with these metrics.
    RoundFinished(RoundMetrics),
    /// Something from `peer` was refused at virtual node `vn` (not on the peer list, malformed, ...).
    PeerRefused {
        vn: usize,
        peer: PeerId,
        reason: String,
    },
    /// An incoming connection failed before the peer was known (e.g. a wrong pre-shared key).
    ConnectionFailed { vn: usize, error: String },
    /// Virtual node `vn`'s task ended unexpectedly (a panic, or aborted); the node goes on without it: its
    /// chunk is no longer shared and its rounds count as done with nothing received.
    VnLost { vn: usize, reason: String },
    /// A checkpoint or metrics write failed (a full or failing disk). The node goes on training, counts it in
    /// the round's metrics (`unsaved_checkpoints`, `metrics_write_failures`) and tries again on later rounds.
    WriteFailed {
        file: DurableFile,
        path: PathBuf,
        error: String,
    },
    /// The node stopped on an error.
    Error(String),
    /// All rounds are done (or the node was stopped).
    Finished,
}

/// Which of the node's durable files a [`NodeEvent::WriteFailed`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurableFile {
    /// The round's checkpoint (`checkpoint.json` or its model file): a resume would start from an older one.
    Checkpoint,
    /// The metrics file: the line is kept and written when the disk takes it again.
    Metrics,
}

/// Sending half of the event stream, shared by the node's tasks.
#[derive(Clone)]
pub struct EventSink {
    tx: mpsc::Sender<NodeEvent>,
    dropped: Arc<AtomicU64>,
}

impl EventSink {
    pub fn new(capacity: usize) -> (Self, mpsc::Receiver<NodeEvent>) {
        let (tx, rx) = mpsc::channel(capacity);
        (
            Self {
                tx,
                dropped: Arc::default(),
            },
            rx,
        )
    }

    /// Sends without waiting; drops the event if the consumer is behind.
    pub fn send(&self, ev: NodeEvent) {
        if self.tx.try_send(ev).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Sends, waiting for room: for events that must not be lost (round results, the end).
    pub async fn send_reliably(&self, ev: NodeEvent) {
        // A consumer that dropped the receiver does not want events: that is not an error of the node.
        let _ = self.tx.send(ev).await;
    }

    /// Events dropped because the consumer was behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}
