//! The in-memory dataset type every loader produces and every model consumes.
//!
//! Samples live in flat vectors (not tensors) so that datasets can be split, partitioned and sub-sampled
//! without a device, and batches are only turned into tensors at training time.

use crate::{ModelsError, Result};

/// The inputs of all samples of a dataset.
#[derive(Clone, Debug, PartialEq)]
pub enum Inputs {
    /// Dense f32 features, row-major: sample `i` is `values[i * stride .. (i + 1) * stride]` where `stride` is
    /// the product of `sample_shape` (e.g. `[784]` for MNIST flattened, `[3, 32, 32]` for CIFAR-10, `[V]` for
    /// a bag-of-words over a vocabulary of V tokens).
    Dense {
        values: Vec<f32>,
        sample_shape: Vec<usize>,
    },
    /// (user, item) index pairs, for matrix factorisation. Indices are dense: `user < num_users`,
    /// `item < num_items`.
    Pairs {
        pairs: Vec<[u32; 2]>,
        num_users: usize,
        num_items: usize,
    },
}

/// The targets of all samples of a dataset.
#[derive(Clone, Debug, PartialEq)]
pub enum Targets {
    /// Class labels in `0..num_classes`.
    Classes {
        labels: Vec<u32>,
        num_classes: usize,
    },
    /// Real-valued targets (MovieLens ratings).
    Ratings(Vec<f32>),
}

/// A set of samples: inputs, targets and, for datasets that have them, the user each sample belongs to
/// (MovieLens, Sent140), which partitioning by user needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    inputs: Inputs,
    targets: Targets,
    users: Option<Vec<u32>>,
}

impl Dataset {
    /// Builds a dataset after checking that inputs, targets and users describe the same number of samples and
    /// that every index and label is in range.
    pub fn new(inputs: Inputs, targets: Targets, users: Option<Vec<u32>>) -> Result<Self> {
        let n = match &inputs {
            Inputs::Dense {
                values,
                sample_shape,
            } => {
                let stride: usize = sample_shape.iter().product();
                if stride == 0 {
                    return Err(ModelsError::Config(format!(
                        "sample shape {sample_shape:?} has no elements"
                    )));
                }
                if values.len() % stride != 0 {
                    return Err(ModelsError::Config(format!(
                        "{} feature values are not a whole number of samples of shape {sample_shape:?}",
                        values.len()
                    )));
                }
                values.len() / stride
            }
            Inputs::Pairs {
                pairs,
                num_users,
                num_items,
            } => {
                if let Some(p) = pairs
                    .iter()
                    .find(|p| p[0] as usize >= *num_users || p[1] as usize >= *num_items)
                {
                    return Err(ModelsError::Config(format!(
                        "pair {p:?} out of range for {num_users} users x {num_items} items"
                    )));
                }
                pairs.len()
            }
        };
        let n_targets = match &targets {
            Targets::Classes {
                labels,
                num_classes,
            } => {
                if let Some(l) = labels.iter().find(|&&l| l as usize >= *num_classes) {
                    return Err(ModelsError::Config(format!(
                        "label {l} out of range for {num_classes} classes"
                    )));
                }
                labels.len()
            }
            Targets::Ratings(r) => r.len(),
        };
        if n != n_targets {
            return Err(ModelsError::Config(format!(
                "{n} inputs but {n_targets} targets"
            )));
        }
        if let Some(u) = &users
            && u.len() != n
        {
            return Err(ModelsError::Config(format!(
                "{n} samples but {} user ids",
                u.len()
            )));
        }
        Ok(Self {
            inputs,
            targets,
            users,
        })
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        match &self.targets {
            Targets::Classes { labels, .. } => labels.len(),
            Targets::Ratings(r) => r.len(),
        }
    }

    /// True when the dataset holds no sample.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn inputs(&self) -> &Inputs {
        &self.inputs
    }

    pub fn targets(&self) -> &Targets {
        &self.targets
    }

    /// The user of each sample, for datasets that have users.
    pub fn users(&self) -> Option<&[u32]> {
        self.users.as_deref()
    }

    /// Class labels, for classification datasets.
    pub fn labels(&self) -> Option<&[u32]> {
        match &self.targets {
            Targets::Classes { labels, .. } => Some(labels),
            Targets::Ratings(_) => None,
        }
    }

    /// Number of classes, for classification datasets.
    pub fn num_classes(&self) -> Option<usize> {
        match &self.targets {
            Targets::Classes { num_classes, .. } => Some(*num_classes),
            Targets::Ratings(_) => None,
        }
    }

    /// The per-sample shape of dense inputs (`None` for pairs).
    pub fn sample_shape(&self) -> Option<&[usize]> {
        match &self.inputs {
            Inputs::Dense { sample_shape, .. } => Some(sample_shape),
            Inputs::Pairs { .. } => None,
        }
    }

    /// Takes the dataset apart (e.g. to transform the inputs without copying them); [`Dataset::new`] puts it
    /// back together.
    pub fn into_parts(self) -> (Inputs, Targets, Option<Vec<u32>>) {
        (self.inputs, self.targets, self.users)
    }

    /// The samples at `indices`, in that order (indices may repeat). Panics on an index `>= len()`, which is a
    /// bug in the caller, never a property of input data.
    pub fn subset(&self, indices: &[usize]) -> Dataset {
        let inputs = match &self.inputs {
            Inputs::Dense {
                values,
                sample_shape,
            } => {
                let stride: usize = sample_shape.iter().product();
                let mut out = Vec::with_capacity(indices.len() * stride);
                for &i in indices {
                    out.extend_from_slice(&values[i * stride..(i + 1) * stride]);
                }
                Inputs::Dense {
                    values: out,
                    sample_shape: sample_shape.clone(),
                }
            }
            Inputs::Pairs {
                pairs,
                num_users,
                num_items,
            } => Inputs::Pairs {
                pairs: indices.iter().map(|&i| pairs[i]).collect(),
                num_users: *num_users,
                num_items: *num_items,
            },
        };
        let targets = match &self.targets {
            Targets::Classes {
                labels,
                num_classes,
            } => Targets::Classes {
                labels: indices.iter().map(|&i| labels[i]).collect(),
                num_classes: *num_classes,
            },
            Targets::Ratings(r) => Targets::Ratings(indices.iter().map(|&i| r[i]).collect()),
        };
        let users = self
            .users
            .as_ref()
            .map(|u| indices.iter().map(|&i| u[i]).collect());
        Dataset {
            inputs,
            targets,
            users,
        }
    }
}

/// A train/test split of one task, as every loader returns it.
#[derive(Clone, Debug, PartialEq)]
pub struct Split {
    pub train: Dataset,
    pub test: Dataset,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dense() -> Dataset {
        Dataset::new(
            Inputs::Dense {
                values: (0..12).map(|v| v as f32).collect(),
                sample_shape: vec![2, 2],
            },
            Targets::Classes {
                labels: vec![0, 1, 2],
                num_classes: 3,
            },
            Some(vec![7, 8, 9]),
        )
        .unwrap()
    }

    #[test]
    fn subset_picks_rows_in_order() {
        let s = dense().subset(&[2, 0]);
        assert_eq!(s.len(), 2);
        assert_eq!(s.labels().unwrap(), &[2, 0]);
        assert_eq!(s.users().unwrap(), &[9, 7]);
        match s.inputs() {
            Inputs::Dense { values, .. } => {
                assert_eq!(values, &[8.0, 9.0, 10.0, 11.0, 0.0, 1.0, 2.0, 3.0])
            }
            _ => panic!("dense expected"),
        }
    }

    #[test]
    fn mismatched_lengths_are_rejected() {
        let err = Dataset::new(
            Inputs::Dense {
                values: vec![0.0; 8],
                sample_shape: vec![4],
            },
            Targets::Ratings(vec![1.0]),
            None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("2 inputs but 1 targets"), "{err}");
    }

    #[test]
    fn out_of_range_label_and_pair_are_rejected() {
        assert!(
            Dataset::new(
                Inputs::Dense {
                    values: vec![0.0; 2],
                    sample_shape: vec![2],
                },
                Targets::Classes {
                    labels: vec![3],
                    num_classes: 3,
                },
                None,
            )
            .is_err()
        );
        assert!(
            Dataset::new(
                Inputs::Pairs {
                    pairs: vec![[0, 5]],
                    num_users: 1,
                    num_items: 5,
                },
                Targets::Ratings(vec![4.0]),
                None,
            )
            .is_err()
        );
    }
}
