//! Loss-based membership inference (MIA; Shatter, PETS 2025, §6 "privacy attacks", after Yeom et al. 2018).
//!
//! The score of a sample is minus its loss under the (completed) model: training samples tend to have lower
//! loss than samples the model never saw, so the attack says "member" above a threshold, and its strength
//! over all thresholds is the ROC-AUC ([`super::roc_auc`]).
//!
//! Two choices differ from the reference implementation, on purpose:
//! - **Balanced sets by default.** The reference scored all of the victim's samples against all test samples;
//!   with unequal sizes the AUC is still defined, but a capped, equal number of each makes audits cheap and
//!   comparable across victims of different sizes. Both sides are sub-sampled without replacement with the
//!   caller's seeded RNG, to `min(members, non-members, max_per_side)` each.
//! - **Non-members that differ from members only by membership.** The reference used, for MovieLens, the
//!   attacker's own data as non-members: those are other users' ratings, scored through other users'
//!   embeddings (the attacker's own, freshly trained!), so the AUC mixes "member or not" with "whose user
//!   vector". [`nonmembers_for`] takes instead the held-out test samples of the **victim's own users** when the
//!   data has users (MovieLens: the victim's 30% test ratings, which no node trained on), and the global test
//!   set otherwise (image and feature tasks: samples no node trained on, from the same distribution).

use std::collections::BTreeSet;

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::data::Dataset;
use crate::nn::Model;
use crate::train::per_sample_losses;
use crate::{ModelsError, Result};

use super::roc_auc;

/// Samples per side of a balanced MIA when the caller does not say: enough that the AUC's standard error is
/// about 0.013 at AUC 0.5 (sqrt((m+n+1)/(12mn))), few enough that auditing 8 chunks per node per round costs
/// a few thousand forward passes.
pub const DEFAULT_MIA_MAX_PER_SIDE: usize = 500;

/// How the member and non-member sets of an MIA are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MiaConfig {
    /// Equal numbers of members and non-members (true, the default), or every sample of each side up to
    /// `max_per_side` (false; the reference's unbalanced sets when the cap is large).
    pub balanced: bool,
    /// Most samples scored on each side (at least 1).
    pub max_per_side: usize,
}

impl Default for MiaConfig {
    fn default() -> Self {
        Self {
            balanced: true,
            max_per_side: DEFAULT_MIA_MAX_PER_SIDE,
        }
    }
}

impl MiaConfig {
    fn validate(&self) -> Result<()> {
        if self.max_per_side == 0 {
            return Err(ModelsError::Config(
                "MIA: max_per_side must be at least 1".into(),
            ));
        }
        Ok(())
    }

    /// The sample indices scored on each side, `(members, non-members)`, each ascending. Sub-samples without
    /// replacement with `rng` whenever a side is cut.
    pub fn draw<R: Rng + ?Sized>(
        &self,
        n_members: usize,
        n_nonmembers: usize,
        rng: &mut R,
    ) -> Result<(Vec<usize>, Vec<usize>)> {
        self.validate()?;
        let (cap_m, cap_n) = if self.balanced {
            let c = n_members.min(n_nonmembers).min(self.max_per_side);
            (c, c)
        } else {
            (
                n_members.min(self.max_per_side),
                n_nonmembers.min(self.max_per_side),
            )
        };
        Ok((
            sample_indices(n_members, cap_m, rng),
            sample_indices(n_nonmembers, cap_n, rng),
        ))
    }
}

/// `amount` distinct indices of `0..n`, ascending (all of them when `amount >= n`), drawn with `rng`.
pub fn sample_indices<R: Rng + ?Sized>(n: usize, amount: usize, rng: &mut R) -> Vec<usize> {
    if amount >= n {
        return (0..n).collect();
    }
    let mut v = rand::seq::index::sample(rng, n, amount).into_vec();
    v.sort_unstable();
    v
}

/// The outcome of one membership-inference attack.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MiaResult {
    /// ROC-AUC of the score −loss (0.5 = the attack learns nothing).
    pub auc: f64,
    /// Members scored.
    pub members: usize,
    /// Non-members scored.
    pub nonmembers: usize,
    /// Mean loss of the scored members and non-members (the gap the attack exploits).
    pub member_mean_loss: f64,
    pub nonmember_mean_loss: f64,
}

/// Runs the loss-based MIA of `model` (already holding the completed parameters): members are samples of
/// `members` (the victim's training set), non-members samples of `nonmembers` (see [`nonmembers_for`]), drawn
/// per `cfg` with `rng`. Per-sample losses are computed in batches ([`crate::train::EVAL_BATCH`]).
///
/// Errors: an empty side (nothing to compare), data that does not fit the model, a non-finite loss.
pub fn loss_mia<R: Rng + ?Sized>(
    model: &Model,
    members: &Dataset,
    nonmembers: &Dataset,
    cfg: &MiaConfig,
    rng: &mut R,
) -> Result<MiaResult> {
    let (mi, ni) = cfg.draw(members.len(), nonmembers.len(), rng)?;
    let lm = per_sample_losses(model, &members.subset(&mi))?;
    let ln = per_sample_losses(model, &nonmembers.subset(&ni))?;
    mia_from_losses(&lm, &ln)
}

/// The MIA from per-sample losses already computed (score = −loss).
pub fn mia_from_losses(member_losses: &[f32], nonmember_losses: &[f32]) -> Result<MiaResult> {
    let neg = |l: &[f32]| -> Vec<f32> { l.iter().map(|&x| -x).collect() };
    let auc = roc_auc(&neg(member_losses), &neg(nonmember_losses))?;
    let mean = |l: &[f32]| l.iter().map(|&x| x as f64).sum::<f64>() / l.len().max(1) as f64;
    Ok(MiaResult {
        auc,
        members: member_losses.len(),
        nonmembers: nonmember_losses.len(),
        member_mean_loss: mean(member_losses),
        nonmember_mean_loss: mean(nonmember_losses),
    })
}

/// The non-member pool for a victim: when both datasets carry users (MovieLens, Sent140), the samples of
/// `test` whose user appears in `victim_train` — for MovieLens exactly the victim's own held-out ratings, so
/// members and non-members go through the same user embeddings and differ only by membership; when that
/// leaves nothing, or the data has no users, the whole of `test` (held-out samples no node trained on).
pub fn nonmembers_for(victim_train: &Dataset, test: &Dataset) -> Dataset {
    if let (Some(train_users), Some(test_users)) = (victim_train.users(), test.users()) {
        let users: BTreeSet<u32> = train_users.iter().copied().collect();
        let keep: Vec<usize> = test_users
            .iter()
            .enumerate()
            .filter(|(_, u)| users.contains(u))
            .map(|(i, _)| i)
            .collect();
        if !keep.is_empty() {
            return test.subset(&keep);
        }
    }
    test.clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{Inputs, Targets};
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn balanced_draw_is_capped_distinct_and_seeded() {
        let cfg = MiaConfig {
            balanced: true,
            max_per_side: 50,
        };
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let (m, n) = cfg.draw(30, 1000, &mut rng).unwrap();
        assert_eq!((m.len(), n.len()), (30, 30));
        assert_eq!(m, (0..30).collect::<Vec<_>>());
        assert!(n.windows(2).all(|w| w[0] < w[1]) && *n.last().unwrap() < 1000);
        let (m, n) = cfg.draw(800, 1000, &mut rng).unwrap();
        assert_eq!((m.len(), n.len()), (50, 50));
        let again = cfg
            .draw(800, 1000, &mut ChaCha8Rng::seed_from_u64(9))
            .unwrap();
        let again2 = cfg
            .draw(800, 1000, &mut ChaCha8Rng::seed_from_u64(9))
            .unwrap();
        assert_eq!(again, again2);
        let unbalanced = MiaConfig {
            balanced: false,
            max_per_side: 500,
        };
        let (m, n) = unbalanced.draw(30, 1000, &mut rng).unwrap();
        assert_eq!((m.len(), n.len()), (30, 500));
        assert!(
            MiaConfig {
                balanced: true,
                max_per_side: 0
            }
            .draw(1, 1, &mut rng)
            .is_err()
        );
    }

    #[test]
    fn lower_member_loss_gives_high_auc() {
        let r = mia_from_losses(&[0.1, 0.2, 0.3], &[1.0, 2.0, 0.25]).unwrap();
        assert!((r.auc - 8.0 / 9.0).abs() < 1e-12, "{}", r.auc);
        assert!(r.member_mean_loss < r.nonmember_mean_loss);
    }

    fn ratings(pairs: Vec<[u32; 2]>) -> Dataset {
        let users = pairs.iter().map(|p| p[0]).collect();
        let n = pairs.len();
        Dataset::new(
            Inputs::Pairs {
                pairs,
                num_users: 4,
                num_items: 4,
            },
            Targets::Ratings(vec![3.0; n]),
            Some(users),
        )
        .unwrap()
    }

    #[test]
    fn nonmembers_are_the_victims_users_held_out_samples() {
        let victim = ratings(vec![[1, 0], [1, 2], [3, 1]]);
        let test = ratings(vec![[0, 0], [1, 3], [2, 2], [3, 0], [3, 3]]);
        let pool = nonmembers_for(&victim, &test);
        assert_eq!(pool.users().unwrap(), &[1, 3, 3]);
        // No shared user: fall back to the whole test set.
        let other = ratings(vec![[2, 1]]);
        let lonely = ratings(vec![[0, 1]]);
        assert_eq!(nonmembers_for(&lonely, &other), other);
    }
}
