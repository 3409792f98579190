//! Token buckets, sans-IO (time is an input): per-peer limits on what a VN handles, and a limit on how often
//! refusals are logged.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

/// A token bucket: up to `burst` events at once, refilled at `per_period` events per `period`.
#[derive(Debug, Clone, Copy)]
pub struct TokenBucket {
    tokens: f64,
    at: Duration,
}

/// The size and refill rate of a family of buckets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub burst: f64,
    pub per_period: f64,
    pub period: Duration,
}

impl Rate {
    fn refill(&self, bucket: &TokenBucket, now: Duration) -> f64 {
        let elapsed = now.saturating_sub(bucket.at).as_secs_f64();
        let per_sec = self.per_period / self.period.as_secs_f64().max(f64::MIN_POSITIVE);
        (bucket.tokens + elapsed * per_sec).min(self.burst)
    }

    /// A full bucket.
    pub fn bucket(&self, now: Duration) -> TokenBucket {
        TokenBucket {
            tokens: self.burst,
            at: now,
        }
    }

    /// Takes one token from `bucket` if it has one.
    pub fn take(&self, bucket: &mut TokenBucket, now: Duration) -> bool {
        bucket.tokens = self.refill(bucket, now);
        bucket.at = bucket.at.max(now);
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Peers tracked at once by one [`PerPeer`]: a bucket that has refilled is forgotten when room is needed, so
/// only peers active within one refill time count. Past this many active peers, new ones are refused until
/// buckets refill: the map never grows with the number of identities a flood uses.
pub const MAX_TRACKED_PEERS: usize = 4096;

/// One bucket per peer, bounded in memory.
///
/// A hash map: every control message a VN receives looks its sender up here, among the hundreds of peers it
/// hears in a large network. Its order is never observed (entries are only looked up, and dropped by
/// [`PerPeer::allow`]'s `retain`, whose outcome does not depend on the order), and its keys are hashed with
/// the standard library's keyed hasher, since peers choose their identities.
#[derive(Debug)]
pub struct PerPeer<I> {
    rate: Rate,
    buckets: HashMap<I, TokenBucket>,
}

impl<I: Eq + Hash + Clone> PerPeer<I> {
    pub fn new(rate: Rate) -> Self {
        Self {
            rate,
            buckets: HashMap::new(),
        }
    }

    /// Whether `peer` may do one more thing now (and counts it).
    pub fn allow(&mut self, peer: &I, now: Duration) -> bool {
        if let Some(b) = self.buckets.get_mut(peer) {
            return self.rate.take(b, now);
        }
        if self.buckets.len() >= MAX_TRACKED_PEERS {
            let rate = self.rate;
            self.buckets.retain(|_, b| rate.refill(b, now) < rate.burst);
            if self.buckets.len() >= MAX_TRACKED_PEERS {
                return false;
            }
        }
        let mut b = self.rate.bucket(now);
        let ok = self.rate.take(&mut b, now);
        self.buckets.insert(peer.clone(), b);
        ok
    }

    /// Peers currently tracked (always ≤ [`MAX_TRACKED_PEERS`]).
    #[cfg(test)]
    pub fn tracked(&self) -> usize {
        self.buckets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_bucket_allows_its_burst_then_its_rate() {
        let rate = Rate {
            burst: 3.0,
            per_period: 1.0,
            period: 100 * MS,
        };
        let mut p = PerPeer::new(rate);
        let now = Duration::ZERO;
        assert_eq!(
            (0..5).filter(|_| p.allow(&1u32, now)).count(),
            3,
            "the burst"
        );
        assert!(p.allow(&2, now), "another peer has its own bucket");
        assert!(!p.allow(&1, now + 50 * MS));
        assert!(p.allow(&1, now + 100 * MS), "one token per period");
        assert!(!p.allow(&1, now + 150 * MS));
        // A long pause refills to the burst, not beyond.
        assert_eq!(
            (0..10).filter(|_| p.allow(&1, now + 10_000 * MS)).count(),
            3
        );
    }

    #[test]
    fn many_identities_do_not_grow_the_map() {
        let rate = Rate {
            burst: 2.0,
            per_period: 1.0,
            period: Duration::from_secs(1),
        };
        let mut p = PerPeer::new(rate);
        let now = Duration::ZERO;
        let allowed = (0..(MAX_TRACKED_PEERS as u32 + 100))
            .filter(|i| p.allow(i, now))
            .count();
        assert_eq!(allowed, MAX_TRACKED_PEERS, "new peers past the bound wait");
        assert_eq!(p.tracked(), MAX_TRACKED_PEERS);
        // Once their buckets refill, the old entries make room again.
        assert!(p.allow(&u32::MAX, now + Duration::from_secs(5)));
        assert!(p.tracked() <= MAX_TRACKED_PEERS);
    }
}
