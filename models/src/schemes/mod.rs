//! The numerical core of the privacy-preserving schemes of issue 17, independent of the engine and the
//! network: static graphs and combination weights, graph-homomorphic perturbations (`--algo ghp:SIGMA`) and
//! their random-noise baseline (`random:SIGMA`), the DP accountant and per-sample clipping, A/PDMM with
//! random dual initialisation (`pdmm`), and the eavesdropper that tests PDMM's privacy claims.
//!
//! Papers: Rizk, Vlaski & Sayed, "Privatized Graph Federated Learning" (GFL paper; GHP from Vlaski & Sayed,
//! ICASSP 2021) and Yu, Li, Lopuhaä-Zwakenberg, Christensen & Heusdens on PDMM/ADMM privacy (PDMM paper); see
//! `../shared/papers` and the notes there. Equation numbers below are the papers'.
//!
//! Everything is sans-IO: a node's step is a function of its state, the received messages and a passed-in
//! seeded RNG (`rand::Rng`, in tests `ChaCha12Rng`); nothing reads a clock or a global RNG. Model values are
//! generic over `f32`/`f64` ([`Scalar`]) where they travel; the PDMM core is `f64` (its figures need it).
//!
//! # Layout
//! - `scalar.rs`: [`Scalar`], `f32` or `f64`.
//! - `linalg.rs`: small dense Cholesky and vector helpers for the closed forms.
//! - `graph.rs`: [`Graph`] (random r-regular, random geometric with the PDMM paper's radius) and
//!   [`CombinationMatrix`] (uniform on r-regular, Metropolis; GFL Assumption 1).
//! - `ghp.rs`: [`Perturbation`], [`perturb`] (one node's broadcast and own term), [`combine`] (eq. 8),
//!   [`network_round`]: GHP (eqs. 46–47), the random baseline and σ = 0.
//! - `accountant.rs`: [`DpParams`] — ε(i) = √2·μ·B·i(i+1)/σ (Theorem 2) and its inverses — and per-sample
//!   clipping to norm B ([`clip_per_sample`], [`clipped_mean`]).
//! - `objective.rs`: [`LeastSquares`] (gradient, exact prox), [`Logistic`], [`centralised_least_squares`].
//! - `pdmm.rs`: [`PdmmNode`] (one node: secure setup of z(0), w-step variants, Δz messages, synchronous
//!   rounds; θ = 1 PDMM, θ = ½ ADMM) and [`PdmmNetwork`] (a whole network in memory).
//! - `masking.rs`: [`PairwiseMasks`], [`unmask_mean`]: client-to-server secure aggregation by pairwise masks
//!   in ring arithmetic (GFL eq. 48, the hierarchical mode).
//! - `eavesdrop.rs`: [`Eavesdropper`]: models, masked gradients and gradient differences from all Δz.
//!
//! The replication example is `examples/schemes_replication.rs` (GFL synthetic regression σ² sweep, PDMM vs
//! ADMM convergence), writing `results/ghp-synthetic/` and `results/pdmm-least-squares/`.

pub mod accountant;
pub mod eavesdrop;
pub mod ghp;
pub mod graph;
pub mod linalg;
pub mod masking;
pub mod objective;
pub mod pdmm;
pub mod scalar;

pub use accountant::{DpParams, clip_norm, clip_per_sample, clipped_mean};
pub use eavesdrop::Eavesdropper;
pub use ghp::{
    NodeMessages, Perturbation, SenderWeights, centroid, combine, laplace_noise, network_round,
    perturb,
};
pub use graph::{CombinationMatrix, Graph, rgg_connectivity_radius};
pub use masking::{FixedPoint, MaskingPublic, MaskingSecret, PairwiseMasks, unmask_mean};
pub use objective::{LeastSquares, Logistic, centralised_least_squares};
pub use pdmm::{Message, PdmmConfig, PdmmNetwork, PdmmNode};
pub use scalar::Scalar;
