//! Top-k sparsification (`sparsify-topk:F`, paper §3 and Fig. 2b): each round a node shares the fraction F of
//! its parameters that changed most since the round began (largest |θ − θ_start|, the round's accumulated
//! update), through one VN, to the r neighbours of the round's overlay; receivers average per parameter what
//! arrives (a parameter nobody sent keeps its local value).
//!
//! # The coordinates on the wire
//! A top-k subset is not a chunk of a fixed partition, so the frame must say which coordinates it carries.
//! It does so inside the ordinary chunk frame (no new frame type, so every VN check still applies unchanged):
//! the frame's chunk index is 0, and its 2m values ([`sparse_len`]) are the m coordinate indices, each as the
//! f32 with that bit pattern (`f32::from_bits`), ascending, then the m values in the same order. An index
//! below 2^24 (every model a frame can carry: `protocol::MAX_CHUNK_VALUES`) is a finite subnormal f32, so
//! the VN's finiteness and value-range rules accept the index half as they are and reject nothing honest.
//! The length is fixed by F and d (the VN's length check refuses any other), and [`decode_sparse`] refuses a
//! frame whose indices are not strictly ascending or not below d before anything of it is used.

use protocol::{ChunkFrame, ChunkIndex, Round};

use super::{AlgoError, Algorithm, Payload};

/// Coordinates a top-k frame carries for a model of `d` parameters and fraction `fraction` (at least 1).
pub fn sparse_count(d: usize, fraction: f64) -> usize {
    ((d as f64 * fraction).round() as usize).clamp(1, d.max(1))
}

/// Values in a top-k frame: the indices, then the values.
pub fn sparse_len(d: usize, fraction: f64) -> usize {
    2 * sparse_count(d, fraction)
}

/// The frame values for coordinates `indices` (ascending) holding `values`.
pub fn encode_sparse(indices: &[u32], values: &[f32]) -> Vec<f32> {
    debug_assert_eq!(indices.len(), values.len());
    indices
        .iter()
        .map(|&i| f32::from_bits(i))
        .chain(values.iter().copied())
        .collect()
}

/// The (indices, values) of a top-k frame's values for a model of `d` parameters: refuses an odd length,
/// indices not strictly ascending or not below `d`, and non-finite values.
pub fn decode_sparse(frame_values: &[f32], d: usize) -> Result<(Vec<u32>, &[f32]), AlgoError> {
    if !frame_values.len().is_multiple_of(2) {
        return Err(AlgoError::Other(format!(
            "top-k frame of odd length {}",
            frame_values.len()
        )));
    }
    let (index_half, values) = frame_values.split_at(frame_values.len() / 2);
    let indices: Vec<u32> = index_half.iter().map(|v| v.to_bits()).collect();
    if let Some(&i) = indices.iter().find(|&&i| i as usize >= d) {
        return Err(AlgoError::Other(format!(
            "top-k frame names coordinate {i} of a model of {d}"
        )));
    }
    if indices.windows(2).any(|w| w[0] >= w[1]) {
        return Err(AlgoError::Other(
            "top-k frame's coordinates are not strictly ascending".into(),
        ));
    }
    if values.iter().any(|v| !v.is_finite()) {
        return Err(AlgoError::Other(
            "top-k frame carries a non-finite value".into(),
        ));
    }
    Ok((indices, values))
}

/// Top-k sparsification over a model of d parameters, one VN.
pub struct TopK {
    d: usize,
    fraction: f64,
    /// The model this round started from (the last combine's result); `None` before the first combine,
    /// when the change is measured from zero (the largest parameters).
    start: Option<Vec<f32>>,
    sums: Vec<f64>,
    counts: Vec<u32>,
}

impl TopK {
    /// For a model of `d` parameters sharing `fraction` (0 < F < 1) of them per round.
    pub fn new(d: usize, fraction: f64) -> Result<Self, AlgoError> {
        if d == 0 || !(fraction > 0.0 && fraction < 1.0) {
            return Err(AlgoError::Other(format!(
                "sparsify-topk needs d ≥ 1 and 0 < F < 1, not d = {d}, F = {fraction}"
            )));
        }
        Ok(Self {
            d,
            fraction,
            start: None,
            sums: vec![0.0; d],
            counts: vec![0; d],
        })
    }

    /// The m coordinates whose change from the round's start is largest, ascending (ties: lower index).
    fn top(&self, params: &[f32]) -> Vec<u32> {
        let change = |i: usize| {
            let from = self.start.as_ref().map_or(0.0, |s| s[i]);
            (params[i] - from).abs()
        };
        let m = sparse_count(self.d, self.fraction);
        let mut order: Vec<u32> = (0..self.d as u32).collect();
        let by_change = |a: &u32, b: &u32| {
            change(*b as usize)
                .total_cmp(&change(*a as usize))
                .then(a.cmp(b))
        };
        if m < self.d {
            order.select_nth_unstable_by(m - 1, by_change);
        }
        order.truncate(m);
        order.sort_unstable();
        order
    }
}

impl Algorithm for TopK {
    fn name(&self) -> &str {
        "sparsify-topk"
    }

    fn virtual_nodes(&self) -> usize {
        1
    }

    fn chunk_lens(&self) -> Vec<usize> {
        vec![sparse_len(self.d, self.fraction)]
    }

    fn begin_round(&mut self, _round: Round) {
        self.sums.fill(0.0);
        self.counts.fill(0);
    }

    fn outgoing(
        &mut self,
        round: Round,
        _step: u32,
        params: &[f32],
    ) -> Result<Vec<(usize, Payload)>, AlgoError> {
        if params.len() != self.d {
            return Err(models::ModelsError::ParamLength {
                expected: self.d,
                got: params.len(),
            }
            .into());
        }
        let indices = self.top(params);
        let values: Vec<f32> = indices.iter().map(|&i| params[i as usize]).collect();
        let frame = ChunkFrame {
            round,
            chunk: ChunkIndex(0),
            values: encode_sparse(&indices, &values),
        };
        Ok(vec![(0, Payload::Broadcast(frame))])
    }

    /// Validates the whole frame before adding any of it, so a refused copy leaves no trace.
    fn receive(&mut self, _step: u32, _vn: usize, frame: &ChunkFrame) -> Result<(), AlgoError> {
        if frame.chunk.get() != 0 || frame.values.len() != sparse_len(self.d, self.fraction) {
            return Err(AlgoError::Other(format!(
                "top-k frame of chunk {} and {} values, expected chunk 0 and {}",
                frame.chunk.get(),
                frame.values.len(),
                sparse_len(self.d, self.fraction)
            )));
        }
        let (indices, values) = decode_sparse(&frame.values, self.d)?;
        for (&i, &v) in indices.iter().zip(values) {
            self.sums[i as usize] += f64::from(v);
            self.counts[i as usize] += 1;
        }
        Ok(())
    }

    /// Per-parameter mean of the local value and every value received for it.
    fn combine(&mut self, _round: Round, _step: u32, local: &[f32]) -> Result<Vec<f32>, AlgoError> {
        if local.len() != self.d {
            return Err(models::ModelsError::ParamLength {
                expected: self.d,
                got: local.len(),
            }
            .into());
        }
        let next: Vec<f32> = local
            .iter()
            .zip(self.sums.iter().zip(&self.counts))
            .map(|(&l, (&s, &c))| ((f64::from(l) + s) / f64::from(1 + c)) as f32)
            .collect();
        self.start = Some(next.clone());
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(out: &[(usize, Payload)]) -> &ChunkFrame {
        match out {
            [(0, Payload::Broadcast(f))] => f,
            _ => panic!("{out:?}"),
        }
    }

    #[test]
    fn shares_the_largest_changes_since_the_round_began_and_averages_what_arrives() {
        let mut a = TopK::new(8, 0.25).unwrap();
        assert_eq!(
            a.chunk_lens(),
            vec![4],
            "2 coordinates: 2 indices + 2 values"
        );
        // Round 0 measures from zero: the two largest magnitudes, ascending.
        a.begin_round(Round(0));
        let p0 = [0.1, -5.0, 0.2, 0.0, 3.0, 0.0, 0.0, 1.0];
        let f = payload(&a.outgoing(Round(0), 0, &p0).unwrap()).clone();
        let (idx, vals) = decode_sparse(&f.values, 8).unwrap();
        assert_eq!((idx, vals.to_vec()), (vec![1, 4], vec![-5.0, 3.0]));
        // A neighbour's copy for coordinates 0 and 4: those average with the local values, the rest stay.
        let copy = ChunkFrame {
            round: Round(0),
            chunk: ChunkIndex(0),
            values: encode_sparse(&[0, 4], &[1.1, 5.0]),
        };
        a.receive(0, 0, &copy).unwrap();
        let next = a.combine(Round(0), 0, &p0).unwrap();
        assert_eq!(next, vec![0.6, -5.0, 0.2, 0.0, 4.0, 0.0, 0.0, 1.0]);
        // Round 1: the change from `next`, not the magnitude: coordinates 3 and 6 moved most.
        a.begin_round(Round(1));
        let mut p1 = next.clone();
        p1[3] += 0.5;
        p1[6] -= 0.7;
        p1[1] += 0.1;
        let f = payload(&a.outgoing(Round(1), 0, &p1).unwrap()).clone();
        assert_eq!(decode_sparse(&f.values, 8).unwrap().0, vec![3, 6]);
        // Nothing received in round 1: the model stays.
        assert_eq!(a.combine(Round(1), 0, &p1).unwrap(), p1);
    }

    #[test]
    fn a_frame_out_of_bounds_unsorted_or_of_another_length_is_refused_whole() {
        let mut a = TopK::new(8, 0.25).unwrap();
        a.begin_round(Round(0));
        let bad = |values: Vec<f32>| ChunkFrame {
            round: Round(0),
            chunk: ChunkIndex(0),
            values,
        };
        for frame in [
            bad(encode_sparse(&[2, 8], &[1.0, 1.0])), // coordinate 8 of a model of 8
            bad(encode_sparse(&[4, 2], &[1.0, 1.0])), // not ascending
            bad(encode_sparse(&[3, 3], &[1.0, 1.0])), // a coordinate twice
            bad(encode_sparse(&[1], &[1.0])),         // another length
            bad(encode_sparse(&[1, 2], &[f32::NAN, 1.0])),
        ] {
            assert!(a.receive(0, 0, &frame).is_err(), "{frame:?}");
        }
        let mut other_chunk = bad(encode_sparse(&[1, 2], &[1.0, 1.0]));
        other_chunk.chunk = ChunkIndex(1);
        assert!(a.receive(0, 0, &other_chunk).is_err());
        // Nothing of the refused frames was added.
        let local = vec![2.0f32; 8];
        assert_eq!(a.combine(Round(0), 0, &local).unwrap(), local);
        assert!(TopK::new(8, 1.0).is_err() && TopK::new(0, 0.5).is_err());
    }

    /// The index half is finite for every coordinate a frame can carry, so the VN's finiteness and value
    /// rules pass honest frames.
    #[test]
    fn indices_travel_as_finite_tiny_floats() {
        for i in [0u32, 1, 61_705, (1 << 24) - 1] {
            let f = f32::from_bits(i);
            assert!(f.is_finite() && f.abs() < 1e-30, "{i}: {f}");
        }
    }
}
