//! [`Preconnect`]: connections a fresh VN opens during its warm-up, before the rounds need them.
//!
//! Every connection costs a handshake (the pre-shared key, noise's X25519 exchanges and the peers' Ed25519
//! signatures, yamux). Opened on demand, they all came in the first overlay windows, when every VN starts its
//! negotiations and its proposals walk to peers it never spoke to: measured in the default release run, the
//! two cores were saturated for a second after round 0 began, a quarter of it in curve25519, while the
//! warm-up before it used 15% of them; the control round trips rose to 20-60 ms, the sub-steps stretched, and
//! rounds 1-4 waited up to a second for overlays negotiated under that load. The warm-up exists for the
//! network to form: it now opens the connections too, at random times, so the first rounds find them open.
//!
//! Each pair of peers is dialled from one side only (the smaller peer id dials), and a VN dials at most
//! [`PER_DEGREE`] × r peers (and never more than [`MAX_PRECONNECT`]), drawn at random: on a large network the
//! rounds still open the rest on demand, and no VN holds more connections than a few rounds would give it
//! anyway. The times and the choice are the VN's own draws (DESIGN §5: siblings do not dial in step), from a
//! seeded RNG distinct per VN.
//!
//! The dials must not become the load they were meant to take off the rounds. A VN has one dial in flight at
//! a time (a busy machine's slow handshakes slow its dials with them), and drops what is left of its plan
//! when its node's rounds begin (`abandon`). Dialling on schedule regardless, 512 VNs in one process
//! (`testnet --nodes 64 --vns 8 --degree 8 --rounds 5 --transport memory`) made some 16,000 connections at
//! once and formed 0.2 of 8 neighbours. Paced, they form 2.8-3.6 (three runs, 16 and 32 dials), about the
//! 3.5 before this module, but 4.6 without the dials in the same code (one run, LAN timing). Not because they
//! slow the spawning, as first thought (it takes 0.4 s: `spawn_seconds` in the run's summary), but because
//! the LAN timing's 5 s warm-up gives 512 VNs' ~7,400 dials 2.5 s on two cores, before every VN negotiates
//! five rounds at once. `Timing::crowded` (a 20 s warm-up, one round ahead) is the timing for that scale.

use std::collections::VecDeque;
use std::time::Duration;

use libp2p::PeerId;
use rand::Rng;
use rand::seq::SliceRandom;

use crate::VnAddr;

/// The most peers one VN dials during its warm-up, whatever its degree.
pub const MAX_PRECONNECT: usize = 32;

/// Dials per unit of degree: about the peers a VN's first rounds talk to (its r neighbours and the acceptors
/// of its walks). 2r keeps the default run's gain (0.144 s rounds against 0.142 with 32 dials, 0.182 with
/// r); at 512 VNs in one process (r = 8), 16 or 32 made no difference.
pub const PER_DEGREE: usize = 2;

/// The part of the warm-up the dials are spread over: its first half, so the connections are up before
/// the first overlays are negotiated in its tail (`Timing::prepare_lead`).
pub const SPREAD_FRACTION: f64 = 0.5;

/// The dials a VN makes during its warm-up, in time order (times since the VN's epoch).
#[derive(Debug, Default)]
pub struct Preconnect {
    due: VecDeque<(Duration, VnAddr)>,
    /// The peer being dialled, if any.
    in_flight: Option<PeerId>,
}

impl Preconnect {
    /// The plan of VN `me` over the listed `peers` for a warm-up of `warmup` that began at `start`: at most
    /// `max` dials (and never more than [`MAX_PRECONNECT`]).
    pub fn plan(
        me: PeerId,
        peers: impl IntoIterator<Item = VnAddr>,
        max: usize,
        start: Duration,
        warmup: Duration,
        rng: &mut impl Rng,
    ) -> Self {
        let mut ours: Vec<VnAddr> = peers.into_iter().filter(|p| p.peer > me).collect();
        ours.sort_by_key(|p| p.peer);
        ours.dedup_by_key(|p| p.peer);
        ours.shuffle(rng);
        ours.truncate(max.min(MAX_PRECONNECT));
        let spread = warmup.mul_f64(SPREAD_FRACTION);
        let mut due: Vec<(Duration, VnAddr)> = ours
            .into_iter()
            .map(|p| (start + spread.mul_f64(rng.random::<f64>()), p))
            .collect();
        due.sort_by_key(|(t, _)| *t);
        Self {
            due: due.into(),
            in_flight: None,
        }
    }

    /// When the next dial is due: none while one is in flight or when the plan is done.
    pub fn next_at(&self) -> Option<Duration> {
        match self.in_flight {
            Some(_) => None,
            None => self.due.front().map(|(t, _)| *t),
        }
    }

    /// The next peer to dial if its time has come by `now` and no dial is in flight. The caller reports the
    /// dial it started with [`Preconnect::dialling`].
    pub fn take_due(&mut self, now: Duration) -> Option<VnAddr> {
        if self.in_flight.is_some() || self.due.front().is_none_or(|(t, _)| *t > now) {
            return None;
        }
        self.due.pop_front().map(|(_, p)| p)
    }

    /// A dial to `peer` started: the next waits for it to end.
    pub fn dialling(&mut self, peer: PeerId) {
        self.in_flight = Some(peer);
    }

    /// A connection to `peer` was established or failed to be: if it was our dial, the next may go.
    pub fn ended(&mut self, peer: &PeerId) {
        if self.in_flight.as_ref() == Some(peer) {
            self.in_flight = None;
        }
    }

    /// The rounds began: the dials not made yet are left to them.
    pub fn abandon(&mut self) {
        self.due.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libp2p::Multiaddr;
    use rand::SeedableRng;

    fn peers(n: usize) -> Vec<VnAddr> {
        (0..n)
            .map(|_| VnAddr::new(PeerId::random(), Multiaddr::empty()))
            .collect()
    }

    #[test]
    fn each_pair_is_dialled_from_one_side_within_the_spread_and_in_time_order() {
        let all = peers(12);
        let warmup = Duration::from_millis(1000);
        let start = Duration::from_millis(50);
        let mut dials = 0;
        for (i, me) in all.iter().enumerate() {
            let mut rng = rand_chacha::ChaCha12Rng::seed_from_u64(i as u64);
            let mut p = Preconnect::plan(me.peer, all.clone(), 32, start, warmup, &mut rng);
            let mut last = Duration::ZERO;
            while let Some(at) = p.next_at() {
                assert!(at >= start && at <= start + warmup.mul_f64(SPREAD_FRACTION));
                assert!(at >= last);
                last = at;
                assert_eq!(
                    p.take_due(at - Duration::from_nanos(1)),
                    None,
                    "not before its time"
                );
                let d = p.take_due(at).expect("due");
                assert!(d.peer > me.peer, "the smaller id dials");
                dials += 1;
                p.dialling(d.peer);
                assert_eq!(p.next_at(), None, "one dial in flight at a time");
                assert_eq!(p.take_due(Duration::MAX), None);
                p.ended(&PeerId::random());
                assert_eq!(
                    p.next_at(),
                    None,
                    "another peer's connection does not end our dial"
                );
                p.ended(&d.peer);
            }
            assert_eq!(p.take_due(Duration::MAX), None);
        }
        assert_eq!(dials, 12 * 11 / 2, "every pair once");
    }

    #[test]
    fn a_vn_dials_a_bounded_random_subset() {
        let all = peers(200);
        let me = all.iter().map(|p| p.peer).min().expect("peers");
        let plan = |seed| {
            let mut rng = rand_chacha::ChaCha12Rng::seed_from_u64(seed);
            let mut p = Preconnect::plan(
                me,
                all.clone(),
                usize::MAX,
                Duration::ZERO,
                Duration::from_secs(1),
                &mut rng,
            );
            let mut chosen: Vec<PeerId> = std::iter::from_fn(|| p.take_due(Duration::MAX))
                .map(|a| a.peer)
                .collect();
            chosen.sort();
            chosen
        };
        let a = plan(1);
        assert_eq!(a.len(), MAX_PRECONNECT, "usize::MAX asked, the cap holds");
        assert_eq!(a, plan(1), "the same seed gives the same plan");
        assert_ne!(a, plan(2), "another VN's draws give another");
    }

    #[test]
    fn the_rest_of_the_plan_is_dropped_when_the_rounds_begin() {
        let all = peers(20);
        let me = all.iter().map(|p| p.peer).min().expect("peers");
        let mut rng = rand_chacha::ChaCha12Rng::seed_from_u64(3);
        let mut p = Preconnect::plan(me, all, 8, Duration::ZERO, Duration::from_secs(1), &mut rng);
        assert!(p.next_at().is_some());
        p.abandon();
        assert_eq!(p.next_at(), None);
        assert_eq!(p.take_due(Duration::MAX), None);
    }
}
