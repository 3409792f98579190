//! The linkability attack by assignment: a round's received chunks linked to training sets **jointly**,
//! not one by one.
//!
//! The arg-min LA ([`super::link_from_losses`]) names, for each chunk on its own, the candidate whose data
//! the completed model fits best; nothing stops it from naming one "easy" candidate for every chunk of the
//! round. But the attacker knows the protocol: in one exchange a real node sends each chunk index at most
//! once (Shatter: one chunk per VN, k VNs; the one-VN algorithms: one payload per exchange), so at most k
//! chunks of a round come from one real node, at most one of each index. The assignment attack uses that:
//! each candidate is expanded into slots, one per *label* (the chunk index, or a single label for one-VN
//! algorithms) and `per_label` deep, and the chunks are matched to slots at the least total mean loss
//! (Hungarian method).
//!
//! The solver is `pathfinding`'s Kuhn–Munkres (O(n³), rectangular with rows ≤ columns), a maintained crate
//! rather than a hand-written Hungarian; it needs totally ordered integer weights, so the mean losses are
//! scaled to integer micro-units of loss ([`LOSS_SCALE`]): two losses closer than 10⁻⁶ are a tie, far below
//! the sampling error of a mean over a few hundred samples.

use std::collections::BTreeMap;

use pathfinding::kuhn_munkres::kuhn_munkres_min;
use pathfinding::matrix::Matrix;

use crate::{ModelsError, Result};

/// Integer units per unit of mean loss in the assignment's weights.
pub const LOSS_SCALE: f64 = 1e6;

/// Most chunks one joint assignment takes: the solver is cubic in the slots, and a round's audit attacks a
/// handful of chunks per attacker (the paper: 8).
pub const MAX_ASSIGNED_CHUNKS: usize = 1024;

/// Cost of a slot a chunk cannot take (another label). Large enough that any assignment using one costs
/// more than every feasible one (losses are capped at [`MAX_LOSS`] below), small enough that a sum over
/// [`MAX_ASSIGNED_CHUNKS`] rows cannot overflow `i64`.
const FORBIDDEN: i64 = 1 << 50;

/// Mean losses above this are clamped before scaling (a diverged model's loss says nothing finer).
const MAX_LOSS: f64 = 1e6;

/// Links a round's chunks jointly.
///
/// - `mean_losses[c][j]`: the mean loss of chunk `c`'s completed model on candidate `j`'s data (the arg-min
///   LA's [`super::LinkResult::mean_losses`]); every row has the same number of candidates.
/// - `labels[c]`: the chunk's slot label (its chunk index when a node sends one chunk per index, or 0 for
///   all chunks when the constraint is only a count).
/// - `per_label`: how many chunks of one label one candidate may be named for (1 for "one per index").
///
/// Returns the candidate named for each chunk. A chunk that cannot be placed within the constraint (more
/// chunks of one label than candidates × `per_label`) gets its arg-min candidate, so the result is always
/// a full answer. Errors on ragged or empty rows, a NaN loss, `per_label` = 0, or more than
/// [`MAX_ASSIGNED_CHUNKS`] chunks.
pub fn link_by_assignment(
    mean_losses: &[Vec<f64>],
    labels: &[usize],
    per_label: usize,
) -> Result<Vec<usize>> {
    if labels.len() != mean_losses.len() {
        return Err(ModelsError::Config(format!(
            "assignment LA: {} chunks but {} labels",
            mean_losses.len(),
            labels.len()
        )));
    }
    if per_label == 0 {
        return Err(ModelsError::Config(
            "assignment LA: per_label must be at least 1".into(),
        ));
    }
    if mean_losses.len() > MAX_ASSIGNED_CHUNKS {
        return Err(ModelsError::Config(format!(
            "assignment LA: {} chunks, at most {MAX_ASSIGNED_CHUNKS}",
            mean_losses.len()
        )));
    }
    let Some(first) = mean_losses.first() else {
        return Ok(Vec::new());
    };
    let m = first.len();
    let mut argmin = Vec::with_capacity(mean_losses.len());
    for row in mean_losses {
        if row.len() != m {
            return Err(ModelsError::Config(
                "assignment LA: every chunk needs a loss per candidate".into(),
            ));
        }
        argmin.push(super::linkability::link_from_losses(row)?);
    }
    // Columns: for each label present, `per_label` slots of every candidate.
    let distinct: BTreeMap<usize, usize> = labels
        .iter()
        .copied()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .enumerate()
        .map(|(i, l)| (l, i))
        .collect();
    let columns = distinct.len() * per_label * m;
    let rows = mean_losses.len();
    if rows > columns {
        // More chunks than slots overall (only with fewer candidates than chunks): nothing to constrain.
        return Ok(argmin);
    }
    let slots_per_label = per_label * m;
    let weights = Matrix::from_fn(rows, columns, |(c, col)| {
        let label_of_col = col / slots_per_label;
        if label_of_col != distinct[&labels[c]] {
            return FORBIDDEN;
        }
        let candidate = col % slots_per_label / per_label;
        (mean_losses[c][candidate].clamp(0.0, MAX_LOSS) * LOSS_SCALE).round() as i64
    });
    let (_, assigned) = kuhn_munkres_min(&weights);
    Ok(assigned
        .iter()
        .enumerate()
        .map(|(c, &col)| {
            if col / slots_per_label == distinct[&labels[c]] {
                col % slots_per_label / per_label
            } else {
                argmin[c]
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(named: &[usize], labels: &[usize], candidate: usize, label: usize) -> usize {
        named
            .iter()
            .zip(labels)
            .filter(|&(&n, &l)| n == candidate && l == label)
            .count()
    }

    /// Candidate 0 has "easy" data: every model fits it a little better than anything else, so arg-min
    /// names it for all three chunks (one right). Knowing a node sends one chunk per index, the assignment
    /// gives candidate 0 only the chunk that fits it best and places the others by their second choice:
    /// all three right.
    #[test]
    fn assignment_beats_argmin_where_one_candidate_attracts_every_chunk() {
        // Chunks from candidates 0, 1, 2 (the truth), all of chunk index 5.
        let losses = vec![
            vec![0.50, 1.40, 1.50],
            vec![0.90, 1.00, 1.60],
            vec![0.95, 1.70, 1.05],
        ];
        let truth = [0, 1, 2];
        let labels = [5, 5, 5];
        let argmin: Vec<usize> = losses
            .iter()
            .map(|l| super::super::linkability::link_from_losses(l).unwrap())
            .collect();
        assert_eq!(argmin, vec![0, 0, 0]);
        let joint = link_by_assignment(&losses, &labels, 1).unwrap();
        assert_eq!(joint, truth);
        let hits = |p: &[usize]| p.iter().zip(&truth).filter(|(a, b)| a == b).count();
        assert!(hits(&joint) > hits(&argmin));
    }

    /// The ≤ k per real node constraint holds: with 2 labels (k = 2 chunk indices) and one slot each, no
    /// candidate is named for more than one chunk per label, hence at most 2 chunks, though arg-min puts
    /// all six on candidate 0. With one label and `per_label` = 2 (the plain "≤ k" count), the same.
    #[test]
    fn no_candidate_gets_more_than_its_slots() {
        let losses: Vec<Vec<f64>> = (0..6)
            .map(|c| vec![0.1 + 0.01 * c as f64, 0.5, 0.6 + 0.1 * (c % 3) as f64, 0.9])
            .collect();
        let labels = [0, 1, 0, 1, 0, 1];
        let named = link_by_assignment(&losses, &labels, 1).unwrap();
        for candidate in 0..4 {
            for label in 0..2 {
                assert!(count(&named, &labels, candidate, label) <= 1, "{named:?}");
            }
        }
        let plain = link_by_assignment(&losses, &[0; 6], 2).unwrap();
        for candidate in 0..4 {
            assert!(count(&plain, &[0; 6], candidate, 0) <= 2, "{plain:?}");
        }
        // Candidate 0 is every chunk's cheapest, so a least-cost answer fills its slot of each label.
        assert_eq!(count(&named, &labels, 0, 0), 1, "{named:?}");
        assert_eq!(count(&named, &labels, 0, 1), 1, "{named:?}");
    }

    #[test]
    fn infeasible_rows_fall_back_to_argmin_and_bad_input_is_refused() {
        // Three chunks of one label, two candidates, one slot each: cannot all be placed.
        let losses = vec![vec![0.1, 0.2], vec![0.1, 0.3], vec![0.4, 0.2]];
        let named = link_by_assignment(&losses, &[0, 0, 0], 1).unwrap();
        assert_eq!(named, vec![0, 0, 1]);
        assert!(link_by_assignment(&losses, &[0, 0], 1).is_err());
        assert!(link_by_assignment(&losses, &[0, 0, 0], 0).is_err());
        assert!(link_by_assignment(&[vec![0.1], vec![0.1, 0.2]], &[0, 1], 1).is_err());
        assert!(link_by_assignment(&[vec![f64::NAN, 0.1]], &[0], 1).is_err());
        assert_eq!(
            link_by_assignment(&[], &[], 1).unwrap(),
            Vec::<usize>::new()
        );
    }

    /// Chunks of different labels never compete: two chunks that both fit candidate 0 best keep it when
    /// their indices differ (one node sends both).
    #[test]
    fn different_labels_share_a_candidate() {
        let losses = vec![vec![0.1, 0.9], vec![0.2, 0.8]];
        assert_eq!(link_by_assignment(&losses, &[0, 1], 1).unwrap(), vec![0, 0]);
        assert_eq!(link_by_assignment(&losses, &[3, 3], 1).unwrap(), vec![0, 1]);
    }
}
