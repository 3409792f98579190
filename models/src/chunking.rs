//! The static random partition of the flat parameter vector `[0, d)` into k chunks (Shatter, PETS 2025,
//! Section 4: every real node cuts its model into k chunks, one per virtual node).
//!
//! Every node builds the same [`ChunkPartition`] from the same shared seed, so chunk `s` always names the same
//! index set `P_s` on every node and in every round; that is what lets a receiver average a chunk value into
//! the right parameter without the index set ever travelling on the wire (only the chunk index does).
//!
//! Construction follows the reference implementation: each tensor's indices are shuffled with the shared seed
//! and dealt into k slices, so every chunk holds a random sample of **every** layer (a chunk made of whole
//! layers would hand a neighbour complete layers, e.g. the full classifier, which helps gradient inversion).
//! A tensor of `n` elements gives each chunk `n / k` of them; its `n % k` leftovers go round-robin starting at
//! the chunk after the previous tensor's last leftover, so leftovers never pile up on chunk 0 and every chunk
//! ends with `floor(d/k)` or `ceil(d/k)` indices.
//!
//! Within a chunk, indices are stored in ascending order. The order is part of the wire contract (value `j`
//! of chunk `s` is parameter `indices(s)[j]`), it is the same on every node because it is derived, and
//! ascending order makes [`ChunkPartition::extract`] and the aggregator's scatter a forward walk with an
//! average stride of k, which the hardware prefetcher follows.

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use crate::{ModelsError, Result};

/// A static partition of `[0, d)` into `k` disjoint chunks whose union is `[0, d)`.
///
/// Indices are computed once, in [`ChunkPartition::new`], and stored as `u32` (4 bytes per parameter, all
/// chunks in one allocation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkPartition {
    k: usize,
    d: usize,
    tensor_sizes: Vec<usize>,
    /// All chunks back to back: chunk `s` is `indices[offsets[s]..offsets[s + 1]]`.
    indices: Vec<u32>,
    /// `k + 1` offsets into `indices`.
    offsets: Vec<usize>,
}

impl ChunkPartition {
    /// Builds the partition of a parameter vector made of tensors of `tensor_sizes` elements (in flat order,
    /// e.g. the sizes of the model's name-sorted parameter layout) into `k` chunks, from the shared `seed`.
    ///
    /// Errors: `k == 0`, `k > d` (some chunk would be empty, and an empty chunk still costs a virtual node),
    /// or `d` too large for `u32` indices.
    pub fn new(tensor_sizes: &[usize], k: usize, seed: u64) -> Result<Self> {
        let d = tensor_sizes
            .iter()
            .try_fold(0usize, |acc, &n| acc.checked_add(n))
            .ok_or_else(|| ModelsError::Config("tensor sizes overflow usize".into()))?;
        if k == 0 {
            return Err(ModelsError::Config(
                "the number of chunks k must be at least 1".into(),
            ));
        }
        if k > d {
            return Err(ModelsError::Config(format!(
                "cannot cut {d} parameters into k = {k} non-empty chunks (k must be at most d)"
            )));
        }
        // Indices travel as u32 (and are stored as u32 to halve the partition's memory): every index, i.e.
        // d - 1, must fit. 4 G parameters is far beyond the models this crate trains.
        if d - 1 > u32::MAX as usize {
            return Err(ModelsError::Config(format!(
                "{d} parameters do not fit 32-bit chunk indices"
            )));
        }

        // Deal every tensor into per-chunk lists. One RNG stream for the whole layout, consumed in flat
        // order, so the result depends only on (tensor_sizes, k, seed).
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut per_chunk: Vec<Vec<u32>> = (0..k)
            .map(|s| Vec::with_capacity(d / k + usize::from(s < d % k)))
            .collect();
        let mut perm: Vec<u32> = Vec::new();
        let mut start = 0usize; // chunk that receives the next leftover
        let mut offset = 0usize;
        for &n in tensor_sizes {
            perm.clear();
            perm.extend((offset..offset + n).map(|i| i as u32));
            perm.shuffle(&mut rng);
            let (q, r) = (n / k, n % k);
            let mut pos = 0;
            for (s, chunk) in per_chunk.iter_mut().enumerate() {
                // Chunk s gets a leftover iff it is among the r chunks start, start+1, ... (mod k).
                let extra = usize::from((s + k - start) % k < r);
                let len = q + extra;
                chunk.extend_from_slice(&perm[pos..pos + len]);
                pos += len;
            }
            debug_assert_eq!(pos, n);
            start = (start + r) % k;
            offset += n;
        }

        let mut indices = Vec::with_capacity(d);
        let mut offsets = Vec::with_capacity(k + 1);
        offsets.push(0);
        for mut chunk in per_chunk {
            // Tensors were dealt in flat order, so sorting only reorders within each tensor's slice.
            chunk.sort_unstable();
            indices.extend_from_slice(&chunk);
            offsets.push(indices.len());
        }
        Ok(Self {
            k,
            d,
            tensor_sizes: tensor_sizes.to_vec(),
            indices,
            offsets,
        })
    }

    /// Number of chunks.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Length of the flat parameter vector.
    pub fn d(&self) -> usize {
        self.d
    }

    /// The tensor sizes the partition was built for, in flat order.
    pub fn tensor_sizes(&self) -> &[usize] {
        &self.tensor_sizes
    }

    /// The global flat indices of chunk `s`, ascending. Panics if `s >= k` (a caller bug; untrusted chunk
    /// indices go through [`ChunkPartition::check_chunk`] or the aggregator).
    pub fn indices(&self, s: usize) -> &[u32] {
        &self.indices[self.range(s)]
    }

    /// Number of parameters in chunk `s` (`floor(d/k)` or `ceil(d/k)`). Panics if `s >= k`.
    pub fn chunk_len(&self, s: usize) -> usize {
        self.offsets[s + 1] - self.offsets[s]
    }

    /// `Ok(())` if `s` names a chunk, else [`ModelsError::UnknownChunk`].
    pub fn check_chunk(&self, s: usize) -> Result<()> {
        if s < self.k {
            Ok(())
        } else {
            Err(ModelsError::UnknownChunk {
                index: s,
                k: self.k,
            })
        }
    }

    /// Position of chunk `s` in the chunk-ordered concatenation of all chunks (the aggregator keeps its sums
    /// in that order).
    pub(crate) fn range(&self, s: usize) -> std::ops::Range<usize> {
        self.offsets[s]..self.offsets[s + 1]
    }

    /// The values of chunk `s` from a full flat parameter vector, in the order of [`Self::indices`].
    pub fn extract(&self, s: usize, flat: &[f32]) -> Result<Vec<f32>> {
        let mut out = Vec::new();
        self.extract_into(s, flat, &mut out)?;
        Ok(out)
    }

    /// Like [`Self::extract`], reusing `out`'s allocation (its previous content is dropped).
    pub fn extract_into(&self, s: usize, flat: &[f32], out: &mut Vec<f32>) -> Result<()> {
        self.check_chunk(s)?;
        self.check_flat(flat.len())?;
        out.clear();
        out.extend(self.indices(s).iter().map(|&i| flat[i as usize]));
        Ok(())
    }

    /// The chunk holding flat index `i` and the position of `i` inside it, or `None` if `i >= d`.
    /// Costs a binary search per chunk (O(k log(d/k))), no extra memory.
    pub fn locate(&self, i: usize) -> Option<(usize, usize)> {
        if i >= self.d {
            return None;
        }
        let i = i as u32;
        (0..self.k).find_map(|s| self.indices(s).binary_search(&i).ok().map(|p| (s, p)))
    }

    /// The chunk holding flat index `i`, or `None` if `i >= d`.
    pub fn chunk_of(&self, i: usize) -> Option<usize> {
        self.locate(i).map(|(s, _)| s)
    }

    pub(crate) fn check_flat(&self, len: usize) -> Result<()> {
        if len == self.d {
            Ok(())
        } else {
            Err(ModelsError::ParamLength {
                expected: self.d,
                got: len,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn layout() -> impl Strategy<Value = Vec<usize>> {
        prop::collection::vec(0usize..300, 1..12)
    }

    fn check_partition(sizes: &[usize], k: usize, seed: u64) {
        let d: usize = sizes.iter().sum();
        let p = ChunkPartition::new(sizes, k, seed).unwrap();
        assert_eq!((p.k(), p.d()), (k, d));
        // Union is a permutation of [0, d).
        let mut seen = vec![false; d];
        for s in 0..k {
            let idx = p.indices(s);
            assert_eq!(idx.len(), p.chunk_len(s));
            assert!(
                idx.windows(2).all(|w| w[0] < w[1]),
                "chunk {s} not ascending"
            );
            for &i in idx {
                assert!(!seen[i as usize], "index {i} in two chunks");
                seen[i as usize] = true;
            }
        }
        assert!(seen.iter().all(|&b| b), "some index in no chunk");
        // Sizes floor(d/k) or ceil(d/k).
        for s in 0..k {
            let len = p.chunk_len(s);
            assert!(
                len == d / k || len == d.div_ceil(k),
                "chunk {s}: {len}, d={d} k={k}"
            );
        }
        // Every chunk touches every tensor that has at least k elements.
        let mut start = 0;
        for &n in sizes {
            if n >= k {
                for s in 0..k {
                    assert!(
                        p.indices(s)
                            .iter()
                            .any(|&i| (start..start + n).contains(&(i as usize))),
                        "chunk {s} misses tensor [{start}, {})",
                        start + n
                    );
                }
            }
            start += n;
        }
    }

    proptest! {
        #[test]
        fn is_a_balanced_partition_touching_every_tensor(
            sizes in layout(), k in 1usize..20, seed in any::<u64>()
        ) {
            let d: usize = sizes.iter().sum();
            prop_assume!(k <= d);
            check_partition(&sizes, k, seed);
        }

        #[test]
        fn locate_inverts_indices(sizes in layout(), k in 1usize..10, seed in any::<u64>()) {
            let d: usize = sizes.iter().sum();
            prop_assume!(k <= d);
            let p = ChunkPartition::new(&sizes, k, seed).unwrap();
            for s in 0..k {
                for (pos, &i) in p.indices(s).iter().enumerate() {
                    prop_assert_eq!(p.locate(i as usize), Some((s, pos)));
                }
            }
            prop_assert_eq!(p.chunk_of(d), None);
        }
    }

    #[test]
    fn realistic_layouts() {
        // MovieLens matrix factorisation (paper, Section 6: 20 factors, 206,680 parameters) and a layout with
        // many small tensors (biases, norms) whose remainders must not pile up on chunk 0.
        check_partition(&[610 * 20, 9724 * 20, 610, 9724], 8, 1);
        let many_small: Vec<usize> = (0..200)
            .map(|i| if i % 2 == 0 { 5 } else { 64 * 9 })
            .collect();
        check_partition(&many_small, 8, 2);
        check_partition(&[7; 100], 8, 3);
        // k = 1 (Epidemic Learning) and k = d.
        check_partition(&[10, 20], 1, 4);
        check_partition(&[3, 4], 7, 5);
    }

    #[test]
    fn deterministic_per_seed_and_different_across_seeds() {
        let sizes = [1000, 37, 4000];
        let a = ChunkPartition::new(&sizes, 8, 42).unwrap();
        let b = ChunkPartition::new(&sizes, 8, 42).unwrap();
        let c = ChunkPartition::new(&sizes, 8, 43).unwrap();
        assert_eq!(a, b);
        assert_ne!(a.indices(0), c.indices(0));
    }

    #[test]
    fn rejects_impossible_k() {
        assert!(matches!(
            ChunkPartition::new(&[10], 0, 0),
            Err(ModelsError::Config(_))
        ));
        let err = ChunkPartition::new(&[3, 4], 8, 0).unwrap_err();
        assert!(err.to_string().contains("k = 8"), "{err}");
        assert!(ChunkPartition::new(&[], 1, 0).is_err());
    }

    #[test]
    fn extract_gathers_values_and_checks_inputs() {
        let p = ChunkPartition::new(&[6, 4], 3, 9).unwrap();
        let flat: Vec<f32> = (0..10).map(|i| i as f32 * 10.0).collect();
        for s in 0..3 {
            let v = p.extract(s, &flat).unwrap();
            let want: Vec<f32> = p.indices(s).iter().map(|&i| i as f32 * 10.0).collect();
            assert_eq!(v, want);
        }
        let mut out = vec![1.0; 99];
        p.extract_into(1, &flat, &mut out).unwrap();
        assert_eq!(out.len(), p.chunk_len(1));
        assert!(matches!(
            p.extract(3, &flat),
            Err(ModelsError::UnknownChunk { index: 3, k: 3 })
        ));
        assert!(matches!(
            p.extract(0, &flat[..9]),
            Err(ModelsError::ParamLength {
                expected: 10,
                got: 9
            })
        ));
    }
}
