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
//! [`MAX_PRECONNECT`] peers, drawn at random: on a large network the rounds still open the rest on demand,
//! and no VN holds more connections than a few rounds would give it anyway. The times and the choice are
//! the VN's own draws (DESIGN §5: siblings do not dial in step), from a seeded RNG distinct per VN.

use std::collections::VecDeque;
use std::time::Duration;

use libp2p::PeerId;
use rand::Rng;
use rand::seq::SliceRandom;

use crate::VnAddr;

/// The most peers one VN dials during its warm-up.
pub const MAX_PRECONNECT: usize = 32;

/// The part of the warm-up the dials are spread over: its first half, so the connections are up before
/// the first overlays are negotiated in its tail (`Timing::prepare_lead`).
pub const SPREAD_FRACTION: f64 = 0.5;

/// The dials a VN makes during its warm-up, in time order (times since the VN's epoch).
#[derive(Debug, Default)]
pub struct Preconnect {
    due: VecDeque<(Duration, VnAddr)>,
}

impl Preconnect {
    /// The plan of VN `me` over the listed `peers` for a warm-up of `warmup` that began at `start`.
    pub fn plan(
        me: PeerId,
        peers: impl IntoIterator<Item = VnAddr>,
        start: Duration,
        warmup: Duration,
        rng: &mut impl Rng,
    ) -> Self {
        let mut ours: Vec<VnAddr> = peers.into_iter().filter(|p| p.peer > me).collect();
        ours.sort_by_key(|p| p.peer);
        ours.dedup_by_key(|p| p.peer);
        ours.shuffle(rng);
        ours.truncate(MAX_PRECONNECT);
        let spread = warmup.mul_f64(SPREAD_FRACTION);
        let mut due: Vec<(Duration, VnAddr)> = ours
            .into_iter()
            .map(|p| (start + spread.mul_f64(rng.random::<f64>()), p))
            .collect();
        due.sort_by_key(|(t, _)| *t);
        Self { due: due.into() }
    }

    /// When the next dial is due, if any is left.
    pub fn next_at(&self) -> Option<Duration> {
        self.due.front().map(|(t, _)| *t)
    }

    /// The peers whose dial time has come by `now`.
    pub fn take_due(&mut self, now: Duration) -> Vec<VnAddr> {
        let mut out = Vec::new();
        while self.due.front().is_some_and(|(t, _)| *t <= now) {
            out.push(self.due.pop_front().expect("checked").1);
        }
        out
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
            let mut p = Preconnect::plan(me.peer, all.clone(), start, warmup, &mut rng);
            let mut last = Duration::ZERO;
            while let Some(at) = p.next_at() {
                assert!(at >= start && at <= start + warmup.mul_f64(SPREAD_FRACTION));
                assert!(at >= last);
                last = at;
                let due = p.take_due(at);
                assert!(!due.is_empty());
                for d in due {
                    assert!(d.peer > me.peer, "the smaller id dials");
                    dials += 1;
                }
            }
            assert!(p.take_due(Duration::MAX).is_empty());
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
                Duration::ZERO,
                Duration::from_secs(1),
                &mut rng,
            );
            let mut chosen: Vec<PeerId> = p
                .take_due(Duration::MAX)
                .into_iter()
                .map(|a| a.peer)
                .collect();
            chosen.sort();
            chosen
        };
        let a = plan(1);
        assert_eq!(a.len(), MAX_PRECONNECT);
        assert_eq!(a, plan(1), "the same seed gives the same plan");
        assert_ne!(a, plan(2), "another VN's draws give another");
    }
}
