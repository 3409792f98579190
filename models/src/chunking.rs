//! The static random partition of the flat parameter vector `[0, d)` into k chunks (Shatter, PETS 2025,
//! protocol description: every real node cuts its model into k chunks, one per virtual node).
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
//! Memory access: a chunk samples every tensor, so chunk `s`'s indices are spread over the whole vector with
//! an average stride of k, and touching one chunk touches every cache line of the vector. Whole-vector work
//! (cutting all k chunks, writing all means back) therefore goes tile by tile: the vector is cut into tiles
//! of [`TILE`] flat indices (64 KiB of `f32`, which stays in the core's L2 cache), and within a tile each
//! chunk's indices are walked in turn. The vector is read from memory once, as by a single forward pass, yet
//! the inner loops are per chunk: a plain gather or scatter with no per-element lookup of the chunk and its
//! position, which a single pass needs. Measured against that single pass (per flat index, its chunk and its
//! position in the concatenation): one round's aggregation of MovieLens MF at k = 2, r = 4, cut included,
//! rose from 3.2–4.7 to 4.3–7.6 GB/s (`cargo bench -p testnet --bench rounds -- --limits-only`, old and new
//! binaries interleaved, 7 and 10 runs). For every tile and chunk the partition stores where that chunk's
//! indices in the tile begin, and for every index its offset inside its tile as a `u16`: half the bytes of
//! the `u32` index to stream through each pass, no subtraction of the tile's start, and, for a full tile of
//! [`TILE`] values seen as an array, an offset masked to `TILE - 1` that the compiler knows is in bounds, so
//! the gather and scatter loops carry no bounds check (the crate forbids `unsafe`).
//!
//! Within a chunk, indices are stored in ascending order. The order is part of the wire contract (value `j`
//! of chunk `s` is parameter `indices(s)[j]`), it is the same on every node because it is derived, and
//! ascending order makes [`ChunkPartition::extract`] and the tile walks a forward walk with an average
//! stride of k, which the hardware prefetcher follows.

use std::ops::Range;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use crate::{ModelsError, Result};

/// Most chunks a partition may have. Chunk ids are stored as `u16` per parameter (2 bytes instead of 4 for
/// the whole-vector passes); a real node runs one virtual node, with its own network identity, per chunk, and
/// the paper's default is k = 8 (evaluation), so 65,536 is far beyond any deployment.
pub const MAX_CHUNKS: usize = 1 << 16;

/// Flat indices per tile of the whole-vector passes (see the module documentation): 64 KiB of `f32`, small
/// enough to stay in a core's L2 cache while the k chunk walks run over it, large enough that each chunk's
/// walk in a tile is long (2,048 elements at k = 8). With many chunks the tile grows to 64 indices per chunk,
/// so that the walks do not become a few elements each and the tile table stays within d / 64 + 2k entries,
/// up to 65,536 indices (in-tile offsets are `u16`): past k = 1,024 the walks shorten and the table grows to
/// about d · k / 65,536 entries.
pub const TILE: usize = 16_384;

/// Longest tile: in-tile offsets are stored as `u16`.
const MAX_TILE: usize = 1 << 16;

/// Tile length for `k` chunks (see [`TILE`]).
fn tile_len(k: usize) -> usize {
    TILE.max(64 * k).min(MAX_TILE)
}

/// A static partition of `[0, d)` into `k` disjoint chunks whose union is `[0, d)`.
///
/// Computed once, in [`ChunkPartition::new`]: the indices of every chunk as `u32` (all chunks in one
/// allocation), each index's offset inside its tile (`u16`), and the tile table (k words per tile of
/// [`TILE`] indices, and k more for the end): about 6 bytes per parameter in all (67 MB for ResNet-18's
/// 11.2M parameters), so in-process nodes should share one partition through an `Arc`, as
/// [`crate::aggregate::Aggregator`] does. The chunk of a flat index is found from the tile table
/// ([`Self::chunk_of`]), not stored per index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkPartition {
    k: usize,
    d: usize,
    tensor_sizes: Vec<usize>,
    /// All chunks back to back: chunk `s` is `indices[offsets[s]..offsets[s + 1]]`.
    indices: Vec<u32>,
    /// `tile_offsets[j]` is `indices[j]`'s offset inside its tile (`indices[j] % tile`).
    tile_offsets: Vec<u16>,
    /// `k + 1` offsets into `indices`.
    offsets: Vec<usize>,
    /// Flat indices per tile (the last tile may be shorter).
    tile: usize,
    /// For tile `b` and chunk `s`, `tile_starts[b * k + s]` is where chunk `s`'s first index at or after
    /// `b * tile` lies in `indices` (for the tile past the last, the chunk's end): the chunk's indices in tile
    /// `b` are `indices[tile_starts[b * k + s]..tile_starts[(b + 1) * k + s]]`.
    tile_starts: Vec<usize>,
}

impl ChunkPartition {
    /// Builds the partition of a parameter vector made of tensors of `tensor_sizes` elements (in flat order,
    /// e.g. the sizes of the model's name-sorted parameter layout) into `k` chunks, from the shared `seed`.
    ///
    /// Errors: `k == 0`, `k > d` (some chunk would be empty, and an empty chunk still costs a virtual node),
    /// `k >` [`MAX_CHUNKS`], or `d` too large for `u32` indices.
    pub fn new(tensor_sizes: &[usize], k: usize, seed: u64) -> Result<Self> {
        Self::with_tile(tensor_sizes, k, seed, tile_len(k))
    }

    /// [`Self::new`] with tiles of `tile` flat indices (1 to 65,536): the same partition whatever the tile,
    /// which only changes how the whole-vector passes walk it (the tests use tiny tiles to cross many tile
    /// boundaries).
    pub(crate) fn with_tile(tensor_sizes: &[usize], k: usize, seed: u64, tile: usize) -> Result<Self> {
        let d = tensor_sizes
            .iter()
            .try_fold(0usize, |acc, &n| acc.checked_add(n))
            .ok_or_else(|| ModelsError::Config("tensor sizes overflow usize".into()))?;
        if k == 0 {
            return Err(ModelsError::Config(
                "the number of chunks k must be at least 1".into(),
            ));
        }
        if k > MAX_CHUNKS {
            return Err(ModelsError::Config(format!(
                "k = {k} chunks is more than the {MAX_CHUNKS} supported"
            )));
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

        let tile = tile.clamp(1, MAX_TILE);
        let tiles = d.div_ceil(tile);
        let mut indices = Vec::with_capacity(d);
        let mut offsets = Vec::with_capacity(k + 1);
        let mut tile_starts = vec![0usize; (tiles + 1) * k];
        offsets.push(0);
        for (s, mut chunk) in per_chunk.into_iter().enumerate() {
            // Tensors were dealt in flat order, so sorting only reorders within each tensor's slice.
            chunk.sort_unstable();
            // Ascending, so one walk finds where each tile's indices begin; the tile past the last
            // (limit >= d) gets the chunk's end.
            let mut j = 0;
            for b in 0..=tiles {
                let limit = b * tile;
                while j < chunk.len() && (chunk[j] as usize) < limit {
                    j += 1;
                }
                tile_starts[b * k + s] = indices.len() + j;
            }
            indices.extend_from_slice(&chunk);
            offsets.push(indices.len());
        }
        // tile <= MAX_TILE = 2^16, so every offset fits.
        let tile_offsets = indices.iter().map(|&i| (i as usize % tile) as u16).collect();
        Ok(Self {
            k,
            d,
            tensor_sizes: tensor_sizes.to_vec(),
            indices,
            tile_offsets,
            offsets,
            tile,
            tile_starts,
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
        &self.indices[self.chunk_range(s)]
    }

    /// Number of parameters in chunk `s` (`floor(d/k)` or `ceil(d/k)`). Panics if `s >= k`.
    pub fn chunk_len(&self, s: usize) -> usize {
        self.offsets[s + 1] - self.offsets[s]
    }

    /// The length of every chunk, in chunk order (what a receiver checks a frame's length against).
    pub fn chunk_lens(&self) -> Vec<usize> {
        self.offsets.windows(2).map(|w| w[1] - w[0]).collect()
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

    /// Where chunk `s` lies in the chunk-ordered concatenation of all chunks (the layout of
    /// [`Self::extract_all_into`]'s output and of the aggregator's sums). Panics if `s >= k`.
    pub fn chunk_range(&self, s: usize) -> std::ops::Range<usize> {
        self.offsets[s]..self.offsets[s + 1]
    }

    /// The chunk of every flat index: `chunk_ids()[i]` holds `i` (k < 2^16). Built on each call, in one
    /// walk over the tiles; for a single index, [`Self::chunk_of`].
    pub fn chunk_ids(&self) -> Vec<u16> {
        let mut ids = vec![0u16; self.d];
        self.walk_tiles(|tile, s, _, offs| {
            for &o in offs {
                ids[tile.start + usize::from(o)] = s as u16; // s < k <= MAX_CHUNKS = 2^16
            }
        });
        ids
    }

    /// Calls `walk(tile, s, span, offs)` for every tile of the flat vector, in flat order, and within it for
    /// every chunk `s` that has indices in it, in chunk order: `tile` is the tile's flat range, `span` the
    /// range those indices take in the chunk-ordered concatenation of all chunks, and `offs` their offsets
    /// inside the tile (ascending; index `tile.start + offs[j]` is `indices[span][j]`). Each flat index is
    /// visited exactly once. Gather and scatter over a tile with [`gather`] and [`scatter_mean`].
    pub(crate) fn walk_tiles(&self, mut walk: impl FnMut(Range<usize>, usize, Range<usize>, &[u16])) {
        let k = self.k;
        let starts = self.tile_starts.chunks_exact(k);
        for (b, (from, to)) in starts.clone().zip(starts.skip(1)).enumerate() {
            let tile = b * self.tile..((b + 1) * self.tile).min(self.d);
            for (s, (&a, &z)) in from.iter().zip(to).enumerate() {
                if a < z {
                    walk(tile.clone(), s, a..z, &self.tile_offsets[a..z]);
                }
            }
        }
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

    /// All k chunks at once, tile by tile over `flat`: `out` becomes the chunk-ordered concatenation,
    /// chunk `s` at `out[self.chunk_range(s)]`. Much faster than k calls of [`Self::extract_into`] on large
    /// models (see the module documentation).
    pub fn extract_all_into(&self, flat: &[f32], out: &mut Vec<f32>) -> Result<()> {
        self.check_flat(flat.len())?;
        // Every position is written below, so a buffer of the right length is reused as it is.
        if out.len() != self.d {
            out.clear();
            out.resize(self.d, 0.0);
        }
        self.walk_tiles(|tile, _, span, offs| gather(&flat[tile], offs, &mut out[span]));
        Ok(())
    }

    /// All k chunks at once, as one vector per chunk, in the same tile walk as [`Self::extract_all_into`]:
    /// each chunk's vector is allocated at its length and filled by appends, so nothing is zeroed or copied
    /// twice.
    pub fn extract_all(&self, flat: &[f32]) -> Result<Vec<Vec<f32>>> {
        self.check_flat(flat.len())?;
        let mut all: Vec<Vec<f32>> = (0..self.k)
            .map(|s| Vec::with_capacity(self.chunk_len(s)))
            .collect();
        self.walk_tiles(|tile, s, _, offs| {
            // Grown to full length, then gathered into: the zeroing is one pass over a buffer the gather
            // writes next, and the gather then runs without checks (a push per value would not).
            let chunk = &mut all[s];
            let start = chunk.len();
            chunk.resize(start + offs.len(), 0.0);
            gather(&flat[tile], offs, &mut chunk[start..]);
        });
        Ok(all)
    }

    /// The chunk holding flat index `i`, or `None` if `i >= d`. O(k log(tile / k)), see [`Self::locate`].
    pub fn chunk_of(&self, i: usize) -> Option<usize> {
        self.locate(i).map(|(s, _)| s)
    }

    /// The chunk holding flat index `i` and the position of `i` inside it, or `None` if `i >= d`: a binary
    /// search in each chunk's indices within `i`'s tile, O(k log(tile / k)).
    pub fn locate(&self, i: usize) -> Option<(usize, usize)> {
        if i >= self.d {
            return None;
        }
        let (k, b) = (self.k, i / self.tile);
        (0..k).find_map(|s| {
            let span = self.tile_starts[b * k + s]..self.tile_starts[(b + 1) * k + s];
            let p = self.indices[span.clone()].binary_search(&(i as u32)).ok()?;
            Some((s, span.start + p - self.offsets[s]))
        })
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

/// `out[j] = block[offs[j]]`: one chunk's values from one tile. A full tile of [`TILE`] values is seen as an
/// array and each offset masked to `TILE - 1` (a no-op for offsets the partition made), so the compiler
/// proves every read in bounds and the loop carries no check; other tiles (the last, shorter one; the longer
/// tiles of k > 256; the tests' tiny ones) take the checked loop.
pub(crate) fn gather(block: &[f32], offs: &[u16], out: &mut [f32]) {
    debug_assert_eq!(offs.len(), out.len());
    if let Ok(full) = <&[f32; TILE]>::try_from(block) {
        for (o, &i) in out.iter_mut().zip(offs) {
            *o = full[usize::from(i) & (TILE - 1)];
        }
    } else {
        for (o, &i) in out.iter_mut().zip(offs) {
            *o = block[usize::from(i)];
        }
    }
}

/// `block[offs[j]] = (block[offs[j]] + sums[j]) * scale`: one chunk's means written back into one tile (see
/// [`crate::aggregate::Aggregator::finish_into`]), with the same unchecked fast path as [`gather`].
pub(crate) fn scatter_mean(block: &mut [f32], offs: &[u16], sums: &[f32], scale: f32) {
    debug_assert_eq!(offs.len(), sums.len());
    if let Ok(full) = <&mut [f32; TILE]>::try_from(&mut *block) {
        for (&sum, &i) in sums.iter().zip(offs) {
            let p = &mut full[usize::from(i) & (TILE - 1)];
            *p = (*p + sum) * scale;
        }
    } else {
        for (&sum, &i) in sums.iter().zip(offs) {
            let p = &mut block[usize::from(i)];
            *p = (*p + sum) * scale;
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
            let ids = p.chunk_ids();
            prop_assert_eq!(ids.len(), d);
            for s in 0..k {
                for (pos, &i) in p.indices(s).iter().enumerate() {
                    prop_assert_eq!(p.locate(i as usize), Some((s, pos)));
                    prop_assert_eq!(ids[i as usize] as usize, s);
                }
            }
            prop_assert_eq!(p.chunk_of(d), None);
            prop_assert_eq!(p.locate(d), None);
        }

        /// The tiles change how the whole-vector passes walk the vector, never the partition or what they
        /// produce: tiles of 1 to 19 indices cross many tile boundaries (the default tile holds all of these
        /// vectors at once).
        #[test]
        fn tiles_visit_every_index_once_and_cut_as_extract_does(
            sizes in layout(), k in 1usize..10, seed in any::<u64>(), tile in 1usize..20
        ) {
            let d: usize = sizes.iter().sum();
            prop_assume!(k <= d);
            let p = ChunkPartition::new(&sizes, k, seed).unwrap();
            let t = ChunkPartition::with_tile(&sizes, k, seed, tile).unwrap();
            for s in 0..k {
                prop_assert_eq!(t.indices(s), p.indices(s));
            }
            let mut visits = vec![0u32; d];
            let mut last = (0usize, 0usize);
            t.walk_tiles(|range, s, span, offs| {
                assert!((range.start, s) >= last, "tiles in flat order, chunks in chunk order");
                last = (range.start, s);
                assert_eq!(range.start % tile, 0);
                let idx: Vec<u32> = offs.iter().map(|&o| (range.start + usize::from(o)) as u32).collect();
                assert_eq!(&t.indices[span], idx.as_slice());
                for i in idx {
                    assert!(range.contains(&(i as usize)));
                    assert_eq!(t.chunk_of(i as usize), Some(s));
                    visits[i as usize] += 1;
                }
            });
            prop_assert!(visits.iter().all(|&v| v == 1));
            let flat: Vec<f32> = (0..d).map(|i| i as f32).collect();
            // A reused buffer of the right length is overwritten everywhere.
            let mut concat = vec![f32::NAN; d];
            t.extract_all_into(&flat, &mut concat).unwrap();
            for s in 0..k {
                let want = p.extract(s, &flat).unwrap();
                prop_assert_eq!(&concat[t.chunk_range(s)], want.as_slice());
            }
            let all = t.extract_all(&flat).unwrap();
            prop_assert_eq!(all.len(), k);
            for (s, chunk) in all.iter().enumerate() {
                prop_assert_eq!(chunk, &p.extract(s, &flat).unwrap());
            }
        }
    }

    #[test]
    fn realistic_layouts() {
        // MovieLens matrix factorisation (paper's evaluation: 20 factors, 206,680 parameters) and a layout with
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

    /// Vectors of several full tiles take the unchecked fast path of [`gather`] (every test above fits one
    /// short tile): the cut still equals the plain definition, for chunks that do and do not divide `TILE`.
    #[test]
    fn full_tiles_cut_as_extract_does() {
        let sizes = [3 * TILE + 5, 1000, TILE];
        let d: usize = sizes.iter().sum();
        let flat: Vec<f32> = (0..d).map(|i| i as f32).collect();
        for k in [1, 2, 3, 8] {
            let p = ChunkPartition::new(&sizes, k, 11).unwrap();
            assert_eq!(p.tile, TILE);
            let mut concat = Vec::new();
            p.extract_all_into(&flat, &mut concat).unwrap();
            let all = p.extract_all(&flat).unwrap();
            for s in 0..k {
                let want: Vec<f32> = p.indices(s).iter().map(|&i| i as f32).collect();
                assert_eq!(&concat[p.chunk_range(s)], want.as_slice(), "k = {k}, chunk {s}");
                assert_eq!(all[s], want, "k = {k}, chunk {s}");
            }
        }
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
        let err = ChunkPartition::new(&[1 << 17], MAX_CHUNKS + 1, 0).unwrap_err();
        assert!(err.to_string().contains("65536"), "{err}");
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
        let all = p.extract_all(&flat).unwrap();
        let mut concat = vec![7.0; 3];
        p.extract_all_into(&flat, &mut concat).unwrap();
        for s in 0..3 {
            assert_eq!(all[s], p.extract(s, &flat).unwrap());
            assert_eq!(&concat[p.chunk_range(s)], all[s].as_slice());
        }
        assert!(p.extract_all(&flat[1..]).is_err());
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
