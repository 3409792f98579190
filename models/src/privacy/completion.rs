//! Model completion: turning one received chunk into a full parameter vector an attacker can evaluate.
//!
//! An honest-but-curious real node that receives chunk `s` of another node only learns the values of the
//! coordinates `P_s`. To run a loss-based attack it needs a whole model, so it fills the coordinates it did not
//! receive (Shatter, PETS 2025, §2.1 and the reference implementation): by default with **its own model from
//! the previous round** (the best guess it has: all models of a round start from similar averages), or with
//! zeros as an option (what an attacker with no model of its own would do; zeros usually make the completed
//! model useless, so it is the weaker attack).

use serde::{Deserialize, Serialize};

use crate::chunking::ChunkPartition;
use crate::{ModelsError, Result};

/// What fills the coordinates the attacker did not receive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fill {
    /// The attacker's own parameters of the previous round (paper §2.1, reference implementation).
    #[default]
    OwnModel,
    /// Zeros.
    Zero,
}

/// The completed model of a received chunk: `base` (the attacker's own previous-round parameters, length `d`)
/// with the coordinates of chunk `chunk` replaced by `values`; with [`Fill::Zero`] every other coordinate is 0
/// instead (`base` is then only used for its length).
///
/// Errors: unknown chunk, `base` not of length `d`, `values` not of the chunk's length, or a non-finite value
/// in `values` (a completed model with NaN would score every sample NaN; the node already rejects such
/// chunks, so this is a caller bug or tampered input).
pub fn complete(
    base: &[f32],
    partition: &ChunkPartition,
    chunk: usize,
    values: &[f32],
    fill: Fill,
) -> Result<Vec<f32>> {
    let mut out = Vec::new();
    complete_into(base, partition, chunk, values, fill, &mut out)?;
    Ok(out)
}

/// Like [`complete`], reusing `out`'s allocation (its previous content is dropped). On error `out` is left
/// empty.
pub fn complete_into(
    base: &[f32],
    partition: &ChunkPartition,
    chunk: usize,
    values: &[f32],
    fill: Fill,
    out: &mut Vec<f32>,
) -> Result<()> {
    out.clear();
    partition.check_chunk(chunk)?;
    if base.len() != partition.d() {
        return Err(ModelsError::ParamLength {
            expected: partition.d(),
            got: base.len(),
        });
    }
    let indices = partition.indices(chunk);
    if values.len() != indices.len() {
        return Err(ModelsError::ChunkLength {
            index: chunk,
            expected: indices.len(),
            got: values.len(),
        });
    }
    complete_at_into(base, indices, values, fill, out).map_err(|e| match e {
        ModelsError::NonFinite {
            position, value, ..
        } => ModelsError::NonFinite {
            index: chunk,
            position,
            value,
        },
        e => e,
    })
}

/// Like [`complete_into`] for any subset of coordinates: `values[i]` goes to coordinate `indices[i]` (a
/// chunk of another partition than the run's, e.g. sparsification's per-round subset). Errors: lengths that
/// differ, a coordinate not below `base.len()`, or a non-finite value (reported with `index` 0). On error
/// `out` is left empty.
pub fn complete_at_into(
    base: &[f32],
    indices: &[u32],
    values: &[f32],
    fill: Fill,
    out: &mut Vec<f32>,
) -> Result<()> {
    out.clear();
    if values.len() != indices.len() {
        return Err(ModelsError::ChunkLength {
            index: 0,
            expected: indices.len(),
            got: values.len(),
        });
    }
    if let Some(&i) = indices.iter().find(|&&i| i as usize >= base.len()) {
        return Err(ModelsError::Config(format!(
            "completion: coordinate {i} outside a model of {} parameters",
            base.len()
        )));
    }
    if let Some((position, &value)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(ModelsError::NonFinite {
            index: 0,
            position,
            value,
        });
    }
    match fill {
        Fill::OwnModel => out.extend_from_slice(base),
        Fill::Zero => out.resize(base.len(), 0.0),
    }
    for (&i, &v) in indices.iter().zip(values) {
        out[i as usize] = v;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_exactly_the_missing_coordinates() {
        let sizes = [7, 13, 5, 20];
        let d: usize = sizes.iter().sum();
        for k in [1, 2, 3, 8] {
            let p = ChunkPartition::new(&sizes, k, 42).unwrap();
            let base: Vec<f32> = (0..d).map(|i| 1000.0 + i as f32).collect();
            for s in 0..k {
                let values: Vec<f32> = (0..p.chunk_len(s)).map(|j| -(j as f32) - 1.0).collect();
                let own = complete(&base, &p, s, &values, Fill::OwnModel).unwrap();
                let zero = complete(&base, &p, s, &values, Fill::Zero).unwrap();
                assert_eq!(own.len(), d);
                for i in 0..d {
                    match p.locate(i) {
                        Some((c, pos)) if c == s => {
                            assert_eq!(own[i], values[pos]);
                            assert_eq!(zero[i], values[pos]);
                        }
                        _ => {
                            assert_eq!(own[i], base[i], "k={k} s={s} i={i}");
                            assert_eq!(zero[i], 0.0);
                        }
                    }
                }
                // The chunk really is the received one: extracting it gives the values back.
                assert_eq!(p.extract(s, &own).unwrap(), values);
            }
        }
    }

    #[test]
    fn completes_any_subset_of_coordinates() {
        let base = vec![1.0f32; 6];
        let mut out = Vec::new();
        complete_at_into(&base, &[4, 0], &[7.0, 8.0], Fill::OwnModel, &mut out).unwrap();
        assert_eq!(out, vec![8.0, 1.0, 1.0, 1.0, 7.0, 1.0]);
        complete_at_into(&base, &[2], &[3.0], Fill::Zero, &mut out).unwrap();
        assert_eq!(out, vec![0.0, 0.0, 3.0, 0.0, 0.0, 0.0]);
        assert!(complete_at_into(&base, &[6], &[1.0], Fill::Zero, &mut out).is_err());
        assert!(out.is_empty());
        assert!(complete_at_into(&base, &[1, 2], &[1.0], Fill::Zero, &mut out).is_err());
        assert!(complete_at_into(&base, &[1], &[f32::INFINITY], Fill::Zero, &mut out).is_err());
    }

    #[test]
    fn rejects_bad_input() {
        let p = ChunkPartition::new(&[10], 2, 1).unwrap();
        let base = vec![0.0; 10];
        let ok = vec![1.0; p.chunk_len(0)];
        assert!(matches!(
            complete(&base, &p, 2, &ok, Fill::OwnModel),
            Err(ModelsError::UnknownChunk { index: 2, k: 2 })
        ));
        assert!(matches!(
            complete(&base[..9], &p, 0, &ok, Fill::OwnModel),
            Err(ModelsError::ParamLength { .. })
        ));
        assert!(matches!(
            complete(&base, &p, 0, &ok[1..], Fill::OwnModel),
            Err(ModelsError::ChunkLength { .. })
        ));
        let mut nan = ok.clone();
        nan[3] = f32::NAN;
        assert!(matches!(
            complete(&base, &p, 0, &nan, Fill::Zero),
            Err(ModelsError::NonFinite { position: 3, .. })
        ));
    }
}
