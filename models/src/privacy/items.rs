//! Which items a sender's users rated, read off a matrix-factorisation chunk: what takes the place of
//! gradient inversion for the MovieLens model.
//!
//! Image inversion does not apply to matrix factorisation: there is no input to reconstruct, the inputs are
//! (user, item) ids and the model is two embedding tables. What an update does reveal is *which rows moved*:
//! sparse SGD on a node's ratings changes only the item rows of items its users rated (and its users' own
//! rows). An attacker who holds some coordinates of a sender's model after the sender's local training
//! scores every item row by the largest change of a held coordinate against a reference model, and ranks
//! the items: the ROC-AUC of that score separating the sender's rated items from the other items is the
//! attack's success (0.5: no information).
//!
//! Two references, as for the analytic GIA ([`super::gia`]): the sender's own model of the round's start
//! (ground truth only a harness has: the strongest attacker; every held coordinate of a rated item's row
//! then moved and no other did) or the attacker's own model of the round's start (what an attacker holds:
//! after averaging every node's model differs from it a little everywhere, so only large changes stand out).
//! Chunking limits the attack only through coverage: Shatter's partition deals every tensor over all k
//! chunks, so a chunk holds about factors/k coordinates of **every** row, and with 20 factors a chunk of 8
//! misses a row entirely with probability (7/8)^20 ≈ 0.07.

use std::ops::Range;

use super::roc_auc;
use crate::{ModelsError, Result};

/// The item embedding's place in the flat parameter vector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ItemTable {
    /// Flat positions of the `[num_items, factors]` item embedding.
    pub range: Range<usize>,
    pub factors: usize,
}

impl ItemTable {
    pub fn num_items(&self) -> usize {
        self.range.len() / self.factors.max(1)
    }
}

/// One chunk's rated-items inference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ItemInference {
    /// ROC-AUC of the per-item score separating the sender's rated items from the others.
    pub auc: f64,
    /// Share of the rated items whose row has a held coordinate that changed.
    pub found: f64,
}

/// Scores every item row by the largest `|values[j] − reference[indices[j]]|` over the held coordinates
/// `indices` that fall in the row (0 for a row with none) and returns the ROC-AUC of those scores for the
/// items in `rated` against the other items, and the share of `rated` whose score is above 0.
///
/// Errors: `indices` and `values` of different lengths, an index outside `reference`, a malformed table, an
/// empty or full `rated` set (the AUC is undefined) or a rated item id outside the table.
pub fn infer_rated_items(
    reference: &[f32],
    indices: &[u32],
    values: &[f32],
    table: &ItemTable,
    rated: &[u32],
) -> Result<ItemInference> {
    if indices.len() != values.len() {
        return Err(ModelsError::Config(format!(
            "{} indices but {} values",
            indices.len(),
            values.len()
        )));
    }
    if table.factors == 0
        || table.range.end > reference.len()
        || !table.range.len().is_multiple_of(table.factors)
    {
        return Err(ModelsError::Config(format!(
            "item table {:?} × {} does not fit a model of {}",
            table.range,
            table.factors,
            reference.len()
        )));
    }
    let n = table.num_items();
    let mut score = vec![0.0f32; n];
    for (&i, &v) in indices.iter().zip(values) {
        let i = i as usize;
        let base = *reference.get(i).ok_or_else(|| {
            ModelsError::Config(format!("index {i} outside a model of {}", reference.len()))
        })?;
        if table.range.contains(&i) {
            let row = (i - table.range.start) / table.factors;
            let change = (v - base).abs();
            // NaN-safe: a NaN change (a non-finite value) ranks as no change.
            if change > score[row] {
                score[row] = change;
            }
        }
    }
    let mut is_rated = vec![false; n];
    for &item in rated {
        *is_rated.get_mut(item as usize).ok_or_else(|| {
            ModelsError::Config(format!("rated item {item} outside a table of {n} items"))
        })? = true;
    }
    let (mut members, mut others) = (Vec::new(), Vec::new());
    for (s, r) in score.iter().zip(&is_rated) {
        if *r { &mut members } else { &mut others }.push(*s);
    }
    let auc = roc_auc(&members, &others)?;
    let found = members.iter().filter(|&&s| s > 0.0).count() as f64 / members.len() as f64;
    Ok(ItemInference { auc, found })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 4 items × 2 factors after 2 user parameters; items 1 and 3 rated.
    fn table() -> ItemTable {
        ItemTable {
            range: 2..10,
            factors: 2,
        }
    }

    #[test]
    fn moved_rows_name_the_rated_items() {
        let reference = vec![0.0f32; 10];
        let mut trained = reference.clone();
        trained[4] = 0.3; // item 1, factor 0
        trained[9] = -0.2; // item 3, factor 1
        trained[0] = 1.0; // a user row: not an item
        let all: Vec<u32> = (0..10).collect();
        let r = infer_rated_items(&reference, &all, &trained, &table(), &[1, 3]).unwrap();
        assert_eq!(r.auc, 1.0);
        assert_eq!(r.found, 1.0);
    }

    #[test]
    fn unheld_rows_carry_no_information() {
        let reference = vec![0.0f32; 10];
        let mut trained = reference.clone();
        trained[4] = 0.3;
        trained[9] = -0.2;
        // Only item 1's moved coordinate is held: item 3 ties with the unrated items.
        let held = [4u32, 6];
        let values: Vec<f32> = held.iter().map(|&i| trained[i as usize]).collect();
        let r = infer_rated_items(&reference, &held, &values, &table(), &[1, 3]).unwrap();
        assert_eq!(r.found, 0.5);
        // Item 1 beats both unrated (2 wins), item 3 ties both (2 halves): (2 + 1) / 4.
        assert_eq!(r.auc, 0.75);
    }

    #[test]
    fn refuses_what_does_not_fit() {
        let reference = vec![0.0f32; 10];
        assert!(infer_rated_items(&reference, &[1], &[], &table(), &[1]).is_err());
        assert!(infer_rated_items(&reference, &[10], &[0.0], &table(), &[1]).is_err());
        assert!(infer_rated_items(&reference, &[1], &[0.0], &table(), &[4]).is_err());
        assert!(infer_rated_items(&reference, &[1], &[0.0], &table(), &[]).is_err());
        let bad = ItemTable {
            range: 2..11,
            factors: 2,
        };
        assert!(infer_rated_items(&reference, &[1], &[0.0], &bad, &[1]).is_err());
    }
}
