//! Noticing a node that reaches nobody. Three node processes whose peer list named an address nobody could
//! dial each ran all their rounds alone — 0 neighbours every round, training on their own data only, not one
//! warning, exit 0. Now a node that has reached no peer outside itself for a whole round says so every round
//! (what it dialled and why that failed, where known), and stops with an error once it has been alone for
//! [`DEFAULT_ISOLATION_TIMEOUT`] (`isolation_timeout_s`), unless told to wait for ever (`--wait-for-peers`).
//!
//! What counts as reaching someone: with the node's own VNs, a connection of any of them with a listed peer
//! outside the node (opened since the last check, or up now; `net::contact`). With hosted VNs (`node vn`),
//! whose connections are in another process, a round with a neighbour or a received copy (a sibling
//! neighbour then counts too). A node whose peer list names no VN but its own runs alone by design and is
//! not watched. The clock starts with the node: a node started long before its peers warns from its first
//! round and stops if they do not come within the timeout; peers that leave for a while are noticed only if
//! every one of them does.

use std::sync::Arc;
use std::time::Duration;

use libp2p::PeerId;

use crate::net::contact::Contact;
use crate::{NodeError, VnAddr};

/// How long a node may reach nobody before it stops (`isolation_timeout_s`): a minute, longer than any
/// timing's warm-up (5 s by default, 20 s crowded), so that nodes started a little apart find each other.
pub const DEFAULT_ISOLATION_TIMEOUT: Duration = Duration::from_secs(60);

/// Bootstrap addresses named in a report.
const ADDRESSES_NAMED: usize = 4;

/// Whether a node reaches anyone, and since when it has not.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Isolation {
    /// Alone for this long stops the node; `None`: never.
    timeout: Option<Duration>,
    /// When the node was last known to reach someone (or started); `None` while it does.
    alone_since: Option<Duration>,
    /// When the last check found it reaching someone.
    last_reached: Duration,
    /// Checks in a row that found it alone, and whether any check found it reaching someone.
    alone_checks: u32,
    ever_reached: bool,
}

/// A check's finding.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Finding {
    Reached,
    /// Alone for this long; `stop` once that is the timeout or more.
    Alone {
        alone: Duration,
        stop: bool,
    },
}

impl Isolation {
    /// A node started at `start` (times since the node's epoch), alone until a check finds otherwise.
    pub(crate) fn new(timeout: Option<Duration>, start: Duration) -> Self {
        Self {
            timeout,
            alone_since: Some(start),
            last_reached: start,
            alone_checks: 0,
            ever_reached: false,
        }
    }

    /// Whether the last finding of "alone" is not worth a warning yet: the first check alone after the node
    /// reached someone. At a run's end the peers that finished first have gone, and the last nodes' last
    /// round found nobody (measured: the rounds bench's setting warned "alone for 0 s" at its last round); a
    /// node that stays alone is warned of from the next round, and one alone from its start from its first.
    pub(crate) fn quiet(&self) -> bool {
        self.ever_reached && self.alone_checks < 2
    }

    /// At `now`: whether the node reached anyone since the last check (`reached`).
    pub(crate) fn check(&mut self, now: Duration, reached: bool) -> Finding {
        if reached {
            self.alone_since = None;
            self.last_reached = now;
            self.alone_checks = 0;
            self.ever_reached = true;
            return Finding::Reached;
        }
        self.alone_checks += 1;
        // It was reaching someone at the last check, and nobody since.
        let since = *self.alone_since.get_or_insert(self.last_reached);
        let alone = now.saturating_sub(since);
        Finding::Alone {
            alone,
            stop: self.timeout.is_some_and(|t| alone >= t),
        }
    }

    /// When the node stops if nobody is reached by then.
    pub(crate) fn deadline(&self) -> Option<Duration> {
        Some(self.alone_since? + self.timeout?)
    }

    pub(crate) fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
}

/// The RN's watch: the state, where its evidence comes from, and what to name in a report.
pub(crate) struct IsolationWatch {
    pub(crate) state: Isolation,
    /// The node's own VNs' board; `None` when they are hosted.
    board: Option<Arc<Contact>>,
    /// The board's connection count at the last check.
    established_seen: u64,
    /// The peer list's addressed entries outside this node.
    bootstrap: Vec<VnAddr>,
}

impl IsolationWatch {
    /// The watch of a node whose VNs are `own`, on a network of `listed` peers with `bootstrap` entries;
    /// `None` when the list names no VN but the node's own (it runs alone by design).
    pub(crate) fn new(
        timeout: Option<Duration>,
        start: Duration,
        board: Option<Arc<Contact>>,
        own: &[PeerId],
        listed: impl IntoIterator<Item = PeerId>,
        bootstrap: Vec<VnAddr>,
    ) -> Option<Self> {
        if listed.into_iter().all(|p| own.contains(&p)) {
            return None;
        }
        Some(Self {
            state: Isolation::new(timeout, start),
            board,
            established_seen: 0,
            bootstrap: bootstrap
                .into_iter()
                .filter(|b| !own.contains(&b.peer))
                .collect(),
        })
    }

    /// Whether the node's own VNs reached anyone since the last look (`None`: the VNs are hosted).
    fn board_reached(&mut self) -> Option<bool> {
        let b = self.board.as_ref()?;
        let established = b.established();
        let reached = established > self.established_seen || b.connected() > 0;
        self.established_seen = established;
        Some(reached)
    }

    /// The check at the end of a round with `neighbours` and `copies` (summed over the node's VNs); an
    /// absent round (dropout) of a hosted node says nothing.
    pub(crate) fn after_round(
        &mut self,
        now: Duration,
        neighbours: u32,
        copies: u32,
        absent: bool,
    ) -> Option<Finding> {
        let reached = match self.board_reached() {
            Some(r) => r,
            None if absent => return None,
            None => neighbours > 0 || copies > 0,
        };
        Some(self.state.check(now, reached))
    }

    /// The check when the deadline came between rounds: only the board can tell (a hosted node waits for its
    /// round's end).
    pub(crate) fn at_deadline(&mut self, now: Duration) -> Option<Finding> {
        let reached = self.board_reached()?;
        Some(self.state.check(now, reached))
    }

    /// When to look again between rounds: the deadline, where the board can tell.
    pub(crate) fn deadline(&self) -> Option<Duration> {
        self.board.as_ref()?;
        self.state.deadline()
    }

    /// What the node tried and why it failed, as far as known.
    pub(crate) fn what_was_tried(&self) -> String {
        let failures = self
            .board
            .as_ref()
            .map(|b| b.failures())
            .unwrap_or_default();
        if !failures.is_empty() {
            let list: Vec<String> = failures
                .iter()
                .map(|(peer, error)| format!("{peer}: {error}"))
                .collect();
            return format!("latest failed dials: {}", list.join("; "));
        }
        if self.bootstrap.is_empty() {
            return "the peer list gives an address (`addr`) for none of the peers outside this node, so \
                    there was nobody to dial: give a few entries their address"
                .into();
        }
        let named: Vec<String> = self
            .bootstrap
            .iter()
            .take(ADDRESSES_NAMED)
            .map(|b| b.addr.to_string())
            .collect();
        let more = self.bootstrap.len().saturating_sub(ADDRESSES_NAMED);
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        match self.board {
            Some(_) => format!(
                "no dial has failed yet (a dial still under way?); the peer list's addresses: {}{more}",
                named.join(", ")
            ),
            // A hosted VN's dials are logged by its host.
            None => format!(
                "the VNs are hosted: their hosts' logs say what they dialled; the peer list's addresses: \
                 {}{more}",
                named.join(", ")
            ),
        }
    }

    /// The warning of a round the node stays alone.
    pub(crate) fn warning(&self, alone: Duration) -> String {
        let until = match self.state.timeout() {
            Some(t) => format!(
                "it stops at {} s alone (isolation_timeout_s; 0 or `node run --wait-for-peers` waits for ever)",
                t.as_secs()
            ),
            None => {
                "it waits for peers for ever (--wait-for-peers or isolation_timeout_s = 0)".into()
            }
        };
        format!(
            "isolated: this node has reached no peer outside itself for {:.0} s and trains on its own data \
             only; {}; {until}",
            alone.as_secs_f64(),
            self.what_was_tried()
        )
    }

    /// The error the node stops with.
    pub(crate) fn error(&self, alone: Duration) -> NodeError {
        NodeError::Isolated(format!(
            "this node reached no peer outside itself in {:.0} s (isolation_timeout_s = {}); {}. Check that \
             the peer list's addresses are right and reachable from this host, that the same pre-shared key \
             is used everywhere, and that the peers are running; `node run --wait-for-peers` (or \
             isolation_timeout_s = 0) waits for them for ever",
            alone.as_secs_f64(),
            self.state.timeout().map_or(0, |t| t.as_secs()),
            self.what_was_tried()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libp2p::Multiaddr;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn alone_from_the_start_warns_then_stops_at_the_timeout() {
        let mut i = Isolation::new(Some(10 * S), Duration::ZERO);
        assert_eq!(i.deadline(), Some(10 * S));
        assert_eq!(
            i.check(4 * S, false),
            Finding::Alone {
                alone: 4 * S,
                stop: false
            }
        );
        assert_eq!(
            i.check(10 * S, false),
            Finding::Alone {
                alone: 10 * S,
                stop: true
            }
        );
    }

    #[test]
    fn reaching_anyone_resets_the_clock_and_a_later_silence_counts_from_the_last_contact() {
        let mut i = Isolation::new(Some(10 * S), Duration::ZERO);
        assert_eq!(i.check(9 * S, true), Finding::Reached);
        assert_eq!(i.deadline(), None, "no deadline while reaching someone");
        // Peers gone for a while: alone since the check that last found them, and fine once they are back.
        assert_eq!(
            i.check(15 * S, false),
            Finding::Alone {
                alone: 6 * S,
                stop: false
            }
        );
        assert_eq!(i.deadline(), Some(19 * S));
        assert_eq!(i.check(18 * S, true), Finding::Reached);
        assert_eq!(
            i.check(40 * S, false),
            Finding::Alone {
                alone: 22 * S,
                stop: true
            }
        );
    }

    /// The first round alone after contact (peers that finished the run first) is not warned of; the next
    /// is, and a node alone from its start is warned of from its first check.
    #[test]
    fn the_first_round_alone_after_contact_is_quiet() {
        let mut i = Isolation::new(Some(60 * S), Duration::ZERO);
        i.check(S, false);
        assert!(!i.quiet(), "alone from the start");
        i.check(2 * S, true);
        i.check(3 * S, false);
        assert!(i.quiet());
        i.check(4 * S, false);
        assert!(!i.quiet());
    }

    #[test]
    fn waiting_for_ever_never_stops() {
        let mut i = Isolation::new(None, Duration::ZERO);
        assert_eq!(i.deadline(), None);
        assert_eq!(
            i.check(1000 * S, false),
            Finding::Alone {
                alone: 1000 * S,
                stop: false
            }
        );
    }

    fn addr(peer: PeerId, a: &str) -> VnAddr {
        VnAddr::new(peer, a.parse::<Multiaddr>().unwrap())
    }

    #[test]
    fn a_peer_list_of_only_the_nodes_own_vns_is_not_watched() {
        let own = [PeerId::random(), PeerId::random()];
        let boot = vec![addr(own[0], "/ip4/127.0.0.1/tcp/1")];
        assert!(
            IsolationWatch::new(Some(S), Duration::ZERO, None, &own, own, boot.clone()).is_none()
        );
        let other = PeerId::random();
        let w = IsolationWatch::new(Some(S), Duration::ZERO, None, &own, [own[0], other], boot)
            .expect("watched");
        assert!(
            w.what_was_tried()
                .contains("none of the peers outside this node"),
            "its own address is no bootstrap for it: {}",
            w.what_was_tried()
        );
    }

    #[test]
    fn the_board_decides_for_own_vns_and_rounds_for_hosted_ones() {
        let own = [PeerId::random()];
        let other = PeerId::random();
        let boot = vec![addr(other, "/dns4/node-b.example/tcp/4001")];
        let board = Arc::new(Contact::default());
        let mut w = IsolationWatch::new(
            Some(10 * S),
            Duration::ZERO,
            Some(board.clone()),
            &own,
            [own[0], other],
            boot.clone(),
        )
        .unwrap();
        // Neighbours from siblings alone do not count where the board can tell.
        assert!(matches!(
            w.after_round(3 * S, 4, 4, false),
            Some(Finding::Alone { .. })
        ));
        assert_eq!(w.deadline(), Some(10 * S));
        let mut vn = crate::net::contact::VnContact::new(board.clone(), own);
        vn.dial_failed(other, "Connection refused");
        assert!(w.warning(3 * S).contains("Connection refused"));
        vn.established(other);
        vn.closed(&other);
        assert_eq!(
            w.at_deadline(10 * S),
            Some(Finding::Reached),
            "opened and closed since"
        );
        assert!(matches!(
            w.at_deadline(25 * S),
            Some(Finding::Alone { stop: true, .. })
        ));
        let e = w.error(15 * S).to_string();
        assert!(
            e.contains("isolated") && e.contains("--wait-for-peers"),
            "{e}"
        );

        let mut hosted = IsolationWatch::new(
            Some(10 * S),
            Duration::ZERO,
            None,
            &own,
            [own[0], other],
            boot,
        )
        .unwrap();
        assert_eq!(hosted.deadline(), None, "checked at round ends only");
        assert_eq!(hosted.at_deadline(S), None);
        assert_eq!(
            hosted.after_round(2 * S, 0, 0, true),
            None,
            "an absent round says nothing"
        );
        assert_eq!(
            hosted.after_round(3 * S, 2, 0, false),
            Some(Finding::Reached)
        );
        assert!(hosted.warning(S).contains("node-b.example"));
    }
}
