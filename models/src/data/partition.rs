//! Assigning training samples to nodes: IID, Dirichlet(α) label skew, or whole users per node.
//!
//! [`partition`] returns, per node, the indices of its samples in ascending order (a deterministic order that
//! keeps [`Dataset::subset`] a forward walk; local training shuffles its batches itself). Every training
//! sample is assigned to exactly one node. All randomness comes from a ChaCha8 stream seeded with `seed`.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Gamma};
use serde::{Deserialize, Serialize};

use super::Dataset;
use crate::{ModelsError, Result};

/// Dirichlet concentration of the paper's non-IID experiments (Shatter, PETS 2025, evaluation: α = 0.1).
pub const DEFAULT_DIRICHLET_ALPHA: f64 = 0.1;
/// Fewest samples a node may get under Dirichlet partitioning when the text form does not say: below a
/// batch of the paper's size 32 a node cannot even take one full SGD step.
pub const DEFAULT_MIN_SAMPLES: usize = 32;
/// Dirichlet draws tried before giving up on `min_samples`. With a feasible target a handful suffice; this
/// bound turns an infeasible one (tiny α, many nodes, few samples) into an error instead of a hang.
pub const MAX_DIRICHLET_ATTEMPTS: usize = 1000;

/// How training samples are spread over nodes. Text form (CLIs): `iid`, `dirichlet` (α =
/// [`DEFAULT_DIRICHLET_ALPHA`], min [`DEFAULT_MIN_SAMPLES`]), `dirichlet:<alpha>` or
/// `dirichlet:<alpha>,<min_samples>`, `user`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Partition {
    /// Seeded shuffle, then near-equal contiguous parts (sizes differ by at most one).
    Iid,
    /// Label skew: for every class, the class's samples are shuffled and cut among the nodes in proportions
    /// drawn from a symmetric Dirichlet(α); small α gives each node few classes. The whole draw is repeated
    /// until every node has at least `min_samples` samples (at most [`MAX_DIRICHLET_ATTEMPTS`] times).
    Dirichlet { alpha: f64, min_samples: usize },
    /// Whole users per node (MovieLens, Sent140): users are shuffled and dealt so that node sizes in
    /// **users** differ by at most one (sample counts then vary, as real per-user data does). Needs at least
    /// as many distinct users as nodes. Serde name `by_user` (alias `user`, the text form).
    #[serde(alias = "user")]
    ByUser,
}

impl fmt::Display for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Partition::Iid => f.write_str("iid"),
            Partition::Dirichlet { alpha, min_samples } => {
                write!(f, "dirichlet:{alpha},{min_samples}")
            }
            Partition::ByUser => f.write_str("user"),
        }
    }
}

impl FromStr for Partition {
    type Err = ModelsError;

    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            ModelsError::Config(format!(
                "unknown partition {s:?}: expected iid, dirichlet, dirichlet:<alpha>, dirichlet:<alpha>,<min_samples> or user"
            ))
        };
        let (name, args) = match s.split_once(':') {
            Some((n, a)) => (n, Some(a)),
            None => (s, None),
        };
        match (name.trim(), args) {
            ("iid", None) => Ok(Partition::Iid),
            ("user", None) => Ok(Partition::ByUser),
            ("dirichlet", None) => Ok(Partition::Dirichlet {
                alpha: DEFAULT_DIRICHLET_ALPHA,
                min_samples: DEFAULT_MIN_SAMPLES,
            }),
            ("dirichlet", Some(a)) => {
                let (alpha, min) = match a.split_once(',') {
                    Some((x, m)) => (x, Some(m)),
                    None => (a, None),
                };
                let alpha: f64 = alpha.trim().parse().map_err(|_| bad())?;
                let min_samples = match min {
                    Some(m) => m.trim().parse().map_err(|_| bad())?,
                    None => DEFAULT_MIN_SAMPLES,
                };
                Ok(Partition::Dirichlet { alpha, min_samples })
            }
            _ => Err(bad()),
        }
    }
}

/// Splits the samples of `data` among `nodes` nodes as `how` says. Returns one ascending index list per node.
pub fn partition(
    data: &Dataset,
    nodes: usize,
    how: &Partition,
    seed: u64,
) -> Result<Vec<Vec<usize>>> {
    if nodes == 0 {
        return Err(ModelsError::Config(
            "cannot partition data over 0 nodes".into(),
        ));
    }
    let n = data.len();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut parts = match how {
        Partition::Iid => {
            if n < nodes {
                return Err(ModelsError::Config(format!(
                    "{n} samples cannot give each of {nodes} nodes one"
                )));
            }
            let mut all: Vec<usize> = (0..n).collect();
            all.shuffle(&mut rng);
            deal(all, nodes)
        }
        Partition::Dirichlet { alpha, min_samples } => {
            dirichlet(data, nodes, *alpha, *min_samples, &mut rng)?
        }
        Partition::ByUser => by_user(data, nodes, &mut rng)?,
    };
    parts.iter_mut().for_each(|p| p.sort_unstable());
    Ok(parts)
}

/// Cuts `items` into `parts` contiguous runs whose lengths differ by at most one (longer runs first).
fn deal<T>(items: Vec<T>, parts: usize) -> Vec<Vec<T>> {
    let (q, r) = (items.len() / parts, items.len() % parts);
    let mut it = items.into_iter();
    (0..parts)
        .map(|p| it.by_ref().take(q + usize::from(p < r)).collect())
        .collect()
}

fn dirichlet(
    data: &Dataset,
    nodes: usize,
    alpha: f64,
    min_samples: usize,
    rng: &mut ChaCha8Rng,
) -> Result<Vec<Vec<usize>>> {
    let labels = data.labels().ok_or_else(|| {
        ModelsError::Config(
            "Dirichlet partitioning needs class labels; this dataset has ratings".into(),
        )
    })?;
    if !(alpha.is_finite() && alpha > 0.0) {
        return Err(ModelsError::Config(format!(
            "Dirichlet alpha must be finite and > 0, got {alpha}"
        )));
    }
    if nodes.saturating_mul(min_samples) > labels.len() {
        return Err(ModelsError::Config(format!(
            "{} samples cannot give each of {nodes} nodes at least {min_samples}",
            labels.len()
        )));
    }
    let gamma = Gamma::new(alpha, 1.0)
        .map_err(|e| ModelsError::Config(format!("Dirichlet alpha {alpha}: {e}")))?;
    // Samples per class, in ascending class order so the RNG stream is consumed in a fixed order.
    let mut by_class: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, &l) in labels.iter().enumerate() {
        by_class.entry(l).or_default().push(i);
    }
    let mut smallest = 0;
    for _ in 0..MAX_DIRICHLET_ATTEMPTS {
        let mut parts: Vec<Vec<usize>> = vec![Vec::new(); nodes];
        for members in by_class.values() {
            let mut members = members.clone();
            members.shuffle(rng);
            // Dirichlet(α, ..., α) = normalised independent Gamma(α, 1) draws.
            let weights: Vec<f64> = (0..nodes).map(|_| gamma.sample(rng)).collect();
            let total: f64 = weights.iter().sum();
            let m = members.len();
            if !(total > 0.0 && total.is_finite()) {
                // Every Gamma draw underflowed to 0 (tiny α): the limit of Dirichlet(α → 0) is all mass on
                // one uniformly chosen node.
                parts[rng.random_range(0..nodes)].extend_from_slice(&members);
                continue;
            }
            // Cut points at rounded cumulative shares, the last one at m: every sample is assigned once
            // whatever the rounding.
            let mut start = 0usize;
            let mut cum = 0.0;
            for (node, w) in weights.iter().enumerate() {
                cum += w;
                let end = if node + 1 == nodes {
                    m
                } else {
                    ((cum / total * m as f64).round() as usize).clamp(start, m)
                };
                parts[node].extend_from_slice(&members[start..end]);
                start = end;
            }
        }
        smallest = parts.iter().map(Vec::len).min().unwrap_or(0);
        if smallest >= min_samples {
            return Ok(parts);
        }
    }
    Err(ModelsError::Config(format!(
        "Dirichlet(alpha = {alpha}) partitioning of {} samples over {nodes} nodes left some node with fewer \
         than {min_samples} samples in all {MAX_DIRICHLET_ATTEMPTS} attempts (last smallest: {smallest}); \
         lower min_samples, raise alpha or use fewer nodes",
        labels.len()
    )))
}

fn by_user(data: &Dataset, nodes: usize, rng: &mut ChaCha8Rng) -> Result<Vec<Vec<usize>>> {
    let users = data.users().ok_or_else(|| {
        ModelsError::Config(
            "partitioning by user needs a dataset with users (MovieLens, Sent140)".into(),
        )
    })?;
    let mut by_user: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, &u) in users.iter().enumerate() {
        by_user.entry(u).or_default().push(i);
    }
    if by_user.len() < nodes {
        return Err(ModelsError::Config(format!(
            "{} distinct users cannot give each of {nodes} nodes one",
            by_user.len()
        )));
    }
    let mut groups: Vec<Vec<usize>> = by_user.into_values().collect();
    groups.shuffle(rng);
    Ok(deal(groups, nodes)
        .into_iter()
        .map(|g| g.into_iter().flatten().collect())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{Inputs, Targets};

    fn labelled(n: usize, classes: usize, users: Option<usize>) -> Dataset {
        Dataset::new(
            Inputs::Dense {
                values: (0..n).map(|i| i as f32).collect(),
                sample_shape: vec![1],
            },
            Targets::Classes {
                labels: (0..n).map(|i| (i * 7 % classes) as u32).collect(),
                num_classes: classes,
            },
            // Uneven users: user of sample i is (i*i) mod u, so some users hold more samples.
            users.map(|u| (0..n).map(|i| (i * i % u) as u32).collect()),
        )
        .unwrap()
    }

    fn assert_exact_partition(parts: &[Vec<usize>], n: usize) {
        let mut seen = vec![0u32; n];
        for p in parts {
            assert!(p.windows(2).all(|w| w[0] < w[1]), "not ascending");
            for &i in p {
                seen[i] += 1;
            }
        }
        assert!(
            seen.iter().all(|&c| c == 1),
            "some sample not assigned exactly once"
        );
    }

    #[test]
    fn iid_is_balanced_deterministic_partition() {
        let d = labelled(1003, 10, None);
        let parts = partition(&d, 10, &Partition::Iid, 1).unwrap();
        assert_exact_partition(&parts, 1003);
        assert!(parts.iter().all(|p| p.len() == 100 || p.len() == 101));
        assert_eq!(parts, partition(&d, 10, &Partition::Iid, 1).unwrap());
        assert_ne!(parts, partition(&d, 10, &Partition::Iid, 2).unwrap());
        assert!(partition(&d, 2000, &Partition::Iid, 1).is_err());
        assert!(partition(&d, 0, &Partition::Iid, 1).is_err());
    }

    #[test]
    fn dirichlet_small_alpha_is_skewed_and_respects_min_samples() {
        let d = labelled(5000, 10, None);
        let how = Partition::Dirichlet {
            alpha: 0.1,
            min_samples: 20,
        };
        let parts = partition(&d, 16, &how, 3).unwrap();
        assert_exact_partition(&parts, 5000);
        assert!(parts.iter().all(|p| p.len() >= 20));
        assert_eq!(parts, partition(&d, 16, &how, 3).unwrap());
        assert_ne!(parts, partition(&d, 16, &how, 4).unwrap());

        // Skew: the two most frequent classes of a node hold most of its samples for most nodes, whereas
        // under IID they hold about 20%.
        let labels = d.labels().unwrap();
        let top2_share = |p: &Vec<usize>| {
            let mut c = [0usize; 10];
            p.iter().for_each(|&i| c[labels[i] as usize] += 1);
            c.sort_unstable_by(|a, b| b.cmp(a));
            (c[0] + c[1]) as f64 / p.len() as f64
        };
        let shares: Vec<f64> = parts.iter().map(top2_share).collect();
        let dominated = shares.iter().filter(|&&s| s > 0.7).count();
        let mean = shares.iter().sum::<f64>() / 16.0;
        assert!(
            dominated >= 8 && mean > 0.65,
            "two-class shares per node: {shares:?}"
        );
        let iid = partition(&d, 16, &Partition::Iid, 3).unwrap();
        assert!(iid.iter().all(|p| top2_share(p) < 0.35));

        // Large alpha is close to IID.
        let flat = partition(
            &d,
            16,
            &Partition::Dirichlet {
                alpha: 1000.0,
                min_samples: 0,
            },
            3,
        )
        .unwrap();
        assert!(flat.iter().all(|p| top2_share(p) < 0.35));
    }

    #[test]
    fn dirichlet_infeasible_min_samples_is_a_clear_error() {
        let d = labelled(100, 10, None);
        let err = partition(
            &d,
            10,
            &Partition::Dirichlet {
                alpha: 0.1,
                min_samples: 11,
            },
            0,
        )
        .unwrap_err();
        assert!(err.to_string().contains("at least 11"), "{err}");
        // Feasible on paper, hopeless in practice with α = 0.01: bounded retries, then an error.
        let err = partition(
            &d,
            10,
            &Partition::Dirichlet {
                alpha: 0.01,
                min_samples: 10,
            },
            0,
        )
        .unwrap_err();
        assert!(err.to_string().contains("attempts"), "{err}");
        let ratings = Dataset::new(
            Inputs::Pairs {
                pairs: vec![[0, 0]],
                num_users: 1,
                num_items: 1,
            },
            Targets::Ratings(vec![3.0]),
            None,
        )
        .unwrap();
        assert!(
            partition(
                &ratings,
                1,
                &Partition::Dirichlet {
                    alpha: 0.1,
                    min_samples: 0
                },
                0
            )
            .is_err()
        );
        assert!(
            partition(
                &d,
                2,
                &Partition::Dirichlet {
                    alpha: 0.0,
                    min_samples: 0
                },
                0
            )
            .is_err()
        );
    }

    #[test]
    fn by_user_keeps_users_whole_and_balances_user_counts() {
        let d = labelled(2000, 10, Some(37));
        let users = d.users().unwrap();
        let distinct = users
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        let parts = partition(&d, 5, &Partition::ByUser, 9).unwrap();
        assert_exact_partition(&parts, 2000);
        let mut owner: BTreeMap<u32, usize> = BTreeMap::new();
        let mut per_node = vec![0usize; 5];
        for (node, p) in parts.iter().enumerate() {
            for &i in p {
                let prev = owner.insert(users[i], node);
                assert!(
                    prev.is_none() || prev == Some(node),
                    "user {} split across nodes",
                    users[i]
                );
            }
        }
        owner.values().for_each(|&n| per_node[n] += 1);
        let (lo, hi) = (distinct / 5, distinct.div_ceil(5));
        assert!(per_node.iter().all(|&c| c == lo || c == hi), "{per_node:?}");
        assert_eq!(parts, partition(&d, 5, &Partition::ByUser, 9).unwrap());
        assert_ne!(parts, partition(&d, 5, &Partition::ByUser, 10).unwrap());
        assert!(partition(&d, distinct + 1, &Partition::ByUser, 0).is_err());
        assert!(partition(&labelled(10, 2, None), 2, &Partition::ByUser, 0).is_err());
    }

    #[test]
    fn text_and_serde_forms() {
        assert_eq!("iid".parse::<Partition>().unwrap(), Partition::Iid);
        assert_eq!("user".parse::<Partition>().unwrap(), Partition::ByUser);
        assert_eq!(
            "dirichlet".parse::<Partition>().unwrap(),
            Partition::Dirichlet {
                alpha: 0.1,
                min_samples: DEFAULT_MIN_SAMPLES
            }
        );
        assert_eq!(
            "dirichlet:0.5".parse::<Partition>().unwrap(),
            Partition::Dirichlet {
                alpha: 0.5,
                min_samples: DEFAULT_MIN_SAMPLES
            }
        );
        let p: Partition = "dirichlet:0.3,7".parse().unwrap();
        assert_eq!(
            p,
            Partition::Dirichlet {
                alpha: 0.3,
                min_samples: 7
            }
        );
        assert_eq!(p.to_string().parse::<Partition>().unwrap(), p);
        for bad in [
            "",
            "IID",
            "dirichlet:x",
            "dirichlet:0.1,-1",
            "user:3",
            "iid:",
        ] {
            assert!(bad.parse::<Partition>().is_err(), "{bad}");
        }
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<Partition>(&json).unwrap(), p);
        assert_eq!(
            serde_json::from_str::<Partition>("\"by_user\"").unwrap(),
            Partition::ByUser
        );
        assert_eq!(
            serde_json::from_str::<Partition>("\"user\"").unwrap(),
            Partition::ByUser
        );
    }
}
