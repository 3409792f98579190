//! The all-packet timing features of the packet attack (issue "Unlinkable by default"): an observer timestamps
//! every data packet each remote VN identity sends it (on any of its links, whatever the message: walks and
//! their relays, shuffles, answers, acknowledgements, chunks and their replies) and scores each pair of remote
//! identities by how much their sending coincides. What one process does for its k VNs in one wake-up leaves
//! packets of several siblings in the same millisecond; strangers' coincide only by chance.
//!
//! Each sender's packets become the set of 1 ms bins it sent in (several packets in one bin count once), over
//! the span `T` (ms) of everything the observer saw. For a pair of senders with `n_a` and `n_b` bins and
//! `c(L)` bins where b sent `L` ms after a did, the features ([`FEATURES`]):
//! - `same_ms_count`: `c(0)`, how often both sent within the same millisecond (the raw count: busy pairs score
//!   high whatever their relation);
//! - `same_ms_cosine`: `c(0) / sqrt(n_a n_b)`;
//! - `same_ms_lift`: `c(0) T / (n_a n_b)`, coincidences over those two independent senders would have;
//! - `xcorr_lag0`: the Pearson correlation of the two 0/1 series at lag 0,
//!   `ρ(L) = (c(L) T − n_a n_b) / sqrt(n_a (T − n_a) n_b (T − n_b))`;
//! - `xcorr_peak_0_50`: the largest `ρ(L)` over lags |L| ≤ [`MAX_LAG_MS`] (either sender first);
//! - `xcorr_sum_0_50`: the sum of `ρ(L)` over those lags (co-activity at the 50 ms scale);
//! - `same_ms_over_lags_z`: how far `c(0)` stands above the other lags' `c(L)`, in their standard deviations
//!   (same-wake-up sends against the pair's own co-activity at the 50 ms scale).
//!
//! Each feature is scored like the rest of the linkage attack: per observer the ROC-AUC of "siblings?" over
//! the pairs it heard from (mean over observers), and over every observer's pairs pooled.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::linkage::auc;

/// Cross-correlation lags, either way, in ms.
pub const MAX_LAG_MS: u64 = 50;

/// The features, in the order [`pair_scores`] returns them.
pub const FEATURES: [&str; 7] = [
    "same_ms_count",
    "same_ms_cosine",
    "same_ms_lift",
    "xcorr_lag0",
    "xcorr_peak_0_50",
    "xcorr_sum_0_50",
    "same_ms_over_lags_z",
];

/// One feature's result.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FeatureAuc {
    pub name: String,
    /// ROC-AUC over every observer's pairs pooled.
    pub auc_pooled: Option<f64>,
    /// Mean over observers of each observer's own AUC (observers with both classes of pairs).
    pub auc_mean: Option<f64>,
    pub pairs: usize,
    pub sibling_pairs: usize,
    /// Median score of sibling pairs and of stranger pairs (pooled).
    pub sibling_median: Option<f64>,
    pub stranger_median: Option<f64>,
}

/// The sorted, distinct 1 ms bins of packet times given in µs.
pub fn ms_bins(times_us: &[u64]) -> Vec<u64> {
    let mut b: Vec<u64> = times_us.iter().map(|t| t / 1000).collect();
    b.sort_unstable();
    b.dedup();
    b
}

/// `c[L + MAX_LAG_MS]`: the bins `t` of `a` with `t + L` in `b`, for L in −50..=50. Both sorted and distinct.
pub fn lag_counts(a: &[u64], b: &[u64]) -> Vec<u64> {
    let w = MAX_LAG_MS;
    let mut c = vec![0u64; (2 * w + 1) as usize];
    let mut lo = 0;
    for &t in a {
        while lo < b.len() && b[lo] + w < t {
            lo += 1;
        }
        for &u in &b[lo..] {
            if u > t + w {
                break;
            }
            c[(u + w - t) as usize] += 1;
        }
    }
    c
}

/// The features of one pair of senders (ms bins, sorted and distinct), over a span of `span_ms` bins.
pub fn pair_scores(a: &[u64], b: &[u64], span_ms: u64) -> [f64; FEATURES.len()] {
    let c = lag_counts(a, b);
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let t = (span_ms as f64).max(na.max(nb) + 1.0);
    let c0 = c[MAX_LAG_MS as usize] as f64;
    let denom = (na * (t - na) * nb * (t - nb)).sqrt();
    let rho = |cl: u64| {
        if denom > 0.0 {
            (cl as f64 * t - na * nb) / denom
        } else {
            0.0
        }
    };
    let rhos: Vec<f64> = c.iter().map(|&cl| rho(cl)).collect();
    let others: Vec<f64> = c
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != MAX_LAG_MS as usize)
        .map(|(_, &x)| x as f64)
        .collect();
    let mean = others.iter().sum::<f64>() / others.len() as f64;
    let sd = (others.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / others.len() as f64).sqrt();
    let prod = (na * nb).max(1.0);
    [
        c0,
        c0 / prod.sqrt(),
        c0 * t / prod,
        rho(c[MAX_LAG_MS as usize]),
        rhos.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        rhos.iter().sum(),
        // A floor of one coincidence's worth keeps pairs with no co-activity at all from dividing by zero.
        (c0 - mean) / sd.max(1.0),
    ]
}

/// Scores every pair of senders one observer heard: `senders` maps each remote identity to the times (µs) of
/// the data packets it sent the observer, `owner` names its node. Returns each pair's features and whether it
/// is a sibling pair. Senders with no packet are left out.
pub fn observer_pairs<S: Ord + Clone>(
    senders: &BTreeMap<S, Vec<u64>>,
    owner: impl Fn(&S) -> usize,
) -> Vec<([f64; FEATURES.len()], bool)> {
    observer_pair_scores(senders)
        .into_iter()
        .map(|(a, b, scores)| (scores, owner(&a) == owner(&b)))
        .collect()
}

/// [`observer_pairs`] without the labels: each pair of senders and its features, so that one scoring serves
/// any grouping of the senders into nodes (the packet attack's chance floor).
pub fn observer_pair_scores<S: Ord + Clone>(
    senders: &BTreeMap<S, Vec<u64>>,
) -> Vec<(S, S, [f64; FEATURES.len()])> {
    let bins: Vec<(&S, Vec<u64>)> = senders
        .iter()
        .filter(|(_, t)| !t.is_empty())
        .map(|(s, t)| (s, ms_bins(t)))
        .collect();
    let (lo, hi) = bins.iter().fold((u64::MAX, 0), |(lo, hi), (_, b)| {
        (lo.min(b[0]), hi.max(*b.last().expect("non-empty")))
    });
    let span = hi.saturating_sub(lo) + 1;
    let mut out = Vec::with_capacity(bins.len() * bins.len().saturating_sub(1) / 2);
    for (i, (sa, a)) in bins.iter().enumerate() {
        for (sb, b) in &bins[i + 1..] {
            out.push(((*sa).clone(), (*sb).clone(), pair_scores(a, b, span)));
        }
    }
    out
}

/// Each feature's AUC over the observers' pairs ([`observer_pairs`] of each observer).
pub fn feature_aucs(observers: &[Vec<([f64; FEATURES.len()], bool)>]) -> Vec<FeatureAuc> {
    FEATURES
        .iter()
        .enumerate()
        .map(|(f, name)| {
            let per: Vec<Vec<(f64, bool)>> = observers
                .iter()
                .map(|pairs| pairs.iter().map(|(s, sib)| (s[f], *sib)).collect())
                .collect();
            let aucs: Vec<f64> = per.iter().filter_map(|p| auc(p)).collect();
            let pooled: Vec<(f64, bool)> = per.into_iter().flatten().collect();
            let median = |siblings: bool| {
                let mut v: Vec<f64> = pooled
                    .iter()
                    .filter(|p| p.1 == siblings)
                    .map(|p| p.0)
                    .collect();
                v.sort_by(f64::total_cmp);
                v.get(v.len() / 2).copied()
            };
            FeatureAuc {
                name: (*name).to_string(),
                auc_pooled: auc(&pooled),
                auc_mean: (!aucs.is_empty()).then(|| aucs.iter().sum::<f64>() / aucs.len() as f64),
                pairs: pooled.len(),
                sibling_pairs: pooled.iter().filter(|p| p.1).count(),
                sibling_median: median(true),
                stranger_median: median(false),
            }
        })
        .collect()
}

/// The feature that links siblings best (highest pooled AUC) among `features`.
pub fn best(features: &[FeatureAuc]) -> Option<&FeatureAuc> {
    features
        .iter()
        .filter(|f| f.auc_pooled.is_some())
        .max_by(|a, b| {
            a.auc_pooled
                .unwrap_or(0.0)
                .total_cmp(&b.auc_pooled.unwrap_or(0.0))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn feature<'a>(fs: &'a [FeatureAuc], name: &str) -> &'a FeatureAuc {
        fs.iter().find(|f| f.name == name).expect("a feature")
    }

    #[test]
    fn lag_counts_count_each_offset_exactly() {
        let a = [10, 20, 100];
        let b = [10, 25, 60, 151];
        let c = lag_counts(&a, &b);
        let at = |l: i64| c[(l + MAX_LAG_MS as i64) as usize];
        // Lag 0: 10. Lag 5: 20→25. Lag 15: 10→25. Lag 50: 10→60. Lag 40: 20→60. Lag −40: 100→60. Lag −50 none
        // (100→50 absent); 100→151 is 51, outside.
        assert_eq!(at(0), 1);
        assert_eq!(at(5), 1);
        assert_eq!(at(15), 1);
        assert_eq!(at(50), 1);
        assert_eq!(at(40), 1);
        assert_eq!(at(-40), 1);
        assert_eq!(at(-10), 1, "20→10");
        assert_eq!(c.iter().sum::<u64>(), 7);
        assert_eq!(ms_bins(&[1_999, 1_000, 2_000, 2_500]), vec![1, 2]);
    }

    #[test]
    fn pair_scores_of_identical_and_disjoint_senders() {
        let a: Vec<u64> = (0..100).map(|i| i * 200).collect();
        let s = pair_scores(&a, &a, 20_000);
        assert_eq!(s[0], 100.0);
        assert!((s[1] - 1.0).abs() < 1e-12, "cosine of a sender with itself");
        assert!(
            (s[3] - 1.0).abs() < 1e-9,
            "correlation of a sender with itself"
        );
        // Shifted by 100 ms (half the period): no coincidence within 50 ms either way.
        let b: Vec<u64> = a.iter().map(|t| t + 100).collect();
        let s = pair_scores(&a, &b, 20_100);
        assert_eq!(s[0], 0.0);
        assert!(s[3] < 0.0 && s[4] < 0.0, "{s:?}");
    }

    /// Three nodes of two VNs (senders 0..6, node = sender / 2) seen by one observer over 60 s. Every sender
    /// sends on its own at random; `linked` makes each node's two VNs also send together in one wake-up (the
    /// second within 300 µs of the first), at the node's own random instants.
    fn synthetic(linked_lag_us: Option<u64>, seed: u64) -> BTreeMap<u32, Vec<u64>> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut s: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        for v in 0..6u32 {
            let t = s.entry(v).or_default();
            for _ in 0..600 {
                t.push(rng.random_range(0..60_000_000));
            }
        }
        if let Some(lag) = linked_lag_us {
            for node in 0..3u32 {
                for _ in 0..300 {
                    let at = rng.random_range(0..59_000_000);
                    let jitter = rng.random_range(0..300);
                    s.get_mut(&(2 * node)).expect("sender").push(at);
                    s.get_mut(&(2 * node + 1))
                        .expect("sender")
                        .push(at + lag + jitter);
                }
            }
        }
        for t in s.values_mut() {
            t.sort_unstable();
        }
        s
    }

    #[test]
    fn same_wake_up_sends_link_siblings_and_independent_ones_do_not() {
        let owner = |s: &u32| (*s / 2) as usize;
        // Siblings' packets in one wake-up: every coincidence feature links them.
        let linked: Vec<_> = (0..3)
            .map(|seed| observer_pairs(&synthetic(Some(0), seed), owner))
            .collect();
        let fs = feature_aucs(&linked);
        for name in [
            "same_ms_cosine",
            "same_ms_lift",
            "xcorr_lag0",
            "xcorr_peak_0_50",
        ] {
            let f = feature(&fs, name);
            assert_eq!(f.auc_pooled, Some(1.0), "{f:?}");
            assert_eq!((f.pairs, f.sibling_pairs), (45, 9));
        }
        assert!(feature(&fs, "same_ms_over_lags_z").auc_pooled.unwrap() > 0.95);
        assert!(best(&fs).unwrap().auc_pooled == Some(1.0));
        // Each sender on its own schedule: no feature links them.
        let free: Vec<_> = (0..20)
            .map(|seed| observer_pairs(&synthetic(None, 100 + seed), owner))
            .collect();
        for f in feature_aucs(&free) {
            let a = f.auc_pooled.unwrap();
            assert!((0.35..0.65).contains(&a), "{f:?}");
        }
    }

    /// Siblings that send 20 ms apart never share a millisecond: the lag-0 features miss them, the
    /// cross-correlation over 0-50 ms does not.
    #[test]
    fn cross_correlation_finds_siblings_a_fixed_lag_apart() {
        let owner = |s: &u32| (*s / 2) as usize;
        let lagged: Vec<_> = (0..3)
            .map(|seed| observer_pairs(&synthetic(Some(20_000), seed), owner))
            .collect();
        let fs = feature_aucs(&lagged);
        assert_eq!(feature(&fs, "xcorr_peak_0_50").auc_pooled, Some(1.0));
        assert!(feature(&fs, "xcorr_sum_0_50").auc_pooled.unwrap() > 0.9);
        assert!(feature(&fs, "same_ms_lift").auc_pooled.unwrap() < 0.8);
    }
}
