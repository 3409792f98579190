//! [`StaticGraph`]: the one graph a static-graph algorithm (D-PSGD, PDMM; [`crate::algo::Graph::Static`])
//! exchanges over for the whole run: the overlay of exchange 0, negotiated once. An edge the other end stops
//! counting is dropped for the rest of the run, but keeps its edge slot (slot i is the same neighbour in every
//! exchange).

use std::collections::BTreeSet;

use protocol::rnvn::MAX_EDGE_SLOTS;

/// The run's graph at one VN, once exchange 0 froze.
#[derive(Debug)]
pub(crate) struct StaticGraph<I> {
    /// Exchange 0's frozen neighbours less the edges dropped since.
    neighbours: Option<BTreeSet<I>>,
    /// Exchange 0's frozen neighbours as edge slots, kept for the run even when an edge is dropped.
    slots: Option<Vec<I>>,
}

impl<I: Ord + Clone> Default for StaticGraph<I> {
    fn default() -> Self {
        Self {
            neighbours: None,
            slots: None,
        }
    }
}

impl<I: Ord + Clone> StaticGraph<I> {
    /// Exchange 0 froze with `neighbours`: the run's graph.
    pub(crate) fn freeze(&mut self, neighbours: &[I]) {
        let graph: BTreeSet<I> = neighbours.iter().cloned().collect();
        self.slots = Some(graph.iter().take(MAX_EDGE_SLOTS).cloned().collect());
        self.neighbours = Some(graph);
    }

    /// A node that sat out exchange 0 never joined the graph: it has no edges for the run (rather than
    /// waiting for ever for a graph it did not negotiate).
    pub(crate) fn never_joined(&mut self) {
        if self.neighbours.is_none() {
            self.neighbours = Some(BTreeSet::new());
        }
    }

    /// The graph's standing edges, once exchange 0 froze (or was sat out).
    pub(crate) fn neighbours(&self) -> Option<&BTreeSet<I>> {
        self.neighbours.as_ref()
    }

    pub(crate) fn contains(&self, peer: &I) -> bool {
        self.neighbours.as_ref().is_some_and(|n| n.contains(peer))
    }

    /// The run's edge slots (empty before exchange 0 froze).
    pub(crate) fn slots(&self) -> Vec<I> {
        self.slots.clone().unwrap_or_default()
    }

    /// An edge the other end no longer counts: gone for the rest of the run (its slot stays).
    pub(crate) fn drop_edge(&mut self, peer: &I) {
        if let Some(n) = self.neighbours.as_mut() {
            n.remove(peer);
        }
    }
}
