//! A round's links by peer, remembering whether they changed since last asked: the open links' index
//! (`open_links` in [`super::OverlayBuilder`]) is brought up to date from the rounds whose links changed only,
//! while most inputs (walks relayed, Cyclon messages, timers with nothing to do) change none.

use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};

/// A map read as the map itself; any mutable access (insert, remove, retain, `iter_mut`, ...) counts as a
/// change, whether or not it changed anything, so that no change goes unseen.
#[derive(Debug, Clone)]
pub(super) struct Links<I, L> {
    map: BTreeMap<I, L>,
    changed: bool,
}

impl<I, L> Default for Links<I, L> {
    fn default() -> Self {
        Self {
            map: BTreeMap::new(),
            changed: false,
        }
    }
}

impl<I, L> Links<I, L> {
    /// The links, each changeable in place: the peers stay as they are, so this is no change.
    pub(super) fn values_in_place(&mut self) -> std::collections::btree_map::IterMut<'_, I, L> {
        self.map.iter_mut()
    }

    /// Whether the map was accessed mutably since the last call.
    pub(super) fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }
}

impl<I, L> Deref for Links<I, L> {
    type Target = BTreeMap<I, L>;

    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl<I, L> DerefMut for Links<I, L> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.changed = true;
        &mut self.map
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mutable_access_counts_as_a_change_and_reads_do_not() {
        let mut l: Links<u32, ()> = Links::default();
        assert!(!l.take_changed());
        l.insert(3, ());
        assert!(l.take_changed());
        assert!(!l.take_changed(), "asked once per change");
        assert!(l.contains_key(&3) && l.len() == 1);
        assert!(!l.take_changed(), "reads change nothing");
        l.remove(&9);
        assert!(
            l.take_changed(),
            "a removal that found nothing still counts"
        );
    }
}
