//! In-memory simulation: a deterministic discrete-event network ([`Network`]) and, on top, the Cyclon +
//! overlay driver ([`OverlaySim`]).
//!
//! `Network<M>` knows nothing about the messages it carries, so the node's in-memory tests and
//! `testnet --mode sim` can run their own message types on it. Determinism: all randomness (latency, loss)
//! comes from one seeded ChaCha stream, and events at equal times are ordered by insertion sequence.

mod driver;
mod rogue;

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::Duration;

use rand::Rng;
use rand_chacha::ChaCha12Rng;

pub use driver::{OverlaySim, Pusher, RoundGraph, SimConfig, Traffic};
pub use rogue::{Crowding, DirectKind, Rogue, RogueState, crowding};

/// Network node index.
pub type NodeIdx = u32;

/// Link model.
#[derive(Debug, Clone, PartialEq)]
pub struct NetConfig {
    /// One-way latency is uniform in [latency_min, latency_max] (DESIGN notes: real latency ~1-50 ms).
    pub latency_min: Duration,
    pub latency_max: Duration,
    /// Probability that a message is silently lost.
    pub loss: f64,
}

impl Default for NetConfig {
    fn default() -> Self {
        Self {
            latency_min: Duration::from_millis(1),
            latency_max: Duration::from_millis(50),
            loss: 0.0,
        }
    }
}

/// Something that happens at a node.
#[derive(Debug, Clone, PartialEq)]
pub enum Event<M> {
    /// `msg` from `from` arrives at `to`.
    Deliver { from: NodeIdx, to: NodeIdx, msg: M },
    /// A message `from` sent to `to` could not be delivered because `to` is down (reported to `from` one
    /// latency after the failed delivery, like a refused connection).
    SendFailed { from: NodeIdx, to: NodeIdx },
    /// A timer set by `node` fires; `tag` is the caller's.
    Timer { node: NodeIdx, tag: u64 },
}

struct Queued<M> {
    at: Duration,
    seq: u64,
    ev: Event<M>,
}

impl<M> PartialEq for Queued<M> {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl<M> Eq for Queued<M> {}
impl<M> PartialOrd for Queued<M> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<M> Ord for Queued<M> {
    // Reversed: BinaryHeap is a max-heap, we pop the earliest (then lowest sequence).
    fn cmp(&self, o: &Self) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// A deterministic discrete-event network with a virtual clock, per-message latency, loss and crashes.
pub struct Network<M> {
    cfg: NetConfig,
    rng: ChaCha12Rng,
    now: Duration,
    seq: u64,
    queue: BinaryHeap<Queued<M>>,
    up: Vec<bool>,
    /// Messages handed to `send` / lost to the loss model.
    pub sent: u64,
    pub lost: u64,
}

impl<M> Network<M> {
    pub fn new(cfg: NetConfig, rng: ChaCha12Rng) -> Self {
        Self {
            cfg,
            rng,
            now: Duration::ZERO,
            seq: 0,
            queue: BinaryHeap::new(),
            up: Vec::new(),
            sent: 0,
            lost: 0,
        }
    }

    pub fn now(&self) -> Duration {
        self.now
    }

    pub fn config(&self) -> &NetConfig {
        &self.cfg
    }

    pub fn set_loss(&mut self, loss: f64) {
        self.cfg.loss = loss;
    }

    /// Nodes are up unless crashed; indices grow on demand.
    pub fn is_up(&self, n: NodeIdx) -> bool {
        self.up.get(n as usize).copied().unwrap_or(true)
    }

    pub fn set_up(&mut self, n: NodeIdx, up: bool) {
        if self.up.len() <= n as usize {
            self.up.resize(n as usize + 1, true);
        }
        self.up[n as usize] = up;
    }

    fn push(&mut self, at: Duration, ev: Event<M>) {
        self.seq += 1;
        self.queue.push(Queued {
            at,
            seq: self.seq,
            ev,
        });
    }

    fn latency(&mut self) -> Duration {
        let (a, b) = (self.cfg.latency_min, self.cfg.latency_max);
        if b <= a {
            a
        } else {
            a + (b - a).mul_f64(self.rng.random::<f64>())
        }
    }

    /// Send `msg`; it arrives after a random latency unless lost.
    pub fn send(&mut self, from: NodeIdx, to: NodeIdx, msg: M) {
        self.sent += 1;
        if self.cfg.loss > 0.0 && self.rng.random_bool(self.cfg.loss.min(1.0)) {
            self.lost += 1;
            return;
        }
        let at = self.now + self.latency();
        self.push(at, Event::Deliver { from, to, msg });
    }

    /// Fire `Event::Timer { node, tag }` at `at` (not before now).
    pub fn timer(&mut self, node: NodeIdx, at: Duration, tag: u64) {
        let at = at.max(self.now);
        self.push(at, Event::Timer { node, tag });
    }

    /// Time of the next event, if any.
    pub fn peek_time(&self) -> Option<Duration> {
        self.queue.peek().map(|q| q.at)
    }

    /// Next event at or before `until`, advancing the clock. Events for crashed nodes are discarded;
    /// deliveries to crashed nodes become `SendFailed` for the (live) sender.
    pub fn pop_until(&mut self, until: Duration) -> Option<(Duration, Event<M>)> {
        while self.queue.peek().is_some_and(|q| q.at <= until) {
            let q = self.queue.pop().expect("peeked");
            self.now = self.now.max(q.at);
            match q.ev {
                Event::Deliver { from, to, .. } if !self.is_up(to) => {
                    if self.is_up(from) {
                        let at = self.now + self.latency();
                        self.push(at, Event::SendFailed { from, to });
                    }
                }
                Event::SendFailed { from, .. } if !self.is_up(from) => {}
                Event::Timer { node, .. } if !self.is_up(node) => {}
                ev => return Some((self.now, ev)),
            }
        }
        self.now = self.now.max(until);
        None
    }
}
