//! When a VN's sends leave (DESIGN §7, the passive participant with a packet clock): each VN holds what its
//! engine asks it to send — overlay walks and their relays, Cyclon shuffles and answers, chunks and chunk
//! replies, round queries and answers, dialling or listening side alike — and releases it after a random delay
//! of its own, drawn from a stream only that VN knows (its secret key, `crate::secret`).
//!
//! Why: one node process serves its k VNs from one event loop, and whatever reaches several of them at once
//! (the RN's start of a round, its chunks, packets that arrive together) makes them all send within the same
//! millisecond. An observer timing the packets on its own links then links siblings by how often they send in
//! the same millisecond (ROC-AUC 0.95 in the default procs network, `results/linkage-packets/`). With a delay
//! drawn independently per VN, two siblings woken together leave apart: with exponential delays of mean m, the
//! gap between them is Laplace-distributed with scale m, so they leave within a millisecond of each other
//! 1 − e^(−1/m) of the time (0.22 at m = 4 ms) instead of nearly always. Exponential (memoryless), as mixnets delay messages,
//! so that how long a VN has held something says nothing about when it goes; truncated at [`CAP_MEANS`] means
//! (redrawn above it) so that no send waits unboundedly.
//!
//! The VN's control-link readers acknowledge what they read after delays of the same law (`super::control_link`):
//! an acknowledgement is the one message a VN sends without its engine.
//!
//! Everything one engine step produced goes out together, at one release time, and steps leave in order (a
//! release never precedes the one before it): the VN's own messages keep the order its engine gave them.
//!
//! Off by default (`Timing::release_delay_us`): measured in the default procs network, the VNs' own threads
//! (`super::vn_task`) remove the same-millisecond link alone, and delays alone make it stronger — a process
//! that waits for the CPU releases everything that fell due meanwhile in one go, siblings' sends together
//! (`results/linkage-packets/`).
//!
//! Sans-IO: time comes in as `now`, randomness from the stream given at construction.

use std::collections::VecDeque;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha12Rng;

/// Delays are drawn below this many means (e^−6: one draw in 400 is redrawn).
pub const CAP_MEANS: u32 = 6;

/// One VN's release schedule.
#[derive(Debug, Clone)]
pub struct ReleaseSchedule {
    mean: Duration,
    rng: ChaCha12Rng,
    /// The latest release time handed out: the next is never earlier.
    last: Duration,
}

impl ReleaseSchedule {
    /// Delays of mean `mean` (zero: every send leaves at once) from `rng`.
    pub fn new(mean: Duration, rng: ChaCha12Rng) -> Self {
        Self {
            mean,
            rng,
            last: Duration::ZERO,
        }
    }

    /// No delays.
    pub fn off() -> Self {
        Self::new(Duration::ZERO, ChaCha12Rng::from_seed([0; 32]))
    }

    /// A schedule of the same mean on a stream of its own, drawn from this one (for one of the VN's tasks).
    pub fn fork(&mut self) -> Self {
        Self::new(self.mean, ChaCha12Rng::from_rng(&mut self.rng))
    }

    /// A stream of its own, drawn from this one.
    pub fn fork_rng(&mut self) -> ChaCha12Rng {
        ChaCha12Rng::from_rng(&mut self.rng)
    }

    /// Whether sends are held at all.
    pub fn delays(&self) -> bool {
        !self.mean.is_zero()
    }

    /// The largest delay one draw can give.
    pub fn cap(&self) -> Duration {
        self.mean * CAP_MEANS
    }

    /// A fresh delay: exponential with mean `mean`, below [`Self::cap`].
    pub fn draw(&mut self) -> Duration {
        if self.mean.is_zero() {
            return Duration::ZERO;
        }
        loop {
            // 1 − u is in (0, 1]: its logarithm is finite.
            let u: f64 = self.rng.random();
            let x = -(1.0 - u).ln();
            if x < f64::from(CAP_MEANS) {
                return self.mean.mul_f64(x);
            }
        }
    }

    /// When what is ready at `now` leaves: `now` plus a fresh delay, but not before the previous release.
    pub fn release_at(&mut self, now: Duration) -> Duration {
        let at = (now + self.draw()).max(self.last);
        self.last = at;
        at
    }
}

/// Sends held until their release times, in release order.
#[derive(Debug)]
pub struct Held<T> {
    schedule: ReleaseSchedule,
    queue: VecDeque<(Duration, Vec<T>)>,
}

impl<T> Held<T> {
    pub fn new(schedule: ReleaseSchedule) -> Self {
        Self {
            schedule,
            queue: VecDeque::new(),
        }
    }

    /// Whether sends are held at all (else the driver sends at once).
    pub fn delays(&self) -> bool {
        self.schedule.delays()
    }

    /// Holds `sends`, ready at `now`, until their release time (nothing for an empty batch).
    pub fn hold(&mut self, now: Duration, sends: Vec<T>) {
        if sends.is_empty() {
            return;
        }
        let at = self.schedule.release_at(now);
        self.queue.push_back((at, sends));
    }

    /// Holds `sends` until `at` (not before what is held already).
    pub fn hold_at(&mut self, at: Duration, sends: Vec<T>) {
        if sends.is_empty() {
            return;
        }
        let at = at.max(self.schedule.last);
        self.schedule.last = at;
        self.queue.push_back((at, sends));
    }

    /// The earliest release time still held.
    pub fn next_at(&self) -> Option<Duration> {
        self.queue.front().map(|(at, _)| *at)
    }

    /// Everything due at `now`, in order.
    pub fn take_due(&mut self, now: Duration) -> Vec<T> {
        let mut out = Vec::new();
        while self.queue.front().is_some_and(|(at, _)| *at <= now) {
            out.extend(self.queue.pop_front().expect("checked").1);
        }
        out
    }

    /// Everything held, due or not (the VN is stopping), in order.
    pub fn take_all(&mut self) -> Vec<T> {
        self.queue.drain(..).flat_map(|(_, v)| v).collect()
    }

    /// Every send still held, in order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.queue.iter().flat_map(|(_, v)| v)
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(mean_ms: u64, seed: u64) -> ReleaseSchedule {
        ReleaseSchedule::new(
            Duration::from_millis(mean_ms),
            ChaCha12Rng::seed_from_u64(seed),
        )
    }

    #[test]
    fn delays_are_exponential_with_their_mean_and_bounded() {
        let mut s = schedule(4, 1);
        let n = 100_000;
        let draws: Vec<f64> = (0..n).map(|_| s.draw().as_secs_f64() * 1e3).collect();
        let mean = draws.iter().sum::<f64>() / n as f64;
        // A truncated exponential's mean: m (1 − (c + 1) e^−c) / (1 − e^−c) with c = 6: 0.985 m.
        assert!((mean - 3.94).abs() < 0.06, "mean {mean} ms");
        let max = draws.iter().copied().fold(0.0, f64::max);
        assert!(
            max < 24.0 && max > 18.0,
            "bounded by 6 means, and reaching near it: {max}"
        );
        // Memoryless: P(X > 4) ≈ e^−1, P(X > 8 | X > 4) ≈ e^−1 too.
        let over = |t: f64| draws.iter().filter(|&&x| x > t).count() as f64;
        let p1 = over(4.0) / n as f64;
        let p2 = over(8.0) / over(4.0);
        assert!((p1 - (-1f64).exp()).abs() < 0.01, "{p1}");
        assert!((p2 - (-1f64).exp()).abs() < 0.015, "{p2}");
        assert_eq!(s.cap(), Duration::from_millis(24));
        // Off: nothing is held.
        let mut off = schedule(0, 1);
        assert!(!off.delays());
        assert_eq!(
            off.release_at(Duration::from_millis(7)),
            Duration::from_millis(7)
        );
    }

    /// Two siblings woken at the same instants leave apart: they leave within 1 ms of each other about as
    /// often as a Laplace gap of scale m says (1 − e^(−1/4) ≈ 0.22 at 4 ms), in the same millisecond
    /// (1 − q) / (1 + q) ≈ 0.12 of the time (q = e^(−1/4)), and their delays are uncorrelated.
    #[test]
    fn siblings_woken_together_leave_independently() {
        let (mut a, mut b) = (schedule(4, 11), schedule(4, 12));
        let n = 20_000;
        let (mut same_ms, mut within_ms, mut xs, mut ys) = (0, 0, Vec::new(), Vec::new());
        for i in 0..n {
            // Wake-ups 100 ms apart, so that order keeping never binds.
            let now = Duration::from_millis(100 * i);
            let (ta, tb) = (a.release_at(now), b.release_at(now));
            xs.push((ta - now).as_secs_f64());
            ys.push((tb - now).as_secs_f64());
            if ta.as_millis() == tb.as_millis() {
                same_ms += 1;
            }
            if ta.abs_diff(tb) < Duration::from_millis(1) {
                within_ms += 1;
            }
        }
        let share = same_ms as f64 / n as f64;
        assert!((0.10..0.15).contains(&share), "{share}");
        let within = within_ms as f64 / n as f64;
        assert!((0.19..0.25).contains(&within), "{within}");
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let (mx, my) = (mean(&xs), mean(&ys));
        let cov: f64 = xs
            .iter()
            .zip(&ys)
            .map(|(x, y)| (x - mx) * (y - my))
            .sum::<f64>();
        let var = |v: &[f64], m: f64| v.iter().map(|x| (x - m).powi(2)).sum::<f64>();
        let corr = cov / (var(&xs, mx) * var(&ys, my)).sqrt();
        assert!(corr.abs() < 0.03, "delays of two VNs correlate: {corr}");
        // The same stream gives the same delays: the independence comes from the streams.
        let (mut c, mut d) = (schedule(4, 11), schedule(4, 11));
        assert_eq!(c.draw(), d.draw());
    }

    #[test]
    fn held_sends_leave_in_order_at_or_after_their_release() {
        let mut h = Held::new(schedule(4, 3));
        assert!(h.delays());
        let ms = Duration::from_millis;
        h.hold(ms(0), vec!["a", "b"]);
        h.hold(ms(0), Vec::new());
        h.hold(ms(1), vec!["c"]);
        assert_eq!(h.iter().copied().collect::<Vec<_>>(), ["a", "b", "c"]);
        let first = h.next_at().unwrap();
        assert!(first <= ms(24));
        assert!(h.take_due(first - Duration::from_nanos(1)).is_empty());
        let mut got = h.take_due(first);
        assert_eq!(got[..2], ["a", "b"]);
        // Later batches never leave before earlier ones.
        while let Some(at) = h.next_at() {
            assert!(at >= first);
            got.extend(h.take_due(at));
        }
        assert_eq!(got, ["a", "b", "c"]);
        assert!(h.is_empty());
        h.hold(ms(50), vec!["d"]);
        h.hold(ms(50), vec!["e"]);
        assert_eq!(h.take_all(), ["d", "e"]);
        assert_eq!(h.next_at(), None);
    }
}
