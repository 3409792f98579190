//! Exact ROC-AUC of a membership score, by the rank statistic.
//!
//! The area under the ROC curve of a score that should be higher for members equals the Mann-Whitney
//! statistic `U / (m·n)`: the probability that a random member outscores a random non-member, ties counting
//! one half. It is computed from the ranks of all `m + n` scores, tied scores sharing their mean rank
//! ("midranks"), so it is exact (no threshold grid, no interpolation) and ties are handled the way the
//! trapezoidal ROC curve handles them. Cost: one sort, O((m + n) log(m + n)).

use crate::{ModelsError, Result};

/// ROC-AUC of `members` against `nonmembers` scores (higher score = "member"): 1 when every member outscores
/// every non-member, 0.5 for a score that carries no information, 0 when the score is inverted.
///
/// Errors: either set empty (the AUC is undefined), or a NaN score (it has no rank). Infinite scores are
/// fine: they are ordered like any other.
pub fn roc_auc(members: &[f32], nonmembers: &[f32]) -> Result<f64> {
    let (m, n) = (members.len(), nonmembers.len());
    if m == 0 || n == 0 {
        return Err(ModelsError::Config(format!(
            "ROC-AUC needs at least one member and one non-member score, got {m} and {n}"
        )));
    }
    if members.iter().chain(nonmembers).any(|s| s.is_nan()) {
        return Err(ModelsError::Config("ROC-AUC: a score is NaN".into()));
    }
    // (score, is_member), sorted ascending by score; NaN was excluded, so total_cmp is the usual order
    // (it would separate -0.0 from 0.0: normalise them so they tie, as they compare equal).
    let mut all: Vec<(f32, bool)> = members
        .iter()
        .map(|&s| (s, true))
        .chain(nonmembers.iter().map(|&s| (s, false)))
        .map(|(s, t)| (if s == 0.0 { 0.0 } else { s }, t))
        .collect();
    all.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
    // Sum of the (mid)ranks of the members; ranks are 1-based. A run of equal scores at positions i..j
    // (0-based, exclusive end) shares the mean rank (i + 1 + j) / 2.
    let mut member_rank_sum = 0.0f64;
    let mut i = 0;
    while i < all.len() {
        let mut j = i + 1;
        while j < all.len() && all[j].0 == all[i].0 {
            j += 1;
        }
        let midrank = (i + 1 + j) as f64 / 2.0;
        let members_in_run = all[i..j].iter().filter(|(_, t)| *t).count();
        member_rank_sum += midrank * members_in_run as f64;
        i = j;
    }
    let (m, n) = (m as f64, n as f64);
    let u = member_rank_sum - m * (m + 1.0) / 2.0;
    Ok(u / (m * n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// The definition: P(member > non-member) + ½ P(tie), by brute force over all pairs.
    fn pairwise(members: &[f32], nonmembers: &[f32]) -> f64 {
        let mut s = 0.0;
        for &a in members {
            for &b in nonmembers {
                s += if a > b {
                    1.0
                } else if a == b {
                    0.5
                } else {
                    0.0
                };
            }
        }
        s / (members.len() * nonmembers.len()) as f64
    }

    #[test]
    fn perfect_inverted_and_all_tied() {
        assert_eq!(roc_auc(&[3.0, 4.0, 5.0], &[0.0, 1.0]).unwrap(), 1.0);
        assert_eq!(roc_auc(&[0.0, 1.0], &[3.0, 4.0, 5.0]).unwrap(), 0.0);
        assert_eq!(roc_auc(&[2.0; 4], &[2.0; 7]).unwrap(), 0.5);
        // Infinite scores are ordered.
        assert_eq!(
            roc_auc(&[f32::INFINITY], &[f32::NEG_INFINITY, 0.0]).unwrap(),
            1.0
        );
        // -0.0 and 0.0 tie.
        assert_eq!(roc_auc(&[-0.0], &[0.0]).unwrap(), 0.5);
    }

    #[test]
    fn ties_count_one_half() {
        // Members {1, 2, 2}, non-members {2, 0}: pairs (1>0), (1<2), (2>0), (2=2), (2>0), (2=2)
        // → (1 + 0 + 1 + 0.5 + 1 + 0.5) / 6 = 4/6.
        let auc = roc_auc(&[1.0, 2.0, 2.0], &[2.0, 0.0]).unwrap();
        assert!((auc - 4.0 / 6.0).abs() < 1e-12, "{auc}");
    }

    #[test]
    fn matches_pairwise_definition_on_random_scores_with_ties() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for _ in 0..50 {
            let m = rng.random_range(1..40);
            let n = rng.random_range(1..40);
            // Few distinct values, so ties are common; members shifted up a little.
            let members: Vec<f32> = (0..m).map(|_| rng.random_range(0..6) as f32).collect();
            let nonmembers: Vec<f32> = (0..n).map(|_| rng.random_range(0..5) as f32).collect();
            let auc = roc_auc(&members, &nonmembers).unwrap();
            assert!((auc - pairwise(&members, &nonmembers)).abs() < 1e-12);
        }
    }

    #[test]
    fn random_scores_give_about_one_half() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let members: Vec<f32> = (0..5000).map(|_| rng.random()).collect();
        let nonmembers: Vec<f32> = (0..5000).map(|_| rng.random()).collect();
        let auc = roc_auc(&members, &nonmembers).unwrap();
        // Standard error of the AUC under H0 with m = n = 5000: sqrt((m+n+1)/(12mn)) ≈ 0.0058.
        assert!((auc - 0.5).abs() < 0.02, "{auc}");
    }

    #[test]
    fn empty_or_nan_is_an_error() {
        assert!(roc_auc(&[], &[1.0]).is_err());
        assert!(roc_auc(&[1.0], &[]).is_err());
        assert!(roc_auc(&[f32::NAN], &[1.0]).is_err());
    }
}
