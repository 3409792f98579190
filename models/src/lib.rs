//! The learning core of Shatter: Candle models, datasets and their partitioning across nodes, seeded
//! initialisation, flat parameter vectors, local training and evaluation, the static chunk partition and
//! per-parameter aggregation.
//!
//! Nothing here knows about the network: the node crate moves chunks, this crate makes and merges them.
//!
//! # Layout
//! - `error.rs`: [`ModelsError`], the one error type of this crate.
//! - `device.rs`: picks CUDA / Metal when compiled in and available, else the CPU.
//! - `nn/`: the models (`Config` + `new(cfg, vb)` + `impl Module`) and [`nn::ModelSpec`], which builds any of
//!   them with seeded weights.
//!   - `init.rs`: seeded weight initialisation from our own RNG (Candle's CPU RNG cannot be seeded).
//!   - `layers.rs`: linear and conv constructors that record how each tensor is initialised.
//!   - `mlp.rs`, `lenet.rs`, `resnet.rs` (ResNet-8/18 without normalisation), `mf.rs`: the architectures.
//!     Sent140 text classification is the MLP over a dense hashed bag-of-words.
//!   - `tests.rs`: seeding, shapes, parameter counts, spec/task fit.
//! - `params.rs`: the flat parameter vector (name-sorted order) of a model.
//! - `train.rs` (+ `train/tests.rs`): local SGD (steps or epochs), evaluation, per-sample losses.
//!   - `mf_sgd.rs`: exact SGD for matrix factorisation on the CPU that updates only the batch's embedding rows.
//! - `data/`: [`data::Dataset`], its loaders, and [`data::DatasetSpec`] (`mod.rs`), the config / CLI form.
//!   - `dataset.rs`: the in-memory dataset type shared by every loader and model.
//!   - `synthetic.rs`: seeded Gaussian-mixture and image-pattern tasks (the default, no download).
//!   - `movielens.rs`, `sent140.rs`, `cifar10.rs`, `mnist.rs`: loaders of the standard files, with errors
//!     that name the file and the line or byte offset.
//!   - `partition.rs`: IID, Dirichlet(α) non-IID and by-user assignment of samples to nodes.
//! - `chunking.rs`: [`chunking::ChunkPartition`], the static seeded partition of `[0, d)` into k chunks.
//! - `threads.rs`: fixes the CPU matmul thread count once per process (Candle 0.11 otherwise reads
//!   `/proc/cpuinfo` on every matmul).
//! - `aggregate.rs`: [`aggregate::Aggregator`], per-parameter averaging of received chunks.
//! - `privacy/`: attacks that audit a run (§2.1, §6): chunk completion, exact ROC-AUC, loss-based membership
//!   inference, linkability, gradient inversion of a leading FC layer, PSNR/SSIM and PNG grids, rated-items
//!   inference for matrix factorisation, and the
//!   per-chunk [`privacy::Auditor`] the testnet `--audit` harness calls (see `privacy/mod.rs`).
//! - `schemes/`: engine-independent maths of issue 17 — static graphs and combination weights,
//!   graph-homomorphic perturbations and the random-noise baseline, the DP accountant and per-sample clipping,
//!   A/PDMM with random dual initialisation, and the eavesdropper that tests its privacy (see `schemes/mod.rs`).
//! - `examples/gia.rs`: gradient inversion from one chunk of an update, k = 1 vs 2..16, PSNR/SSIM, PNG grids.
//! - `benches/chunking.rs`: extraction + aggregation of one round against memcpy.

pub mod aggregate;
pub mod chunking;
pub mod data;
pub mod device;
pub mod error;
pub mod nn;
pub mod params;
pub mod privacy;
pub mod schemes;
pub mod threads;
pub mod train;

pub use error::ModelsError;

/// Result type of this crate.
pub type Result<T, E = ModelsError> = std::result::Result<T, E>;
