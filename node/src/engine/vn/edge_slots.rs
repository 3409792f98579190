//! [`EdgeSlots`]: one exchange's edge slots — the sorted neighbour list fixed at the freeze (with a static
//! graph, the graph of exchange 0), so that an RN with per-edge state (PDMM) can send one frame per neighbour
//! and keep state per edge without learning any identity (a slot is a position, not a peer). An edge refused
//! or dropped after the freeze keeps its slot: the slot count never changes within an exchange.

use std::collections::BTreeSet;

/// Edge slots and per-edge delivery of one exchange.
#[derive(Debug)]
pub(crate) struct EdgeSlots<I> {
    /// The RN asked for the slots (`PerEdge`), and whether they were reported.
    asked: bool,
    reported: bool,
    /// Fixed at the freeze.
    slots: Option<Vec<I>>,
    /// Neighbours that accepted our frame this exchange.
    delivered_to: BTreeSet<I>,
}

// Derived Default would require `I: Default`.
impl<I> Default for EdgeSlots<I> {
    fn default() -> Self {
        Self {
            asked: false,
            reported: false,
            slots: None,
            delivered_to: BTreeSet::new(),
        }
    }
}

impl<I: Ord + Clone> EdgeSlots<I> {
    /// The exchange froze: these are its slots.
    pub(crate) fn fix(&mut self, slots: Vec<I>) {
        self.slots = Some(slots);
    }

    pub(crate) fn slots(&self) -> Option<&[I]> {
        self.slots.as_deref()
    }

    /// The number of slots (0 before the freeze).
    pub(crate) fn count(&self) -> usize {
        self.slots.as_ref().map_or(0, Vec::len)
    }

    /// `peer`'s slot, if it has one.
    pub(crate) fn slot_of(&self, peer: &I) -> Option<u32> {
        self.slots
            .as_ref()
            .and_then(|s| s.iter().position(|p| p == peer))
            .map(|i| i as u32)
    }

    /// The RN asked for this exchange's slots: it is a per-edge exchange.
    pub(crate) fn ask(&mut self) {
        self.asked = true;
    }

    pub(crate) fn asked(&self) -> bool {
        self.asked
    }

    pub(crate) fn reported(&self) -> bool {
        self.reported
    }

    /// The slot count to report to the RN, once: asked, frozen and not reported yet.
    pub(crate) fn report(&mut self) -> Option<u32> {
        match (&self.slots, self.asked, self.reported) {
            (Some(slots), true, false) => {
                self.reported = true;
                Some(slots.len() as u32)
            }
            _ => None,
        }
    }

    /// `peer` accepted our frame.
    pub(crate) fn delivered(&mut self, peer: I) {
        self.delivered_to.insert(peer);
    }

    /// Per slot, whether its neighbour accepted our frame.
    pub(crate) fn accepted(&self) -> Vec<bool> {
        self.slots
            .iter()
            .flatten()
            .map(|p| self.delivered_to.contains(p))
            .collect()
    }
}
