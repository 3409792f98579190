//! Noticing a peer that vanished without a reset (power cut, partition, a frozen process): its connection
//! stays open as far as the kernel knows, and without this every frozen round that includes it waited the
//! whole exchange timeout, round after round, until TCP gave up (about 15 minutes).
//!
//! libp2p's ping runs on every connection, every [`PING_INTERVAL`]; its own failures say nothing for a long
//! time (the first is silent by design, the second waits for a new stream's negotiation, 10 s more). So the
//! rule is ours: a connection that has answered no ping for `Timeouts::peer_silence` is closed, and a peer
//! left with no connection that answers is gone (`VnInput::PeerGone`, once). A peer is therefore noticed at
//! most `peer_silence` + [`PING_INTERVAL`] after its last answer ([`Liveness::bound`]).
//!
//! Sans-IO: the VN's task tells it of connections and pongs and asks it, at [`Liveness::next_check`], which
//! connections fell silent.

use std::collections::HashMap;
use std::time::Duration;

use libp2p::PeerId;
use libp2p::swarm::ConnectionId;

/// How often libp2p's ping asks each connection for an answer. Pings are a few dozen bytes each way; a
/// connection's timer starts when it opens, so siblings' pings do not line up.
pub const PING_INTERVAL: Duration = Duration::from_secs(1);

/// Default of `Timing::peer_silence_ms`: a connection silent this long is closed. Ping answers come from the
/// peer's connection task, not its training, so a busy peer answers well within it; a pong can wait behind
/// what the peer's kernel already holds to send us (a chunk of 45 MB on a slow link: seconds), which is why
/// it is not shorter.
pub const DEFAULT_PEER_SILENCE: Duration = Duration::from_secs(6);

/// The shortest silence accepted: a few ping intervals, or a pong a little late would close a live connection.
pub const MIN_PEER_SILENCE: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, Copy)]
struct Conn {
    peer: PeerId,
    /// When it last answered a ping (or opened).
    heard: Duration,
}

/// The connections of one VN and when each last answered.
#[derive(Debug)]
pub struct Liveness {
    silence: Duration,
    conns: HashMap<ConnectionId, Conn>,
}

/// A connection that fell silent, to be closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Silent {
    pub connection: ConnectionId,
    pub peer: PeerId,
    /// How long it had been silent.
    pub silent_for: Duration,
    /// No other connection to the peer answers: the peer is gone.
    pub peer_gone: bool,
}

impl Liveness {
    /// Connections silent for `silence` are closed.
    pub fn new(silence: Duration) -> Self {
        Self {
            silence,
            conns: HashMap::new(),
        }
    }

    /// The longest a vanished peer goes unnoticed: the silence, plus the check's own granularity.
    pub fn bound(silence: Duration) -> Duration {
        silence + PING_INTERVAL
    }

    pub fn established(&mut self, connection: ConnectionId, peer: PeerId, now: Duration) {
        self.conns.insert(connection, Conn { peer, heard: now });
    }

    /// A ping on `connection` was answered.
    pub fn answered(&mut self, connection: ConnectionId, now: Duration) {
        if let Some(c) = self.conns.get_mut(&connection) {
            c.heard = now;
        }
    }

    pub fn closed(&mut self, connection: ConnectionId) {
        self.conns.remove(&connection);
    }

    /// When to call [`Liveness::take_silent`] next; `None` without connections.
    pub fn next_check(&self, now: Duration) -> Option<Duration> {
        let oldest = self.conns.values().map(|c| c.heard).min()?;
        // Not before the oldest can be silent; not more often than pings come.
        Some((oldest + self.silence).max(now + PING_INTERVAL / 4))
    }

    /// Whether a connection is silent for longer than the silence now.
    pub fn due(&self, now: Duration) -> bool {
        self.conns
            .values()
            .any(|c| now.saturating_sub(c.heard) > self.silence)
    }

    /// The connections silent for longer than the silence, forgotten here (the caller closes them).
    pub fn take_silent(&mut self, now: Duration) -> Vec<Silent> {
        let silence = self.silence;
        let quiet = |c: &Conn| now.saturating_sub(c.heard) > silence;
        let mut silent: Vec<(ConnectionId, Conn)> = self
            .conns
            .iter()
            .filter(|(_, c)| quiet(c))
            .map(|(id, c)| (*id, *c))
            .collect();
        silent.sort_by_key(|(id, _)| *id);
        for (id, _) in &silent {
            self.conns.remove(id);
        }
        silent
            .into_iter()
            .map(|(connection, Conn { peer, heard })| Silent {
                connection,
                peer,
                silent_for: now.saturating_sub(heard),
                peer_gone: !self.conns.values().any(|c| c.peer == peer),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: f64) -> Duration {
        Duration::from_secs_f64(secs)
    }

    #[test]
    fn a_connection_that_stops_answering_is_silent_after_the_bound_and_its_peer_gone_once() {
        let peer = PeerId::random();
        let (a, b) = (
            ConnectionId::new_unchecked(1),
            ConnectionId::new_unchecked(2),
        );
        let mut l = Liveness::new(s(6.0));
        l.established(a, peer, s(0.0));
        for t in 1..=10 {
            l.answered(a, s(t as f64));
            assert!(l.take_silent(s(t as f64)).is_empty());
        }
        // Last answer at 10 s.
        assert!(l.next_check(s(10.0)).unwrap() <= s(16.0));
        assert!(l.take_silent(s(16.0)).is_empty(), "not before the silence");
        assert_eq!(
            l.take_silent(s(16.1)),
            vec![Silent {
                connection: a,
                peer,
                silent_for: s(6.1),
                peer_gone: true
            }]
        );
        assert!(l.take_silent(s(30.0)).is_empty(), "reported once");
        assert_eq!(l.next_check(s(30.0)), None);
        // A second connection that still answers keeps the peer.
        l.established(a, peer, s(30.0));
        l.established(b, peer, s(30.0));
        l.answered(b, s(36.0));
        let silent = l.take_silent(s(36.5));
        assert_eq!(silent.len(), 1);
        assert!(!silent[0].peer_gone);
    }

    #[test]
    fn the_check_is_never_busy() {
        let mut l = Liveness::new(s(6.0));
        l.established(ConnectionId::new_unchecked(1), PeerId::random(), s(0.0));
        // Overdue (the caller was late): still a quarter interval ahead, not now.
        assert!(l.next_check(s(100.0)).unwrap() > s(100.0));
    }
}
