//! [`Contact`]: what a node's in-process VNs tell their RN about reaching the rest of the network: how many
//! connections they opened with listed peers outside the node, how many are up, and the last dials that
//! failed. The RN reads it to notice a node that reaches nobody (`runtime/isolation.rs`): such a node ran all
//! its rounds alone before, with 0 neighbours and not one line in its log.
//!
//! A VN's siblings do not count: in a network whose only reachable addresses are one node's own, that node's
//! VNs reach each other (and may even be each other's neighbours) while the node reaches nobody.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use libp2p::PeerId;

/// Dial failures kept for the report: the latest of distinct peers.
pub const FAILURES_KEPT: usize = 4;

/// Longest dial error kept (libp2p's name every address tried, with the error of each).
const FAILURE_CHARS: usize = 400;

/// The node's board, shared by its in-process VNs (writers) and its RN (reader).
#[derive(Debug, Default)]
pub struct Contact {
    /// Connections established with listed peers outside the node, counted since the node started.
    established: AtomicU64,
    /// Listed peers outside the node that some VN is connected to now, summed over the VNs.
    connected: AtomicUsize,
    /// The latest failed dials of listed peers, one per peer, oldest first: the peer and libp2p's error
    /// (which names each address tried).
    failures: Mutex<VecDeque<(PeerId, String)>>,
}

impl Contact {
    /// Connections established with peers outside the node so far.
    pub fn established(&self) -> u64 {
        self.established.load(Ordering::Relaxed)
    }

    /// Peers outside the node connected now (a peer connected to two VNs counts twice).
    pub fn connected(&self) -> usize {
        self.connected.load(Ordering::Relaxed)
    }

    /// The latest dial failures, oldest first.
    pub fn failures(&self) -> Vec<(PeerId, String)> {
        self.failures
            .lock()
            .map(|f| f.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn dial_failed(&self, peer: PeerId, error: &str) {
        let mut kept: String = error.chars().take(FAILURE_CHARS).collect();
        if error.chars().count() > FAILURE_CHARS {
            kept.push('…');
        }
        if let Ok(mut f) = self.failures.lock() {
            f.retain(|(p, _)| *p != peer);
            f.push_back((peer, kept));
            while f.len() > FAILURES_KEPT {
                f.pop_front();
            }
        }
    }
}

/// One VN's writer of its node's [`Contact`] board: it knows its siblings, and which outside peers it is
/// connected to (so that each connection is counted up and down once).
#[derive(Debug)]
pub struct VnContact {
    board: std::sync::Arc<Contact>,
    /// This VN and its siblings.
    own: HashSet<PeerId>,
    connected: HashSet<PeerId>,
}

impl VnContact {
    pub fn new(board: std::sync::Arc<Contact>, own: impl IntoIterator<Item = PeerId>) -> Self {
        Self {
            board,
            own: own.into_iter().collect(),
            connected: HashSet::new(),
        }
    }

    /// A connection with listed peer `peer` is up.
    pub fn established(&mut self, peer: PeerId) {
        if self.own.contains(&peer) {
            return;
        }
        self.board.established.fetch_add(1, Ordering::Relaxed);
        if self.connected.insert(peer) {
            self.board.connected.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The last connection with `peer` closed.
    pub fn closed(&mut self, peer: &PeerId) {
        if self.connected.remove(peer) {
            self.board.connected.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// A dial of listed peer `peer` failed with `error` (siblings included: the address tried is what an
    /// operator needs to see).
    pub fn dial_failed(&self, peer: PeerId, error: &str) {
        self.board.dial_failed(peer, error);
    }
}

impl Drop for VnContact {
    /// A VN that ends (lost, or the node stops) holds no connection any more.
    fn drop(&mut self) {
        self.board
            .connected
            .fetch_sub(self.connected.len(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn siblings_do_not_count_and_each_connection_counts_up_and_down_once() {
        let board = Arc::new(Contact::default());
        let (me, sibling, other) = (PeerId::random(), PeerId::random(), PeerId::random());
        let mut vn = VnContact::new(board.clone(), [me, sibling]);
        vn.established(sibling);
        assert_eq!((board.established(), board.connected()), (0, 0));
        vn.established(other);
        vn.established(other);
        assert_eq!((board.established(), board.connected()), (2, 1));
        vn.closed(&other);
        vn.closed(&other);
        assert_eq!((board.established(), board.connected()), (2, 0));
        vn.established(other);
        drop(vn);
        assert_eq!(board.connected(), 0, "a VN that ends holds nothing");
    }

    #[test]
    fn the_latest_failure_of_each_peer_is_kept_within_a_bound() {
        let board = Arc::new(Contact::default());
        let vn = VnContact::new(board.clone(), []);
        let peers: Vec<PeerId> = (0..6).map(|_| PeerId::random()).collect();
        for p in &peers {
            vn.dial_failed(*p, "refused");
        }
        vn.dial_failed(peers[3], &"x".repeat(1000));
        let f = board.failures();
        assert_eq!(f.len(), FAILURES_KEPT);
        assert_eq!(f.last().unwrap().0, peers[3], "the latest last, once");
        assert!(f.last().unwrap().1.chars().count() <= FAILURE_CHARS + 1);
        assert_eq!(f.iter().filter(|(p, _)| *p == peers[3]).count(), 1);
    }
}
