//! [`LiveFeed`]: every event so far, and a broadcast of the ones to come.

use std::sync::{Arc, Mutex};

use node::engine::RoundMetrics;
use tokio::sync::broadcast;

use super::event::LiveEvent;
use super::overlay::{Overlay, OverlayRecorder};

/// New events a slow page may fall behind by before its stream is closed (it then reconnects and replays
/// the history, so it still gets every event).
const BROADCAST_CAPACITY: usize = 8192;

/// Events encoded once, as the stream sends them.
pub type Encoded = Arc<str>;

/// Cloneable; publishing never waits on a page.
#[derive(Clone)]
pub struct LiveFeed {
    inner: Arc<Inner>,
}

struct Inner {
    /// Held while publishing and while a page subscribes, so that a page's replay and its live events
    /// neither overlap nor leave a gap.
    history: Mutex<Vec<Encoded>>,
    tx: broadcast::Sender<Encoded>,
}

impl Default for LiveFeed {
    fn default() -> Self {
        let (tx, _) = broadcast::channel(BROADCAST_CAPACITY);
        Self {
            inner: Arc::new(Inner {
                history: Mutex::default(),
                tx,
            }),
        }
    }
}

impl LiveFeed {
    pub fn publish(&self, ev: &LiveEvent) {
        let text: Encoded = serde_json::to_string(ev).expect("events serialise").into();
        let mut h = self.inner.history.lock().unwrap_or_else(|p| p.into_inner());
        h.push(text.clone());
        // No page listening is not an error.
        let _ = self.inner.tx.send(text);
    }

    /// Everything published so far, and a receiver of what comes next.
    pub fn subscribe(&self) -> (Vec<Encoded>, broadcast::Receiver<Encoded>) {
        let h = self.inner.history.lock().unwrap_or_else(|p| p.into_inner());
        (h.clone(), self.inner.tx.subscribe())
    }

    /// Events published so far.
    pub fn len(&self) -> usize {
        self.inner
            .history
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The feed of one setting, as its progress display sees rounds.
pub struct LiveSetting {
    pub feed: LiveFeed,
    pub k: usize,
    /// Exchanges per round (Muffliato runs several): a round's overlay is that of its last exchange.
    pub exchanges_per_round: u64,
    pub overlay: Option<Arc<dyn OverlaySource>>,
    /// Where in-process nodes register their Prometheus metrics (served at the view's `/metrics`), under
    /// `k` and `node` labels.
    pub registry: node::telemetry::SharedRegistry,
}

/// Where a setting's overlays come from (the recorder, whatever its identity type).
pub trait OverlaySource: Send + Sync {
    /// The edges of the last exchange up to `last_exchange`, and the owner of each VN; forgets those
    /// exchanges.
    fn take_through(&self, last_exchange: u64) -> Option<Overlay>;
}

impl<I: Send + Sync> OverlaySource for OverlayRecorder<I> {
    fn take_through(&self, last_exchange: u64) -> Option<Overlay> {
        OverlayRecorder::take_through(self, last_exchange)
    }
}

impl LiveSetting {
    pub fn round(&self, node: usize, m: &RoundMetrics) {
        self.feed.publish(&LiveEvent::Round {
            k: self.k,
            node,
            m: m.clone(),
        });
    }

    /// Every node finished `round`.
    pub fn round_complete(&self, round: u64) {
        let last = (round + 1) * self.exchanges_per_round - 1;
        if let Some(o) = self.overlay.as_ref().and_then(|o| o.take_through(last)) {
            self.feed.publish(&LiveEvent::Overlay {
                k: self.k,
                round,
                owner: o.owner,
                edges: o.edges,
            });
        }
    }
}
