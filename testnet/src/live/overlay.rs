//! [`OverlayRecorder`]: each exchange's VN overlay, rebuilt from the copies the VNs accepted. The receiver
//! (node, VN) and the sender's identity are what an observer is told; which node a sender identity belongs
//! to only the testnet knows (it made every key).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use node::observe::Observer;
use protocol::ChunkFrame;

type Index<I> = Box<dyn Fn(&I) -> Option<u32> + Send + Sync>;

/// One exchange's overlay: VN `i` belongs to node `owner[i]`; each edge joins two VNs, lower number first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlay {
    pub owner: Vec<u32>,
    pub edges: Vec<(u32, u32)>,
}

/// Undirected edges by exchange, between VNs numbered node by node (VN s of node i is `i·k + s`).
pub struct OverlayRecorder<I> {
    k: usize,
    vns: usize,
    index: Index<I>,
    edges: Mutex<BTreeMap<u64, BTreeSet<(u32, u32)>>>,
}

impl<I> OverlayRecorder<I> {
    /// `index`: a sender identity's number (`i·k + s`), for the `nodes · k` VNs of the network.
    pub fn new(
        nodes: usize,
        k: usize,
        index: impl Fn(&I) -> Option<u32> + Send + Sync + 'static,
    ) -> Self {
        Self {
            k,
            vns: nodes * k,
            index: Box::new(index),
            edges: Mutex::default(),
        }
    }

    /// The edges of the last exchange recorded up to `last_exchange` with each VN's node, forgetting
    /// every exchange up to there (copies of later exchanges may already be arriving).
    pub fn take_through(&self, last_exchange: u64) -> Option<Overlay> {
        let mut edges = self.edges.lock().unwrap_or_else(|p| p.into_inner());
        let later = edges.split_off(&(last_exchange + 1));
        let done = std::mem::replace(&mut *edges, later);
        let (_, last) = done.into_iter().next_back()?;
        let owner = (0..self.vns).map(|g| (g / self.k) as u32).collect();
        Some(Overlay {
            owner,
            edges: last.into_iter().collect(),
        })
    }
}

impl<I: Send + Sync> Observer<I> for OverlayRecorder<I> {
    fn chunk_received(&self, node: usize, vn: usize, from: &I, frame: &ChunkFrame) {
        let Some(sender) = (self.index)(from) else {
            return;
        };
        let receiver = (node * self.k + vn) as u32;
        let edge = (receiver.min(sender), receiver.max(sender));
        self.edges
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(frame.round.get())
            .or_default()
            .insert(edge);
    }
}

#[cfg(test)]
mod tests {
    use protocol::Round;

    use super::*;

    fn frame(round: u64) -> ChunkFrame {
        ChunkFrame {
            round: Round(round),
            chunk: protocol::ChunkIndex(0),
            values: vec![0.0],
        }
    }

    #[test]
    fn a_rounds_overlay_is_its_copies_edges_and_later_rounds_wait() {
        let r = OverlayRecorder::new(2, 2, |g: &u32| Some(*g));
        r.chunk_received(0, 1, &2, &frame(0));
        r.chunk_received(1, 0, &1, &frame(0));
        r.chunk_received(0, 0, &3, &frame(1));
        let o = r.take_through(0).unwrap();
        assert_eq!(o.owner, vec![0, 0, 1, 1]);
        assert_eq!(o.edges, vec![(1, 2)], "both directions are one edge");
        assert_eq!(r.take_through(1).unwrap().edges, vec![(0, 3)]);
        assert!(r.take_through(1).is_none());
    }
}
