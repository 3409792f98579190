//! Per-parameter averaging of received chunks (Shatter, PETS 2025, protocol description: aggregation).
//!
//! At the end of a round a real node holds its own trained parameters and every chunk its virtual nodes
//! received. Each parameter becomes the mean of the local value and every received copy of that index, with
//! equal weights: a parameter received twice is averaged over 3 values, one never received keeps its local
//! value. With k = 1 this is Epidemic Learning's aggregation.
//!
//! Chunks arrive from the network, so [`Aggregator::add`] validates a chunk completely (index, length, every
//! value finite) before it touches any state: a rejected chunk leaves the accumulator exactly as it was.
//!
//! Layout for speed: all indices of chunk `s` receive the same number of copies, so the aggregator keeps one
//! running sum per chunk position, in chunk order (contiguous, vectorisable adds at memory speed), and one
//! copy count per chunk; the scatter to flat parameter positions happens once, in [`Aggregator::finish_into`],
//! tile by tile.

use std::sync::Arc;

use crate::chunking::{ChunkPartition, scatter_mean};
use crate::{ModelsError, Result};

/// Accumulates received chunks for one round. Reusable across rounds via [`Aggregator::reset`].
#[derive(Clone, Debug)]
pub struct Aggregator {
    partition: Arc<ChunkPartition>,
    /// Sum of received copies, chunk-ordered (see [`ChunkPartition::chunk_range`]); length d. Meaningful only
    /// for chunks with a copy (`counts[s] > 0`).
    sums: Vec<f32>,
    /// Copies received per chunk.
    counts: Vec<usize>,
}

impl Aggregator {
    /// An empty accumulator for chunks of `partition`.
    pub fn new(partition: Arc<ChunkPartition>) -> Self {
        Self {
            sums: vec![0.0; partition.d()],
            counts: vec![0; partition.k()],
            partition,
        }
    }

    /// The partition this aggregator is built for.
    pub fn partition(&self) -> &Arc<ChunkPartition> {
        &self.partition
    }

    /// Adds one received copy of chunk `chunk`. Rejects, without changing any state, an unknown chunk index
    /// ([`ModelsError::UnknownChunk`]), a value count that differs from the chunk's size
    /// ([`ModelsError::ChunkLength`]) and any NaN or infinity ([`ModelsError::NonFinite`], first offender).
    pub fn add(&mut self, chunk: usize, values: &[f32]) -> Result<()> {
        self.partition.check_chunk(chunk)?;
        let expected = self.partition.chunk_len(chunk);
        if values.len() != expected {
            return Err(ModelsError::ChunkLength {
                index: chunk,
                expected,
                got: values.len(),
            });
        }
        if let Some(position) = first_non_finite(values) {
            return Err(ModelsError::NonFinite {
                index: chunk,
                position,
                value: values[position],
            });
        }
        let sums = &mut self.sums[self.partition.chunk_range(chunk)];
        if self.counts[chunk] == 0 {
            // The first copy is the sum: a plain copy, and no zeroing of the sums in `reset`.
            sums.copy_from_slice(values);
        } else {
            for (acc, &v) in sums.iter_mut().zip(values) {
                *acc += v;
            }
        }
        self.counts[chunk] += 1;
        Ok(())
    }

    /// Copies of chunk `chunk` received so far (0 for an unknown index).
    pub fn received(&self, chunk: usize) -> usize {
        self.counts.get(chunk).copied().unwrap_or(0)
    }

    /// Copies received over all chunks.
    pub fn total_received(&self) -> usize {
        self.counts.iter().sum()
    }

    /// The aggregated parameters: per index, the mean of `local` and every received copy of it.
    pub fn finish(&self, local: &[f32]) -> Result<Vec<f32>> {
        let mut out = local.to_vec();
        self.finish_into(&mut out)?;
        Ok(out)
    }

    /// In place: replaces each parameter of `params` (the local values) by the mean of itself and every
    /// received copy, computed as `(local + sum) * (1 / (copies + 1))` (within an ulp of the exact quotient,
    /// and a multiply is several times cheaper than a divide in this loop). Parameters of chunks never
    /// received are left untouched, bit for bit. The accumulator is not consumed; call [`Self::reset`] before
    /// the next round.
    ///
    /// Tile by tile over `params` (see [`crate::chunking`]): within a tile, each received chunk's sums are a
    /// forward stream scattered into the tile, which stays in cache; `params` is read and written once.
    pub fn finish_into(&self, params: &mut [f32]) -> Result<()> {
        self.partition.check_flat(params.len())?;
        // Per chunk the factor 1 / (copies + 1); chunks never received are skipped.
        let scale: Vec<f32> = self.counts.iter().map(|&c| 1.0 / (c + 1) as f32).collect();
        self.partition.walk_tiles(|tile, s, span, offs| {
            if self.counts[s] > 0 {
                scatter_mean(&mut params[tile], offs, &self.sums[span], scale[s]);
            }
        });
        Ok(())
    }

    /// Forgets everything received, keeping the allocation. The sums are not cleared: a chunk's sums are
    /// read only once it has a copy, and its first copy overwrites them.
    pub fn reset(&mut self) {
        self.counts.fill(0);
    }
}

/// Position of the first NaN or infinity in `values`. The common all-finite case is a branch-free scan:
/// `v - v` is 0 for a finite `v` and NaN for NaN or ±inf, and eight independent lane accumulators let the
/// compiler keep the sums in SIMD registers (float adds cannot be reassociated, so one accumulator would stay
/// scalar). Only a block whose accumulators turned NaN is searched element by element.
#[expect(
    clippy::eq_op,
    reason = "v - v is deliberate: 0 for finite v, NaN otherwise"
)]
fn first_non_finite(values: &[f32]) -> Option<usize> {
    const LANES: usize = 8;
    const BLOCK: usize = 256;
    for (b, block) in values.chunks(BLOCK).enumerate() {
        let mut acc = [0.0f32; LANES];
        let mut lanes = block.chunks_exact(LANES);
        for c in lanes.by_ref() {
            for (a, &v) in acc.iter_mut().zip(c) {
                *a += v - v;
            }
        }
        let tail_bad = lanes.remainder().iter().any(|v| !v.is_finite());
        if tail_bad || acc.iter().any(|a| a.is_nan()) {
            return block
                .iter()
                .position(|v| !v.is_finite())
                .map(|p| b * BLOCK + p);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// The definition, index by index: mean over the local value and every received copy.
    fn naive(p: &ChunkPartition, local: &[f32], received: &[(usize, Vec<f32>)]) -> Vec<f32> {
        let mut copies: BTreeMap<usize, Vec<f32>> = BTreeMap::new();
        for (s, values) in received {
            for (&i, &v) in p.indices(*s).iter().zip(values) {
                copies.entry(i as usize).or_default().push(v);
            }
        }
        (0..p.d())
            .map(|i| match copies.get(&i) {
                None => local[i],
                Some(c) => (local[i] + c.iter().sum::<f32>()) / (c.len() + 1) as f32,
            })
            .collect()
    }

    fn setup(sizes: &[usize], k: usize) -> (Arc<ChunkPartition>, Aggregator) {
        setup_tiled(sizes, k, crate::chunking::TILE)
    }

    /// With tiles of `tile` indices: small tiles make `finish_into` cross tile boundaries.
    fn setup_tiled(sizes: &[usize], k: usize, tile: usize) -> (Arc<ChunkPartition>, Aggregator) {
        let p = Arc::new(ChunkPartition::with_tile(sizes, k, 7, tile).unwrap());
        let a = Aggregator::new(p.clone());
        (p, a)
    }

    proptest! {
        #[test]
        fn matches_naive_reference(
            sizes in prop::collection::vec(1usize..100, 1..6),
            k in 1usize..6,
            picks in prop::collection::vec((0usize..6, -10.0f32..10.0), 0..20),
            base in -5.0f32..5.0,
            tile in 1usize..40,
        ) {
            let d: usize = sizes.iter().sum();
            prop_assume!(k <= d);
            let (p, mut agg) = setup_tiled(&sizes, k, tile);
            let local: Vec<f32> = (0..d).map(|i| base + i as f32 * 0.01).collect();
            let received: Vec<(usize, Vec<f32>)> = picks
                .iter()
                .filter(|(s, _)| *s < k)
                .map(|&(s, v)| (s, (0..p.chunk_len(s)).map(|j| v - j as f32 * 0.1).collect()))
                .collect();
            for (s, values) in &received {
                agg.add(*s, values).unwrap();
            }
            let got = agg.finish(&local).unwrap();
            let want = naive(&p, &local, &received);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                prop_assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "index {}: {} vs {}", i, g, w);
            }
            for s in 0..k {
                prop_assert_eq!(agg.received(s), received.iter().filter(|r| r.0 == s).count());
            }
            // After a reset the aggregator is a no-op again.
            agg.reset();
            prop_assert_eq!(agg.total_received(), 0);
            prop_assert_eq!(&agg.finish(&local).unwrap(), &local);
            // And the next round sees nothing of this one's sums: the same copies give the same result.
            for (s, values) in &received {
                agg.add(*s, values).unwrap();
            }
            prop_assert_eq!(agg.finish(&local).unwrap(), got);
        }
    }

    #[test]
    fn received_twice_is_mean_of_three_and_unreceived_kept() {
        let (p, mut agg) = setup(&[4, 4], 2);
        let local = vec![1.0; 8];
        agg.add(0, &vec![4.0; p.chunk_len(0)]).unwrap();
        agg.add(0, &vec![7.0; p.chunk_len(0)]).unwrap();
        let out = agg.finish(&local).unwrap();
        for &i in p.indices(0) {
            assert_eq!(out[i as usize], 4.0);
        }
        for &i in p.indices(1) {
            assert_eq!(out[i as usize], 1.0);
        }
        assert_eq!(
            (agg.received(0), agg.received(1), agg.received(9)),
            (2, 0, 0)
        );
        // Never received means untouched, bit for bit (even -0.0, which `x + 0.0` would turn into +0.0).
        let out = agg.finish(&[-0.0f32; 8]).unwrap();
        for &i in p.indices(1) {
            assert_eq!(out[i as usize].to_bits(), (-0.0f32).to_bits());
        }
    }

    #[test]
    fn errors_leave_state_unchanged() {
        let (p, mut agg) = setup(&[10, 3], 3);
        let good = vec![2.0; p.chunk_len(1)];
        agg.add(1, &good).unwrap();
        let before = (agg.sums.clone(), agg.counts.clone());

        assert!(matches!(
            agg.add(3, &good),
            Err(ModelsError::UnknownChunk { index: 3, k: 3 })
        ));
        let short = vec![2.0; p.chunk_len(1) - 1];
        assert!(matches!(
            agg.add(1, &short),
            Err(ModelsError::ChunkLength { index: 1, .. })
        ));
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut v = vec![3.0; p.chunk_len(1)];
            v[2] = bad;
            let err = agg.add(1, &v).unwrap_err();
            assert!(
                matches!(
                    err,
                    ModelsError::NonFinite {
                        index: 1,
                        position: 2,
                        ..
                    }
                ),
                "{err}"
            );
        }
        // Non-finite deep inside a long chunk is found at the right position too.
        let (p2, mut agg2) = setup(&[5000], 1);
        let mut v = vec![0.5; p2.chunk_len(0)];
        v[4321] = f32::NAN;
        assert!(matches!(
            agg2.add(0, &v),
            Err(ModelsError::NonFinite { position: 4321, .. })
        ));
        assert_eq!(agg2.received(0), 0);

        assert_eq!((agg.sums.clone(), agg.counts.clone()), before);
        let out = agg.finish(&[0.0; 13]).unwrap();
        for &i in p.indices(1) {
            assert_eq!(out[i as usize], 1.0);
        }
        assert!(matches!(
            agg.finish(&[0.0; 12]),
            Err(ModelsError::ParamLength {
                expected: 13,
                got: 12
            })
        ));
    }

    /// Vectors of several full tiles write back through the unchecked fast path of
    /// `chunking::scatter_mean` (the property test above fits one short tile): the same means as the
    /// definition, and chunks never received untouched.
    #[test]
    fn full_tiles_write_back_the_definition() {
        let tile = crate::chunking::TILE;
        let sizes = [2 * tile + 17, tile, 300];
        let d: usize = sizes.iter().sum();
        let local: Vec<f32> = (0..d).map(|i| (i % 97) as f32 * 0.5 - 20.0).collect();
        for k in [1, 2, 3] {
            let (p, mut agg) = setup(&sizes, k);
            // Chunk 0 twice, the last chunk once, others (k = 3: chunk 1) never.
            let received: Vec<(usize, Vec<f32>)> = [(0, 1.0), (0, -3.0), (k - 1, 7.0)]
                .into_iter()
                .map(|(s, v)| (s, (0..p.chunk_len(s)).map(|j| v + (j % 13) as f32).collect()))
                .collect();
            for (s, values) in &received {
                agg.add(*s, values).unwrap();
            }
            let got = agg.finish(&local).unwrap();
            let want = naive(&p, &local, &received);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "k = {k}, index {i}: {g} vs {w}");
            }
            if k == 3 {
                for &i in p.indices(1) {
                    assert_eq!(got[i as usize].to_bits(), local[i as usize].to_bits());
                }
            }
        }
    }

    #[test]
    fn epidemic_learning_k1_averages_whole_models() {
        let (_, mut agg) = setup(&[3, 2], 1);
        agg.add(0, &[1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
        agg.add(0, &[3.0, 4.0, 5.0, 6.0, 7.0]).unwrap();
        let mut params = vec![2.0, 3.0, 4.0, 5.0, 6.0];
        agg.finish_into(&mut params).unwrap();
        assert_eq!(params, vec![2.0, 3.0, 4.0, 5.0, 6.0]);
        let out = agg.finish(&[5.0; 5]).unwrap();
        let want = [3.0, 11.0 / 3.0, 13.0 / 3.0, 5.0, 17.0 / 3.0];
        for (o, w) in out.iter().zip(want) {
            assert!((o - w).abs() <= f32::EPSILON * w, "{out:?}");
        }
    }
}
